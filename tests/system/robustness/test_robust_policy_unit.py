"""Whatever lands in the policy's files while reviews run, the real server keeps answering.

One gunicorn server (two workers) serves a copy of ``examples/clusters/mps-l4``, whose
``policy.yaml`` names ``device-plugin-config.yaml``. Clients keep posting reviews on kept-alive
connections while hypothesis writes random bytes, control characters, deep nesting, huge
integers and truncations into either file, and a worker is killed after each write: gunicorn
starts its replacement while the file is bad. No review may get a 5xx, no worker may fail to
boot, and the server ends serving the good files again.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import shutil
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.objects import load, with_gpu
from tests.support.waiting import wait_until
from tests.system.robustness.robust_server import REPO, Server, post, start_server, stop_server

MPS = REPO / "examples" / "clusters" / "mps-l4"
FILES = ("policy.yaml", "device-plugin-config.yaml")
GOOD = {name: (MPS / name).read_text() for name in FILES}

BAD = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(["\x00", "\x1b", "\x7f", "\x07"]).map(lambda c: f"version: v1{c}\n"),
    st.integers(min_value=50, max_value=1200).map(lambda n: "a: " + "[" * n + "]" * n),
    st.integers(min_value=4301, max_value=8000).map(lambda n: "a: " + "9" * n),
    st.tuples(st.sampled_from(FILES), st.integers(min_value=0, max_value=600)).map(
        lambda t: GOOD[t[0]][: t[1]]
    ),
)


def replace_file(path: Path, data: str | bytes) -> None:
    """Replace atomically, as the kubelet swaps a mounted ConfigMap."""
    new = path.with_suffix(".new")
    new.write_bytes(data.encode() if isinstance(data, str) else data)
    new.replace(path)


class Reviews:
    """Threads posting reviews on kept-alive connections, tallying every status."""

    def __init__(self, server: Server, clients: int = 2) -> None:
        self.server = server
        self.template = with_gpu(load("v1.36.2", "validate", "pod-create"), 1)
        self.stop = threading.Event()
        self.statuses: Counter[int] = Counter()
        self.dropped = 0  # connections a killed worker took down with it
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        conn = self.server.connect()
        while not self.stop.is_set():
            doc = copy.deepcopy(self.template)
            doc["request"]["uid"] = str(uuid.uuid4())
            try:
                status, _, _ = post(conn, "/validate", json.dumps(doc).encode())
            except (OSError, http.client.HTTPException):
                self.dropped += 1
                conn.close()
                conn = self.server.connect()
                continue
            self.statuses[status] += 1
        conn.close()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path, Reviews]]:
    tmp = tmp_path_factory.mktemp("policy-unit")
    cluster = tmp / "cluster"
    shutil.copytree(MPS, cluster)
    server = start_server(tmp, GPU_POLICY_FILE=str(cluster / "policy.yaml"))
    reviews = Reviews(server)
    try:
        yield server, cluster, reviews
    finally:
        reviews.close()
        stop_server(server)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(which=st.sampled_from(FILES), data=BAD)
def test_bad_bytes_in_either_file_and_a_worker_restart_fail_no_review(
    served: tuple[Server, Path, Reviews], which: str, data: str | bytes
) -> None:
    server, cluster, reviews = served
    replace_file(cluster / which, data)
    assert wait_until(lambda: server.get("/readyz")[0] == 200, 10, poll=0.1)
    victim = server.workers()[0]
    os.kill(victim, signal.SIGKILL)
    assert wait_until(
        lambda: len(server.workers()) == 2 and victim not in server.workers(), 20, poll=0.05
    ), server.log()[-3000:]
    status, text = server.get("/readyz")
    assert status == 200, text  # the replacement serves the last good unit
    replace_file(cluster / which, GOOD[which])
    log = server.log()
    assert server.proc.poll() is None, log[-3000:]
    assert "Worker failed to boot" not in log
    assert "Traceback" not in log, log[-3000:]
    assert not [s for s in reviews.statuses if s >= 500], reviews.statuses


def test_the_server_answered_reviews_throughout(served: tuple[Server, Path, Reviews]) -> None:
    """After the fuzzing (this test runs second): the good files are served again."""
    server, _, reviews = served
    assert wait_until(lambda: "last policy reload failed" not in server.get("/readyz")[1], 10)
    before = sum(reviews.statuses.values())
    assert wait_until(lambda: sum(reviews.statuses.values()) > before + 20, 10)
    assert set(reviews.statuses) == {200}, reviews.statuses
