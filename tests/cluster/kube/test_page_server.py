"""The audit benchmark's page server (tests/support/page_server.py) against the real API server:
the audit pages through both alike and finds the same.

A generated cluster (``tests/support/audit_cluster.py``) goes into kube-apiserver; the objects
as it stores them (its uids and creation times) go into the page server; the audit's listing
runs through each with pages of 7 objects.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.audit_cluster import NOW, POLICY, Cluster
from tests.support.cluster import LiveCluster
from tests.support.kube_helpers import Pages, read_cluster
from tests.support.page_server import PageServer
from webhook.audit import audit, document
from webhook.kube.lister import AUDIT_KINDS
from webhook.policy import parse_policy

DRA_RESOURCES = {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"}


def live_audit(kubeconfig: Path, page_size: int) -> tuple[dict[str, Any], Pages]:
    """``gpu-policy audit --kubeconfig``'s path: the lister into a Collector, then audit()."""
    sink = Pages()
    nodes = read_cluster(kubeconfig, sink, page_size=page_size, timeout=30)
    policy = parse_policy(POLICY, source="bench")
    return document(audit(sink.collector, nodes, policy=policy, now=NOW)), sink


def test_the_page_server_pages_as_the_api_server_does(cluster: LiveCluster, tmp_path: Path) -> None:
    small = Cluster(50, 120, 0.3)
    cluster.add_many(small.nodes())
    cluster.add_many(small.objects())
    (tmp_path / "api").mkdir()
    (tmp_path / "pages").mkdir()
    want, api_sink = live_audit(cluster.write_kubeconfig(tmp_path / "api"), 7)
    api_lists = Counter(r.resource for r in cluster.requests if r.verb == "list")
    with PageServer() as pages:
        pages.add_many(cluster.dump("Node", *AUDIT_KINDS))
        got, page_sink = live_audit(pages.write_kubeconfig(tmp_path / "pages"), 7)
    assert got == want
    assert got["pods"]["gpu"] == 36  # 30% of 120: the audit found the GPU pods placed
    assert page_sink.sizes == api_sink.sizes
    # The same lists, page for page, of every kind the page server serves; the DRA kinds it
    # does not serve (404) are none to the audit, as the real server's empty lists are.
    assert pages.lists == {r: n for r, n in api_lists.items() if r not in DRA_RESOURCES}
    assert set(api_lists) >= DRA_RESOURCES
    # 120 pods in pages of 7: 17 full pages and one of 1.
    assert [n for kind, n in page_sink.sizes if kind == "Pod"] == [7] * 17 + [1]
