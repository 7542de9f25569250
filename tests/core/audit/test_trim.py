"""Trimming: GPU pods and workloads keep what judging them reads, the rest is dropped."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.objects import listed_pod, workload
from webhook.audit import Collector, trim
from webhook.audit.trim import trim_pod_spec


def size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def heavy(pod: dict[str, Any]) -> dict[str, Any]:
    """The bulk a real pod carries: labels, annotations, managedFields, env, probes, statuses."""
    pod = copy.deepcopy(pod)
    meta = pod["metadata"]
    meta["labels"] = {
        "app": "infer",
        "pod-template-hash": "7f9c6d8b54",
        "team": "nlp",
        "app.kubernetes.io/version": "2.3.1",
    }
    meta["annotations"] = {
        "kubectl.kubernetes.io/restartedAt": "2025-06-15T02:37:00Z",
        "prometheus.io/scrape": "true",
        "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 1500 + "}",
        "gpu-policy.io/sharing": "shared",
    }
    meta["managedFields"] = [
        {
            "manager": m,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-15T02:37:12Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {f"f:field{i}": {} for i in range(40)}},
        }
        for m in ("kube-controller-manager", "kubelet")
    ]
    main = pod["spec"]["containers"][0]
    main["env"] = [{"name": f"VAR_{i}", "value": "v" * 30} for i in range(25)]
    main["args"] = ["--model-dir=/models/nlp", "--port=8080"]
    main["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
    main["volumeMounts"] = [{"name": f"v{i}", "mountPath": f"/mnt/v{i}"} for i in range(5)]
    pod["spec"]["volumes"] = [{"name": f"v{i}", "emptyDir": {}} for i in range(5)]
    pod["spec"]["tolerations"] = [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    pod["spec"]["affinity"] = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "x"}},
                    },
                }
            ]
        },
    }
    pod["status"]["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "sha256:" + "a" * 64,
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2025-06-15T02:37:14Z"}},
        }
        for c in pod["spec"]["containers"]
    ]
    return pod


def test_a_trimmed_pod_stays_small() -> None:
    """100,000 pods must fit: a 6 KB pod keeps well under 1 KB."""
    original = heavy(listed_pod("infer-1", gpu={"nvidia.com/gpu": 1}, node="gpu-1"))
    trimmed = trim(original)
    assert trimmed is not None
    assert size(original) > 6000
    assert size(trimmed) < 900, json.dumps(trimmed, indent=1)
    assert size(trimmed) * 10 < size(original)


def test_a_trimmed_deployment_stays_small() -> None:
    original = workload("Deployment", "infer", gpu={"nvidia.com/gpu": 1})
    original["metadata"]["managedFields"] = heavy(listed_pod("x"))["metadata"]["managedFields"]
    original["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": f"VAR_{i}", "value": "v" * 30} for i in range(25)
    ]
    trimmed = trim(original)
    assert trimmed is not None
    assert size(trimmed) < 600
    assert size(trimmed) * 5 < size(original)


def test_trim_keeps_what_judgement_reads() -> None:
    pod = heavy(
        listed_pod(
            "infer-1",
            gpu={"nvidia.com/gpu": 2},
            owned_by=("ReplicaSet", "infer-7f9c6d8b54"),
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L20"},
            scheduler="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        )
    )
    pod["spec"]["affinity"]["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
            ]
        }
    }
    trimmed = trim(pod)
    assert trimmed is not None
    meta, spec, status = trimmed["metadata"], trimmed["spec"], trimmed["status"]
    assert meta["name"] == "infer-1" and meta["namespace"] == "ml"
    assert meta["uid"] and meta["creationTimestamp"] == "2025-06-15T02:37:12Z"
    assert meta["ownerReferences"][0]["name"] == "infer-7f9c6d8b54"
    assert meta["annotations"] == {"gpu-policy.io/sharing": "shared"}
    assert "labels" not in meta and "managedFields" not in meta
    # The sidecar asks for no GPU: gone. The GPU container keeps only nvidia.com/ resources.
    assert spec["containers"] == [
        {
            "name": "main",
            "resources": {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 2}},
        }
    ]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L20"}
    assert list(spec["affinity"]) == ["nodeAffinity"]  # pod anti-affinity is not about GPUs
    assert spec["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    ]
    assert status == {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }


@pytest.mark.parametrize(
    ("pod", "kept"),
    [
        pytest.param(listed_pod("cpu-only"), False, id="no-gpu-request"),
        pytest.param(
            listed_pod("nic", gpu={"nvidia.com/hostdev": 1}, node="n"),
            False,
            id="other-nvidia-resources-are-not-gpus",
        ),
        pytest.param(
            listed_pod("typo", gpu={"nvidia.com/gpus": 1}),
            True,
            id="misspelt-gpu-name-kept-for-the-engine",
        ),
        pytest.param(
            listed_pod("done", gpu={"nvidia.com/gpu": 1}, node="n", phase="Succeeded"),
            False,
            id="succeeded-holds-nothing",
        ),
        pytest.param(
            listed_pod(
                "crashed", gpu={"nvidia.com/gpu": 1}, node="n", phase="Failed", reason="Error"
            ),
            False,
            id="failed-holds-nothing",
        ),
        pytest.param(
            listed_pod(
                "refused",
                gpu={"nvidia.com/gpu": 2},
                node="n",
                phase="Failed",
                reason="UnexpectedAdmissionError",
            ),
            True,
            id="refused-at-admission-is-reported",
        ),
        pytest.param(listed_pod("pending", gpu={"nvidia.com/gpu": 1}), True, id="pending"),
        pytest.param(
            listed_pod("running", gpu={"nvidia.com/mig-1g.10gb": 1}, node="n"), True, id="mig"
        ),
    ],
)
def test_which_pods_are_kept(pod: dict[str, Any], kept: bool) -> None:
    assert (trim(pod) is not None) is kept


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {
                "initContainers": [
                    {
                        "name": "warm",
                        "restartPolicy": "Always",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ],
                "containers": [{"name": "app"}],
            },
            {
                "initContainers": [
                    {
                        "name": "warm",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                        "restartPolicy": "Always",
                    }
                ],
                "containers": [],
            },
            id="native-sidecar-keeps-restart-policy",
        ),
        pytest.param(
            {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]},
            None,
            id="cpu-only",
        ),
        pytest.param(
            {
                "ephemeralContainers": [
                    {"name": "dbg", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                ],
                "containers": [],
            },
            None,
            id="ephemeral-containers-are-left-out",
        ),
    ],
)
def test_trim_pod_spec(spec: dict[str, Any], expected: dict[str, Any] | None) -> None:
    assert trim_pod_spec(spec) == expected


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Deployment", ("spec", "template")),
        ("ReplicaSet", ("spec", "template")),
        ("StatefulSet", ("spec", "template")),
        ("DaemonSet", ("spec", "template")),
        ("Job", ("spec", "template")),
        ("CronJob", ("spec", "jobTemplate", "spec", "template")),
    ],
)
def test_workloads_keep_their_template_where_their_kind_has_it(
    kind: str, path: tuple[str, ...]
) -> None:
    obj = workload(
        kind,
        "w",
        gpu={"nvidia.com/gpu": 1},
        annotations={"gpu-policy.io/sharing": "any", "team": "nlp"},
    )
    trimmed = trim(obj)
    assert trimmed is not None and trimmed["kind"] == kind
    node: Any = trimmed
    for step in path:
        node = node[step]
    assert node["metadata"] == {"annotations": {"gpu-policy.io/sharing": "any"}}
    assert node["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert trim(workload(kind, "cpu")) is None


def test_collector_reads_lists_and_items_without_kind() -> None:
    """A kubectl List, and the items of an API list response, which carry no kind."""
    bare = listed_pod("api-item", gpu={"nvidia.com/gpu": 1})
    del bare["kind"], bare["apiVersion"]
    dump = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            listed_pod("gpu", gpu={"nvidia.com/gpu": 1}),
            listed_pod("cpu"),
            workload("Deployment", "d", gpu={"nvidia.com/gpu": 1}),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        ],
    }
    collector = Collector()
    collector.add(dump)
    collector.add({"kind": "PodList", "items": [bare]})
    collector.add_all([listed_pod("no-kind-given", gpu={"nvidia.com/gpu": 1})])
    assert sorted(p["metadata"]["name"] for p in collector.pods) == [
        "api-item",
        "gpu",
        "no-kind-given",
    ]
    assert [w["metadata"]["name"] for w in collector.workloads] == ["d"]
    assert collector.scanned == {"Pod": 4, "Deployment": 1, "ConfigMap": 1}


def test_repeated_strings_are_shared() -> None:
    """Thousands of pods on one node share one copy of its name and of their namespace."""
    first = trim(listed_pod("a" * 3, gpu={"nvidia.com/gpu": 1}, node="gpu-node-" + "1"))
    second = trim(listed_pod("b" * 3, gpu={"nvidia.com/gpu": 1}, node="gpu-node-" + str(1)))
    assert first is not None and second is not None
    assert first["spec"]["nodeName"] is second["spec"]["nodeName"]
