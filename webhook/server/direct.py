"""Reading a review request's head straight from the bytes the worker gathered.

The worker (``webhook.server.worker``) gathers each request whole before it answers it. For
the requests every review is (``POST /mutate`` or ``POST /validate``, HTTP/1.1, a
``Content-Length`` body that is all here), it answers from those bytes itself, without
gunicorn's parser, WSGI environ and response objects and without Flask
(docs/server.md, "One HTTP path, or two", has the measurement). :func:`read_review_head`
decides which requests those are, and is strict: anything it does not recognise as such a
request (another method, path or version, a malformed or oversized head, a header gunicorn
would refuse, ``Transfer-Encoding``, ``Expect``, ``Upgrade``, two ``Content-Length`` or
``Content-Type`` headers, a length that is not the body's, bytes of a next request after the
body) is left to gunicorn and the Flask app, which answer it as they always have. So this
reads only well-formed requests, and it never answers an error itself.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass

__all__ = ["ReviewHead", "read_review_head"]

_HEAD_END = b"\r\n\r\n"
# gunicorn's limits, as webhook.server.gunicorn_conf sets them: a head beyond them is left
# to gunicorn, which refuses it.
MAX_REQUEST_LINE = 2048
MAX_FIELDS = 50
MAX_FIELD_SIZE = 8190

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # a field name (RFC 9110 section 5.6.2)
# A head gunicorn would read the same way, in one match: the request line of a POST over
# HTTP/1.1 with a target of visible ASCII (RFC 9112 section 3.2), then fields whose names are
# tokens and whose values hold no control characters but HTAB (RFC 9110 section 5.5: what
# gunicorn refuses), no folded lines. The fields are then read by _FIELD.
_HEAD = re.compile(
    rb"POST (/[\x21-\x7e]*) HTTP/1\.1((?:\r\n" + _TOKEN + rb":[\t\x20-\x7e\x80-\xff]*)*)"
)
_FIELD = re.compile(rb"\r\n(" + _TOKEN + rb"):([^\r]*)")
# Fields that make a request something else than a body of Content-Length bytes, answered at
# once: gunicorn reads these (a chunked body, 100-continue, an HTTP/2 upgrade).
_LEFT_TO_GUNICORN = frozenset(
    (b"transfer-encoding", b"expect", b"upgrade", b"http2-settings", b"te", b"trailer")
)
# What _read_fields does with a field, by its name lowered: one dictionary look-up per field.
_LENGTH, _TYPE, _CONNECTION, _ELSEWHERE = "length", "type", "connection", "elsewhere"
_KINDS = {
    b"content-length": _LENGTH,
    b"content-type": _TYPE,
    b"connection": _CONNECTION,
    **dict.fromkeys(_LEFT_TO_GUNICORN, _ELSEWHERE),
}


@dataclass
class ReviewHead:
    """A review request read by :func:`read_review_head`.

    ``must_close`` starts as the client's ``Connection: close``; gunicorn's ``pre_request``
    hook may set it too (``webhook.server.shutdown.close_after_answer``), as it does on
    gunicorn's own requests, whose attribute of that name it shares with ``method`` and
    ``path``.
    """

    path: str
    content_type: str
    body: bytes
    must_close: bool = False
    method: str = "POST"


def read_review_head(data: bytes, paths: Container[str], max_body: int) -> ReviewHead | None:
    """The review request that ``data`` is, exactly and whole; None for anything else.

    ``data``: every byte received for the request (head and body). ``paths``: the review
    paths (the query, which the API server adds, is ignored as gunicorn's ``PATH_INFO``
    does). ``max_body``: a longer body is left to the WSGI app, which refuses it (413).
    """
    end = data.find(_HEAD_END)
    if end < 0 or end > MAX_FIELD_SIZE:  # no line of a shorter head is over gunicorn's limits
        return None
    head = _HEAD.fullmatch(data, 0, end)
    if head is None:
        return None
    target = head.group(1)
    if len(target) + 15 > MAX_REQUEST_LINE:  # "POST " + target + " HTTP/1.1"
        return None
    path = target.split(b"?", 1)[0].decode("ascii")
    if path not in paths:
        return None
    fields = _read_fields(head.group(2))
    if fields is None:
        return None
    length, content_type, must_close = fields
    body_start = end + len(_HEAD_END)
    if length is None or length > max_body or len(data) - body_start != length:
        return None
    return ReviewHead(
        path=path,
        content_type=content_type.decode("latin-1") if content_type is not None else "",
        body=data[body_start:],
        must_close=must_close,
    )


def _read_fields(text: bytes) -> tuple[int | None, bytes | None, bool] | None:
    """Content-Length, Content-Type and ``Connection: close`` of the fields in ``text``
    (matched by ``_HEAD``); None for fields that leave the request to gunicorn."""
    fields = _FIELD.findall(text)
    if len(fields) > MAX_FIELDS:
        return None
    length: int | None = None
    content_type: bytes | None = None
    must_close = False
    for name, raw in fields:
        kind = _KINDS.get(name.lower())
        if kind is None:
            if b"_" in name:  # gunicorn drops or refuses names with "_" (its header_map)
                return None
            continue  # a field nothing here reads: its value is not even stripped
        value = raw.strip(b" \t")
        if kind is _LENGTH:
            # More digits than any body here (and int() refuses over 4,300): gunicorn's.
            if length is not None or not value.isdigit() or len(value) > 18:
                return None
            length = int(value)
        elif kind is _TYPE:
            if content_type is not None:
                return None
            content_type = value
        elif kind is _CONNECTION:
            must_close = b"close" in (token.strip(b" \t").lower() for token in value.split(b","))
        else:
            return None
    return length, content_type, must_close
