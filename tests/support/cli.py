"""The one way tests run ``gpu-policy`` as a user does: a process, exit code, stdout, stderr."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str,
    stdin: str | None = None,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """``gpu-policy ARGS`` (as ``python -m webhook.cli``), run from ``cwd``.

    ``timeout`` only catches a command that hangs (under the run-wide 300 s, so the failure
    names the command): a command against the control plane took over 60 s under load."""
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
        timeout=timeout,
        check=False,
    )
