"""The webhook as it runs in the cluster: gunicorn, our config, real TLS, kept-alive connections.

``gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app`` runs as a separate
process with 2 workers on a free loopback port (``tests.support.gunicorn``), with certificates
made by ``webhook.certs.issue``, configured only through the environment variables of
docs/contracts.md. Clients verify the server against the CA and reuse their connection, as the
API server does.

The second half tests what the gunicorn config does with TLS: protocols and ciphers on the
module's server, and rotation under load, broken files, mutual TLS, SIGTERM with requests in
flight, a bad certificate at start with the config serving ``tests.support.gunicorn.stand_in``,
an app that answers with its worker's pid.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from tests.objects import (
    configmap_ref_policy,
    load,
    load_example_cluster,
    pod_spec,
    review,
    with_gpu,
    workload,
)
from tests.support.cluster import LiveCluster
from tests.support.gunicorn import (
    REPO,
    STAND_IN,
    START_TIMEOUT,
    Server,
    argv,
    client_context,
    free_port,
    launch,
    metric_total,
    running,
    server_env,
    start,
    stop,
    wait_until_serving,
)
from tests.support.waiting import TIMEOUT, wait_until
from webhook.certs import issue
from webhook.server.metrics import FLUSH_SECONDS

BIN = Path(sys.executable).parent
JSON_HEADERS = {"Content-Type": "application/json"}
REVIEW_LINE = re.compile(r"\[(\d+)\] webhook\.server\.app: review uid=(\S+)")

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def server_certs(tmp_path_factory: pytest.TempPathFactory) -> issue.CertPaths:
    """The certificates of the module's server (``server``)."""
    return issue.write_certs(tmp_path_factory.mktemp("gunicorn") / "tls")


@pytest.fixture(scope="module")
def server(server_certs: issue.CertPaths) -> Iterator[Server]:
    with running(server_certs.directory.parent, server_certs) as srv:
        yield srv


def send(
    conn: http.client.HTTPSConnection,
    path: str,
    body: Any = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, http.client.HTTPResponse]:
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=JSON_HEADERS if headers is None else headers)
    resp = conn.getresponse()
    return resp.status, resp.read(), resp


def answer(conn: http.client.HTTPSConnection, path: str, doc: dict[str, Any]) -> dict[str, Any]:
    status, body, _ = send(conn, path, doc)
    assert status == 200, body
    response = json.loads(body)["response"]
    assert response["uid"] == doc["request"]["uid"]
    return dict(response)


def wait_for_log_lines(server: Server, uids: list[str], timeout: float = TIMEOUT) -> dict[str, str]:
    """uid -> pid of the worker that logged its review, once every uid is in the log."""
    deadline = time.monotonic() + timeout
    while True:
        by_uid = {uid: pid for pid, uid in REVIEW_LINE.findall(server.log())}
        if all(u in by_uid for u in uids) or time.monotonic() > deadline:
            return {u: by_uid[u] for u in uids if u in by_uid}
        time.sleep(0.05)


def test_reviews_over_one_kept_alive_connection(server: Server) -> None:
    conn = server.connect()
    try:
        # Mutate a GPU pod, apply the patch, validate the result: allowed, nothing pending.
        doc = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
        mutated = answer(conn, "/mutate?timeout=10s", doc)
        sock = conn.sock
        assert mutated["allowed"] is True and mutated["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(mutated["patch"]))
        doc["request"]["object"] = jsonpatch.apply_patch(doc["request"]["object"], ops)
        assert answer(conn, "/validate?timeout=10s", doc) == {
            "uid": doc["request"]["uid"],
            "allowed": True,
        }

        # The example of `make run` for /validate: denied with every failed rule.
        denied = json.loads((REPO / "examples" / "admissionreview-gpu-pod-denied.json").read_text())
        response = answer(conn, "/validate", denied)
        assert response["allowed"] is False and response["status"]["code"] == 403
        assert response["status"]["message"].startswith("[gpu-shared-request-above-one]")

        # A dry run gets the answer of the real request.
        real = with_gpu(load("v1.28.7", "mutate", "pod-create"), 1)
        dry = with_gpu(load("v1.28.7", "mutate", "pod-dryrun-create"), 1)
        dry["request"]["object"] = copy.deepcopy(real["request"]["object"])
        dry["request"]["uid"] = real["request"]["uid"]
        assert answer(conn, "/mutate", dry) == answer(conn, "/mutate", real)

        # A Deployment asking for two (shared) GPUs on the example policy is denied.
        deployment = review(workload("Deployment", spec=pod_spec(2)))
        response = answer(conn, "/validate", deployment)
        assert response["allowed"] is False
        assert "[gpu-shared-request-above-one]" in response["status"]["message"]
        assert answer(conn, "/mutate", deployment) == {
            "uid": deployment["request"]["uid"],
            "allowed": True,
        }
        assert conn.sock is sock  # every request on the one TLS connection
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "text"),
    [
        ("POST", "/mutate", b"{", JSON_HEADERS, 400, "request body is not JSON"),
        ("POST", "/validate", b'{"kind": "AdmissionReview"}', JSON_HEADERS, 400, "apiVersion"),
        ("POST", "/mutate", b"{}", {"Content-Type": "text/plain"}, 415, "Content-Type must be"),
        ("GET", "/mutate", None, {}, 405, "method GET is not allowed on /mutate; use POST"),
        ("POST", "/nope", b"{}", JSON_HEADERS, 404, "no such path '/nope'"),
    ],
    ids=["not-json", "no-api-version", "text-plain", "get", "unknown-path"],
)
def test_bad_requests_get_one_line_and_keep_the_connection(
    server: Server,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    status: int,
    text: str,
) -> None:
    conn = server.connect()
    try:
        got, data, resp = send(conn, path, body, method=method, headers=headers)
        assert got == status
        assert resp.getheader("Content-Type", "").startswith("text/plain")
        assert text in data.decode() and data.decode().count("\n") == 1
        # The connection still serves.
        assert send(conn, "/healthz", method="GET", headers={})[0] == 200
    finally:
        conn.close()


def test_body_over_the_limit_is_a_413(server: Server) -> None:
    conn = server.connect()
    try:
        status, data, _ = send(conn, "/validate", b" " * (7 * 1024 * 1024 + 1))
        assert status == 413 and b"over the limit of 7340032 bytes" in data
    finally:
        conn.close()


def test_streamed_body_over_the_limit_is_a_413(server: Server) -> None:
    chunk = b" " * 65536
    conn = server.connect()
    try:
        conn.request(
            "POST",
            "/mutate",
            body=iter([chunk] * (7 * 16 + 2)),  # 7 MiB + 128 KiB, no Content-Length
            headers=JSON_HEADERS,
            encode_chunked=True,
        )
        resp = conn.getresponse()
        assert resp.status == 413 and b"over the limit" in resp.read()
    finally:
        conn.close()


def test_streamed_body_within_the_limit_is_reviewed(server: Server) -> None:
    doc = with_gpu(load("v1.36.2", "validate", "pod-create"), 2)
    data = json.dumps(doc).encode()
    conn = server.connect()
    try:
        conn.request(
            "POST",
            "/validate",
            body=iter([data[:1000], data[1000:]]),
            headers=JSON_HEADERS,
            encode_chunked=True,
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert json.loads(resp.read())["response"]["allowed"] is False
    finally:
        conn.close()


def test_probes(server: Server) -> None:
    conn = server.connect()
    try:
        assert send(conn, "/healthz", method="GET", headers={})[1] == b"ok\n"
        status, data, _ = send(conn, "/readyz", method="GET", headers={})
        assert status == 200
        assert data.startswith(b"ready: policy example") and b"certificate valid until" in data
    finally:
        conn.close()


SERIES = [
    ("gpu_policy_reviews_total", {"endpoint": "mutate", "decision": "allowed"}),
    ("gpu_policy_patches_total", {"endpoint": "mutate"}),
    ("gpu_policy_review_duration_seconds_count", {"endpoint": "mutate"}),
]


def test_metrics_count_the_reviews_of_both_workers(server: Server) -> None:
    def scrape() -> str:
        conn = server.connect()
        try:
            status, data, _ = send(conn, "/metrics", method="GET", headers={})
            assert status == 200
            return data.decode()
        finally:
            conn.close()

    # Reviews of earlier tests may still be in a worker's tally (flushed once a second): wait
    # until the counts hold still, or they would land between the two scrapes.
    before = scrape()
    for _ in range(10):
        time.sleep(FLUSH_SECONDS + 0.2)
        again = scrape()
        steady = all(
            metric_total(again, name, **labels) == metric_total(before, name, **labels)
            for name, labels in SERIES
        )
        before = again
        if steady:
            break
    sent: list[str] = []
    pids: set[str] = set()
    template = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
    # A new connection per review: each is accepted by whichever worker wins it.
    for _ in range(100):
        doc = copy.deepcopy(template)
        doc["request"]["uid"] = str(uuid.uuid4())
        conn = server.connect()
        try:
            assert answer(conn, "/mutate", doc)["patchType"] == "JSONPatch"
        finally:
            conn.close()
        sent.append(doc["request"]["uid"])
        if len(sent) % 10 == 0:
            # Log lines are written in batches, at least twice a second.
            by_uid = wait_for_log_lines(server, sent)
            pids = set(by_uid.values())
            if len(pids) == 2 and len(sent) >= 20:
                break
    assert len(pids) == 2, f"one worker served all {len(sent)} connections"

    def grown() -> list[float]:
        after = scrape()
        return [
            metric_total(after, name, **labels) - metric_total(before, name, **labels)
            for name, labels in SERIES
        ]

    # Each worker adds its tally to the shared values at least once a second (metrics.py).
    wait_until(lambda: grown() == [len(sent)] * len(SERIES), 30, poll=0.2)
    counts = grown()
    assert counts == [len(sent)] * len(SERIES), (SERIES, counts, len(sent))


def test_reviews_just_before_a_shutdown_are_still_counted(tmp_path: Path) -> None:
    # Reviews are tallied and written to the shared metrics files once a second; a worker
    # that stops gracefully writes what it has left, so nothing answered goes uncounted.
    srv = start(tmp_path, issue.write_certs(tmp_path / "tls"), workers=1)
    try:
        conn = srv.connect()
        template = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
        for _ in range(25):
            assert answer(conn, "/mutate", template)["patchType"] == "JSONPatch"
        conn.close()
    finally:
        stop(srv)
    assert srv.proc.returncode == 0, srv.log()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path / "metrics"))
    labels = {"endpoint": "mutate", "decision": "allowed"}
    assert registry.get_sample_value("gpu_policy_reviews_total", labels) == 25
    assert registry.get_sample_value("gpu_policy_patches_total", {"endpoint": "mutate"}) == 25
    count = registry.get_sample_value(
        "gpu_policy_review_duration_seconds_count", {"endpoint": "mutate"}
    )
    assert count == 25


def test_an_empty_metrics_file_does_not_break_the_scrape(tmp_path: Path) -> None:
    # A worker creates its metrics file empty and sizes it a moment later; one killed in that
    # moment leaves the empty file for good, and prometheus_client fails every scrape on it
    # (prometheus/client_python#1199). The webhook's /metrics leaves such files out.
    with running(tmp_path, issue.write_certs(tmp_path / "tls"), workers=1) as srv:
        conn = srv.connect()
        template = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
        assert answer(conn, "/mutate", template)["patchType"] == "JSONPatch"
        (tmp_path / "metrics" / "counter_999999.db").touch()
        status, data, _ = send(conn, "/metrics", method="GET", headers={})
        assert status == 200, data
        text = data.decode()
        assert metric_total(text, "gpu_policy_reviews_total", endpoint="mutate") == 1
        conn.close()


def test_log_lines_name_the_review_and_not_the_object(server: Server) -> None:
    # A review of its own (the captured pod mounts a kube-api-access volume), so that the test
    # does not depend on which tests of this file ran before it on the same server.
    review = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
    review["request"]["uid"] = uid = str(uuid.uuid4())
    assert "kube-api-access" in json.dumps(review)
    conn = server.connect()
    answer(conn, "/mutate", review)
    conn.close()
    assert uid in wait_for_log_lines(server, [uid]), server.log()[-2000:]
    log = server.log()
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "webhook.server.app: review uid=" in line]
    assert lines
    assert all("decision=" in line and " ms=" in line for line in lines)
    assert not any("kube-api-access" in line for line in lines)


def test_bad_policy_stops_the_server_with_one_line(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path / "tls")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec: {enforcement: loud}\n"
    )
    port = free_port()
    env = server_env(tmp_path, port, paths.directory, GPU_POLICY_FILE=str(policy))
    srv = launch(argv(), tmp_path, env, client_context(paths.ca_cert), port)
    try:
        assert srv.proc.wait(START_TIMEOUT) != 0
    finally:
        stop(srv)
    log = srv.log()
    # Every problem of the file on one line, the first first.
    line = next(line for line in log.splitlines() if "cannot load the policy" in line)
    assert (
        f"cannot load the policy: {policy}: spec.enforcement: 'loud' is not one of enforce, "
        f"warn, audit; {policy}: spec.devicePlugin: required"
    ) in line
    # No traceback from our code (gunicorn prints its own HaltServer one on some runs).
    assert "/webhook/" not in "".join(line for line in log.splitlines() if 'File "' in line)


# A line of ``python -X importtime`` for a module of the Kubernetes client or of webhook.kube.
KUBE_IMPORT = re.compile(r"^import time: .*\| +((?:kubernetes|webhook\.kube)\b\S*)", re.MULTILINE)


def test_workers_watch_the_cluster(live_cluster: LiveCluster, tmp_path: Path) -> None:
    tls_paths = issue.write_certs(tmp_path / "tls")
    policy = tmp_path / "policy.yaml"
    policy.write_text(configmap_ref_policy("enforce"))
    load_example_cluster(live_cluster)
    with running(
        tmp_path,
        tls_paths,
        GPU_POLICY_FILE=str(policy),
        GPU_POLICY_KUBE=str(live_cluster.write_kubeconfig(tmp_path)),
        # Each process writes a line for each module it imports.
        PYTHONPROFILEIMPORTTIME="1",
    ) as srv:
        conn = srv.connect()
        try:
            deadline = time.monotonic() + 60
            while True:
                status, text, _ = send(conn, "/readyz", method="GET", headers={})
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert status == 200, text
            assert b"8 nodes" in text
            doc = with_gpu(load("v1.36.2", "validate", "pod-create"), 2)
            response = answer(conn, "/validate", doc)
            assert response["allowed"] is False
            assert "NVIDIA-L20-SHARED (8 slots)" in response["status"]["message"]
        finally:
            conn.close()
        assert wait_until(lambda: srv.cluster_ready(2), START_TIMEOUT, 0.1), srv.log()[-3000:]
        # The master imported what watching uses before it forked the workers: a worker
        # imports none of it (each would pay about a second of CPU for it, and again after
        # every restart; docs/server.md, "Starting a worker").
        after_fork = srv.log().split("Booting worker", 1)[1]
        assert not KUBE_IMPORT.findall(after_fork), KUBE_IMPORT.findall(after_fork)[:10]
    # Each worker watches on its own: two lists of nodes at least.
    assert live_cluster.count("nodes", "list") >= 2, srv.log()


def test_serve_dev_as_make_run_does(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path / "certs")
    port = free_port()
    command = [
        str(BIN / "gpu-policy"),
        "serve",
        "--dev",
        "--cert-dir",
        str(paths.directory),
        "--bind",
        f"127.0.0.1:{port}",
    ]
    env = server_env(tmp_path, port, paths.directory)
    env.pop("GPU_POLICY_BIND")
    env.pop("GPU_POLICY_TLS_DIR")
    srv = launch(command, tmp_path, env, client_context(paths.ca_cert), port)
    try:
        wait_until_serving(srv, workers=2)
        log = srv.log()
        curl = f"curl --cacert {paths.ca_cert} -H 'Content-Type: application/json' "
        assert (
            f"{curl}--data @examples/admissionreview-gpu-pod.json https://127.0.0.1:{port}/mutate"
            in log
        )
        doc = json.loads((REPO / "examples" / "admissionreview-gpu-pod.json").read_text())
        conn = srv.connect()
        try:
            response = answer(conn, "/mutate", doc)
        finally:
            conn.close()
        assert response["patchType"] == "JSONPatch"
    finally:
        stop(srv)


# ============================================================================================
# What the gunicorn config does with TLS, serving the stand-in app
# ============================================================================================


def peer_serial(conn: http.client.HTTPSConnection) -> int:
    assert isinstance(conn.sock, ssl.SSLSocket)
    der = conn.sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def get(conn: http.client.HTTPSConnection, path: str = "/") -> dict[str, Any]:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, (resp.status, body)
    return dict(json.loads(body))


def served_serial(server: Server) -> int:
    """The serial of the certificate a new connection gets."""
    conn = server.connect()
    try:
        get(conn)
        return peer_serial(conn)
    finally:
        conn.close()


def settles_on(server: Server, serial: int, timeout: float = 30) -> bool:
    """Wait until ten new connections in a row, whichever worker takes them, get the
    certificate ``serial``; False if they do not within ``timeout`` seconds."""
    streak = [0]

    def settled() -> bool:
        streak[0] = streak[0] + 1 if served_serial(server) == serial else 0
        return streak[0] >= 10

    return wait_until(settled, timeout, 0.05)


@pytest.fixture
def certs(tmp_path: Path) -> issue.CertPaths:
    return issue.write_certs(tmp_path / "tls", days=30)


def reissue(paths: issue.CertPaths) -> tuple[bytes, bytes]:
    return issue.make_serving_cert(
        paths.ca_cert.read_bytes(),
        paths.ca_key.read_bytes(),
        service="gpu-policy-webhook",
        namespace="gpu-policy",
        days=30,
    )


# --------------------------------------------------------------------------------------------
# (a) protocol versions and ciphers
# --------------------------------------------------------------------------------------------


def healthy(conn: http.client.HTTPSConnection) -> None:
    """GET /healthz on ``conn``: answered 200."""
    assert send(conn, "/healthz", method="GET", headers={})[0] == 200


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls12_and_tls13_served_old_protocols_and_ciphers_refused(
    server: Server, server_certs: issue.CertPaths
) -> None:
    # The module's server: what is refused is the config's doing, whatever the app, and
    # refused handshakes leave nothing behind for the other tests.
    certs = server_certs
    conn = server.connect()
    healthy(conn)
    assert isinstance(conn.sock, ssl.SSLSocket)
    assert conn.sock.version() == "TLSv1.3"
    conn.close()

    conn = server.connect(context=client_context(certs.ca_cert, max_version=ssl.TLSVersion.TLSv1_2))
    healthy(conn)
    assert isinstance(conn.sock, ssl.SSLSocket)
    assert conn.sock.version() == "TLSv1.2"
    cipher = conn.sock.cipher()
    assert cipher is not None and cipher[0].startswith("ECDHE-ECDSA-")
    assert "GCM" in cipher[0] or "CHACHA20" in cipher[0]
    conn.close()

    # The hostname the API server uses is in the certificate too.
    ctx = client_context(certs.ca_cert)
    conn = http.client.HTTPSConnection(
        "gpu-policy-webhook.gpu-policy.svc", server.port, context=ctx, timeout=10
    )
    conn.sock = ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", server.port), timeout=10),
        server_hostname="gpu-policy-webhook.gpu-policy.svc",
    )
    healthy(conn)
    conn.close()

    # A TLS 1.1 client. SECLEVEL=0 lets our OpenSSL offer it at all; the refusal
    # ("alert protocol version") comes from the server.
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(certs.ca_cert))
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError, match="alert protocol version"):
        healthy(server.connect(context=old))

    # TLS 1.2 with CBC-only suites (no AEAD): the server has no cipher in common.
    cbc = client_context(certs.ca_cert, max_version=ssl.TLSVersion.TLSv1_2)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA384:AES128-SHA")
    with pytest.raises(ssl.SSLError, match="alert handshake failure"):
        healthy(server.connect(context=cbc))

    # The server is still fine after refusing them.
    conn = server.connect()
    healthy(conn)
    conn.close()


# --------------------------------------------------------------------------------------------
# (b) rotation under load, (c) broken files
# --------------------------------------------------------------------------------------------


@dataclass
class Load:
    """Two client threads: connections kept alive for 5 requests each, then a new one."""

    server: Server
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    requests: int = 0
    serials: list[tuple[float, int]] = field(default_factory=list)  # (connect time, serial)
    reused: int = 0  # requests sent on the connection's first socket (kept alive)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        while not self.stop.is_set():
            conn = self.server.connect()
            try:
                started = time.monotonic()  # before the handshake, which picks the cert
                conn.connect()
                with self.lock:
                    self.serials.append((started, peer_serial(conn)))
                first_sock = conn.sock
                for _ in range(5):
                    get(conn)
                    with self.lock:
                        self.requests += 1
                        self.reused += conn.sock is first_sock
            except Exception as e:  # any failure at all is what the test is about
                with self.lock:
                    self.errors.append(f"{type(e).__name__}: {e}")
            finally:
                conn.close()

    def __enter__(self) -> Load:
        self.threads = [threading.Thread(target=self.run) for _ in range(2)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def make_secret_volume(root: Path, paths: issue.CertPaths) -> Callable[[bytes, bytes], None]:
    """Lay out ``root`` as the kubelet does for a Secret volume; return the swap function.

    tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>; an update writes a new timestamped
    directory and renames a new ``..data`` symlink over the old one (AtomicWriter).
    """
    root.mkdir()
    generation = [0]

    def publish(cert: bytes, key: bytes) -> None:
        generation[0] += 1
        name = f"..2026_01_01_00_00_0{generation[0]}.{generation[0]}"
        (root / name).mkdir()
        (root / name / "tls.crt").write_bytes(cert)
        (root / name / "tls.key").write_bytes(key)
        (root / "..data_tmp").symlink_to(name)
        os.replace(root / "..data_tmp", root / "..data")

    publish(paths.cert.read_bytes(), paths.key.read_bytes())
    for f in ("tls.crt", "tls.key"):
        (root / f).symlink_to(f"..data/{f}")
    return publish


def replace_files(tls_dir: Path) -> Callable[[bytes, bytes], None]:
    """Rotation the way write_certs does it: each file replaced atomically, key first."""

    def publish(cert: bytes, key: bytes) -> None:
        issue.write_atomic(tls_dir / "tls.key", key, mode=0o600)
        issue.write_atomic(tls_dir / "tls.crt", cert)

    return publish


@pytest.mark.parametrize("layout", ["secret-volume", "replaced-files"])
def test_rotation_under_load_fails_no_request(
    tmp_path: Path, certs: issue.CertPaths, layout: str
) -> None:
    if layout == "secret-volume":
        tls_dir = tmp_path / "secret"
        publish = make_secret_volume(tls_dir, certs)
    else:
        tls_dir = certs.directory
        publish = replace_files(tls_dir)
    old_serial = x509.load_pem_x509_certificate(certs.cert.read_bytes()).serial_number

    with running(tmp_path, certs, app=STAND_IN, tls_dir=tls_dir) as server, Load(server) as load:
        time.sleep(1.0)
        new_cert, new_key = reissue(certs)
        new_serial = x509.load_pem_x509_certificate(new_cert).serial_number
        publish(new_cert, new_key)

        # The new certificate is picked up by every worker's check (every second, docs/server.md;
        # how fast is bench.reliability's figure, not this test's).
        assert settles_on(server, new_serial), "new certificate not served by every worker"
        settled_at = time.monotonic()
        # ... and each worker says so to its /tls (what /readyz will use).
        reports = []
        for _ in range(6):
            conn = server.connect()
            reports.append(get(conn, "/tls"))
            conn.close()
        time.sleep(0.5)

    assert not load.errors, load.errors
    assert load.requests > 50
    assert load.reused == load.requests  # no connection was closed by the server
    assert {s for _, s in load.serials} == {old_serial, new_serial}
    late = {s for t, s in load.serials if t > settled_at}
    assert late == {new_serial}
    assert all(r["registered"] and r["valid"] and r["serial"] == new_serial for r in reports)


def test_broken_files_keep_the_old_certificate(tmp_path: Path, certs: issue.CertPaths) -> None:
    old_serial = x509.load_pem_x509_certificate(certs.cert.read_bytes()).serial_number
    # Each worker checks the files at most once a second, on a new connection; what a check
    # found is in the log (written in batches), so the test waits for the log line.
    with running(tmp_path, certs, app=STAND_IN) as server, Load(server) as load:
        issue.write_atomic(certs.cert, b"-----BEGIN CERTIFICATE-----\ngarbage\n")
        assert wait_until(lambda: "cannot be used" in server.log(), 30, 0.1), server.log()
        assert {served_serial(server) for _ in range(6)} == {old_serial}

        # a cert with a key that is not its own: same
        other_cert, _ = reissue(certs)
        issue.write_atomic(certs.cert, other_cert)
        assert wait_until(lambda: "does not match" in server.log(), 30, 0.1), server.log()
        assert {served_serial(server) for _ in range(6)} == {old_serial}

        # and a good pair again is picked up
        new_cert, new_key = reissue(certs)
        replace_files(certs.directory)(new_cert, new_key)
        new_serial = x509.load_pem_x509_certificate(new_cert).serial_number
        assert settles_on(server, new_serial), "new certificate not served by every worker"
        assert {served_serial(server) for _ in range(6)} == {new_serial}

    assert not load.errors, load.errors


# --------------------------------------------------------------------------------------------
# (d) optional mutual TLS
# --------------------------------------------------------------------------------------------


def test_client_certificates_required_with_client_ca(
    tmp_path: Path, certs: issue.CertPaths
) -> None:
    client_ca = issue.make_ca("apiserver-clients", 30)
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca[0])

    def client_files(name: str, ca: tuple[bytes, bytes]) -> tuple[Path, Path]:
        cert, key = issue.make_client_cert(*ca, common_name=name)
        (tmp_path / f"{name}.crt").write_bytes(cert)
        (tmp_path / f"{name}.key").write_bytes(key)
        return tmp_path / f"{name}.crt", tmp_path / f"{name}.key"

    good = client_files("apiserver", client_ca)
    stranger = client_files("stranger", issue.make_ca("someone-else", 30))

    with running(
        tmp_path,
        certs,
        app=STAND_IN,
        client_cert=good,
        GPU_POLICY_CLIENT_CA=str(client_ca_file),
    ) as server:
        for _ in range(3):
            conn = server.connect()
            get(conn)
            get(conn)
            conn.close()

        for ctx in (client_context(certs.ca_cert), client_context(certs.ca_cert, cert=stranger)):
            for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
                ctx.maximum_version = version
                conn = server.connect(context=ctx)
                with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
                    get(conn)
                conn.close()

        # still serving the good client afterwards
        served_serial(server)


# --------------------------------------------------------------------------------------------
# (e) SIGTERM with requests in flight
# --------------------------------------------------------------------------------------------


def test_sigterm_lets_requests_in_flight_finish(tmp_path: Path, certs: issue.CertPaths) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    release = tmp_path / "release"
    env = {"TEST_MARK_DIR": str(marks), "TEST_RELEASE_FILE": str(release)}
    with running(tmp_path, certs, app=STAND_IN, threads=4, **env) as server:

        def slow(_: int) -> int:
            conn = server.connect(timeout=90)
            try:
                conn.request("GET", "/slow")  # held in the app until `release` exists
                resp = conn.getresponse()
                resp.read()
                return resp.status
            finally:
                conn.close()

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(slow, i) for i in range(4)]
            assert wait_until(lambda: len(list(marks.iterdir())) >= 4, 30, poll=0.02), (
                "the 4 requests did not all arrive"
            )
            server.proc.send_signal(signal.SIGTERM)
            # The master has begun its graceful stop while the four are held in the app.
            assert wait_until(lambda: "Handling signal: term" in server.log(), 30, 0.05)
            assert not any(f.done() for f in futures)
            release.touch()
            results = [f.result(timeout=60) for f in futures]

        assert results == [200] * 4
        assert server.proc.wait(START_TIMEOUT) == 0, server.log()


# --------------------------------------------------------------------------------------------
# fail fast at start
# --------------------------------------------------------------------------------------------


def test_unusable_certificate_stops_the_server_at_start(
    tmp_path: Path, certs: issue.CertPaths
) -> None:
    certs.key.write_bytes(issue.make_ca("not-the-key", 1)[1])
    result = subprocess.run(
        argv(STAND_IN),
        cwd=REPO,
        env=server_env(tmp_path, free_port(), certs.directory),
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "Error: TLS:" in result.stderr and "does not match" in result.stderr
