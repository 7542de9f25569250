"""End-to-end HTTP benchmark: the real webhook against a no-op app, side by side in one run.

Starts two gunicorn servers with identical settings (``-c python:webhook.server.gunicorn_conf``,
the same environment: 2 gthread workers, 4 threads, the same certificates, log level info;
started by ``tests.support.gunicorn``):

* ``real``: the webhook (``webhook.server.wsgi:app``) on the bundled example policy;
* ``noop``: a Flask app (``noop_app`` below) that parses the JSON body and echoes the uid.

Each is driven over kept-alive TLS (verified against the CA, as the API server does) by
client processes, one ``http.client.HTTPSConnection`` each, posting the same AdmissionReview:
a ~3.9 KB pod CREATE with two containers, one asking for ``nvidia.com/gpu: 1``, to
``/mutate``. First as fast as possible for ``--seconds`` (after a
warm-up; ``--rounds`` times, alternating, and the medians count: the machine's load drifts),
then paced, for the latency figures, at 750 req/s (half the 1,500 reviews/s target) and at half
the lower of the two maximum rates (latency counted from the scheduled send time, so a stall is
not hidden).

Printed per server: requests/s, latency p50/p90/p99/max, errors, how the requests spread over
the workers (each connection stays on the worker that accepted it; the worker is found from
/proc: the server-side socket of the connection among the workers' file descriptors), server
CPU per request (master and workers, utime+stime from /proc/<pid>/stat), the client's own CPU
per request, and the ratios real/no-op.

    .venv/bin/python -m bench.http_load             # 3 rounds of 10 s per server
    .venv/bin/python -m bench.http_load --rounds 5 --seconds 20 --out bench/results/http.json

The load generator is Python and shares the machine with the servers: absolute rates are
lower than with wrk; the CPU per request and the ratio real/no-op are the figures to watch.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import multiprocessing
import os
import ssl
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, request

from bench.figures import percentile, write_json
from tests.objects import as_sent

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent

if TYPE_CHECKING:
    from tests.support.gunicorn import Server
    from webhook.certs.issue import CertPaths

# The no-op app's workers import this module: what only the driver needs is imported in the
# functions that use it, so the baseline loads no more than Flask.

FIXTURE = _REPO / "tests" / "fixtures" / "admissionreviews" / "v1.36.2" / "mutate-pod-create.json"
NOOP_APP = "bench.http_load:noop_app"
HEADERS = {"Content-Type": "application/json"}
# The API server appends the webhook's timeoutSeconds to the path it was configured with.
MUTATE_PATH = "/mutate?timeout=10s"
TARGET_RATE = 1500  # reviews/s the issue asks for on this 2-core machine

# --------------------------------------------------------------------------------------------
# The no-op app (imported by its gunicorn workers as bench.http_load:noop_app)
# --------------------------------------------------------------------------------------------

noop_app = Flask("noop")


def allow_review(raw: bytes) -> bytes:
    """Parse the AdmissionReview in ``raw``; the answer that allows it, with its uid."""
    doc = json.loads(raw)
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": doc["request"]["uid"], "allowed": True},
        },
        separators=(",", ":"),
    ).encode()


@noop_app.post("/mutate")
@noop_app.post("/validate")
def _noop_review() -> Response:
    """Parse the AdmissionReview and allow it: the least a Python webhook can do."""
    return Response(allow_review(request.get_data(cache=False)), content_type="application/json")


@noop_app.get("/healthz")
def _noop_healthz() -> Response:
    return Response("ok\n", content_type="text/plain")


# --------------------------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------------------------


def review_body() -> bytes:
    """The captured 1.36 pod CREATE, with a second container asking for one GPU (~3.9 KB), in
    the bytes the API server writes (``tests.objects.as_sent``)."""
    doc = json.loads(FIXTURE.read_text())
    pod = doc["request"]["object"]
    main = pod["spec"]["containers"][0]
    gpu = copy.deepcopy(main)
    gpu.update(
        name="trainer",
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        command=["python", "train.py", "--epochs", "10"],
        resources={"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        env=[
            {"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "DATASET", "value": "s3://datasets.example/imagenet/train"},
            {"name": "CHECKPOINT_DIR", "value": "/checkpoints/train-0"},
            {"name": "WANDB_PROJECT", "value": "vision-baseline"},
            {"name": "OMP_NUM_THREADS", "value": "8"},
            {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"},
        ],
    )
    main["name"] = "sidecar"
    pod["spec"]["containers"] = [gpu, main]
    pod["metadata"]["name"] = doc["request"]["name"] = "train-0"
    return as_sent(doc)


# --------------------------------------------------------------------------------------------
# /proc: CPU of a process tree, and which worker holds a connection
# --------------------------------------------------------------------------------------------


def _socket_inodes(server_port: int) -> dict[int, int]:
    """client port -> inode of the server-side socket of each loopback connection."""
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            local, remote, inode = parts[1], parts[2], int(parts[9])
            if int(local.split(":")[1], 16) == server_port and inode:
                out[int(remote.split(":")[1], 16)] = inode
    return out


def worker_of_connections(server_port: int, workers: list[int]) -> dict[int, int]:
    """client port -> pid of the worker holding that connection."""
    owner = {}
    for pid in workers:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    owner[int(link[8:-1])] = pid
        except OSError:
            continue
    return {
        port: owner[inode] for port, inode in _socket_inodes(server_port).items() if inode in owner
    }


# --------------------------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------------------------


def client(
    idx: int,
    port: int,
    ca_file: str,
    body: bytes,
    measure_from: float,
    stop_at: float,
    rate: float,
    out: Any,
    path: str = MUTATE_PATH,
) -> None:
    """One kept-alive connection: POST ``body`` to ``path`` until ``stop_at``; report via ``out``.

    ``rate`` 0 sends as fast as answers come; otherwise requests are scheduled every
    1/rate s from ``measure_from`` and latency counts from the scheduled time.
    """
    uid = json.loads(body)["request"]["uid"].encode()
    ctx = ssl.create_default_context(cafile=ca_file)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    sockets = 0
    sock = None
    local_port = 0
    cpu0 = 0.0
    interval = 1.0 / rate if rate else 0.0
    scheduled = measure_from
    measuring = False
    while True:
        now = time.monotonic()
        if now >= stop_at:
            break
        if not measuring and now >= measure_from:
            measuring = True
            cpu0 = time.process_time()
        if interval and measuring:
            if scheduled > now:
                time.sleep(scheduled - now)
            start = scheduled
            scheduled += interval
        else:
            start = now
        try:
            conn.request("POST", path, body=body, headers=HEADERS)
            resp = conn.getresponse()
            data = resp.read()
            ok = resp.status == 200 and uid in data
            error = "" if ok else f"HTTP {resp.status}"
        except (OSError, http.client.HTTPException) as e:
            error = type(e).__name__
            conn.close()
        done = time.monotonic()
        if conn.sock is not None and conn.sock is not sock:
            sock = conn.sock
            sockets += 1
            local_port = sock.getsockname()[1]
            out.put(("port", idx, local_port))
        if measuring and done <= stop_at:
            if error:
                errors[error] += 1
            else:
                latencies.append(done - start)
    cpu = time.process_time() - cpu0
    conn.close()
    out.put(("done", idx, latencies, dict(errors), sockets, local_port, cpu))


def check_answer(
    name: str, path: str, port: int, ca_file: Path, body: bytes, *, patch: bool
) -> None:
    """POST one review to ``path`` and stop the benchmark unless the answer is right.

    Right: HTTP 200, an AdmissionReview that allows the pod, with its uid; with ``patch``
    also a JSONPatch (or the comparison would leave the mutation out).
    """
    uid = json.loads(body)["request"]["uid"]
    ctx = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=HEADERS)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    problems = []
    try:
        doc = json.loads(raw)
        answer = doc["response"]
    except (ValueError, KeyError, TypeError):
        doc, answer = {}, {}
        problems.append("not an AdmissionReview with a response")
    if resp.status != 200:
        problems.append(f"HTTP {resp.status}")
    if (doc.get("apiVersion"), doc.get("kind")) != ("admission.k8s.io/v1", "AdmissionReview"):
        problems.append("apiVersion/kind are not admission.k8s.io/v1 AdmissionReview")
    if answer.get("uid") != uid:
        problems.append(f"uid {answer.get('uid')!r} instead of {uid!r}")
    if answer.get("allowed") is not True:
        problems.append("the pod is not allowed")
    if patch and answer.get("patchType") != "JSONPatch":
        problems.append("no JSONPatch: the comparison would leave out the mutation")
    if problems:
        raise SystemExit(
            f"{name} (POST {path}) answered wrongly: {'; '.join(problems)}."
            f" The answer: {raw[:500]!r}"
        )


def start_server(
    name: str, tmp: Path, certs: CertPaths, args: Any, app: str | None = None
) -> Server:
    """Start gunicorn for ``name`` and wait until it answers.

    ``app`` is the WSGI app to serve; by default the webhook for ``real``, else the no-op.
    """
    from tests.support.gunicorn import ServerDidNotStart, start
    from webhook.server import WSGI_APP

    try:
        return start(
            tmp,
            certs,
            app=app or (WSGI_APP if name == "real" else NOOP_APP),
            workers=args.workers,
            threads=args.threads,
            log_level=args.log_level,
            PROMETHEUS_MULTIPROC_DIR=str(tmp / f"metrics-{name}"),
        )
    except ServerDidNotStart as exc:
        raise SystemExit(f"{name} server did not start: {exc}") from None


def stop_server(server: Server) -> None:
    """SIGTERM, then wait."""
    from tests.support.gunicorn import stop

    stop(server, 30)


def drive(
    name: str,
    server: Server,
    body: bytes,
    ca_file: Path,
    args: Any,
    rate: float,
    path: str = MUTATE_PATH,
    keep_latencies: bool = False,
) -> dict[str, Any]:
    """Load ``server`` (called ``name``) from ``args.connections`` client processes.

    With ``keep_latencies`` the result also holds every latency (``latencies_s``, sorted), so
    that a caller can pool several runs before taking percentiles.
    """
    from tests.support.procs import cpu_seconds

    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    begin = time.monotonic() + 0.5  # time for the client processes to start
    measure_from = begin + args.warmup
    stop_at = measure_from + args.seconds
    per_conn = rate / args.connections if rate else 0.0
    procs = [
        mp.Process(
            target=client,
            args=(i, server.port, str(ca_file), body, measure_from, stop_at, per_conn, out, path),
        )
        for i in range(args.connections)
    ]
    for p in procs:
        p.start()
    pids = [server.proc.pid, *server.workers()]
    time.sleep(max(0.0, measure_from - time.monotonic()))
    cpu0 = cpu_seconds(pids)
    owners = worker_of_connections(server.port, server.workers())
    time.sleep(max(0.0, stop_at - time.monotonic()))
    cpu1 = cpu_seconds(pids)
    owners.update(worker_of_connections(server.port, server.workers()))
    results = {}
    while len(results) < len(procs):
        msg = out.get(timeout=args.seconds + 60)
        if msg[0] == "done":
            results[msg[1]] = msg
    for p in procs:
        p.join()

    latencies = sorted(x for r in results.values() for x in r[2])
    errors: Counter[str] = Counter()
    per_worker: Counter[int] = Counter()
    reconnects = 0
    for _, _, lat, errs, sockets, local_port, _ in results.values():
        errors.update(errs)
        reconnects += max(0, sockets - 1)
        per_worker[owners.get(local_port, 0)] += len(lat)
    n = len(latencies)
    client_cpu = sum(r[6] for r in results.values())

    server_cpu = sum(cpu1.values()) - sum(cpu0.values())
    worker_cpu = sorted((cpu1[p] - cpu0[p] for p in pids if p != server.proc.pid), reverse=True)
    result = {
        "server": name,
        "offered_rate": rate or None,
        "seconds": args.seconds,
        "requests": n,
        "req_per_s": n / args.seconds,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p90_ms": percentile(latencies, 0.90) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": latencies[-1] * 1000 if n else float("nan"),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "reconnects": reconnects,
        "per_worker_requests": sorted(per_worker.values(), reverse=True),
        "per_worker_cpu_s": [round(c, 2) for c in worker_cpu],
        "server_cpu_us_per_req": server_cpu / n * 1e6 if n else float("nan"),
        "client_cpu_us_per_req": client_cpu / n * 1e6 if n else float("nan"),
        "server_cpu_s": server_cpu,
        "client_cpu_s": client_cpu,
    }
    if keep_latencies:
        result["latencies_s"] = latencies
    return result


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _row(r: dict[str, Any]) -> str:
    total = sum(r["per_worker_requests"]) or 1
    spread = "/".join(f"{100 * c / total:.0f}%" for c in r["per_worker_requests"])
    return (
        f"{r['server']:<5} {r['req_per_s']:>7.0f} {r['p50_ms']:>7.2f} {r['p90_ms']:>7.2f}"
        f" {r['p99_ms']:>7.2f} {r['max_ms']:>7.1f} {r['errors']:>6}"
        f" {r['server_cpu_us_per_req']:>9.0f} {r['client_cpu_us_per_req']:>9.0f}  {spread}"
    )


HEADER = (
    f"{'':<5} {'req/s':>7} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7} {'errors':>6}"
    f" {'srv us/r':>9} {'cli us/r':>9}  per-worker requests"
)


def _arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="measured time per run")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured time before it")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="saturated runs per server, alternating noop and real (medians are reported)",
    )
    p.add_argument("--connections", type=int, default=8, help="client processes/connections")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers (both servers)")
    p.add_argument("--threads", type=int, default=4, help="threads per worker (both servers)")
    p.add_argument("--log-level", default="info", help="GPU_POLICY_LOG_LEVEL (both servers)")
    p.add_argument("--no-latency", action="store_true", help="skip the paced latency runs")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    return p.parse_args()


def measure(
    body: bytes, args: argparse.Namespace
) -> tuple[list[dict[str, dict[str, Any]]], list[dict[str, Any]]]:
    """Run both servers: (saturated rounds, paced runs)."""
    from webhook.certs import issue

    rounds: list[dict[str, dict[str, Any]]] = []
    paced: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-http-") as d:
        tmp = Path(d)
        paths = issue.write_certs(tmp / "tls", days=1)
        servers = {name: start_server(name, tmp, paths, args) for name in ("noop", "real")}
        try:
            check_answer("real", MUTATE_PATH, servers["real"].port, paths.ca_cert, body, patch=True)
            for i in range(args.rounds):
                # Alternate the order so that a drift of the machine's load favours neither.
                order = ("noop", "real") if i % 2 == 0 else ("real", "noop")
                rounds.append(
                    {
                        name: drive(name, servers[name], body, paths.ca_cert, args, 0.0)
                        for name in order
                    }
                )
            half_max = 0.5 * min(
                statistics.median([r[name]["req_per_s"] for r in rounds])
                for name in ("noop", "real")
            )
            if not args.no_latency:
                # The target's rate first (half of 1,500 reviews/s), then half of what this
                # machine just managed, which leaves less idle CPU for the tail.
                paced = [
                    drive(name, servers[name], body, paths.ca_cert, args, rate)
                    for rate in (TARGET_RATE / 2, half_max)
                    for name in ("noop", "real")
                ]
        finally:
            for server in servers.values():
                stop_server(server)
    return rounds, paced


def _print_saturated(rounds: list[dict[str, dict[str, Any]]]) -> None:
    print(f"saturated (as fast as answers come), {len(rounds)} rounds:")
    print(HEADER)
    throughput, cpu = [], []
    for r in rounds:
        for name in ("noop", "real"):
            print(_row(r[name]))
        throughput.append(r["real"]["req_per_s"] / r["noop"]["req_per_s"])
        cpu.append(r["real"]["server_cpu_us_per_req"] / r["noop"]["server_cpu_us_per_req"])
        print(
            f"{'':<5} real/noop: throughput {throughput[-1]:.2f}x, CPU per request {cpu[-1]:.2f}x"
        )
    print(
        f"\nmedian real/noop: throughput {statistics.median(throughput):.2f}x (target >= 0.8x),"
        f" server CPU per request {statistics.median(cpu):.2f}x (target <= 1.2x)"
    )


def _print_paced(paced: list[dict[str, Any]]) -> None:
    for i, why in enumerate(
        (f"half the {TARGET_RATE:,} reviews/s target", "half the lower median maximum")
    ):
        pair = paced[2 * i : 2 * i + 2]
        if not pair:
            break
        print(f"\npaced at {pair[0]['offered_rate']:.0f} req/s ({why}):")
        print(HEADER)
        for row in pair:
            print(_row(row))
        if i == 0:
            print(f"{'':<5} real p99 {pair[1]['p99_ms']:.2f} ms (target <= 10 ms at this rate)")


def main() -> None:
    """Parse the options, run both servers, print the figures."""
    args = _arguments()
    load_before = os.getloadavg()[0]
    from webhook.server import GUNICORN_CONFIG

    body = review_body()
    rounds, paced = measure(body, args)
    print(
        f"\nPOST /mutate, {len(body)} bytes (pod CREATE, 2 containers, one nvidia.com/gpu: 1);"
        f" {args.connections} kept-alive TLS connections from {args.connections} client"
        f" processes; gunicorn -c {GUNICORN_CONFIG}: {args.workers} gthread workers x"
        f" {args.threads} threads; {args.seconds:g} s per run after {args.warmup:g} s warm-up;"
        f" {os.cpu_count()} CPUs; load average before the run {load_before:.2f}\n"
    )
    _print_saturated(rounds)
    _print_paced(paced)
    rows = [r[name] for r in rounds for name in ("noop", "real")] + paced
    for row in rows:
        if row["errors"] or row["reconnects"]:
            print(f"{row['server']}: errors {row['error_kinds']}, reconnects {row['reconnects']}")
    if args.out:
        write_json(args.out, rows)
        print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
