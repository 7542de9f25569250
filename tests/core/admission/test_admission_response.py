"""The four answers, as the API server reads them (controller-runtime's Allowed, Denied, ...)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from webhook.admission import response
from webhook.contract import ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND

PATCH = ({"op": "add", "path": "/spec/nodeSelector", "value": {"a": "b"}},)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (response.allowed("u1"), {"uid": "u1", "allowed": True}),
        (
            response.allowed("u1", warnings=["one\nline", "one line"]),
            {"uid": "u1", "allowed": True, "warnings": ["one line"]},
        ),
        (
            response.denied("u2", "[gpu-quantity] ask for 1", annotations={"failed-rules": "x"}),
            {
                "uid": "u2",
                "allowed": False,
                "status": {"code": 403, "status": "Failure", "reason": "Forbidden",
                           "message": "[gpu-quantity] ask for 1"},
                "auditAnnotations": {"failed-rules": "x"},
            },
        ),
        (response.patched("u3", ()), {"uid": "u3", "allowed": True}),
        (
            response.errored("u4", "could not review", error="KeyError"),
            {
                "uid": "u4",
                "allowed": False,
                "status": {"code": 500, "status": "Failure", "reason": "InternalError",
                           "message": "could not review"},
                "auditAnnotations": {"error": "KeyError"},
            },
        ),
    ],
    ids=["allowed", "allowed-warnings-one-line-deduplicated", "denied", "nothing-to-patch",
         "errored"],
)  # fmt: skip
def test_answers(doc: dict[str, Any], expected: dict[str, Any]) -> None:
    assert doc == {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": ADMISSION_REVIEW_KIND,
        "response": expected,
    }


def test_patched_sends_the_patch_as_base64_json() -> None:
    answer = response.patched("u5", PATCH, annotations={"mutations": "nodeSelector a=b"})[
        "response"
    ]
    assert (answer["allowed"], answer["patchType"]) == (True, "JSONPatch")
    assert json.loads(base64.b64decode(answer["patch"])) == list(PATCH)
    assert answer["auditAnnotations"] == {"mutations": "nodeSelector a=b"}


def test_audit_annotations_are_cut_to_their_limit() -> None:
    long = ["rule-" + "x" * 600, "rule-" + "y" * 600]
    annotations = response.audit_annotations(failed=long, mutations=())
    assert list(annotations) == ["failed-rules"]
    assert len(annotations["failed-rules"]) == response.ANNOTATION_VALUE_CHARS
    assert annotations["failed-rules"].endswith("…")
