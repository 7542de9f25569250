"""The real command as a user runs it: a process, real files, exit codes and output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"


def gpu_policy(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``gpu-policy ARGS`` (as ``python -m webhook.cli``) from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
