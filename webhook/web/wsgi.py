"""The WSGI entry point: ``gunicorn -c python:webhook.web.gunicorn_conf webhook.web.wsgi:app``.

Each gunicorn worker imports this module (the app is not preloaded in the master), so every
worker loads the policy itself, reloads it and watches the cluster on its own (threads do not
survive a fork). A policy that cannot be loaded, or a cluster configuration that cannot be
used, stops the worker with one log line naming the file, the field and the reason; gunicorn
then stops ("Worker failed to boot") instead of serving without a policy.
"""

from __future__ import annotations

import logging
import os

from webhook.certs.manager import PublishedCACheck
from webhook.policy import PolicyError
from webhook.web.app import create_app
from webhook.web.cluster import ClusterError
from webhook.web.logs import configure_logging
from webhook.web.settings import Settings

# gunicorn's exit status for a worker that cannot boot: the master stops rather than respawn.
WORKER_BOOT_ERROR = 3

settings = Settings.from_env()
configure_logging(settings.log_level)
try:
    # Self-managed certificates: not ready until the API server would trust what is served.
    app = create_app(settings, ready_checks=PublishedCACheck.from_env(os.environ))
except PolicyError as exc:
    logging.getLogger(__name__).critical("cannot load the policy: %s", exc)
    raise SystemExit(WORKER_BOOT_ERROR) from None
except ClusterError as exc:
    logging.getLogger(__name__).critical("cannot watch the cluster: %s", exc)
    raise SystemExit(WORKER_BOOT_ERROR) from None
