"""The ``gpu-policy`` command: review manifests offline, make certificates, serve, and more.

Exit codes: 0 success (all allowed), 1 something was denied or a check failed, 2 usage or
file errors, always with a one-line message and never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from webhook import __version__
from webhook.files import Document, kubernetes_objects, load_inventory, load_policy, read_text
from webhook.policy import PolicyError, review
from webhook.review_report import json_report, text_report, yaml_report

log = logging.getLogger("gpu-policy")
EXIT_OK, EXIT_DENIED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A problem the user fixes on the command line or in a file: exit 2, one line."""


def _objects(path: str) -> list[Document]:
    """The objects of a manifest file, or of stdin for ``-``."""
    if path == "-":
        return kubernetes_objects(sys.stdin.read(), source="<stdin>")
    return kubernetes_objects(read_text(path), source=path)


def cmd_review(args: argparse.Namespace) -> int:
    """``gpu-policy review``: judge manifests offline with the same engine as the server."""
    policy = load_policy(args.policy)
    inventory = load_inventory(policy, args.nodes)
    pairs = []
    for path in args.files:
        for _, obj in _objects(path):
            decision = review(
                obj,
                policy=policy,
                inventory=inventory,
                operation=args.operation,
                namespace=args.namespace,
            )
            pairs.append((obj, decision))
    decisions = [d for _, d in pairs]
    if args.output == "json":
        print(json_report(decisions))
    elif args.output == "yaml":
        print(yaml_report(decisions), end="")
    else:
        colour = args.colour == "always" or (args.colour == "auto" and sys.stdout.isatty())
        print(text_report(pairs, colour=colour), end="")
        denied = sum(not d.allowed for d in decisions)
        print(f"{len(decisions)} reviewed, {denied} denied")
        print(f"policy: {policy.source}; inventory: {inventory.source}")
    return EXIT_DENIED if any(not d.allowed for d in decisions) else EXIT_OK


def _add_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--policy",
        help="policy file (SharingPolicy, device-plugin ConfigMap or config file); "
        "default: the bundled example",
    )
    p.add_argument("--nodes", help="node dump (kubectl get nodes -o yaml) to use as the inventory")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="gpu-policy", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"gpu-policy {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("review", help="review manifests offline", description=cmd_review.__doc__)
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="manifests (multi-document YAML); - reads stdin",
    )
    _add_policy_args(p)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--operation", default="CREATE", choices=("CREATE", "UPDATE"))
    p.add_argument("-n", "--namespace", help="namespace for objects that name none")
    p.add_argument("--colour", "--color", choices=("auto", "always", "never"), default="auto")
    p.set_defaults(func=cmd_review)

    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable[[Any], None]]:
    """Subcommands that live beside their subsystem (certs, serve, inventory, test)."""
    from webhook import commands

    return commands.REGISTRY


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpu-policy`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        return int(args.func(args))
    except (PolicyError, UsageError) as exc:
        print(f"gpu-policy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
