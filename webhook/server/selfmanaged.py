"""The self-managed certificate mode in the server: where the manager runs, and its first round.

The manager (``webhook.certs.manager``) runs in the **gunicorn master**, as one thread:

* one manager per pod, whatever the number of workers: one set of API calls and one writer of
  the files per pod, and the files are per pod anyway (the workers all serve them);
* the master lives as long as the pod and never serves a request, so a slow API call never
  delays a review, and a worker restarted by gunicorn does not restart the manager;
* the first round runs in ``on_starting``, before gunicorn binds or forks: gunicorn refuses to
  start without the certificate files, so they must exist by then. Later rounds run in the
  thread every ``GPU_POLICY_CERT_INTERVAL`` seconds (see ``CertManager.start`` for how forks
  and the thread keep out of each other's way).

At the first start the API server may not answer yet (a cluster coming up, a network policy
being applied). The first round is then tried again with a growing pause (1 s doubling to
30 s), each failure logged in one line with the API server's address and the error; the
server starts as soon as a round made the certificate. Only a refusal (401, 403) stops it,
with what the service account needs: an API server that is not reached is not an RBAC
problem. With certificate files from an earlier run already there, it serves those meanwhile.

Not in ``gpu-policy serve`` itself: it replaces itself with gunicorn (so that gunicorn gets the
kubelet's signals), and a thread would not survive that. Not in the workers: each would repeat
the same calls, and a manager that only lives as long as a worker would rerun its first round
on every worker restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from webhook.certs.manager import CertManager, Round
from webhook.contract import TLS_CERT_FILE, TLS_KEY_FILE
from webhook.files import one_line
from webhook.server.settings import CertManagerSettings

__all__ = ["start_in_master"]

#: Pauses between first rounds while the API server is not reached: 1 s, doubling, at most 30 s.
FIRST_PAUSE = 1.0
MAX_PAUSE = 30.0

#: Loggers of the manager; in the master they write through gunicorn's error log.
LOGGERS = ("webhook.certs", "webhook.kube.certs")


def _log_through(gunicorn_logger: Any) -> None:
    """Send the manager's log lines to gunicorn's error log (the master has no other set-up)."""
    error_log = gunicorn_logger.error_log
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = list(error_log.handlers)
        logger.setLevel(error_log.level)
        logger.propagate = False


def start_in_master(settings: CertManagerSettings, gunicorn_logger: Any) -> CertManager:
    """Build the manager and run its first round; the thread is started by ``start()``.

    Raises RuntimeError (gunicorn prints it as one line and exits) when the first round fails
    and no certificate files are there to serve meanwhile.
    """
    from webhook.kube import load_client
    from webhook.kube.certs import ApiRefused, KubeCertStore

    _log_through(gunicorn_logger)
    namespace, name = settings.secret
    try:
        api_client = load_client(settings.kube)
    except Exception as exc:  # ConfigException, OSError: the same one-line answer
        raise RuntimeError(
            f"certificates: cannot reach the cluster ({settings.kube}): {exc}"
        ) from exc
    store = KubeCertStore(
        api_client,
        secret=settings.secret,
        mutating=settings.mutating,
        validating=settings.validating,
    )
    manager = CertManager(
        store,
        service=settings.service,
        tls_dir=settings.tls_dir,
        interval=settings.interval,
        name=store.label,
    )
    files = [settings.tls_dir / TLS_CERT_FILE, settings.tls_dir / TLS_KEY_FILE]
    first = first_round(
        manager.run_once,
        address=api_client.configuration.host,
        have_files=lambda: all(f.is_file() for f in files),
        refused=lambda exc: isinstance(exc, ApiRefused) and exc.status in (401, 403),
        log=gunicorn_logger,
        rbac=(
            f"The service account needs get, create and update on Secret {namespace}/{name} "
            "and get and patch on the webhook configurations (the chart's RBAC in "
            "certificates.mode=selfManaged)"
        ),
    )
    if first is None:
        return manager
    gunicorn_logger.info(
        "certificates: managed in %s, rounds every %g s; %d CA(s) trusted by every webhook "
        "configuration",
        store.label,
        settings.interval,
        first.trusted,
    )
    return manager


def first_round(
    run: Callable[[], Round],
    *,
    address: str,
    have_files: Callable[[], bool],
    refused: Callable[[Exception], bool],
    log: Any,
    rbac: str,
    sleep: Callable[[float], None] = time.sleep,
) -> Round | None:
    """The first round, tried until it makes the certificate (see the module's docstring).

    Returns the round, or None when it failed but files from an earlier run are served
    meanwhile. Raises RuntimeError (one line) when the API server refuses.
    """
    pause = FIRST_PAUSE
    while True:
        try:
            return run()
        except Exception as exc:
            reason = one_line(getattr(exc, "reason", None) or exc)
            if refused(exc):
                raise RuntimeError(f"certificates: {reason}. {rbac}") from exc
            if have_files():
                log.warning(
                    "certificates: %s; serving the files already there until a round succeeds",
                    reason,
                )
                return None
            log.error(
                "certificates: the API server at %s does not answer (%s); no certificate yet, "
                "trying again in %g s",
                address,
                reason,
                pause,
            )
        sleep(pause)
        pause = min(pause * 2, MAX_PAUSE)
