"""The answers to repeated pod reviews, kept per snapshot: a repeated pod costs a few searches
of its request's bytes and the answer's bytes, not its decoding nor the engine.

The API server sends the pods of one workload (a ReplicaSet's, a Job's replicas) one after
another, and they differ only in what names them. Their answer does not: ``review()`` reads
the object, the policy, the snapshot (the inventory), the operation and the namespace, and the
handler reads besides only the request's kind, sub-resource and uid. So the answer to a pod
CREATE is kept under :func:`answer_key` (the endpoint and the request's bytes but for the texts
that only name the pod) and given again, with the new request's uid, to the next pod whose
request has the same key, on the same snapshot and the same Policy object
(docs/performance.md, "Eighth round" and "Ninth round"). The key is read only from a pod
family's second pod on (:func:`answer_key`: the first pod of each workload has no answer to
find), whose answer is kept; the third and later pods get it, without their request decoded
(``handler.reply``).

The key is read from the request's bytes, before they are decoded. The API server writes an
AdmissionReview with Go's JSON encoder: compact, each struct's fields in their declared order,
so a pod CREATE's request always starts the same way (:func:`_request_head`) and its pod's
metadata too (:func:`_metadata_head`). Left out of the key, each at the place the bytes are
read there: the request's ``uid`` and ``name``; the pod's ``metadata.name``, ``metadata.uid``,
``metadata.creationTimestamp`` and the times of its ``managedFields``; and the name of the
ServiceAccount admission's token volume (``kube-api-access-<5 random characters>``) in that
volume and in the mounts of it. The API server gives every pod its own uid, creation time and
(for a generateName) name before the validating webhooks are called, its managed fields (with a
time, to the second) before the mutating ones, and its ServiceAccount admission a token volume
of a random name (docs/performance.md, "Eighth round", cites the code). The engine reads the
name only to word its messages (``Subject.what``); nothing in ``webhook/policy`` or here reads
the others, nor a volume. An answer whose text (its bytes, and its patch's JSON) holds one of
the texts left out (a denial message that names the pod, say) is not kept.

Every other byte is in the key (labels, annotations, ``generateName``, ``ownerReferences``, the
spec, the request's user and options), cut at the places left out: two requests with one key
are the same bytes but for those texts, each a whole JSON string without an escape (a uid's, a
name's, a time's). A request not read so (from another writer, or of another shape) gets no key
and is answered afresh: the memo only ever costs it those searches.

Not kept either: a pod that names resource claims (its review reads the namespace's claims,
as the allocator's kept verdicts leave them out: ``webhook/policy/engine/fit.py``), an answer
with the warning of a device search cut short (it depends on the machine's speed), an error,
a request the endpoint skips (cheap anyway), and any request but a pod CREATE. The quota
charge (``webhook/policy/quota/charge.py``) and the dual-publish guard
(``webhook/policy/engine/dual.py``) read only the object, the policy and the snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from webhook.admission.request import AdmissionRequest
from webhook.policy import Inventory, Policy
from webhook.policy.engine.fit import unproven
from webhook.policy.inventory import keep
from webhook.policy.records import per_review_record

if TYPE_CHECKING:  # the handler builds its Outcomes from this module's records
    from webhook.admission.handler import Outcome, Verdict

# The fit_groups entry that holds the KeptAnswers of one Policy object: a reload gives a new
# Policy object, and what was kept for the old one is dropped with it.
_ANSWERS: Final = "answers to pod reviews"
# What every answer starts with up to its uid's value: response.py builds the document as
# apiVersion, kind, response, and the response with its uid first.
_UID_AT: Final = b'"response":{"uid":'

# The bytes of a pod CREATE's AdmissionReview as the API server writes it (admission/v1
# AdmissionReview and AdmissionRequest, their fields in order; ``subResource`` and
# ``requestSubResource`` omitted when empty, ``name`` when the pod has only a generateName),
# around the texts read between them.
_REQUEST_UID: Final = (
    b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"'
)
_POD: Final = (
    b',"kind":{"group":"","version":"v1","kind":"Pod"},'
    b'"resource":{"group":"","version":"v1","resource":"pods"},'
    b'"requestKind":{"group":"","version":"v1","kind":"Pod"},'
    b'"requestResource":{"group":"","version":"v1","resource":"pods"},'
)
_CREATE: Final = b',"operation":"CREATE","userInfo":{'
# The request's object, after its user: UserInfo holds strings, lists of strings and a map of
# lists of strings, so these bytes (no JSON string holds an unescaped quote) start the object.
_OBJECT_AT: Final = b'},"object":{"kind":"Pod","apiVersion":"v1","metadata":{'
# The end of the metadata: no key in ObjectMeta or in the maps, lists and managed fields it
# holds is "spec" (the managed fields' keys are prefixed: "f:spec").
_SPEC_AT: Final = b'},"spec":{'
# managedFields is ObjectMeta's last field; its entries' "time" keys are the only ones there.
_MANAGED_AT: Final = b',"managedFields":['
_TIME_AT: Final = b'"time":"'
# The ServiceAccount admission's token volume (a Volume: its name, then its source; the name
# is "kube-api-access-" and 5 characters) and the mounts of it (a VolumeMount: name, readOnly,
# mountPath).
_NAMED: Final = b'{"name":"'  # an object whose first field is its name: a Volume, a mount
_TOKEN_AT: Final = _NAMED + b"kube-api-access-"
_TOKEN_NAME: Final = len("kube-api-access-") + 5
_TOKEN_SOURCE: Final = b'","projected":{"sources":[{"serviceAccountToken":'
_MOUNT_TAIL: Final = b'","readOnly":true,"mountPath":"'
_CLAIMS: Final = b'"resourceClaims":['
_DIGITS: Final = b"0123456789"


@per_review_record
class KeptAnswer:
    """An answer kept for the pods of one key: the document and its bytes around the uid, and
    what the server logs and counts about it (``Outcome``'s fields of the same names, and the
    request of the pod it was made for)."""

    request: AdmissionRequest
    verdict: Verdict
    response: Mapping[str, Any]
    head: bytes
    tail: bytes
    http_status: int
    failed: tuple[str, ...]
    warned: tuple[str, ...]
    patched: bool

    def body(self, uid: str) -> bytes:
        """The answer's bytes for the request ``uid``: the uid spliced in, nothing re-encoded."""
        return self.head + orjson.dumps(uid) + self.tail

    def response_for(self, uid: str) -> dict[str, Any]:
        """The answer's document for the request ``uid`` (shallow copies: read-only)."""
        return {**self.response, "response": {**self.response["response"], "uid": uid}}

    def request_for(self, key: AnswerKey) -> AdmissionRequest:
        """The request of ``key``: the kept one's, with ``key``'s uid and name. Every other
        field the server reads (kind, namespace, operation, dry run, the object's
        generateName) is in the key; the object is the kept pod's, the same but for what names
        it (read-only)."""
        return dataclasses.replace(self.request, uid=key.uid, name=key.name)


@per_review_record
class KeptAnswers:
    """What is kept for one Policy object on one snapshot: the answers by key and the pod
    families seen (:func:`answer_key`), both bounded by ``webhook.policy.inventory.keep``."""

    policy: Policy
    answers: dict[tuple[bytes | str, ...], KeptAnswer]
    families: dict[tuple[str, bytes], bool]

    def seen_before(self, family: tuple[str, bytes]) -> bool:
        """True when a pod of ``family`` came before; the family is noted as seen either way."""
        if family in self.families:
            return True
        keep(self.families, family, True)
        return False


@per_review_record
class AnswerKey:
    """The key of a request's answer (``key``: the endpoint and the request's bytes cut where
    a text was left out), the request's uid and name (as ``parse_review`` reads them), and the
    texts left out but the uid, which a kept answer has spliced in (the pod's name, uid, ...,
    which a kept answer must not hold)."""

    key: tuple[bytes | str, ...]
    uid: str
    name: str | None
    left_out: list[bytes]


def answer_key(endpoint: str, body: bytes, held: KeptAnswers | None = None) -> AnswerKey | None:
    """The key of the answer at ``endpoint`` to the request in ``body``, read from its bytes
    (the module's docstring); None when they are not a pod CREATE as the API server writes it,
    or its pod names resource claims. With ``held``, None too for the first pod of its family
    there (the endpoint and the ``generateName``: the pods a controller names from one
    owner), which is noted: a workload's first pod, which has no answer to find, pays only
    the heads read, and its answer is not kept; the second pays the key and has its answer
    kept; the third and later are answered from it."""
    # Plain byte comparisons and searches: a first version's regular expressions took ~15 us
    # of CPU more after a pause (docs/performance.md, "Ninth round").
    cuts: list[tuple[int, int]] = []
    at = _request_head(body, cuts)
    named = len(cuts) == 2  # the request's uid, then its name when it has one
    at = body.find(_OBJECT_AT, at) if at > 0 else -1
    at, family = _metadata_head(body, at + len(_OBJECT_AT), cuts) if at > 0 else (-1, b"")
    if at > 0 and held is not None and not held.seen_before((endpoint, family)):
        return None
    spec_at = body.find(_SPEC_AT, at) if at > 0 else -1
    if spec_at < 0 or body.find(_CLAIMS, spec_at) >= 0:
        return None
    time_at = body.find(_MANAGED_AT, at, spec_at)
    while time_at >= 0:
        time_at = body.find(_TIME_AT, time_at, spec_at)
        if time_at >= 0:
            time_at = _text(body, time_at + len(_TIME_AT), cuts)
    _token(body, spec_at, cuts)
    uid = body[cuts[0][0] : cuts[0][1]]
    name = body[cuts[1][0] : cuts[1][1]] if named else b""
    if not uid.isascii() or not name.isascii():  # JSON text of other characters: decoded
        return None
    return _cut(endpoint, body, cuts, uid.decode(), name.decode() or None)


def _request_head(body: bytes, cuts: list[tuple[int, int]]) -> int:
    """Where the request's user starts, its uid and name noted in ``cuts`` (the uid first);
    -1 when ``body`` does not start as a pod CREATE's AdmissionReview."""
    if not body.startswith(_REQUEST_UID):
        return -1
    at = _text(body, len(_REQUEST_UID), cuts)
    if at < 0 or not body.startswith(_POD, at):
        return -1
    at += len(_POD)
    if body.startswith(b'"name":"', at):
        at = _text(body, at + 8, cuts) + 1  # and the comma
    if at <= 0 or not body.startswith(b'"namespace":"', at):
        return -1
    at = _text(body, at + 13)
    return at + len(_CREATE) if at > 0 and body.startswith(_CREATE, at) else -1


def _metadata_head(body: bytes, at: int, cuts: list[tuple[int, int]]) -> tuple[int, bytes]:
    """Where the head of the metadata starting at ``at`` ends (name, generateName, namespace,
    uid, generation, creationTimestamp: ObjectMeta's first fields, empty ones omitted), its
    name, uid and creation time noted in ``cuts``, and its generateName's bytes (empty when it
    has none); -1 when it is not read so."""
    generate = b""
    if body.startswith(b'"name":"', at):
        at = _text(body, at + 8, cuts) + 1  # and the comma
    if at > 0 and body.startswith(b'"generateName":"', at):
        after = _text(body, at + 16)
        generate = body[at + 16 : after - 1] if after > 0 else b""
        at = after + 1  # and the comma
    if at <= 0 or not body.startswith(b'"namespace":"', at):
        return -1, generate
    at = _text(body, at + 13)
    if at > 0 and body.startswith(b',"uid":"', at):
        at = _text(body, at + 8, cuts)
    if at > 0 and body.startswith(b',"generation":', at):
        digits = body[at + 14 : at + 34]
        at += 14 + len(digits) - len(digits.lstrip(_DIGITS))
    if at > 0 and body.startswith(b',"creationTimestamp":"', at):
        at = _text(body, at + 22, cuts)
    return at, generate


def _text(body: bytes, at: int, cuts: list[tuple[int, int]] | None = None) -> int:
    """Where the JSON string whose content starts at ``at`` ends (after its quote), its
    content noted in ``cuts``; -1 when it holds an escape (so its end is not the next quote)."""
    end = body.find(b'"', at)
    if end < 0 or body.find(b"\\", at, end) >= 0:
        return -1
    if cuts is not None:
        cuts.append((at, end))
    return end + 1


def _token(body: bytes, spec_at: int, cuts: list[tuple[int, int]]) -> None:
    """Note in ``cuts`` the name of the pod's token volume (the first volume of that name and
    source) in the volume and in the mounts of it."""
    at = body.find(_TOKEN_AT, spec_at)
    if at < 0:
        return
    name_at = at + len(_NAMED)
    end = name_at + _TOKEN_NAME
    name = body[name_at:end]
    if b'"' in name or b"\\" in name or not body.startswith(_TOKEN_SOURCE, end):
        return
    cuts.append((name_at, end))
    mount = _NAMED + name + _MOUNT_TAIL
    found = body.find(mount, spec_at)
    while found >= 0:
        name_at = found + len(_NAMED)
        cuts.append((name_at, name_at + len(name)))
        found = body.find(mount, name_at)


def _cut(
    endpoint: str, body: bytes, cuts: list[tuple[int, int]], uid: str, name: str | None
) -> AnswerKey:
    """The key of ``body`` cut at ``cuts`` (the first, the request's uid, is the first in
    ``body`` too), for the request ``uid`` and ``name``."""
    cuts.sort()
    pieces: list[bytes | str] = [endpoint]
    left_out: list[bytes] = []
    last = 0
    for start, end in cuts:
        pieces.append(body[last:start])
        left_out.append(body[start:end])
        last = end
    pieces.append(body[last:])
    return AnswerKey(tuple(pieces), uid, name, left_out[1:])


def lookup(
    endpoint: str, body: bytes, policy: Policy, inventory: Inventory
) -> tuple[KeptAnswers, AnswerKey] | None:
    """What is kept for ``policy`` on ``inventory`` and the key of the answer to ``body`` at
    ``endpoint``; None when that answer is never kept, or the pod is the first of its family
    there (:func:`answer_key`)."""
    held = kept_answers(policy, inventory)
    key = answer_key(endpoint, body, held)
    return None if key is None else (held, key)


def kept_answers(policy: Policy, inventory: Inventory) -> KeptAnswers:
    """What is kept for ``policy`` on the snapshot ``inventory``: its answers by
    :func:`answer_key`, and the pod families seen."""
    # A worker's threads share the snapshot: each dict operation here and in keep() is atomic,
    # and two threads that replace the record at once lose at most a kept answer.
    held = inventory.fit_groups.get(_ANSWERS)
    if held is None or held.policy is not policy:
        held = inventory.fit_groups[_ANSWERS] = KeptAnswers(policy, {}, {})
    kept: KeptAnswers = held
    return kept


def answer_to_keep(
    key: AnswerKey, request: AdmissionRequest, outcome: Outcome
) -> KeptAnswer | None:
    """``outcome``, a fresh answer to ``request`` (of ``key``), as an answer for the other pods
    of its key;
    None when it must not be kept: an error, a skip, a search cut short, an answer whose text
    holds a text the key left out (the pod's name, uid, a volume's name) or the request's uid
    anywhere but in its place."""
    decision = outcome.decision
    if outcome.verdict == "error" or outcome.skipped is not None or decision is None:
        return None
    if unproven(decision.results):
        return None
    body = outcome.body
    uid = orjson.dumps(request.uid)
    at = body.find(_UID_AT + uid)
    if at < 0 or body.count(uid[1:-1]) != 1:
        return None
    # The patch is sent in base64: its JSON is read for the names.
    try:
        text = body + orjson.dumps(decision.patch) if outcome.patched else body
    except orjson.JSONEncodeError:  # a patch value nested too deep for orjson's writer
        return None
    # The texts left out need no escaping in JSON: as they are in the request, so in an answer.
    if any(value in text for value in key.left_out):
        return None
    start = at + len(_UID_AT)
    return KeptAnswer(
        request,
        outcome.verdict,
        outcome.response,
        body[:start],
        body[start + len(uid) :],
        outcome.http_status,
        outcome.failed,
        outcome.warned,
        outcome.patched,
    )
