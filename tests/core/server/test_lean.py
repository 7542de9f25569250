"""The lean dispatch of POST /mutate and /validate answers exactly as Flask's own path does.

``create_app`` installs ``webhook.server.app.LeanReviews`` as ``app.wsgi_app``; Flask's own
WSGI callable stays behind it as ``app.wsgi_app.flask``. Each request below goes through both
(the same app, a fresh environ each time) and must get the same status line, headers and body,
move the same Prometheus series by the same amounts, and log the same lines (the review line's
``ms=`` aside). The table also says which requests the lean path answers itself, so a change
that sent every review back through Flask would fail here too.
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
from webhook.server.app import LeanReviews

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
    """One request: what is sent, and whether the lean path answers it without Flask."""

    id: str
    method: str
    path: str
    body: bytes = b""
    content_type: str | None = JSON
    lean: bool = True
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
    Case("too-large", "POST", "/mutate", b" " * (LIMIT + 2)),
    Case("too-large-gunicorn", "POST", "/validate", b" " * (LIMIT + 2), environ=TERMINATED),
    Case("one-byte-over", "POST", "/mutate", b" " * (LIMIT + 1)),
    Case("at-the-limit", "POST", "/mutate", b" " * LIMIT),
    Case(
        "streamed-too-large",
        "POST",
        "/mutate",
        b" " * (LIMIT + 10),
        headers=CHUNKED,
        environ=TERMINATED,
    ),
    Case("streamed-small", "POST", "/mutate", GPU_POD, headers=CHUNKED, environ=TERMINATED),
    Case("body-cut-short", "POST", "/mutate", GPU_POD[:100], length=len(GPU_POD)),
    Case("bad-content-length", "POST", "/mutate", GPU_POD, length=-5),
    Case("get-mutate", "GET", "/mutate", lean=False),
    Case("head-mutate", "HEAD", "/mutate", lean=False),
    Case("options-validate", "OPTIONS", "/validate", lean=False),
    Case("put-validate", "PUT", "/validate", GPU_POD, lean=False),
    Case("lower-case-post", "post", "/mutate", GPU_POD, lean=False),
    Case("trailing-slash", "POST", "/mutate/", GPU_POD, lean=False),
    Case("double-slash", "POST", "//mutate", GPU_POD, lean=False),
    Case("upper-case-path", "POST", "/MUTATE", GPU_POD, lean=False),
    Case("healthz", "GET", "/healthz", lean=False),
    Case("post-healthz", "POST", "/healthz", GPU_POD, lean=False),
]


@dataclass
class Seen:
    """What one request produced: the answer, the metrics it moved, the lines it logged."""

    status: str
    headers: list[tuple[str, str]]
    body: bytes
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    logs: list[tuple[str, int, str]]
    through_flask: bool


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
    """Calls the app's lean dispatch, or Flask's own WSGI callable behind it."""

    def __init__(self, app: Flask) -> None:
        lean = app.wsgi_app
        assert isinstance(lean, LeanReviews)
        self.lean = lean
        self.flask = lean.flask
        self.flask_calls = 0
        lean.flask = self._counted

    def _counted(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        self.flask_calls += 1
        return self.flask(environ, start_response)

    def run(self, case: Case, *, lean: bool, caplog: pytest.LogCaptureFixture) -> Seen:
        """Send ``case`` through one path and record what it did."""
        before = _samples()
        calls = self.flask_calls
        caplog.clear()
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
            started.append((status, list(headers)))

        target = self.lean if lean else self.flask
        with caplog.at_level(logging.INFO):
            chunks = target(case.make_environ(), start_response)
            try:
                body = b"".join(chunks)
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
        after = _samples()
        moved = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        ((status, headers),) = started
        return Seen(
            status,
            headers,
            body,
            moved,
            _logs(caplog.records),
            self.flask_calls > calls,
        )


@pytest.fixture(scope="module")
def through() -> Through:
    return Through(create_app(Settings(max_body_bytes=LIMIT)))


def assert_same(flask: Seen, lean: Seen) -> None:
    assert lean.status == flask.status
    assert lean.headers == flask.headers
    assert lean.body == flask.body
    assert lean.metrics == flask.metrics
    assert lean.logs == flask.logs


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_lean_path_answers_as_flask_does(
    through: Through, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    flask = through.run(case, lean=False, caplog=caplog)
    lean = through.run(case, lean=True, caplog=caplog)
    assert_same(flask, lean)
    assert lean.through_flask is not case.lean


def test_the_table_covers_every_kind_of_answer(
    through: Through, caplog: pytest.LogCaptureFixture
) -> None:
    # The comparisons above would prove little if the requests all got the same answer.
    statuses = {through.run(c, lean=True, caplog=caplog).status for c in CASES if c.lean}
    assert {s.split()[0] for s in statuses} == {"200", "400", "413", "415"}


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def breaker(where: str) -> None:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise ZeroDivisionError("bug")

        if where == "engine":
            monkeypatch.setattr(handler_module, "review", fail)
        else:
            monkeypatch.setattr(app_module, "handle", fail)

    yield breaker


@pytest.mark.parametrize("where", ["engine", "web-layer"])
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_bugs_are_answered_as_flask_does(
    through: Through,
    broken: Callable[[str], None],
    where: str,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken(where)
    case = Case(f"{where}-bug", "POST", path, GPU_POD)
    flask = through.run(case, lean=False, caplog=caplog)
    lean = through.run(case, lean=True, caplog=caplog)
    assert_same(flask, lean)
    assert lean.status.startswith("500 ")
    assert b"Traceback" not in lean.body
    assert any(
        level == logging.ERROR and "[ZeroDivisionError]" in text for _, level, text in lean.logs
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
    assert_same(
        through.run(case, lean=False, caplog=caplog), through.run(case, lean=True, caplog=caplog)
    )
