"""The real API server with the chart's two webhook configurations, and certificate managers
on it through the real ``kubernetes`` client."""

from tests.support.certs_helpers import cluster, kube  # noqa: F401 - fixtures
