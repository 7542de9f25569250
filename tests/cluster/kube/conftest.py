"""Fixtures: the real API server (behind the fault proxy), a ``kubernetes`` client on it, and
fast timings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.cluster import LiveCluster
from tests.support.kube_helpers import FAST, MakeSource
from webhook.kube import ClusterSource


@pytest.fixture
def cluster(live_cluster: LiveCluster) -> LiveCluster:
    """The session's control plane seen through a fault proxy of this test's own."""
    return live_cluster


@pytest.fixture
def api_client(cluster: LiveCluster) -> Iterator[client.ApiClient]:
    """The real client, configured for the proxy (plain HTTP on loopback)."""
    api = client.ApiClient(client.Configuration(host=cluster.url))
    yield api
    api.close()


@pytest.fixture
def make_source(api_client: client.ApiClient) -> Iterator[MakeSource]:
    """Build and start a ClusterSource on the cluster; every one is stopped after the test."""
    sources: list[ClusterSource] = []

    def make(**kwargs: object) -> ClusterSource:
        kwargs.setdefault("configmap", ("gpu-operator", "device-plugin-config"))
        # The core kinds: the DRA kinds a v1.36 API server serves are watched in
        # test_dra_controlplane.py and test_dra_claims_controlplane.py.
        kwargs.setdefault("dra", "off")
        kwargs.setdefault("timings", FAST)
        source = ClusterSource(api_client, **kwargs)  # type: ignore[arg-type]
        sources.append(source)
        return source.start()

    yield make
    for source in sources:
        source.stop()
        for watcher in source.watchers.values():
            assert watcher.join(0), f"{watcher.spec.name} watcher thread still running"
