"""Benchmark: what charging a pod its cost (spec.quota.enabled, docs/quota.md) adds to a review.

The bundled example policy and its inventory (L20 time-sliced 8 ways, T4 3 ways, an A100 40GB
in mixed MIG) plus a small DRA snapshot (two A100s, an H100 in MIG devices, an L4 with
consumable shares). For each pod kind: ``review`` with quota off (the baseline, same run) and
on; p50 and p99 in microseconds. Figures to read, not assertions.

    .venv/bin/python -m bench.quota
    .venv/bin/python -m bench.quota --repeat 2000
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from bench.figures import measure

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """Print one line per pod kind: quota off, quota on, and what it adds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=500)
    args = parser.parse_args()

    from tests.objects import (
        claim_template,
        ctr,
        dra_gpu,
        dra_mig,
        exactly,
        gpu,
        nvidia_classes,
        pod,
        resource_slice,
    )
    from webhook.files import load_policy
    from webhook.policy import inventory_from_policy, review
    from webhook.policy.dra import dra_snapshot
    from webhook.policy.quota.settings import QuotaPolicy

    policy = load_policy(None)
    slices = [
        resource_slice("a100-1", dra_gpu(0), dra_gpu(1)),
        resource_slice("h100-1", dra_mig(0, "1g.10gb", 0), dra_mig(0, "3g.40gb", 4)),
    ]
    templates = [claim_template("two-gpus", exactly(count=2))]
    inventory = replace(
        inventory_from_policy(policy), dra=dra_snapshot(nvidia_classes(), slices, (), templates)
    )
    claim = pod(
        ctr(resources={"claims": [{"name": "gpu"}]}),
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}],
    )
    pods = {
        "nvidia.com/gpu (3 pools)": pod(gpu(1)),
        "nvidia.com/mig-3g.20gb": pod(gpu(1, "nvidia.com/mig-3g.20gb")),
        "DRA claim, 2 GPUs": claim,
    }
    on = replace(policy, quota=QuotaPolicy(enabled=True))
    print(f"{'pod':28} {'off p50':>9} {'off p99':>9} {'on p50':>9} {'on p99':>9} {'added p50':>10}")
    for name, obj in pods.items():
        off50, off99 = measure(
            lambda o=obj: review(o, policy=policy, inventory=inventory), args.repeat
        )
        on50, on99 = measure(lambda o=obj: review(o, policy=on, inventory=inventory), args.repeat)
        print(f"{name:28} {off50:9.1f} {off99:9.1f} {on50:9.1f} {on99:9.1f} {on50 - off50:10.1f}")


if __name__ == "__main__":
    main()
