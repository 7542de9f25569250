"""Slow clients against the webhook while a client sends reviews: are the reviews still answered?

Starts the webhook under gunicorn with our config (2 workers, 4 threads, the bundled example
policy, certificates in a temporary directory; ``tests.support.gunicorn``), or uses a running
server (``--port`` and ``--ca``). Then, for each row, opens N slow connections on loopback
and keeps them open for ``--seconds`` while ``bench/reviews.py``'s client sends reviews on
one kept-alive connection (50/s at most), as the API server does:

* ``headers``: the TLS handshake completes, then the request headers come one byte a second;
* ``hello``: a TLS ClientHello comes one byte a second (raw TCP, no handshake ever ends).

A slow connection the server closes is opened again at once (an attacker keeps trying). The
first row, with no slow connection, is the baseline of the same run. Printed per row: reviews
answered, 5xx, reviews without an answer, latency p50/p99/worst (ms), how many slow
connections the server closed, and for a second client opening a new connection for each
review (2 a second): answered, without an answer (10 s timeout), worst latency.

    .venv/bin/python -m bench.slowloris                       # 0, 8, 32, 128; 10 s each
    .venv/bin/python -m bench.slowloris --counts 8 --kinds headers --seconds 15
    .venv/bin/python -m bench.slowloris --port 18449 --ca certs/dev/ca.crt   # a running server

Loopback only; every loop is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.figures import write_json
from bench.reviews import ReviewClient
from tests.support.slow_clients import SlowClients


def run_row(port: int, ca: Path, count: int, kind: str, seconds: float) -> dict[str, object]:
    """One row: ``count`` slow connections of ``kind`` while reviews run for ``seconds``.

    The review client's connection is open and has answered before the slow ones come, as
    the API server's kept-alive connections are; a second client opens a new connection for
    each review (2 a second) and shows what a new connection waits meanwhile.
    """
    reviews = ReviewClient(port, ca).warm()
    until = time.monotonic() + seconds
    slow = SlowClients(port, count, kind, until).start()
    time.sleep(min(2.0, seconds / 4))  # the slow connections are in before the reviews start
    reviews.start()
    fresh = ReviewClient(port, ca, rate=2.0, fresh=True, timeout=10.0).start()
    time.sleep(max(0.0, until - time.monotonic()))
    tally = reviews.stop()
    new = fresh.stop().row()
    slow.join()
    return {
        "slow": count,
        "kind": kind if count else "-",
        **tally.row(),
        "slow_closed": slow.closed_by_server,
        "new_answered": new["answered"],
        "new_no_answer": new["no_answer"],
        "new_worst_ms": new["worst_ms"],
    }


@contextmanager
def webhook_server(workers: int, threads: int) -> Iterator[tuple[int, Path]]:
    """The webhook under gunicorn with our config on a free port: (port, CA file)."""
    from tests.support.gunicorn import running
    from webhook.certs.issue import write_certs

    with tempfile.TemporaryDirectory(prefix="slowloris-") as tmp:
        certs = write_certs(Path(tmp) / "tls")
        with running(Path(tmp), certs, workers=workers, threads=threads) as server:
            yield server.port, certs.ca_cert


def main(argv: list[str] | None = None) -> int:
    """Run the rows and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="8,32,128", help="slow connections per row")
    parser.add_argument("--kinds", default="headers,hello")
    parser.add_argument("--seconds", type=float, default=10.0, help="per row")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--port", type=int, help="a running server (with --ca)")
    parser.add_argument("--ca", type=Path, help="the CA of the running server's certificate")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    kinds = args.kinds.split(",")

    @contextmanager
    def target() -> Iterator[tuple[int, Path]]:
        if args.port is not None:
            if args.ca is None:
                parser.error("--port needs --ca")
            yield args.port, args.ca
        else:
            with webhook_server(args.workers, args.threads) as served:
                yield served

    rows = []
    with target() as (port, ca):
        rows.append(run_row(port, ca, 0, "-", args.seconds))
        for count in counts:
            for kind in kinds:
                rows.append(run_row(port, ca, count, kind, args.seconds))
    columns = ["slow", "kind", "answered", "5xx", "no_answer", "p50_ms", "p99_ms", "worst_ms"]
    columns += ["slow_closed", "new_answered", "new_no_answer", "new_worst_ms"]
    print(" ".join(f"{c:>11}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]!s:>11}" for c in columns))
    for row in rows:
        if row["failures"]:
            print(f"slow={row['slow']} {row['kind']}: {row['failures']}")
    if args.out:
        write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
