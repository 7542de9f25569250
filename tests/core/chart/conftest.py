"""Fixtures for the chart's own files, read without helm."""

from tests.support.chart_helpers import chart_values, values_schema  # noqa: F401 - fixtures
