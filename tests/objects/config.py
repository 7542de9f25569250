"""The device plugin's configuration: ConfigMaps and configs, the example cluster with its
ConfigMap, and policies that read one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from tests.support.cluster import LiveCluster


def configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    """A ConfigMap."""
    return {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def time_slicing_config(replicas: int) -> str:
    """A device-plugin config that time-slices every GPU ``replicas`` ways and refuses
    requests above one."""
    return f"""\
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: {replicas}
"""


TIME_SLICING_CONFIG = time_slicing_config(4)


# A device-plugin config with the old timeSlicing.strategy key: the plugin loads it and ignores
# the key (docs/device-plugin.md), so the project loads it with a warning.
IGNORED_STRATEGY = """\
version: v1
sharing:
  timeSlicing:
    strategy: balanced
    resources: [{name: nvidia.com/gpu, replicas: 4}]
"""


#: The example cluster the live tests serve: 8 nodes (L20 and T4, time-sliced) and the
#: device-plugin ConfigMap of its rollout.
EXAMPLE_CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "seed003-l20-t4"
#: (namespace, name) of the device-plugin ConfigMap in the live tests' cluster.
PLUGIN_CONFIGMAP = ("gpu-operator", "device-plugin-config")


def example_cluster(
    configmap_ref: tuple[str, str] = PLUGIN_CONFIGMAP,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """EXAMPLE_CLUSTER's nodes and its device-plugin ConfigMap, named ``configmap_ref``
    (namespace, name)."""
    nodes = yaml.safe_load((EXAMPLE_CLUSTER / "nodes.yaml").read_text())["items"]
    configmap = yaml.safe_load((EXAMPLE_CLUSTER / "device-plugin-config.yaml").read_text())
    configmap["metadata"] = {"name": configmap_ref[1], "namespace": configmap_ref[0]}
    return nodes, configmap


def load_example_cluster(cluster: LiveCluster) -> dict[str, Any]:
    """Add EXAMPLE_CLUSTER's nodes and its ConfigMap (as PLUGIN_CONFIGMAP) to ``cluster``;
    return the ConfigMap as stored."""
    nodes, configmap = example_cluster()
    cluster.add_many(nodes)
    return cluster.add(configmap)


def configmap_ref_policy(
    enforcement: str = "enforce", configmap_ref: tuple[str, str] = PLUGIN_CONFIGMAP
) -> str:
    """A SharingPolicy that reads its device-plugin configs from ``configmap_ref``."""
    namespace, name = configmap_ref
    return (
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec:\n"
        f"  enforcement: {enforcement}\n"
        "  devicePlugin:\n"
        f"    configMapRef: {{namespace: {namespace}, name: {name}}}\n"
        "    defaultConfig: any\n"
    )
