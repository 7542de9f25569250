"""CPU of one review inside the WSGI app: no sockets, no TLS, no gunicorn, one thread.

Calls each WSGI callable with the environ of a POST of bench/http_load.py's ~3.9 KB pod CREATE (a
werkzeug test environ, a fresh input stream per call) and reads the whole answer, for:

* ``wsgi``: bench/latency.py's bare WSGI callable (parse the JSON, allow with the uid): the
  baseline, measured in the same run;
* ``flask no-op``: bench/http_load.py's no-op Flask app, the same work under Flask;
* ``/mutate``, ``/validate``: this webhook's app as served (``create_app``: the lean dispatch
  of ``webhook.server.app.LeanReviews`` in front of Flask);
* ``/mutate via Flask``, ``/validate via Flask``: the same app's Flask path, the callable
  ``LeanReviews`` hands every other request to: what each review cost before.

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
from webhook.server.app import LeanReviews
from webhook.server.logs import LineBufferedHandler, configure_logging

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
    lean = app.wsgi_app
    assert isinstance(lean, LeanReviews)
    body = review_body()
    apps: list[tuple[str, str, WSGI]] = [
        ("wsgi", "/mutate", wsgi_app),
        ("flask no-op", "/mutate", noop_app),
        ("/mutate", "/mutate", app),
        ("/mutate via Flask", "/mutate", lean.flask),
        ("/validate", "/validate", app),
        ("/validate via Flask", "/validate", lean.flask),
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
