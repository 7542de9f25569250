"""CEL selector benchmark: a DeviceClass selector plus a request selector over 4,000 devices.

500 nodes x 8 GPUs of four kinds, the way NVIDIA's DRA driver publishes them. Each round parses
the ResourceSlices afresh (so nothing is remembered on the devices) and evaluates the class
selector and the request's selector on every device, as ``DraSnapshot.select`` does for a claim:
with the current ``dra.Selectors`` (webhook/policy/selectors/ underneath, its compile
cache cleared each round) and, in the same run, with ``dra.Selectors`` as it was before
(``webhook/policy/dra.py`` of ``--baseline``, default ``46d9e72``, the last commit before it,
loaded from git into a temporary module). Printed per selector pair: the median milliseconds
per round of each, and the ratio. Parsing is not timed.

    .venv/bin/python -m bench.cel_selectors [--rounds 7] [--baseline 46d9e72]

(Not ``bench/cel.py``: a module named like the ``cel`` package it measures reads as that package.)
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from webhook.policy import dra
from webhook.policy import selectors as new_cel

CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
PAIRS = {
    "literal reads": (
        CLASS,
        "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100') && "
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    ),
    "whole device (cel.bind)": (
        CLASS,
        "cel.bind(g, device.attributes['gpu.nvidia.com'], g.index < 4 && "
        "g.driverVersion.isGreaterThan(semver('550.0.0')))",
    ),
}
PRODUCTS = [
    ("NVIDIA A100-SXM4-80GB", "80Gi"),
    ("NVIDIA A100-SXM4-40GB", "40Gi"),
    ("NVIDIA H100 80GB HBM3", "80Gi"),
    ("NVIDIA L4", "24Gi"),
]


def slices(nodes: int = 500, per_node: int = 8) -> list[dict[str, Any]]:
    """One ResourceSlice per node, ``per_node`` GPUs each, the product by node."""
    out = []
    for node in range(nodes):
        product, memory = PRODUCTS[node % len(PRODUCTS)]
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": i},
                    "productName": {"string": product},
                    "driverVersion": {"version": "550.54.15"},
                    "uuid": {"string": f"GPU-{node:04d}-{i}"},
                },
                "capacity": {"memory": {"value": memory}},
            }
            for i in range(per_node)
        ]
        out.append(
            {
                "metadata": {"name": f"node-{node}-gpu"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "pool": {"name": f"node-{node}"},
                    "nodeName": f"node-{node}",
                    "devices": devices,
                },
            }
        )
    return out


def baseline_module(rev: str) -> ModuleType:
    """``webhook/policy/dra.py`` at ``rev``, imported as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{rev}:webhook/policy/dra.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "dra_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("dra_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dra_baseline"] = module
    spec.loader.exec_module(module)
    return module


def one_round(module: ModuleType, raw: list[dict[str, Any]], pair: tuple[str, str]) -> float:
    """Milliseconds to select over every device of ``raw`` with fresh devices and caches."""
    devices = [d for s in raw for d in module.parse_resource_slice(s)[0]]
    if module is dra:
        new_cel.clear_cache()
    selectors = module.Selectors()
    start = time.perf_counter()
    chosen = sum(1 for d in devices if selectors.matches(d, pair).matched)
    elapsed = (time.perf_counter() - start) * 1000
    assert chosen > 0
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", default="46d9e72")
    args = parser.parse_args()
    old = baseline_module(args.baseline)
    raw = slices()
    count = sum(len(s["spec"]["devices"]) for s in raw)
    print(f"{count} devices; class + request selector; median of {args.rounds} rounds")
    print(f"{'selectors':26} {'before ms':>10} {'now ms':>10} {'now/before':>11}")
    for name, pair in PAIRS.items():
        before = statistics.median(one_round(old, raw, pair) for _ in range(args.rounds))
        now = statistics.median(one_round(dra, raw, pair) for _ in range(args.rounds))
        print(f"{name:26} {before:10.2f} {now:10.2f} {now / before:11.2f}")


if __name__ == "__main__":
    main()
