"""Benchmark: the one allocator's verdict for one pod review, on 500 nodes x 8 GPUs.

Three clusters of ``--nodes`` nodes with 8 A100s each: GPUs advertised by the device plugin
(``nvidia.com/gpu: 8``), GPUs published as ResourceSlices by NVIDIA's DRA driver (DeviceClass
``gpu.nvidia.com`` serving ``nvidia.com/gpu``, examples/clusters/dra-a100), and half of each
(mixed). For each: the time to read the supply (parse the slices, one node group per node),
the first review on it (which tells the node groups apart, once per supply), then
``fit_anywhere`` for a pod asking ``nvidia.com/gpu: 1`` (fits), one asking 9 (fits
nowhere: every node group is judged) and, on DRA, a claim of 2 GPUs with a CEL selector and a
``matchAttribute`` constraint. A fourth cluster, ``parts``, has 8 partitionable GPUs a
node as NVIDIA's driver publishes them (a whole device and two MIG halves, one counter set a
GPU: ``partitionable`` of tests/objects/dra.py), and a claim of several
requests on it: a whole GPU and two MIG devices (fits), and 8 whole GPUs and one MIG device
(fits nowhere: the whole GPUs use up every counter set). There ``plain`` against ``pruned`` is
the cost, or the gain, of pruning rule 4 (docs/allocator.md, "Pruning"), which only claims of
several requests on partitionable devices pay for; the old engine did not read counters.

Three columns, measured in the same run: ``plain``, the port of the scheduler's search alone
(``prune=False``); ``pruned``, with the counting before the search (the default,
docs/allocator.md, "Pruning"); ``old``, the engine before the allocator (commit 46d9e72,
exported with ``git archive`` and run in a child process on the same cluster): its
``review`` of the same pod, and its inventory build beside the supply read. p50 and p99 in
microseconds (the supply read and the old inventory build in milliseconds); figures to read,
not assertions.

    .venv/bin/python -m bench.allocator
    .venv/bin/python -m bench.allocator --nodes 100 --repeat 200
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.figures import measure
from tests.objects import (
    device_class,
    exactly,
    gpu,
    node_object,
    partitionable,
    pod,
    resource_claim,
)

ROOT = Path(__file__).resolve().parent.parent

GPUS = 8


def cluster(nodes: int, kind: str) -> list[dict[str, Any]]:
    """Node, DeviceClass and ResourceSlice objects: ``plugin``, ``dra`` or ``mixed``."""
    from bench.dra import objects  # the clusters of bench/dra.py, one recipe for both

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


def partition_cluster(nodes: int) -> list[dict[str, Any]]:
    """``nodes`` nodes of ``GPUS`` partitionable GPUs each, and the DeviceClass."""
    out = [device_class("gpu.nvidia.com", driver="gpu.nvidia.com")]
    for i in range(nodes):
        name = f"part-{i:04d}"
        out.append(node_object(name, gpus=None))
        out.extend(partitionable(GPUS, node=name))
    return out


WHOLE = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
PART = 'device.attributes["gpu.nvidia.com"].type == "mig"'


def parts_claim(whole: int, parts: int) -> dict[str, Any]:
    """A claim of two requests: ``whole`` whole GPUs and ``parts`` MIG devices."""
    return resource_claim(
        f"whole-{whole}-mig-{parts}",
        exactly(count=whole, selectors=[WHOLE]),
        exactly(name="mig", count=parts, selectors=[PART]),
    )


def gpu_pod(count: int) -> dict[str, Any]:
    """A pod of one container asking for ``count`` device-plugin GPUs."""
    return pod(gpu(count), name=f"gpu-{count}")


#: A claim of 2 GPUs of 40Gi or more, of one product.
PAIR = resource_claim(
    "pair",
    exactly(
        name="gpus",
        count=2,
        selectors=['device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'],
    ),
    constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}],
)


OLD_COMMIT = "46d9e72"  # main before the allocator: the engine's own review

# Run by the child process, with the old tree first on the import path (PYTHONPATH): the old
# engine's inventory build and review of each pod, on the clusters the parent wrote.
OLD_SCRIPT = """
import gc, json, statistics, sys, time
from webhook.files import load_policy
from webhook.policy import inventory_from_nodes, review
from webhook.policy.dra import dra_snapshot
work = json.load(open(sys.argv[1]))
policy = load_policy(sys.argv[2])
out = {}
for kind, objs in work["clusters"].items():
    nodes = [o for o in objs if o["kind"] == "Node"]
    classes = [o for o in objs if o["kind"] == "DeviceClass"]
    slices = [o for o in objs if o["kind"] == "ResourceSlice"]
    gc.collect()
    t = time.perf_counter()
    snapshot = dra_snapshot(classes, slices) if slices else None
    inventory = inventory_from_nodes(nodes, policy, source="bench", dra=snapshot)
    out[kind + "/build"] = (time.perf_counter() - t) * 1000
    for label, pod in work["pods"]:
        times = []
        for _ in range(work["repeat"]):
            t = time.perf_counter()
            review(pod, policy=policy, inventory=inventory)
            times.append((time.perf_counter() - t) * 1e6)
        out[kind + "/" + label] = statistics.median(times)
print(json.dumps(out))
"""


def old_engine(
    clusters: dict[str, list[dict[str, Any]]],
    pods: list[tuple[str, dict[str, Any]]],
    repeat: int,
) -> dict[str, float]:
    """The old engine's figures, by ``<cluster>/build`` and ``<cluster>/<review>``; empty
    when commit 46d9e72 cannot be exported (no git history)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", OLD_COMMIT, "webhook", "examples/clusters"],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            print(f"(old engine: cannot export {OLD_COMMIT}: {archive.stderr.decode().strip()})")
            return {}
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        work = Path(tmp, "work.json")
        work.write_text(json.dumps({"clusters": clusters, "pods": pods, "repeat": repeat}))
        policy = Path(tmp, "examples/clusters/dra-a100/policy.yaml")
        child = subprocess.run(
            [sys.executable, "-c", OLD_SCRIPT, str(work), str(policy)],
            capture_output=True,
            check=False,
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": tmp},
            text=True,
        )
        if child.returncode != 0:
            print(f"(old engine failed: {child.stderr.strip().splitlines()[-1:]})")
            return {}
        return dict(json.loads(child.stdout))


def timed_ms(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the milliseconds it took, from a collected heap (so that garbage left
    by what ran before is not collected in the time measured)."""
    gc.collect()
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()

    from tests.core.policy.allocator.world import demand_of, supply_of
    from webhook.policy.allocator import fit_anywhere

    clusters = {kind: cluster(args.nodes, kind) for kind in ("plugin", "dra", "mixed")}
    old_pods = [("gpu: 1", gpu_pod(1)), ("gpu: 9", gpu_pod(GPUS + 1))]
    old = old_engine(clusters, old_pods, args.repeat)
    clusters["parts"] = partition_cluster(args.nodes)
    kinds = tuple(clusters)

    print(f"{args.nodes} nodes x {GPUS} GPUs, {args.repeat} reviews each; microseconds")
    print(
        f"{'cluster':<8}{'review':<19}{'plain p50':>10}{'p99':>8}{'pruned p50':>11}{'p99':>8}"
        f"{'old p50':>9}  verdict"
    )
    for kind in kinds:
        objs = clusters[kind]
        supply, read_ms = timed_ms(lambda o=objs: supply_of(o))
        build = old.get(f"{kind}/build")
        old_build = "-" if build is None else f"{build:.0f} ms"
        print(
            f"{kind:<8}{'supply read':<19}{read_ms:>9.0f} ms{'':>8}{'':>11}{'':>8}"
            f"{old_build:>9}  (old: inventory build)"
        )
        first, first_ms = timed_ms(lambda s=supply: fit_anywhere(demand_of([gpu_pod(1)]), s))
        blank = f"{'':>8}{'':>19}{'':>9}"
        print(f"{'':<8}{'first review':<19}{first_ms * 1000:>10.0f}{blank}  {first.outcome}")
        reviews: list[tuple[str, list[dict[str, Any]]]] = [
            ("gpu: 1", [gpu_pod(1)]),
            ("gpu: 9", [gpu_pod(GPUS + 1)]),
        ]
        if kind in ("dra", "mixed"):
            reviews.append(("claim 2, sel+cons", [PAIR]))
        if kind == "parts":
            reviews = [
                ("claim 1 gpu+2 mig", [parts_claim(1, 2)]),
                (f"claim {GPUS} gpu+1 mig", [parts_claim(GPUS, 1)]),
            ]
        for label, docs in reviews:
            demand = demand_of(docs)
            answers = {fit_anywhere(demand, supply, prune=p).outcome for p in (False, True)}
            plain = measure(lambda d=demand, s=supply: fit_anywhere(d, s, prune=False), args.repeat)
            pruned = measure(lambda d=demand, s=supply: fit_anywhere(d, s), args.repeat)
            found = old.get(f"{kind}/{label}")
            old_p50 = "-" if found is None else f"{found:.0f}"
            print(
                f"{'':<8}{label:<19}{plain[0]:>10.0f}{plain[1]:>8.0f}{pruned[0]:>11.0f}"
                f"{pruned[1]:>8.0f}{old_p50:>9}  {' / '.join(sorted(answers))}"
            )


if __name__ == "__main__":
    main()
