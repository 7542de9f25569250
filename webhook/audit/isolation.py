"""Running pods that can see GPUs without asking for one (docs/isolation.md, "The audit").

The webhook's GPU isolation judges pods as they are created; the audit reports what already
runs on a GPU node outside the device plugin's accounting:

* a container that asks for no GPU and sets ``NVIDIA_VISIBLE_DEVICES`` to GPUs itself (``all``,
  indexes, UUIDs; or a ``valueFrom`` the audit cannot read): it sees them;
* a privileged container that asks for no GPU: it gets the host's devices whatever the
  variable says (it sees every GPU, or fails with ``Failed to initialize NVML``).

What an image's own ``ENV`` sets (CUDA images: ``all``) is not in the pod spec, so a container
that merely lacks ``NVIDIA_VISIBLE_DEVICES=void`` is not reported. As :func:`exposure` reads
each pod it keeps only such containers, so the audit holds a few bytes per reported pod.
Pods are reported under their controller (a DaemonSet on twenty GPU nodes is one finding),
in their namespace's PolicyReport.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.audit.findings import Finding, Ref
from webhook.contract import ISOLATION_OPT_OUT_ANNOTATION, VISIBLE_DEVICES_ENV
from webhook.policy import Policy
from webhook.policy.decision import Status
from webhook.policy.engine.isolation import exposes_gpus
from webhook.policy.nodes import is_gpu_resource
from webhook.policy.workloads import API_VERSIONS

__all__ = ["RULE", "exposure", "isolation_findings"]

RULE = "gpu-visible-without-request"
_DONE = ("Succeeded", "Failed")


def _asks_for_gpu(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return False
    if resources.get("claims"):
        return True  # devices through Dynamic Resource Allocation
    return any(
        isinstance(section, Mapping) and any(is_gpu_resource(str(k)) for k in section)
        for section in (resources.get("requests"), resources.get("limits"))
    )


def _seen(container: Mapping[str, Any]) -> str | None:
    """What one container without a GPU request sees of the GPUs, in words, or None."""
    privileged = (container.get("securityContext") or {}).get("privileged") is True
    value: str | None = None
    is_set = False
    for entry in container.get("env") or ():
        if isinstance(entry, Mapping) and entry.get("name") == VISIBLE_DEVICES_ENV:
            is_set = True
            value = None if "valueFrom" in entry else str(entry.get("value") or "")
    if is_set and (value is None or exposes_gpus(value)):
        shown = "from valueFrom" if value is None else f"={value}"
        what = f"sets {VISIBLE_DEVICES_ENV}{shown}"
        return f"{what}, privileged" if privileged else what
    return "privileged" if privileged else None


def exposure(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """A bound, unfinished pod cut down to its containers that see GPUs without asking for
    one (name -> what they do), or None when it has none. ``created`` is left as written
    (the collector parses it)."""
    spec = pod.get("spec")
    status = pod.get("status") or {}
    if not isinstance(spec, Mapping) or not spec.get("nodeName") or status.get("phase") in _DONE:
        return None
    seen: dict[str, str] = {}
    for list_name in ("initContainers", "containers"):
        for container in spec.get(list_name) or ():
            if not isinstance(container, Mapping) or _asks_for_gpu(container):
                continue
            what = _seen(container)
            if what is not None:
                seen[str(container.get("name", ""))] = what
    if not seen:
        return None
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or ()
    owner = owners[0] if owners and isinstance(owners[0], Mapping) else None
    annotations = meta.get("annotations") or {}
    return {
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
        "created": meta.get("creationTimestamp"),
        "owner": None if owner is None else (str(owner.get("kind")), str(owner.get("name"))),
        "optedOut": ISOLATION_OPT_OUT_ANNOTATION in annotations,
        "node": str(spec["nodeName"]),
        "containers": seen,
    }


def isolation_findings(
    exposed: Iterable[Mapping[str, Any]], gpu_nodes: set[str], policy: Policy
) -> list[Finding]:
    """One finding per reported object whose pods on GPU nodes see GPUs without a request.

    A ``fail`` when the policy's isolation enforces (the webhook would refuse such a pod
    now, or give it ``void``), else a ``warn``. Namespaces exempt from the policy or from
    isolation are left out.
    """
    exempt = policy.exempt_namespaces | policy.isolation.exempt_namespaces
    grouped: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for pod in exposed:
        if pod["node"] not in gpu_nodes or pod["namespace"] in exempt:
            continue
        kind, name = pod["owner"] or ("Pod", pod["name"])
        grouped.setdefault((pod["namespace"], kind, name), []).append(pod)
    result: Status = "fail" if policy.isolation.mode == "enforce" else "warn"
    findings = []
    for (namespace, kind, name), pods in sorted(grouped.items()):
        containers = {c: what for p in pods for c, what in p["containers"].items()}
        nodes = sorted({p["node"] for p in pods})
        listed = "; ".join(f'container "{c}" {what}' for c, what in containers.items())
        uid = pods[0]["uid"] if kind == "Pod" else ""
        opted = " (it opts out of GPU isolation)" if any(p["optedOut"] for p in pods) else ""
        findings.append(
            Finding(
                rule=RULE,
                result=result,
                subject=Ref(
                    kind=kind,
                    namespace=namespace or None,
                    name=name,
                    uid=uid,
                    api_version=API_VERSIONS.get(kind, "v1"),
                ),
                message=(
                    f"{len(pods)} running pod(s) on GPU node(s) {', '.join(nodes)} see GPUs "
                    f"without asking for one, outside the device plugin's accounting{opted}: "
                    f"{listed}"
                ),
                fix=(
                    "ask for a GPU in resources.limits (nvidia.com/gpu) where one is needed; "
                    "otherwise remove NVIDIA_VISIBLE_DEVICES (or set it to void) and drop "
                    "privileged (docs/isolation.md)"
                ),
                category="isolation",
                pods=len(pods),
                since=min((p["created"] for p in pods if p["created"] is not None), default=None),
                details={"containers": ", ".join(containers), "nodes": ", ".join(nodes)},
            )
        )
    return findings
