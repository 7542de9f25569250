"""The inventory built from Node objects, the first and best of its sources.

``status.allocatable`` is the truth about resource names and slots, GFD labels the truth about
products (docs/device-plugin.md, "GFD labels"); disagreements between the two are recorded, not
hidden. Nodes of one shape become one pool; the pools that can appear are added beside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.policy.dra import DraSnapshot
from webhook.policy.errors import Diagnostic, warning
from webhook.policy.inventory.declared import autoscaled_pools, with_pools_that_can_appear
from webhook.policy.inventory.model import Inventory, Offer, Pool
from webhook.policy.model import Policy
from webhook.policy.nodes import GpuNodes, node_views
from webhook.policy.plugin_config import PluginConfig, mps_max_clients
from webhook.policy.products import (
    CAPABILITY_LABELS,
    base_model,
    product_label,
    product_mig_profile,
)
from webhook.policy.resources import PREFIX, ResourceForm, parse_resource


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


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
    problems: list[Diagnostic]


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
    problems: list[Diagnostic] = []
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
) -> tuple[Offer, list[Diagnostic]]:
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
            warning(
                f"node {node.name}",
                f"labels say {original} x{count} shared {replicas} ways, allocatable says "
                f"{resource}: {slots}: restart the device plugin; treated as not shared",
            )
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


def _mps_limit_problems(
    node: _Node, resource: str, strategy: str, replicas: int
) -> list[Diagnostic]:
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
        warning(
            f"node {node.name}",
            f"allocatable has {resource} shared {replicas} ways by MPS, but the MPS control "
            f"daemon accepts at most {limit} per GPU here: the device plugin v0.20.0 registers "
            "nothing with this config, so these slots will not last",
        )
    ]


def _label_problems(
    node: _Node,
    resource: str,
    form: ResourceForm,
    *,
    product: str | None,
    replicas: tuple[int, int],
    slots: int,
) -> list[Diagnostic]:
    """Where the node's labels and config disagree with what it advertises.

    ``replicas``: as the labels or the config say, and as the advertised name corrects it.
    """
    original = form.original
    config = node.config
    said, shared = replicas
    problems: list[Diagnostic] = []
    if said != shared:
        problems.append(
            warning(
                f"node {node.name}",
                f"allocatable has {resource} but label {original}.replicas says "
                f"{node.labels.get(f'{original}.replicas', 'nothing')}: GFD may read another "
                "config than the plugin",
            )
        )
    if config is not None:
        advertised = config.advertised(form.with_renamed(False)).name
        if advertised != resource:
            problems.append(
                warning(
                    f"node {node.name}",
                    f"advertises {resource}, but config {node.key!r} would advertise {advertised}",
                )
            )
    if product is None:
        return problems
    if shared > 1 and not form.renamed and not product.endswith("-SHARED"):
        problems.append(
            warning(
                f"node {node.name}",
                f"{original}.product={product} lacks -SHARED although {resource} is shared",
            )
        )
    if product.endswith("-SHARED") and (shared == 1 or form.renamed):
        problems.append(
            warning(
                f"node {node.name}",
                f"{original}.product={product} says shared, allocatable says {resource}: {slots}",
            )
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


def inventory_from_nodes(
    nodes: Iterable[Mapping[str, Any]],
    policy: Policy,
    *,
    source: str,
    can_appear: Iterable[Pool] = (),
    notes: Iterable[Diagnostic] = (),
    dra: DraSnapshot | None = None,
) -> Inventory:
    """Group GPU nodes into pools by (config key, GPU model) and sum their offers.

    Nodes without any ``nvidia.com/`` GPU resource in ``status.allocatable`` are not pools.
    ``dra``, the DRA side, is kept beside the pools (``Inventory.dra``); its devices are no
    pools (``webhook.policy.supply.served`` says what they serve). The policy's autoscaled
    pools, then ``can_appear`` (pools the cluster's autoscaler objects describe), join as pools
    at zero, unless the nodes already form them. ``notes`` (what those objects keep the autoscaler
    from doing) join the disagreements.
    """
    nodes = list(nodes)
    grouped: dict[tuple[str | None, str | None], tuple[_NodeOffers, list[str], list[Offer]]] = {}
    problems: list[Diagnostic] = []
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
        # DRA's devices are no pools of nodes: the supply holds them (supply/assemble.py).
        problems += dra.problems
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
