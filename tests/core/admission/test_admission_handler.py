"""webhook.admission on the captured requests of API servers 1.28 and 1.36, and on templates.

Table-driven: every captured fixture for both endpoints, as captured (no GPU) and with GPU
resources put into copies; every pod-template kind; the rules of the answer (uid echoed, patch
only from /mutate and only on Pod CREATE, denial message, warnings, audit annotations) and an
engine bug answered as a well-formed AdmissionReview with HTTP 500.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import re
from typing import Any

import jsonpatch
import pytest

from tests.objects import (
    TEMPLATE_KINDS,
    fixture_ids,
    load,
    pod_spec,
    review,
    with_gpu,
    workload,
)
from tests.support.paths import REPO
from webhook.admission import (
    Outcome,
    clean_warnings,
    handle,
    parse_review,
)
from webhook.admission import handler as handler_module
from webhook.contract import ADMISSION_API_VERSION
from webhook.policy import Inventory, Policy
from webhook.policy import review as engine_review

FIXTURES = fixture_ids()
FIXTURE_IDS = [f"{v}-{e}-{c}" for v, e, c in FIXTURES]
# Audit annotation keys: the API server stores them as "<webhook name>/<key>", a qualified name.
ANNOTATION_KEY = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture
def engine(example_policy: Policy, example_inventory: Inventory) -> dict[str, Any]:
    return {"policy": example_policy, "inventory": example_inventory}


def unseen(engine: dict[str, Any]) -> dict[str, Any]:
    """``engine`` on a copy of its snapshot that has answered nothing yet: a pod answered in
    an earlier test would otherwise get its kept answer (webhook/admission/memo.py), and a
    broken engine would not be reached."""
    return {**engine, "inventory": dataclasses.replace(engine["inventory"], fit_groups={})}


def answer(endpoint: str, doc: dict[str, Any], engine: dict[str, Any]) -> Outcome:
    """Answer ``doc`` from its bytes, as the web layer does, and check the envelope."""
    body = json.dumps(doc).encode()
    outcome = handle(endpoint, body, **engine)  # type: ignore[arg-type]
    check_envelope(outcome, doc)
    return outcome


def check_envelope(outcome: Outcome, doc: dict[str, Any]) -> None:
    """What every answer must satisfy for the API server to accept it."""
    sent = json.loads(outcome.body)
    assert sent == outcome.response
    assert sent["apiVersion"] == ADMISSION_API_VERSION
    assert sent["kind"] == "AdmissionReview"
    assert set(sent) == {"apiVersion", "kind", "response"}
    response = sent["response"]
    assert response["uid"] == doc["request"]["uid"]
    assert response["allowed"] is outcome.allowed
    assert ("patch" in response) == ("patchType" in response)
    if "patch" in response:
        assert outcome.endpoint == "mutate"
        assert response["patchType"] == "JSONPatch"
    if not response["allowed"]:
        assert response["status"]["code"] in (403, 500)
        assert response["status"]["message"]
    for key in response.get("auditAnnotations", {}):
        assert ANNOTATION_KEY.match(key) and len(key) <= 63, key
    for value in response.get("auditAnnotations", {}).values():
        assert isinstance(value, str)
    for warning in response.get("warnings", []):
        assert warning.isprintable() and "\n" not in warning
    assert sum(len(w) for w in response.get("warnings", [])) <= 4096
    assert outcome.http_status == (500 if outcome.verdict == "error" else 200)


def patch_ops(outcome: Outcome) -> list[dict[str, Any]]:
    return list(json.loads(base64.b64decode(outcome.response["response"]["patch"])))


# --------------------------------------------------------------------------------------------
# The captured requests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "captured_for", "case"), FIXTURES, ids=FIXTURE_IDS)
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_captured_request_without_gpu_is_allowed_untouched(
    version: str, captured_for: str, case: str, endpoint: str, engine: dict[str, Any]
) -> None:
    doc = load(version, captured_for, case)
    outcome = answer(endpoint, doc, engine)
    response = outcome.response["response"]
    assert response == {"uid": doc["request"]["uid"], "allowed": True}
    assert outcome.request.dry_run is doc["request"]["dryRun"]
    assert outcome.request.operation == doc["request"]["operation"]


@pytest.mark.parametrize(("version", "captured_for", "case"), FIXTURES, ids=FIXTURE_IDS)
def test_mutate_gpu_pod_patch_applies_to_give_the_engines_object(
    version: str, captured_for: str, case: str, engine: dict[str, Any]
) -> None:
    doc = with_gpu(load(version, captured_for, case), 1)
    outcome = answer("mutate", doc, engine)
    response = outcome.response["response"]
    assert response["allowed"] is True
    assert "warnings" not in response  # the validating endpoint speaks for the rules
    obj = doc["request"]["object"]
    if doc["request"]["operation"] != "CREATE":
        assert "patch" not in response
        assert outcome.skipped is not None and "CREATE only" in outcome.skipped
        return
    decision = engine_review(
        obj, operation="CREATE", namespace=doc["request"]["namespace"], **engine
    )
    assert decision.mutated is not None
    ops = patch_ops(outcome)
    assert ops == list(decision.patch)
    assert jsonpatch.apply_patch(obj, ops) == decision.mutated
    assert outcome.patched
    assert response["auditAnnotations"]["mutations"] == "; ".join(decision.changes)


@pytest.mark.parametrize(("version", "captured_for", "case"), FIXTURES, ids=FIXTURE_IDS)
def test_validate_sees_the_mutated_pod_and_allows_it(
    version: str, captured_for: str, case: str, engine: dict[str, Any]
) -> None:
    doc = with_gpu(load(version, captured_for, case), 1)
    if doc["request"]["operation"] == "CREATE":
        mutated = answer("mutate", doc, engine)
        doc["request"]["object"] = jsonpatch.apply_patch(
            doc["request"]["object"], patch_ops(mutated)
        )
    outcome = answer("validate", doc, engine)
    assert outcome.response["response"] == {"uid": doc["request"]["uid"], "allowed": True}


@pytest.mark.parametrize(("version", "captured_for", "case"), FIXTURES, ids=FIXTURE_IDS)
def test_shared_request_above_one_is_denied_by_validate_only(
    version: str, captured_for: str, case: str, engine: dict[str, Any]
) -> None:
    doc = with_gpu(load(version, captured_for, case), 2)
    mutate = answer("mutate", doc, engine)
    assert mutate.allowed and "patch" not in mutate.response["response"]
    outcome = answer("validate", doc, engine)
    response = outcome.response["response"]
    if doc["request"]["operation"] == "UPDATE":
        # A pod's resources cannot change: pod UPDATEs are not judged.
        assert response == {"uid": doc["request"]["uid"], "allowed": True}
        return
    assert outcome.verdict == "denied"
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"].startswith("[gpu-shared-request-above-one] ")
    assert "UnexpectedAdmissionError" in response["status"]["message"]
    assert response["auditAnnotations"] == {"failed-rules": "gpu-shared-request-above-one"}
    assert outcome.failed == ("gpu-shared-request-above-one",)
    assert "patch" not in response and "patchType" not in response


@pytest.mark.parametrize("version", ["v1.28.7", "v1.36.2"])
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
@pytest.mark.parametrize("quantity", [1, 2])
def test_dry_run_gets_exactly_the_answer_of_a_real_request(
    version: str, endpoint: str, quantity: int, engine: dict[str, Any]
) -> None:
    real = with_gpu(load(version, endpoint, "pod-create"), quantity)
    dry = with_gpu(load(version, endpoint, "pod-dryrun-create"), quantity)
    assert dry["request"]["dryRun"] is True and real["request"]["dryRun"] is False
    # Same pod, same uid: the answers must be byte for byte the same.
    dry["request"]["object"] = copy.deepcopy(real["request"]["object"])
    dry["request"]["uid"] = real["request"]["uid"]
    assert answer(endpoint, dry, engine).body == answer(endpoint, real, engine).body


def test_ssa_create_is_a_create_and_gets_a_patch(engine: dict[str, Any]) -> None:
    doc = with_gpu(load("v1.36.2", "mutate", "pod-dryrun-ssa-create"), 1)
    assert doc["request"]["options"]["kind"] == "CreateOptions"
    outcome = answer("mutate", doc, engine)
    assert outcome.patched and outcome.request.dry_run


def test_unmutated_gpu_pod_on_validate_gets_a_warning(engine: dict[str, Any]) -> None:
    doc = with_gpu(load("v1.36.2", "validate", "pod-create"), 1)
    outcome = answer("validate", doc, engine)
    response = outcome.response["response"]
    assert response["allowed"] is True
    assert len(response["warnings"]) == 1
    assert "not mutated as the policy requires" in response["warnings"][0]
    assert "tolerations" in response["auditAnnotations"]["pending-mutations"]


def test_denial_lists_every_failed_rule(engine: dict[str, Any]) -> None:
    doc = load("v1.36.2", "validate", "pod-create")
    containers = doc["request"]["object"]["spec"]["containers"]
    first = containers[0]
    first["resources"] = {
        "limits": {"nvidia.com/gpu": 2},
        "requests": {"nvidia.com/gpu": 1},
    }
    second = copy.deepcopy(first)
    second["name"] = "helper"
    second["resources"] = {"limits": {"nvidia.com/gpuu": 1}}
    containers.append(second)
    outcome = answer("validate", doc, engine)
    message = outcome.response["response"]["status"]["message"]
    assert outcome.failed == ("gpu-resource-name", "gpu-requests-equal-limits")
    assert "[gpu-resource-name]" in message and "[gpu-requests-equal-limits]" in message
    assert 'container "helper"' in message and 'container "c"' in message
    assert "did you mean nvidia.com/gpu" in message
    annotations = outcome.response["response"]["auditAnnotations"]
    assert annotations["failed-rules"] == "gpu-resource-name,gpu-requests-equal-limits"


def test_warn_enforcement_allows_with_warnings(example_policy: Policy) -> None:
    policy = dataclasses.replace(example_policy, enforcement="warn")
    from webhook.policy import inventory_from_policy

    engine = {"policy": policy, "inventory": inventory_from_policy(policy)}
    doc = with_gpu(load("v1.36.2", "validate", "pod-create"), 2)
    outcome = answer("validate", doc, engine)
    response = outcome.response["response"]
    assert response["allowed"] is True
    assert response["warnings"][0].startswith("[gpu-shared-request-above-one] ")
    assert response["auditAnnotations"] == {"warned-rules": "gpu-shared-request-above-one"}
    assert outcome.warned == ("gpu-shared-request-above-one",)
    assert outcome.failed == ()


GPU = "nvidia.com/gpu"
EPHEMERAL = {"name": "debug", "image": "busybox", "resources": {"limits": {GPU: 1}}}


@pytest.mark.parametrize(
    ("resources", "ephemeral", "rule"),
    [
        ({"limits": {GPU: "500m"}, "requests": {GPU: "500m"}}, False, "gpu-quantity"),
        ({"limits": {GPU: 2}, "requests": {GPU: 1}}, False, "gpu-requests-equal-limits"),
        ({"limits": {GPU: 1}}, True, "gpu-ephemeral-container"),
    ],
    ids=["half-a-gpu", "requests-below-limits", "gpu-on-ephemeral-container"],
)
@pytest.mark.parametrize("kind", ["Pod", *sorted(TEMPLATE_KINDS)])
def test_mutate_denies_what_the_api_servers_validation_would_refuse(
    resources: dict[str, Any], ephemeral: bool, rule: str, kind: str, engine: dict[str, Any]
) -> None:
    """The API server validates between the webhooks: /mutate gives our message first."""
    spec = pod_spec()
    spec["containers"][0]["resources"] = resources
    if ephemeral:
        spec["ephemeralContainers"] = [copy.deepcopy(EPHEMERAL)]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    doc = review(obj if kind == "Pod" else workload(kind, spec=spec))
    mutate = answer("mutate", doc, engine)
    validate = answer("validate", doc, engine)
    assert mutate.verdict == "denied"
    assert rule in mutate.failed
    response = mutate.response["response"]
    assert f"[{rule}]" in response["status"]["message"]
    assert response["status"] == validate.response["response"]["status"]
    assert response["auditAnnotations"]["failed-rules"] == ",".join(mutate.failed)
    assert "patch" not in response


def test_mutate_does_not_deny_under_warn_enforcement(example_policy: Policy) -> None:
    policy = dataclasses.replace(example_policy, enforcement="warn")
    from webhook.policy import inventory_from_policy

    engine = {"policy": policy, "inventory": inventory_from_policy(policy)}
    doc = with_gpu(load("v1.36.2", "mutate", "pod-create"), "500m")
    assert answer("mutate", doc, engine).allowed


# --------------------------------------------------------------------------------------------
# Pod templates and other objects
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(TEMPLATE_KINDS))
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_template_asking_for_two_shared_gpus_is_denied(
    kind: str, operation: str, engine: dict[str, Any]
) -> None:
    obj = workload(kind, spec=pod_spec(2))
    old = workload(kind, spec=pod_spec(1)) if operation == "UPDATE" else None
    doc = review(obj, operation=operation, old=old)
    outcome = answer("validate", doc, engine)
    assert outcome.verdict == "denied"
    assert "[gpu-shared-request-above-one]" in outcome.response["response"]["status"]["message"]
    # Templates are never patched: the pods they create are.
    assert answer("mutate", doc, engine).response["response"] == {
        "uid": doc["request"]["uid"],
        "allowed": True,
    }


@pytest.mark.parametrize("kind", sorted(TEMPLATE_KINDS))
def test_template_that_will_be_mutated_is_allowed_with_a_warning(
    kind: str, engine: dict[str, Any]
) -> None:
    outcome = answer("validate", review(workload(kind, spec=pod_spec(1))), engine)
    response = outcome.response["response"]
    assert response["allowed"] is True
    assert any(f"pods created from this {kind} will be changed" in w for w in response["warnings"])
    assert "patch" not in response


@pytest.mark.parametrize("kind", sorted(TEMPLATE_KINDS))
def test_update_with_unchanged_template_is_not_judged(kind: str, engine: dict[str, Any]) -> None:
    # Admitted under an older policy; a scale or label change must not be blocked now.
    old = workload(kind, spec=pod_spec(2))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "vision"}
    outcome = answer("validate", review(new, operation="UPDATE", old=old), engine)
    assert outcome.allowed and outcome.skipped == "pod template unchanged"


def test_update_of_an_object_being_deleted_is_not_judged(engine: dict[str, Any]) -> None:
    old = workload("Deployment", spec=pod_spec(1))
    new = workload("Deployment", spec=pod_spec(2))
    new["metadata"]["deletionTimestamp"] = "2026-11-22T02:00:00Z"
    outcome = answer("validate", review(new, operation="UPDATE", old=old), engine)
    assert outcome.allowed and outcome.skipped == "object is being deleted"


@pytest.mark.parametrize(
    ("group", "kind", "resource"),
    [
        ("", "ConfigMap", "configmaps"),
        ("", "Service", "services"),
        ("example.com", "Deployment", "deployments"),  # a CRD that borrowed a name
        ("kubeflow.org", "PyTorchJob", "pytorchjobs"),
    ],
)
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_other_objects_are_allowed_untouched(
    group: str, kind: str, resource: str, endpoint: str, engine: dict[str, Any]
) -> None:
    obj = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": {"template": {"spec": pod_spec(8)}},
    }
    doc = review(obj, group=group, kind=kind, resource=resource)
    outcome = answer(endpoint, doc, engine)
    assert outcome.response["response"] == {"uid": doc["request"]["uid"], "allowed": True}
    assert outcome.skipped


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_delete_and_connect_are_allowed(
    operation: str, endpoint: str, engine: dict[str, Any]
) -> None:
    pod = with_gpu(load("v1.36.2", "validate", "pod-create"), 2)["request"]["object"]
    doc = review(None, operation=operation, old=pod, kind="Pod", group="", resource="pods")
    outcome = answer(endpoint, doc, engine)
    assert outcome.allowed and outcome.skipped


@pytest.mark.parametrize("sub_resource", ["status", "ephemeralcontainers", "binding"])
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_pod_subresources_are_allowed(
    sub_resource: str, endpoint: str, engine: dict[str, Any]
) -> None:
    pod = with_gpu(load("v1.36.2", "validate", "pod-create"), 2)["request"]["object"]
    doc = review(pod, operation="CREATE", sub_resource=sub_resource)
    outcome = answer(endpoint, doc, engine)
    assert outcome.allowed and outcome.skipped


def test_pod_with_generate_name_is_named_for_the_log(engine: dict[str, Any]) -> None:
    doc = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
    doc["request"]["name"] = ""
    meta = doc["request"]["object"]["metadata"]
    del meta["name"]
    meta["generateName"] = "train-"
    assert answer("mutate", doc, engine).request.display_name == "train-*"


# --------------------------------------------------------------------------------------------
# The example requests of `make run`
# --------------------------------------------------------------------------------------------


def test_example_requests(engine: dict[str, Any]) -> None:
    gpu_pod = json.loads((REPO / "examples" / "admissionreview-gpu-pod.json").read_text())
    denied = json.loads((REPO / "examples" / "admissionreview-gpu-pod-denied.json").read_text())
    assert answer("mutate", gpu_pod, engine).patched
    outcome = answer("validate", denied, engine)
    assert outcome.verdict == "denied"
    assert outcome.failed == ("gpu-shared-request-above-one",)


# --------------------------------------------------------------------------------------------
# Engine bugs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_engine_bug_gets_a_well_formed_answer_with_http_500(
    endpoint: str, engine: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("spec")

    monkeypatch.setattr(handler_module, "review", broken)
    doc = with_gpu(load("v1.36.2", endpoint, "pod-create"), 1)
    outcome = answer(endpoint, doc, unseen(engine))
    assert outcome.verdict == "error" and outcome.http_status == 500
    assert isinstance(outcome.error, KeyError)
    assert outcome.error.__traceback__ is not None
    response = outcome.response["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert response["status"]["reason"] == "InternalError"
    assert "internal error (KeyError)" in response["status"]["message"]
    assert doc["request"]["uid"] in response["status"]["message"]
    assert "patch" not in response


def test_unserializable_engine_output_is_an_engine_error(
    engine: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = handler_module.review

    def odd_patch(*args: Any, **kwargs: Any) -> Any:
        decision = real(*args, **kwargs)
        return dataclasses.replace(decision, patch=({"op": "add", "path": "/x", "value": {1j}},))

    monkeypatch.setattr(handler_module, "review", odd_patch)
    doc = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
    outcome = answer("mutate", doc, unseen(engine))
    assert outcome.verdict == "error" and isinstance(outcome.error, TypeError)


def test_respond_rejects_an_unknown_endpoint(engine: dict[str, Any]) -> None:
    request = parse_review(load("v1.36.2", "mutate", "pod-create"))
    with pytest.raises(ValueError, match="unknown endpoint"):
        handler_module.respond("judge", request, **engine)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Warnings
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], []),
        (["a", "a", "b"], ["a", "b"]),
        (["line one\nline two"], ["line one line two"]),
        (["tab\there\x1b[31m red"], ["tab here [31m red"]),
        (["naïve café ✓"], ["naïve café ✓"]),
        (["", "\n"], []),
    ],
    ids=["none", "duplicates", "newline", "control", "unicode", "empty"],
)
def test_clean_warnings(given: list[str], expected: list[str]) -> None:
    assert clean_warnings(given) == expected


def test_clean_warnings_keeps_within_the_api_servers_limits() -> None:
    short = [f"warning {i}" for i in range(10)]
    assert clean_warnings(short) == short
    long = [f"{i:02d} " + "x" * 600 for i in range(30)]
    cleaned = clean_warnings(long)
    assert all(len(w) <= 256 for w in cleaned)
    assert sum(len(w) for w in cleaned) <= 4096
    assert len(cleaned) == 4096 // 256
    assert cleaned[0].startswith("00 ") and cleaned[0].endswith("…")
