"""``gpu-policy test --server``: the suites against the real webhook, gunicorn over mutual TLS.

The server is ``gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app`` on a free
loopback port, serving seed003-l20-t4's policy and nodes, with certificates from webhook.certs
and client certificates required (GPU_POLICY_CLIENT_CA), as tests/server starts it.
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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.harness import CLUSTERS, MANIFESTS, REPO, SUITES, cli
from tests.support.procs import terminate
from webhook.admission import parse_review
from webhook.certs import issue
from webhook.harness.admission_review import build_review

pytestmark = [pytest.mark.slow]

HAS_SERVER = (REPO / "webhook" / "server" / "wsgi.py").is_file()
CAPTURED = REPO / "tests" / "fixtures" / "admissionreviews" / "v1.36.2" / "mutate-pod-create.json"


@dataclass
class Server:
    url: str
    ca: Path
    cert: Path
    key: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int, context: ssl.SSLContext, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except (OSError, http.client.HTTPException):
            time.sleep(0.1)
        finally:
            conn.close()
    pytest.fail(f"the server did not start:\n{log.read_text()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not HAS_SERVER:
        pytest.skip("webhook/server/wsgi.py does not exist yet")
    tmp = tmp_path_factory.mktemp("webhook")
    paths = issue.write_certs(tmp / "tls")
    cert_pem, key_pem = issue.make_client_cert(
        paths.ca_cert.read_bytes(), paths.ca_key.read_bytes()
    )
    (tmp / "client.crt").write_bytes(cert_pem)
    (tmp / "client.key").write_bytes(key_pem)
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPU_POLICY_") and k != "PROMETHEUS_MULTIPROC_DIR"
    }
    cluster = CLUSTERS / "seed003-l20-t4"
    env.update(
        GPU_POLICY_FILE=str(cluster / "policy.yaml"),
        GPU_POLICY_NODES=str(cluster / "nodes.yaml"),
        GPU_POLICY_BIND=f"127.0.0.1:{port}",
        GPU_POLICY_TLS_DIR=str(paths.directory),
        GPU_POLICY_CLIENT_CA=str(paths.ca_cert),
        GPU_POLICY_WORKERS="1",
        GPU_POLICY_THREADS="2",
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics"),
    )
    log = tmp / "server.log"
    gunicorn = Path(sys.executable).parent / "gunicorn"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(gunicorn), "-c", "python:webhook.server.gunicorn_conf", "webhook.server.wsgi:app"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        context = ssl.create_default_context(cafile=str(paths.ca_cert))
        context.load_cert_chain(str(tmp / "client.crt"), str(tmp / "client.key"))
        _ready(port, context, proc, log)
        yield Server(
            f"https://127.0.0.1:{port}", paths.ca_cert, tmp / "client.crt", tmp / "client.key"
        )
    finally:
        terminate(proc)


def _tls_args(server: Server) -> list[str]:
    return [
        "--server",
        server.url,
        "--cacert",
        str(server.ca),
        "--cert",
        str(server.cert),
        "--key",
        str(server.key),
    ]


def test_the_example_suite_against_the_webhook(server: Server) -> None:
    result = cli("test", *_tls_args(server), str(SUITES / "seed003-l20-t4.suite.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^31 passed, 0 failed, 3 skipped in ", result.stdout, re.M)
    assert len(re.findall(r"skipped: sets injectNodeSelection \(local only\)", result.stdout)) == 3


def test_what_the_webhook_answers_differently_is_reported(
    server: Server, write_suite: Callable[..., Path], tmp_path: Path
) -> None:
    golden = tmp_path / "l20.yaml"
    golden.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: llm-l20}\n")
    suite = write_suite(
        f"""\
        - name: steered
          object: {MANIFESTS / "pod-annotation-product-l20.yaml"}
          expect: {{allowed: true, golden: l20.yaml}}
        - name: denied
          object: {MANIFESTS / "pod-gpu-request-1-limit-2.yaml"}
          expect: {{allowed: false, message: 'requests 1 but limits 3'}}
        """
    )
    result = cli("test", *_tls_args(server), str(suite))
    assert result.returncode == 1
    out = result.stdout
    assert "- the object after the webhook differs from golden l20.yaml" in out
    assert "+    nvidia.com/gpu.product: NVIDIA-L20-SHARED" in out  # the server's patch, applied
    assert "- the denial does not match /requests 1 but limits 3/" in out
    assert (
        '[gpu-requests-equal-limits] container "app" asks for nvidia.com/gpu requests 1 but limits 2'
        in out
    )
    # --update-golden takes the webhook's answer too.
    assert (
        cli("test", *_tls_args(server), "--update-golden", "-k", "steered", str(suite)).returncode
        == 0
    )
    assert "NVIDIA-L20-SHARED" in golden.read_text()


def test_tls_problems_are_errors(server: Server, write_suite: Callable[..., Path]) -> None:
    suite = str(
        write_suite(
            f"- {{name: a, object: {MANIFESTS / 'pod-gpu-1-shared.yaml'}, expect: allowed}}\n"
        )
    )
    # No client certificate: the server refuses the handshake.
    result = cli("test", "--server", server.url, "--cacert", str(server.ca), suite)
    assert result.returncode == 1
    assert re.search(r"no answer: (TLS with|cannot reach) https://127\.0\.0\.1", result.stdout)
    # The certificate names the Service: checking it for that name works.
    result = cli(
        "test", *_tls_args(server), "--tls-server-name", "gpu-policy-webhook.gpu-policy.svc", suite
    )
    assert result.returncode == 0, result.stdout
    result = cli("test", *_tls_args(server), "--tls-server-name", "elsewhere.example.com", suite)
    assert result.returncode == 1
    assert "TLS with" in result.stdout


def test_the_reviews_we_send_are_what_an_api_server_sends() -> None:
    pod = yaml.safe_load((MANIFESTS / "pod-gpu-1-shared.yaml").read_text())
    doc = build_review(pod, operation="CREATE", namespace="nlp")
    request = parse_review(doc)  # the server's own parser accepts it
    assert (request.operation, request.kind, request.resource, request.namespace) == (
        "CREATE",
        "Pod",
        "pods",
        "nlp",
    )
    assert request.dry_run is False and request.old_object is None
    update = parse_review(build_review(pod, operation="UPDATE"))
    assert update.old_object == pod and update.namespace == "nlp"
    deployment = build_review(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    )
    assert deployment["request"]["resource"] == {
        "group": "apps",
        "version": "v1",
        "resource": "deployments",
    }
    assert deployment["request"]["namespace"] == "default"
    assert build_review(pod)["request"]["uid"] != build_review(pod)["request"]["uid"]
    captured = json.loads(CAPTURED.read_text())["request"]
    assert set(doc["request"]) == set(captured)
    assert doc["request"]["options"]["kind"] == captured["options"]["kind"]
