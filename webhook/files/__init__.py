"""Reading files: YAML documents (``documents.py``), the policy and inventory from disk, and
noticing changes.

The core never opens files; this shell reads them, resolves references relative to the policy
file, and turns every problem into a PolicyError naming the file, the field and the reason.
:class:`FileWatch` is how the server's reloaders (the policy, the TLS certificate) notice that
their files changed without costing a request more than an ``os.stat`` per file per second.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from webhook.contract import EXAMPLE_POLICY
from webhook.files.documents import (
    Document,
    DocumentError,
    composed,
    kubernetes_objects,
    one_line,
    single_document,
    yaml_error,
)
from webhook.policy import Inventory, Policy, PolicyError, parse_policy
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, DraObjects, assemble

__all__ = [
    "Document",
    "DocumentError",
    "kubernetes_objects",
    "one_line",
    "single_document",
    "yaml_error",
]

# (device, inode, size, mtime) of a file, or None when it cannot be read: a Secret or
# ConfigMap volume swaps a symlinked directory, so the inode changes even when the size does not.
FileStamp = tuple[int, int, int, int] | None


def file_stamps(paths: Iterable[str | Path]) -> tuple[FileStamp, ...]:
    """One ``os.stat`` per file: what reloaders compare to see that a file changed."""
    stamps: list[FileStamp] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


Stamps = tuple[FileStamp, ...]
T = TypeVar("T")


class FileWatch:
    """Rebuild something from a few files when they change, checked at most once per interval.

    A Secret or ConfigMap volume updates by swapping a symlink: ``os.stat`` follows it and
    sees a new inode. :meth:`reload` is cheap enough for the request path: a clock read while
    the interval runs, then one ``os.stat`` per file. Files that could not be used are not
    tried again until they change. Thread-safe, and never blocking: while one thread checks or
    rebuilds, the others carry on with what they have.

    Files that name other files (a policy and the device-plugin configs it refers to) are one
    unit: :meth:`reload_read` watches every file the last reading opened.
    """

    def __init__(
        self,
        paths: Iterable[str | Path],
        *,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Watch ``paths``; their stamps now are taken as those of what is loaded."""
        self.paths = tuple(Path(p) for p in paths)
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self.loaded: Stamps = self.stamps()
        self._failed: Stamps | None = None
        self._next_check = clock() + interval

    def stamps(self) -> Stamps:
        """The files' stamps now."""
        return file_stamps(self.paths)

    def record(self, read: ReadFiles, *, ok: bool) -> None:
        """Watch the files a reading opened from now on; what they held was used when ``ok``.

        Each stamp was taken just before its file was read: a change made after that gives a
        different stamp at the next check, so no change is missed.
        """
        self.paths = tuple(read.stamps)
        stamps = tuple(read.stamps.values())
        if ok:
            self.loaded, self._failed = stamps, None
        else:
            self._failed = stamps

    def _begin(self, force: bool) -> bool:
        """True, holding the lock, when a check is due and no other thread is checking."""
        if not self.paths:
            return False
        now = self._clock()
        if not force and now < self._next_check:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        self._next_check = now + self.interval
        return True

    def reload(
        self,
        build: Callable[[Stamps], T | None],
        commit: Callable[[T], None],
        *,
        force: bool = False,
    ) -> bool:
        """``commit(build(stamps))`` when the files changed; True when it was committed.

        Checked at most once per interval unless ``force``. ``build`` reads the files whose
        stamps were just taken and returns None when they cannot be used (it says why): those
        stamps are then not tried again. When the files changed while ``build`` read them, its
        result is dropped and they are read again at the next call.
        """
        if not self._begin(force):
            return False
        try:
            stamps = self.stamps()
            if stamps in (self.loaded, self._failed):
                return False
            built = build(stamps)
            if built is None:
                self._failed = stamps
                return False
            if self.stamps() != stamps:
                self._next_check = self._clock()
                return False
            commit(built)
            self.loaded = stamps
            self._failed = None
            return True
        finally:
            self._lock.release()

    def reload_read(
        self,
        attempt: Callable[[], tuple[T | None, ReadFiles]],
        commit: Callable[[T], None],
        *,
        force: bool = False,
    ) -> bool:
        """:meth:`reload` for files that name other files; True when committed.

        ``attempt()`` reads the files through a :class:`ReadFiles` and returns what it built
        (None when they cannot be used; it says why) with that ReadFiles: the files it opened
        are those watched from then on (:meth:`record`).
        """
        if not self._begin(force):
            return False
        try:
            if self.stamps() in (self.loaded, self._failed):
                return False
            built, read = attempt()
            if built is None:
                self.record(read, ok=False)
                return False
            commit(built)
            self.record(read, ok=True)
            return True
        finally:
            self._lock.release()


# How a file is read: its text, or OSError / UnicodeDecodeError.
Read = Callable[[Path], str]


def read_file(path: Path) -> str:
    """A file's UTF-8 text (OSError, UnicodeDecodeError)."""
    return path.read_text(encoding="utf-8")


class ReadFiles:
    """The files one reading of a policy opened, as one unit: their stamps and their texts.

    ``read`` is the :data:`Read` to load through. Each file is stamped just before it is read
    (``always``: stamped first, whether read or not, such as the policy and node files, so a
    reading that stopped early still watches them). With ``kept`` (the texts of an earlier
    reading) nothing is read from disk: those texts are served again.
    """

    def __init__(
        self, always: Iterable[Path] = (), *, kept: Mapping[Path, str] | None = None
    ) -> None:
        """Stamp the ``always`` files now, unless replaying ``kept`` texts."""
        self.kept = kept
        self.texts: dict[Path, str] = {}
        self.stamps: dict[Path, FileStamp] = {}
        self.last: Path | None = None  # the file read last: the likely culprit of an error
        if kept is None:
            for path in always:
                self.stamps[Path(path)] = file_stamps([path])[0]

    def read(self, path: Path) -> str:
        """The text of ``path``, recorded with the stamp it had just before."""
        self.last = path
        if self.kept is not None:
            if path not in self.kept:
                raise OSError(2, "not among the kept files", str(path))
            text = self.kept[path]
        else:
            self.stamps.setdefault(path, file_stamps([path])[0])
            text = read_file(path)
        self.texts[path] = text
        return text


def read_text(path: str | Path, read: Read = read_file) -> str:
    """A file's text, with a PolicyError (not a traceback) when it cannot be read."""
    try:
        return read(Path(path))
    except OSError as exc:
        raise PolicyError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PolicyError(str(path), "", "not a UTF-8 text file") from None


def policy_from_text(
    text: str, *, source: str, base: Path | None = None, read: Read = read_file
) -> Policy:
    """Parse a policy document; ``configFile`` references resolve against ``base``."""
    doc = single_document(text, source=source)
    if doc is None:
        # Nothing says an empty policy file is a device-plugin config, and a file caught while
        # it is being rewritten is empty too: the server keeps its last good policy. A
        # configFile or a ConfigMap key that is empty is the plugin's empty config and loads.
        raise PolicyError(
            source,
            "",
            "the file is empty (expected one YAML document, found 0); the device plugin loads "
            "an empty config file as version v1 with nothing shared: write 'version: v1' for that",
        )

    def read_ref(ref: str) -> str:
        if base is None:
            raise OSError(2, "references need a policy file on disk")
        try:
            text = read(base / ref)
        except UnicodeDecodeError:
            raise PolicyError(ref, "", "not a UTF-8 text file") from None
        # Checked here, where every PyYAML failure becomes a DocumentError with its line, before
        # the core parses it (the core knows only PyYAML's own errors).
        composed(text, source=ref)
        return text

    return parse_policy(doc, source=source, read=read_ref, text=text)


def load_policy(path: str | Path | None, *, read: Read = read_file) -> Policy:
    """The policy in ``path``, or the bundled example policy when ``path`` is None.

    Files (the policy and those it names) are read through ``read``. Whatever goes wrong is a
    PolicyError, whatever the exception: its file is the one read last.
    """
    if path is None:
        text = resources.files("webhook.data").joinpath(EXAMPLE_POLICY).read_text("utf-8")
        return policy_from_text(text, source=f"<bundled {EXAMPLE_POLICY}>")
    path = Path(path)
    last = [path]

    def tracked(p: Path) -> str:
        last[0] = p
        return read(p)

    try:
        text = read_text(path, tracked)
        return policy_from_text(text, source=str(path), base=path.parent, read=tracked)
    except PolicyError:
        raise
    except Exception as exc:  # any exception: a file must never stop the caller otherwise
        raise PolicyError(str(last[0]), "", one_line(exc)) from None


#: The DRA kinds a node dump may hold besides Nodes (``kubectl get nodes,deviceclasses,
#: resourceslices,resourceclaims,resourceclaimtemplates -A -o yaml``).
DRA_DUMP_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")


@dataclass(frozen=True)
class ClusterDump:
    """What a node dump holds: Nodes, and the DRA objects beside them."""

    nodes: list[dict[str, Any]]
    by_kind: dict[str, list[dict[str, Any]]]

    def dra(self) -> DraObjects | None:
        """The dump's DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates;
        None when it has none of them (a device-plugin cluster, or one dumped before DRA)."""
        found = DraObjects(
            self.by_kind["DeviceClass"],
            self.by_kind["ResourceSlice"],
            self.by_kind["ResourceClaim"],
            self.by_kind["ResourceClaimTemplate"],
        )
        return found if found else None


def cluster_from_text(text: str, *, source: str) -> ClusterDump:
    """Nodes and DRA objects from a dump: a List, or documents of those kinds; a DocumentError
    names every object of another kind, each with its line."""
    nodes: list[dict[str, Any]] = []
    by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in DRA_DUMP_KINDS}
    wrong: list[tuple[int | None, str]] = []
    for doc in kubernetes_objects(text, source=source):
        kind = doc.value.get("kind", "Node")
        if kind == "Node":
            nodes.append(doc.value)
        elif kind in by_kind:
            by_kind[kind].append(doc.value)
        else:
            wrong.append(
                (doc.line, f"expected a Node or a {', '.join(DRA_DUMP_KINDS)}, not {kind}")
            )
    if wrong:
        raise DocumentError.at_lines(source, wrong)
    return ClusterDump(nodes, by_kind)


def nodes_from_text(text: str, *, source: str) -> list[dict[str, Any]]:
    """Node objects from a ``kubectl get nodes -o yaml`` dump (a List), or Node documents;
    the DRA objects a dump may hold beside them are left out (:func:`cluster_from_text`)."""
    return cluster_from_text(text, source=source).nodes


def load_inventory(
    policy: Policy,
    nodes_path: str | Path | None,
    *,
    read: Read = read_file,
    fit_budget_s: float = OFFLINE_FIT_BUDGET_S,
) -> Inventory:
    """The inventory from a node dump (read through ``read``) when given, else the one the
    policy implies. Whatever goes wrong is a PolicyError naming the file. ``fit_budget_s``:
    the allocator's search time per review (the commands': long; the server passes its own)."""
    if nodes_path is None:
        return assemble(
            policy, nodes=None, source=f"policy {policy.source}", fit_budget_s=fit_budget_s
        )
    try:
        text = read_text(nodes_path, read)
        dump = cluster_from_text(text, source=str(nodes_path))
        return assemble(
            policy,
            nodes=dump.nodes,
            source=f"nodes in {nodes_path}",
            dra=dump.dra(),
            fit_budget_s=fit_budget_s,
        )
    except PolicyError:
        raise
    except Exception as exc:  # any exception: a file must never stop the caller otherwise
        raise PolicyError(str(nodes_path), "", one_line(exc)) from None
