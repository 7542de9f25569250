"""The webhook as a real server for the robustness tests: start, talk to, check, stop.

``start_server`` runs ``gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app``
as a separate process on a free loopback port, with certificates from ``webhook.certs.issue`` and only
the environment variables of docs/contracts.md, and waits until it answers and every worker
is up. Clients verify the server against the CA and keep their connections alive, as the API
server does. The worker pids come from /proc (``bench.http.children``).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from bench.http import children
from bench.procs import terminate
from webhook.certs import issue

REPO = Path(__file__).resolve().parents[2]
GUNICORN = [
    str(Path(sys.executable).parent / "gunicorn"),
    "-c",
    "python:webhook.server.gunicorn_conf",
    "webhook.server.wsgi:app",
]
JSON = {"Content-Type": "application/json"}
SEED003 = REPO / "examples" / "clusters" / "seed003-l20-t4"
CONFIGMAP = ("gpu-operator", "device-plugin-config")
CLUSTER_POLICY = (
    "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec:\n"
    "  enforcement: enforce\n"
    "  devicePlugin:\n"
    "    configMapRef: {namespace: gpu-operator, name: device-plugin-config}\n"
    "    defaultConfig: any\n"
)

#: status (or "connection error") -> how many fuzz inputs got it, for the run summary.
FUZZ_TALLY: Counter[str] = Counter()


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

    def connect(self, timeout: float = 10) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=timeout
        )

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def workers(self) -> list[int]:
        return sorted(children(self.proc.pid))

    def get(self, path: str) -> tuple[int, str]:
        conn = self.connect()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def metric(self, name: str, **labels: str) -> float:
        """The sum over the workers of one metric's samples with these labels."""
        # Once a 500 in ~20 runs: a worker's metrics file read while still empty
        # (prometheus/client_python#1199); /metrics now leaves such files out.
        status, text = self.get("/metrics")
        assert status == 200, text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


def start_server(tmp: Path, *, workers: int = 2, threads: int = 2, **extra: str) -> Server:
    """gunicorn on a free port with certificates in ``tmp/tls``; ``extra``: more env vars."""
    paths = issue.write_certs(tmp / "tls")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPU_POLICY_") and k != "PROMETHEUS_MULTIPROC_DIR"
    }
    env.update(
        GPU_POLICY_BIND=f"127.0.0.1:{port}",
        GPU_POLICY_TLS_DIR=str(paths.directory),
        GPU_POLICY_WORKERS=str(workers),
        GPU_POLICY_THREADS=str(threads),
        GPU_POLICY_LOG_LEVEL="info",
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics"),
    )
    env.update(extra)
    log_file = tmp / f"server-{uuid.uuid4().hex[:8]}.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen(GUNICORN, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(proc, port, ssl.create_default_context(cafile=str(paths.ca_cert)), log_file)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if server.get("/healthz")[0] == 200 and len(server.workers()) == workers:
                return server
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            stop_server(server)
            raise AssertionError(f"server did not start:\n{server.log()}")
        time.sleep(0.1)


def stop_server(server: Server) -> None:
    """Stop the server started by ``start_server``."""
    terminate(server.proc, 30)


def post(conn: http.client.HTTPSConnection, path: str, body: bytes) -> tuple[int, str, bytes]:
    """POST ``body``; (status, Content-Type, body). Connection errors propagate."""
    conn.request("POST", path, body=body, headers=JSON)
    resp = conn.getresponse()
    return resp.status, resp.getheader("Content-Type", ""), resp.read()


def check_answer(sent: Any, status: int, content_type: str, data: bytes) -> dict[str, Any] | None:
    """What holds for every answer to client input; returns the AdmissionReview response.

    ``sent`` is the decoded document that was sent (None when the body was not JSON). No
    status is 5xx (the engine-error 500 included: no input may trigger it); a 200 is a valid
    AdmissionReview v1 for the sent uid whose patch, if any, applies to the sent object; every
    other answer is a 4xx with one line of text.
    """
    assert status < 500, (status, data[:500])
    if status != 200:
        assert 400 <= status < 500, (status, data[:300])
        assert content_type.startswith("text/plain"), content_type
        text = data.decode()
        assert text.endswith("\n") and text.count("\n") == 1, text[:300]
        assert "Traceback" not in text
        return None
    assert content_type.startswith("application/json"), content_type
    review = json.loads(data)
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert isinstance(response["allowed"], bool)
    assert isinstance(sent, dict)
    assert response["uid"] == sent["request"]["uid"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        assert isinstance(ops, list) and ops
        jsonpatch.apply_patch(sent["request"]["object"], ops)  # raises if it does not apply
    if not response["allowed"]:
        assert 400 <= response["status"]["code"] < 500
    return dict(response)


def load_cluster(fake: Any) -> None:
    """Seed 003's nodes (8, L20 and T4 time-sliced) and its device-plugin ConfigMap."""
    fake.add_many(yaml.safe_load((SEED003 / "nodes.yaml").read_text())["items"])
    configmap = yaml.safe_load((SEED003 / "device-plugin-config.yaml").read_text())
    configmap["metadata"] = {"name": CONFIGMAP[1], "namespace": CONFIGMAP[0]}
    fake.add(configmap)
