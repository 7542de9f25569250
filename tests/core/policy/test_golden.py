"""Golden files for mutations: one case a file under tests/golden/mutations, named for its id.

Each file holds the policy it runs on, the submitted object and what the webhook makes of it.
``GOLDEN_UPDATE=1 pytest tests/core/policy/test_golden.py`` rewrites the expectations, so that a
change of behaviour shows in review as a change of these files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.support.paths import TESTS
from webhook.files import load_policy
from webhook.policy import inventory_from_policy, review

GOLDEN = TESTS / "golden"
CASES = sorted((GOLDEN / "mutations").glob("*.yaml"))


def _policy(name: str) -> Any:
    return load_policy(None if name == "example" else GOLDEN / "policies" / f"{name}.yaml")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    policy = _policy(case["policy"])
    decision = review(
        case["input"],
        policy=policy,
        inventory=inventory_from_policy(policy),
        operation=case.get("operation", "CREATE"),
    )
    got = {
        "allowed": decision.allowed,
        "failed": list(decision.failed),
        "changes": list(decision.changes),
        "expected": decision.mutated,
    }
    if os.environ.get("GOLDEN_UPDATE"):
        path.write_text(yaml.safe_dump({**case, **got}, sort_keys=False, width=100))
        return
    assert got == {k: case.get(k) for k in got}
    if decision.mutated is not None:
        assert jsonpatch.apply_patch(case["input"], list(decision.patch)) == decision.mutated


def test_there_are_golden_cases() -> None:
    assert len(CASES) >= 8
