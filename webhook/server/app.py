"""The Flask adapter: HTTP in, ``webhook.admission`` in the middle, HTTP out.

Routes (on the path only: the API server appends ``?timeout=10s`` to the webhook URL):

* ``POST /mutate``, ``POST /validate``: AdmissionReview v1 (see ``webhook.admission``).
* ``GET /healthz``: the process is alive (it answers).
* ``GET /readyz``: a policy is loaded and, when this process serves TLS through the gunicorn
  config, its certificate is within its validity window; 503 with the reason otherwise.
* ``GET /metrics``: Prometheus text (see ``webhook.server.metrics``).

Everything a client can get wrong is a 4xx with a one-line ``text/plain`` body, never an HTML
page or a traceback: 404 unknown path, 405 wrong method, 415 a Content-Type other than
``application/json``, 413 a body over the limit (by Content-Length, or while reading a body
streamed without one), 400 a body that is not an AdmissionReview v1. A 500 means a bug here;
an engine bug gets the well-formed AdmissionReview of ``webhook.admission`` with HTTP 500, so
the API server applies the webhook's failurePolicy.

One log line per review (``webhook.server.logs.ReviewLog``: uid, endpoint, kind, namespace,
name, operation, dryRun, decision, failed rules, milliseconds); objects are never logged.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, request
from flask.sessions import NullSession, SessionInterface
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import get_input_stream

from webhook.admission import Endpoint, RequestError, reply
from webhook.contract import (
    HEALTHZ_PATH,
    METRICS_PATH,
    MUTATE_PATH,
    READYZ_PATH,
    VALIDATE_PATH,
)
from webhook.server import metrics
from webhook.server.logs import ReviewLog
from webhook.server.settings import Settings
from webhook.server.state import KeptFiles, PolicyState

if TYPE_CHECKING:
    from webhook.server.cluster import ClusterFeed

logger = logging.getLogger(__name__)

# A readiness check answers (ready, reason); /readyz is 200 when all of them are ready.
ReadyCheck = Callable[[], tuple[bool, str]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# An answer before it is put into a response: HTTP status, body, headers.
Answer = tuple[int, bytes, list[tuple[str, str]]]

EXTENSION = "gpu_policy"
DIRECT = "gpu_policy_direct"
PATHS = (MUTATE_PATH, VALIDATE_PATH, HEALTHZ_PATH, READYZ_PATH, METRICS_PATH)
_REVIEW_PATHS: tuple[tuple[Endpoint, str], ...] = (
    ("mutate", MUTATE_PATH),
    ("validate", VALIDATE_PATH),
)

_JSON = "application/json"
_TEXT = "text/plain; charset=utf-8"
# Reason tokens for HTTP errors raised by Flask/Werkzeug themselves (metrics labels).
_HTTP_REASONS = {
    400: "bad-request",
    404: "not-found",
    405: "method-not-allowed",
    413: "too-large",
    415: "unsupported-media-type",
}


@dataclass
class Webhook:
    """What the app serves with: settings, the policy state and the readiness checks."""

    settings: Settings
    state: PolicyState
    ready_checks: list[ReadyCheck] = field(default_factory=list)
    cluster: ClusterFeed | None = None

    def readiness(self) -> tuple[bool, list[str]]:
        """(ready, one reason per check), checking the policy files for changes first."""
        self.state.maybe_reload()
        snapshot = self.state.snapshot
        reasons = [
            f"policy {snapshot.policy.name} from {snapshot.policy.source} "
            f"(generation {snapshot.generation}), inventory {snapshot.inventory.source}"
        ]
        if self.state.last_error:
            reasons.append(f"last policy reload failed: {self.state.last_error}")
        ready = True
        for check in self.ready_checks:
            ok, reason = check()
            ready = ready and ok
            reasons.append(reason)
        return ready, reasons

    def readyz(self) -> Response:
        """``GET /readyz``: 200 ``ready: ...`` or 503 ``not ready: ...``, every reason."""
        ready, reasons = self.readiness()
        return _text(
            ("ready: " if ready else "not ready: ") + "; ".join(reasons), 200 if ready else 503
        )


def tls_not_served() -> tuple[bool, str]:
    """The certificate check of an app whose TLS is terminated elsewhere (the default)."""
    return True, "TLS not served by this process"


class _NoSessions(SessionInterface):
    """The webhook keeps no sessions: every request gets the same empty, read-only session.

    Flask's default interface builds a new ``NullSession`` for each request of an app without
    a secret key; a shared one (it refuses writes) saves that on every review.
    """

    _null = NullSession()

    def open_session(self, app: Flask, request: Any) -> None:
        """No session to open: Flask then asks for the null one."""
        return None

    def make_null_session(self, app: Flask) -> NullSession:
        """The one shared null session."""
        return self._null


def _text_answer(message: str, status: int) -> Answer:
    # One line, whatever the message was built from.
    return _answer(status, (" ".join(message.split()) + "\n").encode(), _TEXT)


def _answer(status: int, body: bytes, content_type: str) -> Answer:
    # The headers Werkzeug's Response sets for a bytes body, in its order.
    return status, body, [("Content-Type", content_type), ("Content-Length", str(len(body)))]


def _response(answer: Answer) -> Response:
    status, body, headers = answer
    return Response(body, status=status, headers=headers)


def _text(message: str, status: int) -> Response:
    return _response(_text_answer(message, status))


def _is_json(content_type: str) -> bool:
    if content_type == _JSON:
        return True
    mimetype = content_type.split(";", 1)[0].strip().lower()
    return mimetype == _JSON


# Read and drop an over-limit body up to this size before answering 413: a client still
# sending when the server closes sees a reset instead of the answer. Larger bodies are cut off.
_DRAIN_LIMIT = 32 * 1024 * 1024


def _drain(environ: dict[str, Any]) -> None:
    stream = environ.get("wsgi.input")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    if stream is None or not 0 < length <= _DRAIN_LIMIT:
        return
    try:
        while length > 0:
            chunk = stream.read(min(length, 1 << 16))
            if not chunk:
                return
            length -= len(chunk)
    except OSError:
        return


def create_app(
    settings: Settings | None = None,
    *,
    ready_checks: Sequence[ReadyCheck] = (tls_not_served,),
    last_good: KeptFiles | None = None,
) -> Flask:
    """The webhook's Flask app, serving the policy the settings name.

    Loads the policy and inventory now and raises ``PolicyError`` when they are unusable (a
    worker fails at start, not at a request). With ``settings.kube`` other than ``off`` it
    starts watching the cluster (``webhook.server.cluster``; ``ClusterError`` when the
    configuration cannot be loaded). ``/readyz`` runs ``ready_checks`` after the policy's:
    ``webhook.server.wsgi`` passes the served certificate's check; the default says TLS is
    terminated elsewhere. ``last_good``: the files' texts to serve when they do not load now
    (``webhook.server.state``). The app's ``Webhook`` object is ``app.extensions["gpu_policy"]``.
    """
    settings = settings or Settings.from_env()
    hook = start_webhook(settings, ready_checks, last_good)
    app = Flask(__name__)
    app.session_interface = _NoSessions()
    # The review endpoints' limit (see _ReviewEndpoint), for any other route that reads a body.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions[EXTENSION] = hook
    review_log = ReviewLog(logger)
    reviews = {
        path: _ReviewEndpoint(endpoint, hook.state, settings.max_body_bytes, review_log)
        for endpoint, path in _REVIEW_PATHS
    }
    for path, review in reviews.items():
        app.add_url_rule(path, review.endpoint, view_func=review.view, methods=["POST"])
    app.add_url_rule(HEALTHZ_PATH, view_func=healthz, methods=["GET"])
    app.add_url_rule(READYZ_PATH, view_func=hook.readyz, methods=["GET"])
    app.add_url_rule(METRICS_PATH, view_func=metrics_view, methods=["GET"])
    http_errors = _HTTPErrors(settings.max_body_bytes)
    app.register_error_handler(HTTPException, http_errors)
    app.register_error_handler(Exception, _internal_error)
    app.extensions[DIRECT] = DirectReviews(reviews)
    return app


def direct_reviews(app: object) -> DirectReviews | None:
    """The reviews of ``app`` for a server that reads their requests itself, when ``app`` is
    the webhook's (``create_app``); None for any other WSGI app."""
    extensions = getattr(app, "extensions", None)
    found = extensions.get(DIRECT) if isinstance(extensions, dict) else None
    return found if isinstance(found, DirectReviews) else None


def start_webhook(
    settings: Settings, ready_checks: Sequence[ReadyCheck], last_good: KeptFiles | None = None
) -> Webhook:
    """Load the policy (PolicyError when unusable) and, when asked, start watching the cluster."""
    state = PolicyState(settings, on_reload=metrics.record_reload, last_good=last_good)
    hook = Webhook(settings, state, list(ready_checks))
    if settings.watches_cluster:
        from webhook.server.cluster import ClusterFeed

        hook.cluster = ClusterFeed.from_settings(settings, state).start()
        hook.ready_checks.append(hook.cluster.ready)
    logger.info(
        "serving policy %s from %s, inventory %s",
        state.snapshot.policy.name,
        state.snapshot.policy.source,
        state.snapshot.inventory.source,
    )
    return hook


class _ReviewEndpoint:
    """``POST /mutate`` or ``/validate`` on the WSGI environ alone: the path every review takes.

    Called by :class:`DirectReviews` (every review the worker reads itself) and by the Flask
    view (``view``: every other review, and the reference the tests compare with). Raises
    Werkzeug's ``HTTPException`` for a body over the limit or cut short; the caller answers it
    with :class:`_HTTPErrors`.
    """

    def __init__(
        self, endpoint: Endpoint, state: PolicyState, max_bytes: int, review_log: ReviewLog
    ) -> None:
        """Answer for ``endpoint`` with ``state``'s snapshot of the moment."""
        self.endpoint = endpoint
        self.state = state
        self.max_bytes = max_bytes
        # One byte over the limit: Werkzeug stops a body streamed without Content-Length at
        # this many bytes *without* an error, so the body read can be one byte too long, and
        # webhook.admission answers 413 for it. A Content-Length over it is refused unread.
        self.read_limit = max_bytes + 1
        self.review_log = review_log

    def __call__(self, environ: dict[str, Any]) -> Answer:
        """The answer to the review in ``environ``: counted, logged, serialized."""
        started = time.perf_counter()
        content_type = environ.get("CONTENT_TYPE", "")
        if not _is_json(content_type):
            return self.answer(content_type, b"", started)
        # What Flask's request.get_data() does: RequestEntityTooLarge (413) by Content-Length;
        # a body streamed without one (gunicorn sets wsgi.input_terminated) is read up to the
        # limit plus one byte; ClientDisconnected (400) for a body cut short.
        body = get_input_stream(environ, max_content_length=self.read_limit).read()
        return self.answer(content_type, body, started)

    def answer(self, content_type: str, body: bytes, started: float) -> Answer:
        """The answer to a review of ``content_type`` whose whole ``body`` was read (at most
        ``read_limit`` bytes), received from ``started`` (``time.perf_counter()``) on: counted
        and logged before it is returned."""
        answer, record = self.answer_first(content_type, body, started)
        record()
        return answer

    def answer_first(
        self, content_type: str, body: bytes, started: float
    ) -> tuple[Answer, Callable[[], None]]:
        """:meth:`answer`, and what is left to do once it is sent: the review's metrics and log
        line (nothing for a request refused before a review). The worker sends the answer
        first: a call's metrics and log line (~60-75 us of CPU after a pause:
        docs/performance.md, "Eighth round") no longer hold its answer back, as an access log
        does not in most servers. The duration they record is the same, taken before the
        answer is sent."""
        state = self.state
        state.maybe_reload()
        if not _is_json(content_type):
            metrics.record_bad_request("unsupported-media-type")
            shown = repr(content_type[:60]) if content_type else "none"
            return _text_answer(f"Content-Type must be {_JSON}, got {shown}", 415), _nothing
        snapshot = state.snapshot
        try:
            replied = reply(
                self.endpoint,
                body,
                policy=snapshot.policy,
                inventory=snapshot.inventory,
                max_bytes=self.max_bytes,
            )
        except RequestError as exc:
            metrics.record_bad_request(exc.reason)
            logger.info("bad request on /%s: %s: %s", self.endpoint, exc.reason, exc)
            return _text_answer(str(exc), exc.status), _nothing
        seconds = time.perf_counter() - started

        def record() -> None:
            # After the write: the Outcome of an answer kept for the request's key is made
            # now, and a fresh answer is kept now for its key (webhook/admission/handler.py).
            outcome = replied.outcome()
            metrics.record_review(outcome, seconds)
            self.review_log.write(outcome, seconds)

        return _answer(replied.http_status, replied.body, _JSON), record

    def view(self) -> Response:
        """The Flask view of the endpoint."""
        return _response(self(request.environ))


class DirectReviews:
    """``POST /mutate`` and ``POST /validate`` answered from a request's content type and body.

    ``webhook.server.worker`` reads a review request itself (``webhook.server.direct``) and
    answers it here: the same :class:`_ReviewEndpoint` the Flask views call, the same answers,
    metrics and log lines (tests/core/server/test_direct.py), without the WSGI environ. Every
    request it does not read itself goes to the Flask app.
    """

    def __init__(self, reviews: Mapping[str, _ReviewEndpoint]) -> None:
        """Answer the ``reviews`` (path -> endpoint)."""
        self.reviews = dict(reviews)
        self.paths = frozenset(self.reviews)

    def answer(
        self, path: str, content_type: str, body: bytes
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        """Status line (``"200 OK"``), headers and body of the answer to a whole review
        request on ``path`` (one of ``paths``), counted and logged."""
        status, headers, answer, record = self.answer_first(path, content_type, body)
        record()
        return status, headers, answer

    def answer_first(
        self, path: str, content_type: str, body: bytes
    ) -> tuple[str, list[tuple[str, str]], bytes, Callable[[], None]]:
        """:meth:`answer`, and what to call once the answer is sent (its metrics and log line:
        ``_ReviewEndpoint.answer_first``); that call never raises."""
        started = time.perf_counter()
        record = _nothing
        try:
            endpoint = self.reviews[path]
            (status, answer, headers), record = endpoint.answer_first(content_type, body, started)
        except Exception as exc:
            status, answer, headers = _internal_answer(exc, "POST", path)
        return _status_line(status), headers, answer, _guarded(record, path)


def _nothing() -> None:
    """What is left to record of a request refused before any review: nothing."""


def _guarded(record: Callable[[], None], path: str) -> Callable[[], None]:
    """``record``, which runs after its answer was sent: an exception in it is logged, never
    raised into the connection's handling (the answer is out already)."""

    def run() -> None:
        try:
            record()
        except Exception:
            logger.exception("could not count or log the review on %s", path)

    return run


@functools.cache
def _status_line(status: int) -> str:
    # Werkzeug's own status line for the code ("400 BAD REQUEST"), made once per code.
    return Response(status=status).status


def healthz() -> Response:
    """``GET /healthz``: the process answers."""
    return _text("ok", 200)


def metrics_view() -> Response:
    """``GET /metrics``: the Prometheus text of every worker."""
    data, content_type = metrics.exposition()
    return Response(data, status=200, content_type=content_type)


class _HTTPErrors:
    """The answer to an HTTP error raised by Flask or Werkzeug: one line, counted, logged."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def __call__(self, exc: HTTPException) -> Response:
        return _response(self.answer(exc, request.method, request.path, request.environ))

    def answer(self, exc: HTTPException, method: str, path: str, environ: dict[str, Any]) -> Answer:
        """The answer to ``exc`` raised for ``method`` ``path`` (``environ``: the request)."""
        code = exc.code or 500
        reason = _HTTP_REASONS.get(code, f"http-{code}")
        metrics.record_bad_request(reason)
        logger.info("HTTP %d on %s %s: %s", code, method, path[:100], reason)
        status, body, headers = _text_answer(self._message(exc, code, method, path, environ), code)
        for name, value in exc.get_headers():
            if name.lower() == "allow":
                headers.append((name, value))
        return status, body, headers

    def _message(
        self, exc: HTTPException, code: int, method: str, path: str, environ: dict[str, Any]
    ) -> str:
        if isinstance(exc, RequestEntityTooLarge):
            _drain(environ)
            return f"request body is over the limit of {self.max_bytes} bytes"
        if code == 404:
            return f"no such path {path[:100]!r}; paths: {', '.join(PATHS)}"
        if code == 405:
            valid = getattr(exc, "valid_methods", None) or ()
            allowed = ", ".join(sorted(m for m in valid if m not in ("OPTIONS", "HEAD")))
            return f"method {method} is not allowed on {path}; use {allowed}"
        return f"{exc.name}: {exc.description or ''}"


def _internal_error(exc: Exception) -> Response:
    return _response(_internal_answer(exc, request.method, request.path))


def _internal_answer(exc: Exception, method: str, path: str) -> Answer:
    # A bug in this layer: log it with its traceback, answer one line.
    logger.exception("internal error on %s %s", method, path[:100])
    return _text_answer(f"internal error ({type(exc).__name__})", 500)
