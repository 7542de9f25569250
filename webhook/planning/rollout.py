"""What a plan writes: the device plugin's ConfigMap, the node labels and the matching policy.

Also the inventory the cluster shows once the rollout is done, for the "after" view. Every
file is text, built with PyYAML (YAML) and ``shlex`` (the label script); nothing is written
to disk here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from webhook.contract import DEVICE_PLUGIN_CONFIGMAP, GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.planning.plan import Plan, PoolPlan
from webhook.planning.plugin_texts import dump_yaml
from webhook.planning.sizing import pct, pool_model
from webhook.policy.inventory import Inventory, Offer
from webhook.policy.model import DeclaredPool, Policy
from webhook.policy.products import base_model, product_label, product_value
from webhook.policy.resources import ResourceForm

CONFIGMAP_FILE = "device-plugin-config.yaml"


def _offer_after(p: PoolPlan, offer: Offer, replicas: int, slots: int) -> Offer:
    """``offer`` as the device plugin advertises it with ``replicas`` under the pool's new key."""
    renamed = p.rename_by_default and replicas > 1
    form = offer.form.with_renamed(renamed)
    product = offer.product
    if p.model is not None and product is not None:
        unit = ResourceForm(offer.profile, False)
        product = product_value(p.model, unit, replicas=replicas, renamed=renamed)
    return replace(
        offer,
        form=form,
        product=product,
        replicas=replicas,
        strategy="time-slicing" if replicas > 1 else "none",
        fail_requests_greater_than_one=replicas > 1 or offer.fail_requests_greater_than_one,
        slots=slots,
        selector=(product_label(form, p.pool.mig_strategy), product) if product else None,
    )


def planned_inventory(plan: Plan, *, source: str = "plan") -> Inventory:
    """The inventory the cluster shows after the rollout (for ``gpu-policy inventory``'s table)."""
    pools = []
    for p in plan.pools:
        offers = [
            o.offer
            if o.replicas_after == o.offer.replicas and p.key_after == p.pool.config_key
            else _offer_after(p, o.offer, o.replicas_after, o.slots_after)
            for o in p.offers
        ]
        # Pools from nodes are named after their key and model; declared and Karpenter pools
        # keep their own names.
        name = p.pool.name
        if p.pool.origin.kind == "nodes":
            name = "/".join(x for x in (p.key_after, p.model) if x) or p.pool.name
        pools.append(replace(p.pool, name=name, config_key=p.key_after, offers=tuple(offers)))
    return Inventory(pools=tuple(pools), source=source)


class _Literal(str):
    """A config file's text, written as a YAML literal block (``|-``), as kubectl users read it."""


class _ConfigMapDumper(yaml.SafeDumper):
    pass


# Line breaks to YAML besides \n: a literal block would read them back as \n, and only a
# double-quoted scalar escapes them.
_OTHER_BREAKS = frozenset("\x85\u2028\u2029")


def _literal(dumper: yaml.SafeDumper, text: _Literal) -> yaml.Node:
    style = '"' if _OTHER_BREAKS.intersection(text) else "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style=style)


_ConfigMapDumper.add_representer(_Literal, _literal)


def configmap_text(
    plan: Plan,
    existing: Mapping[str, str],
    *,
    namespace: str = DEVICE_PLUGIN_CONFIGMAP[0],
    name: str = DEVICE_PLUGIN_CONFIGMAP[1],
) -> str:
    """The device plugin's multi-key ConfigMap: existing keys kept, planned keys written.

    Existing keys stay in their order (rewritten ones in place), new keys follow sorted.
    """
    data = dict(existing)
    planned = plan.configs
    for key in list(data):
        if key in planned:
            data[key] = planned[key]
    for key in sorted(planned):
        data.setdefault(key, planned[key])
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        # Trailing newlines go: the plugin reads each key as a YAML document, where they mean
        # nothing, and a block without them reads best.
        "data": {key: _Literal(text.rstrip("\n")) for key, text in data.items()},
    }
    head = (
        f"# Written by `gpu-policy plan` (headroom {pct(plan.headroom)} of each GPU's memory).\n"
        "# Apply it, then restart the device plugin DaemonSet: the plugin does not watch its\n"
        "# ConfigMap.\n"
    )
    body = yaml.dump(
        doc, Dumper=_ConfigMapDumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return head + body


def label_script(plan: Plan, node_label: str) -> str:
    """``kubectl label node`` commands that point each node at its planned config key."""
    lines = [
        "#!/bin/sh",
        "# Written by `gpu-policy plan`: point each GPU node at its device-plugin config key.",
        f"# Apply {CONFIGMAP_FILE} first; restart the device plugin after labelling.",
        "set -eu",
    ]
    for pool in plan.pools:
        key = pool.key_after
        if key is None or key == plan.default_config or not pool.pool.nodes:
            continue
        sizes = ", ".join(f"{o.offer.form.original} x {o.replicas_after}" for o in pool.offers)
        lines.append(f"# {pool.model or pool.pool.name}: {sizes} per device")
        for node in pool.pool.nodes:
            label = shlex.quote(f"{node_label}={key}")
            lines.append(f"kubectl label node {shlex.quote(node)} {label} --overwrite")
    return "\n".join(lines) + "\n"


def policy_text(plan: Plan, policy: Policy) -> str:
    """The SharingPolicy that matches the plan: the same settings, the written ConfigMap."""
    device_plugin: dict[str, Any] = {
        "configMapFile": CONFIGMAP_FILE,
        "nodeLabel": policy.node_label,
    }
    if plan.default_config is not None:
        device_plugin["defaultConfig"] = plan.default_config
    if policy.configmap_ref is not None:
        ref = policy.configmap_ref
        device_plugin["configMapRef"] = {"namespace": ref.namespace, "name": ref.name}
    spec: dict[str, Any] = {
        "enforcement": policy.enforcement,
        "defaultIntent": policy.default_intent,
        "exemptNamespaces": sorted(policy.exempt_namespaces),
        "devicePlugin": device_plugin,
        "mutation": {
            "rewriteResourceNames": policy.rewrite_resource_names,
            "injectNodeSelection": policy.inject_node_selection,
            "tolerations": [dict(t) for t in policy.tolerations],
        },
    }
    pools = autoscaled_pools_after(plan, policy)
    if pools:
        spec["pools"] = pools
    doc = {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "metadata": {"name": policy.name},
        "spec": spec,
    }
    head = (
        "# Written by `gpu-policy plan`: the webhook policy for the planned layout. The inventory\n"
        "# comes from the nodes (--nodes or the live cluster); `pools:` keeps only the pools an\n"
        "# autoscaler grows from zero, on their planned config keys.\n"
    )
    return head + dump_yaml(doc)


def _plan_of(plan: Plan, declared: DeclaredPool) -> PoolPlan | None:
    """The plan of the pool ``declared`` describes (the same config key and GPU model)."""
    model = base_model(declared.product) if declared.product else None
    for p in plan.pools:
        if p.pool.config_key == declared.config and pool_model(p.pool) == model:
            return p
    return None


def autoscaled_pools_after(plan: Plan, policy: Policy) -> list[dict[str, Any]]:
    """The policy's autoscaled pools (``spec.pools``) as the planned policy declares them."""
    out = []
    for declared in policy.pools:
        if not declared.autoscaled:
            continue
        planned = _plan_of(plan, declared)
        key = planned.key_after if planned is not None and planned.key_after else declared.config
        entry: dict[str, Any] = {
            "name": declared.name,
            "config": key,
            "product": declared.product,
            "gpusPerNode": declared.gpus_per_node,
            "memoryMiB": declared.memory_mib,
            "migDevices": dict(declared.mig_devices) or None,
            "minNodes": declared.min_nodes,
            "maxNodes": declared.max_nodes,
            "deviceClass": declared.device_class,
        }
        default_nodes = declared.min_nodes if declared.min_nodes is not None else 1
        if declared.nodes != default_nodes:
            entry["nodes"] = declared.nodes
        out.append({k: v for k, v in entry.items() if v is not None})
    return out


def pool_changes(plan: Plan, node_label: str) -> tuple[str, ...]:
    """Per pool the plan changes: what changes, and what its nodes (now and to come) need.

    A pool with nodes is relabelled by the label script; a pool an autoscaler grows (declared
    in the policy or a Karpenter NodePool) also needs its node template changed, or the nodes
    it adds next run the old key and carry the old product label (docs/autoscaling.md).
    """
    after = planned_inventory(plan)
    out = []
    for p, new in zip(plan.pools, after.pools, strict=True):
        if not p.changed:
            continue
        parts = []
        if p.key_after != p.pool.config_key:
            parts.append(f"config key {p.pool.config_key} -> {p.key_after}")
        parts += [
            f"{o.offer.form.original} x{o.offer.replicas} -> x{o.replicas_after}"
            for o in p.offers
            if o.replicas_after != o.offer.replicas
        ]
        needs = []
        labelled = p.key_after is not None and p.key_after != plan.default_config
        if p.pool.nodes and labelled and p.key_after != p.pool.config_key:
            needs.append(f"{len(p.pool.nodes)} node(s) relabelled by label-nodes.sh")
        if p.pool.scaling is not None or p.pool.origin.kind in ("policy", "karpenter"):
            template = [f"{node_label}={p.key_after}"] if labelled else []
            template += sorted(
                {f"{o.selector[0]}={o.selector[1]}" for o in new.offers if o.selector is not None}
            )
            needs.append(
                "the nodes its autoscaler adds must carry "
                + (", ".join(template) or "no config label (the default key)")
                + " (node group labels or node-template tags, NodePool template labels)"
            )
        if p.pool.origin.kind == "policy" and p.key_after != p.pool.config_key:
            needs.append(f"spec.pools config {p.key_after} in the written policy")
        line = f"{p.pool.describe()}: {', '.join(parts)}"
        out.append(line + (f"; {'; '.join(needs)}" if needs else ""))
    return tuple(out)
