"""Shared test helpers: the bundled example policy, its inventory, and a pod builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.files import load_policy
from webhook.policy import Inventory, Policy, inventory_from_policy

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def example_policy() -> Policy:
    return load_policy(None)


@pytest.fixture(scope="session")
def example_inventory(example_policy: Policy) -> Inventory:
    return inventory_from_policy(example_policy)
