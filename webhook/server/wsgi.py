"""The WSGI app gunicorn runs, with the config of ``webhook.server.gunicorn_conf``::

    gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app

Each gunicorn worker imports this module (the app is not preloaded in the master), so every
worker loads the policy itself, reloads it and watches the cluster on its own (threads do not
survive a fork); the modules for that the master imported before the fork
(``gunicorn_conf.on_starting``). A policy that cannot be loaded, or a cluster configuration
that cannot be used, stops the worker with one log line naming the file, the field and the
reason; gunicorn then stops ("Worker failed to boot") instead of serving without a policy.
That holds at the server's start only: a worker started later serves the last good files the
master kept (``webhook.server.state.LastGoodFiles``).

``/readyz`` reports the certificate of ``webhook.server.gunicorn_conf``'s serving context:
gunicorn imported that config in the master before forking this worker, so the import below
finds the module, and the context the master loaded, already there.
"""

from __future__ import annotations

import logging

from cryptography import x509

from webhook.certs.manager import PublishedCACheck
from webhook.contract import CA_CERT_FILE
from webhook.policy import PolicyError
from webhook.server import gunicorn_conf
from webhook.server.app import create_app
from webhook.server.cluster import ClusterError
from webhook.server.gunicorn_conf import serving_context
from webhook.server.logs import configure_logging
from webhook.server.settings import CertManagerSettings, Settings

# gunicorn's exit status for a worker that cannot boot: the master stops rather than respawn.
WORKER_BOOT_ERROR = 3


def _served_certificate() -> x509.Certificate:
    """The certificate this worker serves now (after a change check of the files)."""
    reloader = serving_context()
    reloader.maybe_reload()
    return reloader.certificate


settings = Settings.from_env()
configure_logging(settings.log_level)
try:
    # Unready from SIGTERM on (webhook.server.shutdown), whatever the other checks say.
    ready_checks = [gunicorn_conf.shutdown_state.ready, serving_context().ready]
    cert_settings = CertManagerSettings.from_env()
    if cert_settings is not None:
        # Self-managed certificates: not ready until the API server would trust what is served.
        ready_checks.append(
            PublishedCACheck(cert_settings.tls_dir / CA_CERT_FILE, served=_served_certificate)
        )
    last_good = gunicorn_conf.last_good_files
    app = create_app(
        settings,
        ready_checks=ready_checks,
        last_good=last_good.texts if last_good is not None else None,
    )
except PolicyError as exc:
    logging.getLogger(__name__).critical("cannot load the policy: %s", exc)
    raise SystemExit(WORKER_BOOT_ERROR) from None
except ClusterError as exc:
    logging.getLogger(__name__).critical("cannot watch the cluster: %s", exc)
    raise SystemExit(WORKER_BOOT_ERROR) from None
