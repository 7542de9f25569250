"""pytest plugin: the cases of policy test suites as pytest items, one item per case.

Installed with the package as the ``gpu_policy`` pytest11 entry point, it stays idle until
asked, so it never reads a project's other YAML files:

* ``pytest --gpu-policy-suites`` (or ``gpu_policy_suites = true`` in the ini file) collects
  suite files (names ending in ``suite.yaml``, or ``gpu-policy-test.yaml``) under the paths
  pytest searches;
* a suite file named on the command line is collected even without the option.

Each case runs through the same engine as ``gpu-policy test``; a failure shows what differed.
``--gpu-policy-update-golden`` rewrites golden files, like ``gpu-policy test --update-golden``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webhook.harness.report import details
from webhook.harness.run import CaseResult, run_case
from webhook.harness.runners import LocalRunner
from webhook.harness.suite import Case, Suite, SuiteError, is_suite_file
from webhook.harness.suite_files import SuiteLoader

_LOADER = pytest.StashKey[SuiteLoader]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The switch that turns collection on, and golden updates."""
    group = parser.getgroup("gpu-policy", "GPU policy test suites")
    group.addoption(
        "--gpu-policy-suites",
        action="store_true",
        default=False,
        help="collect GPU policy test suites (*suite.yaml, gpu-policy-test.yaml) as tests",
    )
    group.addoption(
        "--gpu-policy-update-golden",
        action="store_true",
        default=False,
        help="rewrite the golden files of GPU policy test suites from the engine's answers",
    )
    parser.addini(
        "gpu_policy_suites",
        type="bool",
        default=False,
        help="collect GPU policy test suites as tests (like --gpu-policy-suites)",
    )


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("gpu_policy_suites")) or bool(config.getini("gpu_policy_suites"))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A SuiteFile for suite files, when collection is on or the file was named."""
    if not is_suite_file(file_path):
        return None
    if not (_enabled(parent.config) or parent.session.isinitpath(file_path)):
        return None
    suite_file: SuiteFile = SuiteFile.from_parent(parent, path=file_path)
    return suite_file


class SuiteFile(pytest.File):
    """One suite file; its cases are the items."""

    def collect(self) -> Iterator[pytest.Item]:
        """Load the suite (a broken file is a collection error naming file and line)."""
        loader = self.config.stash.setdefault(_LOADER, SuiteLoader())
        try:
            suite = loader.load(self.path)
        except SuiteError as exc:
            raise self.CollectError(f"the suite file cannot be used:\n{exc}") from None
        for case in suite.cases:
            yield CaseItem.from_parent(self, name=case.name, suite=suite, case=case)


class CaseFailed(Exception):
    """A case's expectations did not hold."""

    def __init__(self, result: CaseResult) -> None:
        """Keep the result for the failure report."""
        super().__init__(result.case.id)
        self.result = result


class CaseItem(pytest.Item):
    """One case of a suite."""

    def __init__(self, *, suite: Suite, case: Case, **kwargs: Any) -> None:
        """Remember the suite (policy, inventory) and the case."""
        super().__init__(**kwargs)
        self.suite = suite
        self.case = case

    def runtest(self) -> None:
        """Review the case's object and compare with its expectations."""
        reason = self.suite.skip or self.case.skip
        if reason:
            pytest.skip(reason)
        result = run_case(
            self.suite,
            self.case,
            LocalRunner(),
            update_golden=bool(self.config.getoption("gpu_policy_update_golden")),
        )
        if result.status in ("fail", "error"):
            raise CaseFailed(result)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> Any:
        """What differed, as ``gpu-policy test`` shows it; no traceback."""
        if isinstance(excinfo.value, CaseFailed):
            return details([excinfo.value.result]).rstrip()
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the case is defined (the line of its entry in the suite file)."""
        return self.path, self.case.line - 1, self.case.id
