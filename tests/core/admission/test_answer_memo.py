"""The answers to repeated pods kept per snapshot (webhook/admission/memo.py).

* For any sequence of pod reviews (pods differing in names, namespaces, labels, annotations,
  containers, resources, node selection, tolerations, volumes, claims; both endpoints; CREATE
  and UPDATE), answered once with the memo on one snapshot and once without it on a snapshot
  that has answered nothing: the same bytes and the same outcome, field by field, for the server.
* A repeated pod is answered without the engine, with its own uid; pods that differ in their
  annotations or labels are each judged; a denial that names its pod is the pod's own.
* A new snapshot, or a reloaded policy, gives fresh answers.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.objects import (
    FIXTURES,
    as_sent,
    ctr,
    gfd_node,
    gpu_node,
    new_uid,
    pod,
    replica,
    review,
    token_mount,
    token_volume,
)
from tests.support.properties import examples
from webhook.admission import Outcome, handle, reply
from webhook.admission import handler as handler_module
from webhook.admission.memo import answer_key
from webhook.contract import (
    ISOLATION_OPT_OUT_ANNOTATION,
    MIG_ANNOTATION,
    PRODUCT_ANNOTATION,
    SHARING_ANNOTATION,
)
from webhook.files import load_policy
from webhook.policy import Inventory, Policy
from webhook.policy.supply.assemble import assemble

POLICY = load_policy(None)
NODES = [
    gfd_node("l20-a", "l20", gpus=2, replicas=8),
    gpu_node("a100-a", "a100-80", gpus=8, heavy=False),
]
# A search budget no machine runs out of: a search cut short is never kept, and would make the
# two runs of the property differ by the machine's speed, not by the memo.
SNAPSHOT = assemble(POLICY, nodes=NODES, source="test nodes", fit_budget_s=60.0)
# The fields of an Outcome the server reads (metrics, the log line, the answer).
SERVED = ("verdict", "failed", "warned", "patched", "skipped", "body", "http_status", "response")


def fresh(inventory: Inventory = SNAPSHOT) -> Inventory:
    """A snapshot object of the same content that has answered nothing yet."""
    return dataclasses.replace(inventory, fit_groups={})


def body_of(
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    namespace: str = "ml",
    uid: str = "",
    sent: bool = True,
) -> bytes:
    """The request for ``obj``: as the API server writes it (``sent``), or as plain JSON of
    another order, which the memo's patterns do not read."""
    old = obj if operation == "UPDATE" else None
    doc = review(obj, operation=operation, old=old, namespace=namespace, uid=uid or new_uid())
    return as_sent(doc) if sent else json.dumps(doc).encode()


def served(outcome: Outcome) -> dict[str, Any]:
    return {field: getattr(outcome, field) for field in SERVED}


def logged(outcome: Outcome) -> dict[str, Any]:
    """What the server logs of a review's request (webhook/server/logs.py, ReviewLog)."""
    r = outcome.request
    fields = ("uid", "kind", "namespace", "display_name", "operation", "dry_run")
    return {field: getattr(r, field) for field in fields}


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the objects the engine judged, in order."""
    seen: list[str] = []
    real = handler_module.review

    def counted(obj: Any, **kwargs: Any) -> Any:
        seen.append(str((obj.get("metadata") or {}).get("name")))
        return real(obj, **kwargs)

    monkeypatch.setattr(handler_module, "review", counted)
    yield seen


# --------------------------------------------------------------------------------------------
# The property
# --------------------------------------------------------------------------------------------

quantities = st.sampled_from([1, 2, 8, 9, "1", "500m", 0])
containers = st.lists(
    st.tuples(quantities, st.booleans(), st.booleans()), min_size=1, max_size=2
).map(
    lambda cs: [
        ctr(
            f"c{i}",
            limits={"nvidia.com/gpu": q} if gpu else {"cpu": "1"},
            **({"volumeMounts": [token_mount("t")]} if mounted else {}),
        )
        for i, (q, gpu, mounted) in enumerate(cs)
    ]
)
# One annotation a step, of those the engine reads and one it does not.
ANNOTATIONS = [
    (SHARING_ANNOTATION, "shared"),
    (SHARING_ANNOTATION, "exclusive"),
    (SHARING_ANNOTATION, "bogus"),
    (PRODUCT_ANNOTATION, "NVIDIA-L20"),
    (MIG_ANNOTATION, "1g.10gb"),
    (ISOLATION_OPT_OUT_ANNOTATION, "disabled"),
    ("note", "kept"),
]
node_selectors = st.sampled_from(
    [
        None,
        {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"},
        {"nvidia.com/gpu.product": "T4"},
        {"disk": "ssd"},  # no node has it: "Pod <name> fits no node", a denial that names it
    ]
)
tolerations = st.sampled_from(
    [None, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]]
)


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A pod without what each step draws of it: containers, resources, node selection,
    tolerations, maybe claims."""
    spec: dict[str, Any] = {}
    if (selector := draw(node_selectors)) is not None:
        spec["nodeSelector"] = selector
    if (tolerated := draw(tolerations)) is not None:
        spec["tolerations"] = tolerated
    claims = ["gpu"] if draw(st.booleans()) and draw(st.booleans()) else ()
    return pod(*draw(containers), name="", namespace=None, claims=claims, **spec)


@dataclasses.dataclass(frozen=True)
class Step:
    """One review of a sequence: which of the drawn pods, named how, where, at which endpoint
    and for which operation. ``name`` "" is a pod with only a generateName; ``token`` names
    its token volume (the API server's, a name of its own per pod). ``sent``: the request's
    bytes as the API server writes them, or in another order."""

    index: int
    name: str
    token: str
    namespace: str
    annotations: dict[str, str]
    labels: dict[str, str]
    endpoint: str
    operation: str
    sent: bool = True

    def pod(self, specs: list[dict[str, Any]]) -> dict[str, Any]:
        """The pod of this step."""
        obj: dict[str, Any] = json.loads(json.dumps(specs[self.index % len(specs)]))
        meta = obj["metadata"]
        meta["namespace"] = self.namespace
        if self.name:
            meta["name"] = self.name
            meta["uid"] = new_uid()
        else:
            meta.pop("name", None)
            meta["generateName"] = "train-"
        if self.annotations:
            meta["annotations"] = self.annotations
        if self.labels:
            meta["labels"] = self.labels
        mounted = [c for c in obj["spec"]["containers"] if c.get("volumeMounts")]
        for c in mounted:
            c["volumeMounts"] = [token_mount(self.token)]
        if mounted:
            obj["spec"]["volumes"] = [token_volume(self.token)]
        return obj


# Drawn so that steps often repeat a pod (the same spec, namespace, endpoint and operation) or
# change one thing of it: a pod answered from the memo, or one that must not be, is what the
# property is about.
steps = st.lists(
    st.builds(
        Step,
        index=st.sampled_from([0, 0, 0, 1, 2]),
        name=st.sampled_from(["train-0", "train-1", "c0", ""]),
        token=st.sampled_from(["abcde", "c0", "fghij"]),
        namespace=st.sampled_from(["ml", "ml", "ml", "team-b", "kube-system"]),
        annotations=st.sampled_from([*[{}] * 6, *({k: v} for k, v in ANNOTATIONS)]),
        labels=st.sampled_from([{}, {}, {}, {}, {"app": "a"}, {"app": "b"}]),
        endpoint=st.sampled_from(["mutate", "validate"]),
        operation=st.sampled_from(["CREATE", "CREATE", "CREATE", "UPDATE"]),
        sent=st.sampled_from([True, True, True, False]),
    ),
    min_size=2,
    max_size=12,
)


# A repeated pod at each endpoint, and a denial that names its pod (no node has the label).
@example(
    specs=[replica("x")],
    sequence=[
        Step(0, name, token, "ml", {}, {}, endpoint, "CREATE")
        for endpoint in ("mutate", "validate")
        for name, token in (("train-0", "abcde"), ("train-1", "fghij"), ("train-2", "klmno"))
    ],
)
@example(
    specs=[replica("x", nodeSelector={"disk": "ssd"})],
    sequence=[
        Step(0, "train-0", "abcde", "ml", {}, {}, "validate", "CREATE"),
        Step(0, "train-1", "fghij", "ml", {}, {}, "validate", "CREATE"),
        Step(0, "train-2", "klmno", "ml", {}, {}, "validate", "CREATE"),
    ],
)
@given(specs=st.lists(pod_specs(), min_size=1, max_size=3), sequence=steps)
@settings(
    max_examples=examples(300, ci=50),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_answers_with_the_memo_are_the_answers_without(
    specs: list[dict[str, Any]], sequence: list[Step]
) -> None:
    kept = fresh()
    for step in sequence:
        body = body_of(
            step.pod(specs), operation=step.operation, namespace=step.namespace, sent=step.sent
        )
        endpoint: Any = step.endpoint
        with_memo = handle(endpoint, body, policy=POLICY, inventory=kept)
        without = handle(endpoint, body, policy=POLICY, inventory=fresh(), memo=False)
        assert served(with_memo) == served(without)
        assert logged(with_memo) == logged(without)
        hit = with_memo.decision is None and with_memo.skipped is None
        event(f"{step.endpoint}: {'kept answer' if hit else 'fresh'}, {with_memo.verdict}")


# --------------------------------------------------------------------------------------------
# A repeated pod, and pods that differ where the key must see it
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_a_repeated_pod_is_answered_without_the_engine_with_its_own_uid(
    endpoint: str, judged: list[str]
) -> None:
    snapshot = fresh()
    uids = [new_uid() for _ in range(4)]
    replicas = [replica(f"train-{i}", token=f"tok{i}x") for i in range(4)]
    outcomes = [
        handle(endpoint, body_of(r, uid=u), policy=POLICY, inventory=snapshot)  # type: ignore[arg-type]
        for r, u in zip(replicas, uids, strict=True)
    ]
    # The first pod of a family pays nothing for the memo and has nothing kept; the second
    # has its answer kept; the third and fourth are answered from it.
    assert judged == ["train-0", "train-1"]
    assert [json.loads(o.body)["response"]["uid"] for o in outcomes] == uids
    assert [o.response["response"]["uid"] for o in outcomes] == uids
    assert all(o.verdict == "allowed" for o in outcomes)
    assert len({o.body.replace(u.encode(), b"") for o, u in zip(outcomes, uids, strict=True)}) == 1
    assert outcomes[1].decision is not None
    assert all(o.decision is None for o in outcomes[2:])


def test_the_first_pod_of_each_workload_is_judged(judged: list[str]) -> None:
    # Pods of three workloads (generateName), the same spec otherwise, in turns: each
    # workload's first pod is judged, its second too (its answer is then kept), the rest not.
    snapshot = fresh()
    for i in range(4):
        for owner in ("a-", "b-", "c-"):
            obj = replica(f"{owner}{i}")
            obj["metadata"]["generateName"] = owner
            handle("mutate", body_of(obj), policy=POLICY, inventory=snapshot)
    assert judged == ["a-0", "b-0", "c-0", "a-1", "b-1", "c-1"]


def _patch(outcome: Outcome) -> list[dict[str, Any]]:
    return list(json.loads(base64.b64decode(outcome.response["response"]["patch"])))


@pytest.mark.parametrize("first", ["annotated", "plain"])
def test_pods_that_differ_only_in_annotations_get_each_their_own_answer(first: str) -> None:
    snapshot = fresh()
    pods = {
        "annotated": replica("train-0", annotations={SHARING_ANNOTATION: "bogus"}),
        "plain": replica("train-1"),
    }
    order = [first, *(k for k in pods if k != first)]
    # A pod of the same family first, so that the first of the two has its answer kept.
    handle("validate", body_of(replica("warm")), policy=POLICY, inventory=snapshot)
    handle("mutate", body_of(replica("warm")), policy=POLICY, inventory=snapshot)
    validated = {
        k: handle("validate", body_of(pods[k]), policy=POLICY, inventory=snapshot) for k in order
    }
    assert validated["annotated"].verdict == "denied"
    assert "gpu-intent" in validated["annotated"].failed
    assert validated["plain"].verdict == "allowed"
    # The mutating answers too: a pod with annotations gets the mutation's annotation added
    # to them, one without gets the annotations added whole.
    pods["annotated"]["metadata"]["annotations"] = {"note": "kept"}
    mutated = {
        k: handle("mutate", body_of(pods[k]), policy=POLICY, inventory=snapshot) for k in order
    }
    paths = {k: [op["path"] for op in _patch(o)] for k, o in mutated.items()}
    assert "/metadata/annotations" in paths["plain"]
    assert "/metadata/annotations" not in paths["annotated"]
    assert any(p.startswith("/metadata/annotations/") for p in paths["annotated"])


def test_pods_that_differ_only_in_labels_are_each_judged(judged: list[str]) -> None:
    # No rule reads a pod's labels today, so their answers are alike; the key holds them all
    # the same, so that a rule that reads them later cannot be handed another pod's answer.
    snapshot = fresh()
    labels = ("a", "b", "a", "b", "a")
    for i, value in enumerate(labels):
        obj = replica(f"train-{i}")
        obj["metadata"]["labels"] = {"app": value}
        handle("validate", body_of(obj), policy=POLICY, inventory=snapshot)
    # train-0 is its family's first (nothing kept); train-1 and train-2 are kept, one per
    # label; train-3 and train-4 get the answer of their own label.
    assert judged == ["train-0", "train-1", "train-2"]


def test_a_denial_that_names_its_pod_is_each_pods_own(judged: list[str]) -> None:
    snapshot = fresh()
    messages = []
    for name in ("big-0", "big-1"):
        # No node has the label: "[gpu-node-selection] Pod <name> fits no node, ..."
        obj = replica(name, nodeSelector={"disk": "ssd"})
        outcome = handle("validate", body_of(obj), policy=POLICY, inventory=snapshot)
        assert outcome.verdict == "denied"
        messages.append(outcome.response["response"]["status"]["message"])
    assert "Pod big-0" in messages[0] and "Pod big-1" in messages[1]
    assert judged == ["big-0", "big-1"]


# --------------------------------------------------------------------------------------------
# The API server's own bytes
# --------------------------------------------------------------------------------------------

REPLICAS = FIXTURES / "v1.36.2" / "replicas"


def _replicas(endpoint: str) -> tuple[bytes, bytes, bytes]:
    """The two captured replicas' requests at ``endpoint``, and the second's again with a
    request uid of its own (a third replica's request, but for its pod's names)."""
    first, second = ((REPLICAS / f"{endpoint}-{i}.json").read_bytes() for i in (1, 2))
    uid = json.loads(second)["request"]["uid"]
    return first, second, second.replace(uid.encode(), new_uid().encode())


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_two_replicas_as_the_api_server_sent_them_share_an_answer(
    endpoint: str, judged: list[str]
) -> None:
    first, second, third = _replicas(endpoint)
    keys = [answer_key(endpoint, b) for b in (first, second)]
    assert keys[0] is not None and keys[1] is not None and keys[0].key == keys[1].key
    snapshot = fresh()
    got = [handle(endpoint, b, policy=POLICY, inventory=snapshot) for b in (first, second, third)]  # type: ignore[arg-type]
    # The family's first pod is judged and not kept, the second is judged and kept, the
    # third gets its answer.
    assert len(judged) == 2
    alone = handle(endpoint, third, policy=POLICY, inventory=fresh(), memo=False)  # type: ignore[arg-type]
    assert served(got[2]) == served(alone)
    assert json.loads(got[2].body)["response"]["uid"] == json.loads(third)["request"]["uid"]
    # Any other byte changed, a label's value here, gives a key of its own.
    other = second.replace(b'"labels":{"app":"held"}', b'"labels":{"app":"hold"}')
    changed = answer_key(endpoint, other)
    assert other != second and changed is not None and changed.key != keys[1].key


def test_a_kept_answer_is_given_without_its_request_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second, third = _replicas("validate")
    snapshot = fresh()
    for body in (first, second):
        handle("validate", body, policy=POLICY, inventory=snapshot)
    decoded: list[object] = []
    real = handler_module.parse_review

    def counted(body: Any, **kwargs: Any) -> Any:
        decoded.append(body)
        return real(body, **kwargs)

    monkeypatch.setattr(handler_module, "parse_review", counted)
    answer = reply("validate", third, policy=POLICY, inventory=snapshot)
    request = json.loads(third)["request"]
    assert answer.http_status == 200
    assert json.loads(answer.body)["response"]["uid"] == request["uid"]
    # What the server logs and counts, made after the answer: this pod's uid and name.
    outcome = answer.outcome()
    assert decoded == []
    assert outcome.body == answer.body
    assert (outcome.request.uid, outcome.request.name) == (request["uid"], request["name"])
    assert logged(outcome) == logged(handle("validate", third, policy=POLICY, inventory=fresh()))


# --------------------------------------------------------------------------------------------
# A new snapshot, a reloaded policy
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_a_pod_nested_deeper_than_a_key_can_be_written_is_answered_as_without_the_memo(
    endpoint: str,
) -> None:
    # The request's reader takes JSON nested up to 1024 levels, orjson writes 254: such a pod
    # is answered as without the memo, not with an error, and so are the next of its key.
    snapshot = fresh()
    deep: Any = None
    for _ in range(300):
        deep = {"a": deep}
    outcomes = []
    for i in range(3):
        obj = replica(f"train-{i}")
        obj["metadata"]["annotations"] = {"note": "deep"}
        obj["spec"]["containers"][0]["env"] = [{"name": "DEEP", "value": "x", "extra": deep}]
        body = body_of(obj)
        got = handle(endpoint, body, policy=POLICY, inventory=snapshot)  # type: ignore[arg-type]
        alone = handle(endpoint, body, policy=POLICY, inventory=fresh(), memo=False)  # type: ignore[arg-type]
        assert served(got) == served(alone)
        outcomes.append(got)
    assert all(o.verdict == "allowed" and o.http_status == 200 for o in outcomes)


def test_a_new_snapshot_gives_fresh_answers() -> None:
    with_t4 = assemble(
        POLICY, nodes=[*NODES, gfd_node("t4-a", "t4")], source="with a T4", fit_budget_s=60.0
    )
    wants_t4 = {"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"}}
    first = handle("validate", body_of(replica("a", **wants_t4)), policy=POLICY, inventory=with_t4)
    later = fresh()  # the cluster's T4 node is gone
    then = handle("validate", body_of(replica("b", **wants_t4)), policy=POLICY, inventory=later)
    assert first.verdict == "allowed"
    assert then.verdict == "denied"


def _reloaded(policy: Policy, **changes: Any) -> Policy:
    return dataclasses.replace(policy, **changes)


def test_a_reloaded_policy_gives_fresh_answers() -> None:
    snapshot = fresh()
    refused = replica("train-0", annotations={SHARING_ANNOTATION: "bogus"})
    before = handle("validate", body_of(refused), policy=POLICY, inventory=snapshot)
    audit = _reloaded(POLICY, enforcement="audit")
    after = handle("validate", body_of(refused), policy=audit, inventory=snapshot)
    enforce = _reloaded(audit, enforcement="enforce")
    back = handle("validate", body_of(refused), policy=enforce, inventory=snapshot)
    assert before.verdict == "denied"
    assert after.verdict == "allowed" and after.warned == ("gpu-intent",)
    assert back.verdict == "denied"
