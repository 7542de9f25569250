"""A review's head read after a pause: the reader of bytes methods beside the former patterns.

``bench/cold_review.py`` times the head stage of each tree in its own process, and on this
machine the figures of two processes run one after the other drift more than the two readers
differ (docs/performance.md, "Ninth round"). This times, in one process and call by call in
turns, each after ``--pause`` ms asleep: a call that does nothing (what any first stage pays
after a pause), ``webhook.server.direct.read_review_head``, and the reader it replaced
(``patterns_read``, two regular expressions, kept in ``tests/core/server/test_direct_head.py``
as the reference it is checked against); then the same back to back. Printed: the median
microseconds of this thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``) per reader and round.

    .venv/bin/python -m bench.head_read [--calls 200] [--rounds 3] [--pause 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Container

from bench.cold_review import request_bytes
from bench.http_load import review_body
from tests.core.server.test_direct_head import patterns_read
from webhook.server.direct import ReviewHead, read_review_head

Reader = Callable[[bytes, Container[str], int], ReviewHead | None]
PATHS = frozenset({"/mutate", "/validate"})
MAX_BODY = 7 << 20


def nothing(_data: bytes, _paths: Container[str], _max_body: int) -> None:
    """The floor: a call of the same shape that reads nothing."""


READERS: dict[str, Reader] = {
    "nothing": nothing,
    "patterns (before)": patterns_read,
    "bytes methods (now)": read_review_head,
}


def one_round(requests: list[bytes], pause: float) -> dict[str, float]:
    """Median microseconds per reader over ``requests``, the readers in turns, each call after
    ``pause`` seconds asleep (none: back to back)."""
    clock = time.thread_time_ns
    samples: dict[str, list[int]] = {name: [] for name in READERS}
    for request in requests:
        for name, reader in READERS.items():
            if pause:
                time.sleep(pause)
            start = clock()
            reader(request, PATHS, MAX_BODY)
            samples[name].append(clock() - start)
    return {name: statistics.median(times) / 1000 for name, times in samples.items()}


def main() -> None:
    """Check that both readers read the benchmark's requests alike, then time them."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=200, help="requests per round (each reader)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pause", type=float, default=40.0, help="ms asleep before each call")
    args = p.parse_args()
    body = review_body()
    requests = [request_bytes(("/mutate", "/validate")[i % 2], body) for i in range(args.calls)]
    for request in requests[:2]:
        head = read_review_head(request, PATHS, MAX_BODY)
        assert head is not None and head == patterns_read(request, PATHS, MAX_BODY)
    print(
        f"{args.calls} requests (the API server's head, /mutate and /validate in turns) per "
        f"round, {args.rounds} rounds; cpu clock, median us; load average "
        f"{os.getloadavg()[0]:.2f} at the start"
    )
    print("| setting | round | " + " | ".join(READERS) + " |")
    print("| --- | ---: |" + " ---: |" * len(READERS))
    for setting, pause in ((f"pause {args.pause:g} ms", args.pause / 1000), ("back to back", 0)):
        for index in range(args.rounds):
            figures = one_round(requests, pause)
            cells = " | ".join(f"{figures[name]:.1f}" for name in READERS)
            print(f"| {setting} | {index + 1} | {cells} |")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
