"""The pure pieces: reading a webhook's answer, rule ids in denials, comparing objects."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from webhook.files import load_policy
from webhook.harness.admission_review import ResponseError, failed_rules, parse_response
from webhook.harness.compare import Observed, check
from webhook.harness.report import junit_xml
from webhook.harness.run import run_case
from webhook.harness.runners import KubeRunner
from webhook.harness.suite import Case, Expect, Golden, Suite, problem
from webhook.policy import inventory_from_policy

CLUSTERS = REPO / "examples" / "clusters"

UID = "0b6d2a4c-0000-4000-8000-000000000001"


def response(**fields: object) -> dict[str, object]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": UID, "allowed": True, **fields},
    }


def test_an_allowed_answer_with_a_patch() -> None:
    ops = [{"op": "add", "path": "/spec/nodeSelector", "value": {"a": "b"}}]
    answer = parse_response(
        response(
            patchType="JSONPatch",
            patch=base64.b64encode(json.dumps(ops).encode()).decode(),
            warnings=["careful"],
            auditAnnotations={"mutations": "nodeSelector a=b"},
        ),
        UID,
    )
    assert (answer.allowed, answer.patch, answer.warnings) == (True, tuple(ops), ("careful",))
    assert answer.audit_annotations == {"mutations": "nodeSelector a=b"}


@pytest.mark.parametrize(
    "doc,error",
    [
        ([], "not a JSON object"),
        ({**response(), "apiVersion": "admission.k8s.io/v1beta1"}, "expected apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "has no response"),
        (response(uid="someone-else"), "is not the request's"),
        (response(allowed="yes"), "not a boolean"),
        (response(patch="e30=", patchType="JSONMergePatch"), "not JSONPatch"),
        (response(patch="not base64!", patchType="JSONPatch"), "not base64 JSON"),
        (response(patch="e30=", patchType="JSONPatch"), "not a JSON Patch"),
        (response(warnings="one"), "not a list of strings"),
    ],
)
def test_answers_the_api_server_would_refuse(doc: object, error: str) -> None:
    with pytest.raises(ResponseError, match=error):
        parse_response(doc, UID)


def test_rule_ids_from_denials() -> None:
    denial = '[gpu-quantity] container "a": requests x; [gpu-resource-name] container "b[0]" asks'
    assert failed_rules(denial) == ("gpu-quantity", "gpu-resource-name")
    through_api_server = f'admission webhook "validate.gpu-policy.io" denied the request: {denial}'
    assert failed_rules(through_api_server) == ("gpu-quantity", "gpu-resource-name")
    assert failed_rules("denied by the GPU sharing policy") == ()
    assert failed_rules("no ids", {"failed-rules": "gpu-intent,gpu-quantity"}) == (
        "gpu-intent",
        "gpu-quantity",
    )
    assert failed_rules("no ids", {"validate.gpu-policy.io/failed-rules": "gpu-intent"}) == (
        "gpu-intent",
    )
    assert failed_rules("no ids", {"warned-rules": "gpu-intent"}) == ()


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
}


def case(expect: Expect, tmp_path: Path) -> Case:
    return Case("s", "c", POD, expect, tmp_path / "s.suite.yaml", 3, "inline")


def test_a_cluster_answer_contains_the_golden_object(tmp_path: Path) -> None:
    golden = tmp_path / "g.yaml"
    golden.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n"
        "  annotations: {gpu-policy.io/mutations: 'whatever the webhook did'}\n"
        "spec:\n  containers:\n  - name: a\n    resources:\n      limits: {nvidia.com/gpu: 1}\n"
        "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists}\n"
    )
    returned = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "uid": "u", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            ],
        },
    }
    c = case(Expect(allowed=True, golden=Golden(golden, "g.yaml")), tmp_path)
    assert check(c, Observed(allowed=True, mutated=returned, comparison="contains")) == []
    returned["spec"]["tolerations"] = returned["spec"]["tolerations"][1:]
    (difference,) = check(c, Observed(allowed=True, mutated=returned, comparison="contains"))
    assert difference.detail == (
        "/spec/tolerations/0/key: expected 'nvidia.com/gpu', got 'node.kubernetes.io/not-ready'"
    )


def test_unchanged_against_a_cluster(tmp_path: Path) -> None:
    c = case(Expect(golden=Golden(None, "unchanged")), tmp_path)
    stored = {**POD, "metadata": {"name": "p", "uid": "u"}}
    assert check(c, Observed(allowed=True, mutated=stored, comparison="contains")) == []
    changed = {**POD, "metadata": {"name": "p", "annotations": {"gpu-policy.io/mutations": "x"}}}
    (difference,) = check(c, Observed(allowed=True, mutated=changed, comparison="contains"))
    assert difference.what == "expected unchanged, but the webhook changed it: x"


def test_no_answer_is_one_difference(tmp_path: Path) -> None:
    c = case(Expect(allowed=True, warnings=()), tmp_path)
    (difference,) = check(c, Observed(allowed=False, error="cannot reach it"))
    assert difference.what == "no answer: cannot reach it"


def test_junit_reports_broken_suite_files_as_errors() -> None:
    tree = junit_xml([], [problem("a.suite.yaml", 4, "bad"), problem("a.suite.yaml", 9, "worse")])
    root = tree.getroot()
    assert (root.get("tests"), root.get("errors")) == ("1", "1")
    error = root.find("testsuite/testcase/error")
    assert error is not None
    assert error.get("message") == "the suite file cannot be used: a.suite.yaml:4: bad"
    assert error.text == "a.suite.yaml:4: bad\na.suite.yaml:9: worse"


@dataclass(frozen=True)
class ClusterAnswer:
    """What a dry-run create returned (the shape of webhook.kube.dryrun.DryRunResult)."""

    allowed: bool
    code: int
    message: str
    warnings: tuple[str, ...] = ()
    object: dict[str, Any] | None = None
    error: str | None = None


INVALID_HALF = (
    'Pod "p" is invalid: spec.containers[0].resources.limits[nvidia.com/gpu]: '
    'Invalid value: "500m": must be an integer'
)
INVALID_UNEQUAL = (
    'Pod "p" is invalid: spec.containers[0].resources.requests: '
    'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'
)
INVALID_EPHEMERAL = (
    'Pod "p" is invalid: spec.ephemeralContainers[0].resources: '
    "Forbidden: cannot be set for an Ephemeral Container"
)
INVALID_OTHER = 'Pod "p" is invalid: spec.containers[0].image: Required value'


@pytest.mark.parametrize(
    ("expect", "code", "message", "status", "what"),
    [
        (Expect(allowed=False, failed=("gpu-quantity",)), 422, INVALID_HALF, "pass", None),
        (
            Expect(allowed=False, failed=("gpu-requests-equal-limits",), warnings=()),
            422,
            INVALID_UNEQUAL,
            "pass",
            None,
        ),
        (
            Expect(allowed=False, failed=("gpu-ephemeral-container",)),
            422,
            INVALID_EPHEMERAL,
            "pass",
            None,
        ),
        (Expect(allowed=True), 422, INVALID_HALF, "fail", "expected allowed, got denied"),
        # Another validation error, or a webhook's 403: the rule ids are judged as usual.
        (
            Expect(allowed=False, failed=("gpu-quantity",)),
            422,
            INVALID_OTHER,
            "fail",
            "failed rules: expected [gpu-quantity], got []",
        ),
        (
            Expect(allowed=False, failed=("gpu-quantity",)),
            403,
            "admission webhook denied the request: must be an integer",
            "fail",
            "failed rules: expected [gpu-quantity], got []",
        ),
    ],
    ids=[
        "half-a-gpu",
        "requests-below-limits",
        "ephemeral",
        "expected-allowed",
        "other-422",
        "403",
    ],
)
def test_a_refusal_by_the_api_servers_validation_is_judged_on_allowed(
    expect: Expect, code: int, message: str, status: str, what: str | None, tmp_path: Path
) -> None:
    """In a real cluster the API server's validation answers first: only the verdict counts."""
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    suite = Suite(tmp_path / "s.suite.yaml", "s", policy, inventory_from_policy(policy))
    c = case(expect, tmp_path)
    runner = KubeRunner(lambda obj, namespace: ClusterAnswer(False, code, message))
    result = run_case(suite, c, runner)
    assert result.status == status
    assert [d.what.split(" (")[0] for d in result.differences] == ([what] if what else [])
    assert result.observed is not None
    noted = "(refused by the API server's validation)" in result.observed.summary()
    assert noted is (code == 422 and message != INVALID_OTHER)
