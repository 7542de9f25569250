"""What is reviewed at all: every skip rule, for ``review()`` and for both admission endpoints.

Anything out of scope is allowed untouched, with the reason (the review's ``gpu-policy`` skip
result, the server's log line). The endpoints ask first, from the request's fields (its kind,
subresource and operation; a deletion, an unchanged pod template), and ``review()`` decides
the object's own scope once, as it reads its subject (``subjects.read_subject``); both use
:func:`operation_skip`, so a request is never judged by one and skipped by the other.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any, Final

from webhook.policy.claims import CLAIM_SPEC_PATHS, RESOURCE_GROUP
from webhook.policy.workloads import locate

REVIEWED_OPERATIONS: Final = ("CREATE", "UPDATE")

# (API group, kind) of the objects the validating endpoint judges: pods, pod templates, and
# DRA claims and claim templates.
POD: Final = ("", "Pod")
CLAIM_KINDS: Final = frozenset((RESOURCE_GROUP, kind) for kind in CLAIM_SPEC_PATHS)
VALIDATED_KINDS: Final = frozenset(
    {
        POD,
        *CLAIM_KINDS,
        ("", "PodTemplate"),
        ("", "ReplicationController"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
    }
)


def operation_skip(kind: str, operation: str) -> str | None:
    """Why ``operation`` on a ``kind`` is not reviewed, or None when it is.

    Pod templates are judged on CREATE and UPDATE (as the pods they will create); a pod only on
    CREATE, since its resources cannot change afterwards, and so are ResourceClaims and
    ResourceClaimTemplates, whose spec is immutable.
    """
    if operation not in REVIEWED_OPERATIONS:
        return f"{operation} is not reviewed"
    if kind == "Pod" and operation != "CREATE":
        return f"pod {operation}: GPU resources cannot change after creation"
    if kind in CLAIM_SPEC_PATHS and operation != "CREATE":
        return f"{kind} {operation}: its spec cannot change after creation"
    return None


def skip_reason(
    kind: str,
    operation: str,
    namespace: str | None,
    *,
    asks_for_gpu: bool,
    exempt: Container[str | None],
) -> str | None:
    """Why ``review()`` does not judge this pod or pod template, or None when it does."""
    if not asks_for_gpu:
        return "asks for no GPU"
    if namespace in exempt:
        return f"namespace {namespace} is exempt"
    return operation_skip(kind, operation)


def mutate_skip(group: str, kind: str, sub_resource: str, operation: str) -> str | None:
    """Why the mutating endpoint leaves a request alone: it mutates pods, on CREATE only."""
    if (group, kind) != POD:
        return f"{kind} is not mutated (pods only)"
    if sub_resource:
        return f"pods/{sub_resource} is not mutated"
    if operation != "CREATE":
        return f"pod {operation}: pods are mutated on CREATE only"
    return None


def validate_skip(
    group: str,
    kind: str,
    sub_resource: str,
    operation: str,
    *,
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
) -> str | None:
    """Why the validating endpoint leaves a request alone, or None when it judges it."""
    if (group, kind) not in VALIDATED_KINDS:
        return f"{kind} has no pod template and is no claim"
    if sub_resource:
        return f"subresource {sub_resource} is not reviewed"
    why = operation_skip(kind, operation)
    if why is not None or operation != "UPDATE":
        return why
    metadata = obj.get("metadata") if obj is not None else None
    if isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
        # Finalizer removal is an UPDATE too: never block the deletion of an object.
        return "object is being deleted"
    if old is not None and _template(old) == _template(obj):
        # A scale, a label or a status change: the pods it creates stay as they were
        # admitted, and a newer, stricter policy must not block unrelated updates.
        return "pod template unchanged"
    return None


def _template(obj: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    workload = locate(obj) if obj is not None else None
    return None if workload is None else (workload.metadata, workload.spec)
