"""Subcommands of ``gpu-policy`` beyond ``review``, each beside the code it drives.

Each entry takes the argparse sub-parsers object and adds one subcommand; imports happen
inside the handlers so that ``gpu-policy review`` never loads flask, gunicorn or kubernetes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

REGISTRY: list[Callable[[Any], None]] = []


def register(func: Callable[[Any], None]) -> Callable[[Any], None]:
    """Add a subcommand registrar to the CLI."""
    REGISTRY.append(func)
    return func


@register
def _certs(sub: Any) -> None:
    p = sub.add_parser("certs", help="make a CA and a serving certificate for the webhook")
    p.add_argument("--out", default="certs/dev", help="directory for ca.crt, tls.crt, tls.key")
    p.add_argument("--service", default="gpu-policy-webhook")
    p.add_argument("--namespace", default="gpu-policy")
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--if-missing", action="store_true", help="keep valid existing files")

    def run(args: argparse.Namespace) -> int:
        from webhook.tls import write_certs

        paths = write_certs(
            args.out,
            service=args.service,
            namespace=args.namespace,
            days=args.days,
            if_missing=args.if_missing,
        )
        print(f"CA: {paths.ca_cert}\ncertificate: {paths.cert}\nkey: {paths.key}")
        return 0

    p.set_defaults(func=run)
