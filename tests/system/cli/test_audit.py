"""``gpu-policy audit`` on the dumps in examples/audit, run as a user runs it."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.core.audit.crd_schema import errors
from tests.system.cli.conftest import CLUSTERS, ROOT, gpu_policy

DUMPS = ROOT / "examples" / "audit"
# (objects dump, cluster of nodes and policy, the dump's clock from its header)
BEFORE = ("seed003-before", "seed003-before", "2025-07-14T08:18:53Z")
AFTER = ("seed003-after", "seed003-l20-t4", "2025-07-14T09:00:00Z")


def dump_args(dump: str, cluster: str, now: str) -> list[str]:
    return [
        "audit",
        "--nodes",
        str(CLUSTERS / cluster / "nodes.yaml"),
        "--objects",
        str(DUMPS / dump / "objects.yaml"),
        "--policy",
        str(CLUSTERS / cluster / "policy.yaml"),
        "--now",
        now,
    ]


def test_before_names_the_holders_the_slots_the_wait_and_plan() -> None:
    done = gpu_policy(*dump_args(*BEFORE), "--colour", "never", process=True)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert out.splitlines()[1].split()[:4] == [
        "fail",
        "gpu-pod-scheduled",
        "nlp",
        "Deployment/nlp-inference",
    ]
    flat = " ".join(out.split())
    assert "nlp/nlp-inference-7f9c6d8b54-q7x2m" in flat
    assert "pii/pii-detection-5b8d9f7c6-k2w9r" in flat
    assert "2 of 2 slots" in flat
    assert "29d 5h" in flat
    assert "`gpu-policy plan" in flat
    assert 'scheduler: "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."' in flat
    assert done.stderr == ""


def test_after_the_replicas_fit() -> None:
    done = gpu_policy(*dump_args(*AFTER))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 fail" in done.stdout
    assert "gpu-pod-scheduled" not in done.stdout


@pytest.mark.parametrize(("case", "status"), [(BEFORE, 1), (AFTER, 0)], ids=["before", "after"])
def test_json_parses_and_carries_the_exit_status(case: tuple[str, str, str], status: int) -> None:
    done = gpu_policy(*dump_args(*case), "-o", "json")
    assert done.returncode == status
    doc = json.loads(done.stdout)
    assert doc["exitStatus"] == status
    assert doc["time"] == case[2]
    assert doc["pods"]["gpu"] == 4


@pytest.mark.parametrize("output", ["yaml"], ids=["yaml"])
def test_yaml_is_the_json_document(output: str) -> None:
    as_yaml = yaml.safe_load(gpu_policy(*dump_args(*BEFORE), "-o", output).stdout)
    as_json = json.loads(gpu_policy(*dump_args(*BEFORE), "-o", "json").stdout)
    assert as_yaml == as_json


@pytest.mark.parametrize(
    ("api", "kinds"),
    [
        ("wgpolicyk8s", {"ClusterPolicyReport", "PolicyReport"}),
        ("openreports", {"ClusterReport", "Report"}),
    ],
    ids=["wgpolicyk8s", "openreports"],
)
def test_reports_validate_against_the_crds(api: str, kinds: set[str]) -> None:
    done = gpu_policy(*dump_args(*BEFORE), "-o", "reports", "--report-api", api)
    assert done.returncode == 1, done.stderr
    found = [d for d in yaml.safe_load_all(done.stdout) if d is not None]
    assert {d["kind"] for d in found} == kinds
    assert {d["metadata"].get("namespace") for d in found} == {None, "nlp", "pii"}
    for report in found:
        assert errors(report) == [], report["metadata"]
    failed = [r for d in found for r in d["results"] if r["result"] == "fail"]
    assert [r["rule"] for r in failed] == ["gpu-pod-scheduled"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["audit"], "give --kubeconfig FILE, or --nodes FILE with --objects FILE..."),
        (
            ["audit", "--nodes", "x.yaml"],
            "give --kubeconfig FILE, or --nodes FILE with --objects FILE...",
        ),
        (["audit", "--context", "prod", "--nodes", "a", "--objects", "b"], "--context needs"),
        (
            ["audit", "--kubeconfig", "k", "--nodes", "a", "--objects", "b"],
            "give --kubeconfig or --nodes/--objects, not both",
        ),
        (
            [*dump_args(*BEFORE)[:-1], "yesterday"],
            "--now 'yesterday' is not an RFC 3339 time",
        ),
        (
            [*dump_args(*BEFORE)[:2], "missing-nodes.yaml", *dump_args(*BEFORE)[3:]],
            "missing-nodes.yaml",
        ),
        (
            ["audit", "--kubeconfig", "/nonexistent/kubeconfig"],
            "kubeconfig not found: /nonexistent/kubeconfig",
        ),
    ],
    ids=[
        "nothing",
        "nodes-alone",
        "context-alone",
        "both",
        "bad-now",
        "missing-file",
        "no-kubeconfig",
    ],
)
def test_usage_and_file_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    done = gpu_policy(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pod_waiting_for_its_claims_on_the_dra_cluster(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The node dump carries the DeviceClasses and ResourceSlices; the objects dump a pod, its
    template and the claim made from it."""
    objects = tmp_path / "objects.yaml"
    objects.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "nine", "namespace": "ml"},
                    "spec": {
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "gpu",
                                        "exactly": {
                                            "deviceClassName": "gpu.nvidia.com",
                                            "count": 9,
                                        },
                                    }
                                ]
                            }
                        }
                    },
                },
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": "train",
                        "namespace": "ml",
                        "uid": "u-1",
                        "creationTimestamp": "2025-07-14T08:00:00Z",
                    },
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "x",
                                "resources": {"claims": [{"name": "gpu"}]},
                            }
                        ],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "nine"}],
                    },
                    "status": {"phase": "Pending"},
                },
            ]
        )
    )
    done = gpu_policy(
        "audit",
        "--nodes",
        str(CLUSTERS / "dra-a100" / "nodes.yaml"),
        "--objects",
        str(objects),
        "--policy",
        str(CLUSTERS / "dra-a100" / "policy.yaml"),
        "--now",
        "2025-07-14T09:00:00Z",
        "-o",
        "json",
    )
    assert done.returncode == 1, done.stderr
    (stuck,) = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "gpu-pod-scheduled"]
    assert stuck["reasons"] == ["claim-unsatisfiable"]
    assert "no node has more than 8 matching devices (8 on node dgx-a100-01" in stuck["message"]
