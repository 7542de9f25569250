"""Pools the policy declares (``spec.pools``) and the device-plugin config alone, expanded
into offers; the pools an autoscaler can grow from zero, added beside the nodes that exist.

The second and third of the inventory's sources (``webhook.policy.inventory``): what nodes of a
config key would advertise, when no Node object says it (docs/autoscaling.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from webhook.policy.inventory.model import Inventory, Offer, Pool, PoolOrigin, Scaling
from webhook.policy.model import DeclaredPool, Policy
from webhook.policy.nodes import GpuNodes, Taint
from webhook.policy.plugin_config import PluginConfig
from webhook.policy.products import (
    MIG_CAPABLE,
    MPS_CAPABLE,
    product_label,
    product_value,
)
from webhook.policy.resources import ResourceForm


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
