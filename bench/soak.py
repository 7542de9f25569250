"""Soak: the real webhook at a steady rate for minutes; errors, p99 and memory over time.

Starts the webhook like bench/http_load.py does (``start_server``: gunicorn with
``webhook.server.gunicorn_conf``, 2 gthread workers x 4 threads, certificates from
``webhook.certs.issue``) and drives it with ``--connections`` client processes over kept-alive
TLS at a paced total rate (``--rate`` requests/s; latency counts from the scheduled send time, so a
stall is not hidden), posting the request of bench/http_load.py (``review_body``: a ~3.9 KB pod
CREATE asking for one GPU) to ``/mutate`` with a fresh uid each time, and checking every
answer (HTTP 200, the uid, a JSONPatch).

Every ``--interval`` seconds it records: requests answered, errors, latency p50/p99, and the
RSS of the master and of each worker (VmRSS from /proc). It writes a CSV and a PNG (p99 and
RSS over time, matplotlib) and prints a verdict: errors (must be 0), and the memory trend, the
least-squares slope of the total RSS over the second half of the run in MiB/min (the first
half includes warm-up: caches, allocator arenas).

    .venv/bin/python -m bench.soak                          # 500 req/s for 120 s
    .venv/bin/python -m bench.soak --rate 300 --seconds 600 --out bench/results/soak
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import multiprocessing
import os
import ssl
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.figures import percentile
from bench.http_load import HEADERS, review_body, start_server, stop_server

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent

if TYPE_CHECKING:
    from tests.support.gunicorn import Server

MIB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def client(
    idx: int, port: int, ca_file: str, template: bytes, rate: float, stop_at: float, out: Any
) -> None:
    """One kept-alive connection at ``rate`` req/s; sends (time, latency|None, error) batches."""
    doc = json.loads(template)
    head, tail = json.dumps(doc).split(doc["request"]["uid"], 1)
    ctx = ssl.create_default_context(cafile=ca_file)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    interval = 1.0 / rate
    scheduled = time.monotonic() + idx * interval / 8  # spread the clients' phases
    batch: list[tuple[float, float | None, str]] = []
    last_flush = time.monotonic()
    while True:
        now = time.monotonic()
        if scheduled >= stop_at:
            break
        if scheduled > now:
            time.sleep(scheduled - now)
        start = scheduled
        scheduled += interval
        uid = str(uuid.uuid4())
        body = (head + uid + tail).encode()
        error = ""
        try:
            conn.request("POST", "/mutate?timeout=10s", body=body, headers=HEADERS)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                error = f"HTTP {resp.status}"
            else:
                answer = json.loads(data)["response"]
                if answer["uid"] != uid or answer.get("patchType") != "JSONPatch":
                    error = "wrong answer"
        except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
            error = type(e).__name__
            conn.close()
        done = time.monotonic()
        batch.append((done, None if error else done - start, error))
        if done - last_flush > 0.5:
            out.put(("batch", batch))
            batch, last_flush = [], done
    conn.close()
    out.put(("batch", batch))
    out.put(("done", idx))


def slope_per_min(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (seconds), per minute."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t_s"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    ax1.plot(t, [r["p99_ms"] for r in rows], marker=".", label="p99")
    ax1.plot(t, [r["p50_ms"] for r in rows], marker=".", label="p50")
    ax1.set_ylabel("latency (ms)")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="upper right")
    ax1.grid(alpha=0.3)
    ax1.set_title(title, fontsize=9)
    ax2.plot(t, [r["rss_total_mib"] for r in rows], marker=".", label="master + workers")
    workers = sorted(k for k in rows[0] if k.startswith("rss_worker"))
    for k in workers:
        ax2.plot(t, [r[k] for r in rows], marker=".", label=k.replace("rss_", "").replace("_", " "))
    ax2.set_ylabel("RSS (MiB)")
    ax2.set_xlabel("time (s)")
    ax2.set_ylim(bottom=0)
    ax2.legend(loc="center right", fontsize=8)
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=500.0, help="total requests/s (paced)")
    p.add_argument("--seconds", type=float, default=120.0, help="how long")
    p.add_argument("--interval", type=float, default=5.0, help="seconds per sample")
    p.add_argument("--connections", type=int, default=4, help="client processes/connections")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    p.add_argument("--threads", type=int, default=4, help="threads per worker")
    p.add_argument("--log-level", default="info", help="GPU_POLICY_LOG_LEVEL")
    p.add_argument(
        "--out", type=Path, default=_REPO / "bench" / "results" / "soak", help="CSV/PNG prefix"
    )
    return p.parse_args()


def _sample(
    server: Server, window: list[float], errors: int, elapsed: float, args: argparse.Namespace
) -> dict[str, Any]:
    """One row: the window's answers and errors, and the RSS of the processes now."""
    rss_workers = sorted((rss_bytes(w) for w in server.workers()), reverse=True)
    row: dict[str, Any] = {
        "t_s": round(elapsed, 1),
        "requests": len(window),
        "req_per_s": round(len(window) / args.interval, 1),
        "errors": errors,
        "p50_ms": round(percentile(sorted(window), 0.50) * 1000, 2),
        "p99_ms": round(percentile(sorted(window), 0.99) * 1000, 2),
        "rss_master_mib": round(rss_bytes(server.proc.pid) / MIB, 2),
    }
    for i, r in enumerate(rss_workers):
        row[f"rss_worker_{i + 1}"] = round(r / MIB, 2)
    row["rss_total_mib"] = round(row["rss_master_mib"] + sum(rss_workers) / MIB, 2)
    print(
        f"{row['t_s']:>6.1f}s {row['req_per_s']:>7.1f} req/s"
        f"  p50 {row['p50_ms']:>6.2f} ms  p99 {row['p99_ms']:>6.2f} ms"
        f"  errors {errors}  RSS {row['rss_total_mib']:.1f} MiB",
        flush=True,
    )
    return row


def main() -> None:
    """Parse the options, run the soak, write the CSV and the plot, print the verdict."""
    args = _arguments()
    from webhook.certs import issue

    body = review_body()
    mp = multiprocessing.get_context("fork")
    rows: list[dict[str, Any]] = []
    errors: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as d:
        tmp = Path(d)
        paths = issue.write_certs(tmp / "tls", days=1)
        server = start_server("real", tmp, paths, args)
        try:
            out = mp.Queue()
            begin = time.monotonic() + 0.5
            stop_at = begin + args.seconds
            procs = [
                mp.Process(
                    target=client,
                    args=(
                        i,
                        server.port,
                        str(paths.ca_cert),
                        body,
                        args.rate / args.connections,
                        stop_at,
                        out,
                    ),
                )
                for i in range(args.connections)
            ]
            for proc in procs:
                proc.start()
            finished = 0
            window: list[float] = []
            window_errors = 0
            answered = 0
            next_sample = begin + args.interval
            while finished < len(procs) or time.monotonic() < next_sample - args.interval:
                try:
                    msg = out.get(timeout=0.2)
                except Exception:  # queue.Empty
                    msg = None
                if msg is not None and msg[0] == "done":
                    finished += 1
                elif msg is not None:
                    for _, latency, error in msg[1]:
                        if error:
                            errors[error] += 1
                            window_errors += 1
                        else:
                            window.append(latency)
                            answered += 1
                now = time.monotonic()
                if finished == len(procs) and now < next_sample and rows:
                    # The last answers came in after the last full window: counted above
                    # (answered, errors), not a sample of their own.
                    break
                if now >= next_sample:
                    elapsed = min(now, stop_at) - begin
                    rows.append(_sample(server, window, window_errors, elapsed, args))
                    window, window_errors = [], 0
                    next_sample += args.interval
                    if finished == len(procs):
                        break
            for proc in procs:
                proc.join()
        finally:
            stop_server(server)
    _report(rows, errors, answered, len(body), args)


def _report(
    rows: list[dict[str, Any]],
    errors: Counter[str],
    answered: int,
    body_bytes: int,
    args: argparse.Namespace,
) -> None:
    """Write the CSV and the plot, print the verdict (exit 1 on errors)."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    csv_path = args.out.with_suffix(".csv")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    second_half = [r for r in rows if r["t_s"] >= args.seconds / 2]
    slope = slope_per_min(
        [r["t_s"] for r in second_half], [r["rss_total_mib"] for r in second_half]
    )
    p99s = [r["p99_ms"] for r in rows]
    title = (
        f"{args.rate:g} req/s for {args.seconds:g} s, POST /mutate {body_bytes} B over TLS,"
        f" {args.workers} workers x {args.threads} threads; errors {sum(errors.values())},"
        f" RSS slope {slope:+.2f} MiB/min (2nd half)"
    )
    png_path = args.out.with_suffix(".png")
    plot(rows, png_path, title)
    print(
        f"\n{answered} answered, {sum(errors.values())} errors {dict(errors) or ''}"
        f"\np99 per {args.interval:g} s window: median {percentile(sorted(p99s), 0.5):.2f} ms,"
        f" max {max(p99s):.2f} ms"
        f"\nRSS master+workers: {rows[0]['rss_total_mib']:.1f} MiB at {rows[0]['t_s']:g} s,"
        f" {rows[-1]['rss_total_mib']:.1f} MiB at {rows[-1]['t_s']:g} s;"
        f" slope over the second half {slope:+.2f} MiB/min"
        f"\nverdict: errors {'OK' if not errors else 'FAIL'};"
        f" memory {'no growth trend' if abs(slope) < 1.0 else 'GROWING'}"
        f" (|slope| < 1 MiB/min)"
        f"\n{os.cpu_count()} CPUs; written {csv_path} and {png_path}"
    )
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
