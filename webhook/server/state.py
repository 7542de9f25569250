"""The policy and inventory a worker serves: one immutable snapshot, swapped atomically.

A review reads ``state.snapshot`` once and uses that object from start to end; a reload builds
a whole new Snapshot and replaces the reference (a single attribute store, atomic in Python),
so no request ever sees half a policy.

Two sources feed a snapshot:

* the files: the policy (``GPU_POLICY_FILE``), every file it names (``configFile``,
  ``configMapFile``) and, without a cluster, the node dump (``GPU_POLICY_NODES``), read,
  watched and kept as one unit (:func:`attempt`). They are checked for changes at most once per
  ``reload_interval``, on the request path (an ``os.stat`` per file per second, nothing more)
  and by ``/readyz``, so an idle server picks a change up from the kubelet's probes. A
  ConfigMap volume updates by swapping a symlink: ``os.stat`` follows it and sees a new inode.
  Files that do not load, for whatever reason (whatever the exception), keep the last good
  snapshot; the problem (file, line or field, reason: one line) is logged and counted once per
  state of the files, shown on ``/readyz`` (still 200: a good policy is served), and the
  files are tried again when they change next.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from webhook.files import FileWatch, ReadFiles, load_inventory, load_policy, one_line
from webhook.policy import Inventory, Policy, PolicyError
from webhook.policy.supply.assemble import FIT_BUDGET_S
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


# The texts of every file a policy was loaded from (the policy, the files it names, the node
# dump), by path: what the master keeps and a worker started later serves again.
KeptFiles = Mapping[Path, str]


def snapshot_from(settings: Settings, read: ReadFiles, generation: int = 1) -> Snapshot:
    """The snapshot the files make, read through ``read``; PolicyError when they are bad."""
    policy = load_policy(settings.policy_file, read=read.read)
    inventory = load_inventory(
        policy, settings.nodes_file, read=read.read, fit_budget_s=FIT_BUDGET_S
    )
    return Snapshot(policy, inventory, generation, policy)


def attempt(
    settings: Settings,
    generation: int = 1,
    *,
    kept: KeptFiles | None = None,
    warn: bool = True,
) -> tuple[Snapshot | PolicyError, ReadFiles]:
    """Load the files as one unit (or replay ``kept`` texts): the snapshot or why not, and
    what was read. Never raises: whatever goes wrong is the PolicyError returned. ``warn``:
    log what the device plugin would ignore (the workers do; the master does not serve)."""
    read = ReadFiles(settings.policy_files, kept=kept)
    try:
        snapshot = snapshot_from(settings, read, generation)
        if warn:
            log_plugin_warnings(snapshot.policy)
    except PolicyError as exc:
        return exc, read
    except Exception as exc:  # files.py turns file problems into PolicyError; anything else
        # (a bug in the policy code on odd input) must not stop a reload either.
        source = read.last or settings.policy_file
        return PolicyError(str(source), "", f"{type(exc).__name__}: {one_line(exc)}"), read
    return snapshot, read


def load_snapshot(settings: Settings, generation: int = 1) -> Snapshot:
    """Load the policy and the inventory the settings name; PolicyError when they are bad."""
    loaded, _ = attempt(settings, generation)
    if isinstance(loaded, PolicyError):
        raise loaded
    return loaded


class LastGoodFiles:
    """The texts of every file of the policy as they were the last time they loaded.

    Kept by gunicorn's master, which never serves: :meth:`follow` checks the files (an
    ``os.stat`` each per interval: the policy, the files it names, the node dump) from a thread
    of the master, so that a worker forked later inherits the newest good texts, not those of
    the server's start. ``texts`` is replaced by one attribute store, so a fork never sees it
    half written. The thread never dies: whatever a check raises is logged and the next check
    runs an interval later.
    """

    def __init__(
        self,
        settings: Settings,
        report: Callable[[str], None] = logger.error,
        note: Callable[[str], None] = logger.info,
    ) -> None:
        """Read the files now: ``texts`` is None when they do not load. ``report`` gets one
        line when a check fails in a way the files do not explain, ``note`` one when changed
        files loaded and are kept (gunicorn's log, both)."""
        self.settings = settings
        self.report = report
        self.note = note
        self._files = FileWatch(settings.policy_files, interval=settings.reload_interval)
        loaded, read = attempt(settings, warn=False)
        ok = not isinstance(loaded, PolicyError)
        self._files.record(read, ok=ok)
        self.texts: KeptFiles | None = dict(read.texts) if ok else None

    def _attempt(self) -> tuple[KeptFiles | None, ReadFiles]:
        loaded, read = attempt(self.settings, warn=False)
        # The workers log why the files do not load, each once per state of the files.
        return (None if isinstance(loaded, PolicyError) else dict(read.texts)), read

    def _keep(self, texts: KeptFiles) -> None:
        self.texts = texts
        self.note(
            f"policy files changed and load: kept for the workers started from now on"
            f" ({len(texts)} files)"
        )

    def check(self) -> bool:
        """Take the files' texts if they changed and load; True when they were taken."""
        return self._files.reload_read(self._attempt, self._keep, force=True)

    def follow(self, stop: threading.Event) -> threading.Thread:
        """Check the files every interval from a daemon thread until ``stop`` is set."""

        def run() -> None:
            while not stop.wait(self.settings.reload_interval):
                try:
                    self.check()
                except Exception as exc:  # never let the keeper die: a later good edit counts
                    self.report(f"last good policy files: check failed: {one_line(exc)}")

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
        last_good: KeptFiles | None = None,
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
        loaded, read = attempt(settings)
        self._files.record(read, ok=not isinstance(loaded, PolicyError))
        if not isinstance(loaded, PolicyError):
            self._snapshot = loaded
            return
        if last_good is None:
            raise loaded
        kept, _ = attempt(settings, kept=last_good)
        if isinstance(kept, PolicyError):  # the master kept only texts that loaded
            raise kept
        self._snapshot = kept
        self.last_error = str(loaded)
        self._notify(ok=False)
        logger.error(
            "policy files do not load, serving the last good policy %s the server "
            "loaded before this worker started: %s",
            self._snapshot.policy.source,
            loaded,
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
        return self._files.reload_read(self._load, self._swap_in, force=force)

    def _load(self) -> tuple[Snapshot | None, ReadFiles]:
        loaded, read = attempt(self.settings, self._snapshot.generation + 1)
        if not isinstance(loaded, PolicyError):
            return loaded, read
        self.last_error = str(loaded)
        logger.error(
            "policy reload failed, still serving policy %s (generation %d): %s",
            self._snapshot.policy.source,
            self._snapshot.generation,
            loaded,
        )
        self._notify(ok=False)
        return None, read

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
