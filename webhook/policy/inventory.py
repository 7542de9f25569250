"""What the cluster offers: pools of nodes, each advertising GPU resources under some name.

The inventory is an immutable snapshot: what the nodes offer now, plus what the pools an
autoscaler can grow from zero would add. Every :class:`Pool` says where it came from (its
:class:`PoolOrigin`) and whether it has nodes now (``at_zero``: it has none, and can get some).
What the nodes offer comes from one of three sources, best first:

1. Node objects (a ``kubectl get nodes -o yaml`` dump, or the live watch): ``status.allocatable``
   is the truth about resource names and slots, GFD labels the truth about products
   (docs/device-plugin.md, "GFD labels"); disagreements between the two are recorded, not hidden.
2. The pools the policy declares (``spec.pools``), expanded with the device-plugin config.
3. The device-plugin config alone: resource names per config key, products unknown.

The pools that can appear come from the policy's autoscaled pools (``spec.pools`` entries with
``minNodes`` or ``maxNodes``) and from the cluster's autoscaler objects, read by the shells
(Karpenter NodePools: ``webhook.policy.autoscaling``); docs/autoscaling.md says how.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from webhook.policy.dra import Device, DeviceClass, DraSnapshot
from webhook.policy.model import DeclaredPool, Policy
from webhook.policy.nodes import GpuNodes, Taint, node_selector_matches, node_views
from webhook.policy.plugin_config import PluginConfig, mps_max_clients
from webhook.policy.products import (
    CAPABILITY_LABELS,
    MIG_CAPABLE,
    MPS_CAPABLE,
    base_model,
    product_label,
    product_mig_profile,
    product_value,
    sanitise_model,
)
from webhook.policy.products import model_key as product_model_key
from webhook.policy.resources import PREFIX, ResourceForm, parse_resource

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


OriginKind = Literal["nodes", "policy", "karpenter", "resourceslice"]


@dataclass(frozen=True, slots=True)
class PoolOrigin:
    """Where a pool's description comes from.

    ``kind``: ``nodes`` (Node objects, live or dumped), ``policy`` (``spec.pools``),
    ``karpenter`` (a Karpenter NodePool), ``resourceslice`` (a DRA ResourceSlice pool);
    ``name``: the node dump, policy file, NodePool or ResourceSlice pool it names.
    """

    kind: OriginKind
    name: str | None = None

    def describe(self) -> str:
        """``declared in policy.yaml``, ``Karpenter NodePool gpu``: how messages name it."""
        what = {
            "nodes": "nodes",
            "policy": "declared in",
            "karpenter": "Karpenter NodePool",
            "resourceslice": "ResourceSlice pool",
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
    """An offer as messages name it; one of a pool at zero says which pool can add it, one
    of DRA devices which DeviceClass serves it."""
    if pool.at_zero:
        return f"{offer.product or 'unknown product'} (no node yet: {pool.describe()})"
    if pool.origin.kind == "resourceslice" and pool.device_class:
        return f"{offer.describe()} through DRA DeviceClass {pool.device_class}"
    return offer.describe()


# Nothing known of the GPU nodes and no taint assumed: every pod can reach one.
_UNKNOWN_GPU_NODES = GpuNodes(None)


@dataclass(frozen=True)
class Inventory:
    """An immutable snapshot of the pools; a request reads one snapshot from start to end.

    ``pairs`` holds every (pool, offer) pair, pool by pool: what a review walks. ``dra`` is
    the DRA side the pools of devices came from (classes, devices, compiled selectors), None
    where DRA is not seen (no DRA objects in the files, DRA off, a cluster without it).
    """

    pools: tuple[Pool, ...]
    source: str
    disagreements: tuple[str, ...] = ()
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
    # by those keys: derived from this snapshot once, as the DRA side's memo is.
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


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _offer_from_config(
    form: ResourceForm,
    profile: str | None,
    config: PluginConfig | None,
    *,
    model: str | None,
    devices: int | None,
    memory: int | None,
    mig_strategy: str,
    selector_fallback: tuple[str, str] | None,
) -> Offer:
    replicas = config.replicas(form) if config is not None else 1
    renamed = bool(config and config.rename_by_default and replicas > 1)
    product = None
    if model is not None:
        unit = ResourceForm(profile, False)
        product = product_value(model, unit, replicas=replicas, renamed=renamed)
    selector = (
        (product_label(form, mig_strategy), product) if product is not None else selector_fallback
    )
    capabilities: set[tuple[str, str]] = set()
    if config is not None:
        # internal/lm/nvml.go newSharingLabeler: "true" only under MPS (MIG-enabled GPUs under
        # MPS fail GFD and the plugin, and have no offer at all).
        capabilities.add((MPS_CAPABLE, "true" if config.strategy == "mps" else "false"))
    if profile is not None:
        # newMigCapabilityLabeler: a GPU split into MIG instances is MIG-capable.
        capabilities.add((MIG_CAPABLE, "true"))
    return Offer(
        form=form.with_renamed(renamed),
        profile=profile,
        product=product,
        replicas=replicas,
        strategy=(config.strategy if config is not None and replicas > 1 else "none"),
        fail_requests_greater_than_one=bool(config and config.fail_requests_greater_than_one),
        devices=devices,
        slots=None if devices is None else devices * replicas,
        memory_mib=memory,
        selector=selector,
        capabilities=frozenset(capabilities),
    )


def declared_pool(
    policy: Policy, pool: DeclaredPool, *, nodes: int, origin: PoolOrigin | None = None
) -> Pool:
    """The pool ``pool`` describes, with ``nodes`` nodes (0: an autoscaled pool at zero).

    Its offers are what the device plugin and GFD give each such node under the pool's config
    key; ``origin`` defaults to the policy.
    """
    config = policy.configs.get(pool.config)
    mig = config.mig_strategy if config is not None else "none"
    common: dict[str, Any] = {"model": pool.product, "memory": pool.memory_mib, "mig_strategy": mig}
    fallback = _config_selector(policy, pool.config)
    offers: list[Offer] = []
    gpu = ResourceForm(None, False)
    if config is not None and config.never_served() is not None:
        # MPS past the control daemon's client limit, or sharing nothing: the plugin never
        # registers a resource (docs/device-plugin.md, "When the plugin serves nothing").
        pass
    elif mig == "mixed" and pool.mig_devices:
        for profile, count in pool.mig_devices:
            form = ResourceForm(profile, False)
            offers.append(
                _offer_from_config(
                    form,
                    profile,
                    config,
                    devices=count * nodes,
                    selector_fallback=fallback,
                    **common,
                )
            )
    elif mig == "single" and pool.mig_devices:
        # MPS cannot share MIG instances: the plugin stops and the pool advertises nothing
        # (docs/device-plugin.md, "When the plugin serves nothing").
        if config is not None and config.serves_mig_instances:
            profile, count = pool.mig_devices[0]
            offers.append(
                _offer_from_config(
                    gpu,
                    profile,
                    config,
                    devices=count * nodes,
                    selector_fallback=fallback,
                    **common,
                )
            )
    else:
        offers.append(
            _offer_from_config(
                gpu,
                None,
                config,
                devices=pool.gpus_per_node * nodes,
                selector_fallback=fallback,
                **common,
            )
        )
    name = pool.name or (f"{pool.config}/{pool.product}" if pool.product else pool.config)
    # What one node advertises: the supply's node group for the pool (even at zero).
    one = offers if nodes == 1 else declared_pool(policy, pool, nodes=1).offers
    per_node = {o.form.name: o.slots or 0 for o in one}
    return Pool(
        name=name,
        config_key=pool.config,
        mig_strategy=mig,
        nodes=(),
        offers=tuple(offers),
        node_count=nodes,
        origin=origin or PoolOrigin("policy", policy.source),
        scaling=Scaling(pool.min_nodes, pool.max_nodes) if pool.autoscaled else None,
        device_class=pool.device_class,
        per_node=per_node,
    )


def _config_selector(policy: Policy, key: str) -> tuple[str, str] | None:
    # Nodes on the fallback key need not carry the label, so it cannot select them.
    return None if key == policy.default_config else (policy.node_label, key)


def _config_pool(policy: Policy, key: str, config: PluginConfig) -> Pool:
    forms = [ResourceForm(None, False)]
    if config.mig_strategy == "mixed":
        forms += [r.form for r in config.resources if r.form.profile is not None]
    if config.never_served() is not None:
        # docs/device-plugin.md, "When the plugin serves nothing".
        forms = []
    offers = tuple(
        _offer_from_config(
            form,
            form.profile,
            config,
            model=None,
            devices=None,
            memory=None,
            mig_strategy=config.mig_strategy,
            selector_fallback=_config_selector(policy, key),
        )
        for form in forms
    )
    return Pool(name=key, config_key=key, mig_strategy=config.mig_strategy, nodes=(), offers=offers)


def assumed_taints(policy: Policy) -> tuple[Taint, ...]:
    """The taints GPU nodes are taken to carry when no Node object says: those the policy's
    tolerations (``spec.mutation.tolerations``, added to GPU pods) are there to tolerate."""
    taints = []
    for tol in policy.tolerations:
        key = str(tol.get("key") or "")
        if not key:
            continue  # a catch-all toleration names no taint
        value = str(tol.get("value") or "") if tol.get("operator", "Equal") == "Equal" else ""
        taints.append(Taint(key, value, str(tol.get("effect") or "NoSchedule")))
    return tuple(dict.fromkeys(taints))


def inventory_from_policy(policy: Policy) -> Inventory:
    """The inventory the policy implies: its declared pools, or one pool per config key.

    Each declared pool has the nodes it says it has (``nodes``); an autoscaled one with none
    is at zero.
    """
    gpu_nodes = GpuNodes(None, assumed_taints(policy))
    if policy.pools:
        pools = tuple(declared_pool(policy, p, nodes=p.nodes) for p in policy.pools)
        return Inventory(
            pools=pools, source=f"pools declared in {policy.source}", gpu_nodes=gpu_nodes
        )
    pools = tuple(_config_pool(policy, k, c) for k, c in policy.configs.items())
    return Inventory(
        pools=pools, source=f"device-plugin config in {policy.source}", gpu_nodes=gpu_nodes
    )


@dataclass(slots=True)
class _Node:
    """One node's labels, and the device-plugin config it runs."""

    name: str
    labels: Mapping[str, str]
    key: str | None  # the config key it runs: its label's, or the fallback
    config: PluginConfig | None
    mig_strategy: str


@dataclass(slots=True)
class _NodeOffers:
    key: str | None
    mig_strategy: str
    model: str | None
    offers: list[Offer]
    problems: list[str]


def _node(node: Mapping[str, Any], policy: Policy) -> _Node:
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    key = labels.get(policy.node_label)
    config = policy.config_for(key)
    mig_strategy = labels.get("nvidia.com/mig.strategy") or (
        config.mig_strategy if config else "none"
    )
    return _Node(
        name=str(meta.get("name", "?")),
        labels=labels,
        key=key if key in policy.configs else policy.default_config,
        config=config,
        mig_strategy=mig_strategy,
    )


def _node_offers(node: Mapping[str, Any], policy: Policy) -> _NodeOffers | None:
    """What one node offers (None: no GPU resource), and where its labels and config disagree."""
    allocatable: Mapping[str, Any] = (node.get("status") or {}).get("allocatable") or {}
    view = _node(node, policy)
    offers: list[Offer] = []
    problems: list[str] = []
    model = None
    for resource, raw in allocatable.items():
        if not resource.startswith(PREFIX):
            continue
        form = parse_resource(resource)
        slots = _int(raw)
        if form is None or not slots:
            continue
        offer, found = _node_offer(view, resource, form, slots)
        offers.append(offer)
        problems += found
        if model is None and offer.product is not None:
            model = base_model(offer.product)
    if not offers:
        return None
    return _NodeOffers(view.key, view.mig_strategy, model, offers, problems)


def _node_offer(
    node: _Node, resource: str, form: ResourceForm, slots: int
) -> tuple[Offer, list[str]]:
    """The offer of one allocatable GPU resource, and where labels and config disagree on it."""
    original = form.original
    labels, config = node.labels, node.config
    product = labels.get(f"{original}.product")
    labelled = _int(labels.get(f"{original}.replicas"))
    # No GFD labels: the config the node runs says how far it is shared.
    configured = labelled if labelled is not None else (config.replicas(form) if config else 1)
    configured = max(configured, 1)
    strategy = labels.get(f"{original}.sharing-strategy") or (
        "none" if configured == 1 else "time-slicing"
    )
    replicas = configured
    if form.renamed and configured == 1:
        # allocatable wins for names: a .shared name means replicated even if labels say 1.
        replicas = max(2, config.replicas(form) if config else 2)
    problems = _label_problems(
        node, resource, form, product=product, replicas=(configured, replicas), slots=slots
    )
    count = _int(labels.get(f"{original}.count"))
    if count is not None and replicas > 1 and slots == count:
        # A plugin not restarted since the ConfigMap changed (it does not watch it): GFD
        # labels the new sharing, the running plugin still hands out whole devices.
        problems.append(
            f"node {node.name}: labels say {original} x{count} shared {replicas} ways, "
            f"allocatable says {resource}: {slots}: restart the device plugin; treated as not "
            "shared"
        )
        replicas = 1
    problems += _mps_limit_problems(node, resource, strategy, replicas)
    profile = form.profile
    if profile is None and product is not None:
        # migStrategy single: each nvidia.com/gpu unit is one MIG instance of this profile.
        profile = product_mig_profile(product)
    offer = Offer(
        form=form,
        profile=profile,
        product=product,
        replicas=replicas,
        strategy=strategy if replicas > 1 else "none",
        fail_requests_greater_than_one=(
            config.fail_requests_greater_than_one if config else strategy == "mps"
        ),
        devices=count if count is not None else max(1, slots // replicas),
        slots=slots,
        memory_mib=_int(labels.get(f"{original}.memory")),
        selector=(product_label(form, node.mig_strategy), product) if product else None,
        # The scheduler fits a container's request on one node: no more than it advertises.
        most_on_a_node=slots,
        capabilities=frozenset(
            (key, labels[key]) for key in CAPABILITY_LABELS if labels.get(key) is not None
        ),
    )
    return offer, problems


def _mps_limit_problems(node: _Node, resource: str, strategy: str, replicas: int) -> list[str]:
    """A node advertising more MPS replicas than the control daemon admits on its GPUs.

    v0.20.0 never registers such a resource (docs/device-plugin.md, "When the plugin serves
    nothing"): the node object is older than the config, or the plugin is not v0.20.0.
    """
    major = _int(node.labels.get("nvidia.com/gpu.compute.major"))
    minor = _int(node.labels.get("nvidia.com/gpu.compute.minor"))
    capability = (major, minor) if major is not None and minor is not None else None
    limit = mps_max_clients(capability)
    if strategy != "mps" or replicas <= limit:
        return []
    return [
        f"node {node.name}: allocatable has {resource} shared {replicas} ways by MPS, but the "
        f"MPS control daemon accepts at most {limit} per GPU here: the device plugin v0.20.0 "
        "registers nothing with this config, so these slots will not last"
    ]


def _label_problems(
    node: _Node,
    resource: str,
    form: ResourceForm,
    *,
    product: str | None,
    replicas: tuple[int, int],
    slots: int,
) -> list[str]:
    """Where the node's labels and config disagree with what it advertises.

    ``replicas``: as the labels or the config say, and as the advertised name corrects it.
    """
    original = form.original
    config = node.config
    said, shared = replicas
    problems = []
    if said != shared:
        problems.append(
            f"node {node.name}: allocatable has {resource} but label {original}.replicas says "
            f"{node.labels.get(f'{original}.replicas', 'nothing')}: GFD may read another config "
            "than the plugin"
        )
    if config is not None:
        advertised = config.advertised(form.with_renamed(False)).name
        if advertised != resource:
            problems.append(
                f"node {node.name}: advertises {resource}, but config {node.key!r} "
                f"would advertise {advertised}"
            )
    if product is None:
        return problems
    if shared > 1 and not form.renamed and not product.endswith("-SHARED"):
        problems.append(
            f"node {node.name}: {original}.product={product} lacks -SHARED although "
            f"{resource} is shared"
        )
    if product.endswith("-SHARED") and (shared == 1 or form.renamed):
        problems.append(
            f"node {node.name}: {original}.product={product} says shared, allocatable says "
            f"{resource}: {slots}"
        )
    return problems


def _merge(offers: list[Offer], extra: list[Offer]) -> list[Offer]:
    merged = {(o.form, o.product): o for o in offers}
    for o in extra:
        prev = merged.get((o.form, o.product))
        if prev is None:
            merged[(o.form, o.product)] = o
            continue
        merged[(o.form, o.product)] = Offer(
            form=o.form,
            profile=o.profile,
            product=o.product,
            replicas=max(prev.replicas, o.replicas),
            strategy=prev.strategy,
            fail_requests_greater_than_one=prev.fail_requests_greater_than_one
            or o.fail_requests_greater_than_one,
            devices=(prev.devices or 0) + (o.devices or 0),
            slots=(prev.slots or 0) + (o.slots or 0),
            memory_mib=prev.memory_mib,
            selector=prev.selector,
            most_on_a_node=_most(prev.most_on_a_node, o.most_on_a_node),
            capabilities=prev.capabilities | o.capabilities,
        )
    return list(merged.values())


def _most(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def pool_key(pool: Pool) -> tuple[str | None, str | None]:
    """(config key, GPU model): what makes two descriptions the same pool of nodes."""
    return pool.config_key, next((o.model for o in pool.offers if o.model), None)


def autoscaled_pools(policy: Policy) -> tuple[Pool, ...]:
    """The policy's autoscaled pools as they are with no node: what each can add."""
    return tuple(declared_pool(policy, p, nodes=0) for p in policy.pools if p.autoscaled)


def with_pools_that_can_appear(
    live: Iterable[Pool], can_appear: Iterable[Pool]
) -> tuple[tuple[Pool, ...], tuple[PoolOrigin, ...]]:
    """The live pools, plus each pool of ``can_appear`` that no live pool already is.

    Two descriptions are the same pool when they share :func:`pool_key`; the first one wins
    (live nodes, then the order of ``can_appear``). A live pool an autoscaler also describes
    keeps its nodes and takes the autoscaler's bounds. Also returns where the added pools
    came from, each once.
    """
    pools = list(live)
    where = {pool_key(p): i for i, p in enumerate(pools)}
    origins: dict[PoolOrigin, None] = {}
    for pool in can_appear:
        key = pool_key(pool)
        if key not in where:
            where[key] = len(pools)
            pools.append(pool)
            origins[pool.origin] = None
            continue
        known = pools[where[key]]
        if known.scaling is None and pool.scaling is not None:
            pools[where[key]] = replace(known, scaling=pool.scaling)
    return tuple(pools), tuple(origins)


def inventory_from_nodes(
    nodes: Iterable[Mapping[str, Any]],
    policy: Policy,
    *,
    source: str,
    can_appear: Iterable[Pool] = (),
    notes: Iterable[str] = (),
    dra: DraSnapshot | None = None,
) -> Inventory:
    """Group GPU nodes into pools by (config key, GPU model) and sum their offers.

    Nodes without any ``nvidia.com/`` GPU resource in ``status.allocatable`` are not pools.
    With ``dra``, the devices its DeviceClasses select are pools too, under the extended
    resource names the classes serve (:func:`dra_pools`). The policy's autoscaled pools, then
    ``can_appear`` (pools the cluster's autoscaler objects describe), join as pools at zero,
    unless the nodes already form them. ``notes`` (what those objects keep the autoscaler
    from doing) join the disagreements.
    """
    nodes = list(nodes)
    grouped: dict[tuple[str | None, str | None], tuple[_NodeOffers, list[str], list[Offer]]] = {}
    problems: list[str] = []
    nodes = list(nodes)
    for node in nodes:
        found = _node_offers(node, policy)
        if found is None:
            continue
        problems += found.problems
        name = str((node.get("metadata") or {}).get("name", "?"))
        group_key = (found.key, found.model)
        if group_key not in grouped:
            grouped[group_key] = (found, [name], list(found.offers))
        else:
            first, names, offers = grouped[group_key]
            names.append(name)
            grouped[group_key] = (first, names, _merge(offers, found.offers))
    pools = []
    for (key, model), (first, names, offers) in sorted(grouped.items(), key=lambda kv: str(kv[0])):
        label = "/".join(p for p in (key, model) if p) or "unlabelled"
        pools.append(
            Pool(
                name=label,
                config_key=key,
                mig_strategy=first.mig_strategy,
                nodes=tuple(sorted(names)),
                offers=tuple(sorted(offers, key=lambda o: (o.form.name, o.product or ""))),
                node_count=len(names),
            )
        )
    if dra is not None:
        found_pools, found_problems = dra_pools(dra, nodes)
        pools += found_pools
        problems += found_problems
        source += f" + DRA: {len(dra.devices)} devices in ResourceSlices"
    everything, origins = with_pools_that_can_appear(
        pools, (*autoscaled_pools(policy), *can_appear)
    )
    if origins:
        source += " + pools that can appear: " + ", ".join(o.describe() for o in origins)
    return Inventory(
        pools=everything,
        source=source,
        disagreements=(*problems, *notes),
        gpu_nodes=GpuNodes(node_views(nodes, labelled=True)),
        dra=dra,
    )


# --- pools of DRA devices ------------------------------------------------------------------

ALL_NODES = "(every node)"


def dra_product(device: Device) -> tuple[str | None, str | None]:
    """(GPU model as GFD spells it, MIG profile) of a device the NVIDIA DRA driver publishes
    (docs/dra.md, "Device attributes"): ``productName``, and ``profile`` for ``type: mig``."""
    name = device.attribute("productName")
    model = sanitise_model(name) if isinstance(name, str) and name else None
    profile = device.attribute("profile") if device.attribute("type") == "mig" else None
    return model, profile if isinstance(profile, str) else None


def _where(device: Device, nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The nodes that can use ``device``: its node, every node, or those its selector picks."""
    if device.node is not None:
        return [device.node]
    if device.all_nodes:
        return [ALL_NODES]
    return [
        n for n, labels in nodes.items() if node_selector_matches(device.node_selector, n, labels)
    ]


def _served_forms(dra: DraSnapshot, device_class: DeviceClass) -> list[ResourceForm]:
    """The GPU resource names (``nvidia.com/gpu``, ``nvidia.com/mig-...``) ``device_class``
    serves: its ``extendedResourceName`` when it is one and no newer class took it over."""
    forms = []
    for name in device_class.resource_names:
        form = parse_resource(name)
        if form is not None and dra.class_for_resource(name) is device_class:
            forms.append(form)
    return forms


@dataclass(frozen=True, slots=True)
class _ClusterNodes:
    """What the DRA pools need of the Nodes: labels (for ResourceSlice nodeSelectors) and
    ``status.allocatable`` (where a device plugin already serves a name)."""

    labels: Mapping[str, Mapping[str, str]]
    allocatable: Mapping[str, Mapping[str, Any]]


def dra_pools(dra: DraSnapshot, nodes: Iterable[Mapping[str, Any]]) -> tuple[list[Pool], list[str]]:
    """Pools of the devices DeviceClasses select, where a class serves a GPU resource name.

    One pool per (class, GPU model, MIG profile); its offer counts the devices, and the most
    of them one node has: the scheduler allocates a request's devices on one node (or from
    devices every node reaches). On a node whose ``status.allocatable`` has the name, the
    scheduler serves it from the device plugin alone (docs/dra.md, "KEP-5004"): its devices
    do not count for that name, and the node is reported, with what DRA could not evaluate.
    """
    labels: dict[str, Mapping[str, str]] = {}
    allocatable: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", "?"))
        labels[name] = meta.get("labels") or {}
        allocatable[name] = (node.get("status") or {}).get("allocatable") or {}
    cluster = _ClusterNodes(labels, allocatable)
    pools: list[Pool] = []
    problems = list(dra.problems)
    for device_class in sorted(dra.classes.values(), key=lambda c: c.name):
        forms = _served_forms(dra, device_class)
        if not forms:
            continue
        devices, _ = dra.class_devices(device_class.name)
        groups: dict[tuple[str | None, str | None], list[Device]] = defaultdict(list)
        for device in devices:
            groups[dra_product(device)].append(device)
        for kind, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            pool, found = _dra_pool(device_class, forms, kind, members, cluster)
            problems += found
            if pool is not None:
                pools.append(pool)
    return pools, problems


def _dra_pool(
    device_class: DeviceClass,
    forms: list[ResourceForm],
    kind: tuple[str | None, str | None],
    devices: list[Device],
    cluster: _ClusterNodes,
) -> tuple[Pool | None, list[str]]:
    """The pool of ``devices`` (all of ``kind``: GPU model, MIG profile) of ``device_class``,
    None when a device plugin serves each of its names on all of its nodes; and those nodes."""
    model, profile = kind
    per_node: dict[str, int] = defaultdict(int)
    for device in devices:
        for node in _where(device, cluster.labels):
            per_node[node] += 1
    # Devices every node reaches add to what each node has.
    everywhere = per_node.pop(ALL_NODES, 0)
    memory = devices[0].capacity_of("memory")
    memory_mib = None if memory is None else int(memory.value // 2**20)
    product = None
    if model is not None:
        product = product_value(model, ResourceForm(profile, False), replicas=1, renamed=False)
    offers = []
    problems = []
    served: set[str] = set()
    for form in forms:
        counts = {}
        for node, count in per_node.items():
            raw = cluster.allocatable.get(node, {}).get(form.name)
            if raw is None:
                counts[node] = count
                continue
            problems.append(
                f"node {node}: {form.name} comes from its device plugin (allocatable {raw}) and "
                f"from DRA (DeviceClass {device_class.name}, {count} devices): the scheduler "
                "serves it from the device plugin alone there; give each name one source: stop "
                "the device plugin on the node, or drop extendedResourceName from the class"
            )
        total = sum(counts.values()) + everywhere
        if not total:
            continue
        served.update(counts)
        offers.append(
            Offer(
                form=form,
                profile=profile,
                product=product,
                replicas=1,
                strategy="none",
                fail_requests_greater_than_one=False,
                devices=total,
                slots=total,
                memory_mib=memory_mib,
                selector=None,
                most_on_a_node=max(counts.values(), default=0) + everywhere,
            )
        )
    if not offers:
        return None, problems
    node_names = tuple(sorted(served)) + ((ALL_NODES,) if everywhere else ())
    slice_pools = sorted({d.pool for d in devices})
    origin = slice_pools[0]
    if len(slice_pools) > 1:
        origin += f" and {len(slice_pools) - 1} more"
    parts = [device_class.name, model or "unknown product"]
    if profile:
        parts.append(profile)
    pool = Pool(
        name="/".join(parts),
        config_key=None,
        mig_strategy="none",
        nodes=node_names,
        offers=tuple(offers),
        node_count=len(served) or (1 if everywhere else 0),
        origin=PoolOrigin("resourceslice", origin),
        device_class=device_class.name,
    )
    return pool, problems
