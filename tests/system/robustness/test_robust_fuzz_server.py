"""Fuzzing the real server: gunicorn over TLS, hypothesis-made bodies on kept-alive connections.

tests/core/admission and tests/server hold the same properties for ``handle`` and the Flask app in
process; here every input goes through TLS, gunicorn's HTTP parser and a worker, as the API
server would send it. One server for the module. Families of input:

* captured AdmissionReviews with fields removed or replaced by values of every wrong type
  (unicode text included), at any depth;
* GPU pods with resource quantities in every spelling, odd resource names and unicode
  (incl. escaped lone surrogates) in names, namespaces and annotations;
* valid reviews truncated at any byte; subtrees nested thousands deep; bodies of megabytes
  (thousands of containers, a huge annotation, over the 7 MiB limit); random bytes.

For every answer (``robust_server.check_answer``): never a 5xx, the engine-error 500 included;
a 200 is an AdmissionReview for the sent uid whose patch applies to the sent object; anything
else is a 4xx with one line of text. At the end the server and both of its workers are the ones
that started (nothing died), and the log holds no traceback. The number of inputs is printed
in the run summary ("robustness: N fuzz inputs ...").
"""

from __future__ import annotations

import copy
import http.client
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.objects import fixture_ids, load, with_gpu
from tests.support.json_paths import paths, put
from tests.system.robustness.robust_server import (
    FUZZ_TALLY,
    Server,
    check_answer,
    post,
    start_server,
    stop_server,
)

pytestmark = [pytest.mark.slow]

DOCS = [load(*ids) for ids in fixture_ids()]
DOCS += [with_gpu(d, q) for d in DOCS for q in (1, 2)]
CREATES = [d for d in DOCS if d["request"]["operation"] == "CREATE" and d["request"].get("object")]
ENDPOINTS = st.sampled_from(["/mutate", "/validate", "/mutate?timeout=10s", "/validate?timeout=5s"])


def fuzz(examples: int) -> settings:
    """The settings of one fuzz test: ``examples`` inputs, no deadline (megabyte bodies)."""
    return settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))


WRONG_TYPES = st.sampled_from(
    [None, True, False, 0, -1, 1.5, 2**64, "", "x", "ü→😀", [], {}, [1, "a"], {"a": {"b": []}}]
).map(copy.deepcopy)  # a fresh object each time: documents must not share (and loop)
unicode_text = st.text(max_size=40)  # any code point but lone surrogates
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | unicode_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(unicode_text, children, max_size=4)
    ),
    max_leaves=20,
)

QUANTITIES = [
    *[1, 2, 0, -1, 1.0, 1.5, 1e3, 1e300, -0.0, True, False, None, [], {}, 2**64, 10**30],
    *["1", "2", "0", "-1", "+1", "01", "1.0", "1.", ".5", "0.5", "-0", "1_0", ""],
    *["500m", "1000m", "2000m", "1k", "1Ki", "1Mi", "1G", "1Ei", "1n", "1u", "1m"],
    *["1e0", "1E0", "1e3", "10e-1", "1e-3", "0.1e1", "1e308", "1e309", "9" * 40],
    *["0x1", " 1", "1 ", "\uff11", "\u0661", "Infinity", "NaN", "inf", "one"],
]
RESOURCE_NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.20gb.shared",
    "nvidia.com/mig-",
    "NVIDIA.com/GPU",
    "nvidia.com/gpu ",
    "nvidia.com/\uff47\uff50\uff55",
    "nvidia.com/",
    "nvidia.com/gpu/x",
    "nvidia.com/gpus",
    "cpu",
    "memory",
    "example.com/foo",
    "",
]
ANNOTATIONS = [
    "gpu-policy.io/sharing",
    "gpu-policy.io/product",
    "gpu-policy.io/mig-profile",
    "gpu-policy.io/mutations",
]
ANNOTATION_VALUES = (
    st.sampled_from(
        ["shared", "exclusive", "any", "NVIDIA-L20", "Tesla-T4,NVIDIA-L20", "1g.5gb", ",", " "]
    )
    | unicode_text
)


# --------------------------------------------------------------------------------------------
# The server and one kept-alive connection for the module
# --------------------------------------------------------------------------------------------


class Client:
    """One kept-alive connection; http.client reopens it when the server asked to close."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.conn: http.client.HTTPSConnection = server.connect(timeout=60)

    def send(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        try:
            answer = post(self.conn, path, body)
        except (OSError, http.client.HTTPException):
            FUZZ_TALLY["connection error"] += 1
            self.conn.close()  # the next input starts on a new connection
            raise
        FUZZ_TALLY[str(answer[0])] += 1
        return answer


_state: dict[str, Any] = {}


@contextmanager
def deep_recursion() -> Iterator[None]:
    """Room to decode, copy and patch a document nested ~1,000 deep in this process."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


@pytest.fixture(scope="module", autouse=True)
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("fuzz"), workers=2, threads=2)
    _state["server"] = srv
    _state["client"] = Client(srv)
    _state["workers"] = srv.workers()
    try:
        yield srv
    finally:
        _state["client"].conn.close()
        stop_server(srv)
        _state.clear()


def send_doc(path: str, doc: Any, *, ascii_only: bool = True) -> dict[str, Any] | None:
    body = json.dumps(doc, ensure_ascii=ascii_only).encode()
    status, content_type, data = _state["client"].send(path, body)
    return check_answer(doc, status, content_type, data)


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------


@st.composite
def mangled_reviews(draw: st.DrawFn) -> dict[str, Any]:
    """A captured review with 1-3 fields (any depth) removed or given a value of a wrong type."""
    doc = copy.deepcopy(draw(st.sampled_from(DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from([p for p in paths(doc) if p]))
        put(doc, path, draw(WRONG_TYPES | json_values), delete=draw(st.booleans()))
    return doc


@st.composite
def gpu_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A pod CREATE whose containers ask for GPUs in odd spellings, with unicode names."""
    doc = copy.deepcopy(draw(st.sampled_from(CREATES)))
    pod = doc["request"]["object"]
    template = pod["spec"]["containers"][0]
    section = st.dictionaries(
        st.sampled_from(RESOURCE_NAMES) | unicode_text, st.sampled_from(QUANTITIES), max_size=3
    )
    containers = []
    for i in range(draw(st.integers(1, 4))):
        c = copy.deepcopy(template)
        c["name"] = draw(st.sampled_from([f"c{i}", f"c{i}-ü", f"容器{i}"]) | unicode_text)
        c["resources"] = draw(
            st.fixed_dictionaries({}, optional={"limits": section, "requests": section})
        )
        containers.append(c)
    pod["spec"]["containers"] = containers
    if draw(st.booleans()):
        pod["spec"]["initContainers"] = [copy.deepcopy(containers[0]) | {"name": "init"}]
    meta = pod["metadata"]
    if draw(st.booleans()):
        meta["name"] = doc["request"]["name"] = draw(unicode_text)
    if draw(st.booleans()):
        meta["namespace"] = doc["request"]["namespace"] = draw(unicode_text)
    meta["annotations"] = draw(
        st.dictionaries(st.sampled_from(ANNOTATIONS) | unicode_text, ANNOTATION_VALUES, max_size=3)
    )
    if draw(st.booleans()):
        pod["spec"]["nodeSelector"] = draw(
            st.dictionaries(
                st.sampled_from(["nvidia.com/gpu.product", "kubernetes.io/hostname"]),
                st.sampled_from(["NVIDIA-L20-SHARED", "Tesla-T4", "NVIDIA-A100-SXM4-40GB"])
                | unicode_text,
                max_size=2,
            )
        )
    return doc


@st.composite
def nested_reviews(draw: st.DrawFn) -> tuple[str, int, bytes]:
    """A GPU review with a list or object nested 10 to 100,000 deep in place of any field.

    Built as text: the encoder (and the decoder) of the test would hit Python's recursion
    limit first.
    """
    doc = copy.deepcopy(draw(st.sampled_from(CREATES)))
    doc = with_gpu(doc, 1)
    uid = doc["request"]["uid"]
    depth = draw(st.sampled_from([10, 100, 500, 900, 985, 1020, 2000, 5000, 100_000]))
    put(doc, draw(st.sampled_from([p for p in paths(doc) if p])), "\0PLACEHOLDER")
    leaf = json.dumps(draw(WRONG_TYPES))
    if draw(st.booleans()):
        inner = "[" * depth + leaf + "]" * depth
    else:
        inner = '{"a":' * depth + leaf + "}" * depth
    return uid, depth, json.dumps(doc).replace('"\\u0000PLACEHOLDER"', inner).encode()


# --------------------------------------------------------------------------------------------
# Tests (the last one checks that the server survived them all)
# --------------------------------------------------------------------------------------------


@given(path=ENDPOINTS, doc=mangled_reviews(), ascii_only=st.booleans())
@fuzz(160)
def test_mangled_reviews(path: str, doc: dict[str, Any], ascii_only: bool) -> None:
    send_doc(path, doc, ascii_only=ascii_only)


@given(path=ENDPOINTS, doc=gpu_pods(), ascii_only=st.booleans())
@fuzz(160)
def test_gpu_pods_in_every_spelling(path: str, doc: dict[str, Any], ascii_only: bool) -> None:
    send_doc(path, doc, ascii_only=ascii_only)


@given(path=ENDPOINTS, case=nested_reviews())
@fuzz(50)
def test_deeply_nested(path: str, case: tuple[str, int, bytes]) -> None:
    uid, depth, body = case
    status, content_type, data = _state["client"].send(path, body)
    if depth >= 2000:
        assert status == 400 and b"not JSON" in data, (status, data[:200])
    with deep_recursion():
        check_answer(json.loads(body) if status == 200 else None, status, content_type, data)
    if status == 200:
        assert json.loads(data)["response"]["uid"] == uid


@given(path=ENDPOINTS, doc=st.sampled_from(DOCS), cut=st.floats(0, 1, exclude_max=True))
@fuzz(60)
def test_truncated(path: str, doc: dict[str, Any], cut: float) -> None:
    body = json.dumps(doc).encode()
    body = body[: int(len(body) * cut)]
    status, content_type, data = _state["client"].send(path, body)
    assert status == 400, (status, data[:200])
    check_answer(None, status, content_type, data)


@given(path=ENDPOINTS, body=st.binary(max_size=300) | st.text(max_size=100).map(str.encode))
@fuzz(60)
def test_random_bytes(path: str, body: bytes) -> None:
    status, content_type, data = _state["client"].send(path, body)
    try:
        sent = json.loads(body)
    except ValueError:
        sent = None
    check_answer(sent, status, content_type, data)


@given(path=ENDPOINTS, value=json_values)
@fuzz(60)
def test_random_json(path: str, value: Any) -> None:
    status, content_type, data = _state["client"].send(path, json.dumps(value).encode())
    assert status != 200, data[:300]  # nothing but a request is an AdmissionReview
    check_answer(value, status, content_type, data)


@given(
    path=ENDPOINTS,
    kind=st.sampled_from(["containers", "annotation", "over-limit"]),
    size=st.sampled_from([1, 2, 3]),
)
@fuzz(12)
def test_huge(path: str, kind: str, size: int) -> None:
    doc = with_gpu(CREATES[0], 1)
    pod = doc["request"]["object"]
    if kind == "containers":  # 300, 600 or 900 GPU containers: 0.5-1.5 MB
        base = pod["spec"]["containers"][0]
        pod["spec"]["containers"] = [
            copy.deepcopy(base) | {"name": f"c{i}"} for i in range(300 * size)
        ]
    elif kind == "annotation":  # 2, 4 or 6 MiB of unicode in one annotation
        pod["metadata"].setdefault("annotations", {})["big"] = "é" * (size << 20)
    else:  # over the 7 MiB limit: 413
        pod["metadata"]["labels"] = {"pad": "x" * ((7 << 20) + size)}
    if kind != "over-limit":
        assert send_doc(path, doc, ascii_only=kind != "annotation") is not None
        return
    # The app reads and drops an over-limit body (up to 32 MiB) before answering, so the
    # client gets the 413 instead of a connection reset; a new connection is served too.
    body = json.dumps(doc).encode()
    conn = _state["server"].connect(timeout=60)
    try:
        status, content_type, data = post(conn, path, body)
        FUZZ_TALLY[str(status)] += 1
        assert status == 413, (status, data[:200])
        check_answer(None, status, content_type, data)
    finally:
        conn.close()


def test_the_server_survived_every_input() -> None:
    server: Server = _state["server"]
    assert server.proc.poll() is None
    assert server.workers() == _state["workers"], "a worker died and was replaced"
    assert server.get("/healthz")[0] == 200
    log = server.log()
    assert "Traceback" not in log
    assert "engine error" not in log.lower()
    assert sum(FUZZ_TALLY.values()) >= 400
    assert FUZZ_TALLY["connection error"] == 0
