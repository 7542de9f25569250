"""Why a GPU pod is stuck, in GPU terms: the allocator's verdict, and the holders of its slots.

Whether an unbound pod could run is the allocator's answer (``webhook/audit/verdict.py``,
docs/allocator.md): never (no node group, existing or able to appear, even empty), only on a
node to come, on an existing node were it empty, or now. Each reason's words come from what
the allocator refuses, filter by filter, in this order:

1. ``not-offered``: a resource name (or MIG profile) no node group has any of, or that only
   nodes to come have and none its selection admits: no node will ever serve it;
2. ``not-together``: each is offered, but no node group has them all;
3. ``selection``: its nodeSelector / required node affinity admits no group that offers it;
4. ``taints``: every group left has a NoSchedule / NoExecute taint (or a cordon) it does not
   tolerate;
5. ``too-large``: it fits none of those even empty, as when it asks for more than any has;
6. ``scale-up``: it fits only a node group able to appear (an autoscaled pool, a Karpenter
   NodePool: docs/autoscaling.md): it waits as it should (a warning, not a failure);
7. ``full``: it fits an existing node were it empty, none now with what bound pods and
   allocated claims hold: the holders are named, oldest first;
8. ``elsewhere``: it fits one of them now: what keeps it Pending is not its GPU request.

Beside those, ``shared-above-one``: it asks for more than one shared GPU where the device
plugin refuses that (``failRequestsGreaterThanOne``), so it would fail at the kubelet once
placed. A pod the kubelet already refused (``UnexpectedAdmissionError``) gets that reason, or
``admission`` with the kubelet's message.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from webhook.audit.extended import dra_too_large, held_by_claims, served_by_dra
from webhook.audit.findings import Reason, Ref
from webhook.audit.now import FitNow, gpu_demand
from webhook.audit.owners import parse_time
from webhook.audit.requests import pod_requests, scheduler_message
from webhook.audit.verdict import Judged, judge, locate
from webhook.policy import Inventory
from webhook.policy.allocator import DOES_NOT_FIT
from webhook.policy.demand import Demand
from webhook.policy.inventory import Offer
from webhook.policy.nodes import UNSCHEDULABLE_TAINT, NodeView, Taint, required_terms, untolerated
from webhook.policy.products import base_model
from webhook.policy.resources import parse_resource
from webhook.policy.supply import NodeGroup, Supply
from webhook.policy.supply.served import offered as offered_names
from webhook.policy.text import counted

__all__ = [
    "HOLDERS_SHOWN",
    "Capacity",
    "Holder",
    "Reason",
    "pod_requests",
    "scheduler_message",
]

#: How many holders of a full node's slots a message names (the oldest first).
HOLDERS_SHOWN = 5
#: How many nodes a message lists before "and N more".
NODES_SHOWN = 5
# The pod spec fields the scheduler's GPU-relevant filters read (with the requests).
_PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")


@dataclass(frozen=True, slots=True)
class Holder:
    """A bound pod that holds GPU slots on a node."""

    namespace: str
    name: str
    owner: Ref
    node: str
    resources: Mapping[str, int]
    created: datetime | None

    def describe(self, resource: str) -> str:
        """``nlp/nlp-inference-6c8f7-q7x2m (Deployment nlp-inference, 1 slot, since ...)``."""
        n = self.resources.get(resource, 0)
        owner = "" if self.owner.kind == "Pod" else f"{self.owner.kind} {self.owner.name}, "
        since = f", since {self.created:%Y-%m-%d}" if self.created is not None else ""
        return f"{self.namespace}/{self.name} ({owner}{n} slot{'' if n == 1 else 's'}{since})"


def _listed(items: list[str], shown: int = NODES_SHOWN) -> str:
    if len(items) <= shown:
        return ", ".join(items)
    return ", ".join(items[:shown]) + f" and {len(items) - shown} more"


class Capacity:
    """The GPU nodes, what each advertises, and who holds its slots."""

    def __init__(
        self, nodes: Iterable[NodeView], inventory: Inventory, supply: Supply | None = None
    ) -> None:
        self.nodes = tuple(nodes)
        self.inventory = inventory
        self.held: dict[tuple[str, str], int] = defaultdict(int)
        self.holders: dict[str, list[Holder]] = defaultdict(list)
        self._offers: dict[tuple[str, str], Offer] = {}
        offering: dict[str, list[NodeView]] = defaultdict(list)
        for view in self.nodes:
            for name in view.gpus:
                offering[name].append(view)
        self._offering = dict(offering)
        # Pods made from one template wait for the same reasons: one diagnosis per spec.
        self._diagnosed: dict[str, list[Reason]] = {}
        # The allocator's view of the same nodes (the inventory's supply unless given).
        self.fit_now = FitNow(supply or inventory.supply, inventory.dra)
        self._views = {v.name: v for v in self.nodes}
        for pool in inventory.pools:
            for node_name in pool.nodes:
                for offer in pool.offers:
                    self._offers[(node_name, offer.form.name)] = offer

    def hold(self, pod: Mapping[str, Any], owner: Ref, requests: Mapping[str, int]) -> None:
        """Count a bound, unfinished pod's requests against its node."""
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or not requests:
            return
        meta = pod.get("metadata") or {}
        for name, n in requests.items():
            self.held[(node, name)] += n
        self.holders[node].append(
            Holder(
                namespace=str(meta.get("namespace", "")),
                name=str(meta.get("name", "")),
                owner=owner,
                node=node,
                resources=dict(requests),
                created=parse_time(meta.get("creationTimestamp")),
            )
        )

    def offer(self, node: str, resource: str) -> Offer | None:
        """What the inventory knows of ``resource`` on ``node`` (sharing, product)."""
        return self._offers.get((node, resource))

    def free(self, node: NodeView, resource: str) -> int:
        """Slots of ``resource`` on ``node`` that no bound pod holds."""
        return node.gpus.get(resource, 0) - self.held.get((node.name, resource), 0)

    # --- the checks, in the scheduler's order -------------------------------------------

    def diagnose_pending(self, pod: Mapping[str, Any], requests: Mapping[str, int]) -> list[Reason]:
        """Why an unbound GPU pod has no node; see the module docstring for the order."""
        spec = pod.get("spec") or {}
        key = json.dumps(
            [sorted(requests.items()), *(spec.get(k) for k in _PLACEMENT_FIELDS)],
            sort_keys=True,
            default=str,
        )
        found = self._diagnosed.get(key)
        if found is None:
            found = self._diagnosed[key] = self._diagnose(spec, requests)
        return found

    def _diagnose(self, spec: Mapping[str, Any], requests: Mapping[str, int]) -> list[Reason]:
        # The allocator decides: ever (an empty cluster, every node group), on the existing
        # nodes empty, and now with what is in use (webhook/audit/verdict.py).
        demand = gpu_demand(spec, requests)
        supply = self.fit_now.supply
        judged = judge(demand, supply, self.fit_now.usage(self.held))
        if judged.ever.outcome == DOES_NOT_FIT:
            return self._never(spec, requests, demand, judged)
        if not judged.could:
            return [self._scale_up(requests, judged)]
        could = [self._view(g) for g in judged.could]
        reasons = self._shared_above_one(requests, could)
        # Names no node it could run on has device-plugin slots of: DRA devices are held.
        served = served_by_dra(requests, supply, {r for v in could for r in v.gpus})
        if not judged.now and served:
            return [*reasons, held_by_claims(served, supply)]
        if not judged.now:
            # The holders it waits for are those of the nodes it could run on.
            return [*reasons, self._full(requests, could)]
        return [*reasons, self._elsewhere(requests, [self._view(g) for g in judged.now])]

    def _never(
        self,
        spec: Mapping[str, Any],
        requests: Mapping[str, int],
        demand: Demand,
        judged: Judged,
    ) -> list[Reason]:
        """Why the demand fits no node group even on an empty cluster: the first filter
        that leaves no group, as the allocator answers each part of the demand."""
        fault = locate(demand, self.fit_now.supply, judged)
        if fault.missing:
            return [self._not_offered(r) for r in fault.missing]
        if not fault.offering:
            return [self._not_together(fault.per_name)]
        offering = [self._view(g) for g in fault.offering]
        absent = [r for r in requests if r not in self._offering]
        if not fault.selected and absent and not any(g.node_names for g in fault.offering):
            # Only nodes to come offer it, and none its selection admits: it is not offered.
            return [self._not_offered(r) for r in absent]
        if not fault.selected:
            return [self._selection(spec, requests, offering)]
        selected = [self._view(g) for g in fault.selected]
        if not fault.admitted:
            return [self._taints(spec, requests, selected)]
        admitted = [self._view(g) for g in fault.admitted]
        reasons = self._shared_above_one(requests, admitted)
        # Some node left gets a name from a DeviceClass: the allocator's words, not slots.
        slots = set.intersection(*(set(v.gpus) for v in admitted))
        if served_by_dra(requests, self.fit_now.supply, slots):
            return [*reasons, dra_too_large(fault.answers, demand)]
        return [*reasons, *self._too_large(requests, admitted)]

    def _view(self, group: NodeGroup) -> NodeView:
        """The node of a group (a pool's key for nodes to come), as the messages read nodes."""
        found = self._views.get(group.node)
        if found is not None:
            return found
        return NodeView(group.node, group.labels, group.taints, group.allocatable)

    def diagnose_refused(self, pod: Mapping[str, Any], requests: Mapping[str, int]) -> list[Reason]:
        """Why the kubelet refused a pod at admission (``UnexpectedAdmissionError``)."""
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = next((n for n in self.nodes if n.name == node_name), None)
        message = str((pod.get("status") or {}).get("message") or "no message")
        reasons = self._shared_above_one(requests, [node] if node is not None else [])
        if reasons:
            return [
                replace(r, message=f"{r.message}; the kubelet said {message!r}") for r in reasons
            ]
        where = f" on {node_name}" if node_name else ""
        return [
            Reason(
                "admission",
                f"the kubelet{where} could not allocate its GPUs: {message!r}",
                "delete the pod so that its controller makes a new one; if that fails the "
                f"same way, the device plugin{where} and the kubelet disagree on its devices: "
                "restart the device plugin pod there",
            )
        ]

    # --- one Reason per finding --------------------------------------------------------

    def _scale_up(self, requests: Mapping[str, int], judged: Judged) -> Reason:
        """It fits no existing node, even empty, but a node group able to appear."""
        described = {f"pool {p.name}": p.describe() for p in self.inventory.pools}
        pools = list(dict.fromkeys(described.get(g.key, g.key) for g in judged.appearing))
        resource = next((r for r in requests if r not in self._offering), None)
        if resource is None:
            what = "no node can run it yet (the nodes that advertise " + ", ".join(sorted(requests))
            what += " do not admit it, or have too few)"
        else:
            form = parse_resource(resource)
            what = f"no node advertises {resource}"
            if form is not None and form.profile:
                what += f" (MIG {form.profile} instances)"
            what += " yet"
        return Reason(
            "scale-up",
            f"{what}: it waits for the autoscaler to add a node of {_listed(pools)}",
            "nothing to change while the node comes; if none comes, read the autoscaler's "
            "events for the pod: the node group or NodePool must promise the labels the pod "
            "selects and the resource it asks for (docs/autoscaling.md)",
            {"resource": resource or ", ".join(sorted(requests)), "pools": _listed(pools)},
        )

    def _not_offered(self, resource: str) -> Reason:
        form = parse_resource(resource)
        what = resource
        if form is not None and form.profile:
            what = f"{resource} (MIG {form.profile} instances)"
        offered = offered_names(self.inventory)
        if form is None:
            fix = f"ask for one of the offered names: {resource} is no name the device plugin uses"
        elif form.profile:
            fix = (
                f"ask for one of the offered resources, or partition a MIG-capable GPU into "
                f"{form.profile} instances (mig-parted) under migStrategy mixed"
            )
        elif form.renamed:
            fix = (
                f"ask for {form.original}: no device-plugin config here renames shared GPUs "
                "(renameByDefault: true advertises .shared names)"
            )
        else:
            fix = "ask for one of the offered resources"
        # Where pools can appear, say that none of them would serve it either: it never runs.
        never = ", and no pool an autoscaler can add would" if self.inventory.at_zero else ""
        return Reason(
            "not-offered",
            f"no node advertises {what}{never}; the cluster offers {offered}",
            fix,
            {"resource": resource, "offered": offered},
        )

    def _not_together(self, offered: Mapping[str, Sequence[NodeGroup]]) -> Reason:
        names = " and ".join(sorted(offered))
        per_name = "; ".join(
            f"{r}: {_listed([g.node for g in groups])}" for r, groups in sorted(offered.items())
        )
        return Reason(
            "not-together",
            f"no node advertises both {names} ({per_name}); the containers of a pod run on "
            "one node",
            "ask for GPUs that one node offers, or split the containers into pods",
        )

    def _selection(
        self, spec: Mapping[str, Any], requests: Mapping[str, int], offering: list[NodeView]
    ) -> Reason:
        selector = spec.get("nodeSelector") or {}
        keys = list(selector)
        parts = []
        if selector:
            parts.append("nodeSelector " + ", ".join(f"{k}={v}" for k, v in selector.items()))
        terms = required_terms(spec.get("affinity"))
        if terms is not None:
            parts.append("required node affinity")
            for term in terms:
                for expr in (term or {}).get("matchExpressions") or ():
                    if expr.get("key") not in keys:
                        keys.append(str(expr.get("key")))
        carried = [
            f"{n.name}: " + ", ".join(f"{k}={n.labels.get(k, '(unset)')}" for k in keys)
            for n in offering
        ]
        names = ", ".join(sorted(requests))
        return Reason(
            "selection",
            f"its {' and '.join(parts)} matches none of the {counted(len(offering), 'node')} "
            f"that offer {names} ({_listed(carried)})",
            "select what those nodes carry (the values above), or remove the selection; "
            "gpu-policy.io/product names a GPU model without pinning a label value",
            {"nodes": _listed([n.name for n in offering])},
        )

    def _taints(
        self, spec: Mapping[str, Any], requests: Mapping[str, int], selected: list[NodeView]
    ) -> Reason:
        tolerations = spec.get("tolerations") or ()
        cordon = Taint(*UNSCHEDULABLE_TAINT)
        found = {n.name: untolerated(n, tolerations) for n in selected}
        listed = [
            f"{node}: " + ", ".join("cordoned" if t == cordon else str(t) for t in ts)
            for node, ts in found.items()
        ]
        cordoned = [n.name for n in selected if n.unschedulable]
        fixes = []
        other = sorted({t for ts in found.values() for t in ts if t != cordon}, key=str)
        if other:
            example = other[0]
            value = f", value: {example.value}" if example.value else ""
            op = "Equal" if example.value else "Exists"
            fixes.append(
                f"add tolerations for them to the pod template (e.g. {{key: {example.key}, "
                f"operator: {op}{value}, effect: {example.effect}}}); the webhook adds the "
                "tolerations in the policy's spec.mutation.tolerations to new pods"
            )
        if cordoned:
            fixes.append(f"uncordon {_listed(cordoned)} (kubectl uncordon NODE) when it is ready")
        names = ", ".join(sorted(requests))
        return Reason(
            "taints",
            f"every node that offers {names} and matches its selection is cordoned or has a "
            f"taint it does not tolerate ({_listed(listed)})",
            "; ".join(fixes),
            {"taints": _listed(listed)},
        )

    def _shared_above_one(self, requests: Mapping[str, int], nodes: list[NodeView]) -> list[Reason]:
        out = []
        for resource, n in requests.items():
            if n <= 1:
                continue
            offers = [self.offer(node.name, resource) for node in nodes if resource in node.gpus]
            known = [o for o in offers if o is not None]
            if not known or len(known) < len(offers):
                continue
            if all(o.shared and o.fail_requests_greater_than_one for o in known):
                out.append(
                    Reason(
                        "shared-above-one",
                        f"it asks for {n} {resource}, but every node that could run it shares "
                        "its GPUs and the device plugin refuses shared requests above one "
                        "(failRequestsGreaterThanOne): placed, it fails with "
                        "UnexpectedAdmissionError",
                        "ask for 1 (a share is access to a GPU, not a fraction of its compute), "
                        "or target an exclusive GPU",
                        {"resource": resource, "requested": str(n)},
                    )
                )
        return out

    def _too_large(self, requests: Mapping[str, int], nodes: list[NodeView]) -> list[Reason]:
        out = []
        for resource, n in requests.items():
            most = max(node.gpus.get(resource, 0) for node in nodes)
            if n > most:
                out.append(
                    Reason(
                        "too-large",
                        f"it asks for {n} {resource}, but no node that could run it has more "
                        f"than {most}",
                        f"ask for at most {most} per pod, or add nodes with more GPUs",
                        {"resource": resource, "requested": str(n), "largest": str(most)},
                    )
                )
        if out:
            return out
        # No single count is too large: its resources together fit no node.
        asked = ", ".join(f"{n} {r}" for r, n in requests.items())
        return [
            Reason(
                "too-large",
                f"it asks for {asked}, and no node that could run it has all of that",
                "ask for what one node has, or add nodes that have all of it",
                {"requested": asked},
            )
        ]

    def _full(self, requests: Mapping[str, int], nodes: list[NodeView]) -> Reason:
        # The first resource that does not fit names the slots; the others rarely differ.
        resource = next(
            (r for r, k in requests.items() if all(self.free(n, r) < k for n in nodes)),
            next(iter(requests)),
        )
        full = [n for n in nodes if resource in n.gpus]
        slots = sum(n.gpus[resource] for n in full)
        held = sum(self.held.get((n.name, resource), 0) for n in full)
        per_node = [
            f"{n.name}: {self.held.get((n.name, resource), 0)} of {n.gpus[resource]}" for n in full
        ]
        holders = sorted(
            (h for n in full for h in self.holders.get(n.name, ()) if resource in h.resources),
            key=lambda h: (h.created is None, h.created or 0, h.namespace, h.name),
        )
        shown = [h.describe(resource) for h in holders[:HOLDERS_SHOWN]]
        if len(holders) > HOLDERS_SHOWN:
            shown.append(f"and {len(holders) - HOLDERS_SHOWN} more")
        offers = [self.offer(n.name, resource) for n in full]
        unshared = [n.name for n, o in zip(full, offers, strict=True) if o and not o.shared]
        models = sorted({base_model(o.product) for o in offers if o and o.product})
        measure = " ".join(f"--measure {m}=MEMORY" for m in models) or "--measure PRODUCT=MEMORY"
        if unshared:
            which = "none of these GPUs is" if len(unshared) == len(full) else "not every GPU is"
            sharing = (
                f"sharing would help: {which} shared (one pod per GPU); time-slicing gives each "
                "GPU several slots without new hardware, and `gpu-policy plan` sizes the "
                "replicas from the GPU memory one process uses"
            )
        else:
            sharing = (
                "these GPUs are shared already; `gpu-policy plan` sizes the replicas from "
                "measured memory, or the pool needs more GPU nodes"
            )
        message = (
            f"every node that offers {resource} and admits it is full: {held} of "
            f"{counted(slots, 'slot')} held ({', '.join(per_node)})"
        )
        if shown:
            message += f", by {', '.join(shown)}"
        return Reason(
            "full",
            f"{message}; {sharing}",
            "free a slot (scale down or delete a pod that holds one) or add slots: measure the "
            f"GPU memory of one process (nvidia-smi) and run `gpu-policy plan {measure}`, which "
            "writes the device-plugin ConfigMap, the node labels and the matching policy",
            {
                "resource": resource,
                "slots": str(slots),
                "held": str(held),
                "holders": ", ".join(h.describe(resource) for h in holders[:HOLDERS_SHOWN]),
            },
            nodes=tuple(n.name for n in full),
        )

    def _elsewhere(self, requests: Mapping[str, int], fitting: list[NodeView]) -> Reason:
        # A name DRA serves is counted in devices the allocator found free, not in slots.
        free = [
            f"{n.name}: "
            + ", ".join(
                f"{self.free(n, r) if r in n.gpus else 'devices'} {r} free" for r in requests
            )
            for n in fitting[:NODES_SHOWN]
        ]
        more = f" and {len(fitting) - NODES_SHOWN} more" if len(fitting) > NODES_SHOWN else ""
        return Reason(
            "elsewhere",
            f"GPU slots are free for it ({', '.join(free)}{more}): what keeps it Pending is not "
            "its GPU request",
            "read the scheduler's message: cpu, memory, the pod count, host ports, volumes or "
            "pod (anti-)affinity may not fit those nodes",
        )
