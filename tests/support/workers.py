"""The run's summary sections, whether tests run in this process or in pytest-xdist workers.

``make test`` runs pytest with worker processes: a test there cannot print into the terminal
summary of the process that prints it. A test or a conftest adds its lines with
:func:`add_lines`; each worker hands its lines over when it ends (xdist's ``workeroutput``), and
the main process prints every section once. Loaded as a plugin by ``tests/conftest.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

_SECTIONS = pytest.StashKey[dict[str, list[str]]]()


def sections(config: pytest.Config) -> dict[str, list[str]]:
    """This process's summary: section title -> lines, in the order they were added."""
    return config.stash.setdefault(_SECTIONS, {})


def add_lines(config: pytest.Config, section: str, lines: list[str]) -> list[str]:
    """Add ``lines`` under ``section`` and return that section's list (a test may go on
    appending to it until the session ends)."""
    kept = sections(config).setdefault(section, [])
    kept.extend(lines)
    return kept


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a worker: hand the sections to the main process (after every other finisher ran)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["summary_sections"] = sections(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In the main process: take in what a worker that ended handed over."""
    for section, lines in getattr(node, "workeroutput", {}).get("summary_sections", {}).items():
        add_lines(node.config, section, lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print each section, once, in the process that prints the summary."""
    if hasattr(terminalreporter.config, "workerinput"):
        return
    for section, lines in sections(terminalreporter.config).items():
        if lines:
            terminalreporter.section(section)
            for line in lines:
                terminalreporter.write_line(line)
