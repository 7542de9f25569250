"""The gunicorn worker: gthread, where no thread waits for a slow client.

gunicorn's gthread worker gives a connection a thread of its pool as soon as its first byte
arrives; the thread then does the TLS handshake and reads the request's headers and body with
blocking calls and no time limit. A client sending a byte a second held a thread for as long
as it liked, and eight of them (2 workers x 4 threads) took the server off the air, kept-alive
connections included: they wait for a thread in the same first-come-first-served queue.

:class:`ReviewWorker` keeps gthread (accepting, keep-alive, its poller, graceful shutdown) and
changes two things, the least that bounds every way a client holds a thread:

* **A thread never waits for a client's bytes.** :meth:`ReviewWorker.handle` steps the TLS
  handshake and reads the request without blocking; when more bytes are needed it gives the
  connection back to gthread's poller (gthread's own "defer" path, which it uses for a new
  connection that sends nothing) and the next step runs when bytes arrive. (The rest of a
  request that has begun is waited for up to ``REST_OF_REQUEST``, 10 ms, under the rule of
  ``next_request_soon`` below: a client often sends its head and its body in two writes.)
  Only a request whose headers and body are all here goes to gunicorn's parser and the app.
  A handshake not done within ``GPU_POLICY_HANDSHAKE_TIMEOUT``, or a request not all here within
  ``GPU_POLICY_READ_TIMEOUT`` of its first byte, closes the connection (checked at each step;
  a client that goes silent is closed by gthread after its keepalive time, holding no thread).
  What still reads blocking (a chunked body, a body after ``Expect: 100-continue``) is bounded
  by the socket deadlines of ``webhook.certs.serving``.
* **Connections that have answered go first** (:class:`AnsweredFirstPool`, through
  ``get_thread_pool``, the method gunicorn offers for it), and so do connections with a whole
  request to answer: a review on a connection the API server keeps alive never waits behind
  new connections, whose steps (handshake, gathering a request) use at most half the threads.

* **The next request on the same thread.** After an answer gthread hands a kept-alive
  connection back to its main thread, which registers it with its poller, wakes on the next
  request and submits it to the pool again: three hand-offs between threads per review, each
  of which waits for a core on a loaded machine. The API server sends its next request on the
  connection soon after the answer (the validating call right after the mutating one; the next
  pod's). So the thread that answered waits a little (``LINGER``) for it and serves it itself
  (:meth:`ReviewWorker.next_request_soon`), but only while no other connection waits for a
  thread, and never with all of its worker's threads. The lingering thread sleeps in one
  ``poll`` on its connection and on the pool's wake-up pipe, which the pool writes to when
  another connection is submitted while a thread lingers: it wakes once, for the request or
  for the other connection (which then never waits behind it), not every millisecond to look.

* **One write per answer** (``webhook.server.response``): the head and the body of a response
  leave in one TLS record, not two.

* **Reviews answered from the gathered bytes.** The step has the whole request in hand; when it
  is a review as the API server sends it (``webhook.server.direct.read_review_head``: ``POST
  /mutate`` or ``/validate``, HTTP/1.1, a ``Content-Length`` body, nothing unusual), the worker
  answers it through the app's ``DirectReviews`` and writes the answer itself
  (:meth:`ReviewWorker._answer_directly`): no gunicorn parser, WSGI environ, response object
  or Flask request, and no switch of the socket to blocking mode and back. Every other
  request goes to gunicorn and the Flask app as before. gunicorn's access log (off in the
  server's config) does not see these reviews; each has its own log line.

Only HTTP/1.1 over TLS is stepped this way (the webhook serves no HTTP/2: its context offers
no ALPN); anything else is left to gthread as it is.
"""

from __future__ import annotations

import re
import select
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gunicorn import http, sock
from gunicorn.workers.gthread import _DEFER, ThreadWorker

from webhook.certs.serving import ClientDeadlines
from webhook.server.app import DirectReviews, direct_reviews
from webhook.server.direct import ReviewHead, read_review_head
from webhook.server.pool import AnsweredFirstPool
from webhook.server.response import answer_bytes, use_one_write_responses
from webhook.server.settings import Settings

__all__ = ["AnsweredFirstPool", "ReviewWorker"]  # the pool re-exported: its tests name it here

# How long a thread that answered waits for the next request on the same connection (seconds).
LINGER = 0.010
# How long a thread waits for the rest of a request whose first bytes are here (seconds).
REST_OF_REQUEST = 0.010


_HEAD_END = b"\r\n\r\n"
# Both are matched against the head lowered, after a LF put in front of it: each line then
# starts after a LF, which the patterns find by a literal search. (The same lines as ``^`` with
# MULTILINE and IGNORECASE on the head as it came, which scanned every position: ~4 us each.)
# Header lines end in CRLF; ``$`` (MULTILINE) matches only before the LF.
_CONTENT_LENGTH = re.compile(rb"\ncontent-length:[ \t]*(\d+)[ \t]*\r?$", re.MULTILINE)
# Framings whose body gunicorn reads as it goes (bounded by the socket deadlines).
_STREAMED = re.compile(rb"\n(?:transfer-encoding|expect):")
# More head than gunicorn accepts anyway (limit_request_line + fields): let it answer 400.
_MAX_HEAD = 2048 + 50 * 8192


@dataclass
class _Progress:
    """Where a connection is: its handshake's start, the request being gathered, and whether
    it goes ahead of new connections (:func:`first_class`)."""

    handshake_started: float | None = None
    request_started: float | None = None
    buffer: bytearray = field(default_factory=bytearray)
    first_class: bool = False
    streamed: bool = False  # the request's body is read as it comes (chunked, Expect)
    request: bytes = b""  # the whole request gathered by the last step
    answered: bool = False  # the last step answered a request
    # The framing of the head in ``buffer`` (:func:`_framing`), read once it is all there.
    framing: _Framing | None = None


@dataclass
class _Framing:
    """How the request whose head ends at ``end`` is framed: its body read as it comes
    (``Transfer-Encoding``, ``Expect``), or ``length`` bytes (``Content-Length``; 0 without)."""

    end: int
    streamed: bool
    length: int


def _framing(data: bytearray) -> _Framing | None:
    """The framing of the request in ``data``; None while its head is not all there."""
    end = data.find(_HEAD_END)
    if end < 0:
        return None
    head = b"\n" + bytes(data[:end]).lower()
    match = _CONTENT_LENGTH.search(head)
    return _Framing(end, _STREAMED.search(head) is not None, int(match[1]) if match else 0)


class ReviewWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn's gthread worker stepping handshakes and requests without blocking."""

    alive: bool  # gunicorn's: False once the worker is to stop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """gthread's worker, with the time limits and body limit of the server's settings."""
        super().__init__(*args, **kwargs)
        settings = Settings.from_env()
        self.deadlines = ClientDeadlines(settings.handshake_timeout, settings.read_timeout)
        self.max_body = settings.max_body_bytes
        self.direct: DirectReviews | None = None
        # gunicorn's settings, read once in init_process.
        self.serves_tls = False
        self.keepalive: float = 0
        self.pre_request: Callable[[Any, Any], None] = lambda worker, request: None

    def load_wsgi(self) -> None:
        """gunicorn's loading of the app, and its reviews when it is the webhook's: their
        requests are answered without gunicorn's parser and the WSGI app
        (:meth:`_answer_directly`)."""
        super().load_wsgi()
        self.direct = direct_reviews(self.wsgi)

    def init_process(self) -> None:
        """gthread's start in the worker process, each answer sent in one write
        (``webhook.server.response``)."""
        use_one_write_responses()
        # Read once: gunicorn's config looks each setting up by name (~1-2 us a read), and a
        # worker's settings never change (a reload starts new workers).
        self.serves_tls = bool(self.cfg.is_ssl)
        self.keepalive = self.cfg.keepalive
        self.pre_request = self.cfg.pre_request
        super().init_process()

    def get_thread_pool(self) -> AnsweredFirstPool:
        """The pool gthread submits connections to (gunicorn's documented override)."""
        return AnsweredFirstPool(self.cfg.threads)

    def handle(self, conn: Any) -> Any:
        """One step of a connection; gthread's own handling once a whole request is here, and
        the next request too when it comes soon (:meth:`next_request_soon`)."""
        if not self.serves_tls:
            return super().handle(conn)
        while True:
            result = self._handle_step(conn)
            if result is not True or not self.next_request_soon(conn):
                return result

    def next_request_soon(self, conn: Any) -> bool:
        """True when the next request on ``conn`` (which has answered and stays open) started
        to arrive within ``LINGER`` and this thread should serve it; False hands ``conn`` back
        to gthread's poller, as it would without this."""
        progress: _Progress | None = getattr(conn, "review_progress", None)
        if progress is None or not progress.answered or progress.streamed or not self.alive:
            return False
        if conn.parser.unreader.buf.getvalue() or conn.sock.pending():
            return True  # already here (pipelined, or read ahead into TLS's buffer)
        return self._readable_soon(conn, time.monotonic() + LINGER)

    def _readable_soon(self, conn: Any, deadline: float) -> bool:
        """True when ``conn`` has bytes (or its end) before ``deadline``; False at once when
        this thread should not wait (another connection waits for a thread, or waiting would
        leave its worker no free thread)."""
        pool = self.tpool
        if not isinstance(pool, AnsweredFirstPool) or not pool.start_lingering():
            return False
        try:
            # poll, not select: a worker may hold more than FD_SETSIZE (1024) descriptors.
            fd = conn.sock.fileno()
            waiting = select.poll()
            waiting.register(fd, select.POLLIN)
            waiting.register(pool.wake_fd, select.POLLIN)
            while self.alive and pool.quiet():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                events = waiting.poll(left * 1000)
                if any(ready == fd for ready, _ in events):
                    return True  # bytes, or the end: the caller finds out which
                if events and pool.quiet():
                    pool.clear_wake()  # the connection that woke it is taken already
            return False
        finally:
            pool.stop_lingering()

    def _handle_step(self, conn: Any) -> Any:
        """One step of a connection (see the module's docstring)."""
        progress: _Progress | None = getattr(conn, "review_progress", None)
        if progress is None:
            progress = conn.review_progress = _Progress()
        progress.answered = False
        try:
            step = self._step(conn, progress)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self.log.debug("closing a connection from %s: %s", conn.client, exc)
            return False
        if step == "wait":
            return _DEFER
        if step == "close":
            return False
        request, progress.request = progress.request, b""
        if not progress.first_class and not progress.streamed:
            # A whole request is here: it goes back to the pool as first class (gthread
            # submits a connection again at once when its parser holds bytes), so that the
            # threads kept for new connections only ever do their short steps.
            conn.parser.unreader.unread(request)
            progress.first_class = True
            return True
        direct = self.direct
        head = None
        if direct is not None and not progress.streamed:
            head = read_review_head(request, direct.paths, self.max_body)
        if direct is not None and head is not None:
            keep = self._answer_directly(conn, direct, head)
        else:
            conn.parser.unreader.unread(request)
            keep = super().handle(conn)
        progress.first_class = True  # it has answered
        progress.answered = True
        return keep

    def _answer_directly(self, conn: Any, direct: DirectReviews, head: ReviewHead) -> bool:
        """Answer the review ``head`` read from the request's bytes, as gthread's
        ``handle_request`` would (the ``pre_request`` hook, the request count and its
        restart, keep-alive or close), with one write; True to keep the connection."""
        self.pre_request(self, head)
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        close = (
            head.must_close
            or not self.alive
            or not self.keepalive
            or len(self.keepalived_conns) >= self.max_keepalived
        )
        status, headers, body, record = direct.answer_first(head.path, head.content_type, head.body)
        data = answer_bytes(status, close, headers, body)
        try:
            self._send(conn.sock, data)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self.log.debug("closing a connection from %s: %s", conn.client, exc)
            return False
        finally:
            record()  # the review's metrics and log line, once its answer is out
        return not close

    def _send(self, tls: Any, data: bytes) -> None:
        """``data`` on the non-blocking socket: at once when it fits (always, for an answer
        on a connection whose client reads), else waiting up to the read deadline."""
        try:
            sent = tls.send(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            sent = 0  # TLS takes the same bytes again (its moving write buffer)
        if sent < len(data):
            tls.settimeout(self.deadlines.read)
            tls.sendall(data[sent:])

    def _step(self, conn: Any, progress: _Progress) -> str:
        """``wait`` (for more bytes, in the poller), ``close``, or ``ready`` (a whole request)."""
        now = time.monotonic()
        if not conn.initialized:
            handshake = self._handshake_step(conn, progress, now)
            if handshake is not None:
                return handshake
        if progress.request_started is None:
            # The deadline runs from the request's first byte, not from a step that found
            # none: a client may open a connection and send on it much later (Go's transport
            # keeps a connection it dialled for a request that another connection served).
            progress.buffer = bytearray(conn.parser.unreader.take_buffered())
            progress.framing = None
            if progress.buffer:
                progress.request_started = now
        elif now - progress.request_started > self.deadlines.read:
            return self._too_slow(conn, "request headers and body", self.deadlines.read)
        if conn.sock.gettimeout() != 0.0:  # a system call each time: only when needed
            conn.sock.setblocking(False)
        # The rest of a request that has begun usually follows within a millisecond (a client
        # may send its head and its body in two writes): wait that long on this thread, as
        # next_request_soon does, rather than hand the connection to the poller and back.
        deadline = now + REST_OF_REQUEST
        while not self._whole(progress):
            try:
                chunk = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                if progress.buffer and self._readable_soon(conn, deadline):
                    continue
                return "wait"  # what came so far stays in progress.buffer
            if not chunk:
                return "close"  # the client went away
            progress.buffer += chunk
            if progress.request_started is None:
                progress.request_started = time.monotonic()
        progress.streamed = self._streamed(progress)
        progress.request = bytes(progress.buffer)
        progress.request_started = None
        progress.buffer = bytearray()
        progress.framing = None
        return "ready"

    def _handshake_step(self, conn: Any, progress: _Progress, now: float) -> str | None:
        """One step of the TLS handshake: ``wait``, ``close``, or None once it is done."""
        if progress.handshake_started is None:
            if not conn.data_ready:
                return "wait"  # nothing sent yet: the poller waits, not a thread
            progress.handshake_started = now
            conn.sock.setblocking(False)
            conn.sock = sock.ssl_wrap_socket(conn.sock, self.cfg)
        if now - progress.handshake_started > self.deadlines.handshake:
            return self._too_slow(conn, "TLS handshake", self.deadlines.handshake)
        conn.sock.setblocking(False)
        try:
            conn.sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return "wait"
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.initialized = True
        return None

    def _streamed(self, progress: _Progress) -> bool:
        """True when gunicorn will read the body as it comes (it is not all in the buffer)."""
        framing = progress.framing
        if framing is None:
            return True
        return framing.streamed or framing.length > self.max_body

    def _whole(self, progress: _Progress) -> bool:
        """True when the buffer holds a whole request, or all of it gunicorn should read here."""
        data = progress.buffer
        framing = progress.framing
        if framing is None:
            framing = progress.framing = _framing(data)
            if framing is None:
                return len(data) > _MAX_HEAD
        if framing.streamed:
            return True
        length = framing.length
        return length > self.max_body or len(data) >= framing.end + len(_HEAD_END) + length

    def _too_slow(self, conn: Any, what: str, seconds: float) -> str:
        self.log.info(
            "closing the connection from %s: %s not received within %g s",
            "%s:%s" % tuple(conn.client[:2]),  # noqa: UP031 - an address tuple
            what,
            seconds,
        )
        return "close"
