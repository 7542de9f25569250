"""The real command as a user runs it: a process, real files, exit codes and output."""

from __future__ import annotations

import subprocess

from tests.support.cli import run_cli
from tests.support.paths import REPO

ROOT = REPO
CLUSTERS = ROOT / "examples" / "clusters"


def gpu_policy(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``gpu-policy ARGS`` (as ``python -m webhook.cli``) from the repository's root."""
    return run_cli(*args, stdin=stdin)
