"""ClusterSource against the real API server (through the fault proxy), driven by the real kubernetes client."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.objects import (
    TIME_SLICING_CONFIG,
    configmap,
    cpu_node,
    gpu_node,
    listed_pod,
    time_slicing_config,
)
from tests.support.cluster import LiveCluster
from tests.support.kube_helpers import FAST, MakeSource, wait_until
from webhook.kube import ClusterSource, ClusterState, WatchTimings

NS, CM = "gpu-operator", "device-plugin-config"


def names(state: ClusterState | None) -> list[str]:
    assert state is not None
    return [n["metadata"]["name"] for n in state.nodes]


def labels(state: ClusterState, node: str) -> dict[str, str]:
    return next(n for n in state.nodes if n["metadata"]["name"] == node)["metadata"]["labels"]


def set_label(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"][key] = value

    return change


def seed(cluster: LiveCluster) -> None:
    """A small cluster: two GPU nodes, one CPU node, a mix of pods, two ConfigMaps."""
    cluster.add(gpu_node("gpu-a", "a100-80", config_key="any"))
    cluster.add(gpu_node("gpu-b", "l20", gpus=4, replicas=4, config_key="l20"))
    cluster.add(cpu_node("cpu-a"))
    cluster.add(listed_pod("train", gpu={"nvidia.com/gpu": "2"}, node="gpu-a"))
    cluster.add(listed_pod("queued", gpu={"nvidia.com/gpu": "1"}))
    cluster.add(listed_pod("done", gpu={"nvidia.com/gpu": "1"}, node="gpu-a", phase="Succeeded"))
    cluster.add(listed_pod("web", node="cpu-a"))
    cluster.add(configmap(CM, NS, {"any": TIME_SLICING_CONFIG}))
    cluster.add(configmap("unrelated", NS, {"x": "y"}))


def watching(cluster: LiveCluster, make_source: MakeSource, **kwargs: Any) -> ClusterSource:
    """:func:`seed` the cluster, start a source on it, wait until it has synced and its three
    watches (nodes, pods, the ConfigMap) are open."""
    seed(cluster)
    source = make_source(**kwargs)
    assert source.wait_synced(30)
    assert cluster.wait_for(lambda: cluster.open_watches == 3, 30)
    return source


def test_initial_list_is_reflected(cluster: LiveCluster, make_source: MakeSource) -> None:
    seed(cluster)
    seen: list[ClusterState] = []
    source = make_source(on_snapshot=seen.append)
    assert source.wait_synced(30)
    state = source.current
    assert state is not None
    assert seen[0] is state and state.generation == 1
    assert names(state) == ["cpu-a", "gpu-a", "gpu-b"]
    node = state.nodes[1]
    assert set(node) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert set(node["metadata"]) == {"name", "labels"}  # no managedFields, annotations
    assert set(node["status"]) == {"allocatable", "capacity"}  # no images, conditions
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert labels(state, "gpu-b")["nvidia.com/gpu.product"] == "NVIDIA-L20-SHARED"
    assert [(p["namespace"], p["name"], p["nodeName"]) for p in state.gpu_pods] == [
        ("ml", "queued", None),
        ("ml", "train", "gpu-a"),
    ]
    assert state.gpu_pods[1]["containers"] == [
        {"name": "main", "requests": {"nvidia.com/gpu": "2"}}
    ]
    assert dict(state.configmap or {}) == {"any": TIME_SLICING_CONFIG}
    assert state.configmap_document() == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": NS, "name": CM},
        "data": {"any": TIME_SLICING_CONFIG},
    }
    assert state.synced and state.api_reachable
    assert state.errors == 0 and state.watch_restarts == 0
    assert set(state.resource_versions) == {"nodes", "pods", "configmap", "nodepools"}
    assert state.nodepools == ()  # the fake serves no Karpenter CRD: none, and synced
    assert state.resource_versions["nodepools"] == ""
    assert all(int(rv) > 0 for k, rv in state.resource_versions.items() if k != "nodepools")
    assert state.node_list()["items"] == list(state.nodes)
    health = source.health()
    assert health.synced and health.api_reachable and health.errors == 0
    assert health.sync_age_seconds is not None and health.sync_age_seconds < 5


def test_requests_use_selectors_and_paging(cluster: LiveCluster, make_source: MakeSource) -> None:
    """The ConfigMap is read by name in its namespace (RBAC grants just that one)."""
    seed(cluster)
    for i in range(120):  # more than FAST.page_size: the list is paged
        cluster.add(cpu_node(f"cpu-{i:03d}"))
    source = make_source()
    assert source.wait_synced(30)
    assert len(names(source.current)) == 123
    assert cluster.wait_for(lambda: cluster.open_watches == 3, 30)
    cm_requests = [r for r in cluster.requests if r.resource == "configmaps"]
    assert {r.path for r in cm_requests} == {f"/api/v1/namespaces/{NS}/configmaps"}
    assert all(r.query["fieldSelector"] == f"metadata.name={CM}" for r in cm_requests)
    pod_requests = [r for r in cluster.requests if r.resource == "pods"]
    assert all(r.path == "/api/v1/pods" for r in pod_requests)
    assert all("status.phase!=Succeeded" in r.query["fieldSelector"] for r in pod_requests)
    node_lists = [r for r in cluster.requests if r.resource == "nodes" and r.verb == "list"]
    assert len(node_lists) == 3 and "continue" in node_lists[1].query  # 123 nodes, 50 a page
    watch = next(r for r in cluster.requests if r.resource == "nodes" and r.verb == "watch")
    assert watch.query["allowWatchBookmarks"] == "true"
    assert watch.query["resourceVersion"] == source.current.resource_versions["nodes"]  # type: ignore[union-attr]
    assert int(watch.query["timeoutSeconds"]) >= 30


def test_node_label_change_is_reflected_within_a_second(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    source = watching(cluster, make_source)
    cluster.modify("Node", "gpu-a", set_label("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"))
    assert source.wait_for(
        lambda s: labels(s, "gpu-a")["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3", 1.0
    )


def test_dropped_watch_resumes_from_last_resource_version_without_relist(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    source = watching(cluster, make_source)
    lists_before = cluster.count("nodes", "list")
    watches_before = cluster.count("nodes", "watch")

    stored = cluster.modify("Node", "gpu-b", set_label("team", "vision"))
    assert source.wait_for(lambda s: labels(s, "gpu-b").get("team") == "vision", 30)
    assert cluster.drop_watches() == 3

    # Changed while no watch is open: the resumed watch must replay it.
    cluster.add(gpu_node("gpu-c", "t4", gpus=1))
    assert source.wait_for(lambda s: "gpu-c" in names(s), 30)

    assert cluster.count("nodes", "list") == lists_before  # resumed, not relisted
    resumed = [r for r in cluster.requests if r.resource == "nodes" and r.verb == "watch"]
    assert len(resumed) == watches_before + 1
    assert resumed[-1].query["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert source.watch_restarts >= 3 and source.relists == 0
    assert source.watchers["nodes"].lists == 1


def test_resume_uses_the_bookmark_resource_version(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    source = watching(cluster, make_source)
    # Changes to other kinds move the global resourceVersion past the nodes' last event;
    # a bookmark tells the nodes watch so, and it resumes from there.
    cluster.add(listed_pod("other", node="cpu-a"))
    cluster.add(configmap("another", NS, {}))
    target = cluster.bookmark()
    nodes = source.watchers["nodes"]
    assert wait_until(lambda: nodes.resource_version == target)
    cluster.drop_watches()
    assert cluster.wait_for(
        lambda: cluster.count("nodes", "watch") == 2 and cluster.open_watches == 3
    )
    last = [r for r in cluster.requests if r.resource == "nodes" and r.verb == "watch"][-1]
    assert last.query["resourceVersion"] == target
    assert cluster.count("nodes", "list") == 1


def test_gone_triggers_relist_and_ends_with_the_right_state(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    source = watching(cluster, make_source)
    # Changes the watchers cannot see (API down), then a restart of the API server (its watch
    # cache starts afresh): resuming is impossible.
    cluster.go_down("close")
    assert source.wait_for(lambda s: not s.api_reachable, 30)
    cluster.delete("Node", "gpu-a")
    cluster.modify("Node", "gpu-b", set_label("pool", "inference"))
    cluster.add(gpu_node("gpu-d", "h100"))
    cluster.modify(
        "ConfigMap", CM, lambda o: o["data"].update(l20=TIME_SLICING_CONFIG), namespace=NS
    )
    cluster.delete("Pod", "train", namespace="ml")
    cluster.expire_watches()  # the API server restarts: resuming from before is 410 Gone
    cluster.come_back()

    assert source.wait_for(lambda s: s.api_reachable and "gpu-d" in names(s), 30)
    assert source.wait_for(lambda s: s.configmap is not None and "l20" in s.configmap, 30)
    assert source.wait_for(lambda s: [p["name"] for p in s.gpu_pods] == ["queued"], 30)
    state = source.current
    assert state is not None
    assert names(state) == ["cpu-a", "gpu-b", "gpu-d"]
    assert labels(state, "gpu-b")["pool"] == "inference"
    assert source.relists >= 3  # one per kind
    assert cluster.count("nodes", "list") == 2
    gone = [r for r in cluster.requests if r.resource == "nodes" and r.verb == "watch"]
    assert int(gone[-1].query["resourceVersion"]) > int(gone[-2].query["resourceVersion"])


@pytest.mark.parametrize("mode", ["503", "close", "refuse"])
def test_outage_keeps_last_snapshot_and_recovery_resyncs(
    cluster: LiveCluster, make_source: MakeSource, mode: str
) -> None:
    source = watching(cluster, make_source)
    before = source.current
    assert before is not None

    cluster.go_down(mode)
    assert source.wait_for(lambda s: not s.api_reachable, 30)
    during = source.current
    assert during is not None
    assert during.nodes == before.nodes and during.gpu_pods == before.gpu_pods
    assert during.configmap == before.configmap
    health = source.health()
    assert health.synced and not health.api_reachable
    assert health.errors > 0 and health.last_error
    assert wait_until(lambda: source.health().errors >= 6)  # it keeps retrying

    cluster.modify("Node", "gpu-a", set_label("maintenance", "done"))  # missed while down
    cluster.come_back()
    assert source.wait_for(
        lambda s: s.api_reachable and labels(s, "gpu-a").get("maintenance") == "done", 3
    )
    assert source.health().api_reachable
    assert cluster.count("nodes", "list") == 1  # history was kept: resumed, no relist


def test_server_side_watch_timeout_resumes_without_error(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    seed(cluster)
    source = make_source(timings=replace(FAST, watch_timeout=1))  # timeoutSeconds=1
    assert source.wait_synced(30)
    assert cluster.wait_for(lambda: cluster.count("nodes", "watch") >= 2, 5)  # ended, reopened
    cluster.modify("Node", "gpu-a", set_label("after", "timeout"))
    assert source.wait_for(lambda s: labels(s, "gpu-a").get("after") == "timeout", 30)
    health = source.health()
    assert health.errors == 0 and health.relists == 0 and health.watch_restarts >= 1
    assert cluster.count("nodes", "list") == 1


def test_forbidden_kind_blocks_the_first_snapshot_and_says_why(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    """RBAC without pods: no snapshot (the inventory would be incomplete), a clear error."""
    seed(cluster)
    cluster.forbid("pods")
    source = make_source()
    assert wait_until(lambda: source.watchers["pods"].errors >= 2)
    health = source.health()
    assert source.current is None and not health.synced
    assert health.api_reachable  # it answered; it said no
    assert source.watchers["nodes"].synced and not source.watchers["pods"].synced
    assert "403" in (source.watchers["pods"].last_error or "")
    cluster.allow_all()
    assert source.wait_synced(30)


def test_not_synced_until_the_api_answers(cluster: LiveCluster, make_source: MakeSource) -> None:
    seed(cluster)
    cluster.go_down("503")
    source = make_source()
    assert wait_until(lambda: source.health().errors >= 3)
    health = source.health()
    assert source.current is None
    assert not health.synced and not health.api_reachable
    assert health.sync_age_seconds is None and health.snapshot_age_seconds is None
    assert "503" in (health.last_error or "")
    cluster.come_back()
    assert source.wait_synced(30)
    assert source.current is not None and source.current.api_reachable


def test_configmap_edit_produces_new_snapshot(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    source = watching(cluster, make_source)
    generation = source.current.generation  # type: ignore[union-attr]

    new = time_slicing_config(8)
    cluster.modify("ConfigMap", CM, lambda o: o["data"].update(any=new), namespace=NS)
    assert source.wait_for(lambda s: s.configmap is not None and s.configmap["any"] == new, 30)
    state = source.current
    assert state is not None and state.generation > generation
    with pytest.raises(TypeError):
        state.configmap["any"] = "mutated"  # type: ignore[index]

    cluster.delete("ConfigMap", CM, namespace=NS)
    assert source.wait_for(lambda s: s.configmap is None, 30)
    cluster.add(configmap(CM, NS, {"any": TIME_SLICING_CONFIG}))
    assert source.wait_for(lambda s: s.configmap is not None, 30)


def test_other_configmaps_are_not_seen(cluster: LiveCluster, make_source: MakeSource) -> None:
    source = watching(cluster, make_source)
    cm_watcher = source.watchers["configmap"]
    events = cm_watcher.events
    cluster.modify("ConfigMap", "unrelated", lambda o: o["data"].update(x="z"), namespace=NS)
    cluster.add(configmap(CM, "elsewhere", {"any": "nope"}))
    target = cluster.bookmark()
    assert wait_until(lambda: cm_watcher.resource_version == target)
    assert cm_watcher.events == events + 1  # just the bookmark
    assert dict(source.current.configmap or {}) == {"any": TIME_SLICING_CONFIG}  # type: ignore[union-attr]


def test_pod_lifecycle(cluster: LiveCluster, make_source: MakeSource) -> None:
    source = watching(cluster, make_source)

    cluster.bind("queued", "gpu-b", namespace="ml")  # as the scheduler does
    assert source.wait_for(lambda s: any(p["nodeName"] == "gpu-b" for p in s.gpu_pods), 30)

    def finish(obj: dict[str, Any]) -> None:
        obj["status"]["phase"] = "Succeeded"

    cluster.modify("Pod", "train", finish, namespace="ml")  # leaves the selector: DELETED
    assert source.wait_for(lambda s: [p["name"] for p in s.gpu_pods] == ["queued"], 30)
    cluster.add(listed_pod("init", gpu={"cpu": "1"}, init_gpu={"nvidia.com/mig-1g.10gb": "1"}))
    assert source.wait_for(lambda s: len(s.gpu_pods) == 2, 30)
    init = next(p for p in source.current.gpu_pods if p["name"] == "init")  # type: ignore[union-attr]
    assert init["initContainers"] == [
        {"name": "warmup", "requests": {"nvidia.com/mig-1g.10gb": "1"}}
    ]
    assert "containers" not in init


def test_irrelevant_node_updates_publish_nothing(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    """Kubelet heartbeats change conditions, not what the engine reads: no new snapshot."""
    source = watching(cluster, make_source)
    nodes = source.watchers["nodes"]
    snapshots, events = source.snapshots, nodes.events

    def heartbeat(obj: dict[str, Any]) -> None:
        for cond in obj["status"]["conditions"]:
            cond["lastHeartbeatTime"] = "2025-01-01T00:05:00Z"

    stored = cluster.modify("Node", "gpu-a", heartbeat)
    assert wait_until(lambda: nodes.events == events + 1)
    assert source.snapshots == snapshots
    assert nodes.resource_version == stored["metadata"]["resourceVersion"]

    before = source.current
    cluster.modify("Node", "gpu-b", set_label("x", "1"))
    assert source.wait_for(lambda s: labels(s, "gpu-b").get("x") == "1", 30)
    after = source.current
    assert before is not None and after is not None
    assert after.generation == before.generation + 1
    # Unchanged nodes are shared between snapshots, not copied.
    assert after.nodes[1] is before.nodes[1]


def test_a_burst_is_coalesced(cluster: LiveCluster, make_source: MakeSource) -> None:
    seed(cluster)
    for i in range(200):
        node = cpu_node(f"burst-{i:04d}")
        node["metadata"]["labels"]["burst"] = "yes"
        cluster.add(node)
    # The product's own debounce (FAST's is shorter than the API server takes for the burst).
    defaults = WatchTimings()
    source = make_source(
        timings=replace(FAST, debounce=defaults.debounce, debounce_max=defaults.debounce_max)
    )
    assert source.wait_synced(30)
    assert cluster.wait_for(lambda: cluster.open_watches == 3, 30)
    assert len(source.current.nodes) == 203  # type: ignore[union-attr]
    snapshots = source.snapshots
    cluster.delete_collection("Node", label_selector="burst=yes")  # 200 DELETED events at once
    assert source.wait_for(lambda s: len(s.nodes) == 3, 60)
    assert source.snapshots - snapshots < 20  # not one per DELETED event


def test_callback_failure_does_not_stop_updates(
    cluster: LiveCluster, make_source: MakeSource
) -> None:
    seed(cluster)
    calls: list[int] = []

    def flaky(state: ClusterState) -> None:
        calls.append(state.generation)
        if len(calls) == 1:
            raise RuntimeError("consumer bug")

    source = make_source(on_snapshot=flaky)
    assert source.wait_synced(30)
    assert cluster.wait_for(lambda: cluster.open_watches == 3, 30)
    cluster.modify("Node", "gpu-a", set_label("x", "1"))
    assert source.wait_for(lambda s: labels(s, "gpu-a").get("x") == "1", 30)
    assert wait_until(lambda: len(calls) >= 2)
    assert source.health().callback_errors == 1


def test_without_pods_or_configmap(cluster: LiveCluster, make_source: MakeSource) -> None:
    seed(cluster)
    source = make_source(configmap=None, watch_pods=False, watch_nodepools=False)
    assert source.wait_synced(30)
    state = source.current
    assert state is not None
    assert state.configmap is None and state.gpu_pods == ()
    assert state.configmap_document() is None
    assert set(source.watchers) == {"nodes"}
    assert cluster.count("pods", "list") == 0 and cluster.count("configmaps", "list") == 0


def test_stop_is_prompt(cluster: LiveCluster, make_source: MakeSource) -> None:
    source = watching(cluster, make_source)
    started = time.monotonic()
    source.stop()
    assert all(w.join(0) for w in source.watchers.values())
    assert time.monotonic() - started < 2
    assert cluster.wait_for(lambda: cluster.open_watches == 0)
    assert source.current is not None  # the last snapshot stays readable


def test_health_of_a_synced_source(cluster: LiveCluster, make_source: MakeSource) -> None:
    seed(cluster)
    source = make_source()
    assert source.wait_synced(30)
    health, state = source.health(), source.current
    assert state is not None and len(state.nodes) == 3 and len(state.gpu_pods) == 2
    assert health.synced and health.api_reachable
    assert health.errors == 0 and health.watch_restarts == 0
    assert health.sync_age_seconds is not None and 0 <= health.sync_age_seconds < 5
