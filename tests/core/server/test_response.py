"""One write per answer: ``webhook.server.response.OneWriteResponse`` against gunicorn's own.

Each response is written by both classes to a socket that records every ``sendall``; the
bytes on the wire must be the same (the ``Date`` header aside, which may tick between the two),
and ours must send a response with a Content-Length in one write.
"""

from __future__ import annotations

import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.http import wsgi

from webhook.server.response import OneWriteResponse, answer_bytes, use_one_write_responses


class _Recorder:
    """A socket that keeps what each ``sendall`` was given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))


class _Request:
    """The parts of gunicorn's request a response reads."""

    def __init__(
        self, method: str = "POST", version: tuple[int, int] = (1, 1), close: bool = False
    ) -> None:
        self.method = method
        self.version = version
        self.close = close

    def should_close(self) -> bool:
        return self.close


def _serve(
    cls: type[Any],
    status: str,
    headers: list[tuple[str, str]],
    body: list[bytes],
    method: str = "POST",
    close: bool = False,
) -> list[bytes]:
    sock = _Recorder()
    resp = cls(_Request(method, close=close), sock, Config())
    resp.start_response(status, headers)
    for chunk in body:
        resp.write(chunk)
    resp.close()
    return sock.writes


def _no_date(data: bytes) -> bytes:
    return re.sub(rb"Date: [^\r]*\r\n", b"Date: -\r\n", data)


CASES = [
    (
        "a review",
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", "11")],
        [b'{"ok":true}'],
        "POST",
    ),
    (
        "an error line",
        "413 REQUEST ENTITY TOO LARGE",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "5")],
        [b"big\r\n"],
        "POST",
    ),
    ("an empty body", "200 OK", [("Content-Length", "0")], [b""], "GET"),
    ("HEAD", "200 OK", [("Content-Length", "3")], [b"ok\n"], "HEAD"),
    ("a body in pieces", "200 OK", [("Content-Length", "6")], [b"abc", b"def"], "GET"),
    ("a streamed body", "200 OK", [("Content-Type", "text/plain")], [b"abc", b"def"], "GET"),
]


@pytest.mark.parametrize(
    ("status", "headers", "body", "method"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_same_bytes_as_gunicorn(
    status: str, headers: list[tuple[str, str]], body: list[bytes], method: str
) -> None:
    theirs = _serve(wsgi.Response, status, headers, body, method)
    ours = _serve(OneWriteResponse, status, headers, body, method)
    assert _no_date(b"".join(ours)) == _no_date(b"".join(theirs))


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "close"])
@pytest.mark.parametrize(("status", "headers", "body"), [c[1:4] for c in CASES[:2]])
def test_answer_bytes_are_gunicorns(
    status: str, headers: list[tuple[str, str]], body: list[bytes], close: bool
) -> None:
    # What the worker sends for a review it reads itself (webhook.server.worker).
    theirs = b"".join(_serve(wsgi.Response, status, headers, body, close=close))
    assert _no_date(answer_bytes(status, close, headers, b"".join(body))) == _no_date(theirs)


def test_a_review_leaves_in_one_write() -> None:
    body = b'{"apiVersion":"admission.k8s.io/v1"}'
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    writes = _serve(OneWriteResponse, "200 OK", headers, [body])
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert writes[0].endswith(b"\r\n\r\n" + body)
    # gunicorn's own class takes two, which is what this is for.
    assert len(_serve(wsgi.Response, "200 OK", headers, [body])) == 2


def test_the_date_header_is_current() -> None:
    writes = _serve(OneWriteResponse, "200 OK", [("Content-Length", "0")], [])
    date = re.search(rb"Date: ([^\r]*)\r\n", writes[0])
    assert date is not None
    sent = parsedate_to_datetime(date.group(1).decode()).timestamp()
    assert abs(sent - time.time()) < 5


def test_installed_for_gunicorn_create(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wsgi, "Response", wsgi.Response)  # undone after the test
    use_one_write_responses()
    assert wsgi.Response is OneWriteResponse
