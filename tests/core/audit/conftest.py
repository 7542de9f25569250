"""Fixtures for the audit: a policy over exclusive and time-sliced nodes, and a runner."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from tests.objects import NOW, TIME_SLICING_CONFIG
from webhook.audit import AuditResult, Collector, audit
from webhook.policy import Policy, parse_policy


def make_policy(
    *,
    tolerations: list[dict[str, str]] | None = None,
    enforcement: str = "enforce",
    exempt: Iterable[str] = ("kube-system",),
) -> Policy:
    """Nodes labelled ``shared`` time-slice 4 ways; the others (key ``any``) are exclusive."""
    data = {
        "any": "version: v1\nflags:\n  migStrategy: none\n",
        "shared": TIME_SLICING_CONFIG,
        "mig": "version: v1\nflags:\n  migStrategy: mixed\n",
    }
    doc = {
        "apiVersion": "gpu-policy.io/v1alpha1",
        "kind": "SharingPolicy",
        "metadata": {"name": "audit-test"},
        "spec": {
            "enforcement": enforcement,
            "exemptNamespaces": list(exempt),
            "devicePlugin": {
                "configMap": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "dp", "namespace": "gpu-operator"},
                    "data": data,
                },
                "defaultConfig": "any",
            },
            "mutation": {"tolerations": tolerations or []},
        },
    }
    return parse_policy(doc, source="audit-test.yaml")


Runner = Callable[..., AuditResult]


@pytest.fixture
def run() -> Runner:
    """``run(objects, nodes, **policy_options)``: collect, audit at NOW, return the result."""

    def _run(
        objects: Iterable[Mapping[str, Any]],
        nodes: Iterable[Mapping[str, Any]],
        policy: Policy | None = None,
        **options: Any,
    ) -> AuditResult:
        collector = Collector()
        collector.add_all(objects)
        return audit(collector, nodes, policy=policy or make_policy(**options), now=NOW)

    return _run
