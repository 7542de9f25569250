"""gunicorn as the tests and benchmarks run it: our config, real TLS, a free loopback port.

:func:`start` runs ``gunicorn -c python:webhook.server.gunicorn_conf APP`` (the webhook by
default; ``stand_in`` below, or a benchmark's app) as a separate process, configured only
through the environment variables of docs/contracts.md, with its output in a log file, and
waits until it answers ``/healthz`` over TLS and every worker is up. Clients verify the server
against the CA and keep their connections alive, as the API server does.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.procs import children, terminate
from tests.support.waiting import wait_until
from webhook.certs.issue import CertPaths
from webhook.contract import (
    BIND_ENV,
    LOG_LEVEL_ENV,
    METRICS_DIR_ENV,
    THREADS_ENV,
    TLS_DIR_ENV,
    WORKERS_ENV,
)
from webhook.server import GUNICORN_CONFIG, WSGI_APP

REPO = Path(__file__).resolve().parents[2]
GUNICORN = str(Path(sys.executable).parent / "gunicorn")
# The app that answers with its worker's pid (see stand_in).
STAND_IN = "tests.support.gunicorn:stand_in"
#: What a worker watching a cluster logs once it serves its first snapshot of it, i.e. turns
#: ready (webhook.server.cluster, ClusterFeed.on_snapshot).
CLUSTER_READY = r"webhook\.server\.cluster: cluster \(.*\) listed, \d+ nodes: ready"
#: How long a server may take to answer: generous, as a deadline, not a measure. A worker
#: imports the app and lists the cluster first; on two cores shared with the run's control
#: planes, the image build and the other checks, that took over 30 s.
START_TIMEOUT = 120.0


class ServerDidNotStart(RuntimeError):
    """The server exited, or did not answer in time; the message has its log."""


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def argv(app: str = WSGI_APP, *options: str) -> list[str]:
    """``gunicorn -c GUNICORN_CONFIG OPTIONS APP``, with the gunicorn beside this Python."""
    return [GUNICORN, "-c", GUNICORN_CONFIG, *options, app]


def server_env(
    tmp: Path,
    port: int,
    tls_dir: Path,
    *,
    workers: int = 2,
    threads: int = 2,
    log_level: str = "info",
    **extra: str,
) -> dict[str, str]:
    """This process's environment without our variables, then the server's settings.

    Metrics go to ``tmp/metrics``; ``extra`` adds or overrides variables.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPU_POLICY_") and k != METRICS_DIR_ENV
    }
    env.update(
        {
            "PYTHONPATH": str(REPO),  # the stand-in apps live in the repository
            BIND_ENV: f"127.0.0.1:{port}",
            TLS_DIR_ENV: str(tls_dir),
            WORKERS_ENV: str(workers),
            THREADS_ENV: str(threads),
            LOG_LEVEL_ENV: log_level,
            METRICS_DIR_ENV: str(tmp / "metrics"),
        }
    )
    env.update(extra)
    return env


def client_context(
    ca_file: Path,
    *,
    cert: tuple[Path, Path] | None = None,
    max_version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A client context trusting ``ca_file``, presenting ``cert`` (certificate, key) if given."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    if max_version is not None:
        ctx.maximum_version = max_version
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


@dataclass
class Server:
    """A gunicorn process and how to talk to it."""

    proc: subprocess.Popen[bytes]
    port: int
    context: ssl.SSLContext
    log_file: Path

    def connect(
        self, context: ssl.SSLContext | None = None, timeout: float = 10
    ) -> http.client.HTTPSConnection:
        """A new (not yet opened) connection, with the server's client context by default."""
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=context or self.context, timeout=timeout
        )

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_file.read_text(errors="replace")

    def workers(self) -> list[int]:
        """The worker pids, sorted."""
        return sorted(children(self.proc.pid))

    def logged_by(self, pattern: str) -> set[int]:
        """The processes whose log has a line matching ``pattern`` after its ``[pid] ``."""
        return {int(pid) for pid in re.findall(rf"\[(\d+)\] {pattern}", self.log())}

    def cluster_ready(self, workers: int) -> bool:
        """Whether ``workers`` workers run and each has served its first cluster snapshot.

        Each worker lists the cluster on its own, and one worker may win every accept(): a
        200 from ``/readyz`` speaks for one worker only, so this reads what each logged.
        """
        pids = self.workers()
        return len(pids) == workers and set(pids) <= self.logged_by(CLUSTER_READY)

    def metric(self, name: str, **labels: str) -> float:
        """The sum over the workers of one metric's samples with these labels (from /metrics)."""
        status, text = self.get("/metrics")
        assert status == 200, text
        return metric_total(text, name, **labels)

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` on a connection of its own: (status, body)."""
        conn = self.connect()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()


def launch(
    command: list[str], tmp: Path, env: Mapping[str, str], context: ssl.SSLContext, port: int
) -> Server:
    """Start ``command`` with ``env``, to listen on ``port``; do not wait for it."""
    log_file = tmp / f"server-{uuid.uuid4().hex[:8]}.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Server(proc, port, context, log_file)


def wait_until_serving(
    server: Server, *, workers: int | None, timeout: float = START_TIMEOUT
) -> None:
    """Until ``/healthz`` answers 200 and ``workers`` workers (when given) are up."""
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None:
            raise ServerDidNotStart(
                f"the server exited with {server.proc.returncode}:\n{server.log()}"
            )
        try:
            if server.get("/healthz")[0] == 200 and (
                workers is None or len(server.workers()) == workers
            ):
                return
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise ServerDidNotStart(f"the server did not start in {timeout} s:\n{server.log()}")
        time.sleep(0.1)


def stop(server: Server, timeout: float = 30) -> None:
    """SIGTERM and wait (SIGKILL if it hangs)."""
    terminate(server.proc, timeout)


def start(
    tmp: Path,
    certs: CertPaths,
    *,
    app: str = WSGI_APP,
    options: Iterable[str] = (),
    workers: int = 2,
    threads: int = 2,
    log_level: str = "info",
    client_cert: tuple[Path, Path] | None = None,
    tls_dir: Path | None = None,
    **extra: str,
) -> Server:
    """gunicorn serving ``app`` on a free port with ``certs`` (or ``tls_dir``), once it serves.

    Clients trust ``certs``'s CA and present ``client_cert`` when given; ``extra`` adds
    environment variables. Raises ServerDidNotStart (the server stopped) when it does not.
    """
    port = free_port()
    env = server_env(
        tmp,
        port,
        tls_dir or certs.directory,
        workers=workers,
        threads=threads,
        log_level=log_level,
        **extra,
    )
    context = client_context(certs.ca_cert, cert=client_cert)
    server = launch(argv(app, *options), tmp, env, context, port)
    try:
        wait_until_serving(server, workers=workers)
    except BaseException:
        stop(server)
        raise
    return server


@contextmanager
def running(tmp: Path, certs: CertPaths, **kwargs: Any) -> Iterator[Server]:
    """:func:`start` for the length of a ``with`` block, then :func:`stop`."""
    server = start(tmp, certs, **kwargs)
    try:
        yield server
    finally:
        stop(server)


def metric_total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` with these ``labels`` in a Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def stand_in(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """An app standing in for the webhook, to test what the gunicorn config does.

    200 with the worker's pid for any path; ``/slow`` touches a file in ``$TEST_MARK_DIR``
    when it arrives, then waits until the file ``$TEST_RELEASE_FILE`` exists (a minute at
    most: the test lets it go), or 1 s without that variable; ``/tls`` reports the
    certificate the worker serves:
    what ``webhook.server.wsgi`` hands to ``/readyz``, the serving context of the gunicorn
    config, which gunicorn imported in the master before forking this worker.
    """
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    doc: dict[str, Any] = {"pid": os.getpid()}
    if environ["PATH_INFO"] == "/slow":
        mark_dir = os.environ.get("TEST_MARK_DIR")
        if mark_dir:  # tell the test the request arrived
            Path(mark_dir, f"{os.getpid()}-{threading.get_ident()}").touch()
        release = os.environ.get("TEST_RELEASE_FILE")
        if release:  # in flight until the test says, whatever the machine's speed
            wait_until(lambda: os.path.exists(release), timeout=60, poll=0.02)
        else:
            time.sleep(1.0)
    elif environ["PATH_INFO"] == "/tls":
        conf = sys.modules.get("webhook.server.gunicorn_conf")
        doc["registered"] = conf is not None
        if conf is not None:
            status = conf.serving_context().status()
            doc.update(valid=status.valid, serial=status.serial, reason=status.reason)
    body = json.dumps(doc).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
