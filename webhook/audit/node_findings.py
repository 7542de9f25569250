"""The audit's findings about nodes: ``gpu-node-capacity`` and ``gpu-node-labels``
(docs/audit.md)."""

from __future__ import annotations

from collections import Counter, defaultdict

from webhook.audit.findings import Finding, Ref
from webhook.audit.stuck import Capacity
from webhook.policy import Inventory
from webhook.policy.nodes import NodeView


def node_findings(
    nodes: tuple[NodeView, ...], capacity: Capacity, inventory: Inventory, waiters: Counter[str]
) -> list[Finding]:
    """The node family: ``gpu-node-capacity`` per GPU node (a warning when it is full while
    pods wait for it) and ``gpu-node-labels`` (the inventory's label / allocatable
    disagreements, placed on their node where they name one)."""
    out = []
    labels: dict[str, list[str]] = defaultdict(list)
    unplaced: list[str] = []
    for problem in inventory.disagreements:
        # A disagreement about one node names it as its source.
        name = problem.source.removeprefix("node ") if problem.source.startswith("node ") else ""
        (labels[name] if name else unplaced).append(str(problem))
    for node in nodes:
        ref = Ref("Node", None, node.name)
        held = {r: capacity.held.get((node.name, r), 0) for r in node.gpus}
        use = ", ".join(
            f"{r}: {held[r]} of {n} slot{'' if n == 1 else 's'} held"
            for r, n in sorted(node.gpus.items())
        )
        full = all(held[r] >= n for r, n in node.gpus.items())
        if waiters.get(node.name) and full:
            waiting = waiters[node.name]
            asks = "pod asks" if waiting == 1 else "pods ask"
            out.append(
                Finding(
                    rule="gpu-node-capacity",
                    result="warn",
                    subject=ref,
                    message=f"{use}; {waiting} waiting {asks} for its GPUs",
                    fix="free a slot or share its GPUs: the waiting pods' gpu-pod-scheduled "
                    "findings name the holders (`gpu-policy plan` sizes the sharing)",
                    category="nodes",
                    details={r: f"{held[r]}/{n}" for r, n in node.gpus.items()},
                )
            )
        else:
            out.append(
                Finding(
                    rule="gpu-node-capacity",
                    result="pass",
                    subject=ref,
                    message=use,
                    category="nodes",
                )
            )
        mine = labels.pop(node.name, [])
        out.append(
            Finding(
                rule="gpu-node-labels",
                result="warn" if mine else "pass",
                subject=ref,
                message="; ".join(mine) or "GPU labels agree with allocatable",
                fix="GPU Feature Discovery writes the labels and the device plugin the "
                "allocatable resources: restart the one that runs an older config"
                if mine
                else "",
                category="nodes",
            )
        )
    # Disagreements about nodes that advertise no GPU resource, and any not about one node.
    for name, problems in sorted(labels.items()):
        out.append(
            Finding(
                rule="gpu-node-labels",
                result="warn",
                subject=Ref("Node", None, name),
                message="; ".join(problems),
                category="nodes",
            )
        )
    if unplaced:
        out.append(
            Finding(
                rule="gpu-node-labels",
                result="warn",
                subject=Ref("Node", None, ""),
                message="; ".join(unplaced),
                category="nodes",
            )
        )
    return out
