"""A loopback fake of the Kubernetes API server, for the benchmarks at scale.

The tests run against a real control plane (tests/support/controlplane.py); this fake stays for
what that cannot do here: hold 5,000 realistic Nodes and 100,000 Pods in memory and stream
their events at benchmark rates (bench/kube_inventory.py; bench/audit.py's page server borrows
its resource tables). It speaks enough of the real list/watch protocol for Nodes, Pods
(cluster-wide), ConfigMaps and the workload kinds (apps/v1 Deployments, StatefulSets,
DaemonSets, ReplicaSets; batch/v1 Jobs, CronJobs) that the real ``kubernetes`` Python client can
drive it unchanged:

* ``GET /api/v1/nodes``, ``/api/v1/pods``, ``/api/v1/namespaces/{ns}/configmaps``,
  ``/apis/apps/v1/deployments``... (and the namespaced paths) return a JSON list with
  ``metadata.resourceVersion``; ``limit`` and ``continue`` page through a consistent snapshot,
  as the API server does;
* ``?watch=true&resourceVersion=N`` streams newline-delimited watch events (ADDED, MODIFIED,
  DELETED, BOOKMARK with ``allowWatchBookmarks``) over a chunked response that ends after
  ``timeoutSeconds``; a resourceVersion older than the last :meth:`FakeApiServer.compact`
  gets an ERROR event carrying a ``410 Expired`` Status, like a real watch cache; without a
  resourceVersion (or with ``0``) the stream starts with synthetic ADDED events;
* ``fieldSelector`` supports ``metadata.name``, ``metadata.namespace``, ``spec.nodeName`` and
  ``status.phase`` with ``=``, ``==`` and ``!=``; like the real server, an object that stops
  (starts) matching during a watch is sent as DELETED (ADDED).

Controls: :meth:`add`, :meth:`modify`, :meth:`delete` (each bumps one global resourceVersion),
:meth:`compact`, :meth:`drop_watches`, :meth:`bookmark`, :meth:`go_down` and :meth:`come_back`;
:attr:`delay`; :attr:`requests` records every request.

Plain HTTP on 127.0.0.1, or HTTPS with ``ssl_context``; port chosen by the kernel (see
``fake_http``).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.fake_http import JsonHandler, LoopbackServer, status

__all__ = ["FakeApiServer", "FieldSelector", "Request"]

# resource (URL plural) -> (kind, namespaced)
_RESOURCES: dict[str, tuple[str, bool]] = {
    "nodes": ("Node", False),
    "pods": ("Pod", True),
    "configmaps": ("ConfigMap", True),
    "deployments": ("Deployment", True),
    "statefulsets": ("StatefulSet", True),
    "daemonsets": ("DaemonSet", True),
    "replicasets": ("ReplicaSet", True),
    "jobs": ("Job", True),
    "cronjobs": ("CronJob", True),
}
# resource -> group/version, for the resources outside the core group ("v1")
_GROUP_VERSIONS = {
    **{r: "apps/v1" for r in ("deployments", "statefulsets", "daemonsets", "replicasets")},
    **{r: "batch/v1" for r in ("jobs", "cronjobs")},
}
_KIND_TO_RESOURCE = {kind: res for res, (kind, _) in _RESOURCES.items()}
_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")

Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Request:
    """One request the fake received."""

    method: str
    path: str
    resource: str | None  # "nodes", "pods", "configmaps", "secrets", ... or None
    verb: str  # "list", "watch", "get", "create", "update", "patch", "delete" or "other"
    query: dict[str, str]
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Event:
    rv: int
    resource: str
    type: str  # ADDED, MODIFIED, DELETED
    old: dict[str, Any] | None
    new: dict[str, Any]  # for DELETED: the last state, stamped with the deletion's rv
    raw: bytes  # json of ``new``


@dataclass(eq=False)  # identity hashing: kept in a set
class _Watch:
    resource: str
    bookmarks: bool
    dropped: bool = False
    bookmark_requested: bool = False


def _terms(text: str) -> Iterator[str]:
    """The non-empty comma-separated terms of a selector."""
    return filter(None, (t.strip() for t in text.split(",")))


def _comparison(term: str) -> tuple[str, str, str] | None:
    """``k!=v`` as (k, "!=", v); ``k==v`` and ``k=v`` as (k, "=", v); None when no operator."""
    for op, canonical in (("!=", "!="), ("==", "="), ("=", "=")):
        if op in term:
            key, value = term.split(op, 1)
            return key, canonical, value
    return None


class FieldSelector:
    """A parsed fieldSelector: a conjunction of ``field=value`` / ``field!=value`` terms."""

    def __init__(self, text: str) -> None:
        """Parse ``text`` (empty: every object matches); ValueError names a bad term."""
        self.terms: list[tuple[str, bool, str]] = []
        for term in _terms(text):
            split = _comparison(term)
            if split is None:
                raise ValueError(f"invalid field selector term: {term!r}")
            name, op, value = split
            if name not in _FIELDS:
                raise ValueError(f'field label not supported: "{name}"')
            self.terms.append((name, op == "=", value))

    def matches(self, obj: dict[str, Any] | None) -> bool:
        """True when ``obj`` (None: no object) satisfies every term."""
        if obj is None:
            return False
        for name, equal, value in self.terms:
            section, attr = name.split(".", 1)
            actual = (obj.get(section) or {}).get(attr) or ""
            if (actual == value) != equal:
                return False
        return True


class LabelSelector:
    """A parsed equality-based labelSelector: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``."""

    def __init__(self, text: str) -> None:
        """Parse ``text`` (empty: every object matches)."""
        # (key, op, value): op "=" or "!=" compares, "exists" / "!exists" test presence.
        self.terms: list[tuple[str, str, str]] = []
        for term in _terms(text):
            split = _comparison(term)
            if split is not None:
                self.terms.append(split)
            elif term.startswith("!"):
                self.terms.append((term[1:], "!exists", ""))
            else:
                self.terms.append((term, "exists", ""))

    def matches(self, obj: dict[str, Any]) -> bool:
        """True when the labels of ``obj`` satisfy every term."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for key, op, value in self.terms:
            if op == "exists" and key not in labels:
                return False
            if op == "!exists" and key in labels:
                return False
            if op == "=" and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        return True


class FakeApiServer(LoopbackServer):
    """A loopback fake Kubernetes API server for Nodes, Pods and ConfigMaps.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``bookmark_interval``
    (seconds) makes every watch that asked for bookmarks receive one that often; ``None``
    sends bookmarks only when :meth:`bookmark` is called.
    """

    def __init__(
        self, *, bookmark_interval: float | None = None, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """``ssl_context``: serve HTTPS with it (what the in-cluster client config needs)."""
        super().__init__(ssl_context)
        self.bookmark_interval = bookmark_interval
        self.requests: list[Request] = []
        self._cond = threading.Condition()
        self._rv = 1
        self._floor = 0  # watches from a resourceVersion below this get 410 Gone
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {r: {} for r in _RESOURCES}
        self._raw: dict[str, dict[Key, bytes]] = {r: {} for r in _RESOURCES}
        self._events: list[_Event] = []
        self._event_rvs: list[int] = []
        self._snapshots: dict[int, dict[str, list[tuple[Key, dict[str, Any], bytes]]]] = {}
        self._watches: set[_Watch] = set()
        self._connections: set[socket.socket] = set()
        self._down: str | None = None
        #: Seconds every request waits, once recorded, before it is answered (0: none).
        self.delay = 0.0
        self._stopping = False

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FakeApiServer:
        """Listen on 127.0.0.1 (port 0 the first time, the same port after ``refuse``)."""
        self._stopping = False
        self.listen()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.close()
        self._cut_connections()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _cut_connections(self) -> None:
        with self._cond:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    # ----------------------------------------------------------------- store

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        with self._cond:
            return self._rv

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (its ``kind`` picks the resource); return the stored copy."""
        resource, key = self._locate(obj)
        with self._cond:
            if key in self._objects[resource]:
                raise KeyError(f"{resource} {key} already exists")
            return self._commit(resource, key, "ADDED", copy.deepcopy(obj))

    def add_many(self, objs: Iterable[dict[str, Any]]) -> None:
        """Create many objects under one lock (one resourceVersion each)."""
        with self._cond:
            for obj in objs:
                resource, key = self._locate(obj)
                self._commit(resource, key, "ADDED", copy.deepcopy(obj))

    def modify(
        self,
        kind: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        *,
        namespace: str = "",
    ) -> dict[str, Any]:
        """Apply ``change`` to a copy of an object and store it as a MODIFIED event."""
        resource = _KIND_TO_RESOURCE[kind]
        with self._cond:
            obj = copy.deepcopy(self._objects[resource][(namespace, name)])
            change(obj)
            return self._commit(resource, (namespace, name), "MODIFIED", obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` in place of the existing object of the same kind and name."""
        resource, key = self._locate(obj)
        with self._cond:
            if key not in self._objects[resource]:
                raise KeyError(f"{resource} {key} does not exist")
            return self._commit(resource, key, "MODIFIED", copy.deepcopy(obj))

    def delete(self, kind: str, name: str, *, namespace: str = "") -> None:
        """Delete an object (a DELETED event with a new resourceVersion)."""
        resource = _KIND_TO_RESOURCE[kind]
        with self._cond:
            obj = copy.deepcopy(self._objects[resource][(namespace, name)])
            self._commit(resource, (namespace, name), "DELETED", obj)

    def get(self, kind: str, name: str, *, namespace: str = "") -> dict[str, Any]:
        """A copy of a stored object."""
        with self._cond:
            return copy.deepcopy(self._objects[_KIND_TO_RESOURCE[kind]][(namespace, name)])

    def _locate(self, obj: dict[str, Any]) -> tuple[str, Key]:
        resource = _KIND_TO_RESOURCE[obj["kind"]]
        meta = obj["metadata"]
        namespaced = _RESOURCES[resource][1]
        namespace = meta.get("namespace", "default") if namespaced else ""
        if namespaced:
            meta["namespace"] = namespace
        return resource, (namespace, meta["name"])

    def _commit(self, resource: str, key: Key, type_: str, obj: dict[str, Any]) -> dict[str, Any]:
        # Caller holds the lock. One global counter, like etcd's revision.
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        obj.setdefault("apiVersion", _GROUP_VERSIONS.get(resource, "v1"))
        raw = json.dumps(obj, separators=(",", ":")).encode()
        old = self._objects[resource].get(key)
        if type_ == "DELETED":
            del self._objects[resource][key]
            del self._raw[resource][key]
        else:
            self._objects[resource][key] = obj
            self._raw[resource][key] = raw
        self._events.append(_Event(self._rv, resource, type_, old, obj, raw))
        self._event_rvs.append(self._rv)
        self._cond.notify_all()
        return copy.deepcopy(obj)

    # ----------------------------------------------------------------- fault injection

    def compact(self) -> int:
        """Forget the event history up to now, as etcd compaction does.

        A watch from an older resourceVersion then gets ``410 Gone``, and list
        ``continue`` tokens issued before now expire. Returns the new floor.
        """
        with self._cond:
            self._floor = self._rv
            self._events.clear()
            self._event_rvs.clear()
            self._snapshots.clear()
            return self._floor

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-chunk; returns how many were cut."""
        with self._cond:
            for w in self._watches:
                w.dropped = True
            self._cond.notify_all()
            return len(self._watches)

    def bookmark(self) -> None:
        """Send a BOOKMARK at the current resourceVersion to watches that allow them."""
        with self._cond:
            for w in self._watches:
                w.bookmark_requested = True
            self._cond.notify_all()

    def go_down(self, mode: str = "503") -> None:
        """Make the API unreachable and cut open connections.

        ``"503"`` answers every request with 503 ServiceUnavailable; ``"close"`` accepts
        connections and closes them without an answer; ``"refuse"`` stops listening, so
        connections are refused. The store still accepts changes meanwhile.
        """
        if mode not in ("503", "close", "refuse"):
            raise ValueError(mode)
        with self._cond:
            self._down = mode
            for w in self._watches:
                w.dropped = True
            self._cond.notify_all()
        if mode == "refuse":
            self.close()
        self._cut_connections()

    def come_back(self) -> None:
        """End an outage started by :meth:`go_down`."""
        with self._cond:
            mode, self._down = self._down, None
        if mode == "refuse":
            self.start()

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        with self._cond:
            return len(self._watches)

    def count(self, resource: str, verb: str) -> int:
        """How many ``list`` or ``watch`` requests ``resource`` has received."""
        return sum(1 for r in list(self.requests) if r.resource == resource and r.verb == verb)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Wait until ``predicate()`` holds (checked on every store or watch change)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    def list_body(self, resource: str) -> bytes:
        """The body of an unpaged list of every ``resource`` object, as a client receives it."""
        return self._list_body(resource, FieldSelector(""), {})

    # ----------------------------------------------------------------- serving

    def _list_body(self, resource: str, sel: FieldSelector, query: dict[str, str]) -> bytes:
        kind = _RESOURCES[resource][0]
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        with self._cond:
            if token:
                state = json.loads(base64.urlsafe_b64decode(token))
                snap_rv, start = state["rv"], state["start"]
                snapshot = self._snapshots.get(snap_rv, {}).get(resource)
                if snapshot is None:
                    raise _HttpError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
            else:
                snap_rv, start = self._rv, 0
                snapshot = [
                    (key, obj, self._raw[resource][key])
                    for key, obj in sorted(self._objects[resource].items())
                ]
                if limit:
                    # Keep the snapshot so continue tokens read a consistent list.
                    self._snapshots.setdefault(snap_rv, {})[resource] = snapshot
        labels = LabelSelector(query.get("labelSelector", ""))
        items: list[bytes] = []
        pos = start
        while pos < len(snapshot) and (not limit or len(items) < limit):
            _, obj, raw = snapshot[pos]
            pos += 1
            if sel.matches(obj) and labels.matches(obj):
                items.append(raw)
        meta: dict[str, Any] = {"resourceVersion": str(snap_rv)}
        if limit and pos < len(snapshot):
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"rv": snap_rv, "start": pos}).encode()
            ).decode()
            meta["remainingItemCount"] = len(snapshot) - pos
        head = json.dumps(
            {
                "kind": f"{kind}List",
                "apiVersion": _GROUP_VERSIONS.get(resource, "v1"),
                "metadata": meta,
            },
            separators=(",", ":"),
        ).encode()
        return head[:-1] + b',"items":[' + b",".join(items) + b"]}"

    def _watch_events(
        self,
        watch: _Watch,
        sel: FieldSelector,
        since: int | None,
        deadline: float,
        client_gone: Callable[[], bool] = lambda: False,
    ) -> Iterator[bytes | None]:
        """Yield watch lines; ``None`` means: cut the connection now."""
        with self._cond:
            if since is not None and since < self._floor:
                msg = f"too old resource version: {since} ({self._floor})"
                yield _line("ERROR", status(410, "Expired", msg))
                return
            pending: list[bytes] = []
            if since is None:
                # No resourceVersion: synthetic ADDED events for the current state.
                for _, obj in sorted(self._objects[watch.resource].items()):
                    if sel.matches(obj):
                        pending.append(_line("ADDED", obj))
                since = self._rv
        yield from pending
        interval = self.bookmark_interval
        next_bookmark = time.monotonic() + interval if interval else None
        while True:
            with self._cond:
                due = self._wait_for_news(watch, since, deadline, next_bookmark, client_gone)
                if watch.dropped or self._stopping or client_gone():
                    lines: list[bytes | None] = [None]
                else:
                    lines, since = self._news(watch, sel, since, bookmark=due)
                    if due and interval:
                        next_bookmark = time.monotonic() + interval
            yield from lines
            if lines and lines[-1] is None:
                return
            if time.monotonic() >= deadline:
                return

    def _wait_for_news(
        self,
        watch: _Watch,
        since: int,
        deadline: float,
        next_bookmark: float | None,
        client_gone: Callable[[], bool],
    ) -> bool:
        """Wait (holding the lock) until a watch has something to send or to stop for.

        True when it is because a bookmark is due.
        """
        while True:
            now = time.monotonic()
            idx = bisect.bisect_right(self._event_rvs, since)
            has_events = any(e.resource == watch.resource for e in self._events[idx:])
            due = next_bookmark is not None and now >= next_bookmark
            if (
                has_events
                or client_gone()
                or watch.dropped
                or self._stopping
                or watch.bookmark_requested
                or due
                or now >= deadline
            ):
                return due
            wake = deadline if next_bookmark is None else min(deadline, next_bookmark)
            # Wake now and then to notice a client that went away, as a Go
            # server does: an idle watch must not hold its handler forever.
            self._cond.wait(max(0.0, min(wake - now, 0.1)))

    def _news(
        self, watch: _Watch, sel: FieldSelector, since: int, *, bookmark: bool
    ) -> tuple[list[bytes | None], int]:
        """(lines, resourceVersion sent up to) for the events after ``since`` (lock held).

        With a BOOKMARK at the end when the watch allows them and one is asked for or due.
        """
        lines: list[bytes | None] = []
        for ev in self._events[bisect.bisect_right(self._event_rvs, since) :]:
            if ev.resource != watch.resource:
                continue
            line = _event_line(ev, sel)
            if line is not None:
                lines.append(line)
        if self._events:
            since = max(since, self._event_rvs[-1])
        if watch.bookmarks and (watch.bookmark_requested or bookmark):
            # Everything up to the current rv has been sent: say so.
            kind = _RESOURCES[watch.resource][0]
            bm = {"kind": kind, "apiVersion": "v1", "metadata": {}}
            bm["metadata"]["resourceVersion"] = str(self._rv)
            lines.append(_line("BOOKMARK", bm))
            since = max(since, self._rv)
        watch.bookmark_requested = False
        return lines, since


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _event_line(ev: _Event, sel: FieldSelector) -> bytes | None:
    before = sel.matches(ev.old)
    after = sel.matches(ev.new)
    if ev.type == "DELETED":
        type_ = "DELETED" if before else None
    elif ev.type == "ADDED" or not before:
        type_ = "ADDED" if after else None
    else:
        # A watched object that stops matching the selector is reported as deleted.
        type_ = "MODIFIED" if after else "DELETED"
    if type_ is None:
        return None
    return b'{"type":"' + type_.encode() + b'","object":' + ev.raw + b"}\n"


def _route(path: str) -> tuple[str | None, str | None, str | None]:
    """(resource, namespace, name) of an API path; resource None when it names none."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group_version, rest = "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group_version, rest = "/".join(parts[1:3]), parts[3:]
    else:
        return None, None, None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 2 or _GROUP_VERSIONS.get(rest[0], "v1") != group_version:
        return None, None, None
    return rest[0], namespace, rest[1] if len(rest) == 2 else None


class _HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class _Handler(JsonHandler):
    fake: FakeApiServer

    def setup(self) -> None:
        super().setup()
        # As Go's net/http does: without it, headers and body go out in two segments and
        # the client's delayed ACK holds each answer back some 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake._cond:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.fake._cond:
                self.fake._connections.discard(self.connection)

    def _error(self, code: int, reason: str, message: str) -> None:
        self.send_json(code, json.dumps(status(code, reason, message)).encode())

    def _cut(self) -> None:
        # Abort without a final chunk: the client sees a connection lost mid-stream.
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _client_gone(self) -> bool:
        # Readable with no data means the peer closed (a client sends nothing else
        # while it reads a watch).
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            if isinstance(self.connection, ssl.SSLSocket):
                # No peeking through TLS; its only traffic now is close_notify or the FIN.
                return bool(ready)
            return bool(ready) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_GET(self) -> None:
        """A list, a watch, or the error the fake's state calls for."""
        fake = self.fake
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        resource, namespace, name = _route(url.path)
        watch = query.get("watch") in ("true", "1")
        verb = "other" if resource is None else "get" if name else "watch" if watch else "list"
        fake.requests.append(Request("GET", url.path, resource, verb, query))
        if fake.delay > 0:
            time.sleep(fake.delay)
        if self._refused(url.path, namespace, resource, verb) or resource is None:
            return
        if name is not None:  # one object: nothing reads it from this fake
            self._error(404, "NotFound", f"the fake serves lists and watches only: {url.path}")
            return
        try:
            sel = FieldSelector(query.get("fieldSelector", ""))
            if namespace is not None:
                sel.terms.append(("metadata.namespace", True, namespace))
            if not watch:
                self.send_json(200, fake._list_body(resource, sel, query))
                return
            rv_text = query.get("resourceVersion") or "0"
            since = None if rv_text == "0" else int(rv_text)
        except _HttpError as exc:
            self._error(exc.code, exc.reason, exc.message)
            return
        except ValueError as exc:
            self._error(400, "BadRequest", str(exc))
            return
        self._stream_watch(resource, sel, since, query)

    def _refused(self, path: str, namespace: str | None, resource: str | None, verb: str) -> bool:
        """Answer an outage or an unknown path; True when it did."""
        fake = self.fake
        down = fake._down
        if down == "close" or down == "refuse":
            self._cut()
        elif down == "503":
            self._error(503, "ServiceUnavailable", "the fake API server is down")
        elif resource not in _RESOURCES or (namespace is not None and not _RESOURCES[resource][1]):
            self._error(404, "NotFound", f"the server could not find the requested resource {path}")
        else:
            return False
        return True

    def _stream_watch(
        self, resource: str, sel: FieldSelector, since: int | None, query: dict[str, str]
    ) -> None:
        fake = self.fake
        timeout = float(query.get("timeoutSeconds") or 1800)
        watch = _Watch(resource, bookmarks=query.get("allowWatchBookmarks") == "true")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with fake._cond:
            fake._watches.add(watch)
            fake._cond.notify_all()
        try:
            deadline = time.monotonic() + timeout
            events = fake._watch_events(watch, sel, since, deadline, self._client_gone)
            for line in events:
                if line is None:
                    self._cut()
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        finally:
            with fake._cond:
                fake._watches.discard(watch)
                fake._cond.notify_all()


# Defined after the server class, which names its handler here.
FakeApiServer.handler = _Handler
