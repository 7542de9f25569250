"""``gpu-policy migrate check``: a cluster in the middle of a migration, judged.

Which nodes are dual-published and which GPUs are given twice (``webhook.policy.dual``), and,
given a plan's steps, the state of each: ``done`` (the node publishes its GPUs through DRA
only), ``misplaced`` (done, but a pod the step moved runs where the plan did not say),
``pending`` (the device plugin only), ``dual`` (both: the state no step may leave), ``no GPUs``
(neither) or ``missing`` (no such node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.policy.dual import (
    GPU_DRIVER,
    DoubleAllocation,
    DualNode,
    double_allocations,
    dual_published,
    plugin_gpus,
)
from webhook.policy.inventory import Inventory


@dataclass(frozen=True)
class StepState:
    """One planned step as the cluster shows it."""

    number: int
    node: str
    state: str
    why: str = ""


@dataclass(frozen=True)
class CheckResult:
    """The dual-published nodes, the double allocations, and the plan's steps' states."""

    dual: tuple[DualNode, ...]
    doubles: tuple[DoubleAllocation, ...]
    steps: tuple[StepState, ...] = ()

    @property
    def failed(self) -> bool:
        """True when a GPU is given twice or a step left a node dual-published."""
        return bool(self.doubles) or any(s.state in ("dual", "misplaced") for s in self.steps)

    def document(self) -> dict[str, Any]:
        """The JSON form (``-o json``)."""
        return {
            "dualPublished": [
                {
                    "node": d.node,
                    "allocatable": dict(d.plugin),
                    "gpus": d.gpus,
                    "slices": list(d.slices),
                }
                for d in self.dual
            ],
            "doubleAllocations": [
                {
                    "node": a.node,
                    "gpus": a.gpus,
                    "pluginPods": list(a.plugin_pods),
                    "pluginGpus": a.plugin_gpus,
                    "claims": list(a.claims),
                    "claimGpus": a.claim_gpus,
                }
                for a in self.doubles
            ],
            "steps": [
                {
                    "step": s.number,
                    "node": s.node,
                    "state": s.state,
                    **({"why": s.why} if s.why else {}),
                }
                for s in self.steps
            ],
        }


def _misplaced(move: Mapping[str, Any], bound: str | None) -> str | None:
    """Why a pod a step moved runs where the plan did not say, or None: bound off the nodes it
    fits on, or bound though it fits none."""
    pod = str(move.get("pod"))
    fits = list(move.get("fitsOn") or ())
    if move.get("to") is None and bound is not None:
        return f"{pod} runs on {bound}, where the plan found no room for it"
    if move.get("to") is not None and bound is not None and bound not in fits:
        return f"{pod} runs on {bound}, not on {', '.join(fits)}"
    return None


def check(
    inventory: Inventory,
    pods: Iterable[Mapping[str, Any]],
    steps: Sequence[Mapping[str, Any]] = (),
) -> CheckResult:
    """Judge the cluster of ``inventory`` with its ``pods``; ``steps`` are a plan's steps
    (``plan.json``'s ``steps``: number, node, the pods' moves)."""
    pods = list(pods)
    where = {
        f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}": (
            (p.get("spec") or {}).get("nodeName") or None
        )
        for p in pods
    }
    supply = inventory.supply
    if supply is None:
        return CheckResult((), ())
    dual = dual_published(supply)
    allocations = inventory.dra.allocations if inventory.dra is not None else ()
    doubles = double_allocations(dual, list(pods), allocations, supply.slices)
    groups = {g.node: g for g in supply.groups if g.node_names}
    states = []
    for step in steps:
        number, node = int(step.get("step") or 0), str(step.get("node") or "")
        group = groups.get(node)
        if group is None:
            states.append(StepState(number, node, "missing", "no such node"))
            continue
        plugin = plugin_gpus(group.allocatable)
        dra = any(
            s.driver == GPU_DRIVER and s.node_name == node and s.devices for s in group.slices
        )
        state = {(True, True): "dual", (False, True): "done", (True, False): "pending"}.get(
            (bool(plugin), dra), "no GPUs"
        )
        states.append(StepState(number, node, state))
    # Each pod is judged by the last step done that moved it (a pod not there now is not).
    last: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for i, step in enumerate(steps):
        if states[i].state == "done":
            for move in step.get("pods") or ():
                last[str(move.get("pod"))] = (i, move)
    for pod, (i, move) in sorted(last.items()):
        why = _misplaced(move, where[pod]) if pod in where else None
        if why is not None:
            before = states[i]
            joined = f"{before.why}; {why}" if before.why else why
            states[i] = StepState(before.number, before.node, "misplaced", joined)
    return CheckResult(dual, doubles, tuple(states))
