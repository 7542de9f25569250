"""Whatever a client sends, the app answers below 500 with a body that is no traceback."""

from __future__ import annotations

import copy
import json
from typing import Any

from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.objects import fixture_ids, load, with_gpu
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


@given(path=paths, method=methods, content_type=content_types, body=st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_requests(path: str, method: str, content_type: str, body: bytes) -> None:
    with APP.test_client() as client:
        check(client.open(path, method=method, data=body, content_type=content_type or None))


@given(path=st.sampled_from(["/mutate", "/validate"]), value=json_values)
@settings(max_examples=300, deadline=None)
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


@given(path=st.sampled_from(["/mutate", "/validate"]), doc=mangled())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mangled_admission_reviews(path: str, doc: dict[str, Any]) -> None:
    with APP.test_client() as client:
        check(client.post(path, data=json.dumps(doc), content_type="application/json"))
