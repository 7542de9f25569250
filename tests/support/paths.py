"""Where things are: the repository's root and the tests' folder, for tests at any depth."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the checkout).
REPO = Path(__file__).resolve().parents[2]

#: ``tests/``: its ``fixtures/`` and ``golden/`` are shared by every tier.
TESTS = REPO / "tests"
