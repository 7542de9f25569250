"""What a webhook server costs to start, and how soon a restarted worker serves again.

gunicorn forks its workers from the master: a module the master imported before the fork costs
a worker nothing, one a worker imports itself costs every worker, and again every worker
gunicorn restarts. This measures both sides of that, for this checkout's ``webhook`` and, with
``--before DIR``, for another version's (e.g. ``git archive OLD webhook | tar -x -C DIR``),
served the same way in the same rounds (bench/latency.py's launcher for another tree; the
order of the two rotates each round):

* **start**: a server with ``--workers`` workers (the chart's 2); the CPU (utime + stime, from
  ``/proc/PID/stat``) of the master, and of each worker, read when that worker logs that it is
  ready, the time from the launch until every worker is, and the memory of the master and
  the workers together then (their PSS);
* **restart**: ``--restarts`` times, one worker SIGKILLed; gunicorn forks another at once; the
  time from the kill until the new worker logs that it is ready, and its CPU then.

A worker is ready when it logs ``serving policy ...`` (``webhook.server.app``, once the policy
is loaded), or with ``--cluster`` ``cluster (...) listed, N nodes: ready``
(``webhook.server.cluster``): each worker then lists and watches a real control plane
(``tests/support/controlplane.py``, ``KUBEBUILDER_ASSETS``), as the chart's workers watch
theirs in the cluster. Without ``--cluster`` the server is that of ``gpu-policy serve --dev``:
the bundled example policy, no cluster.

``--imports`` prints instead what a worker imports after its fork (``python -X importtime``, the
lines the worker writes after gunicorn's ``Booting worker``; modules loaded through
``importlib.import_module``, such as the WSGI app's own, are not among them)::

    .venv/bin/python -m bench.worker_start --cluster --before /tmp/before   # 5 rounds
    .venv/bin/python -m bench.worker_start --rounds 3 --restarts 2
    .venv/bin/python -m bench.worker_start --cluster --imports
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.latency import _OTHER_TREE

if TYPE_CHECKING:
    from tests.support.gunicorn import Server
    from webhook.certs.issue import CertPaths

_REPO = Path(__file__).resolve().parent.parent
#: What a worker logs when it serves (webhook.server.app) or, watching a cluster, when it has
#: listed it (webhook.server.cluster).
POLICY_READY = r"webhook\.server\.app: serving policy"
POLL = 0.01  # seconds between two looks at the server's log
DEADLINE = 120.0  # seconds a worker may take to turn ready before the run gives up


@dataclass
class Figures:
    """What one setup measured over the rounds."""

    masters: list[float] = field(default_factory=list)  # CPU s of the master, all ready
    workers: list[float] = field(default_factory=list)  # CPU s of each worker when ready
    starts: list[float] = field(default_factory=list)  # s from launch until all ready
    restarts: list[float] = field(default_factory=list)  # s from a kill until the new one ready
    restart_cpu: list[float] = field(default_factory=list)  # CPU s of that new worker
    memory: list[float] = field(default_factory=list)  # MiB of PSS, master and workers, all ready


def pss_mib(pids: list[int]) -> float:
    """The proportional set size of ``pids`` together, in MiB: a page the master and its
    workers share counts once, as it does in the container's memory."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    return total / 1024


def wait_ready(server: Server, pids: set[int], pattern: str) -> dict[int, float]:
    """Wait until every pid in ``pids`` logged ``pattern``; each one's CPU when it was seen."""
    from tests.support.procs import cpu_seconds

    seen: dict[int, float] = {}
    deadline = time.monotonic() + DEADLINE
    while len(seen) < len(pids):
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise SystemExit(f"workers {sorted(pids - set(seen))} not ready:\n{server.log()}")
        fresh = (server.logged_by(pattern) & pids) - set(seen)
        seen.update(cpu_seconds(sorted(fresh)))
        time.sleep(POLL)
    return seen


def launch(tree: Path, tmp: Path, certs: CertPaths, workers: int, extra: dict[str, str]) -> Server:
    """gunicorn serving the ``webhook`` package of ``tree``, not waited for."""
    from tests.support.gunicorn import client_context, free_port, server_env
    from tests.support.gunicorn import launch as launch_command
    from webhook.server import GUNICORN_CONFIG, WSGI_APP

    port = free_port()
    env = server_env(tmp, port, certs.directory, workers=workers, PYTHONPATH=str(tree.resolve()))
    env.update(extra)
    command = [sys.executable, "-P", "-c", _OTHER_TREE, "-c", GUNICORN_CONFIG, WSGI_APP]
    return launch_command(command, tmp, env, client_context(certs.ca_cert), port)


def one_round(
    tree: Path, tmp: Path, certs: CertPaths, args: argparse.Namespace, extra: dict[str, str]
) -> Figures:
    """Start one server of ``tree``, restart its workers, stop it: its figures."""
    from tests.support.gunicorn import stop
    from tests.support.procs import children, cpu_seconds

    out = Figures()
    started = time.monotonic()
    server = launch(tree, tmp, certs, args.workers, extra)
    try:
        deadline = started + DEADLINE
        while len(server.workers()) < args.workers:
            if time.monotonic() > deadline or server.proc.poll() is not None:
                raise SystemExit(f"the server of {tree} did not start:\n{server.log()}")
            time.sleep(POLL)
        cpu = wait_ready(server, set(server.workers()), args.pattern)
        out.starts.append(time.monotonic() - started)
        out.masters.append(cpu_seconds([server.proc.pid])[server.proc.pid])
        out.workers.extend(cpu.values())
        out.memory.append(pss_mib([server.proc.pid, *server.workers()]))
        for _ in range(args.restarts):
            before = set(children(server.proc.pid))
            killed = time.monotonic()
            os.kill(min(before), signal.SIGKILL)
            new: set[int] = set()
            while len(new) != 1:
                new = set(children(server.proc.pid)) - before
                time.sleep(POLL)
            cpu = wait_ready(server, new, args.pattern)
            out.restarts.append(time.monotonic() - killed)
            out.restart_cpu.extend(cpu.values())
    finally:
        stop(server)
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(results: dict[str, Figures], args: argparse.Namespace, loads: list[float]) -> None:
    """One line per setup: medians over the rounds."""
    mode = "watching a control plane" if args.cluster else "bundled example policy, no cluster"
    print(
        f"{args.rounds} rounds, {args.workers} workers, {args.restarts} restarts a round; "
        f"{mode}; medians (CPU: utime + stime)"
    )
    print(
        f"{'setup':>8} {'master CPU':>11} {'worker CPU':>11} {'all ready':>10} "
        f"{'restart ready':>14} {'its CPU':>8} {'PSS':>8}"
    )
    for name, f in results.items():
        print(
            f"{name:>8} {_median(f.masters):>10.2f}s {_median(f.workers):>10.2f}s "
            f"{_median(f.starts):>9.2f}s {_median(f.restarts):>13.2f}s "
            f"{_median(f.restart_cpu):>7.2f}s {_median(f.memory):>4.0f} MiB"
        )
    print(f"load average before the run {loads[0]:.2f}, after {loads[1]:.2f}")


def show_imports(tree: Path, tmp: Path, certs: CertPaths, args: argparse.Namespace) -> None:
    """Print the modules one worker imports after its fork, slowest first."""
    from tests.support.gunicorn import stop

    extra = {**args.extra, "PYTHONPROFILEIMPORTTIME": "1"}
    server = launch(tree, tmp, certs, 1, extra)
    try:
        while not server.workers():
            time.sleep(POLL)
        wait_ready(server, set(server.workers()), args.pattern)
        time.sleep(1.0)  # what the worker imports on its first snapshot, once ready
        log = server.log()
    finally:
        stop(server)
    after = log[log.index("Booting worker") :]
    rows = re.findall(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", after)
    top = [(int(total), name) for _, total, indent, name in rows if len(indent) == 1]
    print(f"{tree}: one worker imported {len(rows)} modules after its fork; at top level:")
    for total, name in sorted(top, reverse=True):
        print(f"  {total / 1000:8.1f} ms  {name}")


@contextmanager
def cluster_env(args: argparse.Namespace, tmp: Path) -> Iterator[dict[str, str]]:
    """The variables that make a worker watch a control plane (started here), or none."""
    if not args.cluster:
        yield {}
        return
    from tests.support.controlplane import ControlPlane, assets_dir

    assets = assets_dir()
    if assets is None:
        raise SystemExit("--cluster needs KUBEBUILDER_ASSETS (docs/testing-control-plane.md)")
    plane = ControlPlane(assets, tmp / "plane")
    plane.start()
    try:
        kubeconfig = plane.write_kubeconfig(tmp / "kubeconfig")
        yield {"GPU_POLICY_KUBE": str(kubeconfig)}
    finally:
        plane.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--restarts", type=int, default=3, help="worker kills a round")
    p.add_argument("--cluster", action="store_true", help="workers watch a control plane")
    p.add_argument("--before", type=Path, help="a directory with another version's webhook/")
    p.add_argument("--imports", action="store_true", help="print a worker's imports, no rounds")
    args = p.parse_args(argv)
    from tests.support.gunicorn import CLUSTER_READY
    from webhook.certs.issue import write_certs

    args.pattern = CLUSTER_READY if args.cluster else POLICY_READY

    trees = {"this": _REPO}
    if args.before is not None:
        trees["before"] = args.before
    with tempfile.TemporaryDirectory(prefix="worker-start-") as folder:
        tmp = Path(folder)
        certs = write_certs(tmp / "tls")
        with cluster_env(args, tmp) as extra:
            args.extra = extra
            if args.imports:
                for tree in trees.values():
                    show_imports(tree, tmp, certs, args)
                return
            results = {name: Figures() for name in trees}
            loads = [os.getloadavg()[0]]
            order = list(trees)
            for i in range(args.rounds):
                for name in order[i % len(order) :] + order[: i % len(order)]:
                    got = one_round(trees[name], tmp, certs, args, extra)
                    for key, values in vars(got).items():
                        getattr(results[name], key).extend(values)
            loads.append(os.getloadavg()[0])
    report(results, args, loads)


if __name__ == "__main__":
    main()
