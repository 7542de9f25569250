"""Where a review's time goes when it comes after a pause, in process, stage by stage.

Through a cluster's API server every call comes after a pause, and a review then costs the
server four to five times what it costs back to back (docs/performance.md, "Sixth round"). This
times the stages of the worker's direct path, one review at a time, in three settings:

* ``back to back``: the next review at once;
* ``pause``: ``--pause`` ms of sleep before each review (other processes on the machine run
  meanwhile, as they do between an API server's calls);
* ``pause + evict``: the same, then ``--evict`` MiB of memory written before the review, so that
  the review finds none of its data in the CPU's caches whatever else runs;
* ``busy pause``: ``--pause`` ms spent in a loop of this thread instead of asleep: the thread
  never sleeps (no idle state of the core), though on a loaded machine other processes still
  take the core from it now and then.

The stages, as ``_ReviewEndpoint.answer`` (``webhook.server.app``) runs them: ``head``
(``read_review_head`` on the request's bytes), ``reload check`` (``PolicyState.maybe_reload``),
``decode`` (``parse_review``: orjson and the AdmissionRequest), ``engine`` (``respond``: the
policy, the patch or verdict, the answer encoded), ``metrics`` (``metrics.record_review``),
``log line`` (``ReviewLog.write``, through the server's own handler into /dev/null), ``answer``
(``answer_bytes``). Printed: the median microseconds of each stage over ``--calls`` reviews
(``/mutate`` and ``/validate`` in turns), and the whole; by the wall clock, or with ``--clock
cpu`` by this thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``), which leaves out the time the
thread waited for a core.

    .venv/bin/python -m bench.cold_review [--calls 400] [--pause 40] [--evict 64]
                                          [--distinct [demand]]
    .venv/bin/python -m bench.cold_review --count-calls [--distinct [demand]]

``--distinct`` gives every review's pod a container name of its own (the GPU container's
``trainer`` becomes ``trainer-<n>``), so that nothing kept per pod spec (an answer kept per
pod) helps: each review is of a pod seen for the first time. The allocator's verdict is kept
by what a pod asks of a node, which a container's name does not change; ``--distinct
demand`` also gives each pod a toleration of its own (of a taint no node has: the verdict
is the same), so that each review walks the allocator too.

``--count-calls`` prints, instead of times, the Python calls one review makes
(``sys.setprofile``: calls into Python functions, and the distinct functions and files they
belong to), for ``/mutate`` and ``/validate``.

In process there is no socket, TLS or thread hand-off: this is the review's own share of a call.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import orjson

from bench.http_load import review_body
from webhook.admission import parse_review, respond
from webhook.server import Settings, create_app, metrics
from webhook.server.app import direct_reviews
from webhook.server.direct import read_review_head
from webhook.server.logs import LineBufferedHandler, configure_logging
from webhook.server.response import answer_bytes

STAGES = ("head", "reload check", "decode", "engine", "metrics", "log line", "answer")


def request_bytes(path: str, body: bytes) -> bytes:
    """The request as kube-apiserver sends it (the head of bench/wsgi_call.py)."""
    return (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:8443\r\n"
        "User-Agent: kube-apiserver-admission\r\nAccept: application/json, */*\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Accept-Encoding: gzip\r\n\r\n"
    ).encode() + body


def review_once(reviews: Any, request: bytes, clock: Callable[[], int]) -> list[int]:
    """One review through the direct path's stages; nanoseconds of each by ``clock``."""
    t0 = clock()
    head = read_review_head(request, reviews.paths, 7 << 20)
    assert head is not None
    t1 = clock()
    endpoint = reviews.reviews[head.path]
    state = endpoint.state
    state.maybe_reload()
    t2 = clock()
    parsed = parse_review(head.body, max_bytes=endpoint.max_bytes)
    t3 = clock()
    snapshot = state.snapshot
    outcome = respond(
        endpoint.endpoint, parsed, policy=snapshot.policy, inventory=snapshot.inventory
    )
    t4 = clock()
    seconds = (t4 - t0) / 1e9
    metrics.record_review(outcome, seconds)
    t5 = clock()
    endpoint.review_log.write(outcome, seconds)
    t6 = clock()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(outcome.body)))]
    answer_bytes("200 OK", head.must_close, headers, outcome.body)
    t7 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6]


def distinct_bodies(body: bytes, count: int, demand: bool = False) -> list[bytes]:
    """``count`` copies of the review ``body``, each pod's GPU container named apart; with
    ``demand``, each pod also tolerating a taint of its own."""
    doc = orjson.loads(body)
    spec = doc["request"]["object"]["spec"]
    tolerations = list(spec.get("tolerations") or [])
    out = []
    for n in range(count):
        spec["containers"][0]["name"] = f"trainer-{n}"
        if demand:
            spec["tolerations"] = [
                *tolerations,
                {"key": f"example.com/pod-{n}", "operator": "Exists"},
            ]
        out.append(orjson.dumps(doc))
    return out


def count_calls(reviews: Any, request: bytes) -> tuple[int, int, int]:
    """Python calls one review makes: calls, distinct functions, distinct modules."""
    codes: list[Any] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            codes.append(frame.f_code)

    sys.setprofile(profile)
    try:
        review_once(reviews, request, time.perf_counter_ns)
    finally:
        sys.setprofile(None)
    functions = set(codes)
    return len(codes), len(functions), len({c.co_filename for c in functions})


def run(
    reviews: Any,
    requests: Iterator[bytes],
    calls: int,
    before: Callable[[], None],
    clock: Callable[[], int],
) -> list[float]:
    """Median microseconds per stage, then of the whole, over ``calls`` reviews."""
    samples: list[list[int]] = []
    for _ in range(calls):
        before()
        samples.append(review_once(reviews, next(requests), clock))
    columns = [*zip(*samples, strict=True), [sum(s) for s in samples]]
    return [statistics.median(c) / 1000 for c in columns]


def review_requests(distinct: str | None, count: int) -> list[bytes]:
    """The requests to review, ``/mutate`` and ``/validate`` in turns: one pod for all, or
    with ``distinct`` (``name`` or ``demand``) ``count`` pods each of its own."""
    body = review_body()
    if distinct is None:
        bodies = [body, body]
    else:
        bodies = distinct_bodies(body, count + count % 2, demand=distinct == "demand")
    paths = ("/mutate", "/validate")
    return [request_bytes(paths[n % 2], b) for n, b in enumerate(bodies)]


def print_calls(reviews: Any, stream: Iterator[bytes]) -> None:
    """Print the Python calls of one ``/mutate`` and one ``/validate`` after a warm-up."""
    for _ in range(10):  # warm-up: imports, caches of the engine
        review_once(reviews, next(stream), time.perf_counter_ns)
    for path in ("/mutate", "/validate"):
        calls, functions, modules = count_calls(reviews, next(stream))
        print(f"{path}: {calls} calls into {functions} functions of {modules} files")


def main() -> None:
    """Measure the three settings, interleaved in rounds, and print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=400, help="reviews per setting and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pause", type=float, default=40.0, help="ms before each review")
    p.add_argument("--evict", type=int, default=64, help="MiB written after the pause")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument(
        "--distinct",
        nargs="?",
        const="name",
        choices=("name", "demand"),
        help="a pod of its own for every review (demand: asking something of its own too)",
    )
    p.add_argument("--count-calls", action="store_true", help="print Python calls per review")
    args = p.parse_args()
    clock = time.perf_counter_ns if args.clock == "wall" else time.thread_time_ns
    configure_logging("info")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, LineBufferedHandler):
            handler.fd = os.open(os.devnull, os.O_WRONLY)
    reviews = direct_reviews(create_app(Settings.from_env()))
    assert reviews is not None
    # warm-up, then every round and setting: with --distinct, each review its own pod
    stream = itertools.cycle(review_requests(args.distinct, 100 + args.rounds * 4 * args.calls))
    if args.count_calls:
        print_calls(reviews, stream)
        return
    sweep = bytearray(args.evict << 20)
    pause = args.pause / 1000

    def evict() -> None:
        time.sleep(pause)
        # one write per 64-byte cache line, through the whole buffer
        sweep[::64] = bytes(len(sweep[::64]))

    def spin() -> None:
        end = time.perf_counter() + pause
        while time.perf_counter() < end:
            pass

    settings: dict[str, Callable[[], None]] = {
        "back to back": lambda: None,
        "pause": lambda: time.sleep(pause),
        "pause + evict": evict,
        "busy pause": spin,
    }
    for _ in range(100):  # warm-up: imports, caches of the engine
        review_once(reviews, next(stream), clock)
    load = os.getloadavg()[0]
    results: dict[str, list[list[float]]] = {name: [] for name in settings}
    for r in range(args.rounds):
        names = list(settings)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            results[name].append(run(reviews, stream, args.calls, settings[name], clock))
    print(
        f"{args.calls} reviews (/mutate and /validate in turns) per setting and round,"
        f" {args.rounds} rounds; pause {args.pause:g} ms, evict {args.evict} MiB;"
        f" {args.clock} clock; medians in us"
        f" (the median of the rounds' medians); load average {load:.2f} at the start,"
        f" {os.getloadavg()[0]:.2f} at the end"
    )
    print("| setting | " + " | ".join(STAGES) + " | whole |")
    print("| --- |" + " ---: |" * (len(STAGES) + 1))
    for name, rounds in results.items():
        cells = [statistics.median(col) for col in zip(*rounds, strict=True)]
        print(f"| {name} | " + " | ".join(f"{c:,.1f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
