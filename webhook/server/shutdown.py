"""Stopping without failing an admission: unready first, answering on, then draining.

When Kubernetes stops a pod (rolling update, node drain, scale-down) it sends SIGTERM and, at
the same time, starts taking the pod out of the Service's endpoints. That second part takes a
while to reach everyone who sends requests (the EndpointSlice controller, then kube-proxy on
every node, or the API server's own endpoint resolver). A server that stops accepting at
SIGTERM refuses the connections still sent its way meanwhile, and with ``failurePolicy: Fail``
each refused admission call fails a user's ``kubectl apply``. So, on SIGTERM:

1. ``/readyz`` answers 503 at once (:meth:`ShutdownState.ready`): whatever still routes by
   readiness stops choosing this pod;
2. for ``GPU_POLICY_SHUTDOWN_DELAY`` seconds the server goes on accepting and answering, and
   every answer says ``Connection: close`` (:func:`close_after_answer`), so a client that
   kept a connection here (the API server does) sends its next request on a new connection,
   which the Service now routes to another replica;
3. then gunicorn's own graceful stop: the listeners close, and the workers finish the requests
   they have (``GPU_POLICY_DRAIN_TIMEOUT`` at most) before they exit.

The master learns of SIGTERM; the workers answer the requests. The state is one byte of
anonymous shared memory that the master maps before it forks any worker, so every worker,
also one gunicorn forks during the delay, reads the master's writes without a message.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ShutdownState", "close_after_answer", "delay_sigterm"]

logger = logging.getLogger(__name__)


class ShutdownState:
    """Whether the server is stopping: written by the master, read by every worker."""

    def __init__(self) -> None:
        """Map the shared byte (0: serving, 1: stopping); do it before any fork."""
        # mmap(-1, ...) is anonymous and MAP_SHARED on Unix: forked children share the page.
        self._flag = mmap.mmap(-1, 1)

    @property
    def stopping(self) -> bool:
        """True once the master received SIGTERM."""
        return self._flag[0] == 1

    def begin(self) -> None:
        """The master received SIGTERM: every worker now reports unready and closes."""
        self._flag[0] = 1

    def ready(self) -> tuple[bool, str]:
        """The ``/readyz`` check: not ready from SIGTERM on."""
        if self.stopping:
            return False, "shutting down: answering until the endpoints drop this pod"
        return True, "serving"


def close_after_answer(state: ShutdownState, req: Any) -> None:
    """gunicorn ``pre_request``: while stopping, the answer closes the connection.

    gunicorn drops a ``Connection`` header an app sets (it is hop-by-hop); a request marked
    ``must_close`` makes it answer with ``Connection: close`` and close after the answer, in the
    gthread, sync and async workers alike.
    """
    if state.stopping:
        req.must_close = True


def delay_sigterm(
    arbiter: Any,
    state: ShutdownState,
    delay: float,
    *,
    log: Callable[..., None] | None = None,
) -> None:
    """Make the gunicorn master's SIGTERM mark ``state`` and stop ``delay`` seconds later.

    gunicorn's master handles SIGTERM in its main loop with ``arbiter.handle_term`` (looked up
    by name for each signal), which starts the graceful stop at once. This replaces it, on this
    arbiter only: the first SIGTERM marks the state and, after ``delay`` seconds, sends the
    master a second SIGTERM, which (like a second one from anybody) runs gunicorn's own
    handler. SIGINT and SIGQUIT still stop at once.
    """
    graceful_stop = arbiter.handle_term
    say = log or logger.info
    master = os.getpid()

    def handle_term() -> None:
        if state.stopping:
            graceful_stop()  # the delay is over, or a second SIGTERM: stop now
            return
        state.begin()
        if delay <= 0:
            graceful_stop()
            return
        say("SIGTERM: not ready; answering for %g s more, then finishing what is in flight", delay)
        timer = threading.Timer(delay, os.kill, (master, signal.SIGTERM))
        timer.daemon = True
        timer.start()

    arbiter.handle_term = handle_term
