"""The text table and the JSON document."""

from __future__ import annotations

import json

from tests.core.audit.conftest import Runner
from tests.objects import gfd_node, listed_pod
from webhook.audit import document, table_rows, text
from webhook.audit.output import PLACEMENTS_SHOWN, WIDTH

GPU1 = {"nvidia.com/gpu": 1}


def test_rows_most_severe_first_then_oldest(run: Runner) -> None:
    objects = [
        listed_pod("recent", gpu=GPU1, created="2025-07-10T00:00:00Z"),
        listed_pod("ancient", gpu=GPU1, created="2025-05-01T00:00:00Z"),
        listed_pod("holder", gpu=GPU1, node="gpu-1", created="2025-04-01T00:00:00Z"),
    ]
    rows = table_rows(run(objects, [gfd_node("gpu-1")]))
    assert [(r.result, r.object, r.waiting) for r in rows] == [
        ("fail", "Pod/ancient", "74d 8h"),
        ("fail", "Pod/recent", "4d 8h"),
        ("warn", "Node/gpu-1", "-"),
    ]


def test_text_wraps_messages_and_paints_only_the_result(run: Runner) -> None:
    objects = [listed_pod("waiting", gpu=GPU1), listed_pod("holder", gpu=GPU1, node="gpu-1")]
    out = text(run(objects, [gfd_node("gpu-1")]), paint=lambda result, cell: f"<{result}>{cell}</>")
    lines = out.splitlines()
    assert lines[1].startswith("<fail>fail</>    gpu-pod-scheduled  ml ")
    assert all(len(line) <= WIDTH for line in lines if line.startswith("  "))
    assert "ml/holder (1 slot, since 2025-06-15)" in " ".join(line.strip() for line in lines)


def test_a_clean_cluster_says_so_and_lists_its_gpu_pods(run: Runner) -> None:
    out = text(run([listed_pod("ok", gpu=GPU1, node="gpu-1")], [gfd_node("gpu-1", gpus=2)]))
    assert out.splitlines()[0] == "no findings: every GPU workload and node passes"
    row = next(line for line in out.splitlines() if "Pod/ok" in line)
    assert row.split() == ["ml", "Pod/ok", "1", "nvidia.com/gpu:", "1", "gpu-1", "(1)", "0", "0"]
    assert "0 fail, 0 error, 0 warn, 0 skip, 15 pass; 1 GPU workload, 1 GPU pod (1 bound" in out


def test_the_gpu_pods_table_is_capped(run: Runner) -> None:
    pods = [listed_pod(f"p{i:02d}", gpu=GPU1, node="gpu-1") for i in range(PLACEMENTS_SHOWN + 3)]
    out = text(run(pods, [gfd_node("gpu-1", gpus=32)]))
    assert "and 3 more GPU workloads (-o json lists them all)" in out


def test_the_json_document_is_json(run: Runner) -> None:
    result = run([listed_pod("w", gpu=GPU1)], [gfd_node("gpu-1", taints=[
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}])])  # fmt: skip
    doc = json.loads(json.dumps(document(result)))
    # The engine says the pod could never run (the allocator: a taint it does not tolerate),
    # the audit why it waits.
    assert [f["rule"] for f in doc["findings"]] == ["gpu-node-selection", "gpu-pod-scheduled"]
    assert "nvidia.com/gpu:NoSchedule" in doc["findings"][0]["message"]
    assert doc["findings"][1]["reasons"] == ["taints"]
    everything = document(result, include_pass=True)["findings"]
    assert len(everything) == len(result.findings) > len(doc["findings"])
