"""Benchmark: the cost of DRA in the inventory, with a device-plugin baseline in the same run.

Two parts:

* **core** (always): ``--nodes`` nodes with 8 GPUs each, once published as ResourceSlices
  (8 devices each, as NVIDIA's DRA driver publishes them, with DeviceClass gpu.nvidia.com
  serving ``nvidia.com/gpu``) and once advertised by the device plugin (``nvidia.com/gpu: 8``
  in allocatable, the baseline). For each: the time to build the inventory from the objects
  (what every new cluster snapshot costs: parsing, CEL over every device, pools), the memory
  it keeps (tracemalloc), and the time of one review of a pod asking for ``nvidia.com/gpu: 1``
  and of one asking for more than a node has.
* **watch** (with ``KUBEBUILDER_ASSETS``, the real control plane of tests/support): the same
  Nodes and ResourceSlices created in a real API server, then ``ClusterSource`` started in a
  fresh process, with ``dra="off"`` (the baseline: Nodes only) and ``dra="auto"`` (Nodes,
  DeviceClasses, ResourceSlices): time to the first snapshot, CPU seconds, peak RSS and the
  Python memory the snapshot keeps.

    .venv/bin/python -m bench.dra                 # 500 nodes x 8 GPUs, both parts
    .venv/bin/python -m bench.dra --nodes 100 --no-watch

Figures to read, not assertions.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

GPUS = 8


def objects(
    nodes: int, *, dra: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, device classes, resource slices): GPUs as DRA devices, or in allocatable."""
    from webhook.files import cluster_from_text

    example = cluster_from_text(
        (ROOT / "examples/clusters/dra-a100/nodes.yaml").read_text(), source="dra-a100"
    )
    classes = example.by_kind["DeviceClass"]
    template = example.by_kind["ResourceSlice"][0]
    out_nodes, slices = [], []
    for i in range(nodes):
        name = f"gpu-node-{i:04d}"
        allocatable = {"cpu": "96", "memory": "1Ti", "pods": "110"}
        labels = {"kubernetes.io/hostname": name}
        if not dra:
            allocatable["nvidia.com/gpu"] = str(GPUS)
            labels |= {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.count": str(GPUS),
            }
        out_nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
            }
        )
        if dra:
            rslice = json.loads(json.dumps(template))
            rslice["metadata"] = {"name": f"{name}-gpu.nvidia.com"}
            rslice["spec"]["nodeName"] = name
            rslice["spec"]["pool"]["name"] = name
            for device in rslice["spec"]["devices"]:
                device["attributes"]["uuid"]["string"] = f"GPU-{i:04d}-{device['name']}"
            slices.append(rslice)
    return out_nodes, (classes if dra else []), slices


def _best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def core(nodes: int) -> None:
    from tests.objects import gpu, pod
    from webhook.files import load_policy
    from webhook.policy import inventory_from_nodes, review
    from webhook.policy.dra import dra_snapshot

    policy = load_policy(ROOT / "examples/clusters/dra-a100/policy.yaml")
    print(f"core: {nodes} nodes x {GPUS} GPUs")
    print(
        f"{'inventory':<22}{'build ms':>10}{'rebuild ms':>12}{'kept KiB':>10}"
        f"{'review us':>11}{'refuse us':>11}"
    )
    for label, dra in (("device plugin (base)", False), ("DRA ResourceSlices", True)):
        node_objs, classes, slices = objects(nodes, dra=dra)

        def build(
            node_objs=node_objs, classes=classes, slices=slices, dra=dra, previous=None
        ) -> Any:
            snapshot = dra_snapshot(classes, slices, previous=previous) if dra else None
            return inventory_from_nodes(node_objs, policy, source="bench", dra=snapshot)

        build_s = _best(build, 3)
        # What a new cluster snapshot costs when no ResourceSlice changed (a Node label did):
        # built from the previous one, as the live view does.
        first = build()
        rebuild_s = _best(lambda build=build, first=first: build(previous=first.dra), 3)
        gc.collect()
        tracemalloc.start()
        kept = build()
        kept_kib = tracemalloc.get_traced_memory()[0] / 1024
        tracemalloc.stop()
        one, many = pod(gpu(1)), pod(gpu(GPUS + 1))
        assert review(one, policy=policy, inventory=kept).allowed
        assert not review(many, policy=policy, inventory=kept).allowed
        per = []
        for doc in (one, many):
            n = 2000
            t = time.perf_counter()
            for _ in range(n):
                review(doc, policy=policy, inventory=kept)
            per.append((time.perf_counter() - t) / n * 1e6)
        print(
            f"{label:<22}{build_s * 1000:>10.1f}{rebuild_s * 1000:>12.1f}{kept_kib:>10.0f}"
            f"{per[0]:>11.1f}{per[1]:>11.1f}"
        )


# --------------------------------------------------------------------------- the watch


def watch_child(kubeconfig: str, dra: str) -> None:
    """Child process: one ClusterSource until its first snapshot; print the figures."""
    from webhook.kube import ClusterSource, load_client

    api = load_client(kubeconfig)
    cpu0, t0 = time.process_time(), time.perf_counter()
    source = ClusterSource(api, configmap=None, watch_pods=False, dra=dra).start()
    assert source.wait_synced(300)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    state = source.current
    assert state is not None
    source.stop()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The memory the snapshot keeps: measured once more under tracemalloc.
    gc.collect()
    tracemalloc.start()
    source = ClusterSource(api, configmap=None, watch_pods=False, dra=dra).start()
    assert source.wait_synced(300)
    kept = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    result = {
        "seconds": seconds,
        "cpu": cpu,
        "rss_mib": rss_mib,
        "kept_mib": kept,
        "nodes": len(state.nodes),
        "slices": len(state.resource_slices),
        "dra": state.dra,
    }
    source.stop()
    print(json.dumps(result))


def watch(nodes: int) -> None:
    from kubernetes import client

    from tests.support.controlplane import ControlPlane, assets_dir, create_node

    assets = assets_dir()
    if assets is None:
        print("watch: skipped (set KUBEBUILDER_ASSETS for the real control plane)")
        return
    plane = ControlPlane(assets=assets, workdir=Path(tempfile.mkdtemp(prefix="bench-dra-")))
    plane.start()
    try:
        node_objs, classes, slices = objects(nodes, dra=True)
        t = time.perf_counter()
        for node in node_objs:
            create_node(plane, node)
        for obj in classes + slices:
            body = dict(obj)
            body["metadata"] = {"name": obj["metadata"]["name"]}
            plane.create(body)
        print(
            f"watch: {nodes} Nodes and {len(slices)} ResourceSlices of {GPUS} GPUs created in "
            f"the v1.36.2 API server in {time.perf_counter() - t:.0f} s"
        )
        client.CoreV1Api(plane.client)  # the admin client is ready
        header = f"{'ClusterSource':<30}{'first snapshot s':>17}{'CPU s':>8}{'peak RSS MiB':>14}"
        print(header + f"{'kept MiB':>10}")
        for label, dra in (("dra=off: Nodes (baseline)", "off"), ("dra=auto: + DRA kinds", "auto")):
            runs = []
            for _ in range(3):
                out = subprocess.run(
                    [sys.executable, "-m", "bench.dra", "--child", str(plane.kubeconfig), dra],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            med = {
                k: statistics.median(r[k] for r in runs)
                for k in ("seconds", "cpu", "rss_mib", "kept_mib")
            }
            first = runs[0]
            print(
                f"{label:<30}{med['seconds']:>17.2f}{med['cpu']:>8.2f}{med['rss_mib']:>14.0f}"
                f"{med['kept_mib']:>10.1f}   ({first['nodes']} nodes, {first['slices']} "
                f"slices; {first['dra']})"
            )
    finally:
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--no-watch", action="store_true", help="skip the real control plane part")
    parser.add_argument("--child", nargs=2, metavar=("KUBECONFIG", "DRA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        watch_child(*args.child)
        return
    core(args.nodes)
    if not args.no_watch:
        watch(args.nodes)


if __name__ == "__main__":
    main()
