"""Properties (hypothesis) that hold for any body a client can send.

* Any bytes and any JSON: ``handle`` answers or raises RequestError, nothing else.
* A captured AdmissionReview with one subtree replaced by arbitrary JSON: the same, and an
  answer is never an engine error (verdict "error" would be a 500 for something a client sent).
* A GPU pod with arbitrary resources: the mutating answer's patch applies to the object and the
  validating endpoint allows the patched pod whenever it allows... the original's decision.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.objects import fixture_ids, load, with_gpu
from tests.support.json_paths import paths, put
from tests.support.properties import examples
from webhook.admission import Outcome, RequestError, handle
from webhook.files import load_policy
from webhook.policy import inventory_from_policy
from webhook.policy.rules import API_SERVER_VALIDATED_RULES

POLICY = load_policy(None)
ENGINE: dict[str, Any] = {"policy": POLICY, "inventory": inventory_from_policy(POLICY)}
DOCS = [load(*ids) for ids in fixture_ids()]
GPU_DOCS = [with_gpu(d, 1) for d in DOCS]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
endpoints = st.sampled_from(["mutate", "validate"])


def answer_or_request_error(endpoint: str, body: Any) -> Outcome | None:
    try:
        outcome = handle(endpoint, body, **ENGINE)  # type: ignore[arg-type]
    except RequestError as exc:
        assert exc.status in (400, 413)
        assert "\n" not in str(exc)
        return None
    assert outcome.verdict != "error", repr(outcome.error)
    sent = json.loads(outcome.body)
    assert sent["kind"] == "AdmissionReview"
    assert isinstance(sent["response"]["allowed"], bool)
    return outcome


@given(endpoint=endpoints, body=st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_bytes(endpoint: str, body: bytes) -> None:
    answer_or_request_error(endpoint, body)


# What a handler must tell apart: not an object, an object without a request, a request that
# is no object, one without an object or uid, a review of the right kind with nothing in it,
# integers past int64, a float for an int.
@example(endpoint="mutate", value=None)
@example(endpoint="validate", value=[])
@example(endpoint="mutate", value="")
@example(endpoint="validate", value=2**63)
@example(endpoint="mutate", value={})
@example(endpoint="validate", value={"request": None})
@example(endpoint="mutate", value={"request": []})
@example(endpoint="validate", value={"request": {"uid": 1.5, "object": None}})
@example(
    endpoint="mutate",
    value={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
)
@given(endpoint=endpoints, value=json_values)
@settings(max_examples=examples(300, ci=100), deadline=None)
def test_any_json(endpoint: str, value: Any) -> None:
    answer_or_request_error(endpoint, json.dumps(value).encode())


@st.composite
def mangled_reviews(draw: st.DrawFn) -> dict[str, Any]:
    """A captured review (with or without a GPU) with some subtrees replaced or removed."""
    doc = copy.deepcopy(draw(st.sampled_from(DOCS + GPU_DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from([p for p in paths(doc) if p]))
        put(doc, path, draw(json_values), delete=draw(st.booleans()))
    return doc


def mangled(doc: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    """A copy of ``doc`` with ``path`` set to ``value`` (or removed): an explicit example."""
    out = copy.deepcopy(doc)
    put(out, path, value, delete=delete)
    return out


OBJECT = ("request", "object")
CONTAINER = (*OBJECT, "spec", "containers", 0)


# A review whose request, object, uid, operation, containers or GPU quantities are missing,
# null, of the wrong type or out of range: each must be answered, or refused as a bad request.
@example(endpoint="mutate", doc=mangled(GPU_DOCS[0], ("request",), None, delete=True))
@example(endpoint="validate", doc=mangled(GPU_DOCS[0], OBJECT, None))
@example(endpoint="mutate", doc=mangled(GPU_DOCS[0], ("request", "uid"), None))
@example(endpoint="validate", doc=mangled(GPU_DOCS[0], ("request", "operation"), 1))
@example(endpoint="mutate", doc=mangled(GPU_DOCS[0], (*OBJECT, "spec", "containers"), {}))
@example(endpoint="validate", doc=mangled(GPU_DOCS[0], (*OBJECT, "spec"), None, delete=True))
@example(endpoint="mutate", doc=mangled(GPU_DOCS[0], (*CONTAINER, "resources"), []))
@example(
    endpoint="mutate",
    doc=mangled(GPU_DOCS[0], (*CONTAINER, "resources", "limits"), {"nvidia.com/gpu": "x"}),
)
@example(
    endpoint="validate",
    doc=mangled(GPU_DOCS[0], (*CONTAINER, "resources", "requests", "nvidia.com/gpu"), 2**63),
)
@example(endpoint="mutate", doc=mangled(GPU_DOCS[0], (*OBJECT, "metadata", "annotations"), []))
@given(endpoint=endpoints, doc=mangled_reviews())
@settings(
    max_examples=examples(500, ci=150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_mangled_reviews(endpoint: str, doc: dict[str, Any]) -> None:
    answer_or_request_error(endpoint, json.dumps(doc).encode())


quantities = st.sampled_from([0, 1, 2, 3, "1", "2", "500m", "1.5", -1, 1.0, "x", None, True])
names = st.sampled_from(
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/gpuu",
        "nvidia.com/hostdev",
        "cpu",
    ]
)
sections = st.dictionaries(names, quantities, max_size=3)


CREATES = [d for d in DOCS if d["request"]["operation"] == "CREATE"]


# Quantities the API server would refuse or that a rule reads apart (a fraction, a negative,
# not a number, a bool, limits below requests), a MIG profile the annotation contradicts,
# shared GPUs asked to be exclusive, GPUs in two containers, a pod with no GPU.
@example(base=CREATES[0], resources=[{"limits": {"nvidia.com/gpu": "500m"}}], annotations={})
@example(base=CREATES[0], resources=[{"limits": {"nvidia.com/gpu": -1}}], annotations={})
@example(
    base=CREATES[0],
    resources=[{"limits": {"nvidia.com/gpu": "x"}, "requests": {"nvidia.com/gpu": True}}],
    annotations={},
)
@example(
    base=CREATES[0],
    resources=[{"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 2}}],
    annotations={},
)
@example(
    base=CREATES[0],
    resources=[{"limits": {"nvidia.com/mig-1g.5gb": "1"}}],
    annotations={"gpu-policy.io/mig-profile": "x"},
)
@example(
    base=CREATES[0],
    resources=[{"limits": {"nvidia.com/gpu.shared": 1}}],
    annotations={"gpu-policy.io/sharing": "exclusive"},
)
@example(
    base=CREATES[-1],
    resources=[{"limits": {"nvidia.com/gpu": 2}}, {"requests": {"nvidia.com/gpu": "1"}}],
    annotations={"gpu-policy.io/product": "NVIDIA-L20"},
)
@example(base=CREATES[-1], resources=[{"requests": {"cpu": "1"}}], annotations={})
@given(
    base=st.sampled_from(CREATES),
    resources=st.lists(
        st.fixed_dictionaries({}, optional={"limits": sections, "requests": sections}),
        min_size=1,
        max_size=3,
    ),
    annotations=st.dictionaries(
        st.sampled_from(
            ["gpu-policy.io/sharing", "gpu-policy.io/product", "gpu-policy.io/mig-profile"]
        ),
        st.sampled_from(["shared", "exclusive", "any", "NVIDIA-L20", "Tesla-T4", "1g.5gb", "x"]),
        max_size=2,
    ),
)
@settings(
    max_examples=examples(300, ci=100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_mutate_then_validate(
    base: dict[str, Any], resources: list[dict[str, Any]], annotations: dict[str, str]
) -> None:
    doc = copy.deepcopy(base)
    pod = doc["request"]["object"]
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**copy.deepcopy(template), "name": f"c{i}", "resources": r}
        for i, r in enumerate(resources)
    ]
    if annotations:
        pod["metadata"]["annotations"] = annotations
    original = copy.deepcopy(pod)
    mutate = answer_or_request_error("mutate", json.dumps(doc).encode())
    assert mutate is not None
    if not mutate.allowed:
        # /mutate denies only what the API server's validation would refuse, and says what
        # /validate says about the same pod.
        assert API_SERVER_VALIDATED_RULES.intersection(mutate.failed)
        validate = answer_or_request_error("validate", json.dumps(doc).encode())
        assert validate is not None and not validate.allowed
        assert validate.response["response"]["status"] == mutate.response["response"]["status"]
        return
    response = mutate.response["response"]
    if "patch" in response:
        ops = json.loads(base64.b64decode(response["patch"]))
        doc["request"]["object"] = jsonpatch.apply_patch(pod, ops)
    assert pod == original  # nothing is modified in place
    validate = answer_or_request_error("validate", json.dumps(doc).encode())
    assert validate is not None
    # A mutated pod passes validation and needs no further mutation.
    if "patch" in response:
        assert validate.allowed
        assert "pending-mutations" not in validate.response["response"].get("auditAnnotations", {})
