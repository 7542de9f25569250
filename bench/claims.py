"""Claim review benchmark: the cost of judging a DRA claim, beside a pod review in the same run.

``review()`` of a ResourceClaimTemplate asks the DRA snapshot which devices its DeviceClass
selects (cached per snapshot) and evaluates the request's own CEL selectors on them (each
expression compiled once per snapshot, evaluated on every device of the class, every review).
The claim rules remember their answers per snapshot (the pods of one template ask the same),
so the first review of a claim pays the CEL and every later one reads the memo: the first is
timed apart ("first us"). Printed per case: reviews per second and microseconds per review,
for clusters of 8, 64 and 512 GPU devices (8 per node), with the baseline of a 2-container
device-plugin GPU pod reviewed against the same inventory in the same run, and the ratio.

    .venv/bin/python -m bench.claims [--seconds 2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from webhook.files import load_policy
from webhook.policy import inventory_from_policy, review
from webhook.policy.dra import dra_snapshot

GPU_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def rate(func: Callable[[], Any], seconds: float) -> float:
    """Calls per second of ``func`` over about ``seconds``."""
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(50):
            func()
        n += 50
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def cluster(devices: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The NVIDIA driver's gpu.nvidia.com class, and ``devices`` A100s, 8 per node."""
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": GPU_CEL}}]},
        }
    ]
    slices = []
    for node in range(devices // 8):
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{node}-gpu.nvidia.com"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": f"node-{node}",
                    "pool": {"name": f"node-{node}", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {
                                "type": {"string": "gpu"},
                                "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                            },
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for i in range(8)
                    ],
                },
            }
        )
    return classes, slices


def template(count: int, selectors: list[str]) -> dict[str, Any]:
    """A ResourceClaimTemplate asking for ``count`` GPUs of gpu.nvidia.com."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod() -> dict[str, Any]:
    """The baseline: a 2-container pod, one container asking for nvidia.com/gpu: 1."""
    containers = [
        {
            "name": f"c{i}",
            "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 1} if i == 0 else {"cpu": "1"}},
        }
        for i in range(2)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": containers},
    }


BASELINE_POD = pod()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    policy = load_policy(None)
    base = inventory_from_policy(policy)
    selector = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
    cases = [
        ("1 GPU, no selector", template(1, [])),
        ("4 GPUs, 1 CEL selector", template(4, [selector])),
        ("9 GPUs (refused)", template(9, [])),
    ]
    print(
        f"{'devices':>7} {'case':24} {'first us':>9} {'reviews/s':>10} {'us/review':>10} "
        f"{'pod reviews/s':>14} {'ratio':>6}"
    )
    for devices in (8, 64, 512):
        classes, slices = cluster(devices)
        inventory = replace(base, dra=dra_snapshot(classes, slices))

        def one_pod(inv: Any = inventory, obj: dict[str, Any] = BASELINE_POD) -> None:
            review(obj, policy=policy, inventory=inv)

        baseline = rate(one_pod, args.seconds)
        for label, obj in cases:

            def one(obj: dict[str, Any] = obj, inv: Any = inventory) -> None:
                review(obj, policy=policy, inventory=inv)

            start = time.perf_counter()
            one()
            first = (time.perf_counter() - start) * 1e6
            reviews = rate(one, args.seconds)
            print(
                f"{devices:7} {label:24} {first:9,.0f} {reviews:10,.0f} {1e6 / reviews:10.1f} "
                f"{baseline:14,.0f} {reviews / baseline:6.2f}"
            )


if __name__ == "__main__":
    main()
