"""The container image check: run last, and its summary (size, phase timings, or why not).

The summary is printed in pytest's terminal summary so that it shows without ``-s``; the same
lines go to bench/results/image.txt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.workers import add_lines

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def image_summary(pytestconfig: pytest.Config) -> list[str]:
    """The summary lines, for the test module to fill."""
    return add_lines(pytestconfig, "container image", [])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the image tests to the end: the build takes minutes, and tests that read the
    clock at collection (certificate validity windows) must not run that much later."""
    image = [item for item in items if item.path.parent == HERE]
    items[:] = [item for item in items if item.path.parent != HERE] + image
