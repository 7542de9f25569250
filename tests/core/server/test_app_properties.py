"""Whatever a client sends, the app answers below 500 with a body that is no traceback."""

from __future__ import annotations

import copy
import json
from typing import Any

from flask import Flask
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.objects import fixture_ids, load, with_gpu
from tests.support.json_paths import put
from tests.support.properties import examples
from webhook.server import Settings, create_app

APP: Flask = create_app(Settings())
DOCS = [load(*ids) for ids in fixture_ids()]
DOCS += [with_gpu(d, q) for d in DOCS for q in (1, 2)]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=15,
)
paths = st.sampled_from(["/mutate", "/validate", "/mutate?timeout=10s", "/healthz", "/readyz"])
methods = st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
content_types = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "text/plain", "", "application/x"]
)


def check(response: Any) -> None:
    assert response.status_code < 500, response.data[:300]
    body = response.get_data(as_text=True)
    assert "Traceback" not in body and "<html" not in body.lower()


# A review endpoint asked with another method, a probe sent a body, no content type, a body
# that is no JSON or not UTF-8, the API server's timeout parameter.
@example(path="/mutate", method="GET", content_type="application/json", body=b"")
@example(path="/validate", method="HEAD", content_type="", body=b"{}")
@example(path="/healthz", method="POST", content_type="application/json", body=b"{}")
@example(path="/readyz", method="OPTIONS", content_type="text/plain", body=b"")
@example(path="/mutate", method="POST", content_type="", body=b'{"request": {}}')
@example(path="/validate", method="POST", content_type="application/json", body=b"{")
@example(path="/mutate?timeout=10s", method="POST", content_type="application/x", body=b"\xff\xfe")
@given(path=paths, method=methods, content_type=content_types, body=st.binary(max_size=300))
@settings(max_examples=examples(300, ci=100), deadline=None)
def test_random_requests(path: str, method: str, content_type: str, body: bytes) -> None:
    with APP.test_client() as client:
        check(client.open(path, method=method, data=body, content_type=content_type or None))


# Not an object, no request, a request that is no object, a review with nothing in it, an
# integer past int64 (test_admission_properties.py holds the handler to the same shapes).
@example(path="/mutate", value=None)
@example(path="/validate", value=[])
@example(path="/mutate", value=2**64)
@example(path="/validate", value={"request": None})
@example(path="/mutate", value={"request": "x"})
@example(
    path="/validate",
    value={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
)
@given(path=st.sampled_from(["/mutate", "/validate"]), value=json_values)
@settings(max_examples=examples(300, ci=100), deadline=None)
def test_random_json(path: str, value: Any) -> None:
    with APP.test_client() as client:
        check(client.post(path, data=json.dumps(value), content_type="application/json"))


@st.composite
def mangled(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(DOCS)))
    node: Any = doc
    # Walk down a random branch and replace what is there.
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        child = node[key]
        if not isinstance(child, (dict, list)) or not child or draw(st.integers(0, 3)) == 0:
            if isinstance(node, dict) and draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(json_values)
            break
        node = child
    return doc


def changed(path: tuple[Any, ...], value: Any, delete: bool = False) -> dict[str, Any]:
    """A GPU pod's review with ``path`` set to ``value`` (or removed): an explicit example."""
    doc = copy.deepcopy(with_gpu(DOCS[0], 1))
    put(doc, path, value, delete=delete)
    return doc


# The request, its uid, the object or its containers gone or of the wrong type, a quantity
# that is no number: the app answers each below 500.
@example(path="/mutate", doc=changed(("request",), None, delete=True))
@example(path="/validate", doc=changed(("request", "uid"), 7))
@example(path="/mutate", doc=changed(("request", "object"), None))
@example(path="/validate", doc=changed(("request", "object", "spec", "containers"), "x"))
@example(
    path="/mutate",
    doc=changed(
        ("request", "object", "spec", "containers", 0, "resources", "limits"),
        {"nvidia.com/gpu": [1]},
    ),
)
@given(path=st.sampled_from(["/mutate", "/validate"]), doc=mangled())
@settings(
    max_examples=examples(400, ci=120),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_mangled_admission_reviews(path: str, doc: dict[str, Any]) -> None:
    with APP.test_client() as client:
        check(client.post(path, data=json.dumps(doc), content_type="application/json"))
