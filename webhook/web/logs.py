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
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
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
        self._lines.append(line)
        self._size += len(line)
        if record.levelno >= logging.WARNING or self._size >= FLUSH_BYTES:
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
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(level.upper())
