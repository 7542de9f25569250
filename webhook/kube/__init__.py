"""The Kubernetes side: the ONLY package that imports ``kubernetes``.

It watches Nodes, GPU Pods, the device-plugin ConfigMap and, where the cluster serves
``resource.k8s.io/v1``, DeviceClasses and ResourceSlices, and hands immutable
:class:`ClusterState` snapshots to the core::

    from webhook.kube import ClusterSource, load_client

    source = ClusterSource(
        load_client("in-cluster"),
        configmap=("gpu-operator", "device-plugin-config"),
        on_snapshot=lambda state: holder.swap(state),
    ).start()
    source.wait_synced(timeout=30)
"""

from webhook.kube.client import load_client
from webhook.kube.source import ClusterSource, ClusterState, Health
from webhook.kube.trim import configmap_data, trim_node, trim_pod
from webhook.kube.watch_spec import WatchTimings

__all__ = [
    "ClusterSource",
    "ClusterState",
    "Health",
    "WatchTimings",
    "configmap_data",
    "load_client",
    "trim_node",
    "trim_pod",
]
