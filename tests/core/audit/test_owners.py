"""Owner-aware grouping: pods are reported once, under the object users manage."""

from __future__ import annotations

from typing import Any

import pytest

from tests.objects import listed_pod, workload
from webhook.audit import Collector

GPU1 = {"nvidia.com/gpu": 1}


def groups(*objects: dict[str, Any]) -> dict[str, tuple[int, str | None]]:
    """``{"Kind ns/name": (pod count, kind of the judged object)}``."""
    collector = Collector()
    collector.add_all(objects)
    return {
        f"{g.subject.kind} {g.subject.namespace}/{g.subject.name}": (
            len(g.pods),
            g.judged.get("kind") if g.judged is not None else None,
        )
        for g in collector.groups()
    }


CASES = [
    pytest.param(
        [workload("Deployment", "infer", gpu=GPU1),
         workload("ReplicaSet", "infer-7f9c", gpu=GPU1, owned_by=("Deployment", "infer")),
         workload("ReplicaSet", "infer-5d8b", gpu=GPU1, owned_by=("Deployment", "infer")),
         listed_pod("infer-7f9c-a", gpu=GPU1, owned_by=("ReplicaSet", "infer-7f9c")),
         listed_pod("infer-7f9c-b", gpu=GPU1, owned_by=("ReplicaSet", "infer-7f9c")),
         listed_pod("infer-5d8b-c", gpu=GPU1, owned_by=("ReplicaSet", "infer-5d8b"))],
        {"Deployment ml/infer": (3, "Deployment")},
        id="two-replicasets-of-a-rolling-update-under-the-deployment"),
    pytest.param(
        [workload("ReplicaSet", "infer-7f9c", gpu=GPU1, owned_by=("Deployment", "infer")),
         listed_pod("infer-7f9c-a", gpu=GPU1, owned_by=("ReplicaSet", "infer-7f9c"))],
        {"Deployment ml/infer": (1, "ReplicaSet")},
        id="deployment-not-listed-its-replicaset-speaks-for-it"),
    pytest.param(
        [listed_pod("infer-7f9c-a", gpu=GPU1, owned_by=("ReplicaSet", "infer-7f9c")),
         listed_pod("infer-7f9c-b", gpu=GPU1, owned_by=("ReplicaSet", "infer-7f9c"))],
        {"ReplicaSet ml/infer-7f9c": (2, "Pod")},
        id="only-pods-listed-grouped-under-their-replicaset"),
    pytest.param(
        [workload("CronJob", "nightly", gpu=GPU1),
         workload("Job", "nightly-2901", gpu=GPU1, owned_by=("CronJob", "nightly")),
         listed_pod("nightly-2901-x", gpu=GPU1, owned_by=("Job", "nightly-2901"))],
        {"CronJob ml/nightly": (1, "CronJob")}, id="job-pods-under-the-cronjob"),
    pytest.param(
        [workload("Job", "train", gpu=GPU1), listed_pod("train-x", gpu=GPU1, owned_by=("Job", "train"))],
        {"Job ml/train": (1, "Job")}, id="job-pods-under-the-job"),
    pytest.param(
        [workload("StatefulSet", "llm", gpu=GPU1),
         listed_pod("llm-0", gpu=GPU1, owned_by=("StatefulSet", "llm")),
         listed_pod("llm-1", gpu=GPU1, owned_by=("StatefulSet", "llm"))],
        {"StatefulSet ml/llm": (2, "StatefulSet")}, id="statefulset"),
    pytest.param(
        [listed_pod("head-x", gpu=GPU1, owned_by=("RayCluster", "ray")),
         listed_pod("head-y", gpu=GPU1, owned_by=("RayCluster", "ray"))],
        {"RayCluster ml/ray": (2, "Pod")}, id="operator-owned-pods-under-their-owner"),
    pytest.param(
        [listed_pod("debug", gpu=GPU1), listed_pod("static-gpu-1", gpu=GPU1, owned_by=("Node", "gpu-1"))],
        {"Pod ml/debug": (1, "Pod"), "Pod ml/static-gpu-1": (1, "Pod")},
        id="bare-and-static-pods-are-their-own"),
    pytest.param(
        [workload("Deployment", "idle", gpu=GPU1)], {"Deployment ml/idle": (0, "Deployment")},
        id="workload-without-pods"),
    pytest.param(
        [workload("Deployment", "a", "team-a", gpu=GPU1), workload("Deployment", "a", "team-b",
                                                                  gpu=GPU1)],
        {"Deployment team-a/a": (0, "Deployment"), "Deployment team-b/a": (0, "Deployment")},
        id="same-name-other-namespace"),
]  # fmt: skip


@pytest.mark.parametrize(("objects", "expected"), CASES)
def test_grouping(objects: list[dict[str, Any]], expected: dict[str, tuple[int, str]]) -> None:
    assert groups(*objects) == expected


def test_an_owner_is_found_by_name_when_the_dump_lost_uids() -> None:
    replicaset = workload("ReplicaSet", "infer-7f9c", gpu=GPU1, owned_by=("Deployment", "infer"))
    pod = listed_pod("infer-7f9c-a", gpu=GPU1, owned_by=("ReplicaSet", "infer-7f9c"))
    del replicaset["metadata"]["uid"], pod["metadata"]["ownerReferences"][0]["uid"]
    assert groups(replicaset, pod) == {"Deployment ml/infer": (1, "ReplicaSet")}


def test_an_ownership_cycle_in_bad_input_ends() -> None:
    first = workload("ReplicaSet", "a", gpu=GPU1, owned_by=("ReplicaSet", "b"))
    second = workload("ReplicaSet", "b", gpu=GPU1, owned_by=("ReplicaSet", "a"))
    assert len(groups(first, second)) <= 2


def test_an_unlisted_owners_pods_are_judged_on_the_oldest() -> None:
    collector = Collector()
    collector.add_all(
        [
            listed_pod(
                "new", gpu=GPU1, owned_by=("RayCluster", "ray"), created="2025-07-01T00:00:00Z"
            ),
            listed_pod(
                "old", gpu=GPU1, owned_by=("RayCluster", "ray"), created="2025-06-01T00:00:00Z"
            ),
        ]
    )
    (group,) = collector.groups()
    assert group.judged is not None and group.judged["metadata"]["name"] == "old"
    assert [p["metadata"]["name"] for p in group.pods] == ["old", "new"]
