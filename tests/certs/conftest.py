"""Shared by the certificate tests: a CA made once per module; for the self-managed mode, the
real API server with the chart's two webhook configurations, and certificate managers on it
through the real ``kubernetes`` client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from certs_helpers import NS, Cluster, webhook_configurations

from tests.support.cluster import LiveCluster
from webhook.certs import issue


@pytest.fixture(scope="module")
def ca() -> tuple[bytes, bytes]:
    return issue.make_ca("test-ca", 30)


@pytest.fixture
def kube(live_cluster: LiveCluster) -> LiveCluster:
    """The real API server holding both webhook configurations (no caBundle yet) and the
    release's namespace."""
    live_cluster.ensure_namespace(NS)
    live_cluster.add_many(webhook_configurations())
    return live_cluster


@pytest.fixture
def cluster(kube: LiveCluster, tmp_path: Path) -> Iterator[Cluster]:
    """Managers ("replicas") on the API server, each with its own TLS directory."""
    c = Cluster(kube, tmp_path)
    yield c
    c.close()
