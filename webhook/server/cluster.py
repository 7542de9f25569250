"""Watching the cluster (``GPU_POLICY_KUBE``): live inventory and device-plugin configs.

With ``GPU_POLICY_KUBE`` set to ``in-cluster`` or a kubeconfig path, each worker runs a
``webhook.kube.ClusterSource`` (Nodes, and the device-plugin ConfigMap the policy's
``configMapRef`` names; no Pods: the engine does not read them, and the chart's RBAC does not
grant them). Every new cluster snapshot goes through ``webhook.kube.snapshot.live_view``: the
ConfigMap replaces the policy file's device-plugin configs (a ConfigMap that does not parse
keeps the last good ones and is logged), the nodes replace the declared pools. The result is
swapped into the worker's ``PolicyState``.

Readiness: not ready until the first snapshot (every watched kind listed once): before that
the webhook would judge pods against the policy file's declared pools, which a policy that
only names a ConfigMap does not have. Afterwards it stays ready while the API server is
unreachable and reports how old its data is: a webhook that turns itself unready when the
API server blinks would take admission down with it (failurePolicy: Fail), and the device
plugin's configuration rarely changes in the meantime.

``kubernetes`` is imported only when a cluster is watched, and then by gunicorn's master
before it forks the workers (:func:`import_watch_modules`).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from webhook.contract import KUBE_ENV
from webhook.policy import Inventory, Policy
from webhook.policy.errors import Diagnostic
from webhook.server.metrics import ClusterMetrics
from webhook.server.settings import Settings
from webhook.server.state import PolicyState, log_plugin_warnings

if TYPE_CHECKING:
    from webhook.kube import ClusterSource, ClusterState
    from webhook.kube.advertise import Advertiser
    from webhook.kube.snapshot import LiveView

logger = logging.getLogger(__name__)

#: The modules a worker watching the cluster imports after it is forked: ``kubernetes`` and the
#: parts of ``webhook.kube`` the feed below uses (listing and watching, the live view, the
#: quota resource and budgets); the API classes the watch calls come with
#: ``webhook.kube.source.import_watch_apis``.
WATCH_MODULES = (
    "webhook.kube",
    "webhook.kube.snapshot",
    "webhook.kube.lister",
    "webhook.kube.quotas",
    "webhook.kube.advertise",
    "webhook.policy.quota.nodes",
)


def import_watch_modules() -> None:
    """Import :data:`WATCH_MODULES` now: in gunicorn's master, before it forks the workers.

    A worker is a fork of the master, so what the master imported costs a worker nothing.
    Imported in each worker, these cost it about 0.5 s of CPU before it could list the cluster
    (docs/server.md, "Starting a worker"), again for every worker gunicorn restarts. Importing
    them makes no thread, socket or client (the feed makes those in the worker, after the
    fork), so the master holds nothing a fork would copy half used.
    """
    for name in WATCH_MODULES:
        importlib.import_module(name)
    from webhook.kube.source import import_watch_apis

    import_watch_apis()


class ClusterError(ValueError):
    """``GPU_POLICY_KUBE`` names a configuration that cannot be used (one line)."""


class ClusterFeed:
    """Feeds a PolicyState from a ClusterSource; also the ``/readyz`` check for it."""

    source: ClusterSource

    def __init__(self, state: PolicyState, where: str) -> None:
        """A feed into ``state``; ``from_settings`` gives it its source."""
        self.state = state
        self.where = where
        self._previous: LiveView | None = None
        self._last_error: str | None = None
        self._last_warnings: tuple[Diagnostic, ...] = ()
        self._cluster: ClusterState | None = None
        # The snapshot the served policy and inventory were last built from: readiness waits
        # for it, not for the watch alone, so that a ready worker answers from the cluster.
        self._served: ClusterState | None = None
        self._metrics = ClusterMetrics()
        self._stopped = threading.Event()
        # Under spec.quota.enabled: keeps the synthetic resource on the GPU nodes
        # (webhook.kube.advertise, docs/quota.md), started with the first snapshot that needs it.
        self._api_client: Any = None
        self._advertiser: Advertiser | None = None
        # The namespaces' GPU budgets (namespace -> ResourceQuota name, thousandths), polled
        # so that the webhook's warning names them.
        self._budgets: dict[str, tuple[str, int]] = {}

    @classmethod
    def from_settings(
        cls, settings: Settings, state: PolicyState, api_client: Any = None
    ) -> ClusterFeed:
        """A feed for ``settings.kube`` (``in-cluster`` or a kubeconfig), not started yet.

        Raises ClusterError when the configuration cannot be loaded.
        """
        from webhook.kube import ClusterSource, load_client

        if api_client is None:
            try:
                api_client = load_client(settings.kube)
            except Exception as exc:  # ConfigException, OSError, ...: all mean "cannot start"
                raise ClusterError(f"{KUBE_ENV}={settings.kube}: {exc}") from exc
        ref = state.snapshot.base.configmap_ref
        feed = cls(state, settings.kube)
        feed._api_client = api_client
        feed.source = ClusterSource(
            api_client,
            configmap=(ref.namespace, ref.name) if ref is not None else None,
            on_snapshot=feed.on_snapshot,
            watch_pods=False,
            dra=settings.dra,
        )
        return feed

    def start(self) -> ClusterFeed:
        """Start watching; the state follows the cluster from the first snapshot on."""
        self.state.attach_view(self.view)
        self.source.start()
        threading.Thread(target=self._report_loop, name="cluster-metrics", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop watching; the last snapshot stays in force."""
        self._stopped.set()
        self.source.stop()
        if self._advertiser is not None:
            self._advertiser.stop()

    def report(self) -> None:
        """Copy the watch's figures (restarts, errors, data age, reachability) into metrics."""
        self._metrics.update(
            self.source.health(), now=time.time(), refused=self._last_error is not None
        )

    def _report_loop(self, interval: float = 2.0) -> None:
        # Scrapes read the metric files, not this object: keep them a few seconds fresh.
        while not self._stopped.wait(interval):
            try:
                self.report()
            except Exception:  # a metrics hiccup must never stop the worker
                logger.exception("cannot update the cluster metrics")

    def on_snapshot(self, cluster: ClusterState) -> None:
        """A new cluster snapshot (publisher thread): rebuild the served snapshot."""
        first = self._served is None
        self._cluster = cluster
        self.state.refresh()
        self._served = cluster
        if first:
            # The moment this worker turns ready: one worker's /readyz speaks for it alone.
            logger.info("cluster (%s) listed, %d nodes: ready", self.where, len(cluster.nodes))
        self._advertise(cluster)

    def _advertise(self, cluster: ClusterState) -> None:
        """Hand the nodes that must advertise the quota resource to the advertiser."""
        served = self.state.snapshot
        if not served.policy.quota.enabled or self._api_client is None:
            return
        from webhook.kube.advertise import Advertiser
        from webhook.policy.quota.nodes import nodes_to_advertise

        if self._advertiser is None:
            self._advertiser = Advertiser(self._api_client).start()
            threading.Thread(target=self._budget_loop, name="quota-budgets", daemon=True).start()
        every = [n["metadata"]["name"] for n in cluster.nodes]
        self._advertiser.offer(cluster.nodes, nodes_to_advertise(served.inventory, every))

    def _budget_loop(self, interval: float = 5.0) -> None:
        """Poll the ResourceQuotas; rebuild the served snapshot when a budget changes.

        A poll, not a watch: a quota's ``status.used`` changes with every pod, its ``hard``
        rarely, and only the latter is served.
        """
        from webhook.kube.lister import ClusterError
        from webhook.kube.quotas import read_budget_limits

        said = False
        while True:
            try:
                found = read_budget_limits(self._api_client)
                said = False
                if found != self._budgets:
                    self._budgets = found
                    self.state.refresh()
            except ClusterError as exc:
                if not said:  # once per outage, not every poll
                    logger.warning("GPU budgets not read (the warning cannot name them): %s", exc)
                said = True
            except Exception:  # the loop must outlive any surprise
                logger.exception("GPU budgets not read")
            if self._stopped.wait(interval):
                return

    def view(self, base: Policy) -> tuple[Policy, Inventory] | None:
        """The policy file combined with the latest cluster snapshot; None before the first."""
        from webhook.kube.snapshot import live_view

        cluster = self._cluster
        if cluster is None:
            return None
        live = live_view(base, cluster, previous=self._previous, source=f"cluster ({self.where})")
        if live.configmap_error and live.configmap_error != self._last_error:
            logger.error(
                "device-plugin ConfigMap refused, keeping the last good configs: %s",
                live.configmap_error,
            )
        self._last_error = live.configmap_error
        if live.configmap_error is None:
            warnings = live.policy.plugin_warnings()
            if warnings != self._last_warnings:
                # A ConfigMap edit the plugin accepts: say once what it will ignore.
                log_plugin_warnings(live.policy)
            self._last_warnings = warnings
            self._previous = live
        policy = live.policy
        if policy.quota.enabled and self._budgets:
            policy = replace(policy, quota=replace(policy.quota, budgets=dict(self._budgets)))
        return policy, live.inventory

    def ready(self) -> tuple[bool, str]:
        """(ready, reason) for ``/readyz``: ready once the cluster has been listed."""
        health = self.source.health()
        served = self._served
        if not health.synced or served is None:
            why = f": {health.last_error}" if health.last_error else ""
            return False, f"cluster ({self.where}) not listed yet{why}"
        age = health.sync_age_seconds
        nodes = len(served.nodes)
        text = f"cluster ({self.where}): {nodes} nodes"
        text += f", data {age:.0f} s old" if age is not None else ""
        if not health.api_reachable:
            text += f", API server unreachable: {health.last_error}"
        if health.dra:
            text += f", {health.dra}"
        if self._last_error:
            text += f", ConfigMap refused: {self._last_error}"
        return True, text
