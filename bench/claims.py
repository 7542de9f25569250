"""Claim review benchmark: the cost of judging a DRA claim, beside a pod review in the same run.

``review()`` of a ResourceClaimTemplate runs the claim rules (class, admin access, sharing) and
the allocator's verdict on the supply the inventory was assembled with (``assemble()``, as the
server and ``gpu-policy review`` build it), and words a refusal from the allocator's
explanation. The first review of a claim on a snapshot compiles its selectors and tells the
node groups apart: it is timed apart ("first us"). Printed per case: reviews per second and
microseconds per review, for clusters of 8, 64 and 512 GPU devices (8 per node), with the
baseline of a 2-container device-plugin GPU pod reviewed against the same inventory in the
same run, and the ratio.

``--before REV`` runs the same cases, in the same run, on the ``webhook`` package of commit
``REV`` (exported with ``git archive``, in a child process), and prints its figures first.

    .venv/bin/python -m bench.claims [--seconds 2] [--before main]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.files import load_policy
from webhook.policy import review
from webhook.policy.supply.assemble import DraObjects, assemble

ROOT = Path(__file__).resolve().parent.parent

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


def before(rev: str, seconds: float) -> None:
    """The same cases on the ``webhook`` package of commit ``rev``, in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "webhook"], capture_output=True, check=False
        )
        if archive.returncode != 0:
            print(f"(before: cannot export {rev}: {archive.stderr.decode().strip()})")
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        # This tree's bench, that commit's webhook: its directory comes first on the path.
        code = f"import sys; sys.path[:0] = [{tmp!r}, {str(ROOT)!r}]; import bench.claims as b; "
        code += f"b.run({seconds!r}, {rev!r})"
        child = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": tmp},
            check=False,
        )
        if child.returncode != 0:
            print(f"(before: {rev} failed)")


SELECTOR = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"
ABSENT = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H200')"
CASES = [
    ("1 GPU, no selector", template(1, [])),
    ("4 GPUs, 1 CEL selector", template(4, [SELECTOR])),
    ("9 GPUs (refused)", template(9, [])),
    ("no device matches (ref.)", template(1, [ABSENT])),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--before", metavar="REV", help="also run the webhook of commit REV")
    args = parser.parse_args()
    if args.before:
        before(args.before, args.seconds)
    run(args.seconds, "this tree")


def run(seconds: float, label: str) -> None:
    """Print the figures of every case, with the webhook package imported (``label``)."""
    policy = load_policy(None)
    print(f"{label} ({Path(sys.modules['webhook'].__file__ or '').parent})")
    print(
        f"{'devices':>7} {'case':24} {'first us':>9} {'reviews/s':>10} {'us/review':>10} "
        f"{'pod reviews/s':>14} {'ratio':>6}  verdict"
    )
    for devices in (8, 64, 512):
        classes, slices = cluster(devices)
        dra = DraObjects(classes, slices)
        inventory = assemble(policy, nodes=None, source="bench", dra=dra)

        def one_pod(inv: Any = inventory, obj: dict[str, Any] = BASELINE_POD) -> None:
            review(obj, policy=policy, inventory=inv)

        baseline = rate(one_pod, seconds)
        for case, obj in CASES:

            def one(obj: dict[str, Any] = obj, inv: Any = inventory) -> None:
                review(obj, policy=policy, inventory=inv)

            start = time.perf_counter()
            verdict = review(obj, policy=policy, inventory=inventory)
            first = (time.perf_counter() - start) * 1e6
            reviews = rate(one, seconds)
            print(
                f"{devices:7} {case:24} {first:9,.0f} {reviews:10,.0f} {1e6 / reviews:10.1f} "
                f"{baseline:14,.0f} {reviews / baseline:6.2f}  "
                f"{'allowed' if verdict.allowed else 'denied'}"
            )


if __name__ == "__main__":
    main()
