"""List-then-watch one kind of object, keep a trimmed copy, survive API trouble.

One :class:`ResourceWatcher` runs one daemon thread. It GETs its collection
(``webhook.kube.raw``) and parses the JSON itself: the client's model objects cost several
times more CPU for 5,000 nodes and are thrown away by the trimming anyway (see
``bench/kube_inventory.py``).

The protocol is the one client-go's reflector follows:

* list (paged with ``limit``/``continue``), remember the list's resourceVersion;
* watch from it with bookmarks; every event and bookmark advances the resourceVersion;
* a stream that ends (server timeout, dropped connection) resumes from the last
  resourceVersion, without a list;
* ``410 Gone`` (the resourceVersion was compacted away) means events were lost: list again;
* any other failure waits an exponential backoff with jitter, then resumes; the stored
  objects are kept meanwhile, so the webhook goes on answering from the last known state.

An optional kind (a custom resource such as Karpenter's NodePools) may not be served at all:
a 404 on its list (no CRD) or a 403 (no permission to read it) counts as a synced, empty list,
and the list is tried again every ``absent_recheck`` seconds, so that installing the CRD
later is noticed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

from webhook.kube.failures import describe_failure, retry_after, unreachable
from webhook.kube.watch_spec import KindSpec, WatchTimings

__all__ = ["ResourceWatcher"]

log = logging.getLogger(__name__)

# The answers to the list of an optional kind that mean "not served to us": no such resource
# (the CRD is not installed) and forbidden (RBAC does not grant it).
_NOT_SERVED = frozenset({403, 404})


class _Gone(Exception):
    """The resourceVersion is too old (410): the stored state must be rebuilt by a list."""


class _StreamError(Exception):
    """A watch ERROR event other than 410, e.g. a 500 from the API server."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(f"watch error {code}: {message}")
        self.code = code


class ResourceWatcher:
    """Keeps ``{key: trimmed object}`` for one kind, in step with the API server.

    ``on_change`` is called (from the watcher thread, without locks held) after the stored
    objects changed; ``on_status`` after reachability or sync status changed. Both must be
    quick: :class:`~webhook.kube.source.ClusterSource` only sets a flag.
    """

    def __init__(
        self,
        spec: KindSpec,
        timings: WatchTimings,
        on_change: Callable[[], None],
        on_status: Callable[[], None],
    ) -> None:
        self.spec = spec
        self.timings = timings
        self._on_change = on_change
        self._on_status = on_status
        self._lock = threading.Lock()
        self._items: dict[str, Any] = {}
        self._view: tuple[int, tuple[Any, ...]] = (0, ())
        self._stop = threading.Event()
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None
        # Set while a watch stream is open, and whether the current/last one was healthy:
        # a failure mid-stream says nothing about reachability, and a long healthy stream
        # that breaks should not inherit the backoff of earlier failures.
        self._in_stream = False
        self._stream_healthy = False
        #: Bumped on every change of the stored objects.
        self.version = 0
        #: The last resourceVersion seen (list, event or bookmark); None: must list.
        self.resource_version: str | None = None
        #: The resourceVersion as of the last change of the stored objects.
        self.data_resource_version: str | None = None
        self.synced = False
        #: An optional kind the API server does not serve (or lets us not read), as of the
        #: last list.
        self.absent = False
        self.reachable: bool | None = None
        self.streaming = False
        self.last_ok: float | None = None
        self.last_error: str | None = None
        # Counters, only ever increased (exported as Prometheus counters).
        self.lists = 0
        self.relists = 0
        self.watches = 0
        self.restarts = 0
        self.errors = 0
        self.events = 0

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        """Start the watcher thread (a daemon: it never blocks interpreter exit)."""
        self._thread = threading.Thread(
            target=self._run, name=f"kube-watch-{self.spec.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end, and unblock it if it is reading a stream."""
        self._stop.set()
        with self._lock:
            resp = self._resp
        if resp is not None:
            try:
                # A blocked socket read only returns when the socket is shut down.
                resp.shutdown()
            except Exception:
                log.debug("shutting down the %s stream failed", self.spec.name, exc_info=True)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def view(self) -> tuple[int, tuple[Any, ...]]:
        """``(version, stored objects sorted by key)``; rebuilt only when version moved."""
        with self._lock:
            if self._view[0] != self.version:
                items = self._items
                self._view = (self.version, tuple(items[k] for k in sorted(items)))
            return self._view

    @property
    def count(self) -> int:
        """How many objects are stored now."""
        return len(self._items)

    @property
    def last_ok_effective(self) -> float | None:
        """When the stored state was last known current: now while a watch is open.

        An absent optional kind counts as current: its absence is checked again regularly.
        """
        return time.monotonic() if self.streaming or self.absent else self.last_ok

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            delay = 0.0
            try:
                if self.resource_version is None:
                    self._list()
                    failures = 0
                if self._watch():
                    failures = 0
                continue  # the stream ended cleanly (server timeout): resume at once
            except _Gone as exc:
                # Events were lost: rebuild from a list. At once the first time; if lists
                # keep failing, the backoff below applies through ``failures``.
                log.info("%s: %s; listing again", self.spec.name, exc)
                self.relists += 1
                self.resource_version = None
                if failures:
                    failures += 1
                    delay = self.timings.backoff(failures)
            except ApiException as exc:
                if self._stop.is_set():
                    break
                if self.spec.optional and exc.status in _NOT_SERVED and not self._in_stream:
                    self._not_served(exc)
                    failures, delay = 0, self.timings.absent_recheck
                else:
                    failures, delay = self._failed(exc, failures)
            except Exception as exc:
                if self._stop.is_set():
                    break
                failures, delay = self._failed(exc, failures)
            finally:
                self._in_stream = self.streaming = False
            if delay:
                self._stop.wait(delay)
        log.debug("%s watcher stopped", self.spec.name)

    def _not_served(self, exc: ApiException) -> None:
        """An optional kind the API server does not serve: no objects, synced, reachable."""
        self._set_reachable(True)  # before synced, as in _list
        with self._lock:
            changed = bool(self._items)
            self._items = {}
            self.resource_version = None
            first = not self.synced
            if changed or first:
                self.version += 1
            self.synced = True
        if not self.absent:
            log.info(
                "%s: not served (%s %s); treated as none, looked for again every %gs",
                self.spec.name,
                exc.status,
                exc.reason,
                self.timings.absent_recheck,
            )
        self.absent = True
        self.last_ok = time.monotonic()
        if changed or first:
            self._on_change()
        self._on_status()

    def _failed(self, exc: Exception, failures: int) -> tuple[int, float]:
        """Count and log a failed list or watch: (failures in a row, seconds to wait)."""
        mid_stream = self._in_stream
        if mid_stream and self._stream_healthy:
            failures = 0
        failures += 1
        self.errors += 1
        self.last_error = describe_failure(exc)
        delay = max(self.timings.backoff(failures), retry_after(exc))
        # A healthy stream that broke is routine (API server restart, LB idle cut);
        # repeated failures are not, but say so only now and then.
        if mid_stream and failures == 1:
            level = logging.INFO
        elif failures <= 3 or failures % 20 == 0:
            level = logging.WARNING
        else:
            level = logging.DEBUG
        log.log(
            level,
            "%s: %s (failure %d); retrying in %.2fs, keeping the last state",
            self.spec.name,
            self.last_error,
            failures,
            delay,
        )
        if not mid_stream:
            self._set_reachable(not unreachable(exc))
        return failures, delay

    def _set_reachable(self, value: bool) -> None:
        if self.reachable != value:
            self.reachable = value
            if value:
                log.info("%s: API server reachable", self.spec.name)
            self._on_status()

    def _request_timeout(self, read: float) -> tuple[float, float]:
        return (self.timings.connect_timeout, read)

    def _list(self) -> None:
        """List everything (page by page); replace the stored objects; remember the rv."""
        t = self.timings
        items: dict[str, Any] = {}
        token: str | None = None
        rv = ""
        spec = self.spec
        while True:
            query = {"limit": t.page_size or None, "continue": token or None}
            resp = spec.collection.get(query, timeout=self._request_timeout(t.list_read_timeout))
            try:
                body = resp.data
            finally:
                resp.release_conn()
            doc = orjson.loads(body)  # a 500-node page is ~5 MB: orjson decodes it ~2x faster
            del body  # the raw page can be large; do not hold it while trimming
            meta = doc.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            for obj in doc.get("items") or ():
                kept = spec.trim(obj)
                if kept is not None:
                    items[spec.key(obj)] = kept
            token = meta.get("continue")
            del doc
            if not token:
                break
        self.lists += 1
        self.absent = False
        # Reachable before synced: a snapshot that another watcher publishes in between must
        # not show this kind synced while the API server is still marked unreachable.
        self._set_reachable(True)
        with self._lock:
            old = self._items
            # Keep the old dict object for unchanged entries: snapshots share them, and an
            # unchanged relist then yields no new snapshot at all.
            changed = len(old) != len(items)
            for key, value in items.items():
                prev = old.get(key)
                if prev is not None and prev == value:
                    items[key] = prev
                else:
                    changed = True
            self._items = items
            self.resource_version = rv
            if changed or not self.synced:
                self.version += 1
                self.data_resource_version = rv
            first = not self.synced
            self.synced = True
        self.last_ok = time.monotonic()
        log.info("%s: listed %d objects at resourceVersion %s", spec.name, len(items), rv)
        if changed or first:
            self._on_change()
        self._on_status()

    def _watch(self) -> bool:
        """Watch from the stored resourceVersion until the stream ends.

        Returns True when the stream was healthy (it delivered something or stayed up for
        ``backoff_reset_after``); raises on errors, :class:`_Gone` on 410.
        """
        t = self.timings
        timeout = int(t.watch_timeout * (1.0 + random.random())) or 1  # noqa: S311 - spread, not secrets
        try:
            resp = self.spec.collection.get(
                {
                    "allowWatchBookmarks": True,
                    "resourceVersion": self.resource_version,
                    "timeoutSeconds": timeout,
                    "watch": True,
                },
                timeout=self._request_timeout(timeout + t.watch_read_margin),
            )
        except ApiException as exc:
            # Usually 410 arrives as an ERROR event in a 200 stream, but a server may also
            # refuse the watch request itself with it.
            if exc.status == 410:
                raise _Gone(f"watch refused: {exc.reason}") from exc
            raise
        self.watches += 1
        opened = time.monotonic()
        with self._lock:
            self._resp = resp
        if self._stop.is_set():  # stop() ran before _resp was visible to it
            resp.close()
            return True
        self._in_stream = self.streaming = True
        self._stream_healthy = False
        self.last_ok = opened
        self._set_reachable(True)
        self._on_status()
        complete = False
        try:
            for lines in self._batches(resp):
                changed = self._apply(lines)
                self._stream_healthy = True
                self.last_ok = time.monotonic()
                if changed:
                    self._on_change()
                if self._stop.is_set():
                    break
            else:
                complete = True
        finally:
            self.streaming = False
            if time.monotonic() - opened >= t.backoff_reset_after:
                self._stream_healthy = True
            if not self._stop.is_set():
                self.restarts += 1
            with self._lock:
                self._resp = None
            if not complete:
                # A stream left half-read cannot go back to the pool: close the socket
                # (the server then ends its side too).
                resp.close()
            resp.release_conn()
        self._in_stream = False
        self.last_ok = time.monotonic()
        return self._stream_healthy

    @staticmethod
    def _batches(resp: urllib3.BaseHTTPResponse) -> Iterator[list[bytes]]:
        """Yield the complete lines that arrived together (one chunk usually holds one)."""
        if (
            isinstance(resp, urllib3.HTTPResponse)
            and resp.chunked
            and resp.supports_chunked_reads()
        ):
            chunks: Iterator[bytes] = resp.stream(None, decode_content=True)
        else:
            chunks = iter(lambda: resp.read1(65536), b"")
        buf = b""
        for chunk in chunks:
            buf += chunk
            if b"\n" not in chunk:
                continue
            *lines, buf = buf.split(b"\n")
            yield [line for line in lines if line.strip()]

    def _apply(self, lines: list[bytes]) -> bool:
        """Apply watch events to the stored objects; True if they changed."""
        spec = self.spec
        changed = False
        error: Exception | None = None
        with self._lock:
            items = self._items
            for line in lines:
                event = orjson.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    message = str(obj.get("message", ""))
                    error = (
                        _Gone(f"watch expired: {message}")
                        if code == 410
                        else _StreamError(code, message)
                    )
                    break
                self.events += 1
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    key = spec.key(obj)
                    kept = None if kind == "DELETED" else spec.trim(obj)
                    if kept is None:
                        if items.pop(key, None) is not None:
                            changed = True
                    elif items.get(key) != kept:
                        items[key] = kept
                        changed = True
                if rv:
                    self.resource_version = str(rv)
            if changed:
                self.version += 1
                self.data_resource_version = self.resource_version
        if error is not None:
            if changed:
                self._on_change()
            raise error
        return changed
