"""Benchmark: the Kubernetes inventory with 5,000 realistic GPU nodes.

Starts a real control plane (``tests/support/controlplane.py``, from ``KUBEBUILDER_ASSETS``) in
a process of its own, loaded with ``--nodes`` GFD-labelled GPU nodes (about 8 KB of JSON each,
as real nodes are, from ``tests.objects.cluster``) and ``--pods`` GPU pods (and as
many other pods), with the controllers stopped once the namespaces are made (no kubelet
heartbeats the nodes: nothing may taint them meanwhile). Then it measures each client variant
in a fresh process, so that CPU and memory are the client's alone:

* ``source``: ClusterSource (raw JSON, 500-item pages) - what the webhook uses;
* ``source-unpaged``: the same, one list response;
* ``models``: ``CoreV1Api.list_node()`` into client model objects (no trimming, no watch);
* ``watch-helper``: ``kubernetes.watch.Watch().stream(list_node)`` initial ADDED events
  (from resourceVersion 0, the API server's cache).

For each: time to the first snapshot (or to the end of the list), client CPU seconds,
peak RSS, then (second run, under tracemalloc) the peak of Python allocations and what
stays allocated afterwards. Then, with ``source`` running: the latency from one node label
change on the server to the snapshot that shows it, and a relabel of every node (one
MODIFIED event per node) until the snapshot shows them all, with the number of snapshots
published meanwhile (the debouncer at work). Both latencies run from the moment the API
server answered the (last) PATCH: the watch event can arrive before that answer, so a figure
near zero may be negative.

    .venv/bin/python -m bench.kube_inventory            # 5,000 nodes, 2,000 GPU pods
    .venv/bin/python -m bench.kube_inventory --nodes 1000 --variants source

Timings are figures to read, not assertions. Loopback TLS, so the network costs nothing; the
time to the first snapshot includes the API server's own (its watch cache serialises the
list), as on a real cluster. Loading 5,000 nodes takes a few minutes.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from itertools import repeat
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = ("source", "source-unpaged", "models", "watch-helper")


# --------------------------------------------------------------------------- server process


def serve(nodes: int, pods: int) -> None:
    """Child process: a real control plane loaded with the cluster; obey commands from stdin."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from tests.objects import TIME_SLICING_CONFIG, cluster, configmap, listed_pod
    from tests.support.controlplane import ControlPlane, assets_dir, create_node

    assets = assets_dir()
    if assets is None:
        raise SystemExit(
            "set KUBEBUILDER_ASSETS to a folder with etcd, kube-apiserver, "
            "kube-controller-manager and kube-scheduler (docs/testing-control-plane.md)"
        )
    work = Path(tempfile.mkdtemp(prefix="bench-kube-inventory-"))
    plane = ControlPlane(assets=assets, workdir=work / "controlplane")
    plane.start()
    try:
        core = client.CoreV1Api(plane.client)
        namespaces = {f"team-{i % 20}" for i in range(pods)} | {"web", "gpu-operator"}
        for name in sorted(namespaces):
            core.create_namespace({"metadata": {"name": name}})
            try:  # the ServiceAccount admission plugin refuses pods before it exists
                core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
        # Nothing may reconcile meanwhile: no kubelet heartbeats these nodes, so the node
        # lifecycle controller would taint them (MODIFIED events the benchmark did not make).
        plane.stop_controllers()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda node: create_node(plane, node), cluster(nodes)))
            made = [
                listed_pod(
                    f"job-{i:05d}",
                    f"team-{i % 20}",
                    gpu={"nvidia.com/gpu": "1"},
                    node=_node(i, nodes),
                )
                for i in range(pods)
            ] + [listed_pod(f"web-{i:05d}", "web", node=_node(i, nodes)) for i in range(pods)]
            list(
                pool.map(
                    lambda obj: core.create_namespaced_pod(
                        obj["metadata"]["namespace"], _fresh(obj)
                    ),
                    made,
                )
            )
        plane.create(
            configmap("device-plugin-config", "gpu-operator", {"any": TIME_SLICING_CONFIG})
        )
        listed = core.list_node(_preload_content=False)
        list_bytes = len(listed.data)
        kubeconfig = plane.write_kubeconfig(work / "kubeconfig")
        print(f"READY {kubeconfig} {list_bytes}", flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            if cmd[0] == "label":  # label NODE KEY VALUE
                _, node, key, value = cmd
                _label(core, node, key, value)
                print(f"DONE {time.monotonic()}", flush=True)
            elif cmd[0] == "relabel":  # relabel KEY VALUE: every node
                _, key, value = cmd
                start = time.monotonic()
                names = [f"gpu-{i:05d}" for i in range(nodes)]
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(_label, repeat(core), names, repeat(key), repeat(value)))
                print(f"DONE {start} {time.monotonic()}", flush=True)
    finally:
        plane.stop()
        shutil.rmtree(work, ignore_errors=True)


def _label(core: Any, node: str, key: str, value: str) -> None:
    core.patch_node(node, {"metadata": {"labels": {key: value}}})


def _node(i: int, nodes: int) -> str:
    return f"gpu-{i % nodes:05d}"


def _fresh(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a client creates it: without the fields the API server sets."""
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in {"uid", "resourceVersion", "creationTimestamp"}
    }
    return {k: v for k, v in obj.items() if k != "status"} | {"metadata": meta}


# --------------------------------------------------------------------------- client process


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def client_run(variant: str, kubeconfig: str, nodes: int, trace: bool, steady: bool) -> None:
    """Child process: measure one variant; print one JSON line (and talk, if steady)."""
    from kubernetes import client, watch

    from webhook.kube import ClusterSource, ClusterState, WatchTimings, load_client

    api = load_client(kubeconfig)
    core = client.CoreV1Api(api)
    core.list_namespaced_config_map("none")  # warm up: connection, lazy imports
    gc.collect()
    out: dict[str, Any] = {"variant": variant, "rss_before_mib": round(_rss_mib(), 1)}
    if trace:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    snapshots: list[tuple[float, ClusterState]] = []
    lock = threading.Condition()

    def keep(state: ClusterState) -> None:
        with lock:
            snapshots.append((time.monotonic(), state))
            lock.notify_all()

    cpu0, t0 = time.process_time(), time.perf_counter()
    source = None
    if variant.startswith("source"):
        timings = WatchTimings(page_size=0 if variant == "source-unpaged" else 500)
        source = ClusterSource(
            api,
            configmap=("gpu-operator", "device-plugin-config"),
            on_snapshot=keep,
            timings=timings,
        ).start()
        if not source.wait_synced(300):
            raise SystemExit("no snapshot within 300 s")
        state = source.current
        assert state is not None
        out["nodes"], out["gpu_pods"] = len(state.nodes), len(state.gpu_pods)
        kept: Any = state
    elif variant == "models":
        kept = core.list_node()
        out["nodes"] = len(kept.items)
    elif variant == "watch-helper":
        kept = []
        w = watch.Watch()
        # resourceVersion 0: the API server's cache as it is, as a reflector's first list asks;
        # without it the server first waits for its cache to reach etcd's latest write, which
        # right after loading (a ConfigMap written last) can take longer than it waits (504).
        for ev in w.stream(core.list_node, resource_version="0", timeout_seconds=60):
            kept.append(ev["object"])
            if len(kept) == nodes:
                w.stop()
        out["nodes"] = len(kept)
    out["first_snapshot_s"] = round(time.perf_counter() - t0, 3)
    out["cpu_s"] = round(time.process_time() - cpu0, 3)
    out["rss_peak_mib"] = round(_rss_mib(), 1)
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        gc.collect()
        current = tracemalloc.get_traced_memory()[0]
        out["traced_peak_mib"] = round((peak - base) / 2**20, 1)
        out["retained_mib"] = round((current - base) / 2**20, 1)
        tracemalloc.stop()
    del kept
    if steady and source is not None:
        _steady(source, snapshots, lock, out)
    if source is not None:
        out["api_errors"] = source.api_errors
        source.stop()
    print(json.dumps(out), flush=True)


def _steady(
    source: Any, snapshots: list[Any], lock: threading.Condition, out: dict[str, Any]
) -> None:
    """Answer ``expect`` commands from the parent: when did a snapshot first show it?"""
    print("SYNCED", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "end":
            return
        if cmd[0] == "expect":  # expect NODE|* KEY VALUE
            _, node, key, value = cmd

            def shows(state: Any, node: str = node, key: str = key, value: str = value) -> bool:
                return all(
                    n["metadata"]["labels"].get(key) == value
                    for n in state.nodes
                    if node == "*" or n["metadata"]["name"] == node
                )

            with lock:
                start = len(snapshots) - 1
                while not shows(snapshots[-1][1]):
                    lock.wait(30)
                first = next(i for i in range(start, len(snapshots)) if shows(snapshots[i][1]))
                print(f"SEEN {snapshots[first][0]} {first - start}", flush=True)


# --------------------------------------------------------------------------- parent


def _expect(stream: IO[str], prefix: str) -> list[str]:
    while True:
        line = stream.readline()
        if not line:
            raise SystemExit(f"child ended while waiting for {prefix}")
        if line.startswith(prefix):
            return line.split()[1:]


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.kube_inventory", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=2000, help="GPU pods (as many non-GPU pods again)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--changes", type=int, default=20, help="single label changes to time")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client", help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    p.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--steady", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.nodes, args.pods)
        return
    if args.client:
        client_run(args.client, args.kubeconfig, args.nodes, args.trace, args.steady)
        return

    t = time.perf_counter()
    server = _child("--serve", "--nodes", str(args.nodes), "--pods", str(args.pods))
    assert server.stdin is not None and server.stdout is not None
    kubeconfig, list_bytes = _expect(server.stdout, "READY")
    size = int(list_bytes)
    print(
        f"kube-apiserver: {args.nodes} nodes, {args.pods} GPU pods + {args.pods} other pods; "
        f"NodeList {size / 2**20:.1f} MiB ({size / args.nodes / 1024:.1f} KiB a node); "
        f"loaded in {time.perf_counter() - t:.1f}s"
    )
    print(f"python {sys.version.split()[0]}, client processes measured one at a time\n")
    header = [
        "variant       ",
        "first snapshot s",
        "client CPU s",
        "RSS before->peak MiB",
        "traced peak MiB",
        "retained MiB",
    ]
    print("  ".join(header))

    def measure(variant: str, *extra: str) -> dict[str, Any]:
        proc = _child(
            "--client", variant, "--kubeconfig", kubeconfig, "--nodes", str(args.nodes), *extra
        )
        stdout, _ = proc.communicate(timeout=600)
        if proc.returncode:
            raise SystemExit(f"{variant} failed")
        result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        return result

    for variant in args.variants.split(","):
        plain, traced = measure(variant), measure(variant, "--trace")
        row = [
            variant,
            f"{plain['first_snapshot_s']:.3f}",
            f"{plain['cpu_s']:.2f}",
            f"{plain['rss_before_mib']:.0f}->{plain['rss_peak_mib']:.0f}",
            f"{traced['traced_peak_mib']:.1f}",
            f"{traced['retained_mib']:.1f}",
        ]
        print(
            "  ".join(
                f"{c:>{len(h)}}" if i else f"{c:<{len(h)}}"
                for i, (c, h) in enumerate(zip(row, header, strict=True))
            ),
            flush=True,
        )

    # Steady state: one source, changes made on the server, seen in snapshots.
    client = _child(
        "--client", "source", "--kubeconfig", kubeconfig, "--nodes", str(args.nodes), "--steady"
    )
    assert client.stdin is not None and client.stdout is not None
    _expect(client.stdout, "SYNCED")
    latencies = []
    for i in range(args.changes):
        node = f"gpu-{(i * 37) % args.nodes:05d}"
        server.stdin.write(f"label {node} bench/change v{i}\n")
        server.stdin.flush()
        (done,) = _expect(server.stdout, "DONE")
        client.stdin.write(f"expect {node} bench/change v{i}\n")
        client.stdin.flush()
        seen, _ = _expect(client.stdout, "SEEN")
        latencies.append(float(seen) - float(done))
    latencies.sort()
    print(
        f"\none label change -> snapshot ({args.changes} changes, debounce 50 ms): "
        f"median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms"
    )
    server.stdin.write("relabel bench/burst all\n")
    server.stdin.flush()
    client.stdin.write("expect * bench/burst all\n")
    client.stdin.flush()
    start, end = map(float, _expect(server.stdout, "DONE"))
    seen, count = _expect(client.stdout, "SEEN")
    print(
        f"relabel of all {args.nodes} nodes ({args.nodes} MODIFIED events over "
        f"{end - start:.2f}s on the server): last change -> snapshot "
        f"{(float(seen) - end) * 1000:.0f} ms, {count} snapshots published"
    )
    client.stdin.write("end\n")
    client.stdin.flush()
    client.communicate(timeout=60)
    server.stdin.write("quit\n")
    server.stdin.flush()
    server.wait(30)


if __name__ == "__main__":
    main()
