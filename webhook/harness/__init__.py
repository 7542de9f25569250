"""The policy test harness: suites of objects with expected verdicts, run like the server.

``gpu-policy test`` and the pytest plugin (``webhook.harness.pytest_plugin``) both read suite
files (:mod:`webhook.harness.suite_files`) into suites and cases (:mod:`webhook.harness.suite`),
ask a runner for each case's answer (the engine in-process, a deployed webhook, or a cluster's
dry run; :mod:`webhook.harness.runners`) and compare it with the case's expectations
(:mod:`webhook.harness.compare`). Reports: :mod:`webhook.harness.report`.
"""

from webhook.harness.compare import Difference, Observed, check
from webhook.harness.run import CaseResult, matches, run_case, run_suites
from webhook.harness.runners import KubeRunner, LocalRunner, ServerRunner, WebhookClient
from webhook.harness.suite import Case, Expect, Problem, Suite, SuiteError, is_suite_file
from webhook.harness.suite_files import SuiteLoader, find_suite_files, load_suites

__all__ = [
    "Case",
    "CaseResult",
    "Difference",
    "Expect",
    "KubeRunner",
    "LocalRunner",
    "Observed",
    "Problem",
    "ServerRunner",
    "Suite",
    "SuiteError",
    "SuiteLoader",
    "WebhookClient",
    "check",
    "find_suite_files",
    "is_suite_file",
    "load_suites",
    "matches",
    "run_case",
    "run_suites",
]
