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
from webhook.planning.plugin_texts import dump_yaml
from webhook.planning.sizing import Plan, PoolPlan, pct
from webhook.policy.inventory import Inventory, Offer
from webhook.policy.model import Policy
from webhook.policy.products import product_label, product_value
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
    doc = {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "metadata": {"name": policy.name},
        "spec": {
            "enforcement": policy.enforcement,
            "defaultIntent": policy.default_intent,
            "exemptNamespaces": sorted(policy.exempt_namespaces),
            "devicePlugin": device_plugin,
            "mutation": {
                "rewriteResourceNames": policy.rewrite_resource_names,
                "injectNodeSelection": policy.inject_node_selection,
                "tolerations": [dict(t) for t in policy.tolerations],
            },
        },
    }
    head = (
        "# Written by `gpu-policy plan`: the webhook policy for the planned layout. The inventory\n"
        "# comes from the nodes (--nodes or the live cluster), so no `pools:` here.\n"
    )
    return head + dump_yaml(doc)
