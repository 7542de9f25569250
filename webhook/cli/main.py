"""The gpu-policy command: the parser, exit codes, colour and one-line errors, for every command.

Exit codes: 0 success (all allowed, every case passed), 1 something was denied or a check
failed, 2 a usage or file error, always with a one-line message and never a traceback.

Each command is a module of this package with ``add_parser(sub)``, which adds its subcommand
and sets ``func`` to the function that runs it and returns the exit code. The commands import
flask, gunicorn and kubernetes only inside those functions, so that ``gpu-policy review`` loads
none of them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from webhook import __version__
from webhook.policy import Policy, PolicyError

PROG = "gpu-policy"
DESCRIPTION = (
    "The gpu-policy command: review manifests offline, make certificates, serve, and more."
)
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
COLOUR_CHOICES = ("auto", "always", "never")


class UsageError(Exception):
    """A problem the user fixes on the command line or in a file: exit 2, one line.

    ``command`` names the subcommand in the message (``gpu-policy test: ...``) when the
    problem belongs to its options rather than to a file.
    """

    def __init__(self, message: str, *, command: str = "") -> None:
        """Keep the message and the subcommand it belongs to."""
        super().__init__(message)
        self.command = command


def print_plugin_warnings(policy: Policy, stream: TextIO | None = None) -> None:
    """One ``warning:`` line on stderr per thing the device plugin would silently ignore."""
    stream = sys.stderr if stream is None else stream
    for warning in policy.plugin_warnings():
        print(f"warning: {warning}", file=stream)


def add_colour_argument(parser: argparse.ArgumentParser) -> None:
    """``--colour``/``--color auto|always|never`` (see ``use_colour``)."""
    parser.add_argument("--colour", "--color", choices=COLOUR_CHOICES, default="auto")


def use_colour(
    choice: str, stream: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether to paint the output: ``always``, ``never``, or for ``auto`` a terminal without
    ``NO_COLOR`` (set to a non-empty value it turns colour off; https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    stream = sys.stdout if stream is None else stream
    environ = os.environ if environ is None else environ
    return stream.isatty() and not environ.get("NO_COLOR")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    # The commands import this module (exit codes, errors, colour): imported here, not at the
    # top, they find it complete.
    from webhook.cli import audit, certs, inventory, migrate, plan, review, serve, test

    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (review, certs, inventory, plan, audit, migrate, serve, test):
        command.add_parser(sub)
    return parser


def _error(exc: Exception, command: str = "") -> int:
    """The error as one line on stderr, and the exit code for it."""
    prefix = f"{PROG} {command}" if command else PROG
    message = " ".join(str(exc).split("\n"))
    print(f"{prefix}: {message}", file=sys.stderr)
    return EXIT_USAGE


# The commands that read a cluster when given no dump: as a kubectl plugin they read the one
# kubectl would (the current context of $KUBECONFIG or ~/.kube/config), as kubectl users expect.
CLUSTER_COMMANDS = ("inventory", "plan", "audit", "migrate")


# Set by the kubelet in every container (the API server's Service): the process runs in a pod.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


def in_pod(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs in a pod, where the service account's in-cluster config applies."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(IN_CLUSTER_ENV))


def default_kubeconfig(environ: Mapping[str, str] | None = None) -> str:
    """The kubeconfig kubectl reads: the first file of ``$KUBECONFIG``, else ~/.kube/config."""
    environ = os.environ if environ is None else environ
    for path in environ.get("KUBECONFIG", "").split(os.pathsep):
        if path:
            return path
    return os.path.join(os.path.expanduser("~"), ".kube", "config")


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kubectl-gpu_policy``: ``kubectl gpu-policy ...`` (krew's naming).

    As ``gpu-policy``, except that ``inventory``, ``plan``, ``audit`` and ``migrate`` read the
    current kubeconfig context when given neither ``--kubeconfig`` nor node or object dumps.
    In a pod with no kubeconfig file, ``audit`` uses the pod's service account, as kubectl
    does.
    """
    return main(argv, kubectl=True)


def main(argv: Sequence[str] | None = None, *, kubectl: bool = False) -> int:
    """Entry point of the ``gpu-policy`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (
        kubectl
        and args.command in CLUSTER_COMMANDS
        and not (args.kubeconfig or args.nodes or getattr(args, "objects", None))
    ):
        path = default_kubeconfig()
        # kubectl (client-go) falls back to the in-cluster config when no kubeconfig exists.
        if args.command != "audit" or os.path.isfile(path) or not in_pod():
            args.kubeconfig = path
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        return int(args.func(args))
    except UsageError as exc:
        return _error(exc, exc.command)
    except PolicyError as exc:
        return _error(exc)
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
