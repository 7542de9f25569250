"""The container image check's summary (size, phase timings, or why not).

It runs first under ``make test``'s workers, as the longest file (tests/support/ordering.py).

The summary is printed in pytest's terminal summary so that it shows without ``-s``; the same
lines go to bench/results/image.txt.
"""

from __future__ import annotations

import pytest

from tests.support.workers import add_lines


@pytest.fixture(scope="session")
def image_summary(pytestconfig: pytest.Config) -> list[str]:
    """The summary lines, for the test module to fill."""
    return add_lines(pytestconfig, "container image", [])
