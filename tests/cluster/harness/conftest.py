"""Suites written to the test's folder."""

from tests.support.harness import write_suite  # noqa: F401 - a fixture
