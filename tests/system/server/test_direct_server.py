"""The served reviews: the worker answers them itself, with the bytes gunicorn and Flask send.

A review as the API server sends it (HTTP/1.1, ``Content-Length``) is read and answered by the
worker without gunicorn's WSGI handling (``webhook.server.direct``); the same review with a
chunked body goes through gunicorn and the Flask app. Both, sent over one kept-alive TLS
connection to a real server, must get the same bytes (the ``Date`` header aside), and only the
second may reach gunicorn's access log, which logs every request the WSGI app answers.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
from collections.abc import Iterator

import pytest

from tests.objects import load, with_gpu
from tests.support.gunicorn import Server, running
from webhook.certs import issue

pytestmark = [pytest.mark.slow]

REVIEW = json.dumps(with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)).encode()
HEAD_END = b"\r\n\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("direct")
    with running(tmp, issue.write_certs(tmp / "tls"), options=("--access-logfile", "-")) as srv:
        yield srv


def _request(target: str, body: bytes, *, chunked: bool, close: bool = False) -> bytes:
    lines = [f"POST {target} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if close:
        lines.append("Connection: close")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _answer(tls: ssl.SSLSocket, request: bytes) -> bytes:
    """Send ``request``, read one answer with a Content-Length: its bytes."""
    tls.sendall(request)
    data = b""
    while HEAD_END not in data:
        chunk = tls.recv(65536)
        assert chunk, f"the connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(HEAD_END)
    length = int(re.search(rb"\r\nContent-Length: (\d+)\r\n", head + b"\r\n").group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = tls.recv(65536)
        assert chunk
        body += chunk
    assert len(body) == length
    return head + HEAD_END + body


def _no_date(answer: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*", b"\r\nDate: -", answer)


def _connect(server: Server) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.context.wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_direct_answers_are_the_bytes_of_the_wsgi_path(server: Server, path: str) -> None:
    with _connect(server) as tls:
        direct = _answer(tls, _request(f"{path}?via=direct", REVIEW, chunked=False))
        wsgi = _answer(tls, _request(f"{path}?via=wsgi", REVIEW, chunked=True))
        again = _answer(tls, _request(f"{path}?via=direct-again", REVIEW, chunked=False))
    assert direct.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nConnection: keep-alive\r\n" in direct
    assert _no_date(direct) == _no_date(wsgi) == _no_date(again)
    log = server.log()
    assert f"{path}?via=wsgi" in log  # gunicorn's access log line
    assert "via=direct" not in log  # answered without the WSGI app


def test_connection_close_is_answered_and_closed(server: Server) -> None:
    with _connect(server) as tls:
        answer = _answer(tls, _request("/validate", REVIEW, chunked=False, close=True))
        assert b"\r\nConnection: close\r\n" in answer
        assert tls.recv(1) == b""  # the server closed the connection after the answer
