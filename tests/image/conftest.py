"""The container image check's summary (size, phase timings, or why it did not run).

Printed in pytest's terminal summary so that it shows without ``-s``; the same lines go to
bench/results/image.txt.
"""

from __future__ import annotations

import pytest

SUMMARY = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def image_summary(pytestconfig: pytest.Config) -> list[str]:
    """The summary lines, for the test module to fill."""
    return pytestconfig.stash.setdefault(SUMMARY, [])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("container image")
        for line in lines:
            terminalreporter.write_line(line)
