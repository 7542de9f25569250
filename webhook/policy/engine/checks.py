"""The per-container rules: which containers ask for a GPU, and whether each asks well.

A container that passes becomes an :class:`Ask` (one kind of GPU, a whole count); one that
fails yields its rule results instead. Nothing here looks at nodes beyond the names the
inventory advertises (for the "did you mean" hint).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from webhook.policy.decision import RuleResult
from webhook.policy.inventory import Inventory
from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.records import per_review_record
from webhook.policy.resources import PREFIX, ResourceForm, parse_resource
from webhook.policy.supply.served import offered, served_names
from webhook.policy.workloads import container_label, containers

# A request or limit the container does not state (None is a value a manifest can hold).
MISSING: Any = object()
_GPU_PREFIXES = (f"{PREFIX}gpu", f"{PREFIX}mig")


@per_review_record
class Entry:
    """One ``nvidia.com/`` resource in one container, as written."""

    name: str
    form: ResourceForm | None
    request: Any
    limit: Any


@per_review_record
class Ask:
    """What one container asks for, once its rules pass: one kind of GPU, ``count`` of them."""

    list_name: str
    index: int
    label: str
    entry: Entry
    form: ResourceForm
    count: int


# (list name, index, container, entries) of one container that names an nvidia.com/ resource.
Found = tuple[str, int, Mapping[str, Any], list[Entry]]


def _entries(container: Mapping[str, Any]) -> list[Entry]:
    """The container's GPU entries: its ``nvidia.com/`` names, requests first, then the limits
    not requested; other ``nvidia.com/`` resources (NICs, vGPU, RDMA) are not ours to judge.

    Plain loops over the two sections, no comprehension per section: every container of every
    pod reviewed comes here, and each comprehension is one more function a review after a
    pause runs (docs/performance.md, "Tenth round").
    """
    resources = container.get("resources")
    if not resources or not isinstance(resources, dict):
        return []  # the usual sidecar: no resources at all
    asked = resources.get("requests")
    limits = resources.get("limits")
    asked = asked if isinstance(asked, dict) else {}
    limits = limits if isinstance(limits, dict) else {}
    entries: list[Entry] = []
    for in_limits, section in ((False, asked), (True, limits)):
        for name in section:
            if not isinstance(name, str) or not name.startswith(PREFIX):
                continue  # the usual container: cpu and memory only
            if in_limits and name in asked:
                continue
            form = parse_resource(name)
            if form is not None or name.startswith(_GPU_PREFIXES):
                entries.append(
                    Entry(name, form, asked.get(name, MISSING), limits.get(name, MISSING))
                )
    return entries


def gpu_containers(spec: Mapping[str, Any]) -> list[Found]:
    """(list name, index, container, GPU entries) of the containers that ask for a GPU.

    A GPU entry is a device-plugin GPU name, or an ``nvidia.com/gpu...`` or ``nvidia.com/mig...``
    name it does not advertise (judged by the resource-name rule).

    One walk over the containers: most pods reaching a webhook ask for no GPU at all, and
    those that do have one or two GPU containers among their sidecars.
    """
    found = []
    for list_name, i, container in containers(spec):
        entries = _entries(container)
        if entries:
            found.append((list_name, i, container, entries))
    return found


def check_container(
    list_name: str,
    index: int,
    container: Mapping[str, Any],
    entries: list[Entry],
    inventory: Inventory,
) -> Ask | tuple[RuleResult, ...]:
    """The container's :class:`Ask`, or the rules it fails (``entries``: its GPU entries).

    Every result this returns is a failure: a container that asks well has no finding.
    """
    label = container_label(list_name, container, index)
    if list_name == "ephemeralContainers":
        names = ", ".join(e.name for e in entries)
        return (
            RuleResult(
                "gpu-ephemeral-container",
                "fail",
                f"{label} asks for {names}: ephemeral containers cannot be given devices; "
                "remove the GPU resources from it (debug from a container that already has "
                "the GPU)",
                label,
            ),
        )
    failures: tuple[RuleResult, ...] = ()
    count = 0
    for entry in entries:
        found = _unknown_name(entry.name, label, inventory) if entry.form is None else None
        if found is None:
            counted = _count(entry, label)
            if isinstance(counted, int):
                count = counted
                continue
            failures += counted
        else:
            failures += (found,)
    forms = [e for e in entries if e.form is not None]
    if len(forms) > 1:
        names = ", ".join(e.name for e in forms)
        failures += (
            RuleResult(
                "gpu-container-forms",
                "fail",
                f"{label} asks for {names}: one container gets one kind of GPU (a MIG profile, "
                "a shared or an exclusive GPU); split it into containers or keep one of them",
                label,
            ),
        )
    if failures:
        return failures
    entry = forms[0]
    assert entry.form is not None
    return Ask(list_name, index, label, entry, entry.form, count)


def _unknown_name(name: str, label: str, inventory: Inventory) -> RuleResult:
    known = [*inventory.names, *served_names(inventory), "nvidia.com/gpu", "nvidia.com/gpu.shared"]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return RuleResult(
        "gpu-resource-name",
        "fail",
        f"{label} asks for {name}, which no NVIDIA device plugin advertises; {hint}"
        f"the cluster offers {offered(inventory)}",
        label,
    )


def _quantity(entry: Entry, part: str, raw: Any, label: str) -> int | RuleResult:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError as exc:
        return RuleResult("gpu-quantity", "fail", f"{label}: {part} {entry.name}: {exc}", label)


def _count(entry: Entry, label: str) -> int | tuple[RuleResult, ...]:
    """The devices ``entry`` asks for (its limit, else its request), or why it cannot say."""
    request = limit = None
    if entry.request is not MISSING:
        request = _quantity(entry, "requests", entry.request, label)
    if entry.limit is not MISSING:
        limit = _quantity(entry, "limits", entry.limit, label)
    if isinstance(request, RuleResult) or isinstance(limit, RuleResult):
        return tuple(r for r in (request, limit) if isinstance(r, RuleResult))
    if request is not None and limit is not None and request != limit:
        return (
            RuleResult(
                "gpu-requests-equal-limits",
                "fail",
                f"{label} asks for {entry.name} requests {request} but limits "
                f"{limit}: GPUs cannot be overcommitted, set requests and limits to "
                f"the same number (e.g. both {limit})",
                label,
            ),
        )
    counted = limit if limit is not None else request
    assert isinstance(counted, int)  # an entry states a request, a limit or both
    return counted
