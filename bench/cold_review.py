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

The stages, as ``_ReviewEndpoint.answer_first`` (``webhook.server.app``) and the worker run
them: ``head`` (``read_review_head`` on the request's bytes), ``reload check``
(``PolicyState.maybe_reload``), ``review`` (``reply``: the answer kept for the request's key,
or the request decoded, the engine's answer encoded and kept), ``answer`` (``answer_bytes``);
then, once the answer is sent, ``outcome`` (``Reply.outcome``: a kept answer's request decoded
for the record), ``metrics`` (``metrics.record_review``) and ``log line`` (``ReviewLog.write``,
through the server's own handler into /dev/null). Printed: the median microseconds of each
stage over ``--calls`` reviews (``/mutate`` and ``/validate`` in turns), of the stages up to
the answer (``sent``) and of all (``whole``); by the wall clock, or with ``--clock cpu`` by
this thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``), which leaves out the time the thread
waited for a core.

    .venv/bin/python -m bench.cold_review [--calls 400] [--pause 40] [--evict 64]
    .venv/bin/python -m bench.cold_review --count-calls --pods "new name"

``--count-calls`` prints, instead of times, the Python calls one review of the first of
``--pods`` makes (``sys.setprofile``: calls into Python functions, and the distinct functions
and files they belong to), for ``/mutate`` and ``/validate``.

In process there is no socket, TLS or thread hand-off: this is the review's own share of a call.

``--pods`` says which pods are reviewed, each kind its own rows (docs/performance.md, "Eighth
round"):

* ``repeated``: the same pod every time, as the replicas of one workload come: after the first,
  answered from the answer kept for its spec (webhook/admission/memo.py);
* ``new label``: every pod a label value of its own: no kept answer, but the allocator's
  verdict on its spec is kept (its key does not read labels);
* ``new name``: every pod's GPU container a name of its own: no kept answer and no verdict kept
  by spec, but the verdict kept by what the pod asks of a node (a container's name does not
  change it);
* ``new spec``: every pod a label and a toleration of its own: nothing kept, as the first pod
  of each workload.

    .venv/bin/python -m bench.cold_review --pods "repeated,new spec" --settings "back to back,pause"
    .venv/bin/python -m bench.cold_review --pods "new spec" --memo both   # what a miss costs
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

from bench.http_load import review_body
from tests.objects import as_sent
from webhook.admission import reply
from webhook.server import Settings, create_app, metrics
from webhook.server.app import direct_reviews
from webhook.server.direct import read_review_head
from webhook.server.logs import LineBufferedHandler, configure_logging
from webhook.server.response import answer_bytes

STAGES = ("head", "reload check", "review", "answer", "outcome", "metrics", "log line")
SENT = 4  # the stages up to the answer's bytes
SETTINGS = ("back to back", "pause", "pause + evict", "busy pause")
POD_KINDS = ("repeated", "new label", "new name", "new spec")


def request_bytes(path: str, body: bytes) -> bytes:
    """The request as kube-apiserver sends it (the head of bench/wsgi_call.py)."""
    return (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:8443\r\n"
        "User-Agent: kube-apiserver-admission\r\nAccept: application/json, */*\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Accept-Encoding: gzip\r\n\r\n"
    ).encode() + body


def review_once(
    reviews: Any, request: bytes, clock: Callable[[], int], memo: bool = True
) -> list[int]:
    """One review through the direct path's stages; nanoseconds of each by ``clock``.
    ``memo``: answer with the kept answers as the server does, or without."""
    t0 = clock()
    head = read_review_head(request, reviews.paths, 7 << 20)
    assert head is not None
    t1 = clock()
    endpoint = reviews.reviews[head.path]
    state = endpoint.state
    state.maybe_reload()
    t2 = clock()
    snapshot = state.snapshot
    replied = reply(
        endpoint.endpoint,
        head.body,
        policy=snapshot.policy,
        inventory=snapshot.inventory,
        max_bytes=endpoint.max_bytes,
        memo=memo,
    )
    t3 = clock()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(replied.body)))]
    answer_bytes("200 OK", head.must_close, headers, replied.body)
    t4 = clock()
    seconds = (t4 - t0) / 1e9
    outcome = replied.outcome()
    t5 = clock()
    metrics.record_review(outcome, seconds)
    t6 = clock()
    endpoint.review_log.write(outcome, seconds)
    t7 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6]


# A counter for the pods of --pods "new label" and "new spec": never the same twice in a run.
_SERIAL = itertools.count()


def as_replica(doc: dict[str, Any], path: str) -> bytes:
    """``doc``'s pod as a replica of the workload ``train-`` as the API server sends it to
    ``path``: a uid of its own, and at ``/validate`` a name and uid of its own (at ``/mutate``
    it has none yet), a token volume of its own, the bytes in the API server's order."""
    text = json.dumps(doc).replace("kube-api-access-lrfbc", f"kube-api-access-{_suffix()}")
    replica = json.loads(text)
    request = replica["request"]
    request["uid"] = str(uuid.uuid4())
    meta = request["object"]["metadata"]
    meta["generateName"] = "train-"
    if path == "/validate":
        meta["name"] = request["name"] = f"train-{_suffix()}"
        meta["uid"] = str(uuid.uuid4())
    else:
        meta["name"] = request["name"] = ""
    return as_sent(replica)


def _suffix() -> str:
    # What the API server draws for a generated name and the token volume: 5 characters.
    return "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))


def pod_requests(kind: str, calls: int) -> list[bytes]:
    """``calls`` requests, ``/mutate`` and ``/validate`` in turns, of the pods of ``kind``
    (``--pods``): replicas of one pod, or each a label (and a toleration), or a container
    name, of its own."""
    doc = json.loads(review_body())
    out = []
    for i in range(calls):
        path = ("/mutate", "/validate")[i % 2]
        if kind == "repeated":
            out.append(request_bytes(path, as_replica(doc, path)))
            continue
        n = next(_SERIAL)
        pod = json.loads(json.dumps(doc))
        if kind == "new name":
            pod["request"]["object"]["spec"]["containers"][0]["name"] = f"trainer-{n}"
            out.append(request_bytes(path, as_replica(pod, path)))
            continue
        meta = pod["request"]["object"]["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), "bench.gpu-policy.io/pod": str(n)}
        if kind == "new spec":  # the allocator's verdict key reads the tolerations
            spec = pod["request"]["object"]["spec"]
            toleration = {"key": f"bench.gpu-policy.io/pod-{n}", "operator": "Exists"}
            spec["tolerations"] = [*(spec.get("tolerations") or []), toleration]
        out.append(request_bytes(path, as_replica(pod, path)))
    return out


def run(
    reviews: Any,
    pods: str,
    calls: int,
    before: Callable[[], None],
    clock: Callable[[], int],
    memo: bool = True,
) -> list[float]:
    """Median microseconds per stage, then of the whole, over ``calls`` reviews of the pods of
    ``pods`` (built before the first, so that building them is not measured)."""
    requests = pod_requests(pods, calls)
    samples: list[list[int]] = []
    for i in range(calls):
        before()
        samples.append(review_once(reviews, requests[i], clock, memo))
    columns = [
        *zip(*samples, strict=True),
        [sum(s[:SENT]) for s in samples],
        [sum(s) for s in samples],
    ]
    return [statistics.median(c) / 1000 for c in columns]


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


def print_calls(reviews: Any, kind: str) -> None:
    """Print the Python calls of one ``/mutate`` and one ``/validate`` of the pods of ``kind``
    after a warm-up."""
    requests = pod_requests(kind, 12)
    for request in requests[:10]:  # warm-up: imports, caches of the engine
        review_once(reviews, request, time.perf_counter_ns)
    for path, request in zip(("/mutate", "/validate"), requests[10:], strict=True):
        calls, functions, modules = count_calls(reviews, request)
        print(f"{path}: {calls} calls into {functions} functions of {modules} files")


def parse_args() -> argparse.Namespace:
    """The command line, checked."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=400, help="reviews per setting and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pause", type=float, default=40.0, help="ms before each review")
    p.add_argument("--evict", type=int, default=64, help="MiB written after the pause")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument(
        "--pods",
        type=lambda text: [k for k in text.split(",") if k],
        default=list(POD_KINDS),
        help="which pods, comma-separated: " + ", ".join(POD_KINDS),
    )
    p.add_argument(
        "--settings",
        type=lambda text: [k for k in text.split(",") if k],
        default=None,
        help="which settings, comma-separated (default all): " + ", ".join(SETTINGS),
    )
    p.add_argument(
        "--memo",
        choices=("on", "off", "both"),
        default="on",
        help="answer with the kept answers to repeated pods (as the server), without, or both",
    )
    p.add_argument("--count-calls", action="store_true", help="print Python calls per review")
    args = p.parse_args()
    for kind in args.pods:
        if kind not in POD_KINDS:
            p.error(f"--pods: {kind!r} is none of {', '.join(POD_KINDS)}")
    for name in args.settings or ():
        if name not in SETTINGS:
            p.error(f"--settings: {name!r} is none of {', '.join(SETTINGS)}")
    return args


def main() -> None:
    """Measure the three settings, interleaved in rounds, and print the table."""
    args = parse_args()
    clock = time.perf_counter_ns if args.clock == "wall" else time.thread_time_ns
    configure_logging("info")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, LineBufferedHandler):
            handler.fd = os.open(os.devnull, os.O_WRONLY)
    reviews = direct_reviews(create_app(Settings.from_env()))
    assert reviews is not None
    if args.count_calls:
        print_calls(reviews, args.pods[0])
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

    waits: dict[str, Callable[[], None]] = {
        "back to back": lambda: None,
        "pause": lambda: time.sleep(pause),
        "pause + evict": evict,
        "busy pause": spin,
    }
    memos = {"on": [True], "off": [False], "both": [True, False]}[args.memo]
    settings = {
        ", ".join(
            [name]
            + ([kind] if len(args.pods) > 1 else [])
            + ([f"memo {'on' if memo else 'off'}"] if len(memos) > 1 else [])
        ): (kind, waits[name], memo)
        for name in args.settings or SETTINGS
        for kind in args.pods
        for memo in memos
    }
    for request in pod_requests("new spec", 100):  # warm-up: imports, caches of the engine
        review_once(reviews, request, clock)
    load = os.getloadavg()[0]
    results: dict[str, list[list[float]]] = {name: [] for name in settings}
    for r in range(args.rounds):
        names = list(settings)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            kind, wait, memo = settings[name]
            results[name].append(run(reviews, kind, args.calls, wait, clock, memo))
    print(
        f"{args.calls} reviews (/mutate and /validate in turns) per setting and round,"
        f" {args.rounds} rounds; pause {args.pause:g} ms, evict {args.evict} MiB;"
        f" {args.clock} clock; medians in us"
        f" (the median of the rounds' medians); load average {load:.2f} at the start,"
        f" {os.getloadavg()[0]:.2f} at the end"
    )
    print("| setting | " + " | ".join(STAGES) + " | sent | whole |")
    print("| --- |" + " ---: |" * (len(STAGES) + 2))
    for name, rounds in results.items():
        cells = [statistics.median(col) for col in zip(*rounds, strict=True)]
        print(f"| {name} | " + " | ".join(f"{c:,.1f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
