"""The batching log handler: whole lines, at most PIPE_BUF per write, flushed in time."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import pytest

from webhook.server.logs import (
    FLUSH_BYTES,
    FORMAT,
    PIPE_BUF,
    Formatter,
    LineBufferedHandler,
    chunks,
    direct_handler,
    line_for,
    timestamp,
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", []),
        (b"a\n", [b"a\n"]),
        (b"a\nb\n", [b"a\nb\n"]),
        (b"x" * 9 + b"\n" + b"y" * 9 + b"\n", [b"x" * 9 + b"\n", b"y" * 9 + b"\n"]),
        (b"z" * 30 + b"\n" + b"a\n", [b"z" * 30 + b"\n", b"a\n"]),
        (b"z" * 30, [b"z" * 30]),
    ],
    ids=["empty", "one", "fits", "split", "long-line-alone", "no-newline"],
)
def test_chunks(data: bytes, expected: list[bytes]) -> None:
    assert chunks(data, limit=16) == expected


def test_chunks_of_many_lines_respect_pipe_buf() -> None:
    data = b"".join(f"line {i:05d} {'x' * (i % 200)}\n".encode() for i in range(2000))
    pieces = chunks(data)
    assert b"".join(pieces) == data
    assert all(len(p) <= PIPE_BUF and p.endswith(b"\n") for p in pieces)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    os.close(r)
    os.close(w)


def read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 20)
    except BlockingIOError:
        return b""


def logger_with(handler: logging.Handler, name: str) -> logging.Logger:
    log = logging.getLogger(name)
    log.propagate = False
    log.setLevel(logging.INFO)
    log.handlers = [handler]
    return log


def test_info_lines_wait_for_the_interval_and_warnings_flush(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = LineBufferedHandler(w, interval=3600)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logger_with(handler, "test.logs.batch")
    log.info("one")
    log.info("two")
    assert read(r) == b""
    log.warning("three")
    assert read(r) == b"INFO one\nINFO two\nWARNING three\n"
    log.info("four")
    handler.flush()
    assert read(r) == b"INFO four\n"


def test_lines_are_written_at_the_interval(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = LineBufferedHandler(w, interval=0.05)
    log = logger_with(handler, "test.logs.interval")
    log.info("soon")
    deadline = time.monotonic() + 5
    data = b""
    while b"soon" not in data and time.monotonic() < deadline:
        time.sleep(0.02)
        data += read(r)
    assert data == b"soon\n"


def test_a_full_batch_is_written_at_once(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = LineBufferedHandler(w, interval=3600)
    log = logger_with(handler, "test.logs.full")
    line = "x" * 99
    for _ in range(FLUSH_BYTES // 100 + 1):
        log.info(line)
    data = read(r)
    assert len(data) >= FLUSH_BYTES and data.endswith(b"\n")
    assert set(data.split(b"\n")[:-1]) == {line.encode()}


@pytest.mark.parametrize("created", [0.0, 1_790_000_000.0, 1_790_000_000.0005, 1_795_321_987.999])
def test_timestamp_is_loggings_default_asctime(created: float) -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    assert timestamp(created) == logging.Formatter().formatTime(record)
    assert Formatter(FORMAT).formatTime(record) == logging.Formatter().formatTime(record)


def test_a_direct_line_is_the_line_logging_writes(pipe: tuple[int, int]) -> None:
    r, w = pipe
    handler = LineBufferedHandler(w, interval=3600)
    handler.setFormatter(logging.Formatter(FORMAT))
    log = logger_with(handler, "test.logs.direct")
    assert direct_handler(log) is handler
    message = "review uid=1 decision=allowed"
    log.info("%s", message)
    handler.add_line(line_for(log, logging.INFO, message))
    handler.flush()
    first, second = read(r).decode().splitlines()
    stamp = len("2026-11-22 09:15:02,431 ")
    assert first[stamp:] == second[stamp:] == f"INFO [{os.getpid()}] test.logs.direct: {message}"
    assert first[:stamp] <= second[:stamp]


def test_no_direct_handler_when_something_else_is_on_the_way(pipe: tuple[int, int]) -> None:
    _, w = pipe
    handler = LineBufferedHandler(w, interval=3600)
    handler.setFormatter(logging.Formatter(FORMAT))
    parent = logger_with(handler, "test.logs.way")
    child = logging.getLogger("test.logs.way.child")
    assert direct_handler(child) is handler  # found through propagation

    child.addFilter(lambda record: True)
    assert direct_handler(child) is None  # a filter must see the records
    child.filters.clear()

    other = logging.StreamHandler()
    child.addHandler(other)
    assert direct_handler(child) is None  # two handlers
    child.removeHandler(other)

    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    assert direct_handler(parent) is None  # another format
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M"))
    assert direct_handler(parent) is None  # another date format
    parent.handlers = [logging.StreamHandler()]
    assert direct_handler(parent) is None  # not a LineBufferedHandler


def test_a_forked_child_writes_its_own_pid(pipe: tuple[int, int]) -> None:
    r, w = pipe
    child = os.fork()
    if child == 0:  # the child: one line with its pid, then out without cleanup
        try:
            os.write(w, line_for(logging.getLogger("test.logs.fork"), logging.INFO, "hi").encode())
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert f" INFO [{child}] test.logs.fork: hi\n" in read(r).decode()
