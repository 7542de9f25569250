"""gunicorn's HTTP/1 response, its head and body leaving in one write.

gunicorn writes a response's status line and headers with one ``sendall`` and its body with
another. Over TLS each ``sendall`` is a TLS record of its own and a ``write`` system call of
its own, and the client (the API server) can only use the answer once the second arrives;
on a loaded machine the writing thread was seen to lose its core between the two (strace,
docs/performance.md). :class:`OneWriteResponse` keeps the head until the first body bytes and
sends both in one ``sendall``: one record, one system call, the same bytes on the wire. A
response with no body bytes (HEAD, 204, an empty body) sends its head when it closes, and a
chunked one (no Content-Length: a streamed body) sends its head first as gunicorn does.

The ``Date`` header is formatted once a second instead of once a response.
"""

from __future__ import annotations

import time

from gunicorn import SERVER, util
from gunicorn.http import wsgi

__all__ = ["OneWriteResponse", "answer_bytes", "use_one_write_responses"]

_date_second = -1
_date_value = ""


def _http_date() -> str:
    """gunicorn's ``Date`` value, formatted again only when the second changes."""
    global _date_second, _date_value  # noqa: PLW0603 - a cache shared by the worker's threads
    now = time.time()
    second = int(now)
    if second != _date_second:
        # Two threads may both format it at a second's turn: both get the right value.
        _date_value = util.http_date(second)
        _date_second = second
    return _date_value


class OneWriteResponse(wsgi.Response):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn's ``Response``, holding its head until it can go with the body."""

    _held: bytes | None = None
    headers_sent: bool  # set by gunicorn's __init__

    def default_headers(self) -> list[str]:
        """gunicorn's status line and default headers, with a ``Date`` made once a second."""
        if self.upgrade:
            connection = "upgrade"
        elif self.should_close():
            connection = "close"
        else:
            connection = "keep-alive"
        headers = _first_lines(
            f"{self.req.version[0]}.{self.req.version[1]}", self.status, connection
        )
        if self.chunked:
            headers.append("Transfer-Encoding: chunked\r\n")
        return headers

    def send_headers(self) -> None:
        """Make the head, as gunicorn does, and keep it for the first body bytes."""
        if self.headers_sent:
            return
        lines = self.default_headers()
        lines.extend([f"{name}: {value}\r\n" for name, value in self.headers])
        self._held = ("".join(lines) + "\r\n").encode("latin-1")
        self.headers_sent = True
        if self.chunked:
            self._flush()  # a streamed body: its head goes now, as gunicorn sends it

    def _emit_body(self, data: bytes) -> None:
        """The body bytes, after the held head in the same write."""
        held = self._held
        if held is None:
            super()._emit_body(data)
            return
        self._held = None
        util.write(self.sock, held + data)

    def close(self) -> None:
        """Send what is held (a response without body bytes), then gunicorn's close."""
        if not self.headers_sent:
            self.send_headers()
        self._flush()
        super().close()

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            util.write(self.sock, held)


def _first_lines(version: str, status: str, connection: str) -> list[str]:
    """gunicorn's status line and default headers (Server, Date, Connection), in its order."""
    return [
        f"HTTP/{version} {status}\r\n",
        f"Server: {SERVER}\r\n",
        f"Date: {_http_date()}\r\n",
        f"Connection: {connection}\r\n",
    ]


def answer_bytes(status: str, close: bool, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """The bytes gunicorn sends for an HTTP/1.1 answer of ``status`` (``"200 OK"``) with
    ``headers`` (Content-Length among them) and ``body``: the head and the body in one piece,
    as :class:`OneWriteResponse` sends them (``webhook.server.worker`` answers reviews so)."""
    lines = _first_lines("1.1", status, "close" if close else "keep-alive")
    lines.extend([f"{name}: {value}\r\n" for name, value in headers])
    lines.append("\r\n")
    return "".join(lines).encode("latin-1") + body


def use_one_write_responses() -> None:
    """Make gunicorn's HTTP/1 responses :class:`OneWriteResponse` in this process.

    gthread builds each response with ``gunicorn.http.wsgi.create``, which takes the module's
    ``Response`` unless it is given a class (HTTP/2 passes its own, and is left alone). Called
    in the worker process, after the fork.
    """
    setattr(wsgi, "Response", OneWriteResponse)  # noqa: B010 - gunicorn's name, not ours
