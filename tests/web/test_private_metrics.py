"""Two servers on one host, without PROMETHEUS_MULTIPROC_DIR, keep their own counts.

Each gunicorn master makes a metrics directory of its own (in the temporary directory both
servers share, as ``make run`` twice on one machine would) and removes it when it exits. A
shared fixed directory, wiped by every server at start, made the second server reset the
first one's counters.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.procs import terminate
from webhook import tls

REPO = Path(__file__).resolve().parents[2]
GUNICORN = [
    str(Path(sys.executable).parent / "gunicorn"),
    "-c",
    "python:webhook.web.gunicorn_conf",
    "webhook.web.wsgi:app",
]
REVIEW = (REPO / "examples" / "admissionreview-gpu-pod.json").read_bytes()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, tmp: Path, host_tmp: Path, tls_dir: Path, name: str) -> None:
        self.port = free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("GPU_POLICY_") and k != "PROMETHEUS_MULTIPROC_DIR"
        }
        env.update(
            TMPDIR=str(host_tmp),
            GPU_POLICY_BIND=f"127.0.0.1:{self.port}",
            GPU_POLICY_TLS_DIR=str(tls_dir),
            GPU_POLICY_WORKERS="2",
            GPU_POLICY_THREADS="2",
        )
        self.log_file = tmp / f"{name}.log"
        with self.log_file.open("wb") as log:
            self.proc = subprocess.Popen(
                GUNICORN, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_file.read_text()
            try:
                if self.call("GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(self.log_file.read_text())

    def reviews(self) -> float:
        status, text = self.call("GET", "/metrics")
        assert status == 200, text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "gpu_policy_reviews_total"
        )


def wait_for(expected: dict[str, float], servers: dict[str, Server], timeout: float = 10) -> None:
    """Until every server reports its expected count (workers flush once a second)."""
    deadline = time.monotonic() + timeout
    counts = {name: s.reviews() for name, s in servers.items()}
    while counts != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        counts = {name: s.reviews() for name, s in servers.items()}
    assert counts == expected


def test_two_servers_on_one_host_keep_their_own_counts(tmp_path: Path) -> None:
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    tls_dir = tls.write_certs(tmp_path / "tls").directory
    first = Server(tmp_path, host_tmp, tls_dir, "first")
    servers = {"first": first}
    try:
        first.wait_ready()
        for _ in range(3):
            assert first.call("POST", "/mutate", REVIEW)[0] == 200
        wait_for({"first": 3}, servers)
        # The second server starts after the first has counted.
        second = Server(tmp_path, host_tmp, tls_dir, "second")
        servers["second"] = second
        second.wait_ready()
        for _ in range(2):
            assert second.call("POST", "/mutate", REVIEW)[0] == 200
        wait_for({"first": 3, "second": 2}, servers)
        assert len(list(host_tmp.glob("gpu-policy-metrics-*"))) == 2, "one directory each"
    finally:
        for server in servers.values():
            terminate(server.proc)
    assert [s.proc.returncode for s in servers.values()] == [0, 0]
    assert list(host_tmp.iterdir()) == [], "each server removed its directory at exit"
