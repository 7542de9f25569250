"""A written scenario gives ``gpu-policy review`` (a process, as a user runs it) the verdict the
runner used."""

from __future__ import annotations

from pathlib import Path

from tests.core.oracle.scenarios import scenarios
from tests.core.oracle.world import (
    engine_verdict,
    read_scenario,
    write_scenario,
)
from tests.support.cli import run_cli

MANY = scenarios(3, 200)


def test_a_written_scenario_replays_the_engines_verdict_through_the_cli(tmp_path: Path) -> None:
    seen = set()
    for s in MANY[:12]:
        verdict = engine_verdict(s)
        folder = write_scenario(tmp_path / s.world_id, s)
        assert read_scenario(folder).manifests == s.manifests
        review = run_cli(
            "review", "--policy", "policy.yaml", "--nodes", "world.yaml", "pod.yaml", cwd=folder
        )
        assert review.returncode == (0 if verdict.allowed else 1), review.stdout + review.stderr
        seen.add(verdict.allowed)
    assert seen == {True, False}
