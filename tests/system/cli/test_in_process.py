"""The command run inside the test process answers as ``python -m webhook.cli`` does.

Most tests run ``gpu-policy`` in process (tests/support/cli.py); these hold that run to the
process's exit status and output, and to leaving nothing behind for the next call.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli

from .conftest import ROOT

POD = (ROOT / "examples" / "manifests" / "pod-gpu-2-shared-denied.yaml").read_text()

SAME = {
    "review-stdin": (("review", "-"), POD),
    "usage-error": (("review", "--no-such-option"), None),  # argparse's SystemExit(2)
    "help": (("audit", "--help"), None),  # SystemExit(0), the help on stdout
}


@pytest.mark.parametrize(("args", "stdin"), SAME.values(), ids=list(SAME))
def test_the_same_answer_as_the_process(args: tuple[str, ...], stdin: str | None) -> None:
    process = run_cli(*args, stdin=stdin, process=True)
    in_process = run_cli(*args, stdin=stdin)
    assert (in_process.returncode, in_process.stdout, in_process.stderr) == (
        process.returncode,
        process.stdout,
        process.stderr,
    )
    assert in_process.args == process.args


def test_cwd_and_environment_are_the_calls_and_put_back(tmp_path: Path) -> None:
    environ, cwd = dict(os.environ), os.getcwd()
    (tmp_path / "pod.yaml").write_text(POD)
    relative = run_cli("review", "pod.yaml", cwd=tmp_path)
    assert relative.returncode == 1, relative.stderr  # read from tmp_path: two GPUs denied
    assert "DENIED Pod/" in relative.stdout
    # ~ is the call's $HOME.
    home = run_cli("audit", "--kubeconfig", "~/none", env={"HOME": str(tmp_path)})
    assert home.returncode == 2
    assert home.stderr == f"gpu-policy audit: kubeconfig not found: {tmp_path}/none\n"
    assert dict(os.environ) == environ and os.getcwd() == cwd


@pytest.fixture
def refusing_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose API server refuses every connection (a bound port, not listening)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        path = tmp_path / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
        yield path


def test_log_lines_go_to_the_calls_stderr_and_its_level_ends_with_it(
    refusing_kubeconfig: Path,
) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    args = ("inventory", "--kubeconfig", str(refusing_kubeconfig), "--timeout", "1")
    verbose = run_cli("-v", *args)
    assert verbose.returncode == 2
    assert " INFO webhook.kube.client Kubernetes API at https://127.0.0.1:" in verbose.stderr
    assert " DEBUG urllib3.connectionpool " in verbose.stderr  # from the watchers' threads
    quiet = run_cli(*args)
    assert quiet.returncode == 2
    assert " INFO webhook.kube.client Kubernetes API at https://127.0.0.1:" in quiet.stderr
    assert " DEBUG " not in quiet.stderr
    assert f"gpu-policy: {refusing_kubeconfig}: the cluster did not answer in 1 s\n" in quiet.stderr
    assert (root.handlers, root.level) == (handlers, level)
