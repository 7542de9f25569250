"""Stopping a replica fails no admission (docs/server.md, "Stopping").

gunicorn with our config, real TLS, kept-alive connections, as in the cluster. After SIGTERM the
server is unready at once, keeps answering reviews for ``GPU_POLICY_SHUTDOWN_DELAY`` seconds
(each answer closing its connection, so the client reconnects, and a Service sends it to
another replica), then finishes what is in flight and exits within delay + drain timeout.
"""

from __future__ import annotations

import http.client
import signal
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.gunicorn import STAND_IN, Server, running, start, stop
from tests.support.paths import REPO
from tests.support.waiting import wait_until
from webhook.certs import issue
from webhook.contract import DRAIN_TIMEOUT_ENV, SHUTDOWN_DELAY_ENV
from webhook.server import Settings

pytestmark = [pytest.mark.slow]

REVIEW = (REPO / "examples/admissionreview-gpu-pod.json").read_bytes()
JSON = {"Content-Type": "application/json"}
DELAY, DRAIN = 3.0, 5.0
# Time for the process to exit after its drain (interpreter exit, the master's last poll):
# generous, the waits only catch a server that does not stop.
MARGIN = 30.0


def review(conn: http.client.HTTPSConnection) -> http.client.HTTPResponse:
    conn.request("POST", "/mutate", body=REVIEW, headers=JSON)
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, body
    assert b'"allowed":true' in body
    return resp


def closed_by_server(conn: http.client.HTTPSConnection) -> bool:
    """True when the server has closed this connection (the next read sees the end)."""
    sock = conn.sock
    if sock is None:
        return True
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLError, OSError):
        return True


@pytest.fixture
def stopping_server(tmp_path: Path) -> Server:
    return start(
        tmp_path,
        issue.write_certs(tmp_path / "tls"),
        **{SHUTDOWN_DELAY_ENV: str(DELAY), DRAIN_TIMEOUT_ENV: str(DRAIN)},
    )


def test_sigterm_unready_at_once_answering_through_the_delay(stopping_server: Server) -> None:
    server = stopping_server
    try:
        kept = server.connect()
        assert review(kept).getheader("Connection") == "keep-alive"
        assert server.get("/readyz")[0] == 200

        term_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: server.get("/readyz")[0] == 503, DELAY / 2)
        status, text = server.get("/readyz")
        assert status == 503 and "shutting down" in text

        # The connection the client kept: its next review is answered, then closed.
        assert review(kept).getheader("Connection") == "close"
        assert closed_by_server(kept)

        # New connections are still accepted and answered until the delay is nearly over.
        answered = 0
        while time.monotonic() < term_at + DELAY - 0.5:
            conn = server.connect()
            assert review(conn).getheader("Connection") == "close"
            conn.close()
            answered += 1
        assert answered > 0
        assert server.proc.poll() is None, "stopped before the delay was over"

        assert server.proc.wait(DELAY + DRAIN + MARGIN) == 0, server.log()
        assert time.monotonic() - term_at >= DELAY
    finally:
        stop(server)


def test_requests_in_flight_when_the_delay_ends_are_answered(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    release = tmp_path / "release"
    # Long enough that four requests sent once the master marked the stop reach the app
    # before it ends, on a loaded machine too; the test waits for its end either way.
    delay = 10.0
    env = {
        SHUTDOWN_DELAY_ENV: str(delay),
        DRAIN_TIMEOUT_ENV: str(DRAIN),
        "TEST_MARK_DIR": str(marks),
        "TEST_RELEASE_FILE": str(release),
    }
    certs = issue.write_certs(tmp_path / "tls")
    with running(tmp_path, certs, app=STAND_IN, threads=4, **env) as server:

        def slow() -> tuple[int, str | None]:
            conn = server.connect(timeout=90)
            try:
                conn.request("GET", "/slow")  # held in the app until `release` exists
                resp = conn.getresponse()
                resp.read()
                return resp.status, resp.getheader("Connection")
            finally:
                conn.close()

        server.proc.send_signal(signal.SIGTERM)
        # The master marks the stop (the byte every worker reads), then logs it.
        assert wait_until(lambda: "SIGTERM: not ready" in server.log(), 30, 0.02), server.log()
        with ThreadPoolExecutor(4) as pool:
            # Sent during the delay, and in the app before it ends ...
            futures = [pool.submit(slow) for _ in range(4)]
            assert wait_until(lambda: len(list(marks.iterdir())) >= 4, delay, poll=0.02)
            # ... still there when it has ended: the master's second SIGTERM (its own, at the
            # end of the delay) starts gunicorn's graceful stop.
            assert wait_until(lambda: server.log().count("Handling signal: term") >= 2, 30, 0.05)
            assert not any(f.done() for f in futures)
            release.touch()
            results = [f.result(timeout=60) for f in futures]
        assert results == [(200, "close")] * 4
        assert server.proc.wait(DRAIN + MARGIN) == 0, server.log()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (SHUTDOWN_DELAY_ENV, "-1", "use 0 to 300 seconds"),
        (SHUTDOWN_DELAY_ENV, "soon", "not a number of seconds"),
        (DRAIN_TIMEOUT_ENV, "0", "use 1 to 300 seconds"),
    ],
)
def test_bad_stop_times_are_refused_by_name(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"{name}=.*{message}"):
        Settings.from_env({name: value})


def test_stop_times_default_to_stopping_at_once() -> None:
    settings = Settings.from_env({})
    assert (settings.shutdown_delay, settings.drain_timeout) == (0.0, 25.0)
    assert Settings.from_env({SHUTDOWN_DELAY_ENV: "10"}).shutdown_delay == 10.0
