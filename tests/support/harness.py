"""Helpers for the harness tests: the real CLI (tests/support/cli.py), and suites written to tmp."""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SUITES = EXAMPLES / "suites"
CLUSTERS = EXAMPLES / "clusters"
MANIFESTS = EXAMPLES / "manifests"


#: Suite cases on the shipped manifests: one shared GPU is allowed, two are denied.
SHARED_GPU_CASES = f"""\
- name: one-shared-gpu
  object: {MANIFESTS / "pod-gpu-1-shared.yaml"}
  expect: {{allowed: true}}
- name: two-shared-gpus
  object: {MANIFESTS / "pod-gpu-2-shared-denied.yaml"}
  expect: {{allowed: false, failed: [gpu-shared-request-above-one]}}
"""
#: A skipped suite case.
LATER_CASE = f"""\
- name: later
  skip: not written yet
  object: {MANIFESTS / "pod-no-gpu.yaml"}
  expect: {{allowed: true}}
"""


def cli(
    *args: str, cwd: Path = REPO, process: bool = False, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``gpu-policy ARGS`` as a user runs it (no colour unless asked), with none of the server's
    ``GPU_POLICY_*`` variables; ``process``: as ``python -m webhook.cli``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_POLICY_")}
    env["PYTHONPATH"] = str(REPO)
    return run_cli(*args, cwd=cwd, env=env, process=process, timeout=timeout)


def suite_text(cluster: str, cases: str, *, name: str = "demo", extra: str = "") -> str:
    """A suite file on an example cluster; ``cases`` is the YAML of the cases list."""
    head = textwrap.dedent(
        f"""\
        apiVersion: gpu-policy.io/v1alpha1
        kind: Suite
        name: {name}
        policy: {CLUSTERS / cluster / "policy.yaml"}
        nodes: {CLUSTERS / cluster / "nodes.yaml"}
        """
    )
    return head + extra + "cases:\n" + textwrap.indent(textwrap.dedent(cases), "  ")


@pytest.fixture
def write_suite(tmp_path: Path) -> Callable[..., Path]:
    """Write a suite file (see suite_text) into tmp_path and return its path."""

    def write(
        cases: str, *, cluster: str = "seed003-l20-t4", file: str = "demo.suite.yaml", **kw: str
    ) -> Path:
        path = tmp_path / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(suite_text(cluster, cases, **kw))
        return path

    return write
