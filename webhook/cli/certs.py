"""``gpu-policy certs``: a CA and a serving certificate for the webhook (development, tests)."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.common import EXIT_OK
from webhook.contract import DEV_CERT_DIR


def add_parser(sub: Any) -> None:
    """Add the ``certs`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser("certs", help="make a CA and a serving certificate for the webhook")
    p.add_argument("--out", default=DEV_CERT_DIR, help="directory for ca.crt, tls.crt, tls.key")
    p.add_argument("--service", default="gpu-policy-webhook")
    p.add_argument("--namespace", default="gpu-policy")
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--if-missing", action="store_true", help="keep valid existing files")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the files (or keep valid ones with ``--if-missing``) and print their paths."""
    # cryptography is imported only when certificates are made.
    from webhook.certs.issue import write_certs

    paths = write_certs(
        args.out,
        service=args.service,
        namespace=args.namespace,
        days=args.days,
        if_missing=args.if_missing,
    )
    print(f"CA: {paths.ca_cert}\ncertificate: {paths.cert}\nkey: {paths.key}")
    return EXIT_OK
