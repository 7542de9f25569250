"""Benchmark: the one allocator's verdict for one pod review, on 500 nodes x 8 GPUs.

Three clusters of ``--nodes`` nodes with 8 A100s each: GPUs advertised by the device plugin
(``nvidia.com/gpu: 8``), GPUs published as ResourceSlices by NVIDIA's DRA driver (DeviceClass
``gpu.nvidia.com`` serving ``nvidia.com/gpu``, examples/clusters/dra-a100), and half of each
(mixed). For each: the time to read the supply (parse the slices, one node group per node),
the first review on it (which tells the node groups apart, once per supply), then
``fit_anywhere`` for a pod asking ``nvidia.com/gpu: 1`` (fits), one asking 9 (fits
nowhere: every node group is judged) and, on DRA, a claim of 2 GPUs with a CEL selector and a
``matchAttribute`` constraint. Baseline in the same run: the previous engine's ``review`` of the
same pod on the same cluster. p50 and p99 in microseconds; figures to read, not assertions.

    .venv/bin/python bench/allocator.py
    .venv/bin/python bench/allocator.py --nodes 100 --repeat 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

GPUS = 8


def cluster(nodes: int, kind: str) -> list[dict[str, Any]]:
    """Node, DeviceClass and ResourceSlice objects: ``plugin``, ``dra`` or ``mixed``."""
    sys.path.insert(0, str(ROOT / "bench"))
    from dra import objects  # the clusters of bench/dra.py, one recipe for both

    if kind == "mixed":
        half = nodes // 2
        plugin, _, _ = objects(half, dra=False)
        dra_nodes, classes, slices = objects(nodes - half, dra=True)
        for obj in plugin:
            obj["metadata"]["name"] += "-dp"
            obj["metadata"]["labels"]["kubernetes.io/hostname"] += "-dp"
        return [*plugin, *dra_nodes, *classes, *slices]
    found, classes, slices = objects(nodes, dra=kind == "dra")
    return [*found, *classes, *slices]


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """p50 and p99 of ``fn`` in microseconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def gpu_pod(count: int) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": count}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"gpu-{count}", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": resources}]},
    }


PAIR = {
    "kind": "ResourceClaim",
    "metadata": {"name": "pair"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 2,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": 'device.capacity["gpu.nvidia.com"].memory'
                                    '.compareTo(quantity("40Gi")) >= 0'
                                }
                            }
                        ],
                    },
                }
            ],
            "constraints": [{"matchAttribute": "gpu.nvidia.com/productName"}],
        }
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()

    from tests.policy.allocator.world import demand_of, supply_of
    from webhook.files import load_policy
    from webhook.policy import inventory_from_nodes, review
    from webhook.policy.allocator import fit_anywhere
    from webhook.policy.dra import dra_snapshot

    policy = load_policy(ROOT / "examples/clusters/dra-a100/policy.yaml")
    print(f"{args.nodes} nodes x {GPUS} GPUs, {args.repeat} reviews each; microseconds")
    header = f"{'cluster':<8}{'review':<16}{'p50':>9}{'p99':>9}{'old p50':>10}  verdict"
    print(f"{'':<8}{'supply read ms':<16}")
    print(header)
    for kind in ("plugin", "dra", "mixed"):
        objs = cluster(args.nodes, kind)
        t = time.perf_counter()
        supply = supply_of(objs)
        read_ms = (time.perf_counter() - t) * 1000
        nodes = [o for o in objs if o["kind"] == "Node"]
        classes = [o for o in objs if o["kind"] == "DeviceClass"]
        slices = [o for o in objs if o["kind"] == "ResourceSlice"]
        snapshot = dra_snapshot(classes, slices) if slices else None
        inventory = inventory_from_nodes(nodes, policy, source="bench", dra=snapshot)
        print(f"{kind:<8}{read_ms:<16.1f}")
        t = time.perf_counter()
        first = fit_anywhere(demand_of([gpu_pod(1)]), supply)
        print(
            f"{'':<8}{'first review':<16}{(time.perf_counter() - t) * 1e6:>9.0f}{'':>9}{'':>10}"
            f"  {first.outcome}"
        )
        reviews: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = [
            ("gpu: 1", [gpu_pod(1)], gpu_pod(1)),
            ("gpu: 9", [gpu_pod(GPUS + 1)], gpu_pod(GPUS + 1)),
        ]
        if kind != "plugin":
            reviews.append(("claim 2, sel+cons", [PAIR], None))
        for label, docs, old_doc in reviews:
            demand = demand_of(docs)
            answer = fit_anywhere(demand, supply)
            p50, p99 = measure(lambda d=demand, s=supply: fit_anywhere(d, s), args.repeat)
            old = "-"
            if old_doc is not None:
                old_p50, _ = measure(
                    lambda d=old_doc, i=inventory: review(d, policy=policy, inventory=i),
                    args.repeat,
                )
                old = f"{old_p50:.0f}"
            print(f"{'':<8}{label:<16}{p50:>9.0f}{p99:>9.0f}{old:>10}  {answer.outcome}")


if __name__ == "__main__":
    main()
