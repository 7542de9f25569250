"""How many examples a property test (hypothesis) draws, here and in CI.

A property of the admission layer or the app costs hypothesis far more than the code under
test: drawing nested JSON takes about 10 ms an example, answering it under 0.3 ms. In a
developer's run a property draws its full budget; under ``CI=true`` (``make test`` as CI runs
it, on every change) it draws fewer, and every edge case it must never miss is an explicit
``@example`` beside it, run in both. Budgets and the reasons for them:
docs/testing-control-plane.md, "Where the CPU goes".
"""

from __future__ import annotations

import os

__all__ = ["CI", "examples"]

#: Whether this run is CI's (``CI=true``, as CI services set it).
CI = os.environ.get("CI", "").lower() == "true"


def examples(full: int, *, ci: int) -> int:
    """``max_examples`` for a property: ``full``, or ``ci`` under ``CI=true``."""
    return ci if CI else full
