"""The self-managed mode as it runs in a pod: ``gpu-policy serve`` (gunicorn, 2 workers, real
TLS) with its certificate manager talking to the real API server through a kubeconfig.

Clients trust what an API server would: the caBundle currently in the API server's webhook
configuration, read again for every new connection, plus one kept-alive connection. Requests
flow all the time a rotation happens; not one may fail.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509

from tests.support.certs_helpers import CONFIG, NS, SECRET, SVC, bundles, load, secret_data
from tests.support.cluster import LiveCluster
from tests.support.gunicorn import REPO, START_TIMEOUT, free_port, server_env
from tests.support.procs import terminate_all
from tests.support.waiting import wait_until
from webhook.certs import issue, rotation, trust
from webhook.contract import (
    CERT_INTERVAL_ENV,
    CERT_SECRET_ENV,
    KUBE_ENV,
    MUTATING_WEBHOOK_ENV,
    SERVICE_ENV,
    VALIDATING_WEBHOOK_ENV,
)

SERVE = [str(Path(sys.executable).parent / "gpu-policy"), "serve"]
REVIEW = (REPO / "examples" / "admissionreview-gpu-pod.json").read_bytes()
JSON = {"Content-Type": "application/json"}

pytestmark = [pytest.mark.slow]


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    kube: LiveCluster
    log_file: Path
    failures: list[str] = field(default_factory=list)
    serials: list[int] = field(default_factory=list)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def trusted(self) -> ssl.SSLContext:
        """What the API server trusts now: the caBundle of the mutating webhook."""
        return ssl.create_default_context(cadata=bundles(self.kube)[0].decode())

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.trusted(), timeout=10
        )

    def request(self, conn: http.client.HTTPSConnection, method: str, path: str) -> tuple[int, str]:
        conn.request(method, path, body=REVIEW if method == "POST" else None, headers=JSON)
        resp = conn.getresponse()
        body = resp.read().decode()
        assert isinstance(conn.sock, ssl.SSLSocket)
        der = conn.sock.getpeercert(binary_form=True)
        assert der is not None
        serial = x509.load_der_x509_certificate(der).serial_number
        if not self.serials or self.serials[-1] != serial:
            self.serials.append(serial)
        return resp.status, body

    def readyz(self) -> tuple[int, str]:
        conn = self.connect()
        try:
            return self.request(conn, "GET", "/readyz")
        finally:
            conn.close()


def start(kube: LiveCluster, tmp: Path) -> Server:
    port = free_port()
    # The TLS directory starts empty: the manager makes the files.
    env = server_env(tmp, port, tmp / "tls")
    env.update(
        {
            KUBE_ENV: str(kube.write_kubeconfig(tmp)),
            CERT_SECRET_ENV: f"{NS}/{SECRET}",
            SERVICE_ENV: f"{NS}/{SVC}",
            MUTATING_WEBHOOK_ENV: CONFIG,
            VALIDATING_WEBHOOK_ENV: CONFIG,
            CERT_INTERVAL_ENV: "1",
        }
    )
    log_file = tmp / "server.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen(SERVE, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Server(proc, port, kube, log_file)


def wait_ready(server: Server, timeout: float = START_TIMEOUT) -> str:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited with {server.proc.returncode}:\n{server.log()}")
        try:
            status, last = server.readyz()
            if status == 200:
                return last
        except (OSError, ValueError, http.client.HTTPException) as exc:
            last = repr(exc)
        time.sleep(0.1)
    pytest.fail(f"not ready within {timeout} s ({last}):\n{server.log()}")


@pytest.fixture
def running(kube: LiveCluster, tmp_path: Path) -> Iterator[tuple[LiveCluster, Path, list[Server]]]:
    """The API server with both webhook configurations (conftest); every server started is stopped."""
    servers: list[Server] = []
    try:
        yield kube, tmp_path, servers
    finally:
        terminate_all(server.proc for server in servers)


def test_first_start_makes_its_certificates_and_is_ready(running) -> None:
    kube, tmp, servers = running
    server = start(kube, tmp)
    servers.append(server)
    reason = wait_ready(server)
    assert "is verified by the caBundle of every webhook configuration" in reason
    data = secret_data(kube)
    assert bundles(kube) == [data["ca.crt"]] * 4
    conn = server.connect()
    status, body = server.request(conn, "POST", "/mutate")
    assert status == 200 and json.loads(body)["response"]["uid"]
    assert server.serials == [load(data["tls.crt"]).serial_number]


def _seed(kube: LiveCluster, content: trust.SecretContent) -> None:
    """The Secret and caBundles a previous server left behind."""
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NS, "annotations": dict(content.annotations)},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in content.data.items()},
        }
    )
    encoded = base64.b64encode(trust.ca_bundle(content)).decode()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):

        def publish(obj: dict) -> None:
            for hook in obj["webhooks"]:
                hook["clientConfig"]["caBundle"] = encoded

        kube.modify(kind, CONFIG, publish)


def healthy() -> trust.SecretContent:
    """What a server running for a while leaves: a CA and a serving certificate, not due."""
    now = dt.datetime.now(dt.UTC)
    return rotation.plan(None, published=[], service=SVC, namespace=NS, now=now).content


def with_next_ca() -> trust.SecretContent:
    """Halfway through a CA rotation: a next CA, trusted everywhere since just now."""
    now = dt.datetime.now(dt.UTC)
    content = healthy()
    nxt, nxt_key = issue.make_ca("next-server-ca", 365, now=now)
    return trust.SecretContent(
        {**content.data, "ca-next.crt": nxt, "ca-next.key": nxt_key},
        {"gpu-policy.io/ca-next-trusted-since": stamp(now)},
    )


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_serving_due(kube: LiveCluster) -> None:
    """As if 61 days had passed: the serving certificate is past 2/3 of its life."""
    data = secret_data(kube)
    issued = dt.datetime.now(dt.UTC) - dt.timedelta(days=61)
    crt, key = issue.make_serving_cert(
        data["ca.crt"], data["ca.key"], service=SVC, namespace=NS, days=90, now=issued
    )
    encoded = {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode()}
    kube.modify("Secret", SECRET, lambda obj: obj["data"].update(encoded), namespace=NS)


def make_switch_due(kube: LiveCluster) -> None:
    """As if the settle time had passed since every configuration trusted the next CA."""
    since = dt.datetime.now(dt.UTC) - rotation.Timing().settle - dt.timedelta(seconds=5)
    kube.modify(
        "Secret",
        SECRET,
        lambda obj: obj["metadata"]["annotations"].update(
            {"gpu-policy.io/ca-next-trusted-since": stamp(since)}
        ),
        namespace=NS,
    )


@pytest.mark.parametrize(
    ("seed", "trigger", "new_ca"),
    [(healthy, make_serving_due, False), (with_next_ca, make_switch_due, True)],
    ids=["serving certificate renewed", "CA switched"],
)
def test_rotation_while_serving_fails_no_request(running, seed, trigger, new_ca: bool) -> None:
    kube, tmp, servers = running
    content = seed()
    _seed(kube, content)
    server = start(kube, tmp)
    servers.append(server)
    wait_ready(server)
    first = load(content.data["tls.crt"]).serial_number
    stop = threading.Event()
    counts = {"new connections": 0, "kept alive": 0}

    def new_connections() -> None:
        while not stop.is_set():
            try:
                conn = server.connect()
                status, body = server.request(conn, "POST", "/mutate")
                conn.close()
                if status != 200:
                    server.failures.append(f"{status} {body[:200]}")
                counts["new connections"] += 1
            except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
                server.failures.append(repr(exc))

    def kept_alive() -> None:
        conn = server.connect()
        while not stop.is_set():
            try:
                status, body = server.request(conn, "POST", "/mutate")
                if status != 200:
                    server.failures.append(f"{status} {body[:200]}")
                counts["kept alive"] += 1
            except (OSError, http.client.HTTPException) as exc:
                server.failures.append(f"kept-alive: {exc!r}")
                conn = server.connect()
        conn.close()

    threads = [threading.Thread(target=f) for f in (new_connections, new_connections, kept_alive)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)  # traffic on the first certificate
        trigger(kube)
        # The trigger may put a due certificate in the Secret: the manager replaces it.
        stale = {first, load(secret_data(kube)["tls.crt"]).serial_number}
        wait_until(
            lambda: load(secret_data(kube)["tls.crt"]).serial_number not in stale,
            timeout=30,
            poll=0.2,
        )
        # Keep sending a while after the Secret changed: the files, then the reload.
        rotated = load(secret_data(kube)["tls.crt"])
        wait_until(lambda: rotated.serial_number in server.serials, timeout=30, poll=0.2)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert not server.failures, (server.failures[:5], server.log()[-3000:])
    assert server.serials[0] == first and rotated.serial_number in server.serials, server.serials
    assert counts["new connections"] > 20 and counts["kept alive"] > 20, counts
    issuer = secret_data(kube)["ca.crt"]
    rotated.verify_directly_issued_by(load(issuer))
    assert (issuer != content.data["ca.crt"]) == new_ca
    assert wait_ready(server)
