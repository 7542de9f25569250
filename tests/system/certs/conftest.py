"""The real API server with the chart's two webhook configurations."""

from tests.support.certs_helpers import kube  # noqa: F401 - a fixture
