"""The container image check: run first, and its summary (size, phase timings, or why not).

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
    """Move the image tests to the front. The build takes minutes in one test file; with
    ``make test``'s workers (``--dist loadfile`` hands files out in collection order) the
    first worker builds the image while the others run the rest, instead of one worker
    building it alone at the end while the others wait. No test may read the clock at
    collection and expect to run soon after: with workers, a file can run many minutes later."""
    image = [item for item in items if item.path.parent == HERE]
    items[:] = image + [item for item in items if item.path.parent != HERE]
