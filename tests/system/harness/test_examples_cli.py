"""``gpu-policy test examples/suites`` as a process, as ``make test`` runs it."""

from __future__ import annotations

import re

from tests.support.harness import cli


def test_the_cli_runs_the_examples_as_make_test_does() -> None:
    result = cli("test", "examples/suites")
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed, 0 failed, 0 skipped in \d+\.\d\ds", last), last
    assert "FAIL" not in result.stdout
    assert result.stderr == ""
