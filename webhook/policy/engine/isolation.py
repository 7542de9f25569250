"""GPU isolation: what the containers that ask for no GPU would see on a GPU node.

With the NVIDIA container runtime, a container's ``NVIDIA_VISIBLE_DEVICES`` decides which GPUs
it gets, and CUDA images set it to ``all``: a container that asks for no GPU but lands on a GPU
node sees every GPU of the node, outside the device plugin's accounting (docs/isolation.md).
Under the policy's ``isolation.mode: enforce`` each such container gets
``NVIDIA_VISIBLE_DEVICES=void`` (the runtime then behaves like runc: no GPU, no driver), one
that sets the variable to GPUs itself is refused, and a privileged one is warned about; under
``warn`` the same findings are warnings and nothing is written.

Only containers and init containers are judged (an ephemeral container cannot be given devices
and cannot change env). A container that lists ``resources.claims`` gets its devices through
Dynamic Resource Allocation and is left alone, like one that asks for an ``nvidia.com/`` GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from webhook.contract import (
    ISOLATION_OPT_OUT_ANNOTATION,
    ISOLATION_OPT_OUT_VALUE,
    VISIBLE_DEVICES_ENV,
    VISIBLE_DEVICES_NONE,
    VISIBLE_DEVICES_VOID,
)
from webhook.policy.decision import RuleResult
from webhook.policy.engine.checks import Found
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.records import per_review_record
from webhook.policy.supply.served import served_names
from webhook.policy.text import shown
from webhook.policy.workloads import Workload, container_label

# The kubelet's annotation on the mirror pod of a static pod: the kubelet runs the static pod's
# own file, so nothing written into the mirror pod reaches a container.
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
_LISTS: Final = ("initContainers", "containers")
_DOCS: Final = "docs/isolation.md"
_NO_GPU: Final = (VISIBLE_DEVICES_VOID, VISIBLE_DEVICES_NONE)
_SHORT: Final = 60  # a longer value is quoted shortened


def visible_devices(value: str) -> str:
    """What the NVIDIA runtime makes of a ``NVIDIA_VISIBLE_DEVICES`` value.

    ``void`` (also for an empty value: neither GPUs nor the driver, as runc), ``none`` (no
    GPU, the driver libraries), ``all``, or the value itself (a list of indexes, UUIDs or CDI
    names). The toolkit reads the comma-separated list: ``void`` anywhere wins, then the first
    ``all`` or ``none`` (docs/isolation.md, "What the runtime does with the variable").
    """
    items = [item.strip() for item in value.split(",")]
    items = [item for item in items if item]
    if not items or VISIBLE_DEVICES_VOID in items:
        return VISIBLE_DEVICES_VOID
    for item in items:
        if item in ("all", VISIBLE_DEVICES_NONE):
            return item
    return ",".join(items)


def exposes_gpus(value: str) -> bool:
    """True when a ``NVIDIA_VISIBLE_DEVICES`` value gives the container GPUs (not void, none)."""
    return visible_devices(value) not in _NO_GPU


@per_review_record
class Isolation:
    """What isolation makes of one pod: its findings, and the containers to give ``void``."""

    findings: list[RuleResult]
    # (list name, index, label) of each container that gets NVIDIA_VISIBLE_DEVICES=void.
    to_void: list[tuple[str, int, str]]


def reach(
    workload: Workload, namespace: str | None, policy: Policy, inventory: Inventory
) -> tuple[str | None, str]:
    """(why isolation does not judge this pod, or None; the GPU node it can reach, in words).

    For a pod that asks for no GPU: isolation is off, the namespace is exempt, it is a mirror
    pod, or it cannot be placed on any GPU node of the inventory.
    """
    if not policy.isolation.on:
        return "asks for no GPU", ""
    if namespace in policy.isolation.exempt_namespaces:
        return f"asks for no GPU; namespace {namespace} is exempt from GPU isolation", ""
    annotations = workload.metadata.get("annotations")
    if isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations:
        return "asks for no GPU; a mirror pod (the kubelet runs the static pod's own spec)", ""
    where = inventory.gpu_nodes.reachable(workload.spec)
    if where is None:
        return "asks for no GPU and cannot be placed on a GPU node", ""
    return None, where


def _env_value(container: Mapping[str, Any]) -> tuple[bool, str | None]:
    """(set, value) of the container's own NVIDIA_VISIBLE_DEVICES; value None: from a source."""
    found: tuple[bool, str | None] = (False, None)
    env = container.get("env")
    for entry in env if isinstance(env, list) else ():
        if isinstance(entry, dict) and entry.get("name") == VISIBLE_DEVICES_ENV:
            # The last entry of a name wins, as in the kubelet.
            value = entry.get("value")
            found = (True, None) if "valueFrom" in entry else (True, str(value or ""))
    return found


def _privileged(container: Mapping[str, Any]) -> bool:
    context = container.get("securityContext")
    return isinstance(context, dict) and context.get("privileged") is True


def _claims(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources")
    return isinstance(resources, dict) and bool(resources.get("claims"))


def _how_to_ask(inventory: Inventory) -> str:
    every = sorted({*inventory.names, *served_names(inventory)})
    names = [n for n in every if not n.startswith("nvidia.com/mig")] or ["nvidia.com/gpu"]
    return f"ask for one in resources.limits ({names[0]}: 1)"


def judge(
    workload: Workload,
    found: Sequence[Found],
    *,
    where: str,
    policy: Policy,
    inventory: Inventory,
) -> Isolation:
    """The isolation findings of a pod that can be placed on a GPU node (``where``, in words).

    ``found`` are the containers that ask for a GPU (left alone). Under ``enforce`` the
    containers without the variable are listed for ``void``; under ``warn`` they are warned
    about. A pod annotated ``gpu-policy.io/isolation: disabled`` is reported and left as it is.
    """
    mode = policy.isolation.mode
    asking = {(list_name, i) for list_name, i, _, _ in found}
    annotations = workload.metadata.get("annotations")
    opted_out = (
        isinstance(annotations, dict)
        and annotations.get(ISOLATION_OPT_OUT_ANNOTATION) == ISOLATION_OPT_OUT_VALUE
    )
    findings: list[RuleResult] = []
    to_void: list[tuple[str, int, str]] = []
    open_: list[str] = []
    for list_name in _LISTS:
        items = workload.spec.get(list_name)
        for i, container in enumerate(items if isinstance(items, list) else ()):
            if not isinstance(container, dict) or (list_name, i) in asking or _claims(container):
                continue
            label = container_label(list_name, container, i)
            if _privileged(container):
                findings.append(_privileged_warning(label, where))
            is_set, value = _env_value(container)
            if opted_out:
                open_.append(label)
                continue
            if not is_set:
                if mode == "enforce":
                    to_void.append((list_name, i, label))
                else:
                    findings.append(_unisolated(label, where))
                continue
            if value is None or exposes_gpus(value):
                findings.append(_exposing(label, value, where, inventory, mode))
    if opted_out and open_:
        findings.append(
            RuleResult(
                "gpu-isolation",
                "warn",
                f"{', '.join(open_)} ask{'s' if len(open_) == 1 else ''} for no GPU and the pod "
                f"opts out of GPU isolation ({ISOLATION_OPT_OUT_ANNOTATION}: "
                f"{ISOLATION_OPT_OUT_VALUE}): on {where} they see whatever their image's "
                "NVIDIA_VISIBLE_DEVICES says (CUDA images: every GPU), outside the device "
                f"plugin's accounting; remove the annotation to isolate them ({_DOCS})",
            )
        )
    return Isolation(findings, to_void)


def _unisolated(label: str, where: str) -> RuleResult:
    return RuleResult(
        "gpu-isolation",
        "warn",
        f"{label} asks for no GPU and can be placed on {where}: with the NVIDIA runtime it "
        "sees the GPUs its image's NVIDIA_VISIBLE_DEVICES names (CUDA images: all of them), "
        "outside the device plugin's accounting; isolation mode enforce would set "
        f"NVIDIA_VISIBLE_DEVICES=void ({_DOCS})",
        label,
    )


def _exposing(
    label: str, value: str | None, where: str, inventory: Inventory, mode: str
) -> RuleResult:
    shows = "" if value is None else visible_devices(value)
    if value is None:
        what = "sets NVIDIA_VISIBLE_DEVICES from a source the webhook cannot read (valueFrom)"
        sees = "it would see whatever GPUs that value names"
    else:
        what = f"sets NVIDIA_VISIBLE_DEVICES={value if len(value) <= _SHORT else shown(value)}"
        sees = (
            "it would see every GPU of the node"
            if shows == "all"
            else f"it would see GPU(s) {shows} of the node"
        )
    return RuleResult(
        "gpu-visible-devices",
        "fail" if mode == "enforce" else "warn",
        f"{label} asks for no GPU but {what}: on {where} {sees}, outside the device plugin's "
        f"accounting (GPUs the scheduler gave to other pods); to use a GPU, "
        f"{_how_to_ask(inventory)} and remove the variable, otherwise set it to void ({_DOCS})",
        label,
    )


def _privileged_warning(label: str, where: str) -> RuleResult:
    return RuleResult(
        "gpu-privileged-without-gpu",
        "warn",
        f"{label} is privileged and asks for no GPU on {where}: a privileged container gets "
        "the host's devices whatever NVIDIA_VISIBLE_DEVICES says, so it either sees every GPU "
        "outside the device plugin's accounting or, with the NVIDIA runtime, fails with "
        "'Failed to initialize NVML: Unknown Error'; containerd's "
        "privileged_without_host_devices (of the runtime the node uses) decides which; ask for "
        f"a GPU if it needs one, or drop privileged ({_DOCS})",
        label,
    )


def with_void(spec: dict[str, Any], to_void: Sequence[tuple[str, int, str]]) -> list[str]:
    """Give each listed container ``NVIDIA_VISIBLE_DEVICES=void`` in ``spec`` (a new copy's).

    Containers are copied, never changed in place; returns the changes in words.
    """
    copied: dict[str, list[Any]] = {}
    changes = []
    for list_name, i, label in to_void:
        items = copied.get(list_name)
        if items is None:
            items = copied[list_name] = list(spec[list_name])
        container = items[i]
        env = container.get("env")
        env = list(env) if isinstance(env, list) else []
        env.append({"name": VISIBLE_DEVICES_ENV, "value": VISIBLE_DEVICES_VOID})
        items[i] = {**container, "env": env}
        changes.append(f"{label}: env {VISIBLE_DEVICES_ENV}={VISIBLE_DEVICES_VOID}")
    spec.update(copied)
    return changes
