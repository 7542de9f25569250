"""Reviews the worker reads itself are answered exactly as Flask answers them.

``webhook.server.worker`` reads a ``POST /mutate`` or ``/validate`` from the request's bytes
(``webhook.server.direct.read_review_head``) and answers it through the app's
``DirectReviews``; every other request goes to the Flask app. Each request below is sent both
ways (the same app; its bytes to the direct path, a fresh WSGI environ of the same request to
Flask) and must get the same status line, headers and body, move the same Prometheus series by
the same amounts, and log the same lines (the review line's ``ms=`` aside). The table also says
which requests the direct path reads, so a change that sent every review to Flask, or read a
request gunicorn would read otherwise, fails here too.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from werkzeug.test import EnvironBuilder

from tests.objects import load, pod_spec, review, with_gpu, workload
from webhook.admission import handler as handler_module
from webhook.server import Settings, create_app, metrics
from webhook.server import app as app_module
from webhook.server.app import DirectReviews, direct_reviews
from webhook.server.direct import read_review_head

JSON = "application/json"
LIMIT = 20_000  # max_body_bytes of the app under test: the captured reviews fit, 413 is cheap

# Series whose values depend on how long a review took (their _count still has to agree), and
# the creation times of label sets (the first path to use a label set creates it).
_TIMED = re.compile(r"^gpu_policy_review_duration_seconds_(bucket|sum)$|_created$")


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


GPU_POD = _json(with_gpu(load("v1.36.2", "mutate", "pod-create"), 1))
GPU_POD_VALIDATE = _json(with_gpu(load("v1.36.2", "validate", "pod-create"), 1))
TWO_GPU_DEPLOYMENT = _json(review(workload("Deployment", spec=pod_spec(2))))


@dataclass(frozen=True)
class Case:
    """One request: what is sent, and whether the direct path reads it (not Flask)."""

    id: str
    method: str
    path: str
    body: bytes = b""
    content_type: str | None = JSON
    direct: bool = True
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    environ: dict[str, Any] = field(default_factory=dict)
    length: int | None = None  # a Content-Length other than the body's

    def make_environ(self) -> dict[str, Any]:
        """A fresh WSGI environ for this request (its own input stream)."""
        builder = EnvironBuilder(
            path=self.path,
            method=self.method,
            query_string=self.query,
            headers=self.headers,
            environ_base=self.environ,
            input_stream=io.BytesIO(self.body),
            content_type=self.content_type,
            content_length=len(self.body) if self.length is None else self.length,
        )
        environ = builder.get_environ()
        if self.content_type is None:
            environ.pop("CONTENT_TYPE", None)
        if "Transfer-Encoding" in self.headers:
            environ.pop("CONTENT_LENGTH", None)
        return environ

    def raw(self) -> bytes:
        """The same request's bytes, as the worker gathers them."""
        target = self.path + (f"?{self.query}" if self.query else "")
        lines = [f"{self.method} {target} HTTP/1.1", "Host: 127.0.0.1:8443"]
        if self.content_type is not None:
            lines.append(f"Content-Type: {self.content_type}")
        lines.extend(f"{name}: {value}" for name, value in self.headers.items())
        body = self.body
        if "Transfer-Encoding" in self.headers:
            body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
        else:
            lines.append(f"Content-Length: {len(body) if self.length is None else self.length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


CHUNKED = {"Transfer-Encoding": "chunked"}
TERMINATED = {"wsgi.input_terminated": True}  # what gunicorn sets on every request

CASES = [
    Case("mutate-gpu-pod", "POST", "/mutate", GPU_POD),
    Case("validate-gpu-pod", "POST", "/validate", GPU_POD_VALIDATE),
    Case("validate-denied", "POST", "/validate", TWO_GPU_DEPLOYMENT),
    Case("mutate-query-string", "POST", "/mutate", GPU_POD, query="timeout=10s"),
    Case(
        "json-charset", "POST", "/mutate", GPU_POD, content_type="application/json; charset=utf-8"
    ),
    Case("json-upper-case", "POST", "/validate", GPU_POD, content_type="Application/JSON"),
    Case("gunicorn-environ", "POST", "/mutate", GPU_POD, environ=TERMINATED),
    Case("bad-json", "POST", "/mutate", b"{"),
    Case("empty-body", "POST", "/validate", b""),
    Case("array", "POST", "/mutate", b"[]"),
    Case("not-utf8", "POST", "/mutate", b"\xff\xfe{}"),
    Case(
        "v1beta1",
        "POST",
        "/validate",
        _json({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
    ),
    Case("no-content-type", "POST", "/mutate", GPU_POD, content_type=None),
    Case("text-plain", "POST", "/mutate", GPU_POD, content_type="text/plain"),
    Case("json-x", "POST", "/validate", GPU_POD, content_type="application/jsonx"),
    # Werkzeug refuses a Content-Length over the limit plus one unread; webhook.admission
    # refuses the one byte over the limit that Werkzeug lets through.
    # A body over the limit is left to Flask (413 after reading it).
    Case("too-large", "POST", "/mutate", b" " * (LIMIT + 2), direct=False),
    Case(
        "too-large-gunicorn",
        "POST",
        "/validate",
        b" " * (LIMIT + 2),
        environ=TERMINATED,
        direct=False,
    ),
    Case("one-byte-over", "POST", "/mutate", b" " * (LIMIT + 1), direct=False),
    Case("at-the-limit", "POST", "/mutate", b" " * LIMIT),
    Case(
        "streamed-too-large",
        "POST",
        "/mutate",
        b" " * (LIMIT + 10),
        headers=CHUNKED,
        environ=TERMINATED,
        direct=False,
    ),
    Case(
        "streamed-small",
        "POST",
        "/mutate",
        GPU_POD,
        headers=CHUNKED,
        environ=TERMINATED,
        direct=False,
    ),
    Case("body-cut-short", "POST", "/mutate", GPU_POD[:100], length=len(GPU_POD), direct=False),
    Case("bad-content-length", "POST", "/mutate", GPU_POD, length=-5, direct=False),
    Case("expect", "POST", "/mutate", GPU_POD, headers={"Expect": "100-continue"}, direct=False),
    Case("connection-close", "POST", "/validate", GPU_POD, headers={"Connection": "close"}),
    Case("get-mutate", "GET", "/mutate", direct=False),
    Case("head-mutate", "HEAD", "/mutate", direct=False),
    Case("options-validate", "OPTIONS", "/validate", direct=False),
    Case("put-validate", "PUT", "/validate", GPU_POD, direct=False),
    Case("lower-case-post", "post", "/mutate", GPU_POD, direct=False),
    Case("trailing-slash", "POST", "/mutate/", GPU_POD, direct=False),
    Case("double-slash", "POST", "//mutate", GPU_POD, direct=False),
    Case("upper-case-path", "POST", "/MUTATE", GPU_POD, direct=False),
    Case("healthz", "GET", "/healthz", direct=False),
    Case("post-healthz", "POST", "/healthz", GPU_POD, direct=False),
]


@dataclass
class Seen:
    """What one request produced: the answer, the metrics it moved, the lines it logged."""

    status: str
    headers: list[tuple[str, str]]
    body: bytes
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    logs: list[tuple[str, int, str]]


def _samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    metrics.flush()  # reviews are tallied, and reach the registry in batches
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in REGISTRY.collect()
        if family.name.startswith("gpu_policy_")
        for s in family.samples
        if not _TIMED.search(s.name)
    }


def _logs(records: list[logging.LogRecord]) -> list[tuple[str, int, str]]:
    out = []
    for r in records:
        text = re.sub(r"\bms=\d+\.\d+", "ms=?", r.getMessage())
        if r.exc_info:
            text += f" [{r.exc_info[0].__name__ if r.exc_info[0] else ''}]"
        out.append((r.name, r.levelno, text))
    return out


class Through:
    """Answers a request through the direct path, or through the Flask app."""

    def __init__(self, app: Flask) -> None:
        direct = direct_reviews(app)
        assert isinstance(direct, DirectReviews)
        self.direct = direct
        self.flask = app.wsgi_app

    def run(self, case: Case, *, direct: bool, caplog: pytest.LogCaptureFixture) -> Seen | None:
        """Send ``case`` through one path and record what it did; None when the direct path
        does not read it."""
        before = _samples()
        caplog.clear()
        if direct:
            head = read_review_head(case.raw(), self.direct.paths, LIMIT)
            if head is None:
                return None
            with caplog.at_level(logging.INFO):
                status, headers, body = self.direct.answer(head.path, head.content_type, head.body)
        else:
            started: list[tuple[str, list[tuple[str, str]]]] = []

            def start_response(
                status: str, headers: list[tuple[str, str]], exc: Any = None
            ) -> None:
                started.append((status, list(headers)))

            with caplog.at_level(logging.INFO):
                chunks = self.flask(case.make_environ(), start_response)
                try:
                    body = b"".join(chunks)
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
            ((status, headers),) = started
        after = _samples()
        moved = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        return Seen(status, headers, body, moved, _logs(caplog.records))


@pytest.fixture(scope="module")
def through() -> Through:
    return Through(create_app(Settings(max_body_bytes=LIMIT)))


@pytest.fixture
def unseen() -> Through:
    """An app whose snapshot has answered nothing yet: a pod the module's app answered before
    gets the answer kept for it (webhook/admission/memo.py) without reaching the engine."""
    return Through(create_app(Settings(max_body_bytes=LIMIT)))


def assert_same(flask: Seen | None, direct: Seen | None) -> None:
    assert flask is not None
    assert direct is not None
    assert direct.status == flask.status
    assert direct.headers == flask.headers
    assert direct.body == flask.body
    assert direct.metrics == flask.metrics
    assert direct.logs == flask.logs


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_direct_path_answers_as_flask_does(
    through: Through, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    direct = through.run(case, direct=True, caplog=caplog)
    assert (direct is not None) is case.direct
    if case.direct:
        assert_same(through.run(case, direct=False, caplog=caplog), direct)


def test_the_table_covers_every_kind_of_answer(
    through: Through, caplog: pytest.LogCaptureFixture
) -> None:
    # The comparisons above would prove little if the requests all got the same answer.
    seen = [through.run(c, direct=True, caplog=caplog) for c in CASES if c.direct]
    assert {s.status.split()[0] for s in seen if s is not None} == {"200", "400", "415"}


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def breaker(where: str) -> None:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise ZeroDivisionError("bug")

        if where == "engine":
            monkeypatch.setattr(handler_module, "review", fail)
        else:
            monkeypatch.setattr(app_module, "reply", fail)

    yield breaker


@pytest.mark.parametrize("where", ["engine", "web-layer"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_bugs_are_answered_as_flask_does(
    unseen: Through,
    broken: Callable[[str], None],
    where: str,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken(where)
    case = Case(f"{where}-bug", "POST", path, GPU_POD)
    flask = unseen.run(case, direct=False, caplog=caplog)
    direct = unseen.run(case, direct=True, caplog=caplog)
    assert_same(flask, direct)
    assert direct is not None
    assert direct.status.startswith("500 ")
    assert b"Traceback" not in direct.body
    assert any(
        level == logging.ERROR and "[ZeroDivisionError]" in text for _, level, text in direct.logs
    )


requests = st.builds(
    Case,
    id=st.just("generated"),
    method=st.sampled_from(["POST", "POST", "GET", "PUT", "HEAD", "OPTIONS"]),
    path=st.sampled_from(["/mutate", "/validate", "/mutate/", "/healthz", "/x"]),
    body=st.one_of(
        st.binary(max_size=200),
        st.sampled_from([GPU_POD, GPU_POD_VALIDATE, TWO_GPU_DEPLOYMENT, b"{}", b"null"]),
    ),
    content_type=st.sampled_from([JSON, "application/json;charset=UTF-8", "text/plain", None]),
    query=st.sampled_from(["", "timeout=10s", "a=%ff"]),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=requests)
def test_generated_requests_are_answered_as_flask_does(
    through: Through, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    direct = through.run(case, direct=True, caplog=caplog)
    if direct is not None:
        assert_same(through.run(case, direct=False, caplog=caplog), direct)


_HEAD = (
    b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"HTTP/1.1", b"HTTP/1.0"),
        (b"POST /mutate", b"POST  /mutate"),
        (b"Host: 127.0.0.1", b"Host: 127.0.0.1\r\n folded"),
        (b"Host: 127.0.0.1", b"Ho st: 127.0.0.1"),
        (b"Host: 127.0.0.1", b"Host: 127.0.0.1\x00"),
        (b"Host: 127.0.0.1", b"X_Forwarded: 1"),
        (b"Host: 127.0.0.1", b"Upgrade: h2c"),
        (b"Content-Length: 2", b"Content-Length: 2\r\nContent-Length: 2"),
        (b"Content-Length: 2", b"Content-Length: " + b"0" * 5000 + b"2"),
        (b"Content-Type: application/json", b"Content-Type: a\r\nContent-Type: b"),
        (b"{}", b"{}GET / HTTP/1.1\r\n\r\n"),  # a pipelined next request
        (b"?timeout=10s", b"?t=\x7f"),
    ],
)
def test_the_head_reader_leaves_anything_unusual_to_gunicorn(old: bytes, new: bytes) -> None:
    assert read_review_head(_HEAD, {"/mutate"}, LIMIT) is not None
    assert read_review_head(_HEAD.replace(old, new), {"/mutate"}, LIMIT) is None


def test_a_review_is_counted_and_logged_only_when_its_sender_says_the_answer_is_out(
    unseen: Through, caplog: pytest.LogCaptureFixture
) -> None:
    # The worker sends the answer, then calls the record: until then no log line, no count.
    before = _samples()
    with caplog.at_level(logging.INFO):
        status, _, body, record = unseen.direct.answer_first("/mutate", JSON, GPU_POD)
        assert status == "200 OK" and json.loads(body)["response"]["allowed"] is True
        assert not [r for r in caplog.records if "review uid=" in r.getMessage()]
        assert _samples() == before
        record()
    assert [r for r in caplog.records if "review uid=" in r.getMessage()]
    assert _samples() != before


def test_a_record_that_fails_after_the_answer_is_logged_not_raised(
    unseen: Through, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*_: Any) -> None:
        raise RuntimeError("metrics backend gone")

    monkeypatch.setattr(metrics, "record_review", fails)
    status, _, body, record = unseen.direct.answer_first("/mutate", JSON, GPU_POD)
    assert status == "200 OK" and json.loads(body)["response"]["allowed"] is True
    with caplog.at_level(logging.ERROR):
        record()  # the answer is out: nothing may reach the connection's handling
    assert any(
        "could not count or log the review on /mutate" in r.getMessage() for r in caplog.records
    )
