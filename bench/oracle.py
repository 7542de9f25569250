"""The engine against kube-scheduler on many random scenarios: the agreement figure.

Starts a control plane of its own (tests/support/controlplane.py; ``KUBEBUILDER_ASSETS`` must
name the binaries, docs/testing-control-plane.md), or uses a running one (``--kubeconfig``),
runs ``--scenarios`` scenarios of ``--seed`` (tests/core/oracle/scenarios.py) in batches of worlds
side by side, and prints the agreement overall, by category (device plugin, DRA, mixed) and
by feature, then every disagreement: its kind and the folder that ``gpu-policy review
--policy policy.yaml --nodes world.yaml pod.yaml`` replays (docs/oracle.md).

    .venv/bin/python -m bench.oracle --scenarios 2000 --seed 1
    .venv/bin/python -m bench.oracle --scenarios 200 --start 400 --out /tmp/oracle
    .venv/bin/python -m bench.oracle --seed 2 --start 262 --scenarios 1 --write /tmp/s262

``--write DIR`` starts no control plane: it writes each scenario as generated (before the API
server's defaults) to ``DIR/scenario-<seed>-<index>/`` and prints the engine's verdict, so
that one scenario can be replayed and read without the scheduler.

Figures to read, not assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.cluster.oracle.runner import AGREE, Outcome, Runner
from tests.core.oracle.scenarios import scenarios
from tests.core.oracle.world import engine_verdict, write_scenario
from tests.support.controlplane import ControlPlane, assets_dir


class _Running(ControlPlane):
    """A control plane started elsewhere, reached through its admin kubeconfig."""

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        return None


def _plane(kubeconfig: str | None) -> ControlPlane:
    if kubeconfig:
        plane = _Running(assets=Path("."), workdir=Path(tempfile.mkdtemp(prefix="oracle-")))
        plane.kubeconfig = Path(kubeconfig)
        return plane
    assets = assets_dir()
    if assets is None:
        sys.exit("bench/oracle.py: set KUBEBUILDER_ASSETS (docs/testing-control-plane.md)")
    plane = ControlPlane(assets=assets, workdir=Path(tempfile.mkdtemp(prefix="bench-oracle-")))
    plane.start()
    return plane


def _rate(outcomes: list[Outcome]) -> str:
    agree = sum(o.kind == AGREE for o in outcomes)
    return f"{agree}/{len(outcomes)} ({100 * agree / max(1, len(outcomes)):.1f}%)"


def report(outcomes: list[Outcome], seconds: float) -> str:
    """The figures: agreement overall, by category and feature, kinds, each disagreement."""
    lines = [f"agreement: {_rate(outcomes)} in {seconds:.0f} s"]
    bound = sum(bool(o.original.bound) for o in outcomes)
    allowed = sum(o.engine.allowed for o in outcomes)
    lines.append(
        f"scheduler: {bound} bound, {len(outcomes) - bound} not; "
        f"engine: {allowed} allowed, {len(outcomes) - allowed} denied"
    )
    lines.append("by category:")
    for category in sorted({o.scenario.category for o in outcomes}):
        of = [o for o in outcomes if o.scenario.category == category]
        lines.append(f"  {category:14s} {_rate(of)}")
    lines.append("by feature (scenarios that use it):")
    for feature in sorted({f for o in outcomes for f in o.scenario.features}):
        of = [o for o in outcomes if feature in o.scenario.features]
        lines.append(f"  {feature:24s} {_rate(of)}")
    kinds = Counter(o.kind for o in outcomes if o.kind != AGREE)
    lines.append("disagreements: " + (", ".join(f"{k} {n}" for k, n in kinds.items()) or "none"))
    for o in outcomes:
        if o.kind != AGREE:
            lines.append(f"  {o.kind}: {o.folder}")
            lines.append(f"    scheduler: {o.scheduler_message[:300]}")
            if o.engine.reasons:
                lines.append(f"    engine: {o.engine.reasons[0][:300]}")
    return "\n".join(lines)


def _record(o: Outcome) -> dict[str, Any]:
    return {
        "world": o.scenario.world_id,
        "category": o.scenario.category,
        "features": o.scenario.features,
        "kind": o.kind,
        "engine_allowed": o.engine.allowed,
        "engine_reasons": o.engine.reasons,
        "scheduler": o.scheduler_message,
        "folder": str(o.folder) if o.folder else None,
    }


def _write(out: Path, seed: int, count: int, start: int) -> int:
    """Write the scenarios and print the engine's verdict on each (no control plane)."""
    for index, scenario in enumerate(scenarios(seed, count, start), start):
        folder = write_scenario(out / f"scenario-{seed}-{index}", scenario)
        verdict = engine_verdict(scenario)
        said = "ALLOWED" if verdict.allowed else "DENIED"
        unproven = " (unproven: the device search ran out of time)" if verdict.unproven else ""
        print(f"{folder}: engine {said}{unproven}; {', '.join(verdict.objects)}")
        for reason in verdict.reasons:
            print(f"  {reason[:300]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="index of the first scenario")
    p.add_argument("--batch-size", type=int, default=50, help="worlds side by side")
    p.add_argument("--out", help="where disagreements go (default: a new temporary folder)")
    p.add_argument("--kubeconfig", help="use this running control plane instead of starting one")
    p.add_argument("--write", metavar="DIR", help="write the scenarios and the engine's verdicts")
    args = p.parse_args(argv)
    if args.write:
        return _write(Path(args.write), args.seed, args.scenarios, args.start)
    out = Path(args.out or tempfile.mkdtemp(prefix="oracle-scenarios-"))
    out.mkdir(parents=True, exist_ok=True)
    plane = _plane(args.kubeconfig)
    try:
        started = time.monotonic()
        outcomes: list[Outcome] = []
        todo = scenarios(args.seed, args.scenarios, args.start)
        step = args.batch_size * 4
        for i in range(0, len(todo), step):
            outcomes += Runner(plane, out, batch_size=args.batch_size).run(todo[i : i + step])
            print(f"... {len(outcomes)}/{len(todo)}: {_rate(outcomes)}", file=sys.stderr)
        seconds = time.monotonic() - started
    finally:
        plane.stop()
    (out / "outcomes.json").write_text(json.dumps([_record(o) for o in outcomes], indent=1))
    print(f"seed {args.seed}, scenarios {args.start}..{args.start + args.scenarios - 1}")
    print(report(outcomes, seconds))
    print(f"outcomes: {out / 'outcomes.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
