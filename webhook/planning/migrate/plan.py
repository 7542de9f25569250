"""``make_migration``: the whole plan from the cluster as it is, and its files and report.

The plan (docs/migrate.md): the DeviceClasses (:mod:`.classes`), the workloads rewritten to
claims with their ResourceClaimTemplates (:mod:`.rewrite`), the ResourceQuota equivalents
(:mod:`.quota`), and the cutover steps with every GPU pod's place after each
(:mod:`.cutover`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.planning.migrate.classes import ClassPlan, plan_classes
from webhook.planning.migrate.cutover import GpuPod, Simulation, Step, SupplyOf
from webhook.planning.migrate.quota import QuotaPlan, plan_quota
from webhook.planning.migrate.rewrite import Rewrite, rewrite
from webhook.policy.inventory import Inventory
from webhook.policy.workloads import locate

#: The node label the plan flips to stop the device plugin on one node (the GPU Operator's
#: per-node switch of its device-plugin DaemonSet; docs/migrate.md, "Steps").
PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
#: The node label the plan sets to start NVIDIA's DRA driver on one node: the driver's chart
#: is installed with ``kubeletPlugin.nodeSelector`` on it (docs/migrate.md, "Steps").
DRA_LABEL = "gpu-policy.io/dra-driver"


@dataclass(frozen=True)
class Workload:
    """A top-level object with GPU requests (a controller, or a pod no controller owns)."""

    kind: str
    namespace: str
    name: str
    rewrite: Rewrite

    @property
    def key(self) -> str:
        """``Kind namespace/name``."""
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Migration:
    """Everything ``gpu-policy migrate plan`` writes and reports."""

    classes: tuple[ClassPlan, ...]
    notes: tuple[str, ...]
    workloads: tuple[Workload, ...]
    quotas: tuple[QuotaPlan, ...]
    steps: tuple[Step, ...]
    pods: int

    @property
    def lost(self) -> tuple[str, ...]:
        """The pods that fit no node once every step is done."""
        if not self.steps:
            return ()
        return tuple(sorted(p for p, to in self.steps[-1].placements.items() if to is None))


def _is_gpu(spec: Mapping[str, Any]) -> bool:
    if spec.get("resourceClaims"):
        return True
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            resources = container.get("resources") or {}
            names = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            if any(str(k).startswith("nvidia.com/") for k in names):
                return True
    return False


def _controlled(obj: Mapping[str, Any]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("controller") for r in refs if isinstance(r, Mapping))


def gpu_pods(objects: Iterable[Mapping[str, Any]]) -> list[GpuPod]:
    """The pods of ``objects`` that ask for GPUs and have not finished."""
    out = []
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if not _is_gpu(spec) or phase in ("Succeeded", "Failed"):
            continue
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        out.append(
            GpuPod(
                f"{namespace}/{meta.get('name')}",
                namespace,
                spec,
                str(spec.get("nodeName")) if spec.get("nodeName") else None,
            )
        )
    return out


def make_migration(  # noqa: PLR0917 - the cluster's parts, each named at the call
    inventory: Inventory,
    nodes: Sequence[Mapping[str, Any]],
    objects: Sequence[Mapping[str, Any]],
    quotas: Sequence[Mapping[str, Any]],
    supply_of: SupplyOf,
    claim_specs: Mapping[tuple[str, str, str], Mapping[str, Any]],
) -> Migration:
    """The plan for the cluster of ``nodes`` (with ``inventory`` made from them) running the
    workloads and pods of ``objects``, under ``quotas``. ``supply_of`` builds the supply of a
    cluster state (the caller's recipe, the same the webhook uses)."""
    classes, notes = plan_classes(inventory)
    workloads = []
    for obj in objects:
        found = locate(obj)
        if found is None or _controlled(obj) or not _is_gpu(found.spec):
            continue
        meta = obj.get("metadata") or {}
        node = (found.spec.get("nodeName") or None) if obj.get("kind") == "Pod" else None
        done = rewrite(obj, node, classes)
        if done.template is not None:
            workloads.append(
                Workload(
                    str(obj.get("kind")),
                    str(meta.get("namespace") or "default"),
                    str(meta.get("name")),
                    done,
                )
            )
    planned_quotas = [q for quota in quotas if (q := plan_quota(quota, classes)) is not None]
    pods = gpu_pods(objects)
    simulation = Simulation(nodes, inventory, classes, supply_of, claim_specs)
    steps = simulation.run(pods)
    return Migration(
        classes=classes,
        notes=notes,
        workloads=tuple(sorted(workloads, key=lambda w: w.key)),
        quotas=tuple(planned_quotas),
        steps=steps,
        pods=len(pods),
    )


def step_commands(step: Step) -> list[str]:
    """The commands of one step, in order: never both stacks serving the node."""
    node = step.node
    moving = [m.pod for m in step.moves if m.source == node]
    out = []
    if moving:
        out.append(f"# move its GPU pods: {', '.join(moving)} (resubmit them from workloads/)")
    out += [
        f"kubectl label node {node} {PLUGIN_LABEL}=false --overwrite",
        f"# wait until node {node} has no nvidia.com/* in status.allocatable",
        f"kubectl label node {node} {DRA_LABEL}=true --overwrite",
        f"# wait until a ResourceSlice of gpu.nvidia.com names node {node}; then "
        f"`gpu-policy migrate check` must name no dual-published node",
    ]
    return out


def document(migration: Migration) -> dict[str, Any]:
    """The plan as JSON (``-o json``)."""
    return {
        "deviceClasses": [
            {
                "name": c.name,
                "serves": list(c.serves),
                "extendedResourceName": c.extended,
                "sharing": c.sharing,
                "replicas": c.replicas,
                "nodes": list(c.nodes),
            }
            for c in migration.classes
        ],
        "notes": list(migration.notes),
        "rewritten": [
            {"workload": w.key, "changes": list(w.rewrite.changes)} for w in migration.workloads
        ],
        "quotas": [
            {
                "namespace": q.namespace,
                "name": q.name,
                "hard": q.obj["spec"]["hard"],
                "notes": list(q.notes),
            }
            for q in migration.quotas
        ],
        "steps": [
            {
                "step": s.number,
                "node": s.node,
                "commands": step_commands(s),
                "pods": [
                    {
                        "pod": m.pod,
                        "from": m.source,
                        "to": m.to,
                        "fitsOn": list(m.fits_on),
                        "form": m.form,
                        **({"reason": m.reason} if m.reason else {}),
                    }
                    for m in s.moves
                ],
                "placements": dict(s.placements),
            }
            for s in migration.steps
        ],
        "noLongerFit": list(migration.lost),
        "gpuPods": migration.pods,
    }


def files(migration: Migration) -> dict[str, list[dict[str, Any]]]:
    """What the plan's directory holds: relative path -> the objects of that YAML file."""
    out: dict[str, list[dict[str, Any]]] = {
        "deviceclasses.yaml": [c.object() for c in migration.classes],
    }
    for w in migration.workloads:
        base = f"workloads/{w.namespace}.{w.kind.lower()}.{w.name}"
        assert w.rewrite.template is not None  # only rewritten workloads are listed
        out[f"{base}.yaml"] = [w.rewrite.template, w.rewrite.obj]
    if migration.quotas:
        out["resourcequotas.yaml"] = [q.obj for q in migration.quotas]
    for step in migration.steps:
        if step.slice is not None:
            out[f"steps/{step.number:02d}-{step.node}.resourceslice.yaml"] = [dict(step.slice)]
    return out
