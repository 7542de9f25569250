"""gunicorn configuration for the webhook: ``gunicorn -c python:webhook.server.gunicorn_conf APP``.

Settings come from the environment (docs/contracts.md); gunicorn command-line flags given
after ``-c`` override them. What matters and why:

* **gthread workers.** Sync workers close the connection after every response, so each
  admission request would pay a full TLS handshake; gthread keeps connections alive, which is
  how the API server talks to webhooks (bench/workers.py measures the difference). The worker
  class is gthread with the changes of ``webhook.server.worker``: connections that have
  answered go first and always have half of the threads, the thread that answered serves
  the connection's next request itself when it comes within 10 ms, and the reviews the API
  server sends are answered from the request's bytes without gunicorn's WSGI handling
  (docs/performance.md).
* **Slow clients cannot hold the threads.** gthread does a connection's TLS handshake and
  reads its request in a thread, with no time limit; a client sending a byte a second held
  a thread for good, and eight of them took the server off the air. Every connection is
  served with the socket class of ``webhook.certs.serving`` (set on the context the
  ``ssl_context`` hook returns): the whole handshake, and the whole of each request's headers
  and body, have a deadline (``GPU_POLICY_HANDSHAKE_TIMEOUT``, ``GPU_POLICY_READ_TIMEOUT``),
  after which the connection is closed and its thread freed. A connection that sends nothing
  never reaches a thread for long: gthread waits for its first byte, then parks it in its
  poller. Chosen over a worker of our own (an event loop doing handshakes and headers without
  threads) as the least code that bounds every way a connection holds a thread.
* **keepalive 100 s.** The API server's webhook client (Go net/http) closes connections idle
  for 90 s (IdleConnTimeout). The server must keep them longer than that: if the server
  closed first, the client could send a request on a connection that is being closed, and a
  POST that failed that way is not retried, so the admission call would fail.
* **Certificates reload without a restart.** gunicorn calls the ``ssl_context`` hook below
  for every connection it accepts (gunicorn 23-27, sync and gthread workers: ``TConn.init``
  and ``SyncWorker.accept`` call ``sock.ssl_wrap_socket``). The hook returns the context of
  one ``webhook.certs.serving.ReloadingSSLContext`` per process, which costs an ``os.stat``
  of the files at most once a second and rebuilds the context only when they changed. New
  connections get the new certificate; connections already open keep theirs (TLS does not
  change the certificate of a live connection), which is harmless while both are signed by
  the CA the API server trusts. The gevent and tornado workers build their context once per
  worker and would not reload: do not switch to them.
* **Self-managed certificates** (``GPU_POLICY_CERT_SECRET``): the master makes the files in
  ``on_starting`` and keeps them in step from a thread (``webhook.server.selfmanaged`` says why
  there); the reloading above serves what it writes.
* **Metrics of this server only.** Without ``PROMETHEUS_MULTIPROC_DIR`` the master makes a
  directory of its own and removes it at exit: two servers on one host never share one.
* **A worker imports nothing.** The master imports what the workers use before it forks them
  (the worker class imports the app; ``on_starting`` the cluster watch when there is one), so
  a worker, and every worker gunicorn restarts, starts on loaded modules. The app itself is
  still built in each worker (no ``preload_app``): the policy, the cluster watch and their
  threads are per worker (docs/server.md, "Starting a worker").
* **A bad policy edit never stops the server.** The master keeps the texts of the policy
  files (the policy, every file it names, the node dump) as they were when they last loaded
  (``webhook.server.state.LastGoodFiles``, followed from a thread that survives any error); a
  worker that gunicorn starts while the files are bad serves those instead of failing to
  boot, which would make gunicorn stop every worker.
* **Stopping fails no admission** (``webhook.server.shutdown``). On SIGTERM ``/readyz`` turns
  unready at once and the server keeps answering for ``GPU_POLICY_SHUTDOWN_DELAY`` seconds,
  every answer with ``Connection: close``, while endpoints drop the pod; then gunicorn's own
  graceful stop: listeners closed, requests in flight finished (``graceful_timeout``,
  ``GPU_POLICY_DRAIN_TIMEOUT``). The chart's terminationGracePeriodSeconds covers both.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.certs.issue import TLSError
from webhook.certs.manager import CertManager
from webhook.certs.serving import ClientDeadlines, ReloadingSSLContext
from webhook.contract import METRICS_DIR_ENV
from webhook.server.settings import CertManagerSettings, Settings
from webhook.server.shutdown import ShutdownState, close_after_answer, delay_sigterm
from webhook.server.state import LastGoodFiles

CERT_CHECK_INTERVAL = 1.0  # seconds between two os.stat checks of the TLS files


def private_metrics_dir() -> Path:
    """A new metrics directory for this server alone, removed when the master exits.

    One fixed default directory would be shared by every server on the host, and each new
    server wipes it at start (below): a second server would silently reset the first one's
    counters. The workers are forks of the master and inherit the exit handler, so only the
    process that made the directory removes it. A new master after a USR2 re-exec gets its own:
    gunicorn gives it the environment from before this module set the variable.
    """
    path = Path(tempfile.mkdtemp(prefix="gpu-policy-metrics-"))
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path


settings = Settings.from_env()
cert_settings = CertManagerSettings.from_env()

# prometheus_client decides at import time, from this variable, to keep its metrics in files
# shared by the workers. Set it before any worker imports it, and make sure it exists. The
# chart and the image give a directory of their own; without the variable, the server makes a
# private one.
metrics_dir = settings.metrics_dir or private_metrics_dir()
os.environ[METRICS_DIR_ENV] = str(metrics_dir)
metrics_dir.mkdir(parents=True, exist_ok=True)

# Mapped here, in the master, before any worker is forked: they all share it.
shutdown_state = ShutdownState()

# --- gunicorn settings (module-level names gunicorn reads) ----------------------------------

bind = [settings.bind]
workers = settings.workers
worker_class = "webhook.server.worker.ReviewWorker"
threads = settings.threads
keepalive = 100
# The API server gives up on a webhook after timeoutSeconds (at most 30 s); a worker silent
# for longer than that is stuck and is restarted.
timeout = 30
# In-flight reviews finish once the shutdown delay is over. The chart sets the pod's
# terminationGracePeriodSeconds above delay + this, so the kubelet never SIGKILLs a worker
# mid-request.
graceful_timeout = round(settings.drain_timeout)  # gunicorn takes whole seconds
# Admission requests are a POST to a short path with a handful of headers; the body is not
# limited here (the app answers 413 for a body that is too large).
limit_request_line = 2048
limit_request_fields = 50
limit_request_field_size = 8190
proc_name = "gpu-policy-webhook"
# The heartbeat file of each worker: on tmpfs when there is one, so a slow disk cannot make a
# worker look dead (containers get /dev/shm by default). gunicorn creates the file with
# mkstemp and unlinks it at once: no predictable name, nothing left behind.
_SHM = "/dev/shm"  # noqa: S108  # nosec B108
worker_tmp_dir = _SHM if os.path.isdir(_SHM) else None
# gunicorn 25+ opens a control socket in $HOME or $XDG_RUNTIME_DIR; a read-only container
# has neither, and nothing here uses it.
control_socket_disable = True
# TLS: the files must exist at start (gunicorn checks), the ssl_context hook serves them.
certfile = str(settings.cert_file)
keyfile = str(settings.key_file)
# Logging: the app logs one line per review, so no access log; errors to stderr.
accesslog = None
errorlog = "-"
loglevel = settings.log_level


# --- the serving context ---------------------------------------------------------------------

_reloader: ReloadingSSLContext | None = None


def serving_context() -> ReloadingSSLContext:
    """This process's reloading context, loaded on first use.

    The master loads it in ``on_starting`` (a bad certificate stops the server at start);
    the workers inherit that object when they fork and each follows the files on its own.
    ``webhook.server.wsgi`` hands it to the app's ``/readyz``.
    """
    global _reloader  # noqa: PLW0603 - one serving context per process
    if _reloader is None:
        _reloader = ReloadingSSLContext(
            settings.cert_file,
            settings.key_file,
            client_ca_file=settings.client_ca,
            check_interval=CERT_CHECK_INTERVAL,
            deadlines=ClientDeadlines(settings.handshake_timeout, settings.read_timeout),
        )
    return _reloader


# --- hooks -----------------------------------------------------------------------------------

_PROMETHEUS_FILE = re.compile(r"^[a-z_]+_\d+\.db$")

_cert_manager: CertManager | None = None
# Set in the master; a worker reads the texts it inherited when it was forked.
last_good_files: LastGoodFiles | None = None
_stop_following = threading.Event()


def on_starting(server: Any) -> None:
    """Master, before binding: the modules the workers will import, certificates (made first
    when self-managed), stale metrics."""
    global _cert_manager, last_good_files  # noqa: PLW0603 - one of each per master
    # Before any thread of the master starts. The app is already imported (the worker class
    # imports it); what is left for a worker is watching the cluster.
    if settings.watches_cluster:
        from webhook.server.cluster import import_watch_modules

        import_watch_modules()
    last_good_files = LastGoodFiles(settings, report=server.log.error, note=server.log.info)
    if cert_settings is not None:
        from webhook.server.selfmanaged import start_in_master

        _cert_manager = start_in_master(cert_settings, server.log)
    try:
        reloader = serving_context()
    except TLSError as e:
        # gunicorn prints a RuntimeError as one line and exits 1.
        raise RuntimeError(f"TLS: {e}") from e
    status = reloader.status()
    # webhook.certs.serving logs through the app's logging setup, which the master does not have:
    # say what is served through gunicorn's own logger.
    server.log.info(
        "TLS: serving %s (serial %x), reloaded when it changes", reloader.cert_file, status.serial
    )
    if not status.valid:
        # Start anyway: /readyz stays 503 until a renewed certificate is picked up.
        server.log.warning("TLS: %s", status.reason)
    if settings.client_ca is not None:
        server.log.info("TLS: clients must present a certificate signed by %s", settings.client_ca)
    # Files of a previous run (the emptyDir survives container restarts) would add dead
    # processes' counters to ours. prometheus_client asks for the directory to be wiped
    # before start; only its own file names are removed.
    for path in metrics_dir.iterdir():
        if _PROMETHEUS_FILE.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)


def when_ready(server: Any) -> None:
    """Master, bound and about to start the workers: file following, certificate rounds."""
    delay_sigterm(server, shutdown_state, settings.shutdown_delay, log=server.log.info)
    if last_good_files is not None:
        last_good_files.follow(_stop_following)
    if _cert_manager is not None:
        _cert_manager.start()


def on_exit(server: Any) -> None:
    """Master, stopping: let a certificate round in progress finish."""
    _stop_following.set()
    if _cert_manager is not None:
        _cert_manager.stop()


def ssl_context(
    config: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]
) -> ssl.SSLContext:
    """gunicorn hook, called for every accepted connection: the current server context.

    ``default_ssl_context_factory`` (gunicorn's own context from certfile/keyfile) is not
    used: ours has the cipher policy, the optional client CA, and follows the files.
    """
    return serving_context().context()


def pre_request(worker: Any, req: Any) -> None:
    """Worker, before each request: while stopping, answer it and close the connection."""
    close_after_answer(shutdown_state, req)


def child_exit(server: Any, worker: Any) -> None:
    """Master, after a worker exited: drop its live gauges from the shared metrics."""
    from prometheus_client import multiprocess

    # prometheus_client ships py.typed but leaves this function unannotated.
    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
