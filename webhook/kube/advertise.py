"""Keeping the synthetic quota resource advertised on the GPU nodes (docs/quota.md, "Nodes").

A node advertises ``gpu-policy.io/gpu-milli`` when its ``status.capacity`` and
``status.allocatable`` hold it; the kubelet keeps an extended resource patched into
capacity and copies it into allocatable on every status update, but zeroes every extended
resource when it re-registers a node it finds recreated (``reconcileExtendedResource`` of
pkg/kubelet/kubelet_node_status.go). So this loop does not patch once: on every cluster
snapshot it patches the nodes that lack it or show another amount. Every server replica runs
it without a leader: the patch sets a fixed amount, so two replicas patching at once agree.
It needs ``patch`` on ``nodes/status`` and nothing more (the nodes come from the watch).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.contract import QUOTA_NODE_CAPACITY, QUOTA_RESOURCE
from webhook.policy.quantity import QuantityError, quantity_value

logger = logging.getLogger(__name__)


def lacks_resource(node: Mapping[str, Any]) -> bool:
    """True when the node's status does not advertise the synthetic resource in full.

    The API server stores quantities in canonical form (1000000 comes back as ``1M``): they
    are compared as numbers.
    """
    status = node.get("status") or {}
    for key in ("capacity", "allocatable"):
        try:
            if quantity_value((status.get(key) or {}).get(QUOTA_RESOURCE)) != QUOTA_NODE_CAPACITY:
                return True
        except QuantityError:
            return True
    return False


def status_patch() -> dict[str, Any]:
    """The strategic merge patch of ``nodes/status`` that advertises the synthetic resource.

    Allocatable too: the kubelet would copy it from capacity at its next status update, but a
    node without a kubelet (or before that update) would leave charged pods Pending meanwhile.
    """
    amount = str(QUOTA_NODE_CAPACITY)
    return {
        "status": {"capacity": {QUOTA_RESOURCE: amount}, "allocatable": {QUOTA_RESOURCE: amount}}
    }


class Advertiser:
    """Patches, in its own thread, the nodes a snapshot shows without the synthetic resource."""

    def __init__(self, api_client: Any) -> None:
        """An advertiser that patches through ``api_client``; :meth:`start` runs it."""
        self._api_client = api_client
        self._wanted: list[Mapping[str, Any]] = []
        self._changed = threading.Condition()
        self._stopped = False
        self.patched = 0

    def start(self) -> Advertiser:
        """Run the patch loop in a daemon thread."""
        threading.Thread(target=self._loop, name="quota-advertise", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop the loop after its current patch."""
        with self._changed:
            self._stopped = True
            self._changed.notify()

    def offer(self, nodes: Iterable[Mapping[str, Any]], names: Iterable[str]) -> None:
        """The latest nodes (trimmed Node objects) and which of them must advertise."""
        wanted = set(names)
        lacking = [n for n in nodes if (n.get("metadata") or {}).get("name") in wanted]
        lacking = [n for n in lacking if lacks_resource(n)]
        with self._changed:
            self._wanted = lacking
            self._changed.notify()

    def _loop(self) -> None:
        from kubernetes.client.exceptions import ApiException

        from webhook.kube.raw import NODE_STATUS, STRATEGIC_MERGE_PATCH, read_json, request

        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._wanted or self._stopped)
                if self._stopped:
                    return
                todo, self._wanted = self._wanted, []
            for node in todo:
                name = node["metadata"]["name"]
                try:
                    response = request(
                        self._api_client,
                        "PATCH",
                        NODE_STATUS,
                        params={"name": name},
                        body=status_patch(),
                        content_type=STRATEGIC_MERGE_PATCH,
                    )
                    read_json(response)
                    self.patched += 1
                    logger.info("node %s now advertises %s", name, QUOTA_RESOURCE)
                except ApiException as exc:
                    # The next snapshot offers it again; a 403 means the RBAC lacks
                    # nodes/status patch (the chart grants it with quota.enabled).
                    logger.warning(
                        "cannot advertise %s on node %s: %s %s",
                        QUOTA_RESOURCE,
                        name,
                        exc.status,
                        exc.reason,
                    )
                except Exception:
                    logger.exception("cannot advertise %s on node %s", QUOTA_RESOURCE, name)
