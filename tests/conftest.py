"""Shared test helpers: the bundled example policy, its inventory, and a pod builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.files import load_policy
from webhook.policy import Inventory, Policy, inventory_from_policy

ROOT = Path(__file__).resolve().parent.parent

# workers: the summary sections of a run, also when pytest-xdist runs the tests in workers. It
# comes first: pytest rewrites a plugin's asserts only when it registers the plugin before
# anything imports it, and controlplane imports it.
# control_plane, kube_namespace, make_gpu_node, register_webhooks, live_cluster, report_crds: a
# real Kubernetes control plane for the tests that need one (skipped without KUBEBUILDER_ASSETS).
# ordering: the test files that take longest first, for make test's workers.
pytest_plugins = [
    "tests.support.workers",
    "tests.support.controlplane",
    "tests.support.cluster",
    "tests.support.ordering",
]


@pytest.fixture(scope="session")
def example_policy() -> Policy:
    return load_policy(None)


@pytest.fixture(scope="session")
def example_inventory(example_policy: Policy) -> Inventory:
    return inventory_from_policy(example_policy)
