"""Logging for the server process: one line per review, written without one syscall each.

Writing every record to stderr as it comes (what ``logging.StreamHandler`` does, and stderr is
line-buffered) costs a ``write`` per review; with several threads per worker each write also
hands the GIL over. Measured with bench/http.py, that was a quarter of a no-op request's CPU.
:class:`LineBufferedHandler` keeps the formatted lines and writes them in batches instead:

* at least every ``interval`` seconds (a daemon thread), when 32 KiB have gathered, at once for
  a WARNING or worse (an error shows up before whatever follows it), and at exit
  (``logging.shutdown`` flushes every handler);
* in whole lines, each ``write`` at most ``PIPE_BUF`` (4096) bytes unless a single line is
  longer: the workers of one gunicorn share the container's stderr pipe, and writes up to
  ``PIPE_BUF`` into a pipe are never interleaved with another process's, so lines stay whole.

A worker killed with SIGKILL loses at most ``interval`` seconds of INFO lines.

:class:`ReviewLog` makes the review line, the one written on every request. Building it through
a ``LogRecord`` and a ``Formatter`` took 12 us, against 4 us for the same line made here (in
process). :func:`direct_handler` finds, once, whether a logger's lines end in exactly one
:class:`LineBufferedHandler` that formats a record into the very line :func:`line_for` makes
(tried on a sample record) with nothing else on the way (no other handler, no filter); the
review line then goes straight to :meth:`LineBufferedHandler.add_line`. Any other logging
set-up gets the ordinary ``logger.info`` path.
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from webhook.admission import Outcome

FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
_SECOND_FORMAT = "%Y-%m-%d %H:%M:%S"  # logging.Formatter.default_time_format
PIPE_BUF = 4096
FLUSH_BYTES = 32 * 1024


def chunks(data: bytes, limit: int = PIPE_BUF) -> list[bytes]:
    """``data`` (whole lines) cut at line ends into pieces of at most ``limit`` bytes.

    A single line longer than ``limit`` is a piece of its own.
    """
    out: list[bytes] = []
    start = 0
    while start < len(data):
        end = start + limit
        if end >= len(data):
            out.append(data[start:])
            break
        cut = data.rfind(b"\n", start, end)
        if cut < start:  # one line longer than the limit
            cut = data.find(b"\n", end)
            if cut < 0:
                out.append(data[start:])
                break
        out.append(data[start : cut + 1])
        start = cut + 1
    return out


class _LinePrefix:
    """What starts every line: the second's local time text, and this process's pid.

    ``strftime`` runs once a second instead of once a line, and the pid is read once (and
    again in a forked child): ``os.getpid()`` is a system call, and every review line has it.
    """

    __slots__ = ("pid", "second")

    def __init__(self) -> None:
        # (whole second, its text): a tuple swapped in one assignment, so threads see an old
        # or a new pair, never a mix.
        self.second: tuple[int, str] = (-1, "")
        self.pid = os.getpid()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.pid = os.getpid()


_prefix = _LinePrefix()


def timestamp(created: float) -> str:
    """``created`` as logging's default ``asctime``: ``2026-11-22 09:15:02,431``, local time."""
    whole = int(created)
    cached = _prefix.second
    if cached[0] != whole:
        cached = (whole, time.strftime(_SECOND_FORMAT, time.localtime(created)))
        _prefix.second = cached
    return f"{cached[1]},{int((created - whole) * 1000):03d}"


class Formatter(logging.Formatter):
    """``logging.Formatter`` whose default ``asctime`` comes from :func:`timestamp`."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """The record's time as :func:`timestamp` gives it, unless a ``datefmt`` is set."""
        if datefmt is not None or self.datefmt is not None:
            return super().formatTime(record, datefmt)
        # The record's own msecs: how they are computed depends on the Python version.
        return f"{timestamp(record.created)[:-4]},{int(record.msecs):03d}"


def line_for(logger: logging.Logger, level: int, message: str, created: float | None = None) -> str:
    """The line :data:`FORMAT` makes of ``message`` logged on ``logger`` at ``level``.

    At ``created`` (a ``time.time()`` value), by default now.
    """
    return (
        f"{timestamp(time.time() if created is None else created)} "
        f"{logging.getLevelName(level)} [{_prefix.pid}] {logger.name}: {message}\n"
    )


def _formats_like_line_for(formatter: logging.Formatter, logger: logging.Logger) -> bool:
    # A sample record at a whole millisecond (so any way of computing msecs agrees), formatted
    # both ways: only the format's public behaviour is compared, not how it is configured.
    sample = logging.LogRecord(logger.name, logging.INFO, "", 0, "sample", (), None)
    sample.created, sample.msecs = 1_790_000_000.25, 250.0
    expected = line_for(logger, logging.INFO, "sample", sample.created)
    try:
        return formatter.format(sample) + "\n" == expected
    except Exception:  # a formatter that cannot format the sample is not ours
        return False


def direct_handler(logger: logging.Logger) -> LineBufferedHandler | None:
    """The one handler ``logger``'s records reach, if it is a plain LineBufferedHandler.

    None when the records would meet a filter, another handler, or a different format on the
    way (then log through ``logger`` as usual). Decided at call time: a logging set-up changed
    afterwards is not seen.
    """
    found: list[logging.Handler] = []
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters:
            return None
        found += node.handlers
        if not node.propagate:
            break
        node = node.parent
    if len(found) != 1:
        return None
    handler = found[0]
    if not isinstance(handler, LineBufferedHandler) or handler.filters:
        return None
    if handler.formatter is None or not _formats_like_line_for(handler.formatter, logger):
        return None
    return handler


_NEEDS_QUOTES = re.compile(r'[\s"=\\]|^$')
# Characters that never need quotes: uids, names and namespaces are made of these, and a set
# check of them is several times cheaper than the regular expression.
_PLAIN = frozenset(string.ascii_letters + string.digits + "-._:/*+@,")


def logfmt_value(value: str | None) -> str:
    """A logfmt value: bare when it has no spaces, quotes or ``=``, else JSON-quoted."""
    text = value or ""
    if text and _PLAIN.issuperset(text):
        return text
    if text.isprintable() and not _NEEDS_QUOTES.search(text):
        return text
    return json.dumps(text)


class ReviewLog:
    """The one log line per answered review; objects are never logged.

    ``review uid=... endpoint=... kind=... namespace=... name=... operation=... dryRun=...
    decision=... failed=... ms=...``, then ``warned=``, ``patched=true`` and ``skipped=`` when
    they apply. An engine error is logged first, with its traceback. The line goes straight to
    the handler :func:`direct_handler` finds for ``logger`` (found once, here), else through
    ``logger.info``.
    """

    def __init__(self, logger: logging.Logger) -> None:
        """Log on ``logger``."""
        self.logger = logger
        self._direct = direct_handler(logger)

    def write(self, outcome: Outcome, seconds: float) -> None:
        """Log the review ``outcome``, answered in ``seconds``."""
        logger = self.logger
        req = outcome.request
        if outcome.error is not None:
            exc = outcome.error
            logger.error(
                "engine error uid=%s endpoint=%s kind=%s: %s",
                req.uid,
                outcome.endpoint,
                req.kind,
                type(exc).__name__,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        if not logger.isEnabledFor(logging.INFO):
            return
        line = (
            f"review uid={logfmt_value(req.uid)} endpoint={outcome.endpoint} "
            f"kind={logfmt_value(req.kind)} namespace={logfmt_value(req.namespace or '')} "
            f"name={logfmt_value(req.display_name)} operation={req.operation} "
            f"dryRun={'true' if req.dry_run else 'false'} decision={outcome.verdict} "
            f"failed={','.join(outcome.failed) or '-'} ms={seconds * 1000:.2f}"
        )
        if outcome.warned:
            line += f" warned={','.join(outcome.warned)}"
        if outcome.patched:
            line += " patched=true"
        if outcome.skipped:
            line += f" skipped={logfmt_value(outcome.skipped)}"
        direct = self._direct
        if direct is not None:
            direct.add_line(line_for(logger, logging.INFO, line))
        else:
            logger.info("%s", line)


class LineBufferedHandler(logging.Handler):
    """Formats records into lines and writes them to a file descriptor in batches."""

    def __init__(self, fd: int = 2, *, interval: float = 0.5) -> None:
        """Write to ``fd`` (default stderr) at least every ``interval`` seconds."""
        super().__init__()
        self.fd = fd
        self.interval = interval
        self._lines: list[str] = []
        self._size = 0
        self._flusher = threading.Thread(target=self._flush_loop, name="log-flush", daemon=True)
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's line; write the batch when it is big or the record is a warning."""
        try:
            line = self.format(record) + "\n"
        except Exception:  # logging's contract: report and carry on
            self.handleError(record)
            return
        # Handler.handle holds self.lock around emit.
        self._keep(line, record.levelno)

    def add_line(self, line: str, level: int = logging.INFO) -> None:
        """Keep a line already formatted (ending in a newline), as ``emit`` keeps a record's."""
        with self.lock:  # type: ignore[union-attr]  # set by Handler.__init__ (createLock)
            self._keep(line, level)

    def _keep(self, line: str, level: int) -> None:
        self._lines.append(line)
        self._size += len(line)
        if level >= logging.WARNING or self._size >= FLUSH_BYTES:
            self._write()

    def flush(self) -> None:
        """Write every line kept so far."""
        with self.lock:  # type: ignore[union-attr]  # set by Handler.__init__ (createLock)
            self._write()

    def _write(self) -> None:
        if not self._lines:
            return
        data = "".join(self._lines).encode("utf-8", "backslashreplace")
        self._lines.clear()
        self._size = 0
        try:
            for piece in chunks(data):
                view = memoryview(piece)
                while view:
                    view = view[os.write(self.fd, view) :]
        except OSError:
            # Nowhere to write (stderr closed): nothing sensible is left to do with the lines.
            pass

    def _flush_loop(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush()


def configure_logging(level: str, stream: TextIO | None = None) -> None:
    """Log to stderr at ``level`` with the worker's pid, unless logging is already set up.

    Also switches off what the format does not print (the caller's file and line, thread and
    multiprocessing names): the logging HOWTO's "Optimization" knobs. ``stream`` (tests) gets
    a plain StreamHandler instead of the batching one.
    """
    logging._srcfile = None  # documented knob: no lookup of the caller
    logging.logThreads = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    if not root.handlers:
        handler: logging.Handler
        if stream is not None:
            handler = logging.StreamHandler(stream)
        else:
            sys.stderr.flush()
            handler = LineBufferedHandler(sys.stderr.fileno())
        handler.setFormatter(Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(level.upper())
