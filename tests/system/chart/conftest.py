"""Fixtures for the Helm chart tests: the real ``helm`` binary and cached renders."""

from tests.support.chart_helpers import (  # noqa: F401 - fixtures
    chart_values,
    default_render,
    helm_bin,
    renderer,
    values_schema,
)
