"""Shared by the certificate tests: a CA made once per module; for the self-managed mode, the
fake API server with the chart's two webhook configurations, and certificate managers on it
through the real ``kubernetes`` client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from certs_helpers import Cluster, webhook_configurations

from tests.support.apiserver import FakeApiServer
from webhook.certs import issue


@pytest.fixture(scope="module")
def ca() -> tuple[bytes, bytes]:
    return issue.make_ca("test-ca", 30)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    """A fake API server holding both webhook configurations (no caBundle yet)."""
    with FakeApiServer() as server:
        server.add_many(webhook_configurations())
        yield server


@pytest.fixture
def cluster(fake: FakeApiServer, tmp_path: Path) -> Iterator[Cluster]:
    """Managers ("replicas") on the fake, each with its own TLS directory."""
    c = Cluster(fake, tmp_path)
    yield c
    c.close()
