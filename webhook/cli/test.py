"""``gpu-policy test``: run policy test suites against the engine, a webhook or a cluster.

Exit codes: 0 every selected case passed; 1 a case failed or got no answer; 2 a suite file
(or the command line) is wrong, or no case was selected.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from webhook.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_colour_argument,
    use_colour,
)
from webhook.cli.render import paint, table, to_json
from webhook.harness.json_report import results_document
from webhook.harness.report import STYLES, details, display_path, junit_xml, summary, write_junit
from webhook.harness.run import CaseResult, run_suites
from webhook.harness.runners import KubeRunner, LocalRunner, Runner, ServerRunner, WebhookClient
from webhook.harness.suite_files import load_suites

EPILOG = """\
Suite files are YAML documents of kind Suite (apiVersion gpu-policy.io/v1alpha1). In a
directory, files whose names end in suite.yaml (or are gpu-policy-test.yaml) are suites; a
file named on the command line is read as one whatever its name.

Modes: without --server or --kubeconfig the engine answers in-process, with the suite's
policy and nodes. --server sends AdmissionReviews to a deployed webhook (Pods on CREATE to
/mutate and then /validate, everything else to /validate). --kubeconfig creates every object
with dryRun=All through the API server, so the cluster's whole admission chain answers.

Exit status: 0 every selected case passed, 1 a case failed or got no answer, 2 a suite file
or the command line is wrong (or no case was selected).
"""


def add_parser(sub: Any) -> None:
    """Add the ``test`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser(
        "test",
        help="run policy test suites (expected verdicts, rules, warnings, golden objects)",
        description="Run policy test suites against the engine, a deployed webhook or a "
        "cluster,\nand compare verdicts, failed rules, warnings, denial messages and mutated "
        "objects\nwith what the cases expect.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "paths",
        nargs="*",
        default=["."],
        metavar="PATH",
        help="suite files or directories to search (default: .)",
    )
    p.add_argument(
        "-k",
        dest="keywords",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only cases whose suite/case matches (substring, or a glob with * ? [); "
        "repeatable",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: the results table and failure details; json: one document with every "
        "case's expectation, answer and differences (for scripts)",
    )
    p.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML")
    p.add_argument(
        "--update-golden",
        action="store_true",
        help="rewrite golden files that differ (and create missing ones) from the answers",
    )
    add_colour_argument(p)
    remote = p.add_argument_group("against a deployed webhook")
    remote.add_argument("--server", metavar="URL", help="the webhook, https://HOST:PORT")
    remote.add_argument("--cacert", metavar="FILE", help="CA bundle that signed the server")
    remote.add_argument("--cert", metavar="FILE", help="client certificate (mutual TLS)")
    remote.add_argument("--key", metavar="FILE", help="client key (mutual TLS)")
    remote.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name to check the server certificate for (e.g. the Service's DNS name "
        "through a port-forward)",
    )
    cluster = p.add_argument_group("against a cluster (dry-run creates)")
    cluster.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig of the cluster")
    cluster.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per request (--server, --kubeconfig)"
    )
    p.set_defaults(func=run)


def _runner(args: argparse.Namespace) -> Runner:
    """The runner the options ask for; ValueError names an option that does not fit."""
    if args.server and args.kubeconfig:
        raise ValueError("give --server or --kubeconfig, not both")
    if bool(args.cert) != bool(args.key):
        raise ValueError("--cert and --key go together")
    if (args.cacert or args.cert or args.tls_server_name) and not args.server:
        raise ValueError("--cacert, --cert, --key and --tls-server-name need --server")
    if args.context and not args.kubeconfig:
        raise ValueError("--context needs --kubeconfig")
    if args.server:
        client = WebhookClient(
            args.server,
            cacert=args.cacert,
            cert=args.cert,
            key=args.key,
            server_name=args.tls_server_name,
            timeout=args.timeout,
        )
        return ServerRunner(client)
    if args.kubeconfig:
        if args.update_golden:
            raise ValueError(
                "--update-golden cannot use a cluster's answer (it adds defaults); "
                "update golden files locally or with --server"
            )
        # kubernetes is imported only for this mode (the harness never imports it).
        from webhook.kube.dryrun import DryRunCreator, connect

        return KubeRunner(
            DryRunCreator(connect(args.kubeconfig, args.context), timeout=args.timeout)
        )
    return LocalRunner()


def run(args: argparse.Namespace) -> int:
    """Run the selected cases of every suite found; the exit code."""
    start = time.perf_counter()
    try:
        runner = _runner(args)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc), command="test") from None
    suites, problems = load_suites(args.paths)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    try:
        results, deselected = run_suites(
            suites, runner, keywords=args.keywords, update_golden=args.update_golden
        )
    finally:
        close = getattr(getattr(runner, "client", None), "close", None)
        if close is not None:
            close()
    seconds = time.perf_counter() - start
    if args.junit:
        write_junit(args.junit, junit_xml(results, problems, seconds=seconds, mode=runner.mode))
    if args.output == "json":
        doc = results_document(
            results, problems, deselected=deselected, seconds=seconds, mode=runner.mode
        )
        print(to_json(doc))
    else:
        _print_text(results, args, deselected=deselected, problems=len(problems), seconds=seconds)
    if problems:
        return EXIT_USAGE
    if not results:
        what = f" matches -k {' '.join(args.keywords)}" if args.keywords else " found"
        raise UsageError(f"no case{what}", command="test")
    if any(r.status in ("fail", "error") for r in results):
        return EXIT_FAILED
    return EXIT_OK


def _print_text(
    results: Sequence[CaseResult],
    args: argparse.Namespace,
    *,
    deselected: int,
    problems: int,
    seconds: float,
) -> None:
    """The results table, the failure details, golden files written and the closing line."""
    colour = use_colour(args.colour)
    if results:
        print(results_table(results, colour=colour))
        print()
    text = details(results, colour=colour)
    if text:
        print(text)
    for r in results:
        if r.golden_written is not None:
            print(f"updated golden file {display_path(r.golden_written)}")
    print(
        summary(
            results,
            deselected=deselected,
            problems=problems,
            seconds=seconds,
            colour=colour,
        )
    )


# The widest the suite, case, expected and got columns grow; longer text is cut. GOT fits
# "denied (refused by the API server's validation)" whole: that note is the verdict's reason.
_WIDEST = (28, 48, 46, 48, None)


def results_table(results: Sequence[CaseResult], *, colour: bool = False) -> str:
    """One line a case: suite, case, expected, got, PASS/FAIL/SKIP/ERROR."""
    rows = [
        (r.case.suite, r.case.name, r.case.expect.summary(), _got(r), STYLES[r.status][0])
        for r in results
    ]

    def style(row: int, column: int, text: str) -> str:
        return paint(STYLES[results[row].status][1], text, colour=colour and column == 4)

    return "\n".join(
        table(("SUITE", "CASE", "EXPECTED", "GOT", "RESULT"), rows, widest=_WIDEST, style=style)
    )


def _got(result: CaseResult) -> str:
    if result.status == "skip":
        return f"skipped: {result.skip_reason}"
    assert result.observed is not None
    return result.observed.summary()
