"""Fixtures for the self-managed certificate mode: the fake API server with the chart's two
webhook configurations, and certificate managers on it through the real ``kubernetes`` client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent.parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from certs_helpers import Cluster, webhook_configurations  # noqa: E402
from kube.apiserver import FakeApiServer  # noqa: E402


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
