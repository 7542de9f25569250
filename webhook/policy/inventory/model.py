"""The naming view of what the cluster offers: :class:`Offer`, :class:`Pool`, :class:`Inventory`.

An :class:`Offer` is one extended resource a pool's nodes advertise (its name, slots, product,
sharing); a :class:`Pool` is nodes of one shape, with its :class:`PoolOrigin` and its
:class:`Scaling` (``at_zero``: it has no nodes now, and can get some); the :class:`Inventory`
holds the pools of one snapshot. Building them is ``webhook.policy.inventory.from_nodes`` and
``declared``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from webhook.policy.dra import DraSnapshot
from webhook.policy.errors import Diagnostic
from webhook.policy.nodes import GpuNodes
from webhook.policy.products import (
    base_model,
)
from webhook.policy.products import model_key as product_model_key
from webhook.policy.resources import ResourceForm

if TYPE_CHECKING:  # supply.assemble builds on this module: no import cycle at run time
    from webhook.policy.supply.model import Supply


@dataclass(frozen=True, slots=True)
class Offer:
    """One resource name advertised by one pool.

    ``form`` is the name pods must ask for; ``profile`` the MIG profile each unit really is
    (also under ``migStrategy: single``, where the name is plain ``nvidia.com/gpu``).
    ``selector`` is the node label (key, value) that picks exactly this offer's nodes, when
    one is known.
    """

    form: ResourceForm
    profile: str | None
    product: str | None
    replicas: int
    strategy: str
    fail_requests_greater_than_one: bool
    devices: int | None
    slots: int | None
    memory_mib: int | None
    selector: tuple[str, str] | None
    # The most one node offers of it (its slots on one node: the scheduler fits a container's
    # request on one node); None where no node is known (pools declared or at zero).
    most_on_a_node: int | None = None
    # GFD's capability labels (key, value) on the offer's nodes (products.CAPABILITY_LABELS);
    # a key absent here is not known, and node selection on it is not judged.
    capabilities: frozenset[tuple[str, str]] = frozenset()
    # The model as product annotations are compared with it (see products.model_key), derived
    # once per snapshot: placement reads it for every candidate of a pod that names products.
    model_key: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = None if self.product is None else product_model_key(self.product)
        object.__setattr__(self, "model_key", key)

    @property
    def shared(self) -> bool:
        """True when several pods share each device."""
        return self.replicas > 1

    @property
    def model(self) -> str | None:
        """The GPU model, without ``-MIG-...`` and ``-SHARED``."""
        return None if self.product is None else base_model(self.product)

    def labels(self) -> dict[str, set[str]]:
        """The GFD labels known to select this offer's nodes: key -> the values they carry."""
        out: dict[str, set[str]] = {}
        if self.selector is not None:
            out[self.selector[0]] = {self.selector[1]}
        for key, value in self.capabilities:
            out.setdefault(key, set()).add(value)
        return out

    def describe(self) -> str:
        """``NVIDIA-L20-SHARED (8 slots)``: how messages name an offer."""
        what = self.product or "unknown product"
        if self.slots is None:
            return what
        return f"{what} ({self.slots} slot{'' if self.slots == 1 else 's'})"


OriginKind = Literal["nodes", "policy", "karpenter"]


@dataclass(frozen=True, slots=True)
class PoolOrigin:
    """Where a pool's description comes from.

    ``kind``: ``nodes`` (Node objects, live or dumped), ``policy`` (``spec.pools``),
    ``karpenter`` (a Karpenter NodePool); ``name``: the node dump, policy file or NodePool it
    names.
    """

    kind: OriginKind
    name: str | None = None

    def describe(self) -> str:
        """``declared in policy.yaml``, ``Karpenter NodePool gpu``: how messages name it."""
        what = {
            "nodes": "nodes",
            "policy": "declared in",
            "karpenter": "Karpenter NodePool",
        }[self.kind]
        return what if self.name is None else f"{what} {self.name}"


NODES = PoolOrigin("nodes")


@dataclass(frozen=True, slots=True)
class Scaling:
    """The bounds an autoscaler keeps a pool's node count within (None: not known)."""

    min_nodes: int | None = None
    max_nodes: int | None = None

    def describe(self) -> str:
        """``0-4 nodes``, ``at most 4 nodes``, ``from zero``, ``autoscaled``."""
        low, high = self.min_nodes, self.max_nodes
        if low is not None and high is not None:
            return f"{low}-{high} nodes"
        if high is not None:
            return f"at most {high} nodes"
        if low is not None:
            return "from zero" if low == 0 else f"at least {low} nodes"
        return "autoscaled"


@dataclass(frozen=True, slots=True)
class Pool:
    """Nodes that run the same device-plugin config key on the same GPU model.

    ``node_count`` is how many nodes it has now (``nodes`` names them when they are known);
    ``scaling`` is set for a pool an autoscaler sizes, and ``at_zero`` says it has no node
    now but can get one: its offers (0 devices, 0 slots) say what each new node will offer.
    ``device_class`` is the DRA DeviceClass its nodes publish devices of, when known.
    ``per_node`` is what one node of a declared pool advertises (resource name -> slots), known
    even at zero; empty for pools of nodes that exist (each node says for itself).
    """

    name: str
    config_key: str | None
    mig_strategy: str
    nodes: tuple[str, ...]
    offers: tuple[Offer, ...]
    node_count: int = 0
    origin: PoolOrigin = NODES
    scaling: Scaling | None = None
    device_class: str | None = None
    per_node: Mapping[str, int] = field(default_factory=dict, compare=False)

    @property
    def at_zero(self) -> bool:
        """True when the pool has no node now and an autoscaler can add one."""
        return self.scaling is not None and self.node_count == 0

    def describe(self) -> str:
        """``pool t4/Tesla-T4 (declared in policy.yaml, 0-4 nodes)``: how messages name it."""
        parts = [self.origin.describe()]
        if self.scaling is not None:
            parts.append(self.scaling.describe())
        return f"pool {self.name} ({', '.join(parts)})"


def describe_pair(pool: Pool, offer: Offer) -> str:
    """An offer as messages name it; one of a pool at zero says which pool can add it."""
    if pool.at_zero:
        return f"{offer.product or 'unknown product'} (no node yet: {pool.describe()})"
    return offer.describe()


# Nothing known of the GPU nodes and no taint assumed: every pod can reach one.
_UNKNOWN_GPU_NODES = GpuNodes(None)

# At most this many entries in one table kept with a snapshot (keep()), so that what clients
# send cannot grow it without bound. A full table is dropped whole: no bookkeeping on a hit,
# and a snapshot lasts only until the cluster changes.
MAX_KEPT = 512


def keep(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Put ``value`` under ``key`` in ``table``, a table kept with a snapshot (in
    ``Inventory.fit_groups``: the allocator's verdicts, the answers to pod reviews), emptied
    first when it holds :data:`MAX_KEPT` entries."""
    if len(table) >= MAX_KEPT and key not in table:
        table.clear()
    table[key] = value


@dataclass(frozen=True)
class Inventory:
    """An immutable snapshot of the pools; a request reads one snapshot from start to end.

    ``pairs`` holds every (pool, offer) pair, pool by pool: what a review walks. ``dra`` is
    the DRA side the pools of devices came from (classes, devices, compiled selectors), None
    where DRA is not seen (no DRA objects in the files, DRA off, a cluster without it).
    """

    pools: tuple[Pool, ...]
    source: str
    disagreements: tuple[Diagnostic, ...] = ()
    # Which pods can be placed on a GPU node (docs/isolation.md): the GPU nodes' names, labels
    # and taints, or, without Node objects, the taints the policy's tolerations are for.
    gpu_nodes: GpuNodes = _UNKNOWN_GPU_NODES
    dra: DraSnapshot | None = field(default=None, compare=False)
    # What the allocator judges fit on (webhook/policy/supply/assemble.py); None for an
    # inventory not made by assemble().
    supply: Supply | None = field(default=None, compare=False)
    # How long the allocator may search for a node a pod fits on (docs/allocator.md): a search
    # cut short allows with a warning.
    fit_budget_s: float = field(default=0.05, compare=False)
    # The supply's node groups merged for the node label keys a demand reads (engine/fit.py),
    # by those keys: derived from this snapshot once, as the DRA side's memo is. Also the
    # tables kept with the snapshot (keep()): the allocator's verdicts on pod specs and the
    # answers to repeated pod reviews (webhook/admission/memo.py).
    fit_groups: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    pairs: tuple[tuple[Pool, Offer], ...] = field(init=False, repr=False, compare=False)
    _by_name: Mapping[str, tuple[tuple[Pool, Offer], ...]] = field(
        init=False, repr=False, compare=False
    )
    _by_profile: Mapping[str | None, tuple[tuple[Pool, Offer], ...]] = field(
        init=False, repr=False, compare=False
    )
    _plain_names: tuple[tuple[Pool, Offer], ...] = field(init=False, repr=False, compare=False)

    @property
    def at_zero(self) -> tuple[Pool, ...]:
        """The pools with no node now that an autoscaler can add nodes to."""
        return tuple(p for p in self.pools if p.at_zero)

    def __post_init__(self) -> None:
        # The indexes are built once per snapshot; every review reads them instead of walking
        # the pairs for each container that asks for a GPU.
        pairs = tuple((pool, offer) for pool in self.pools for offer in pool.offers)
        index: dict[str, list[tuple[Pool, Offer]]] = defaultdict(list)
        profiles: dict[str | None, list[tuple[Pool, Offer]]] = defaultdict(list)
        for pool, offer in pairs:
            index[offer.form.name].append((pool, offer))
            profiles[offer.profile].append((pool, offer))
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "_by_name", {k: tuple(v) for k, v in index.items()})
        object.__setattr__(self, "_by_profile", {k: tuple(v) for k, v in profiles.items()})
        plain = tuple((p, o) for p, o in pairs if o.form.profile is None)
        object.__setattr__(self, "_plain_names", plain)

    def advertising(self, name: str) -> tuple[tuple[Pool, Offer], ...]:
        """The (pool, offer) pairs that advertise the resource ``name``."""
        return self._by_name.get(name, ())

    def of_profile(self, profile: str | None) -> tuple[tuple[Pool, Offer], ...]:
        """The pairs whose devices are MIG instances of ``profile`` (None: whole GPUs)."""
        return self._by_profile.get(profile, ())

    @property
    def plain_names(self) -> tuple[tuple[Pool, Offer], ...]:
        """The pairs advertised under a name without a MIG profile in it (``nvidia.com/gpu``)."""
        return self._plain_names

    @property
    def names(self) -> tuple[str, ...]:
        """Every advertised resource name, sorted."""
        return tuple(sorted(self._by_name))

    def summary(self, names: Iterable[str] | None = None) -> str:
        """``nvidia.com/gpu: NVIDIA-L20-SHARED (8 slots), Tesla-T4-SHARED (3 slots)``, per name."""
        parts = []
        for name in sorted(names if names is not None else self._by_name):
            offers = ", ".join(describe_pair(p, o) for p, o in self.advertising(name))
            parts.append(f"{name}: {offers}" if offers else name)
        return "; ".join(parts) if parts else "no GPU resources"
