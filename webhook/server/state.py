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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from webhook.files import FileWatch, Stamps, load_inventory, load_policy
from webhook.policy import Inventory, Policy, PolicyError
from webhook.server.settings import Settings

logger = logging.getLogger(__name__)


# From the policy file to the (policy, inventory) to serve; None while it has nothing to say.
View = Callable[[Policy], tuple[Policy, Inventory] | None]


@dataclass(frozen=True)
class Snapshot:
    """An immutable (policy, inventory) pair, the file policy it came from, and when."""

    policy: Policy
    inventory: Inventory
    generation: int
    loaded_at: float  # time.time()
    base: Policy  # the policy file as loaded, before a cluster view applied


def log_plugin_warnings(policy: Policy) -> None:
    """Log what the device plugin would silently ignore in the configs, one line each."""
    for warning in policy.plugin_warnings():
        logger.warning("device-plugin config: %s", warning)


def load_snapshot(settings: Settings, generation: int = 1) -> Snapshot:
    """Load the policy and the inventory the settings name; PolicyError when they are bad."""
    policy = load_policy(settings.policy_file)
    log_plugin_warnings(policy)
    inventory = load_inventory(policy, settings.nodes_file)
    return Snapshot(policy, inventory, generation, time.time(), policy)


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
    ) -> None:
        """Load the snapshot now; raise PolicyError if it cannot be served."""
        self.settings = settings
        self._on_reload = on_reload
        self._build_lock = threading.Lock()  # one snapshot is built at a time
        self._view: View | None = None
        watched = (p for p in (settings.policy_file, settings.nodes_file) if p)
        self._files = FileWatch(watched, interval=settings.reload_interval, clock=clock)
        self._snapshot = load_snapshot(settings)
        self.last_error: str | None = None

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
        return Snapshot(policy, inventory, generation, time.time(), base)

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
