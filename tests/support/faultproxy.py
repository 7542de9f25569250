"""A fault-injecting HTTP proxy in front of the real API server: what it will not do on demand.

Clients speak plain HTTP/1.1 to the proxy on 127.0.0.1 (a kubeconfig without credentials,
:meth:`FaultProxy.write_kubeconfig`); the proxy forwards each request over TLS to the API server
as the user whose certificate it holds, and relays the answer byte for byte. Between the two
it can:

* record every request (:attr:`FaultProxy.requests`: method, path, resource, verb, query), so
  a test counts lists and watches;
* answer ``503 ServiceUnavailable`` itself, close connections without an answer, or refuse
  them (:meth:`FaultProxy.go_down`, :meth:`FaultProxy.come_back`): an API server outage;
* hold every request ``delay`` seconds before forwarding it: a slow API server (setting
  ``delay`` again, to 0 say, lets the requests held now go when their new wait is over);
* cut every open watch stream mid-chunk (:meth:`FaultProxy.drop_watches`): a load balancer
  or NAT that forgot the connection.

Everything else (the objects, resourceVersions, paging, selectors, RBAC, validation) is the
real server's. Standard library only; one thread per client connection.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tests.support.waiting import TIMEOUT

__all__ = ["FaultProxy", "Request", "route"]

_MAX_LINE = 65536
_KINDS = {"nodes": "Node", "pods": "Pod", "configmaps": "ConfigMap", "secrets": "Secret"}


@dataclass(frozen=True)
class Request:
    """One request the proxy received."""

    method: str
    path: str
    resource: str | None  # "nodes", "pods", "configmaps", "secrets", ... or None
    verb: str  # "list", "watch", "get", "create", "update", "patch", "delete" or "other"
    query: dict[str, str]
    at: float = field(default_factory=time.monotonic)


def route(method: str, target: str) -> Request:
    """What a request is about: its resource (URL plural) and verb, as RBAC names them."""
    url = urlsplit(target)
    query = dict(parse_qsl(url.query, keep_blank_values=True))
    parts = [p for p in url.path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return Request(method, url.path, None, "other", query)
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces":
        rest = ["namespaces", rest[1]]
    if not rest:
        return Request(method, url.path, None, "other", query)
    resource, named = rest[0], len(rest) > 1
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if method == "GET":
        verb = "watch" if query.get("watch") in ("true", "1") else ("get" if named else "list")
    else:
        verb = verbs.get(method, "other")
    return Request(method, url.path, resource, verb, query)


class _Cut(Exception):
    """The connection was cut (by a fault or by either side)."""


def _read_head(rfile: object) -> list[bytes]:
    """The start line and header lines of a message (without the blank line)."""
    lines = []
    while True:
        line = rfile.readline(_MAX_LINE)  # type: ignore[attr-defined]
        if not line:
            raise _Cut
        if line in (b"\r\n", b"\n"):
            if lines:
                return lines
            continue  # stray blank line between messages
        lines.append(line)


def _headers(lines: list[bytes]) -> dict[str, str]:
    out = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        out[name.strip().lower()] = value.strip()
    return out


@dataclass(eq=False)
class _Conn:
    client: socket.socket
    upstream: ssl.SSLSocket | None = None
    in_watch: bool = False
    watch: Request | None = None
    # Held while a whole chunk is written, so that an injected one never lands inside another.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cut(self) -> None:
        for s in (self.client, self.upstream):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


class FaultProxy:
    """Plain HTTP on 127.0.0.1 in front of ``upstream`` (``host``, ``port``) over TLS.

    ``context`` is the client TLS context for the API server (its CA, the identity the proxy
    forwards as). Use as a context manager, or :meth:`start` and :meth:`stop`.
    """

    def __init__(self, upstream: tuple[str, int], context: ssl.SSLContext) -> None:
        self.upstream = upstream
        self.context = context
        self.port = 0
        self.requests: list[Request] = []
        self._delay = 0.0
        #: When set, requests go on with ``Authorization: Bearer <bearer>`` in place of the
        #: client's (give the proxy a context without a client certificate, which would win).
        self.bearer: str | None = None
        #: (request, HTTP status) of every answer from the API server, as its head arrives.
        self.answers: list[tuple[Request, int]] = []
        self._down: str | None = None
        self._conns: set[_Conn] = set()
        self._lock = threading.Condition()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def delay(self) -> float:
        """Seconds every request waits, once recorded, before it is forwarded (0: none)."""
        return self._delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        # The requests held now wait by the new figure: 0 lets them go at once.
        with self._lock:
            self._delay = seconds
            self._lock.notify_all()

    @property
    def url(self) -> str:
        """The proxy's address: what a kubeconfig's ``server`` is."""
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig for the proxy (no credentials: the proxy holds them) in ``directory``."""
        path = directory / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
                    "users": [{"name": "proxy", "user": {}}],
                    "contexts": [
                        {"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}
                    ],
                    "current-context": "proxy",
                }
            )
        )
        return path

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen (port 0 the first time, the same port after a ``refuse`` outage)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._thread = threading.Thread(
            target=self._accept, args=(sock,), name=f"fault-proxy-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every connection."""
        self._close_listener()
        self.cut_all()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_listener(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def cut_all(self, only_watches: bool = False) -> int:
        """Cut every connection (only those streaming a watch); how many."""
        with self._lock:
            conns = [c for c in self._conns if c.in_watch or not only_watches]
        for c in conns:
            c.cut()
        return len(conns)

    # --- faults ----------------------------------------------------------------------------

    def go_down(self, mode: str = "503") -> None:
        """Make the API unreachable and cut open connections.

        ``"503"`` answers every request with 503 ServiceUnavailable; ``"close"`` accepts
        connections and closes them without an answer; ``"refuse"`` stops listening.
        """
        if mode not in ("503", "close", "refuse"):
            raise ValueError(mode)
        self._down = mode
        if mode == "refuse":
            self._close_listener()
        self.cut_all()

    def come_back(self) -> None:
        """End an outage started by :meth:`go_down`."""
        mode, self._down = self._down, None
        if mode == "refuse":
            self.start()

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-chunk; returns how many were cut."""
        return self.cut_all(only_watches=True)

    def bookmark(self, resource_version: str) -> int:
        """Send a BOOKMARK at ``resource_version`` to every open watch that allows them, as the
        API server's watch cache does about once a minute; returns how many got one."""
        with self._lock:
            conns = [c for c in self._conns if c.in_watch and c.watch is not None]
        sent = 0
        for conn in conns:
            watch = conn.watch
            if watch is None or watch.query.get("allowWatchBookmarks") != "true":
                continue
            kind = _KINDS.get(watch.resource or "", "Status")
            event = (
                json.dumps(
                    {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": kind,
                            "apiVersion": "v1",
                            "metadata": {"resourceVersion": resource_version},
                        },
                    }
                ).encode()
                + b"\n"
            )
            with conn.lock, contextlib.suppress(OSError):
                conn.client.sendall(b"%x\r\n" % len(event) + event + b"\r\n")
                sent += 1
        return sent

    # --- observing -------------------------------------------------------------------------

    @property
    def open_watches(self) -> int:
        """How many watch answers are streaming now."""
        with self._lock:
            return sum(1 for c in self._conns if c.in_watch)

    def count(self, resource: str, verb: str) -> int:
        """How many requests of ``verb`` on ``resource`` arrived."""
        return sum(1 for r in list(self.requests) if r.resource == resource and r.verb == verb)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        """Wait until ``predicate()`` holds (checked as requests come and go, and every 50 ms);
        False after ``timeout`` seconds (generous: a deadline only says when to give up)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
        return True

    def _hold(self, request: Request) -> None:
        """Wait until ``request`` has been held ``delay`` seconds (by the figure now set)."""
        with self._lock:
            while (left := request.at + self._delay - time.monotonic()) > 0:
                self._lock.wait(left)

    def _answered(self, request: Request, status: int) -> None:
        self.answers.append((request, status))

    def _changed(self) -> None:
        with self._lock:
            self._lock.notify_all()

    # --- serving ---------------------------------------------------------------------------

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            if self._down == "close":
                client.close()
                continue
            conn = _Conn(client)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: _Conn) -> None:
        rfile = conn.client.makefile("rb")
        upfile = None
        try:
            while True:
                head = _read_head(rfile)
                method, target, _ = head[0].decode("latin-1").split(" ", 2)
                headers = _headers(head)
                body = rfile.read(int(headers.get("content-length") or 0))
                request = route(method, target)
                self.requests.append(request)
                self._changed()
                self._hold(request)
                if self._down == "503":
                    self._unavailable(conn.client)
                    continue
                if self._down is not None:
                    raise _Cut
                if conn.upstream is None:
                    raw = socket.create_connection(self.upstream, timeout=30)
                    conn.upstream = self.context.wrap_socket(raw, server_hostname=self.upstream[0])
                    conn.upstream.settimeout(None)
                    upfile = conn.upstream.makefile("rb")
                assert upfile is not None
                if self.bearer is not None:
                    head = [h for h in head if not h.lower().startswith(b"authorization:")]
                    head.append(f"Authorization: Bearer {self.bearer}\r\n".encode())
                conn.upstream.sendall(b"".join(head) + b"\r\n" + body)
                conn.in_watch = request.verb == "watch"
                conn.watch = request if conn.in_watch else None
                if conn.in_watch:
                    # A client that goes away mid-watch sends nothing more, it closes: notice
                    # it (the relay waits on the API server, not on the client).
                    threading.Thread(
                        target=self._hang_up_on_close, args=(conn,), daemon=True
                    ).start()
                self._changed()
                try:
                    keep = self._relay(
                        upfile, conn, method, functools.partial(self._answered, request)
                    )
                    if not keep:
                        return
                finally:
                    conn.in_watch = False
                    conn.watch = None
                    self._changed()
        except (_Cut, OSError, ValueError):
            return
        finally:
            conn.cut()
            with contextlib.suppress(OSError):
                conn.client.close()
            if conn.upstream is not None:
                with contextlib.suppress(OSError):
                    conn.upstream.close()
            with self._lock:
                self._conns.discard(conn)
                self._lock.notify_all()

    @staticmethod
    def _hang_up_on_close(conn: _Conn) -> None:
        try:
            data = conn.client.recv(1, socket.MSG_PEEK)
        except OSError:
            data = b""
        if not data:
            conn.cut()

    @staticmethod
    def _unavailable(client: socket.socket) -> None:
        body = json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the server is currently unable to handle the request",
                "reason": "ServiceUnavailable",
                "code": 503,
            }
        ).encode()
        client.sendall(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    @staticmethod
    def _relay(upfile: object, conn: _Conn, method: str, on_status: Callable[[int], None]) -> bool:
        """Copy one answer from the API server to the client (``on_status`` hears its status
        as soon as it arrives: a watch streams on); False when the connection ends."""
        client = conn.client
        head = _read_head(upfile)
        client.sendall(b"".join(head) + b"\r\n")
        headers = _headers(head)
        status = int(head[0].split()[1])
        on_status(status)
        read = upfile.read  # type: ignore[attr-defined]
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            pass
        elif "chunked" in headers.get("transfer-encoding", ""):
            FaultProxy._relay_chunked(upfile, conn)
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left:
                data = read(min(left, 65536))
                if not data:
                    raise _Cut
                client.sendall(data)
                left -= len(data)
        else:
            while data := read(65536):
                client.sendall(data)
            return False
        return headers.get("connection", "").lower() != "close"

    @staticmethod
    def _relay_chunked(upfile: object, conn: _Conn) -> None:
        """Copy a chunked body, each chunk whole (an injected bookmark goes between two)."""
        client = conn.client
        read = upfile.read  # type: ignore[attr-defined]
        readline = upfile.readline  # type: ignore[attr-defined]
        while True:
            size_line = readline(_MAX_LINE)
            if not size_line:
                raise _Cut
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                client.sendall(size_line)
                while True:  # trailers, then the blank line
                    line = readline(_MAX_LINE)
                    if not line:
                        raise _Cut
                    client.sendall(line)
                    if line in (b"\r\n", b"\n"):
                        return
            data = read(size + 2)
            if len(data) < size + 2:
                raise _Cut
            with conn.lock:
                client.sendall(size_line + data)
