"""Reading a review request's head straight from the bytes the worker gathered.

The worker (``webhook.server.worker``) gathers each request whole before it answers it. For
the requests every review is (``POST /mutate`` or ``POST /validate``, HTTP/1.1, a
``Content-Length`` body that is all here), it answers from those bytes itself, without
gunicorn's parser, WSGI environ and response objects and without Flask
(docs/server.md, "One HTTP path, or two", has the measurement). :func:`read_review_head`
decides which requests those are, and is strict: anything it does not recognise as such a
request (another method, path or version, a malformed or oversized head, a header gunicorn
would refuse, ``Transfer-Encoding``, ``Expect``, ``Upgrade``, two ``Content-Length``,
``Content-Type`` or ``Host`` headers, scheme headers that disagree, a length that is not the
body's, bytes of a next request after the body) is left to gunicorn and the Flask app, which
answer it as they always have. So this reads only well-formed requests, and it never answers
an error itself. ``tests/core/server/test_direct_head.py`` holds it to gunicorn's own parser.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

__all__ = ["ReviewHead", "read_review_head"]

_HEAD_END = b"\r\n\r\n"
_LINE_END = b"\r\n"
# gunicorn's limits, as webhook.server.gunicorn_conf sets them: a head beyond them is left
# to gunicorn, which refuses it.
MAX_REQUEST_LINE = 2048
MAX_FIELDS = 50
MAX_FIELD_SIZE = 8190

# The request line read here: a POST over HTTP/1.1 whose target is a path (origin-form, RFC 9112
# section 3.2.1). No line shorter than b"POST / HTTP/1.1" both starts with the one and ends
# with the other, so the target is what lies between them: "/" or longer.
_START = b"POST /"
_VERSION = b" HTTP/1.1"
# The bytes each part of the head may hold, checked by deleting them (bytes.translate): a byte
# left is one gunicorn would refuse or read otherwise. (Two regular expressions did this before;
# after a pause either way costs about the same, docs/performance.md, "Ninth round".)
_TARGET = bytes(range(0x21, 0x7F))  # visible ASCII (RFC 9112 section 3.2), so no space either
_TOKEN = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# A field name is a token (RFC 9110 section 5.6.2); a field value holds no control character
# but HTAB, and no DEL (RFC 9110 section 5.5: what gunicorn refuses). A CR or LF that is not
# part of a line's CRLF is left in its line by the split, and refused here with the others.
_VALUE = b"\t" + bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100))
# Fields that make a request something else than a body of Content-Length bytes, answered at
# once: gunicorn reads these (a chunked body, 100-continue, an HTTP/2 upgrade).
_LEFT_TO_GUNICORN = frozenset(
    (b"transfer-encoding", b"expect", b"upgrade", b"http2-settings", b"te", b"trailer")
)
# The fields gunicorn reads as the request's scheme, with the value that says https (its
# default secure_scheme_headers, which webhook.server.gunicorn_conf keeps): from a peer it
# trusts (forwarded_allow_ips), it refuses two that disagree.
_SECURE = {
    b"x-forwarded-protocol": b"ssl",
    b"x-forwarded-proto": b"https",
    b"x-forwarded-ssl": b"on",
}
# What _read_fields does with a field, by its name lowered: one dictionary look-up per field.
_LENGTH, _TYPE, _HOST, _CONNECTION = "length", "type", "host", "connection"
_SCHEME, _ELSEWHERE = "scheme", "elsewhere"
_KINDS = {
    b"content-length": _LENGTH,
    b"content-type": _TYPE,
    b"host": _HOST,
    b"connection": _CONNECTION,
    **dict.fromkeys(_SECURE, _SCHEME),
    **dict.fromkeys(_LEFT_TO_GUNICORN, _ELSEWHERE),
}


@dataclass(slots=True)  # slots: one object fewer to build per review (no __dict__)
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
    # Every line of the head ends with CRLF (RFC 9112 section 2.2); a bare CR or LF stays in
    # its line and is refused below with the other control characters.
    lines = data[:end].split(_LINE_END)
    line = lines[0]
    # gunicorn reads a request line of up to MAX_REQUEST_LINE bytes; one of exactly that many
    # is left to it too (as the reader always did: no review's line comes near).
    if not line.startswith(_START) or not line.endswith(_VERSION) or len(line) >= MAX_REQUEST_LINE:
        return None
    target = line[len(_START) - 1 : -len(_VERSION)]
    if target.translate(None, _TARGET):  # a space, a control character, a byte over 0x7e
        return None
    path = target.partition(b"?")[0].decode("ascii")
    if path not in paths:
        return None
    fields = _read_fields(lines)
    if fields is None:
        return None
    length, content_type, must_close = fields
    body_start = end + len(_HEAD_END)
    if length is None or length > max_body or len(data) - body_start != length:
        return None
    # Positional: a call with keywords costs more, after a pause too.
    return ReviewHead(path, content_type.decode("latin-1"), data[body_start:], must_close)


def _read_fields(lines: list[bytes]) -> tuple[int | None, bytes, bool] | None:
    """Content-Length, Content-Type (empty if none) and ``Connection: close`` of the field
    lines that follow the request line ``lines[0]``; None for fields that leave the request
    to gunicorn."""
    if len(lines) > MAX_FIELDS + 1:
        return None
    single: dict[str, bytes] = {}  # Content-Length, Content-Type and Host: one of each
    secure: set[bool] = set()  # what the scheme fields say
    must_close = False
    for index in range(1, len(lines)):
        name, colon, raw = lines[index].partition(b":")
        # A name of token characters, at once followed by the colon: no space before it, no
        # folded line (one that starts with a space or a tab), which gunicorn refuses. Every
        # value is checked, as gunicorn does.
        if not colon or not name or name.translate(None, _TOKEN) or raw.translate(None, _VALUE):
            return None
        kind = _KINDS.get(name.lower())
        if kind is None:
            if b"_" in name:  # gunicorn drops or refuses names with "_" (its header_map)
                return None
            continue  # a field nothing here reads: its value is not even stripped
        if kind is _CONNECTION:
            # The "close" option (RFC 9112 section 9.6) in any Connection field line closes;
            # gunicorn closes on the first line whose whole value is "close".
            must_close = must_close or _asks_to_close(raw)
        elif kind is _SCHEME:
            secure.add(raw.strip(b" \t") == _SECURE[name.lower()])
        elif kind is _ELSEWHERE or kind in single:
            # A second Content-Length or Content-Type, which gunicorn refuses, and a second
            # Host, a field with one value only (RFC 9110 section 5.3), which it refuses too.
            return None
        else:
            single[kind] = raw.strip(b" \t")
    if len(secure) > 1:
        return None
    length = single.get(_LENGTH)
    # More digits than any body here (and int() refuses over 4,300): gunicorn's.
    if length is not None and (not length.isdigit() or len(length) > 18):
        return None
    return (
        int(length) if length is not None else None,
        single.get(_TYPE, b""),
        must_close,
    )


def _asks_to_close(value: bytes) -> bool:
    """Whether a Connection field's value has the ``close`` option among its tokens."""
    return b"close" in (token.strip(b" \t").lower() for token in value.split(b","))
