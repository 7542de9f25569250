"""Two servers on one host, without PROMETHEUS_MULTIPROC_DIR, keep their own counts.

Each gunicorn master makes a metrics directory of its own (in the temporary directory both
servers share, as ``make run`` twice on one machine would) and removes it when it exits. A
shared fixed directory, wiped by every server at start, made the second server reset the
first one's counters.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gunicorn import (
    Server,
    argv,
    client_context,
    free_port,
    launch,
    server_env,
    stop,
    wait_until_serving,
)
from tests.support.paths import REPO
from tests.support.procs import terminate_all
from tests.support.waiting import wait_until
from webhook.certs import issue
from webhook.certs.issue import CertPaths
from webhook.contract import METRICS_DIR_ENV

REVIEW = (REPO / "examples" / "admissionreview-gpu-pod.json").read_bytes()

pytestmark = [pytest.mark.slow]


def start(tmp: Path, host_tmp: Path, certs: CertPaths) -> Server:
    """The webhook under gunicorn with no metrics directory given, ``host_tmp`` as TMPDIR."""
    port = free_port()
    env = server_env(tmp, port, certs.directory, TMPDIR=str(host_tmp))
    del env[METRICS_DIR_ENV]
    server = launch(argv(), tmp, env, client_context(certs.ca_cert), port)
    try:
        wait_until_serving(server, workers=2)
    except BaseException:
        stop(server)
        raise
    return server


def mutate(server: Server) -> int:
    """POST the example review to /mutate; the status."""
    conn = server.connect()
    try:
        conn.request("POST", "/mutate", body=REVIEW, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def reviews(server: Server) -> float:
    """gpu_policy_reviews_total over every label and worker."""
    status, text = server.get("/metrics")
    assert status == 200, text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gpu_policy_reviews_total"
    )


def wait_for(expected: dict[str, float], servers: dict[str, Server]) -> None:
    """Until every server reports its expected count (workers flush once a second)."""

    def counts() -> dict[str, float]:
        return {name: reviews(s) for name, s in servers.items()}

    wait_until(lambda: counts() == expected, timeout=10, poll=0.2)
    assert counts() == expected


def test_two_servers_on_one_host_keep_their_own_counts(tmp_path: Path) -> None:
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    certs = issue.write_certs(tmp_path / "tls")
    servers: dict[str, Server] = {}
    try:
        servers["first"] = first = start(tmp_path, host_tmp, certs)
        for _ in range(3):
            assert mutate(first) == 200
        wait_for({"first": 3}, servers)
        # The second server starts after the first has counted.
        servers["second"] = second = start(tmp_path, host_tmp, certs)
        for _ in range(2):
            assert mutate(second) == 200
        wait_for({"first": 3, "second": 2}, servers)
        assert len(list(host_tmp.glob("gpu-policy-metrics-*"))) == 2, "one directory each"
    finally:
        terminate_all(server.proc for server in servers.values())
    assert [s.proc.returncode for s in servers.values()] == [0, 0]
    assert list(host_tmp.iterdir()) == [], "each server removed its directory at exit"
