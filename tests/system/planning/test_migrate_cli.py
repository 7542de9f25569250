"""``gpu-policy migrate plan --write-dir`` as a process: the objects it writes and the JSON it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.paths import REPO

THREE = REPO / "examples" / "clusters" / "migrate-three-kinds"


@pytest.mark.slow
def test_plan_command_writes_objects_and_the_same_json(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    done = run_cli(
        "migrate", "plan", "--policy", str(THREE / "policy.yaml"), "--nodes", str(THREE / "nodes.yaml"),
        "--objects", str(THREE / "workloads.yaml"), "--write-dir", str(out), "-o", "json", process=True,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # pods no longer fit: a person must look
    assert json.loads(done.stdout) == json.loads((out / "plan.json").read_text())
    classes = list(yaml.safe_load_all((out / "deviceclasses.yaml").read_text()))
    assert {c["kind"] for c in classes if c} == {"DeviceClass"}
    assert len(list((out / "workloads").glob("*.yaml"))) == 5
    assert len(list((out / "steps").glob("*.resourceslice.yaml"))) == 5
