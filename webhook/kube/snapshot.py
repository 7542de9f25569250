"""From a cluster snapshot to what the engine reads: the live policy and inventory.

The device-plugin ConfigMap in the cluster replaces the configs of the policy file (one source
of truth for plugin and webhook); the nodes replace the declared pools, except the autoscaled
ones, which join them with the pools Karpenter's NodePools can launch (docs/autoscaling.md).
A ConfigMap that does not parse keeps the policy's configs and is reported, so that a bad edit
never takes effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.kube.source import ClusterState
from webhook.policy import Inventory, Policy, PolicyError
from webhook.policy.plugin_config import parse_plugin_configmap
from webhook.policy.supply.assemble import (
    FIT_BUDGET_S,
    OFFLINE_FIT_BUDGET_S,
    DraObjects,
    assemble,
)


@dataclass(frozen=True)
class LiveView:
    """The policy and inventory one snapshot gives, and why the ConfigMap was refused if it was."""

    policy: Policy
    inventory: Inventory
    configmap_error: str | None = None


def with_configmap(
    policy: Policy, document: Mapping[str, Any] | None, ref: tuple[str, str] | None
) -> tuple[Policy, str | None]:
    """The policy with the configs of the device-plugin ConfigMap ``document`` (at ``ref``).

    No document (none configured, or none in the cluster): the policy as it is. A ConfigMap
    that does not parse: the policy as it is, and why, so that a bad edit never takes effect.
    """
    if document is None or ref is None:
        return policy, None
    ns, name = ref
    try:
        configs = parse_plugin_configmap(document, source=f"ConfigMap {ns}/{name}")
    except PolicyError as exc:
        return policy, str(exc)
    return policy.with_configs(configs), None


def live_view(
    policy: Policy,
    state: ClusterState,
    *,
    previous: LiveView | None = None,
    source: str = "cluster",
    fit_budget_s: float = FIT_BUDGET_S,
) -> LiveView:
    """Combine the policy file with one cluster snapshot.

    A ConfigMap that does not parse keeps the configs of ``previous`` (the last good view), or
    the policy file's when there is none, and says why in ``configmap_error``.
    """
    base = policy
    policy, error = with_configmap(base, state.configmap_document(), state.configmap_ref)
    if error is not None and previous is not None:
        policy = base.with_configs(previous.policy.configs)
    dra = None
    if state.dra_available:
        dra = DraObjects(
            state.device_classes,
            state.resource_slices,
            state.resource_claims,
            state.resource_claim_templates,
        )
    else:
        source = f"{source}; {state.dra}"
    inventory = assemble(
        policy,
        nodes=state.nodes,
        source=source,
        dra=dra,
        nodepools=state.nodepools,
        # The previous view's snapshot: its devices of unchanged slices (the same objects in
        # successive states) and what was evaluated on them are not read again.
        previous=previous.inventory.dra if previous is not None else None,
        fit_budget_s=fit_budget_s,
    )
    return LiveView(policy=policy, inventory=inventory, configmap_error=error)


def read_cluster(
    policy: Policy, kubeconfig: str, *, timeout: float
) -> tuple[LiveView, ClusterState] | None:
    """List the cluster once (nodes, GPU pods, the policy's ConfigMap) for a command-line view.

    None when the API server does not answer within ``timeout`` seconds.
    """
    from webhook.kube.client import load_client
    from webhook.kube.source import ClusterSource

    ref = policy.configmap_ref
    cluster = ClusterSource(
        load_client(kubeconfig),
        configmap=(ref.namespace, ref.name) if ref else None,
        on_snapshot=lambda _state: None,
    ).start()
    try:
        if not cluster.wait_synced(timeout=timeout):
            return None
        state = cluster.current
        assert state is not None
    finally:
        cluster.stop()
    view = live_view(
        policy, state, source=f"cluster ({kubeconfig})", fit_budget_s=OFFLINE_FIT_BUDGET_S
    )
    return view, state
