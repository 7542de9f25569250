"""Pools that can appear, as the cluster's autoscaler objects describe them: Karpenter NodePools.

A Karpenter NodePool (``karpenter.sh/v1``) says which nodes it can launch through its template
labels (``spec.template.metadata.labels``, set on every node it makes) and its requirements
(``spec.template.spec.requirements``, node selector requirements on well-known and custom
labels). The GPU products it can launch are read, best first, from the GFD product label
(``nvidia.com/gpu.product``) in its template labels or an ``In`` requirement on it, then from the
cloud provider's GPU name label (``karpenter.k8s.aws/instance-gpu-name``,
``karpenter.azure.com/sku-gpu-name``) through the table below; the device-plugin config key
from the policy's node label (``nvidia.com/device-plugin.config``) the same way, else the
policy's default key. Each product becomes one :class:`~webhook.policy.inventory.Pool` at
zero (origin ``karpenter``), offering what a node of it will offer: the same offers a declared
pool of that key and product has. docs/autoscaling.md gives the label keys and their sources.

What Karpenter cannot do for the pods the webhook steers there is said, per NodePool, as a
note (``gpu-policy inventory`` prints them with the disagreements): a custom label a pod
selects must be defined by the NodePool (its template labels or requirements) or Karpenter
launches nothing for it, and its instance types offer ``nvidia.com/gpu`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.policy.errors import Diagnostic, warning
from webhook.policy.inventory import Pool, PoolOrigin, Scaling, declared_pool
from webhook.policy.model import DeclaredPool, Policy
from webhook.policy.products import base_model

PRODUCT_LABEL = "nvidia.com/gpu.product"
AWS_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
AWS_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
AWS_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
AZURE_GPU_NAME = "karpenter.azure.com/sku-gpu-name"
AZURE_GPU_COUNT = "karpenter.azure.com/sku-gpu-count"

# The GFD product (NVML's device name, spaces as dashes) of the cloud providers' GPU names,
# where one name is one product (docs/autoscaling.md, "GPU names"). AWS writes the EC2 GPU
# name in lower kebab case; the A100 comes in two memory sizes, told apart by the GPU memory
# label (MiB per GPU). Other names need the GFD product label on the NodePool.
_AWS_PRODUCTS: Mapping[str, str] = {
    "t4": "Tesla-T4",
    "a10g": "NVIDIA-A10G",
    "l4": "NVIDIA-L4",
    "l40s": "NVIDIA-L40S",
    "h100": "NVIDIA-H100-80GB-HBM3",
}
_AWS_A100_BY_MEMORY: Mapping[str, str] = {
    "40960": "NVIDIA-A100-SXM4-40GB",
    "81920": "NVIDIA-A100-SXM4-80GB",
}
_AZURE_PRODUCTS: Mapping[str, str] = {"T4": "Tesla-T4"}


@dataclass(frozen=True, slots=True)
class _Template:
    """What a NodePool promises about every node it launches: labels and requirements."""

    name: str
    labels: Mapping[str, str]
    requirements: Mapping[str, tuple[str, frozenset[str]]]  # key -> (operator, values)

    def values(self, key: str) -> frozenset[str] | None:
        """The values the NodePool's nodes can have for ``key`` (None: not said)."""
        if key in self.labels:
            return frozenset({self.labels[key]})
        operator, values = self.requirements.get(key, ("", frozenset()))
        return values if operator == "In" and values else None

    def defines(self, key: str, value: str) -> bool:
        """True when Karpenter knows its nodes can have ``key=value`` (a pod may select it)."""
        if key in self.labels:
            return self.labels[key] == value
        operator, values = self.requirements.get(key, ("", frozenset()))
        return (operator == "In" and value in values) or operator == "Exists"


def _template(nodepool: Mapping[str, Any]) -> _Template | None:
    meta = nodepool.get("metadata") or {}
    template = (nodepool.get("spec") or {}).get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    requirements: dict[str, tuple[str, frozenset[str]]] = {}
    for req in (template.get("spec") or {}).get("requirements") or ():
        if isinstance(req, Mapping) and isinstance(req.get("key"), str):
            values = frozenset(str(v) for v in req.get("values") or ())
            requirements[req["key"]] = (str(req.get("operator", "")), values)
    if not meta.get("name") or not isinstance(labels, Mapping):
        return None
    return _Template(str(meta["name"]), {str(k): str(v) for k, v in labels.items()}, requirements)


def _products(t: _Template) -> list[str]:
    """The GPU models the NodePool can launch, as GFD names them (without -SHARED)."""
    gfd = t.values(PRODUCT_LABEL)
    if gfd:
        return sorted({base_model(v) for v in gfd})
    found: set[str] = set()
    for name in t.values(AWS_GPU_NAME) or ():
        if name == "a100":
            found.update(_AWS_A100_BY_MEMORY.get(m, "") for m in t.values(AWS_GPU_MEMORY) or ())
        else:
            found.add(_AWS_PRODUCTS.get(name, ""))
    found.update(_AZURE_PRODUCTS.get(n, "") for n in t.values(AZURE_GPU_NAME) or ())
    return sorted(found - {""})


def _gpus_per_node(t: _Template) -> int:
    for key in (AWS_GPU_COUNT, AZURE_GPU_COUNT):
        counts = t.values(key)
        if counts and len(counts) == 1 and next(iter(counts)).isdigit():
            return int(next(iter(counts)))
    return 1


def _config_key(t: _Template, policy: Policy) -> str | None:
    keys = t.values(policy.node_label)
    key = next(iter(keys)) if keys and len(keys) == 1 else None
    # As a node without the label, or with an unknown key, runs the fallback config.
    return key if key in policy.configs else policy.default_config


def karpenter_pools(
    nodepools: Iterable[Mapping[str, Any]], policy: Policy
) -> tuple[tuple[Pool, ...], tuple[Diagnostic, ...]]:
    """The pools at zero Karpenter NodePools can launch, and notes on what Karpenter cannot do.

    One pool per (NodePool, GPU product) it names; NodePools that name no GPU product (by the
    labels of the module docstring) are not GPU pools here.
    """
    pools: list[Pool] = []
    notes: list[Diagnostic] = []
    for nodepool in nodepools:
        t = _template(nodepool)
        if t is None:
            continue
        products = _products(t)
        key = _config_key(t, policy)
        config = policy.configs.get(key) if key is not None else None
        if products and config is not None and config.mig_strategy != "none":
            notes.append(
                warning(
                    f"Karpenter NodePool {t.name}",
                    f"its nodes run config key {key} (MIG {config.mig_strategy}); declare its "
                    "MIG layout in spec.pools (migDevices) to admit pods for it before its first "
                    "node",
                )
            )
            continue
        for product in products:
            name = t.name if len(products) == 1 else f"{t.name}/{product}"
            declared = DeclaredPool(
                config=key or "",
                product=product,
                nodes=0,
                gpus_per_node=_gpus_per_node(t),
                memory_mib=None,
                mig_devices=(),
                name=name,
                min_nodes=0,
            )
            pool = declared_pool(policy, declared, nodes=0, origin=PoolOrigin("karpenter", t.name))
            # A NodePool bounds resources (spec.limits), not nodes: it scales from zero.
            pool = replace(pool, config_key=key, scaling=Scaling(0, None))
            pools.append(pool)
            notes += _cannot_launch(t, pool)
    return tuple(pools), tuple(notes)


def _cannot_launch(t: _Template, pool: Pool) -> list[Diagnostic]:
    """What keeps Karpenter from launching a node of ``pool`` for the pods steered to it."""
    notes: list[Diagnostic] = []
    for offer in pool.offers:
        if offer.form.name != "nvidia.com/gpu":
            # Karpenter's instance types carry nvidia.com/gpu only (docs/autoscaling.md).
            notes.append(
                warning(
                    f"Karpenter NodePool {t.name}",
                    f"its nodes will advertise {offer.form.name}, which Karpenter does not know "
                    "its instance types offer: it launches no node for a pod asking for it "
                    "(docs/autoscaling.md)",
                )
            )
        if offer.selector is not None and not t.defines(*offer.selector):
            key, value = offer.selector
            have = t.values(key)
            said = f" (it says {', '.join(sorted(have))})" if have else ""
            notes.append(
                warning(
                    f"Karpenter NodePool {t.name}",
                    f"pods steered to {base_model(value)} select {key}={value}, which the "
                    f"NodePool does not define{said}: Karpenter launches no node for them; add "
                    f"{key}: {value} to its spec.template.metadata.labels (docs/autoscaling.md)",
                )
            )
    return notes
