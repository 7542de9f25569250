"""Answering an AdmissionReview: the engine's Decision in, the AdmissionReview response out.

Two endpoints, two jobs (the split Gatekeeper and Kyverno use):

* ``mutate`` (MutatingWebhookConfiguration) mutates Pods, CREATE only (a pod's resources are
  immutable afterwards), with a base64 JSON Patch (``patchType: JSONPatch``) when the engine
  changed something. It denies only what the API server's own validation would refuse before
  any validating webhook is called (a ``500m`` GPU, requests != limits, a GPU on an ephemeral
  container: ``API_SERVER_VALIDATED_RULES``) when the policy enforces, so that users read the
  policy's message and its fix instead of the API server's terse one (docs/device-plugin.md,
  "The API server"). The same holds for a pod template sent to it (it is never patched). Any
  other pod the policy rejects is sent on unchanged, and the validating webhook rejects it.
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

A pod whose request repeats but for what names it (the replicas of one workload) gets the
answer kept for its key on the same snapshot and policy, with its own uid (``memo.py``): the
same bytes and outcome as a fresh answer, without decoding it first or the engine's walk.

An exception inside the engine is a bug, not a verdict on the object. The answer is still a
well-formed AdmissionReview (the request's uid, ``allowed: false``, ``status.code`` 500 and a
short message), sent with HTTP status 500: the API server treats a non-2xx answer as a failed
call and applies the webhook's ``failurePolicy`` (Fail refuses the request, Ignore admits it
and counts it in ``apiserver_admission_webhook_fail_open_count``). An HTTP 200 with
``allowed: false`` would instead be a denial whatever the failurePolicy says. The outcome
carries the exception so that the web layer can log the traceback and count it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import orjson

from webhook.admission import response
from webhook.admission.memo import AnswerKey, KeptAnswer, answer_to_keep, lookup
from webhook.admission.request import (
    MAX_BODY_BYTES,
    AdmissionRequest,
    parse_review,
)
from webhook.policy import Decision, Inventory, Policy, review
from webhook.policy.engine.scope import POD, mutate_skip, validate_skip
from webhook.policy.inventory import keep
from webhook.policy.records import per_review_record
from webhook.policy.rules import API_SERVER_VALIDATED_RULES

Endpoint = Literal["mutate", "validate"]
Verdict = Literal["allowed", "denied", "error"]

ENDPOINTS: Final[tuple[Endpoint, ...]] = ("mutate", "validate")


@per_review_record
class Outcome:
    """One answered AdmissionReview, and what the web layer logs and counts about it.

    ``body`` is the serialized AdmissionReview to send with ``http_status``; ``response`` is
    the same document as a dict. ``skipped`` says why the engine was not asked (not a pod, a
    pod UPDATE, ...). ``error`` is the engine's exception when ``verdict`` is ``"error"``.
    ``decision`` is the engine's Decision on this object; None when the engine was not asked:
    a skipped request, or a pod answered from the answers kept for its spec (``memo``), whose
    every other field is what a fresh answer would carry. The web layer does not read it.
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


class Reply:
    """An answer to a review request: its HTTP status and bytes, and its :class:`Outcome` (what
    the server logs and counts), worked out when asked for. An answer kept for the request's
    key (``memo.py``) is sent without the request decoded, and its Outcome is made after, from
    the kept one's."""

    __slots__ = ("_later", "_outcome", "body", "http_status")

    def __init__(
        self,
        http_status: int,
        body: bytes,
        outcome: Outcome | None = None,
        later: Callable[[], Outcome] | None = None,
    ) -> None:
        """The answer's ``http_status`` and ``body``; its ``outcome``, or how to make it."""
        self.http_status = http_status
        self.body = body
        self._outcome = outcome
        self._later = later

    def outcome(self) -> Outcome:
        """The Outcome of the answer: made now for a kept answer; a fresh one is kept now for
        the next pods of its key (``reply``)."""
        if self._outcome is None:
            assert self._later is not None  # __init__ is given one or the other
            self._outcome = self._later()
        return self._outcome


def handle(
    endpoint: Endpoint,
    body: bytes | bytearray | memoryview | str | Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    max_bytes: int = MAX_BODY_BYTES,
    memo: bool = True,
) -> Outcome:
    """Parse an AdmissionReview request and answer it for ``endpoint``: :func:`reply`'s
    Outcome.

    Raises :class:`~webhook.admission.request.RequestError` when the request is malformed;
    never raises for anything the engine does (see :func:`respond`).
    """
    return reply(
        endpoint, body, policy=policy, inventory=inventory, max_bytes=max_bytes, memo=memo
    ).outcome()


def reply(
    endpoint: Endpoint,
    body: bytes | bytearray | memoryview | str | Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    max_bytes: int = MAX_BODY_BYTES,
    memo: bool = True,
) -> Reply:
    """The answer to an AdmissionReview request for ``endpoint``.

    With ``memo``, a pod CREATE in ``bytes`` as the API server writes it is answered from the
    answer kept on ``inventory`` for its key when there is one (``webhook/admission/memo.py``),
    without its bytes decoded, and its fresh answer is kept when it may be, once the Outcome is
    asked for (after the answer is sent, by the server): the same bytes and Outcome but for
    ``decision`` and the request's object (the kept pod's, the same but for what names it).
    Raises :class:`~webhook.admission.request.RequestError` when the request is malformed;
    never raises for anything the engine does (see :func:`respond`).
    """
    found = None
    if memo and type(body) is bytes and len(body) <= max_bytes:
        found = lookup(endpoint, body, policy, inventory)
    if found is None:
        outcome = respond(
            endpoint, parse_review(body, max_bytes=max_bytes), policy=policy, inventory=inventory
        )
        return Reply(outcome.http_status, outcome.body, outcome)
    held, key = found
    given = held.answers.get(key.key)
    if given is not None:
        return _kept_reply(endpoint, given, key)
    request = parse_review(body, max_bytes=max_bytes)
    outcome = respond(endpoint, request, policy=policy, inventory=inventory)

    def kept() -> Outcome:
        # Keeping the answer for the next pods of its key waits until it is sent: the server
        # asks for the Outcome after its write.
        if (made := answer_to_keep(key, request, outcome)) is not None:
            keep(held.answers, key.key, made)
        return outcome

    return Reply(outcome.http_status, outcome.body, later=kept)


def _kept_reply(endpoint: Endpoint, kept: KeptAnswer, key: AnswerKey) -> Reply:
    """The answer ``kept`` for the request of ``key``: its bytes now, its Outcome later."""
    answer = kept.body(key.uid)

    def later() -> Outcome:
        return Outcome(
            endpoint,
            kept.request_for(key),
            kept.verdict,
            kept.response_for(key.uid),
            answer,
            kept.http_status,
            kept.failed,
            kept.warned,
            kept.patched,
        )

    return Reply(kept.http_status, answer, later=later)


def respond(
    endpoint: Endpoint,
    request: AdmissionRequest,
    *,
    policy: Policy,
    inventory: Inventory,
) -> Outcome:
    """Answer a parsed request for ``endpoint`` (``"mutate"`` or ``"validate"``), afresh."""
    if endpoint == "mutate":
        return mutate(request, policy=policy, inventory=inventory)
    if endpoint == "validate":
        return validate(request, policy=policy, inventory=inventory)
    raise ValueError(f"unknown endpoint {endpoint!r}")


def _validate_skip(request: AdmissionRequest) -> str | None:
    """Why ``/validate`` does not judge ``request`` (also ``/mutate``'s rule for non-pods)."""
    return validate_skip(
        request.group,
        request.kind,
        request.sub_resource,
        request.operation,
        obj=request.object,
        old=request.old_object,
    )


def mutate(request: AdmissionRequest, *, policy: Policy, inventory: Inventory) -> Outcome:
    """The mutating endpoint: a JSON Patch when the policy changes the pod, and a denial for
    what the API server's validation would refuse with its own message."""
    pod = (request.group, request.kind) == POD
    why = (
        mutate_skip(request.group, request.kind, request.sub_resource, request.operation)
        if pod
        else _validate_skip(request)
    )
    if why is not None:
        return _outcome("mutate", request, "allowed", response.allowed(request.uid), skipped=why)
    try:
        decision = _review(request, policy, inventory)
        failed = () if decision.allowed else decision.failed
        if API_SERVER_VALIDATED_RULES.intersection(failed):
            message = decision.denial or "denied by the GPU sharing policy"
            annotations = response.audit_annotations(failed=failed)
            doc = response.denied(request.uid, message, annotations=annotations)
            return _outcome("mutate", request, "denied", doc, failed=failed, decision=decision)
        patch = decision.patch if pod else ()
        doc = response.patched(
            request.uid,
            patch,
            annotations=response.audit_annotations(mutations=decision.changes if patch else ()),
        )
        return _outcome(
            "mutate",
            request,
            "allowed",
            doc,
            patched=bool(patch),
            decision=decision,
        )
    except Exception as exc:  # an engine bug must still get an answer
        return _error("mutate", request, exc)


def validate(request: AdmissionRequest, *, policy: Policy, inventory: Inventory) -> Outcome:
    """The validating endpoint: the engine's verdict, its warnings, never a patch."""
    why = _validate_skip(request)
    if why is not None:
        return _outcome("validate", request, "allowed", response.allowed(request.uid), skipped=why)
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
        annotations = response.audit_annotations(failed=failed, warned=warned, pending=pending)
        if decision.allowed:
            doc = response.allowed(request.uid, warnings=warnings, annotations=annotations)
        else:
            message = decision.denial or "denied by the GPU sharing policy"
            doc = response.denied(request.uid, message, warnings=warnings, annotations=annotations)
        return _outcome(
            "validate",
            request,
            "allowed" if decision.allowed else "denied",
            doc,
            failed=failed,
            warned=warned,
            decision=decision,
        )
    except Exception as exc:  # an engine bug must still get an answer
        return _error("validate", request, exc)


def _review(request: AdmissionRequest, policy: Policy, inventory: Inventory) -> Decision:
    assert request.object is not None  # parse_review guarantees it on CREATE and UPDATE
    return review(
        request.object,
        policy=policy,
        inventory=inventory,
        operation=request.operation,
        namespace=request.namespace,
    )


def _outcome(
    endpoint: Endpoint,
    request: AdmissionRequest,
    verdict: Verdict,
    doc: dict[str, Any],
    **fields: Any,
) -> Outcome:
    # orjson: compact UTF-8, the answer's bytes in one call. A value it cannot serialize
    # raises here, inside the endpoint's try: an engine bug, answered as one.
    return Outcome(endpoint, request, verdict, doc, orjson.dumps(doc), **fields)


def _error(endpoint: Endpoint, request: AdmissionRequest, exc: Exception) -> Outcome:
    message = (
        f"gpu-policy could not review this {request.kind}: internal error "
        f"({type(exc).__name__}); the webhook's log has the details under uid {request.uid}"
    )
    doc = response.errored(request.uid, message, error=type(exc).__name__)
    return _outcome(endpoint, request, "error", doc, http_status=response.ERROR_CODE, error=exc)
