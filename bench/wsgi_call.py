"""CPU of one review inside the WSGI app: no sockets, no TLS, no gunicorn, one thread.

Calls each WSGI callable with the environ of a POST of bench/http_load.py's ~3.9 KB pod CREATE (a
werkzeug test environ, a fresh input stream per call) and reads the whole answer, for:

* ``wsgi``: bench/latency.py's bare WSGI callable (parse the JSON, allow with the uid): the
  baseline, measured in the same run;
* ``flask no-op``: bench/http_load.py's no-op Flask app, the same work under Flask;
* ``/mutate direct``, ``/validate direct``: this webhook's reviews as the worker answers them
  (``webhook.server.direct.read_review_head`` on the request's bytes, ``DirectReviews``, the
  answer's bytes by ``webhook.server.response.answer_bytes``), without WSGI;
* ``/mutate via Flask``, ``/validate via Flask``: the same app's Flask path, which answers
  every request the worker does not read itself.

Printed: microseconds per call (the best of ``--repeat`` runs of ``--calls`` calls) and the
ratio to the bare callable. The review log lines go to /dev/null through the server's own
batching handler (``configure_logging``), as in a worker; metrics go to the default registry.

    .venv/bin/python -m bench.wsgi_call [--calls 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.test import EnvironBuilder

from bench.http_load import noop_app, review_body
from bench.latency import wsgi_app
from webhook.server import Settings, create_app
from webhook.server.app import direct_reviews
from webhook.server.direct import read_review_head
from webhook.server.logs import LineBufferedHandler, configure_logging
from webhook.server.response import answer_bytes

WSGI = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
    if not status.startswith("200 "):
        raise SystemExit(f"the benchmark's request was answered {status}")


def timed(app: WSGI, environ: dict[str, Any], body: bytes, calls: int, repeat: int) -> float:
    """Best microseconds per call of ``app`` over ``repeat`` runs of ``calls`` calls."""

    def once() -> None:
        env = dict(environ)
        env["wsgi.input"] = io.BytesIO(body)
        answer = app(env, _start_response)
        b"".join(answer)
        close = getattr(answer, "close", None)
        if close is not None:
            close()

    for _ in range(calls // 10):  # warm-up
        once()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(calls):
            once()
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e6


def direct(app: Any, path: str, body: bytes) -> WSGI:
    """The worker's own answer to a review on ``path`` as a WSGI-shaped callable (the environ
    is not read: the request's bytes are made once, as the worker gathers them)."""
    reviews = direct_reviews(app)
    assert reviews is not None
    request = (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:8443\r\n"
        "User-Agent: kube-apiserver-admission\r\nAccept: application/json, */*\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Accept-Encoding: gzip\r\n\r\n"
    ).encode() + body

    def call(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        head = read_review_head(request, reviews.paths, 7 << 20)
        assert head is not None
        status, headers, answer = reviews.answer(head.path, head.content_type, head.body)
        start_response(status, headers)
        return [answer_bytes(status, head.must_close, headers, answer)]

    return call


def main() -> None:
    """Measure and print."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=20_000, help="calls per run")
    p.add_argument("--repeat", type=int, default=5, help="runs per app (the best counts)")
    args = p.parse_args()

    configure_logging("info")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, LineBufferedHandler):
            handler.fd = os.open(os.devnull, os.O_WRONLY)
    app = create_app(Settings.from_env())
    body = review_body()
    apps: list[tuple[str, str, WSGI]] = [
        ("wsgi", "/mutate", wsgi_app),
        ("flask no-op", "/mutate", noop_app),
        ("/mutate direct", "/mutate", direct(app, "/mutate", body)),
        ("/mutate via Flask", "/mutate", app),
        ("/validate direct", "/validate", direct(app, "/validate", body)),
        ("/validate via Flask", "/validate", app),
    ]
    print(f"one POST of a {len(body):,}-byte pod CREATE per call, best of {args.repeat} x")
    print(f"{args.calls:,} calls, in process; load average {os.getloadavg()[0]:.2f}")
    print(f"{'app':<22}{'us/call':>9}{'x wsgi':>8}")
    base = None
    for name, path, target in apps:
        environ = EnvironBuilder(
            path=path,
            method="POST",
            query_string="timeout=10s",
            data=body,
            content_type="application/json",
        ).get_environ()
        us = timed(target, environ, body, args.calls, args.repeat)
        base = base or us
        print(f"{name:<22}{us:>9.1f}{us / base:>8.2f}")


if __name__ == "__main__":
    main()
