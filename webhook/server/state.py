"""The policy and inventory a worker serves: one immutable snapshot, swapped atomically.

A review reads ``state.snapshot`` once and uses that object from start to end; a reload builds
a whole new Snapshot and replaces the reference (a single attribute store, atomic in Python),
so no request ever sees half a policy.

Two sources feed a snapshot:

* the files: the policy (``GPU_POLICY_FILE``) and, without a cluster, the node dump
  (``GPU_POLICY_NODES``). They are checked for changes at most once per ``reload_interval``,
  on the request path (an ``os.stat`` per file per second, nothing more) and by ``/readyz``,
  so an idle server picks a change up from the kubelet's probes. A ConfigMap volume updates by
  swapping a symlink: ``os.stat`` follows it and sees a new inode. A file that does not load
  keeps the last good snapshot; the problem (file, field, reason) is logged and counted once
  per state of the files, and the files are tried again when they change next.
* the cluster, when one is watched (``webhook.server.cluster``): a ``view`` function combines the
  policy file with the latest cluster snapshot (the device-plugin ConfigMap, the nodes) and is
  called again for every new cluster snapshot and every policy reload.

Each gunicorn worker reloads on its own, so a change is counted once per worker.

A worker that starts while the files do not load (gunicorn replaces a worker that was killed,
timed out or ran out of memory) serves the last good files instead of failing to boot: one
worker failing to boot makes gunicorn stop the whole server, so a bad ConfigMap edit followed
by one worker restart would otherwise take the webhook down. The master keeps those texts
(:class:`LastGoodFiles`, run by ``webhook.server.gunicorn_conf``) and the worker inherits them
when it is forked. At the server's start there is nothing good yet, and a bad file still stops
it with one line naming the file, the field and the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from webhook.files import FileWatch, Stamps, load_inventory, load_policy, read_text
from webhook.policy import Inventory, Policy, PolicyError
from webhook.server.settings import Settings

logger = logging.getLogger(__name__)


# From the policy file to the (policy, inventory) to serve; None while it has nothing to say.
View = Callable[[Policy], tuple[Policy, Inventory] | None]


@dataclass(frozen=True)
class Snapshot:
    """An immutable (policy, inventory) pair, and the file policy it came from."""

    policy: Policy
    inventory: Inventory
    generation: int
    base: Policy  # the policy file as loaded, before a cluster view applied


def log_plugin_warnings(policy: Policy) -> None:
    """Log what the device plugin would silently ignore in the configs, one line each."""
    for warning in policy.plugin_warnings():
        logger.warning("device-plugin config: %s", warning)


class FileTexts(NamedTuple):
    """What the policy and node files held when read (None: the settings name no such file)."""

    policy: str | None
    nodes: str | None


def read_files(settings: Settings) -> FileTexts:
    """The texts of the files the settings name; PolicyError when one cannot be read."""
    return FileTexts(
        read_text(settings.policy_file) if settings.policy_file else None,
        read_text(settings.nodes_file) if settings.nodes_file else None,
    )


def snapshot_from(settings: Settings, texts: FileTexts, generation: int = 1) -> Snapshot:
    """The snapshot the file texts make; PolicyError when they are bad."""
    policy = load_policy(settings.policy_file, text=texts.policy)
    inventory = load_inventory(policy, settings.nodes_file, text=texts.nodes)
    return Snapshot(policy, inventory, generation, policy)


def load_snapshot(settings: Settings, generation: int = 1) -> Snapshot:
    """Load the policy and the inventory the settings name; PolicyError when they are bad."""
    snapshot = snapshot_from(settings, read_files(settings), generation)
    log_plugin_warnings(snapshot.policy)
    return snapshot


class LastGoodFiles:
    """The texts of the policy and node files as they were the last time they loaded.

    Kept by gunicorn's master, which never serves: :meth:`follow` checks the files (an
    ``os.stat`` each per interval) from a thread of the master, so that a worker forked later
    inherits the newest good texts, not those of the server's start. ``texts`` is replaced by
    one attribute store, so a fork never sees it half written.
    """

    def __init__(self, settings: Settings) -> None:
        """Read the files now: ``texts`` is None when they do not load."""
        self.settings = settings
        self._files = FileWatch(settings.policy_files, interval=settings.reload_interval)
        self.texts: FileTexts | None = self._load(self._files.loaded)

    def _load(self, stamps: Stamps) -> FileTexts | None:
        try:
            texts = read_files(self.settings)
            snapshot_from(self.settings, texts)
        except PolicyError:
            return None  # the workers log why, each once per state of the files
        return texts

    def _keep(self, texts: FileTexts) -> None:
        self.texts = texts

    def check(self) -> bool:
        """Take the files' texts if they changed and load; True when they were taken."""
        return self._files.reload(self._load, self._keep, force=True)

    def follow(self, stop: threading.Event) -> threading.Thread:
        """Check the files every interval from a daemon thread until ``stop`` is set."""

        def run() -> None:
            while not stop.wait(self.settings.reload_interval):
                self.check()

        thread = threading.Thread(target=run, name="last-good-files", daemon=True)
        thread.start()
        return thread


class PolicyState:
    """The current snapshot, and the reloading of the files and views it came from.

    Construction loads the files and raises PolicyError when they are unusable: a worker fails
    at start, never at its first request. ``on_reload(ok)`` is called after every reload
    attempt of the files (the web layer counts them).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        on_reload: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        last_good: FileTexts | None = None,
    ) -> None:
        """Load the snapshot now; raise PolicyError if it cannot be served.

        ``last_good``: the texts the server served before this worker started; used when the
        files do not load now (see the module's docstring).
        """
        self.settings = settings
        self._on_reload = on_reload
        self._build_lock = threading.Lock()  # one snapshot is built at a time
        self._view: View | None = None
        self._files = FileWatch(
            settings.policy_files, interval=settings.reload_interval, clock=clock
        )
        self.last_error: str | None = None
        try:
            self._snapshot = load_snapshot(settings)
        except PolicyError as exc:
            if last_good is None:
                raise
            self._snapshot = snapshot_from(settings, last_good)
            log_plugin_warnings(self._snapshot.policy)
            self.last_error = str(exc)
            self._notify(ok=False)
            logger.error(
                "policy files do not load, serving the last good policy %s the server "
                "loaded before this worker started: %s",
                self._snapshot.policy.source,
                exc,
            )

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot to serve the next review with (one atomic read)."""
        return self._snapshot

    # -- the cluster ---------------------------------------------------------------------------

    def attach_view(self, view: View) -> None:
        """Serve what ``view`` makes of the policy file from now on (see :meth:`refresh`)."""
        self._view = view
        self.refresh()

    def refresh(self) -> bool:
        """Rebuild the snapshot from the current policy file and view; True if swapped.

        Called from the cluster watch thread for every new cluster snapshot.
        """
        with self._build_lock:
            current = self._snapshot
            built = self._apply_view(current.base, current.generation + 1)
            if built is None:
                return False
            self._snapshot = built
            return True

    def _apply_view(self, base: Policy, generation: int) -> Snapshot | None:
        view = self._view(base) if self._view is not None else None
        if view is None:
            return None
        policy, inventory = view
        return Snapshot(policy, inventory, generation, base)

    # -- the files -------------------------------------------------------------------------

    def maybe_reload(self, *, force: bool = False) -> bool:
        """Reload when the files changed (checked at most once per interval); True if swapped.

        Never blocks: when another thread is already checking, this one serves what it has.
        """
        return self._files.reload(self._load, self._swap_in, force=force)

    def _load(self, stamps: Stamps) -> Snapshot | None:
        try:
            return load_snapshot(self.settings, self._snapshot.generation + 1)
        except PolicyError as exc:
            self.last_error = str(exc)
            logger.error(
                "policy reload failed, still serving policy %s (generation %d): %s",
                self._snapshot.policy.source,
                self._snapshot.generation,
                exc,
            )
            self._notify(ok=False)
            return None

    def _swap_in(self, loaded: Snapshot) -> None:
        with self._build_lock:
            snapshot = self._apply_view(loaded.base, loaded.generation) or loaded
            self._snapshot = snapshot
        self.last_error = None
        logger.info(
            "policy reloaded: %s (generation %d), inventory: %s",
            snapshot.policy.source,
            snapshot.generation,
            snapshot.inventory.source,
        )
        self._notify(ok=True)

    def _notify(self, *, ok: bool) -> None:
        if self._on_reload is not None:
            self._on_reload(ok)
