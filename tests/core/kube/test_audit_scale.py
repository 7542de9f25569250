"""The audit's benchmark cluster, its paged server, and the benchmark itself at a small size.

``bench/audit.py`` audits a generated cluster (``tests/support/audit_cluster.py``) served by
``tests/support/page_server.py``; these tests check that the audit finds what the generator
placed on purpose, and that the benchmark runs end to end (that the page server pages as the
real API server does: ``tests/cluster/kube/test_page_server.py``). No timings: those are the
benchmark's to print.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit_cluster import NOW, POLICY, Cluster
from tests.support.kube_helpers import Pages, read_cluster
from tests.support.page_server import PageServer
from tests.support.paths import REPO
from webhook.audit import audit, document
from webhook.policy import parse_policy

ROOT = REPO


def live_audit(kubeconfig: Path, page_size: int) -> tuple[dict[str, Any], Pages]:
    """``gpu-policy audit --kubeconfig``'s path: the lister into a Collector, then audit()."""
    sink = Pages()
    nodes = read_cluster(kubeconfig, sink, page_size=page_size, timeout=10)
    policy = parse_policy(POLICY, source="bench")
    return document(audit(sink.collector, nodes, policy=policy, now=NOW)), sink


def problems(doc: dict[str, Any]) -> dict[str, int]:
    """Findings below pass per ``rule/result``, as Cluster.expected() counts them."""
    found = Counter(f"{f['rule']}/{f['result']}" for f in doc["findings"])
    return dict(sorted(found.items()))


@pytest.mark.parametrize(
    ("nodes", "pods", "fraction"),
    [(50, 200, 0.5), (50, 1000, 0.1), (120, 3000, 0.2)],
    ids=["50-nodes-200-pods", "50-nodes-1000-pods", "120-nodes-3000-pods"],
)
def test_the_audit_finds_what_the_generator_placed(
    tmp_path: Path, nodes: int, pods: int, fraction: float
) -> None:
    cluster = Cluster(nodes, pods, fraction)
    with PageServer() as server:
        server.add_many(cluster.nodes())
        server.add_many(cluster.objects())
        doc, _ = live_audit(server.write_kubeconfig(tmp_path), 100)
    expected = cluster.expected().as_dict()
    assert doc["pods"] == expected["pods"]
    assert doc["pods"]["gpu"] == round(pods * fraction)
    assert len(doc["workloads"]) == expected["workloads"]
    assert problems(doc) == expected["findings"]
    # Every problem the generator placed on purpose is there, and pools ran full.
    assert {"gpu-pod-scheduled/fail", "gpu-pod-admitted/fail", "gpu-node-capacity/warn"} <= set(
        problems(doc)
    )
