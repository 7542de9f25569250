"""Benchmark: ``gpu-policy audit --kubeconfig`` on a 5,000-node, 100,000-pod cluster, one core.

Generates the cluster of ``tests/support/audit_cluster.py`` (one node in five a GPU node;
10 % of the pods ask for GPUs, under Deployments/ReplicaSets, StatefulSets, Jobs, CronJobs
and bare; shared, exclusive and MIG resources, tolerations, selectors; pools that run full,
pods Pending, gated and refused), serves it from a loopback API server
(``tests/support/page_server.py``: objects serialised once, paged with ``limit``/``continue``
as the API server does) on one core, and runs in a child process pinned to another core
(``os.sched_setaffinity``):

* ``list`` (the baseline): ``webhook.kube.lister.read_for_audit`` with a sink that
  discards every page: the same requests, the same client and decoding, no judging;
* ``audit``: the command itself, ``gpu-policy audit --kubeconfig ... -o json``, in process
  (the real ``kubernetes`` client through ``webhook/kube/lister.py``).

For each: wall time of the child process (interpreter start-up included), its CPU time and peak
RSS (``getrusage`` of the child, from ``wait4``), the list requests the server answered. The
audit's output is then checked against the findings the generator placed on purpose.

    .venv/bin/python -m bench.audit                                 # 5,000 nodes, 100,000 pods
    .venv/bin/python -m bench.audit --pods 20000 --out bench/results/audit.json

Targets (issue: ``gpu-policy audit``, scale): under 30 s on one core, peak RSS under 400 MB.
Figures to read, not assertions; the exit status is 1 only when the audit's findings are not
the generator's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.figures import write_json

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = ("list", "audit")
TARGET_WALL_S, TARGET_RSS_MB = 30.0, 400.0


# --------------------------------------------------------------------------- child


class Discard:
    """A sink that counts the pages and objects it is handed and keeps nothing."""

    def __init__(self) -> None:
        self.pages = 0
        self.objects = 0

    def add_all(self, objects: Any, kind: str | None = None) -> None:
        """Count one page."""
        self.pages += 1
        self.objects += sum(1 for _ in objects)


def child(variant: str, kubeconfig: str, policy: str, page_size: int, out: str, now: str) -> int:
    """Run one variant in this process; write its output to ``out``; the exit status.

    ``now`` is the generated cluster's clock (the server process sends it).
    """
    if variant == "list":
        from webhook.kube.lister import connect_audit, read_for_audit

        sink = Discard()
        with connect_audit(kubeconfig) as api:
            nodes = read_for_audit(api, sink, page_size=page_size, timeout=120)
        Path(out).write_text(json.dumps({"nodes": len(nodes), "objects": sink.objects}))
        return 0
    from webhook.cli.main import main as gpu_policy

    argv = ["audit", "--kubeconfig", kubeconfig, "--policy", policy, "--now", now]
    argv += ["--page-size", str(page_size), "--timeout", "120", "-o", "json"]
    with open(out, "w") as stream, contextlib.redirect_stdout(stream):
        return gpu_policy(argv)


# --------------------------------------------------------------------------- parent


def _cores() -> tuple[int, int | None]:
    """(the child's core, the server's core), or one shared core."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[0], cores[-1]) if len(cores) > 1 else (cores[0], None)


def serve(nodes: int, pods: int, gpu_fraction: float, directory: str, core: int | None) -> None:
    """Server process: load the cluster, serve it, answer ``count`` and ``quit`` on stdin.

    A process of its own so that the client processes, started by a small parent, carry no
    memory of the generated cluster (a child's ``ru_maxrss`` includes what it was forked from).
    """
    if core is not None:
        os.sched_setaffinity(0, {core})
    import yaml

    from tests.support.audit_cluster import NOW, POLICY, Cluster
    from tests.support.page_server import PageServer

    start = time.perf_counter()
    cluster = Cluster(nodes, pods, gpu_fraction)
    server = PageServer()
    server.add_many(cluster.nodes())
    server.add_many(cluster.objects())
    facts = {
        "objects": server.counts(),
        "json_mib": round(server.stored_bytes() / 2**20, 1),
        "build_s": round(time.perf_counter() - start, 1),
        "expected": cluster.expected().as_dict(),
        "now": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    (Path(directory) / "policy.yaml").write_text(yaml.safe_dump(POLICY))
    with server:
        server.write_kubeconfig(Path(directory))
        print("READY " + json.dumps(facts), flush=True)
        for line in sys.stdin:
            if line.strip() == "count":
                print("COUNT " + json.dumps(dict(server.lists)), flush=True)
                server.lists.clear()
            else:
                break


def _reply(server: subprocess.Popen[str], prefix: str) -> Any:
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    raise SystemExit(f"the server process ended before {prefix.strip()}")


def measure(
    variant: str,
    server: subprocess.Popen[str],
    directory: Path,
    page_size: int,
    core: int,
    now: str,
) -> tuple[dict[str, Any], str]:
    """Run one variant in a child pinned to ``core``; its figures, and its output."""
    assert server.stdin is not None
    out, err = directory / f"{variant}.out", directory / f"{variant}.err"
    args = [sys.executable, "-m", "bench.audit", "--child", variant, "--core", str(core)]
    args += ["--kubeconfig", str(directory / "kubeconfig")]
    args += ["--policy", str(directory / "policy.yaml")]
    args += ["--page-size", str(page_size), "--child-out", str(out), "--now", now]
    start = time.perf_counter()
    with open(err, "w") as stderr:
        proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: the audit found something at fail level
        raise SystemExit(f"{variant} exited {proc.returncode}:\n{err.read_text()}")
    server.stdin.write("count\n")
    server.stdin.flush()
    lists = _reply(server, "COUNT ")
    row = {
        "variant": variant,
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "rss_peak_mib": round(usage.ru_maxrss / 1024, 1),
        "pages": sum(lists.values()),
        "pages_by_resource": dict(sorted(lists.items())),
    }
    return row, out.read_text()


def check(doc: dict[str, Any], expected: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The audit's counts, and how they differ from the generator's expectation."""
    found = Counter((f["rule"], f["result"]) for f in doc["findings"])
    got = {
        "pods": doc["pods"],
        "workloads": len(doc["workloads"]),
        "findings": {f"{r}/{s}": n for (r, s), n in sorted(found.items())},
    }
    want = expected
    diffs = [
        f"{key}: audit {got[key]} != generated {want[key]}"
        for key in ("pods", "workloads", "findings")
        if got[key] != want[key]
    ]
    return got, diffs


def _extreme(rows: list[dict[str, Any]], variant: str, pick: Any) -> dict[str, Any]:
    """Each figure of a variant's rounds, the lowest (``min``) or the highest (``max``)."""
    mine = [r for r in rows if r["variant"] == variant]
    return {
        **mine[0],
        **{k: pick(r[k] for r in mine) for k in ("wall_s", "cpu_s", "rss_peak_mib")},
    }


def _print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'variant':16} {'wall s':>7} {'CPU s':>7} {'peak RSS MiB':>13} {'pages':>6}")
    for row in rows:
        name = "list (baseline)" if row["variant"] == "list" else row["variant"]
        print(
            f"{name:16} {row['wall_s']:7.2f} {row['cpu_s']:7.2f} {row['rss_peak_mib']:13.1f} "
            f"{row['pages']:6d}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=100_000)
    p.add_argument("--gpu-fraction", type=float, default=0.1)
    p.add_argument("--page-size", type=int, default=500)
    p.add_argument("--rounds", type=int, default=1, help="list/audit pairs, alternating")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--core", type=int, help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    p.add_argument("--policy", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    p.add_argument("--now", help=argparse.SUPPRESS)
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.nodes, args.pods, args.gpu_fraction, args.dir, args.core)
        return
    if args.child:
        os.sched_setaffinity(0, {args.core})
        raise SystemExit(
            child(
                args.child,
                args.kubeconfig,
                args.policy,
                args.page_size,
                args.child_out,
                args.now,
            )
        )

    client_core, server_core = _cores()
    load_before = os.getloadavg()[0]
    cores = (
        f"client on CPU {client_core}, server on CPU {server_core}"
        if server_core is not None
        else f"client and server share CPU {client_core}"
    )
    rows: list[dict[str, Any]] = []
    output = ""
    with tempfile.TemporaryDirectory() as tmp:
        serve_args = [sys.executable, "-m", "bench.audit", "--serve", "--dir", tmp]
        serve_args += ["--nodes", str(args.nodes), "--pods", str(args.pods)]
        serve_args += ["--gpu-fraction", str(args.gpu_fraction)]
        if server_core is not None:
            serve_args += ["--core", str(server_core)]
        server = subprocess.Popen(
            serve_args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            facts = _reply(server, "READY ")
            print(
                f"gpu-policy audit --kubeconfig: {args.nodes:,} nodes, {args.pods:,} pods "
                f"({args.gpu_fraction:.0%} GPU), pages of {args.page_size}; {cores}; "
                f"load average before {load_before:.2f}"
            )
            print(
                f"cluster: {sum(facts['objects'].values()):,} objects, {facts['json_mib']} MiB "
                f"of JSON, made in {facts['build_s']} s\n"
            )
            for _ in range(args.rounds):
                for variant in VARIANTS:
                    row, text = measure(
                        variant, server, Path(tmp), args.page_size, client_core, facts["now"]
                    )
                    rows.append(row)
                    output = text if variant == "audit" else output
        finally:
            server.communicate("quit\n", timeout=60)
    load_after = os.getloadavg()[0]
    _print_rows(rows)
    print(
        f"load average after {load_after:.2f} (the wall time grows with it; the CPU time does not)"
    )
    doc = json.loads(output)
    got, diffs = check(doc, facts["expected"])
    # Other work on the machine only ever adds time: compare the best of the rounds, and hold
    # the worst against the targets.
    base, full = _extreme(rows, "list", min), _extreme(rows, "audit", min)
    worst = _extreme(rows, "audit", max)
    summary = doc["summary"]
    print(
        f"\naudit over the baseline (best of {args.rounds}): "
        f"{full['wall_s'] - base['wall_s']:+.2f} s wall, "
        f"{full['cpu_s'] - base['cpu_s']:+.2f} s CPU, "
        f"{full['rss_peak_mib'] - base['rss_peak_mib']:+.1f} MiB peak RSS"
    )
    print(
        f"findings: {sum(summary.values()):,} ("
        + ", ".join(f"{n:,} {r}" for r, n in summary.items())
        + f"); {doc['pods']['gpu']:,} GPU pods ({doc['pods']['bound']:,} bound, "
        f"{doc['pods']['waiting']:,} waiting, {doc['pods']['refused']:,} refused) "
        f"in {got['workloads']:,} workloads; exit status {full['exit']}"
    )
    print(
        "the audit found what the generator placed"
        if not diffs
        else "the audit differs from what the generator placed:\n  " + "\n  ".join(diffs)
    )
    rss_mb = worst["rss_peak_mib"] * 2**20 / 1e6
    print(
        f"targets (worst of {args.rounds}): wall {worst['wall_s']:.1f} s (< {TARGET_WALL_S:.0f} s: "
        f"{'met' if worst['wall_s'] < TARGET_WALL_S else 'MISSED'}), peak RSS {rss_mb:.0f} MB "
        f"(< {TARGET_RSS_MB:.0f} MB: {'met' if rss_mb < TARGET_RSS_MB else 'MISSED'})"
    )
    if args.out:
        report = {
            "nodes": args.nodes,
            "pods": args.pods,
            "gpu_fraction": args.gpu_fraction,
            "page_size": args.page_size,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "client_core": client_core,
            "server_core": server_core,
            "load_before": load_before,
            "load_after": load_after,
            "cluster": {k: v for k, v in facts.items() if k not in ("expected", "now")},
            "rows": rows,
            "best": {"list": base, "audit": full},
            "worst": {"list": _extreme(rows, "list", max), "audit": worst},
            "summary": summary,
            "audit": got,
            "expected": facts["expected"],
            "matches": not diffs,
        }
        write_json(args.out, report)
        print(f"written to {args.out}")
    if diffs:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
