"""The real command as a user runs it: real files, exit codes and output (in process unless
``process``: tests/support/cli.py says which stay a process)."""

from __future__ import annotations

import subprocess

from tests.support.cli import run_cli
from tests.support.paths import REPO

ROOT = REPO
CLUSTERS = ROOT / "examples" / "clusters"


def gpu_policy(
    *args: str, stdin: str | None = None, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``gpu-policy ARGS`` from the repository's root; ``process``: as ``python -m webhook.cli``."""
    return run_cli(*args, stdin=stdin, process=process)
