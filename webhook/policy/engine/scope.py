"""Which objects and operations a review judges; everything else is skipped, with the reason.

The admission endpoints apply the same operation rule (:func:`operation_skip`) before they
ask the engine, so a request is never judged by one and skipped by the other.
"""

from __future__ import annotations

from collections.abc import Container

REVIEWED_OPERATIONS = ("CREATE", "UPDATE")


def operation_skip(kind: str, operation: str) -> str | None:
    """Why ``operation`` on a ``kind`` is not reviewed, or None when it is.

    Pod templates are judged on CREATE and UPDATE (as the pods they will create); a pod only on
    CREATE, since its resources cannot change afterwards.
    """
    if operation not in REVIEWED_OPERATIONS:
        return f"{operation} is not reviewed"
    if kind == "Pod" and operation != "CREATE":
        return f"pod {operation}: GPU resources cannot change after creation"
    return None


def skip_reason(
    kind: str,
    operation: str,
    namespace: str | None,
    *,
    has_pod_spec: bool,
    asks_for_gpu: bool,
    exempt: Container[str | None],
) -> str | None:
    """Why the engine does not judge this object, or None when it does."""
    if not has_pod_spec:
        return f"{kind or 'this object'} has no pod spec"
    if not asks_for_gpu:
        return "asks for no GPU"
    if namespace in exempt:
        return f"namespace {namespace} is exempt"
    return operation_skip(kind, operation)
