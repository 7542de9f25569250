"""The gpu-policy command: the parser of every subcommand, and the entry points.

Each command is a module of this package with ``add_parser(sub)``, which adds its subcommand
and sets ``func`` to the function that runs it and returns the exit code (``common``: exit
codes, ``UsageError``, colour, the kubeconfig). The commands import flask, gunicorn and
kubernetes only inside those functions, so that ``gpu-policy review`` loads none of them.
This module imports every command; no command imports it, nor another command.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from webhook import __version__
from webhook.cli import audit, certs, inventory, plan, review, serve, test
from webhook.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    UsageError,
    default_kubeconfig,
    in_pod,
    print_error,
)
from webhook.policy import PolicyError

DESCRIPTION = (
    "The gpu-policy command: review manifests offline, make certificates, serve, and more."
)

# The commands that read a cluster when given no dump: as a kubectl plugin they read the one
# kubectl would (the current context of $KUBECONFIG or ~/.kube/config), as kubectl users expect.
CLUSTER_COMMANDS = ("inventory", "plan", "audit")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (review, certs, inventory, plan, audit, serve, test):
        command.add_parser(sub)
    return parser


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kubectl-gpu_policy``: ``kubectl gpu-policy ...`` (krew's naming).

    As ``gpu-policy``, except that ``inventory``, ``plan`` and ``audit`` read the current
    kubeconfig context when given neither ``--kubeconfig`` nor node or object dumps. In a pod
    with no kubeconfig file, ``audit`` uses the pod's service account, as kubectl does.
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
        return print_error(exc, exc.command)
    except PolicyError as exc:
        return print_error(exc)
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
