"""Slow clients cannot starve the server (webhook/server/worker.py, webhook/certs/serving.py).

Against the real webhook under gunicorn (1 worker, 2 threads, time limits of 1 s so that the
test is short): connections sending their ClientHello or their request one byte a second, more
of them than the worker has threads, while reviews are sent on a connection kept alive from
before and on new connections. Every review is answered; the slow connections are closed by
the server; a connection that says ``Connection: close`` and never closes does not stall the
worker. Timings are measured in bench/slowloris.py, not here.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.objects import ctr, pod, review
from tests.support.gunicorn import Server, running
from tests.support.slow_clients import SlowClients
from tests.support.waiting import wait_until
from webhook.certs import issue
from webhook.contract import HANDSHAKE_TIMEOUT_ENV, READ_TIMEOUT_ENV
from webhook.server.worker import AnsweredFirstPool

#: A review of a pod without GPUs: the webhook lets it through unchanged.
REVIEW = json.dumps(review(pod(ctr("c", image="i")), namespace="default")).encode()


def review(conn: http.client.HTTPSConnection) -> int:
    """POST one review on ``conn``; its HTTP status."""
    conn.request("POST", "/mutate", body=REVIEW, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("slow")
    certs = issue.write_certs(tmp / "tls")
    env = {HANDSHAKE_TIMEOUT_ENV: "1", READ_TIMEOUT_ENV: "1"}
    with running(Path(tmp), certs, workers=1, threads=2, **env) as served:
        yield served


@pytest.mark.parametrize("kind", ["hello", "headers"])
def test_reviews_are_answered_while_slow_clients_hold_on(server: Server, kind: str) -> None:
    kept = server.connect(timeout=10)
    assert review(kept) == 200  # the API server's connection, kept alive from before
    slow = SlowClients(server.port, 8, kind, until=time.monotonic() + 6).start()
    try:
        time.sleep(1.5)  # the slow connections are in; one has been closed at least once
        for _ in range(10):
            assert review(kept) == 200
            fresh = server.connect(timeout=10)
            try:
                assert review(fresh) == 200
            finally:
                fresh.close()
            time.sleep(0.2)
    finally:
        slow.join()
        kept.close()
    assert slow.closed_by_server >= 8  # each was closed by the server, not left to hang
    assert "not received within 1 s" in server.log()


def test_a_connection_quiet_longer_than_the_read_deadline_is_served(server: Server) -> None:
    """The read deadline counts from a request's first byte: a connection that was opened
    (handshake done) and used only later, as the API server's Go client does with a connection
    it dialled while another one answered, gets its review answered, not closed."""
    conn = server.connect(timeout=10)
    try:
        conn.connect()  # the TLS handshake, and no request yet
        time.sleep(1.5)  # longer than the server's read deadline (1 s)
        assert review(conn) == 200
        assert review(conn) == 200
    finally:
        conn.close()


def test_a_client_that_never_closes_does_not_stall_the_worker(server: Server) -> None:
    """gunicorn lingers after answering ``Connection: close``: never in the worker's loop."""
    kept = server.connect(timeout=5)  # gunicorn's linger, 2 s per connection, would add to 12 s
    assert review(kept) == 200
    lingering = []
    try:
        for _ in range(6):
            sock = server.context.wrap_socket(
                socket.create_connection(("127.0.0.1", server.port), timeout=10),
                server_hostname="localhost",
            )
            head = (
                f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Connection: close\r\nContent-Length: {len(REVIEW)}\r\n\r\n"
            )
            sock.sendall(head.encode() + REVIEW)
            lingering.append(sock)  # answered, and never closed by us
        for sock in lingering:
            assert sock.recv(12).startswith(b"HTTP/1.1 200")
        assert review(kept) == 200
    finally:
        for sock in lingering:
            sock.close()
        kept.close()


def _open_on_server_side(sock: ssl.SSLSocket) -> bool:
    """True while the server has neither closed nor answered ``sock`` (TLS records such as
    session tickets may have come: readable is not enough)."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except ssl.SSLWantReadError:
        return True
    finally:
        sock.setblocking(True)
    return False  # an answer, or the end


def test_a_body_sent_slowly_holds_no_thread(tmp_path: Path) -> None:
    """A request whose head is here and whose body comes a byte at a time waits in the
    poller between bytes, not in a thread: with more such connections than threads, a review
    on a new connection is answered while they are all still sending (their read deadline,
    5 s here, has not passed: a thread reading one of them would hold on until it did)."""
    certs = issue.write_certs(tmp_path / "tls")
    env = {HANDSHAKE_TIMEOUT_ENV: "5", READ_TIMEOUT_ENV: "5"}
    with running(tmp_path, certs, workers=1, threads=2, **env) as served:
        slow: list[ssl.SSLSocket] = []
        stop = threading.Event()

        def drip() -> None:
            sent = 20
            while not stop.wait(0.2) and sent < len(REVIEW) - 1:
                for sock in slow:
                    sock.sendall(REVIEW[sent : sent + 1])
                sent += 1

        dripping = threading.Thread(target=drip, daemon=True)
        try:
            for _ in range(6):
                sock = served.context.wrap_socket(
                    socket.create_connection(("127.0.0.1", served.port), timeout=10),
                    server_hostname="localhost",
                )
                head = (
                    f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(REVIEW)}\r\n\r\n"
                )
                sock.sendall(head.encode() + REVIEW[:20])
                slow.append(sock)
            dripping.start()
            time.sleep(0.5)  # a few bytes of each body have come since the head
            fresh = served.connect(timeout=10)
            try:
                assert review(fresh) == 200
            finally:
                fresh.close()
            stop.set()
            dripping.join()
            assert all(_open_on_server_side(sock) for sock in slow)
        finally:
            stop.set()
            for sock in slow:
                sock.close()


def test_the_pool_serves_answered_connections_first_and_keeps_threads_for_them() -> None:
    class Progress:
        def __init__(self, first_class: bool) -> None:
            self.first_class = first_class

    class Conn:
        def __init__(self, first_class: bool) -> None:
            self.review_progress = Progress(first_class)

    pool = AnsweredFirstPool(4)
    assert pool.new_limit == 2
    release = threading.Event()
    running_new: list[int] = []
    lock = threading.Lock()

    def hold(conn: Conn) -> str:
        with lock:
            running_new.append(1)
        release.wait(10)
        return "new"

    try:
        held: list[Future[str]] = [pool.submit(hold, Conn(False)) for _ in range(5)]
        assert wait_until(lambda: len(running_new) >= 2, 10, poll=0.01)
        # New connections take two threads at most; answered ones still run at once.
        answered = [pool.submit(lambda c: "answered", Conn(True)) for _ in range(4)]
        assert [f.result(timeout=10) for f in answered] == ["answered"] * 4
        assert len(running_new) == 2
    finally:
        release.set()
    assert [f.result(timeout=10) for f in held] == ["new"] * 5
    pool.shutdown()


def test_a_thread_waits_for_its_connection_only_while_another_is_free() -> None:
    # After an answer a thread may wait for the next request on its connection, but never
    # with the pool's last free thread, and never while another connection waits for one.
    pool = AnsweredFirstPool(3)
    try:
        assert pool.start_lingering() and pool.start_lingering()
        assert pool.start_lingering() is False  # the third thread stays free
        pool.stop_lingering()
        pool.stop_lingering()
        release = threading.Event()
        busy = [pool.submit(lambda _: release.wait(10), object()) for _ in range(3)]
        queued = pool.submit(lambda _: "queued", object())
        assert not pool.quiet()
        assert pool.start_lingering() is False  # a connection waits for a thread
        release.set()
        assert queued.result(timeout=10) == "queued"
        assert all(f.result(timeout=10) for f in busy)
        assert pool.quiet() and pool.start_lingering()
        pool.stop_lingering()
    finally:
        pool.shutdown()


def test_a_lingering_thread_is_woken_when_another_connection_comes() -> None:
    # A lingering thread sleeps in one poll on its connection and the pool's wake-up pipe:
    # a connection submitted meanwhile must make that pipe readable at once, and the pipe must
    # be empty again once no thread lingers (else the next lingering thread wakes for nothing).
    pool = AnsweredFirstPool(3)
    try:
        readable = select.poll()
        readable.register(pool.wake_fd, select.POLLIN)
        assert pool.start_lingering()
        assert readable.poll(0) == []
        assert pool.submit(lambda _: "other", object()).result(timeout=10) == "other"
        assert readable.poll(0) != []
        pool.stop_lingering()
        assert readable.poll(0) == []
        # Without a lingering thread nothing is written.
        assert pool.submit(lambda _: "again", object()).result(timeout=10) == "again"
        assert readable.poll(0) == []
    finally:
        pool.shutdown()
