"""Engine benchmark: reviews per second of ``review()`` on one core, no server involved.

Prints, for pods of 1, 2, 4 and 16 containers (one in two asking for a GPU) and for a pod that
asks for no GPU, the reviews per second and microseconds per review, plus the baseline of a
bare ``json.loads`` of the same pod measured in the same run, so that figures from a noisy
machine can still be compared. Target: >= 10,000 reviews/s for a 2-container GPU pod.

    .venv/bin/python -m bench.engine [--seconds 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from typing import Any

from webhook.files import load_policy
from webhook.policy import Inventory, inventory_from_nodes, inventory_from_policy, review
from webhook.policy.supply.assemble import assemble


def make_pod(containers: int, *, gpu: bool = True) -> dict[str, Any]:
    """A realistic pod: env, ports, probes, volume mounts; every other container asks a GPU."""
    spec_containers = []
    for i in range(containers):
        limits: dict[str, Any] = {"cpu": "2", "memory": "8Gi"}
        if gpu and i % 2 == 0:
            limits["nvidia.com/gpu"] = 1
        spec_containers.append(
            {
                "name": f"c{i}",
                "image": "registry.example/inference:1.4.2",
                "args": ["--port", "8080", "--model", "/models/m"],
                "env": [{"name": f"VAR_{j}", "value": "x" * 20} for j in range(6)],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": limits, "requests": dict(limits)},
                "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "infer-",
            "namespace": "ml",
            "labels": {"app": "infer", "pod-template-hash": "5cf65846c5"},
        },
        "spec": {
            "containers": spec_containers,
            "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
            "serviceAccountName": "infer",
        },
    }


def gpu_nodes(count: int) -> list[dict[str, Any]]:
    """``count`` GPU nodes as GFD labels them: half L20 x8 shared, half T4 x3 shared."""
    nodes = []
    for i in range(count):
        l20 = i % 2 == 0
        product, replicas, key = ("NVIDIA-L20", 8, "l20") if l20 else ("Tesla-T4", 3, "t4")
        nodes.append(
            {
                "metadata": {
                    "name": f"gpu-{i}",
                    "labels": {
                        "nvidia.com/device-plugin.config": key,
                        "nvidia.com/gpu.product": f"{product}-SHARED",
                        "nvidia.com/gpu.replicas": str(replicas),
                        "nvidia.com/gpu.count": "1",
                        "nvidia.com/gpu.sharing-strategy": "time-slicing",
                    },
                },
                "status": {"allocatable": {"nvidia.com/gpu": str(replicas), "cpu": "32"}},
            }
        )
    return nodes


def rate(func: Callable[[], Any], seconds: float) -> float:
    """Calls per second of ``func`` over about ``seconds``."""
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            func()
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    policy = load_policy(None)
    inventory = inventory_from_policy(policy)
    cases = [(f"{n}-container GPU pod", make_pod(n)) for n in (1, 2, 4, 16)]
    cases.append(("2-container pod, no GPU", make_pod(2, gpu=False)))
    print(f"{'case':28} {'reviews/s':>10} {'us/review':>10} {'json.loads/s':>13} {'ratio':>6}")
    for label, obj in cases:
        raw = json.dumps(obj)
        pristine = copy.deepcopy(obj)

        def one(obj: dict[str, Any] = obj) -> None:
            review(obj, policy=policy, inventory=inventory, operation="CREATE")

        reviews = rate(one, args.seconds)
        baseline = rate(lambda raw=raw: json.loads(raw), args.seconds)
        assert obj == pristine, "review() modified its input"
        print(
            f"{label:28} {reviews:10,.0f} {1e6 / reviews:10.1f} {baseline:13,.0f} "
            f"{reviews / baseline:6.2f}"
        )
    # A review reads pools, not nodes: its cost must not grow with the cluster. "naming only"
    # is the inventory without a supply (the checks before the allocator, the baseline);
    # "with the allocator" adds the verdict of fit_anywhere over the node groups.
    print(
        f"\n{'nodes':>8} {'inventory':22} {'build ms':>10} {'reviews/s':>10} {'us/review':>10}"
        " (2-container GPU pod)"
    )
    obj = make_pod(2)
    for count in (10, 500, 5000):
        nodes = gpu_nodes(count)
        for label in ("naming only", "with the allocator"):
            start = time.perf_counter()
            if label == "naming only":
                inv = inventory_from_nodes(nodes, policy, source="bench")
            else:
                inv = assemble(policy, nodes=nodes, source="bench")
            built = (time.perf_counter() - start) * 1000

            def one_on(inv: Inventory = inv) -> None:
                review(obj, policy=policy, inventory=inv, operation="CREATE")

            per_s = rate(one_on, args.seconds)
            print(f"{count:8,} {label:22} {built:10.1f} {per_s:10,.0f} {1e6 / per_s:10.1f}")


if __name__ == "__main__":
    main()
