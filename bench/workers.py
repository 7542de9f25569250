"""gunicorn worker classes under keep-alive TLS: why webhook/server/gunicorn_conf.py uses gthread.

Starts gunicorn with our config (``-c python:webhook.server.gunicorn_conf``, so the same TLS
context, keepalive and limits) serving ``app`` below, once per worker class, and drives it
from separate client processes for a fixed time. Each client connection is an
``http.client.HTTPSConnection`` kept alive between requests, as the API server does; each
request POSTs a ~4 KB AdmissionReview, the app parses it and answers with the uid and its pid.

Printed per worker class: requests/s, latency p50/p99, errors, TLS handshakes (a sync
worker closes every connection, so every request pays one), server CPU per request (master
and workers, from /proc), and how the requests spread over the workers (with gthread a kept
-alive connection stays on the worker that accepted it).

    .venv/bin/python -m bench.workers                      # sync and gthread, 5 s each
    .venv/bin/python -m bench.workers --seconds 10 --connections 16 --out bench/results/w.json

gevent is measured only when it is installed (it is not a dependency). The load generator is
Python too and shares the machine: absolute numbers are lower than with wrk, the comparison
between classes is the point.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.figures import percentile, write_json

_HERE = Path(__file__).resolve().parent

if TYPE_CHECKING:
    from webhook.certs.issue import CertPaths

# --------------------------------------------------------------------------------------------
# The app under test (imported by the gunicorn workers as workers:app; keep imports light)
# --------------------------------------------------------------------------------------------


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Parse the JSON body, answer with its uid and this worker's pid."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    doc = json.loads(environ["wsgi.input"].read(length)) if length else {}
    uid = doc.get("request", {}).get("uid", "")
    body = json.dumps({"uid": uid, "allowed": True, "pid": os.getpid()}).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


# --------------------------------------------------------------------------------------------
# The load generator
# --------------------------------------------------------------------------------------------


def review_body(size: int = 4096) -> bytes:
    """An AdmissionReview v1 for a pod CREATE with two containers, padded to about ``size``."""
    container = {
        "name": "trainer",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py", "--epochs", "10"],
        "resources": {
            "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
        },
        "env": [{"name": f"VAR_{i}", "value": "x" * 24} for i in range(8)],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    review: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml-team",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "train-0", "namespace": "ml-team", "labels": {}},
                "spec": {
                    "containers": [container, {**container, "name": "sidecar"}],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
            "dryRun": False,
        },
    }
    body = json.dumps(review)
    pad = size - len(body)
    if pad > 0:
        review["request"]["object"]["metadata"]["labels"]["padding"] = "p" * max(pad - 16, 0)
        body = json.dumps(review)
    return body.encode()


def client_process(
    port: int, ca_file: str, connections: int, start_at: float, warmup: float, seconds: float
) -> dict[str, Any]:
    """Run ``connections`` keep-alive clients (threads) in this process; return raw results."""
    import http.client
    import ssl
    import threading
    from collections import Counter

    body = review_body()
    headers = {"Content-Type": "application/json"}
    ctx = ssl.create_default_context(cafile=ca_file)
    measure_from = start_at + warmup
    stop_at = measure_from + seconds
    lock = threading.Lock()
    latencies: list[float] = []
    pids: Counter[int] = Counter()
    errors: list[str] = []
    handshakes = 0

    def run() -> None:
        nonlocal handshakes
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        my_lat: list[float] = []
        my_pids: Counter[int] = Counter()
        my_err: list[str] = []
        my_hs = 0
        while time.time() < start_at:
            time.sleep(0.001)
        while True:
            t0 = time.time()
            if t0 >= stop_at:
                break
            counted = t0 >= measure_from
            try:
                if conn.sock is None:  # closed by the server (or never opened): a handshake
                    my_hs += counted
                c0 = time.perf_counter()
                conn.request("POST", "/validate", body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                elapsed = time.perf_counter() - c0
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
                pid = json.loads(data)["pid"]
                if counted:
                    my_lat.append(elapsed)
                    my_pids[pid] += 1
            except Exception as e:
                if counted:
                    my_err.append(f"{type(e).__name__}: {e}")
                conn.close()
        conn.close()
        with lock:
            latencies.extend(my_lat)
            pids.update(my_pids)
            errors.extend(my_err)
            handshakes += my_hs

    threads = [threading.Thread(target=run) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "latencies": latencies,
        "pids": dict(pids),
        "errors": errors,
        "handshakes": handshakes,
    }


# --------------------------------------------------------------------------------------------
# Driving gunicorn
# --------------------------------------------------------------------------------------------


def server_cpu(master: int) -> float:
    """CPU seconds used so far by the gunicorn master and its workers."""
    from tests.support.procs import children, cpu_seconds

    return sum(cpu_seconds([master, *children(master)]).values())


def run_class(worker_class: str, args: Any, certs: CertPaths, tmp: Path) -> dict[str, Any]:
    """Start gunicorn with one worker class, load it, stop it; return the figures."""
    import multiprocessing

    from tests.support.gunicorn import start, stop

    threads = 1 if worker_class == "sync" else args.threads
    server = start(
        tmp,
        certs,
        # workers:app, with this directory first on the workers' path (see the top).
        app="workers:app",
        options=["--worker-class", worker_class, "--pythonpath", str(_HERE)],
        workers=args.workers,
        threads=threads,
        log_level="warning",
        PROMETHEUS_MULTIPROC_DIR=str(tmp / f"metrics-{worker_class}"),
    )
    ca_file = str(certs.ca_cert)
    try:
        procs = max(1, min(args.client_procs, args.connections))
        per_proc = [
            args.connections // procs + (i < args.connections % procs) for i in range(procs)
        ]
        start_at = time.time() + 1.0  # time for the client processes to start
        mp = multiprocessing.get_context("spawn")
        with mp.Pool(procs) as pool:
            pending = [
                pool.apply_async(
                    client_process, (server.port, ca_file, n, start_at, args.warmup, args.seconds)
                )
                for n in per_proc
            ]
            time.sleep(max(0.0, start_at + args.warmup - time.time()))
            cpu0 = server_cpu(server.proc.pid)
            time.sleep(args.seconds)
            cpu1 = server_cpu(server.proc.pid)
            results = [p.get(timeout=args.seconds + 60) for p in pending]
    finally:
        stop(server)

    latencies = sorted(x for r in results for x in r["latencies"])
    pids: dict[int, int] = {}
    for r in results:
        for pid, n in r["pids"].items():
            pids[int(pid)] = pids.get(int(pid), 0) + n
    errors = [e for r in results for e in r["errors"]]
    n = len(latencies)

    return {
        "worker_class": worker_class,
        "workers": args.workers,
        "threads": threads,
        "connections": args.connections,
        "seconds": args.seconds,
        "requests": n,
        "req_per_s": n / args.seconds,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:3],
        "handshakes": sum(r["handshakes"] for r in results),
        "server_cpu_us_per_req": (cpu1 - cpu0) / n * 1e6 if n else float("nan"),
        "per_worker": sorted(pids.values(), reverse=True),
    }


def main() -> None:
    """Parse the options, run each worker class in turn, print a table."""
    import argparse
    import importlib.util
    import tempfile

    from webhook.certs import issue

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="measured time per class")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured time before it")
    p.add_argument("--connections", type=int, default=8, help="client connections in all")
    p.add_argument("--client-procs", type=int, default=2, help="client processes")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    p.add_argument("--threads", type=int, default=4, help="threads per gthread worker")
    p.add_argument("--classes", default="sync,gthread,gevent", help="worker classes to run")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = p.parse_args()

    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    if "gevent" in classes and importlib.util.find_spec("gevent") is None:
        print("gevent is not installed: skipped")
        classes.remove("gevent")

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as d:
        paths = issue.write_certs(Path(d) / "tls", days=1)
        for worker_class in classes:
            rows.append(run_class(worker_class, args, paths, Path(d)))

    print(
        f"\n{args.connections} keep-alive TLS connections from {args.client_procs} client"
        f" processes, {args.seconds:g} s each, {args.workers} workers, ~4 KB JSON body\n"
    )
    header = (
        f"{'class':<8} {'thr':>3} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}"
        f" {'handshakes':>10} {'CPU us/req':>10}  per-worker spread"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        total = sum(r["per_worker"]) or 1
        spread = " / ".join(f"{100 * c / total:.0f}%" for c in r["per_worker"])
        print(
            f"{r['worker_class']:<8} {r['threads']:>3} {r['req_per_s']:>8.0f} {r['p50_ms']:>7.2f}"
            f" {r['p99_ms']:>7.2f} {r['errors']:>6} {r['handshakes']:>10}"
            f" {r['server_cpu_us_per_req']:>10.0f}  {spread}"
        )
        for sample in r["error_samples"]:
            print(f"    error: {sample}")
    if args.out:
        write_json(args.out, rows)
        print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
