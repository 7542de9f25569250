"""The DeviceClasses that serve today's device-plugin names through NVIDIA's DRA driver.

One class per kind of device the nodes offer today (docs/migrate.md, "DeviceClasses"):

- a whole GPU given to one pod (``nvidia.com/gpu``, not shared): a class whose
  ``extendedResourceName`` is that name, so that pods keep asking for it unchanged;
- a MIG profile in use (``nvidia.com/mig-1g.5gb``): one class per profile, selecting the
  driver's ``type: mig`` devices of that ``profile``, serving the same name;
- a shared GPU or MIG device (time-slicing or MPS with ``replicas`` above one): a class whose
  ``config`` is the driver's ``GpuConfig`` / ``MigDeviceConfig`` with the sharing strategy.
  It serves no extended resource: a device goes to one claim, so pods that share it must name
  one claim (the plan writes ResourceClaimTemplates and the rewritten workloads).

Whole GPUs are told apart by product (``productName`` prefix): DeviceClass selectors see
devices, never nodes, so a product exclusive on some nodes and shared on others cannot be
split between two classes; the plan says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.inventory import Inventory, Offer, Pool
from webhook.policy.products import base_model

DRIVER = "gpu.nvidia.com"
CONFIG_API = "resource.nvidia.com/v1beta1"
#: The driver's sharing strategies, by the device plugin's (docs/migrate.md, [drv-sharing]).
STRATEGIES = {"time-slicing": "TimeSlicing", "mps": "MPS"}


@dataclass(frozen=True)
class ClassPlan:
    """One DeviceClass of the plan: its name, the names it serves today (``serves``: what
    pods ask for now), whether it takes them over as an ``extendedResourceName``, its CEL
    selector and opaque config, and the nodes whose devices it selects."""

    name: str
    serves: tuple[str, ...]
    extended: str | None
    selector: str
    config: Mapping[str, Any] | None
    nodes: tuple[str, ...]
    sharing: str = "none"
    replicas: int = 1
    profile: str | None = None
    products: tuple[str, ...] = ()

    def object(self) -> dict[str, Any]:
        """The DeviceClass as the API server takes it."""
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": self.selector}}]}
        if self.config is not None:
            spec["config"] = [{"opaque": {"driver": DRIVER, "parameters": dict(self.config)}}]
        if self.extended:
            spec["extendedResourceName"] = self.extended
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": self.name, "labels": {"gpu-policy.io/migration": "true"}},
            "spec": spec,
        }


@dataclass
class _Kind:
    sharing: str
    replicas: int
    profile: str | None
    names: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    products: set[str] = field(default_factory=set)


def product_prefix(product: str) -> str:
    """What NVML's product name starts with, from GFD's label: GFD writes the name with
    dashes for spaces, and which dashes were spaces is lost; the first two words are always
    words (``NVIDIA-H100-80GB-HBM3`` -> ``NVIDIA H100``, ``Tesla-T4`` -> ``Tesla T4``)."""
    words = base_model(product).split("-")
    return " ".join(words[:2])


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in text.lower()).strip("-.")


def _config(kind: _Kind) -> dict[str, Any] | None:
    strategy = STRATEGIES.get(kind.sharing)
    if strategy is None or kind.replicas <= 1:
        return None
    sharing: dict[str, Any] = {"strategy": strategy}
    if strategy == "TimeSlicing" and kind.profile is None:
        sharing["timeSlicingConfig"] = {"interval": "Default"}
    if strategy == "MPS":
        # The device plugin gives each of its replicas an equal part of the GPU's threads.
        sharing["mpsConfig"] = {"defaultActiveThreadPercentage": 100 // kind.replicas}
    return {
        "apiVersion": CONFIG_API,
        "kind": "MigDeviceConfig" if kind.profile else "GpuConfig",
        "sharing": sharing,
    }


def _selector(kind: _Kind) -> str:
    attr = f"device.attributes['{DRIVER}']"
    if kind.profile is not None:
        mig = f"{attr}.type == 'mig' && {attr}.profile == '{kind.profile}'"
        return f"device.driver == '{DRIVER}' && {mig}"
    products = sorted({product_prefix(p) for p in kind.products})
    base = f"device.driver == '{DRIVER}' && {attr}.type == 'gpu'"
    if not products:
        return base
    anyof = " || ".join(f"{attr}.productName.startsWith('{p}')" for p in products)
    return f"{base} && ({anyof})"


def _name(kind: _Kind) -> str:
    what = f"mig-{kind.profile}" if kind.profile else "gpu"
    if kind.sharing != "none" and kind.replicas > 1:
        return f"{_slug(kind.sharing)}-{_slug(what)}.nvidia.com"
    if kind.profile:
        return f"{_slug(what)}.nvidia.com"
    return "exclusive-gpu.nvidia.com"


def _kinds(pairs: Iterable[tuple[Pool, Offer]]) -> dict[tuple[str, int, str | None], _Kind]:
    kinds: dict[tuple[str, int, str | None], _Kind] = {}
    for pool, offer in pairs:
        if pool.origin.kind != "nodes" or not pool.nodes:
            continue
        sharing = offer.strategy if offer.replicas > 1 else "none"
        key = (sharing, offer.replicas if sharing != "none" else 1, offer.profile)
        kind = kinds.setdefault(key, _Kind(key[0], key[1], key[2]))
        kind.names.add(offer.form.name)
        kind.nodes.update(pool.nodes)
        if offer.product:
            kind.products.add(offer.product)
    return kinds


def plan_classes(inventory: Inventory) -> tuple[tuple[ClassPlan, ...], tuple[str, ...]]:
    """The classes the device-plugin nodes of ``inventory`` need, and what they cannot say."""
    kinds = _kinds(inventory.pairs)
    notes: list[str] = []
    out = []
    whole: dict[str, list[_Kind]] = {}
    for kind in kinds.values():
        if kind.profile is None:
            for product in kind.products:
                whole.setdefault(product_prefix(product), []).append(kind)
    for prefix, found in sorted(whole.items()):
        if len(found) > 1:
            ways = ", ".join(sorted(f"{k.sharing} x{k.replicas}" for k in found))
            notes.append(
                f"GPUs whose product starts with {prefix!r} are shared differently on "
                f"different nodes ({ways}): a DeviceClass selects devices, never nodes, so "
                "their classes both select them; give those nodes one sharing first"
            )
    taken: dict[str, str] = {}
    # Whole GPUs first: of two classes for one name, the whole GPU keeps it.
    for kind in sorted(kinds.values(), key=lambda k: (k.profile is not None, _name(k))):
        shared = kind.sharing != "none" and kind.replicas > 1
        names = tuple(sorted(kind.names))
        extended = None if shared else names[0]
        if not shared and len(names) > 1:
            notes.append(
                f"{_name(kind)} serves {', '.join(names)} today; a class has one "
                f"extendedResourceName ({names[0]} kept): rewrite the others to it"
            )
        if extended is not None and extended in taken:
            notes.append(
                f"{extended} stands for devices of {taken[extended]} and of {_name(kind)} "
                "(MIG single strategy, or one name on different products): one class serves "
                f"an extended name, so {_name(kind)} serves claims only and the pods on its "
                "nodes are rewritten to claims"
            )
            extended = None
        if extended is not None:
            taken[extended] = _name(kind)
        out.append(
            ClassPlan(
                name=_name(kind),
                serves=names,
                extended=extended,
                selector=_selector(kind),
                config=_config(kind),
                nodes=tuple(sorted(kind.nodes)),
                sharing=kind.sharing,
                replicas=kind.replicas,
                profile=kind.profile,
                products=tuple(sorted(kind.products)),
            )
        )
    return tuple(sorted(out, key=lambda c: c.name)), tuple(notes)
