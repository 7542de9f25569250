"""The answers to repeated pod reviews, kept per snapshot: a repeated pod costs its decoding, a
key and the answer's bytes, not the engine.

The API server sends the pods of one workload (a ReplicaSet's, a Job's replicas) one after
another, and they differ only in what names them. Their answer does not: ``review()`` reads
the object, the policy, the snapshot (the inventory), the operation and the namespace, and the
handler reads besides only the request's kind, sub-resource and uid. So an answer to a pod
CREATE is kept under :func:`answer_key` (the endpoint, the operation, the namespace and the
object without the fields that only name it) and given again, with the new request's uid, to
the next pod under the same key, on the same snapshot and the same Policy object
(docs/performance.md, "Eighth round").

The key is worked out only for a pod whose *family* (the endpoint, the namespace and the
``generateName``: the pods a controller names from one owner) was seen before on the same
snapshot and policy (:func:`answer_family`): the first pod of each workload, which has no
answer to find, pays nothing for the memo (a key costs ~50-120 us of CPU after a pause: the
object walked and encoded once more), the second pays the key and has its answer kept, the
third and later are answered from it. A pod whose family repeats but its spec does not (a
DaemonSet's, whose node affinity names its node) pays the key every time and finds nothing.

Left out of the key: ``metadata.name``, ``metadata.uid``, ``metadata.creationTimestamp`` and
``metadata.managedFields`` (:data:`IDENTITY`), and the names of the pod's volumes and volume
mounts. The API server gives every pod its own uid, creation time and (for a generateName) name
before the validating webhooks are called, its managed fields (with a time, to the second)
before the mutating ones, and its ServiceAccount admission a token volume of a random name
(docs/performance.md, "Eighth round", cites the code). The engine reads the name only to word
its messages (``Subject.what``); nothing in ``webhook/policy`` or here reads the others, nor a
volume. An answer whose text (its bytes, and its patch's JSON) holds one of the texts left out
(a denial message that names the pod, say) is not kept. ``generateName`` stays in the key
(messages name a pod by it when it has no name yet, as at the mutating webhook), as do the
labels, the annotations, ``ownerReferences`` and the rest of the spec.

Not kept either: a pod that names resource claims (its review reads the namespace's claims,
as the allocator's kept verdicts leave them out: ``webhook/policy/engine/fit.py``), an answer
with the warning of a device search cut short (it depends on the machine's speed), an error,
a request the endpoint skips (cheap anyway), and any request but a pod CREATE. The quota
charge (``webhook/policy/quota/charge.py``) and the dual-publish guard
(``webhook/policy/engine/dual.py``) read only the object, the policy and the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from webhook.admission.request import AdmissionRequest
from webhook.policy import Inventory, Policy
from webhook.policy.engine.fit import unproven
from webhook.policy.engine.scope import mutate_skip
from webhook.policy.inventory import keep
from webhook.policy.records import per_review_record
from webhook.policy.workloads import CONTAINER_LISTS

if TYPE_CHECKING:  # the handler builds its Outcomes from this module's records
    from webhook.admission.handler import Outcome, Verdict

#: The metadata fields left out of the key: they name the pod (see the module's docstring).
IDENTITY: Final = frozenset({"name", "uid", "creationTimestamp", "managedFields"})

# The fit_groups entry that holds the KeptAnswers of one Policy object: a reload gives a new
# Policy object, and what was kept for the old one is dropped with it.
_ANSWERS: Final = "answers to pod reviews"
# What every answer starts with up to its uid's value: response.py builds the document as
# apiVersion, kind, response, and the response with its uid first.
_UID_AT: Final = b'"response":{"uid":'


@per_review_record
class KeptAnswer:
    """An answer kept for the pods of one key: the document and its bytes around the uid, and
    what the server logs and counts about it (``Outcome``'s fields of the same names)."""

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


@per_review_record
class KeptAnswers:
    """What is kept for one Policy object on one snapshot: the answers by key, and the pod
    families seen (:func:`answer_family`), both bounded by ``webhook.policy.inventory.keep``."""

    policy: Policy
    answers: dict[bytes, KeptAnswer]
    families: dict[tuple[str, str | None, str | None], bool]

    def seen_before(self, family: tuple[str, str | None, str | None]) -> bool:
        """True when a pod of ``family`` came before; the family is noted as seen either way."""
        if family in self.families:
            return True
        keep(self.families, family, True)
        return False


def answer_family(
    endpoint: str, request: AdmissionRequest
) -> tuple[str, str | None, str | None] | None:
    """The family of ``request``'s pod at ``endpoint`` (the endpoint, the namespace, the
    ``generateName``), whose second pod on a snapshot gets a key; None when its answer is never
    kept: not a pod CREATE, an object not decoded into dicts, a pod that names resource claims."""
    why = mutate_skip(request.group, request.kind, request.sub_resource, request.operation)
    if why is not None:  # not a pod CREATE: skipped by /mutate, by /validate but for CREATE
        return None
    obj = request.object
    metadata = obj.get("metadata") if obj is not None else None
    spec = obj.get("spec") if obj is not None else None
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        return None
    if spec.get("resourceClaims"):
        return None
    generate = metadata.get("generateName")
    return endpoint, request.namespace, generate if isinstance(generate, str) else None


@per_review_record
class AnswerKey:
    """The key of a pod's answer (``key``), and the texts it left out (``left_out``: the pod's
    name, uid, ..., which a kept answer must not hold)."""

    key: bytes
    left_out: list[object]


def lookup(
    endpoint: str, request: AdmissionRequest, policy: Policy, inventory: Inventory
) -> tuple[KeptAnswers, AnswerKey] | None:
    """What is kept for ``policy`` on ``inventory`` and the key of ``request``'s answer; None
    when the request is answered afresh without a key: its answer is never kept
    (:func:`answer_family`), its pod is the first of its family (no answer to find), or its
    key cannot be written."""
    family = answer_family(endpoint, request)
    if family is None:
        return None
    held = kept_answers(policy, inventory)
    if not held.seen_before(family):
        return None
    key = answer_key(endpoint, request)
    return None if key is None else (held, key)


def answer_key(endpoint: str, request: AdmissionRequest) -> AnswerKey | None:
    """The key of the answer to ``request`` at ``endpoint``, a request :func:`answer_family`
    gave a family: everything the answer is read from but the policy and the snapshot, as
    JSON; None when orjson cannot write it (an object nested deeper than it writes, 254
    levels, though the request's JSON reader took it: such a pod is answered afresh).
    ``request`` is decoded from JSON text, its object dicts, lists and scalars alone."""
    obj = request.object
    assert obj is not None  # answer_family: a pod CREATE, its metadata and spec dicts
    metadata, spec = obj["metadata"], obj["spec"]
    # The object is decoded JSON text, whose JSON is its content: two objects that differ in
    # anything but what _unnamed leaves out never share a key (equal content in another order
    # only costs a review). orjson, not repr as the allocator's verdict key: ~2 us for a 4 KB
    # pod, not ~20.
    unnamed, left_out = _unnamed(obj, metadata, spec)
    try:
        key = orjson.dumps((endpoint, request.operation, request.namespace, unnamed))
    except orjson.JSONEncodeError:  # nested too deep for orjson's writer
        return None
    return AnswerKey(key, left_out)


def _unnamed(
    obj: Mapping[str, Any], metadata: Mapping[str, Any], spec: Mapping[str, Any]
) -> tuple[dict[str, Any], list[object]]:
    """``obj`` without what only names the pod, and what was left out: its metadata but
    :data:`IDENTITY`, and the names of its volumes and volume mounts (the API server's
    ServiceAccount admission gives every pod a token volume of a random name,
    ``kube-api-access-<5 characters>``; nothing in ``webhook/policy`` reads a volume)."""
    left_out: list[object] = [metadata.get(k) for k in IDENTITY]
    out = {**obj, "metadata": {k: v for k, v in metadata.items() if k not in IDENTITY}}
    volumes = spec.get("volumes")
    if not isinstance(volumes, list) or not volumes:
        return out, left_out
    bare = dict(spec)
    bare["volumes"] = [_without_name(v, left_out) for v in volumes]
    for name in CONTAINER_LISTS:
        containers = spec.get(name)
        if isinstance(containers, list):
            bare[name] = [_unmounted(c, left_out) for c in containers]
    out["spec"] = bare
    return out, left_out


def _without_name(item: object, left_out: list[object]) -> object:
    if not isinstance(item, dict) or "name" not in item:
        return item
    left_out.append(item["name"])
    return {**item, "name": None}


def _unmounted(container: object, left_out: list[object]) -> object:
    mounts = container.get("volumeMounts") if isinstance(container, dict) else None
    if not isinstance(container, dict) or not isinstance(mounts, list):
        return container
    return {**container, "volumeMounts": [_without_name(m, left_out) for m in mounts]}


def kept_answers(policy: Policy, inventory: Inventory) -> KeptAnswers:
    """What is kept for ``policy`` on the snapshot ``inventory``: its answers by
    :func:`answer_key` and the families seen."""
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
    if not request.uid or at < 0 or body.count(uid[1:-1]) != 1:
        return None
    # The patch is sent in base64: its JSON is read for the names.
    try:
        text = body + orjson.dumps(decision.patch) if outcome.patched else body
    except orjson.JSONEncodeError:  # a patch value nested too deep for orjson's writer
        return None
    for value in key.left_out:  # the texts among them (managedFields, a list, is never read)
        if isinstance(value, str) and value and orjson.dumps(value)[1:-1] in text:
            return None
    start = at + len(_UID_AT)
    return KeptAnswer(
        outcome.verdict,
        outcome.response,
        body[:start],
        body[start + len(uid) :],
        outcome.http_status,
        outcome.failed,
        outcome.warned,
        outcome.patched,
    )
