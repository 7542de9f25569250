"""Answering an AdmissionReview: the engine's Decision in, the AdmissionReview response out.

Two endpoints, two jobs (the split Gatekeeper and Kyverno use):

* ``mutate`` (MutatingWebhookConfiguration) only mutates. Pods, CREATE only (a pod's
  resources are immutable afterwards). It always answers ``allowed: true``, with a base64 JSON
  Patch (``patchType: JSONPatch``) when the engine changed something, and never denies: a pod
  the policy rejects is sent on unchanged, and the validating webhook rejects it.
* ``validate`` (ValidatingWebhookConfiguration) judges, and never sends a patch (the API server
  refuses one from a validating webhook). The API server calls validating webhooks after every
  mutating one, so it sees the pod as mutated: the engine's verdict on that object is final.
  It handles Pods (CREATE) and the pod templates of Deployment, ReplicaSet, StatefulSet,
  DaemonSet, Job, CronJob, ReplicationController and PodTemplate (CREATE and UPDATE), so a
  Deployment asking for the impossible is refused at ``kubectl apply``, not as a ReplicaSet
  that silently creates no pods. Everything else is allowed untouched.

Warnings (``Warning:`` lines in kubectl) come from the validating endpoint only: it sees the
final object, and the mutating endpoint's view of the same rules would be about the pod before
its mutation, worded differently and printed twice. The API server drops a warning that is not
one printable line and, once a request's warnings exceed 4096 characters, cuts every warning to
256: warnings here are made single-line and kept within those limits.

``auditAnnotations`` record the rule ids (``failed-rules``, ``warned-rules``) and what the
mutation changed (``mutations``); the API server stores them as ``<webhook name>/<key>``.

A dry run (``kubectl --dry-run=server``, server-side apply dry runs) gets exactly the answer
the real request would get: the webhook has no side effects (``sideEffects: None``).

An exception inside the engine is a bug, not a verdict on the object. The answer is still a
well-formed AdmissionReview (the request's uid, ``allowed: false``, ``status.code`` 500 and a
short message), sent with HTTP status 500: the API server treats a non-2xx answer as a failed
call and applies the webhook's ``failurePolicy`` (Fail refuses the request, Ignore admits it
and counts it in ``apiserver_admission_webhook_fail_open_count``). An HTTP 200 with
``allowed: false`` would instead be a denial whatever the failurePolicy says. The outcome
carries the exception so that the web layer can log the traceback and count it.
"""

from __future__ import annotations

import base64
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from webhook.admission.request import (
    MAX_BODY_BYTES,
    AdmissionRequest,
    parse_review,
)
from webhook.contract import ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND
from webhook.policy import Decision, Inventory, Policy, review
from webhook.policy.workloads import locate

Endpoint = Literal["mutate", "validate"]
Verdict = Literal["allowed", "denied", "error"]

ENDPOINTS: Final[tuple[Endpoint, ...]] = ("mutate", "validate")

# (API group, kind) of the objects the validating endpoint judges.
POD: Final = ("", "Pod")
VALIDATED_KINDS: Final = frozenset(
    {
        POD,
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

# The API server's warning limits (k8s.io/apiserver/pkg/endpoints/filters/warning.go): past
# 4096 characters in all, every warning of the request is cut to 256.
WARNING_TOTAL_CHARS: Final = 4096
WARNING_ITEM_CHARS: Final = 256
# Audit annotation values end up in every audit event of the request: keep them short.
ANNOTATION_VALUE_CHARS: Final = 1024

DENIED_CODE: Final = 403
ERROR_CODE: Final = 500


# Not frozen, but read-only by convention: see the note on Decision (webhook/policy/decision.py).
@dataclass(slots=True)
class Outcome:
    """One answered AdmissionReview, and what the web layer logs and counts about it.

    ``body`` is the serialized AdmissionReview to send with ``http_status``; ``response`` is
    the same document as a dict. ``skipped`` says why the engine was not asked (not a pod, a
    pod UPDATE, ...). ``error`` is the engine's exception when ``verdict`` is ``"error"``.
    """

    endpoint: Endpoint
    request: AdmissionRequest
    verdict: Verdict
    response: Mapping[str, Any]
    body: bytes
    http_status: int = 200
    failed: tuple[str, ...] = ()
    warned: tuple[str, ...] = ()
    patched: bool = False
    skipped: str | None = None
    decision: Decision | None = None
    error: Exception | None = None

    @property
    def allowed(self) -> bool:
        """``response.allowed`` of the answer."""
        return self.verdict == "allowed"


def handle(
    endpoint: Endpoint,
    body: bytes | bytearray | memoryview | str | Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    max_bytes: int = MAX_BODY_BYTES,
) -> Outcome:
    """Parse an AdmissionReview request and answer it for ``endpoint``.

    Raises :class:`~webhook.admission.request.RequestError` when the request is malformed;
    never raises for anything the engine does (see :func:`respond`).
    """
    request = parse_review(body, max_bytes=max_bytes)
    return respond(endpoint, request, policy=policy, inventory=inventory)


def respond(
    endpoint: Endpoint, request: AdmissionRequest, *, policy: Policy, inventory: Inventory
) -> Outcome:
    """Answer a parsed request for ``endpoint`` (``"mutate"`` or ``"validate"``)."""
    if endpoint == "mutate":
        return mutate(request, policy=policy, inventory=inventory)
    if endpoint == "validate":
        return validate(request, policy=policy, inventory=inventory)
    raise ValueError(f"unknown endpoint {endpoint!r}")


def mutate(request: AdmissionRequest, *, policy: Policy, inventory: Inventory) -> Outcome:
    """The mutating endpoint: allowed, with a JSON Patch when the policy changes the pod."""
    why = _mutate_skip(request)
    if why is not None:
        return _skipped("mutate", request, why)
    try:
        decision = _review(request, policy, inventory)
        response: dict[str, Any] = {"uid": request.uid, "allowed": True}
        if decision.patch:
            patch = orjson.dumps(decision.patch)
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(patch).decode("ascii")
        annotations = _annotations(mutations=decision.changes if decision.patch else ())
        if annotations:
            response["auditAnnotations"] = annotations
        doc = _review_doc(response)
        return Outcome(
            endpoint="mutate",
            request=request,
            verdict="allowed",
            response=doc,
            body=_dump(doc),
            patched=bool(decision.patch),
            decision=decision,
        )
    except Exception as exc:  # an engine bug must still get an answer
        return _error("mutate", request, exc)


def validate(request: AdmissionRequest, *, policy: Policy, inventory: Inventory) -> Outcome:
    """The validating endpoint: the engine's verdict, its warnings, never a patch."""
    why = _validate_skip(request)
    if why is not None:
        return _skipped("validate", request, why)
    try:
        decision = _review(request, policy, inventory)
        failed = decision.failed
        warned = tuple(dict.fromkeys(r.rule for r in decision.results if r.status == "warn"))
        warnings = list(decision.warnings)
        pending: tuple[str, ...] = ()
        if request.kind == "Pod" and decision.patch:
            # The engine would still change this pod: the mutating webhook did not run (not
            # installed, failed open, or a later webhook undid its work). Say so; the pod is
            # judged as it is.
            pending = decision.changes
            warnings.append(
                "gpu-policy: this pod was not mutated as the policy requires ("
                + "; ".join(pending)
                + "); check that the gpu-policy mutating webhook is installed and reachable"
            )
        response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
        if not decision.allowed:
            response["status"] = {
                "code": DENIED_CODE,
                "status": "Failure",
                "reason": "Forbidden",
                "message": decision.denial or "denied by the GPU sharing policy",
            }
        cleaned = clean_warnings(warnings)
        if cleaned:
            response["warnings"] = cleaned
        annotations = _annotations(failed=failed, warned=warned, pending=pending)
        if annotations:
            response["auditAnnotations"] = annotations
        doc = _review_doc(response)
        return Outcome(
            endpoint="validate",
            request=request,
            verdict="allowed" if decision.allowed else "denied",
            response=doc,
            body=_dump(doc),
            failed=failed,
            warned=warned,
            decision=decision,
        )
    except Exception as exc:  # an engine bug must still get an answer
        return _error("validate", request, exc)


# --------------------------------------------------------------------------------------------
# Which requests reach the engine
# --------------------------------------------------------------------------------------------


def _mutate_skip(request: AdmissionRequest) -> str | None:
    if (request.group, request.kind) != POD:
        return f"{request.kind} is not mutated (pods only)"
    if request.sub_resource:
        return f"pods/{request.sub_resource} is not mutated"
    if request.operation != "CREATE":
        return f"pod {request.operation}: pods are mutated on CREATE only"
    return None


def _validate_skip(request: AdmissionRequest) -> str | None:
    if (request.group, request.kind) not in VALIDATED_KINDS:
        return f"{request.kind} has no pod template"
    if request.sub_resource:
        return f"subresource {request.sub_resource} is not reviewed"
    if request.operation not in ("CREATE", "UPDATE"):
        return f"{request.operation} is not reviewed"
    if request.kind == "Pod" and request.operation != "CREATE":
        return "pod UPDATE: GPU resources cannot change after creation"
    if request.operation == "UPDATE":
        obj = request.object
        metadata = obj.get("metadata") if obj is not None else None
        if isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
            # Finalizer removal is an UPDATE too: never block the deletion of an object.
            return "object is being deleted"
        if request.old_object is not None and _template(request.old_object) == _template(obj):
            # A scale, a label or a status change: the pods it creates stay as they were
            # admitted, and a newer, stricter policy must not block unrelated updates.
            return "pod template unchanged"
    return None


def _template(obj: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    workload = locate(obj) if obj is not None else None
    return None if workload is None else (workload.metadata, workload.spec)


def _review(request: AdmissionRequest, policy: Policy, inventory: Inventory) -> Decision:
    assert request.object is not None  # parse_review guarantees it on CREATE and UPDATE
    return review(
        request.object,
        policy=policy,
        inventory=inventory,
        operation=request.operation,
        namespace=request.namespace,
    )


# --------------------------------------------------------------------------------------------
# Building answers
# --------------------------------------------------------------------------------------------


def _review_doc(response: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": ADMISSION_REVIEW_KIND,
        "response": response,
    }


def _dump(doc: Mapping[str, Any]) -> bytes:
    # orjson: compact UTF-8, the answer's bytes in one call.
    return orjson.dumps(doc)


def _skipped(endpoint: Endpoint, request: AdmissionRequest, why: str) -> Outcome:
    doc = _review_doc({"uid": request.uid, "allowed": True})
    return Outcome(
        endpoint=endpoint,
        request=request,
        verdict="allowed",
        response=doc,
        body=_dump(doc),
        skipped=why,
    )


def _error(endpoint: Endpoint, request: AdmissionRequest, exc: Exception) -> Outcome:
    message = (
        f"gpu-policy could not review this {request.kind}: internal error "
        f"({type(exc).__name__}); the webhook's log has the details under uid {request.uid}"
    )
    doc = _review_doc(
        {
            "uid": request.uid,
            "allowed": False,
            "status": {
                "code": ERROR_CODE,
                "status": "Failure",
                "reason": "InternalError",
                "message": message,
            },
            "auditAnnotations": {"error": type(exc).__name__[:ANNOTATION_VALUE_CHARS]},
        }
    )
    return Outcome(
        endpoint=endpoint,
        request=request,
        verdict="error",
        response=doc,
        body=_dump(doc),
        http_status=ERROR_CODE,
        error=exc,
    )


def _annotations(
    *,
    failed: Iterable[str] = (),
    warned: Iterable[str] = (),
    mutations: Iterable[str] = (),
    pending: Iterable[str] = (),
) -> dict[str, str]:
    """Audit annotations; keys are lowercase names well under the 63-character limit."""
    out: dict[str, str] = {}
    for key, values, sep in (
        ("failed-rules", failed, ","),
        ("warned-rules", warned, ","),
        ("mutations", mutations, "; "),
        ("pending-mutations", pending, "; "),
    ):
        text = sep.join(values)
        if text:
            out[key] = _cut(text, ANNOTATION_VALUE_CHARS)
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: str) -> str:
    # Control characters (newlines, tabs, escapes) make the API server drop a warning whole.
    if text.isprintable():
        return text
    return " ".join(
        "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text).split()
    )


def clean_warnings(warnings: Iterable[str]) -> list[str]:
    """Warnings the API server passes on intact: single printable lines, within its limits.

    Duplicates are dropped. When all of them together exceed 4096 characters, each is cut to
    256 (what the API server would do) and those that still do not fit are left out.
    """
    items = list(dict.fromkeys(w for w in (_one_line(w) for w in warnings) if w))
    if sum(len(w) for w in items) <= WARNING_TOTAL_CHARS:
        return items
    out: list[str] = []
    total = 0
    for item in items:
        cut = _cut(item, WARNING_ITEM_CHARS)
        if total + len(cut) > WARNING_TOTAL_CHARS:
            break
        out.append(cut)
        total += len(cut)
    return out
