"""A client that keeps sending AdmissionReviews to a running webhook and tallies the answers.

Shared by ``bench/slowloris.py`` and ``bench/reliability.py``: one thread, one kept-alive TLS
connection (a new one after an error), as the API server talks to a webhook; every answer's
status and latency is kept, a connection error or timeout counts as a failed review.

    .venv/bin/python -m bench.reviews --port 18449 --ca certs/dev/ca.crt --seconds 10
"""

from __future__ import annotations

import argparse
import http.client
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.figures import percentile
from bench.workers import review_body


@dataclass
class Tally:
    """What the reviews got: HTTP statuses, failures without an answer, latencies (s)."""

    statuses: dict[int, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    @property
    def answered(self) -> int:
        """Reviews answered 2xx."""
        return sum(n for s, n in self.statuses.items() if 200 <= s < 300)

    @property
    def server_errors(self) -> int:
        """Reviews answered 5xx."""
        return sum(n for s, n in self.statuses.items() if s >= 500)

    @property
    def failed(self) -> int:
        """Reviews without an answer (connection refused, reset, timed out)."""
        return sum(self.failures.values())

    def row(self) -> dict[str, float | int | str]:
        """The figures: answered, 5xx, no answer, latency p50/p99/worst in ms."""
        ordered = sorted(self.latencies)
        return {
            "answered": self.answered,
            "5xx": self.server_errors,
            "no_answer": self.failed,
            "p50_ms": round(percentile(ordered, 0.50) * 1000, 1),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 1),
            "worst_ms": round((ordered[-1] if ordered else float("nan")) * 1000, 1),
            "failures": ", ".join(f"{k} x{v}" for k, v in sorted(self.failures.items())),
        }


class ReviewClient:
    """Send reviews to ``port`` from a thread until :meth:`stop`, at most ``rate`` per second.

    On one kept-alive connection, or with ``fresh`` on a new connection for every review.
    """

    def __init__(
        self,
        port: int,
        ca_file: Path,
        *,
        rate: float = 50.0,
        timeout: float = 15.0,
        fresh: bool = False,
    ) -> None:
        """Ready to :meth:`start`; ``timeout`` is how long one review may take (the API
        server's ``timeoutSeconds`` is at most 30 s)."""
        self.fresh = fresh
        self.port = port
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.interval = 1.0 / rate
        self.timeout = timeout
        self.tally = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reviews", daemon=True)
        self._body = review_body()
        self._conn: http.client.HTTPSConnection | None = None

    def warm(self) -> ReviewClient:
        """Open the connection and have one review answered now (not tallied)."""
        self._conn = self._connect()
        self._conn.request(
            "POST", "/mutate", body=self._body, headers={"Content-Type": "application/json"}
        )
        self._conn.getresponse().read()
        return self

    def start(self) -> ReviewClient:
        """Start sending."""
        self._thread.start()
        return self

    def stop(self) -> Tally:
        """Stop sending (after the review in flight) and return the tally."""
        self._stop.set()
        self._thread.join(self.timeout + 5)
        return self.tally

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=self.timeout
        )

    def _run(self) -> None:
        conn = self._conn or self._connect()
        headers = {"Content-Type": "application/json"}
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                conn.request("POST", "/mutate", body=self._body, headers=headers)
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException) as exc:
                name = type(exc).__name__
                self.tally.failures[name] = self.tally.failures.get(name, 0) + 1
                conn.close()
                conn = self._connect()
            else:
                self.tally.statuses[resp.status] = self.tally.statuses.get(resp.status, 0) + 1
                self.tally.latencies.append(time.monotonic() - started)
                if resp.will_close or self.fresh:
                    conn.close()
                    conn = self._connect()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        conn.close()


def main(argv: list[str] | None = None) -> int:
    """Send reviews to a running server for ``--seconds`` and print the tally."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", type=Path, required=True, help="the CA the server's cert is from")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="reviews per second, at most")
    args = parser.parse_args(argv)
    client = ReviewClient(args.port, args.ca, rate=args.rate).start()
    time.sleep(args.seconds)
    print(client.stop().row())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
