"""Benchmark: what the dual-published guard adds to a review, and what a migration plan costs.

* **guard**: ``--nodes`` DRA-only nodes of 8 H100s each (ResourceSlices as NVIDIA's driver
  publishes them) plus one dual-published node; a pod whose claim asks for one GPU is reviewed
  with ``spec.dra.dualPublishedNodes`` ``warn`` and ``avoid``, and, as the baseline in the same
  run, on the same cluster without the dual node (the guard finds nothing and adds nothing).
* **plan**: ``gpu-policy migrate plan``'s core on examples/clusters/migrate-three-kinds, its
  nodes and pods copied ``--copies`` times (so 5 x copies GPU nodes, 10 x copies pods).

    .venv/bin/python -m bench.migrate
    .venv/bin/python -m bench.migrate --nodes 1000 --copies 4

Figures to read, not assertions.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.objects import claim_template, dra_gpu, exactly, resource_slice
from webhook.files import cluster_from_text, kubernetes_objects, load_policy, read_text
from webhook.planning.migrate import make_migration
from webhook.policy import review
from webhook.policy.supply.assemble import DraObjects, assemble

ROOT = Path(__file__).resolve().parent.parent

DUAL = ROOT / "examples" / "clusters" / "dual-published"
THREE = ROOT / "examples" / "clusters" / "migrate-three-kinds"


def _median_ms(call: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _node(name: str, gpus: int) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }


def guard(nodes: int, repeat: int) -> None:
    """Review time of a one-GPU claim pod: no dual node (baseline), warn, avoid."""
    base = load_policy(str(DUAL / "policy.yaml"))
    gpu_class = cluster_from_text(read_text(str(DUAL / "nodes.yaml")), source="d").by_kind[
        "DeviceClass"
    ]
    devices = [dra_gpu(i, product="NVIDIA H100 80GB HBM3") for i in range(8)]
    plain = [_node(f"dra-{i}", 0) for i in range(nodes)]
    slices = [resource_slice(n["metadata"]["name"], *devices) for n in plain]
    template = claim_template("one-gpu", exactly(count=1), namespace="ml")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    print(f"guard: {nodes} DRA-only nodes x 8 GPUs, median of {repeat} reviews")
    for label, dual, mode in (
        ("no dual node (baseline)", False, "avoid"),
        ("one dual node, warn", True, "warn"),
        ("one dual node, avoid", True, "avoid"),
    ):
        policy = replace(base, dra=replace(base.dra, dual_published_nodes=mode))
        all_nodes = [*plain, _node("dual", 8)] if dual else plain
        all_slices = [*slices, resource_slice("dual", *devices)] if dual else slices
        inventory = assemble(
            policy,
            nodes=all_nodes,
            source="bench",
            dra=DraObjects(gpu_class, all_slices, (), [template]),
        )
        ms = _median_ms(lambda p=policy, i=inventory: review(pod, policy=p, inventory=i), repeat)
        print(f"  {label:28} {ms:8.2f} ms")


def plan(copies: int) -> None:
    """Time of make_migration on the three-kinds example copied ``copies`` times."""
    policy = load_policy(str(THREE / "policy.yaml"))
    nodes0 = cluster_from_text(read_text(str(THREE / "nodes.yaml")), source="n").nodes
    objects0 = [
        d.value for d in kubernetes_objects(read_text(str(THREE / "workloads.yaml")), source="w")
    ]
    nodes, pods = [], []
    for c in range(copies):
        for node in nodes0:
            n = copy.deepcopy(node)
            n["metadata"]["name"] = f"{node['metadata']['name']}-{c}"
            nodes.append(n)
        for obj in objects0:
            if obj["kind"] == "Pod":
                p = copy.deepcopy(obj)
                p["metadata"]["name"] = f"{obj['metadata']['name']}-{c}"
                p["spec"]["nodeName"] = f"{obj['spec']['nodeName']}-{c}"
                pods.append(p)

    def supply_of(state: Any, extra: Any) -> Any:
        kinds = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
        dra = DraObjects(*([o for o in extra if o["kind"] == k] for k in kinds))
        return assemble(policy, nodes=state, source="plan", dra=dra).supply

    inventory = assemble(policy, nodes=nodes, source="bench")
    start = time.perf_counter()
    migration = make_migration(inventory, nodes, pods, [], supply_of, {})
    took = time.perf_counter() - start
    print(
        f"plan: {len(nodes)} GPU nodes, {len(pods)} pods: {took:.2f} s "
        f"({len(migration.steps)} steps, {len(migration.lost)} pods no longer fit)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--copies", type=int, default=2)
    args = parser.parse_args()
    guard(args.nodes, args.repeat)
    plan(args.copies)


if __name__ == "__main__":
    main()
