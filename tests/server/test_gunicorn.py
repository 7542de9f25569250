"""The webhook as it runs in the cluster: gunicorn, our config, real TLS, kept-alive connections.

``gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app`` runs as a separate
process with 2 workers on a free loopback port, with certificates made by ``webhook.certs.issue``,
configured only through the environment variables of docs/contracts.md. Clients verify the
server against the CA and reuse their connection, as the API server does.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from reviewdata import EXAMPLES, load, pod_spec, review, with_gpu, workload

from bench.procs import terminate
from webhook.certs import issue
from webhook.server.metrics import FLUSH_SECONDS

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GUNICORN = [
    str(BIN / "gunicorn"),
    "-c",
    "python:webhook.server.gunicorn_conf",
    "webhook.server.wsgi:app",
]
JSON_HEADERS = {"Content-Type": "application/json"}
REVIEW_LINE = re.compile(r"\[(\d+)\] webhook\.server\.app: review uid=(\S+)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    context: ssl.SSLContext
    log_file: Path

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


def server_env(tmp: Path, port: int, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPU_POLICY_") and k != "PROMETHEUS_MULTIPROC_DIR"
    }
    env.update(
        GPU_POLICY_BIND=f"127.0.0.1:{port}",
        GPU_POLICY_TLS_DIR=str(tmp / "tls"),
        GPU_POLICY_WORKERS="2",
        GPU_POLICY_THREADS="2",
        GPU_POLICY_LOG_LEVEL="info",
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics"),
    )
    env.update(extra)
    return env


def start(argv: list[str], tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    log_file = tmp / f"server-{uuid.uuid4().hex[:8]}.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log_file


def wait_ready(server: Server, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited with {server.proc.returncode}:\n{server.log()}")
        conn = server.connect()
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except (OSError, http.client.HTTPException):
            time.sleep(0.1)
        finally:
            conn.close()
    pytest.fail(f"server did not start:\n{server.log()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("gunicorn")
    paths = issue.write_certs(tmp / "tls")
    port = free_port()
    proc, log_file = start(GUNICORN, tmp, server_env(tmp, port))
    context = ssl.create_default_context(cafile=str(paths.ca_cert))
    srv = Server(proc, port, context, log_file)
    try:
        wait_ready(srv)
        yield srv
    finally:
        terminate(proc)


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


def wait_for_log_lines(server: Server, uids: list[str], timeout: float = 5) -> dict[str, str]:
    """uid -> pid of the worker that logged its review, once every uid is in the log."""
    deadline = time.monotonic() + timeout
    while True:
        by_uid = {uid: pid for pid, uid in REVIEW_LINE.findall(server.log())}
        if all(u in by_uid for u in uids) or time.monotonic() > deadline:
            return {u: by_uid[u] for u in uids if u in by_uid}
        time.sleep(0.05)


def metric_total(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


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
        denied = json.loads((EXAMPLES / "admissionreview-gpu-pod-denied.json").read_text())
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
        deployment = review(workload("Deployment", pod_spec(2)))
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
    deadline = time.monotonic() + 5
    counts = grown()
    while counts != [len(sent)] * len(SERIES) and time.monotonic() < deadline:
        time.sleep(0.2)
        counts = grown()
    assert counts == [len(sent)] * len(SERIES), (SERIES, counts, len(sent))


def test_reviews_just_before_a_shutdown_are_still_counted(tmp_path: Path) -> None:
    # Reviews are tallied and written to the shared metrics files once a second; a worker
    # that stops gracefully writes what it has left, so nothing answered goes uncounted.
    paths = issue.write_certs(tmp_path / "tls")
    port = free_port()
    env = server_env(tmp_path, port, GPU_POLICY_WORKERS="1")
    proc, log_file = start(GUNICORN, tmp_path, env)
    srv = Server(proc, port, ssl.create_default_context(cafile=str(paths.ca_cert)), log_file)
    try:
        wait_ready(srv)
        conn = srv.connect()
        template = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
        for _ in range(25):
            assert answer(conn, "/mutate", template)["patchType"] == "JSONPatch"
        conn.close()
    finally:
        terminate(proc)
    assert proc.returncode == 0, srv.log()
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
    paths = issue.write_certs(tmp_path / "tls")
    port = free_port()
    proc, log_file = start(GUNICORN, tmp_path, server_env(tmp_path, port, GPU_POLICY_WORKERS="1"))
    srv = Server(proc, port, ssl.create_default_context(cafile=str(paths.ca_cert)), log_file)
    try:
        wait_ready(srv)
        conn = srv.connect()
        template = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
        assert answer(conn, "/mutate", template)["patchType"] == "JSONPatch"
        (tmp_path / "metrics" / "counter_999999.db").touch()
        status, data, _ = send(conn, "/metrics", method="GET", headers={})
        assert status == 200, data
        text = data.decode()
        assert metric_total(text, "gpu_policy_reviews_total", endpoint="mutate") == 1
        conn.close()
    finally:
        terminate(proc)


def test_log_lines_name_the_review_and_not_the_object(server: Server) -> None:
    log = server.log()
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "webhook.server.app: review uid=" in line]
    assert lines
    assert all("decision=" in line and " ms=" in line for line in lines)
    assert not any("kube-api-access" in line for line in lines)


def test_bad_policy_stops_the_server_with_one_line(tmp_path: Path) -> None:
    issue.write_certs(tmp_path / "tls")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec: {enforcement: loud}\n"
    )
    proc, log_file = start(
        GUNICORN, tmp_path, server_env(tmp_path, free_port(), GPU_POLICY_FILE=str(policy))
    )
    try:
        assert proc.wait(30) != 0
    finally:
        terminate(proc)
    log = log_file.read_text()
    assert f"cannot load the policy: {policy}: spec.devicePlugin: required" in log
    # No traceback from our code (gunicorn prints its own HaltServer one on some runs).
    assert "/webhook/" not in "".join(line for line in log.splitlines() if 'File "' in line)


def test_workers_watch_the_cluster(tmp_path: Path) -> None:
    from kube.apiserver import FakeApiServer
    from test_web_cluster import POLICY, load_cluster

    tls_paths = issue.write_certs(tmp_path / "tls")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.replace("ENFORCEMENT", "enforce"))
    with FakeApiServer() as fake:
        load_cluster(fake)
        port = free_port()
        env = server_env(
            tmp_path,
            port,
            GPU_POLICY_FILE=str(policy),
            GPU_POLICY_KUBE=str(fake.write_kubeconfig(tmp_path)),
        )
        proc, log_file = start(GUNICORN, tmp_path, env)
        srv = Server(
            proc, port, ssl.create_default_context(cafile=str(tls_paths.ca_cert)), log_file
        )
        try:
            wait_ready(srv)
            conn = srv.connect()
            try:
                deadline = time.monotonic() + 15
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
        finally:
            terminate(proc)
    # Each worker watches on its own: two lists of nodes at least.
    assert fake.count("nodes", "list") >= 2, srv.log()


def test_serve_dev_as_make_run_does(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path / "certs")
    port = free_port()
    argv = [
        str(BIN / "gpu-policy"),
        "serve",
        "--dev",
        "--cert-dir",
        str(paths.directory),
        "--bind",
        f"127.0.0.1:{port}",
    ]
    env = server_env(tmp_path, port)
    env.pop("GPU_POLICY_BIND")
    env.pop("GPU_POLICY_TLS_DIR")
    proc, log_file = start(argv, tmp_path, env)
    srv = Server(proc, port, ssl.create_default_context(cafile=str(paths.ca_cert)), log_file)
    try:
        wait_ready(srv)
        log = srv.log()
        curl = f"curl --cacert {paths.ca_cert} -H 'Content-Type: application/json' "
        assert (
            f"{curl}--data @examples/admissionreview-gpu-pod.json https://127.0.0.1:{port}/mutate"
            in log
        )
        doc = json.loads((EXAMPLES / "admissionreview-gpu-pod.json").read_text())
        conn = srv.connect()
        try:
            response = answer(conn, "/mutate", doc)
        finally:
            conn.close()
        assert response["patchType"] == "JSONPatch"
    finally:
        terminate(proc)
