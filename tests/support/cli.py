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


def modules_loaded(*args: str, cwd: Path = ROOT) -> tuple[int, list[str], str]:
    """Run ``gpu-policy ARGS`` in a fresh interpreter: its exit status, the modules it loaded
    (sorted), its stdout. What a command imports is what each run of it pays for."""
    code = (
        "import sys\n"
        "from webhook.cli.main import main\n"
        f"status = main({list(args)!r})\n"
        "print(status, ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status, _, names = done.stderr.splitlines()[-1].partition(" ")
    return int(status), names.split(), done.stdout
