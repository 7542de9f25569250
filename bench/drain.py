"""Admissions lost while a replica restarts: two replicas behind a balancer, one restarted.

In a cluster the API server reaches the webhook through its Service: new connections go to the
pods the endpoints list, and a pod leaves that list once it is stopping or unready. Here:

* two replicas of ``gpu-policy serve`` (gunicorn with the project's config, the bundled example
  policy, ``tests.support.gunicorn``), each on a fixed loopback port;
* a round-robin TCP balancer in front (:class:`Balancer`, asyncio in a thread): like kube-proxy
  it passes the TLS bytes through and picks a replica per new connection, only among those
  whose ``/readyz`` answered 200 at its last poll (every ``--probe`` seconds, as a readiness
  probe); a connection to a replica that refuses it is closed, as a client of kube-proxy sees
  a refused connection;
* clients (``--clients`` threads) sending AdmissionReview POSTs (examples/admissionreview-gpu-
  pod.json to /mutate) back to back, each over one kept-alive TLS connection, as the API
  server does; an answer with ``Connection: close`` makes the client open a new connection
  (through the balancer) for its next review, as Go's net/http does;
* replica A restarted ``--restarts`` times: SIGTERM, wait for it to exit, start it again on
  the same port, wait until the balancer sees it ready, let the load run ``--pause`` s.

A failed admission is a review that got no HTTP 200 AdmissionReview: a refused or reset
connection, a connection closed before the answer, a timeout, any other status. Nothing is
sent again (the API server does not resend an admission call either).

The whole is run twice in one invocation: first with ``GPU_POLICY_SHUTDOWN_DELAY=0`` (stop
accepting at SIGTERM: the baseline), then with ``--delay`` seconds (the chart's behaviour,
shortened: the balancer here learns of an unready replica within ``--probe`` s, where endpoints
in a cluster take seconds). Printed per run: reviews answered, failed (with the kinds), and the
longest time from SIGTERM to exit.

    .venv/bin/python -m bench.drain                      # 10 restarts, delay 2 s, probe 0.25 s
    .venv/bin/python -m bench.drain --restarts 20 --delay 3 --out bench/results/drain.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http.client
import itertools
import signal
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.figures import write_json
from tests.support.gunicorn import (
    Server,
    argv,
    client_context,
    free_port,
    launch,
    server_env,
    stop,
    wait_until_serving,
)
from webhook.certs import issue
from webhook.contract import DRAIN_TIMEOUT_ENV, MUTATE_PATH, SHUTDOWN_DELAY_ENV

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent

REVIEW = (_REPO / "examples" / "admissionreview-gpu-pod.json").read_bytes()
JSON = {"Content-Type": "application/json"}


# --------------------------------------------------------------------------------------------
# The balancer
# --------------------------------------------------------------------------------------------


@dataclass
class Backend:
    """One replica as the balancer sees it."""

    port: int
    ready: bool = False
    connections: int = 0


class Balancer:
    """Round-robin TCP pass-through to the backends whose /readyz said 200 at the last poll."""

    def __init__(self, backends: list[Backend], context: ssl.SSLContext, probe: float) -> None:
        """Balance over ``backends``, polling their /readyz every ``probe`` s with ``context``."""
        self.backends = backends
        self.context = context
        self.probe = probe
        self.port = free_port()
        self.refused = 0  # client connections closed because no replica took them
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._stop = threading.Event()
        self._started = threading.Event()
        self._threads = [threading.Thread(target=self._serve, daemon=True)] + [
            threading.Thread(target=self._poll, args=(b,), daemon=True) for b in backends
        ]

    def __enter__(self) -> Balancer:
        for thread in self._threads:
            thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        for thread in self._threads:
            thread.join(5)

    # -- readiness, as a readiness probe sees it ------------------------------------------

    def _poll(self, backend: Backend) -> None:
        while not self._stop.is_set():
            conn = http.client.HTTPSConnection(
                "127.0.0.1", backend.port, context=self.context, timeout=1
            )
            try:
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                resp.read()
                backend.ready = resp.status == 200
            except (OSError, http.client.HTTPException):
                backend.ready = False
            finally:
                conn.close()
            self._stop.wait(self.probe)

    # -- the TCP pass-through ---------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", self.port)
        )
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    def _pick(self) -> Backend | None:
        ready = [b for b in self.backends if b.ready]
        return ready[next(self._turn) % len(ready)] if ready else None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = self._pick()
        try:
            if backend is None:
                raise ConnectionRefusedError("no ready replica")
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", backend.port)
        except OSError:
            self.refused += 1
            writer.transport.abort()  # what a refused connection through kube-proxy looks like
            return
        backend.connections += 1
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the balancer is stopping
        finally:
            for end in (writer, up_writer):
                end.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the end, then pass the end on (a half-close), as a TCP proxy does; a reset
    on one side resets the other."""
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()


# --------------------------------------------------------------------------------------------
# The clients
# --------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw."""

    answered: int = 0
    closed_by_server: int = 0  # answers with Connection: close
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, kind: str) -> None:
        """Count one failed admission of this kind."""
        with self.lock:
            self.failures[kind] += 1


def client(
    port: int, context: ssl.SSLContext, per_connection: int, stop_at: threading.Event, tally: Tally
) -> None:
    """Send reviews back to back over a kept-alive connection until ``stop_at`` is set, opening
    a new one after ``per_connection`` reviews (so that connections spread over the replicas
    again after a restart, as the API server's many connections do)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    for sent in itertools.count(1):
        if stop_at.is_set():
            break
        if sent % per_connection == 0:
            conn.close()
        try:
            conn.request("POST", MUTATE_PATH, body=REVIEW, headers=JSON)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            tally.fail(type(exc).__name__)
            conn.close()
            continue
        if resp.status != 200 or b'"allowed":true' not in body:
            tally.fail(f"HTTP {resp.status}")
            continue
        with tally.lock:
            tally.answered += 1
            if resp.will_close:  # http.client opens a new connection for the next request
                tally.closed_by_server += 1
    conn.close()


# --------------------------------------------------------------------------------------------
# One run: two replicas, one restarted
# --------------------------------------------------------------------------------------------


def replica(tmp: Path, certs: issue.CertPaths, port: int, delay: float, drain: float) -> Server:
    """Start ``gpu-policy serve``'s gunicorn on ``port`` and wait until it answers."""
    env = server_env(
        tmp,
        port,
        certs.directory,
        workers=2,
        threads=4,
        log_level="warning",
        **{SHUTDOWN_DELAY_ENV: str(delay), DRAIN_TIMEOUT_ENV: str(drain)},
    )
    server = launch(argv(), tmp, env, client_context(certs.ca_cert), port)
    wait_until_serving(server, workers=2)
    return server


def run(
    args: argparse.Namespace, delay: float, certs: issue.CertPaths, tmp: Path
) -> dict[str, Any]:
    """Restart replica A ``args.restarts`` times under load; the tally and stop times."""
    context = client_context(certs.ca_cert)
    backends = [Backend(free_port()), Backend(free_port())]
    servers = [replica(tmp, certs, b.port, delay, args.drain) for b in backends]
    tally = Tally()
    stops: list[float] = []
    done = threading.Event()
    try:
        with Balancer(backends, context, args.probe) as balancer:
            while not all(b.ready for b in backends):
                time.sleep(0.05)
            clients = [
                threading.Thread(
                    target=client,
                    args=(balancer.port, context, args.per_connection, done, tally),
                )
                for _ in range(args.clients)
            ]
            for thread in clients:
                thread.start()
            time.sleep(args.pause)
            for _ in range(args.restarts):
                term_at = time.monotonic()
                servers[0].proc.send_signal(signal.SIGTERM)
                servers[0].proc.wait(delay + args.drain + 10)
                stops.append(time.monotonic() - term_at)
                servers[0] = replica(tmp, certs, backends[0].port, delay, args.drain)
                while not backends[0].ready:
                    time.sleep(0.05)
                time.sleep(args.pause)
            done.set()
            for thread in clients:
                thread.join(15)
            refused = balancer.refused
    finally:
        done.set()
        for server in servers:
            stop(server)
    return {
        "delay_s": delay,
        "restarts": args.restarts,
        "answered": tally.answered,
        "failed": sum(tally.failures.values()),
        "failures": dict(tally.failures),
        "closed_by_server": tally.closed_by_server,
        "refused_by_balancer": refused,
        "longest_stop_s": round(max(stops), 2),
    }


def main() -> None:
    """Parse the options, run the baseline and the delayed stop, print both."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--restarts", type=int, default=10, help="restarts of replica A per run")
    p.add_argument("--delay", type=float, default=2.0, help="GPU_POLICY_SHUTDOWN_DELAY (s)")
    p.add_argument("--drain", type=float, default=10.0, help="GPU_POLICY_DRAIN_TIMEOUT (s)")
    p.add_argument("--probe", type=float, default=0.25, help="readiness poll period (s)")
    p.add_argument("--clients", type=int, default=4, help="clients sending reviews")
    p.add_argument("--per-connection", type=int, default=20, help="reviews per connection")
    p.add_argument("--pause", type=float, default=1.0, help="load between restarts (s)")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-policy-drain-") as tmp_name:
        tmp = Path(tmp_name)
        certs = issue.write_certs(tmp / "tls")
        for delay in (0.0, args.delay):
            results.append(run(args, delay, certs, tmp))
    print(
        f"{args.restarts} restarts of one of two replicas, {args.clients} clients, "
        f"readiness polled every {args.probe:g} s"
    )
    print(
        f"{'shutdown delay':>15} {'answered':>9} {'failed':>7} {'closed':>7} "
        f"{'longest stop':>13}  failures"
    )
    for r in results:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["failures"].items())) or "-"
        print(
            f"{r['delay_s']:>14g}s {r['answered']:>9} {r['failed']:>7} {r['closed_by_server']:>7} "
            f"{r['longest_stop_s']:>12g}s  {kinds}"
        )
    if args.out:
        write_json(args.out, {"args": vars(args) | {"out": str(args.out)}, "runs": results})


if __name__ == "__main__":
    main()
