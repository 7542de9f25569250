"""Slow clients: connections that send their TLS ClientHello or their request one byte a second.

Shared by ``bench/slowloris.py`` and the tests of ``webhook/server/worker.py``: each slow
connection runs in a thread of its own, and one the server closes is opened again at once, as
an attacker would, until a given time. Loopback only.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time

REQUEST_HEAD = (
    b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
    b"X-Padding: " + b"p" * 4000 + b"\r\n\r\n"
)


def client_hello() -> bytes:
    """The bytes of a TLS ClientHello, as a real client would send them first."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="webhook")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


class SlowClients:
    """``count`` connections to ``port`` sending ``kind`` (headers, hello) one byte a second."""

    def __init__(self, port: int, count: int, kind: str, until: float) -> None:
        """Ready to :meth:`start`; every thread stops at ``until`` (time.monotonic)."""
        self.port, self.kind, self.until = port, kind, until
        self.closed_by_server = 0
        self.opened = 0
        self._lock = threading.Lock()
        self._hello = client_hello()
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE
        self._threads = [
            threading.Thread(target=self._run, name=f"slow-{i}", daemon=True) for i in range(count)
        ]

    def start(self) -> SlowClients:
        """Open the connections (each from a thread of its own)."""
        for t in self._threads:
            t.start()
        return self

    def join(self) -> None:
        """Wait until every thread has stopped (at ``until``, plus a connection timeout)."""
        for t in self._threads:
            t.join(max(0.0, self.until - time.monotonic()) + 15)

    def _run(self) -> None:
        while time.monotonic() < self.until:
            try:
                sock = self._open()
            except OSError:
                time.sleep(0.2)
                continue
            with self._lock:
                self.opened += 1
            data = REQUEST_HEAD if self.kind == "headers" else self._hello
            try:
                for i in range(len(data)):
                    if time.monotonic() >= self.until:
                        return
                    sock.sendall(data[i : i + 1])
                    time.sleep(1.0)
                    if self._closed(sock):
                        break
            except OSError:
                pass
            finally:
                sock.close()
            with self._lock:
                self.closed_by_server += 1

    def _open(self) -> socket.socket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        if self.kind == "headers":
            return self._ctx.wrap_socket(raw, server_hostname="webhook")
        return raw

    @staticmethod
    def _closed(sock: socket.socket) -> bool:
        """True when the server closed (or reset) the connection."""
        if not select.select([sock], [], [], 0)[0]:
            return False
        sock.setblocking(False)
        try:
            return sock.recv(1) == b""
        except (BlockingIOError, ssl.SSLWantReadError):
            return False
        except OSError:
            return True
        finally:
            sock.setblocking(True)
