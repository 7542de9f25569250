"""Replicas of the webhook in the self-managed certificate mode, and clients that trust only
what the webhook configurations publish: shared by tests/system/robustness/test_robust_cert_replicas.py
and bench/reliability.py.

:class:`Replicas` starts and restarts webhook servers like pods (a new TLS folder each time, as
a new pod gets a new emptyDir). :class:`Handshakes` does what the API server does: it reads the
caBundle of both configurations, trusts only what every one of them holds, and connects to
every replica that is ready (only ready pods are a Service's endpoints), sending a review on
each connection. :class:`Gate` is a TCP forwarder to the API server that refuses connections
until it is opened.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from collections import Counter
from pathlib import Path

from tests.objects import ctr, pod, review
from tests.support.controlplane import ControlPlane
from tests.support.gunicorn import (
    Server,
    argv,
    free_port,
    launch,
    server_env,
    stop,
    wait_until_serving,
)
from tests.support.procs import terminate_all
from webhook.certs import trust

#: A review of a pod without GPUs: the webhook lets it through unchanged.
REVIEW = json.dumps(review(pod(ctr("c", image="i")), namespace="default")).encode()


def insecure() -> ssl.SSLContext:
    """For /healthz and /readyz only: the probes, like the kubelet's, verify nothing."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Replicas:
    """Webhook servers in the self-managed mode, started and restarted like pods."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, env
        self.servers: list[Server] = []
        self._made = 0

    def start(self) -> Server:
        """A new replica: a new TLS folder, a new port."""
        self._made += 1
        folder = self.tmp / f"pod-{self._made}"
        folder.mkdir()
        port = free_port()
        env = server_env(folder, port, folder / "tls", workers=1, threads=2, **self.env)
        server = launch(argv(), folder, env, insecure(), port)
        wait_until_serving(server, workers=1)
        return server

    def restart(self, i: int) -> None:
        stop(self.servers[i])
        self.servers[i] = self.start()

    def ready(self, server: Server) -> bool:
        try:
            return server.get("/readyz")[0] == 200
        except (OSError, ssl.SSLError):
            return False

    def all_ready(self) -> bool:
        return all(self.ready(s) for s in self.servers)

    def stop_all(self) -> None:
        terminate_all(server.proc for server in self.servers)

    def logs(self) -> str:
        return "\n".join(s.log()[-3000:] for s in self.servers)


class Handshakes:
    """The API server's side: trust only the published caBundles, connect to ready replicas."""

    def __init__(self, plane: ControlPlane, names: tuple[str, str], replicas: Replicas) -> None:
        from kubernetes import client

        self.api = client.AdmissionregistrationV1Api(plane.client)
        self.names, self.replicas = names, replicas
        self.hostname = ""
        self.tally: Counter[str] = Counter()
        self.failures: list[str] = []
        self.statuses: Counter[int] = Counter()
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, hostname: str) -> Handshakes:
        self.hostname = hostname
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _trusted(self) -> bytes:
        mutating = self.api.read_mutating_webhook_configuration(self.names[0])
        validating = self.api.read_validating_webhook_configuration(self.names[1])
        bundles = [h.client_config.ca_bundle for h in (*mutating.webhooks, *validating.webhooks)]
        decoded = [base64.b64decode(b) if b else None for b in bundles]
        return trust.pem_bundle(trust.trusted_by_all(decoded))

    def _run(self) -> None:
        while not self._stop.is_set():
            for server in list(self.replicas.servers):
                # Ready first, then the caBundle: a replica that is ready has published
                # whatever its certificate needs before (the manager writes the files last).
                if not self.replicas.ready(server):
                    self.tally["not ready"] += 1
                    continue
                pem = self._trusted()
                if not pem:
                    self.tally["nothing published"] += 1
                    continue
                ctx = ssl.create_default_context(cadata=pem.decode())
                try:
                    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                except OSError:
                    self.tally["not listening"] += 1
                    continue
                started = time.monotonic()
                try:
                    with ctx.wrap_socket(raw, server_hostname=self.hostname) as tls:
                        self.tally["handshake"] += 1
                        self._review(tls, started)
                except ssl.SSLCertVerificationError as exc:
                    self.failures.append(f"port {server.port}: {exc.verify_message}")
                except (OSError, ssl.SSLError, http.client.HTTPException):
                    self.tally["connection lost"] += 1  # a replica being stopped
                finally:
                    raw.close()
            self._stop.wait(0.05)

    def _review(self, tls: ssl.SSLSocket, started: float) -> None:
        """POST one review on the connection; tally its status and latency."""
        head = (
            f"POST /validate HTTP/1.1\r\nHost: {self.hostname}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(REVIEW)}\r\n"
            "Connection: close\r\n\r\n"
        )
        tls.sendall(head.encode() + REVIEW)
        resp = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
        resp.begin()
        resp.read()
        self.statuses[resp.status] += 1
        self.latencies.append(time.monotonic() - started)


class Gate:
    """A TCP forwarder to the API server that refuses connections until opened."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        listener.settimeout(0.2)

        def serve() -> None:
            with listener:
                while not self._stop.is_set():
                    try:
                        conn, _ = listener.accept()
                    except TimeoutError:
                        continue
                    upstream = socket.create_connection(self.target, timeout=10)
                    for a, b in ((conn, upstream), (upstream, conn)):
                        threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._stop.is_set() and (data := src.recv(65536)):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
