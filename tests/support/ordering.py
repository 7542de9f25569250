"""Test files in the order ``make test``'s workers should start them: the longest first.

``make test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``: a file is one
unit of work, and units are handed out in collection order to whichever worker runs short of
work. The run ends when its last file does, so the files that take longest (the container
image build, the certificate rotations, the migration on the control plane) must start first
and the many short files of the core tier fill the end; xdist's own order (most tests first)
started the one-test files that take a minute last.

The seconds each file took come from ``tests/durations.json``, written from a run's JUnit XML
by ``scripts/test_durations.py`` (docs/testing-control-plane.md). A file missing from it (a new
one) counts :data:`UNKNOWN_SECONDS_PER_TEST` for each of its tests. The order changes only
which worker runs a file and when; tests within a file keep theirs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "tests" / "durations.json"

#: What a test of a file not in the table is assumed to take (most files not listed are quick).
UNKNOWN_SECONDS_PER_TEST = 0.2


def file_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file (its path from the repository's root), as last measured."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(k): float(v) for k, v in data["files"].items()}


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` grouped by file, the files that take longest first (ties: collection order)."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(name: str) -> float:
        return seconds.get(name, UNKNOWN_SECONDS_PER_TEST * len(by_file[name]))

    order = sorted(by_file, key=cost, reverse=True)  # stable: ties keep collection order
    return [item for name in order for item in by_file[name]]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the files longest first; every worker orders alike, so collections still match."""
    items[:] = longest_first(items, file_seconds())
