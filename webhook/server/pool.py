"""The worker's thread pool: connections that have answered go first.

A review on a connection the API server keeps alive never waits behind new connections, whose
steps (TLS handshake, gathering a request) use at most half the threads; a thread that lingers
for a connection's next request is woken through the pool's pipe when other work arrives
(``webhook.server.worker`` explains the worker around it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["AnsweredFirstPool", "first_class"]

_Work = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


def first_class(conn: Any) -> bool:
    """True for a connection that has answered a request, or has a whole request to answer:
    it goes ahead of new connections, whose steps are short and which may be slow clients."""
    progress = getattr(conn, "review_progress", None)
    return bool(getattr(progress, "first_class", False))


class AnsweredFirstPool:
    """A fixed pool of threads with two queues: connections that have answered, then new ones.

    ``submit(fn, conn)`` is how gthread hands over a connection; :func:`first_class` says
    which queue it goes to. New connections run on at most ``new_limit`` threads at once.
    """

    def __init__(self, threads: int, new_limit: int | None = None) -> None:
        """Start ``threads`` daemon threads (gthread waits for the connections itself)."""
        self.new_limit = new_limit if new_limit is not None else max(1, threads - threads // 2)
        self._cond = threading.Condition()
        self._answered: deque[_Work] = deque()
        self._new: deque[_Work] = deque()
        self._new_running = 0
        self._lingering = 0
        # Written to when a connection is submitted while a thread lingers: the lingering
        # threads poll it with their connection (ReviewWorker._readable_soon).
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.threads = threads
        self._shutdown = False
        self._threads = [
            threading.Thread(target=self._run, name=f"review-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """Queue ``fn(*args)``; its Future, as ``concurrent.futures`` executors return."""
        future: Future[Any] = Future()
        answered = bool(args) and first_class(args[0])
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
            (self._answered if answered else self._new).append((future, fn, args))
            self._cond.notify_all()
            wake = self._lingering > 0
        if wake:
            with contextlib.suppress(BlockingIOError):  # full: the lingerers wake anyway
                os.write(self._wake_write, b"\0")
        return future

    @property
    def wake_fd(self) -> int:
        """Readable when a connection was submitted while a thread lingered (see
        :meth:`clear_wake`)."""
        return self._wake_read

    def clear_wake(self) -> None:
        """Empty the wake-up pipe: a lingering thread found no connection waiting after all
        (another thread took it), and must not be woken again by the same write."""
        with self._cond, contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 4096):
                pass

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the threads once the queued work is done (``cancel_futures``: drop it)."""
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for future, _, _ in (*self._answered, *self._new):
                    future.cancel()
                self._answered.clear()
                self._new.clear()
            self._cond.notify_all()
        if wait:
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join()

    def quiet(self) -> bool:
        """True when no connection waits for a thread."""
        return not self._answered and not self._new

    def start_lingering(self) -> bool:
        """Let the calling thread wait for its connection's next request, if that leaves a
        thread of the pool free for the others; :meth:`stop_lingering` after."""
        with self._cond:
            if self._shutdown or self._lingering + 1 >= self.threads or not self.quiet():
                return False
            self._lingering += 1
            return True

    def stop_lingering(self) -> None:
        """The thread no longer waits on its connection."""
        with self._cond:
            self._lingering -= 1
            last = self._lingering == 0
        if last:
            self.clear_wake()  # a write no lingering thread read would wake the next one

    def _take(self) -> tuple[_Work, bool] | None:
        """The next work and whether it is a new connection's; None when shut down."""
        with self._cond:
            while True:
                if self._answered:
                    return self._answered.popleft(), False
                if self._new and self._new_running < self.new_limit:
                    self._new_running += 1
                    return self._new.popleft(), True
                if self._shutdown and not self._new:
                    return None
                self._cond.wait()

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            (future, fn, args), new = taken
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args))
                    except BaseException as exc:  # handed to the Future, as executors do
                        future.set_exception(exc)
            finally:
                if new:
                    with self._cond:
                        self._new_running -= 1
                        self._cond.notify_all()
