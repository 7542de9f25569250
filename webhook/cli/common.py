"""What every ``gpu-policy`` command shares: exit codes, the one-line error, colour, warnings,
and where a command finds the cluster (kubeconfig, the pod it runs in, ``--nodes`` dumps).

Exit codes: 0 success (all allowed, every case passed), 1 something was denied or a check
failed, 2 a usage or file error, always with a one-line message and never a traceback.

The commands import this module and ``render``, never ``main`` nor each other (``make arch``):
``main`` imports every command to build the parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from webhook.policy import Policy, PolicyError

if TYPE_CHECKING:  # kubernetes is imported only when a command reads a cluster
    from webhook.kube import ClusterState
    from webhook.kube.snapshot import LiveView

PROG = "gpu-policy"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
COLOUR_CHOICES = ("auto", "always", "never")

# Set by the kubelet in every container (the API server's Service): the process runs in a pod.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


class UsageError(Exception):
    """A problem the user fixes on the command line or in a file: exit 2, one line.

    ``command`` names the subcommand in the message (``gpu-policy test: ...``) when the
    problem belongs to its options rather than to a file.
    """

    def __init__(self, message: str, *, command: str = "") -> None:
        """Keep the message and the subcommand it belongs to."""
        super().__init__(message)
        self.command = command


def print_error(exc: Exception, command: str = "") -> int:
    """The error on stderr, one line per problem (a file with several mistakes is told about
    each on its own line, docs/diagnostics.md), and the exit code for it."""
    prefix = f"{PROG} {command}" if command else PROG
    problems = [str(d) for d in exc.diagnostics] if isinstance(exc, PolicyError) else [str(exc)]
    for problem in problems:
        message = " ".join(problem.split("\n"))
        print(f"{prefix}: {message}", file=sys.stderr)
    return EXIT_USAGE


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


def cluster_arguments(p: Any, *, required: bool) -> None:
    """Where the cluster comes from: a live API server or a node dump, and the policy."""
    source = p.add_mutually_exclusive_group(required=required)
    source.add_argument("--kubeconfig", help="read the live cluster (a kubeconfig path)")
    source.add_argument("--nodes", help="a node dump (kubectl get nodes -o yaml)")
    p.add_argument("--policy", help="policy file; default: the bundled example")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the cluster")


def read_cluster(policy: Policy, args: argparse.Namespace) -> tuple[LiveView, ClusterState]:
    """The live view and snapshot for ``--kubeconfig``; a refused ConfigMap is warned about."""
    from webhook.kube.snapshot import read_cluster as read_live

    found = read_live(policy, args.kubeconfig, timeout=args.timeout)
    if found is None:
        raise PolicyError(args.kubeconfig, "", f"the cluster did not answer in {args.timeout:g} s")
    view, state = found
    if view.configmap_error:
        print(f"warning: device-plugin ConfigMap refused: {view.configmap_error}", file=sys.stderr)
    return view, state
