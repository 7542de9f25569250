"""``gpu-policy serve``: check the settings, then become gunicorn serving the webhook.

The command turns its flags into the environment variables of docs/contracts.md (flags win
over variables already set), loads the policy once so that a bad file is reported as one line
(file, field, reason) before anything starts, checks that the certificate files exist, and
replaces itself (``os.execvpe``) with::

    gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app

so that gunicorn is the container's main process and gets the kubelet's signals directly.
``--dev`` (what ``make run`` uses) serves the bundled example policy on 127.0.0.1:8443 with the
certificates of ``--cert-dir`` and prints a ready-to-paste ``curl`` command first.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from webhook.cli.common import UsageError
from webhook.contract import (
    BIND_ENV,
    CA_CERT_FILE,
    CERT_SECRET_ENV,
    DEFAULT_KUBE,
    DEV_BIND,
    DEV_CERT_DIR,
    KUBE_ENV,
    NODES_ENV,
    POLICY_FILE_ENV,
    THREADS_ENV,
    TLS_DIR_ENV,
    WORKERS_ENV,
)
from webhook.server import GUNICORN_CONFIG, WSGI_APP, CertManagerSettings, Settings

EXAMPLE_REQUEST = "examples/admissionreview-gpu-pod.json"
DENIED_REQUEST = "examples/admissionreview-gpu-pod-denied.json"


def add_parser(sub: Any) -> None:
    """Add the ``serve`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser(
        "serve",
        help="serve the admission webhook over HTTPS (gunicorn)",
        description="Serve the admission webhook: check the settings and the policy, then run "
        "gunicorn with webhook.server.gunicorn_conf.",
    )
    p.add_argument(
        "--dev",
        action="store_true",
        help=f"local development: bundled example policy, {DEV_BIND}, "
        f"certificates from --cert-dir (default {DEV_CERT_DIR}), no cluster watch",
    )
    p.add_argument("--cert-dir", help=f"directory with tls.crt and tls.key (sets {TLS_DIR_ENV})")
    p.add_argument("--bind", metavar="HOST:PORT", help=f"listen address (sets {BIND_ENV})")
    p.add_argument("--policy", metavar="FILE", help=f"policy file (sets {POLICY_FILE_ENV})")
    p.add_argument(
        "--nodes", metavar="FILE", help=f"node dump used as the inventory (sets {NODES_ENV})"
    )
    p.add_argument("--workers", type=int, help=f"gunicorn workers (sets {WORKERS_ENV})")
    p.add_argument("--threads", type=int, help=f"threads per worker (sets {THREADS_ENV})")
    p.set_defaults(func=run)


def server_env(args: argparse.Namespace, base: Mapping[str, str]) -> dict[str, str]:
    """The environment gunicorn gets: ``base`` with the flags applied."""
    env = dict(base)
    if args.dev:
        # The bundled example, unless --policy names another file; no cluster to watch.
        env.pop(POLICY_FILE_ENV, None)
        env.pop(NODES_ENV, None)
        env.pop(CERT_SECRET_ENV, None)  # the certificates of --cert-dir, not a cluster's
        env[KUBE_ENV] = DEFAULT_KUBE
        env[BIND_ENV] = DEV_BIND
        env[TLS_DIR_ENV] = DEV_CERT_DIR
    _set(env, TLS_DIR_ENV, args.cert_dir)
    _set(env, BIND_ENV, args.bind)
    _set(env, POLICY_FILE_ENV, args.policy)
    _set(env, NODES_ENV, args.nodes)
    _set(env, WORKERS_ENV, None if args.workers is None else str(args.workers))
    _set(env, THREADS_ENV, None if args.threads is None else str(args.threads))
    return env


def _set(env: MutableMapping[str, str], name: str, value: str | None) -> None:
    if value is not None:
        env[name] = value


def gunicorn_argv() -> list[str]:
    """The command that starts gunicorn: the one beside this Python, else ``python -m``."""
    beside = Path(sys.executable).parent / "gunicorn"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside), "-c", GUNICORN_CONFIG, WSGI_APP]
    return [sys.executable, "-m", "gunicorn", "-c", GUNICORN_CONFIG, WSGI_APP]


def curl_command(
    env: Mapping[str, str], request_file: str = EXAMPLE_REQUEST, endpoint: str = "mutate"
) -> str:
    """A curl command that sends an example AdmissionReview to the server ``env`` describes."""
    bind = env.get(BIND_ENV, DEV_BIND)
    host, _, port = bind.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):  # noqa: S104 - comparing, not binding
        host = "127.0.0.1"
    ca = Path(env.get(TLS_DIR_ENV, DEV_CERT_DIR)) / CA_CERT_FILE
    return (
        f"curl --cacert {ca} -H 'Content-Type: application/json' "
        f"--data @{request_file} https://{host}:{port}/{endpoint}"
    )


def run(args: argparse.Namespace) -> int:
    """Check the settings and the policy, then exec gunicorn (does not return on success).

    A problem is one line on stderr and exit status 2 (a bad policy file raises PolicyError,
    which the CLI prints the same way).
    """
    from webhook.server.state import load_snapshot

    env = server_env(args, os.environ)
    try:
        settings = Settings.from_env(env)
        certs = CertManagerSettings.from_env(env)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # A bad policy raises PolicyError here: the CLI prints it as one line and exits 2.
    snapshot = load_snapshot(settings)
    if settings.watches_cluster:
        from webhook.kube import load_client

        try:
            load_client(settings.kube).close()  # type: ignore[no-untyped-call]
        except Exception as exc:  # ConfigException, OSError, ...: the same one-line answer
            raise UsageError(f"{KUBE_ENV}={settings.kube}: {exc}") from None
    # Self-managed certificates: gunicorn's master makes the files before it binds
    # (webhook.server.selfmanaged), with the service account when no cluster is watched.
    if certs is not None and certs.kube != settings.kube:
        from webhook.kube import load_client

        try:
            load_client(certs.kube).close()  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise UsageError(
                f"{CERT_SECRET_ENV}: cannot reach the cluster ({certs.kube}): {exc}"
            ) from None
    missing = [
        f.name for f in (settings.cert_file, settings.key_file) if certs is None and not f.is_file()
    ]
    if missing:
        hint = f"; make them with: gpu-policy certs --out {settings.tls_dir}" if args.dev else ""
        raise UsageError(f"{settings.tls_dir}: no {' or '.join(missing)}{hint}")
    print(
        f"gpu-policy: serving policy {snapshot.policy.name} ({snapshot.policy.source}) on "
        f"https://{settings.bind}"
    )
    if args.dev:
        print("try it:")
        print(f"  {curl_command(env)}")
        print(f"  {curl_command(env, DENIED_REQUEST, 'validate')}")
    sys.stdout.flush()
    argv = gunicorn_argv()
    # Replacing this process is the point: gunicorn gets the signals. argv is ours, no shell.
    os.execvpe(argv[0], argv, env)  # noqa: S606  # nosec B606
    return 0  # not reached
