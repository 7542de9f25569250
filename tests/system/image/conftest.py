"""The container image check: run last, and its summary (size, phase timings, or why not).

The summary is printed in pytest's terminal summary so that it shows without ``-s``; the same
lines go to bench/results/image.txt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the image tests to the end: the build takes minutes, and tests that read the
    clock at collection (certificate validity windows) must not run that much later."""
    image = [item for item in items if item.path.parent == HERE]
    items[:] = [item for item in items if item.path.parent != HERE] + image
