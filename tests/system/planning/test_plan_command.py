"""``gpu-policy plan`` end to end: the CLI, the files it writes, the round trip and idempotence."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.cli import run_cli
from tests.support.paths import REPO
from webhook.files import load_policy, nodes_from_text
from webhook.policy import inventory_from_nodes, review
from webhook.policy.plugin_config import parse_plugin_configmap
from webhook.policy.products import base_model, product_value
from webhook.policy.resources import ResourceForm, parse_resource

ROOT = REPO
CLUSTERS = ROOT / "examples" / "clusters"
BEFORE = CLUSTERS / "seed003-before"
MEASURE = ("--measure", "NVIDIA-L20=4621Mi", "--measure", "Tesla-T4=4401Mi")
FILES = ("device-plugin-config.yaml", "label-nodes.sh", "policy.yaml")


def plan(*args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    return run_cli("plan", *args, process=process)


def rolled_out(nodes: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """The nodes after applying the written files: labels, plugin restart, GFD relabelling."""
    policy = load_policy(out / "policy.yaml")
    nodes = copy.deepcopy(nodes)
    for line in (out / "label-nodes.sh").read_text().splitlines():
        if line.startswith("kubectl label node"):
            words = shlex.split(line)
            name, (key, value) = words[3], words[4].split("=", 1)
            node = next(n for n in nodes if n["metadata"]["name"] == name)
            node["metadata"]["labels"][key] = value
    for node in nodes:
        labels = node["metadata"]["labels"]
        config = policy.config_for(labels.get(policy.node_label))
        assert config is not None
        for section in ("allocatable", "capacity"):
            res = node["status"][section]
            for name in [k for k in res if parse_resource(k) is not None]:
                form = parse_resource(name)
                assert form is not None
                original = form.original
                count = int(labels[f"{original}.count"])
                replicas = config.replicas(form)
                renamed = config.rename_by_default and replicas > 1
                del res[name]
                res[form.with_renamed(renamed).name] = str(count * replicas)
                model = base_model(labels[f"{original}.product"])
                labels[f"{original}.product"] = product_value(
                    model, ResourceForm(form.profile, False), replicas=replicas, renamed=renamed
                )
                labels[f"{original}.replicas"] = str(replicas)
                labels[f"{original}.sharing-strategy"] = "time-slicing" if replicas > 1 else "none"
    return nodes


def seed003_nodes() -> list[dict[str, Any]]:
    path = BEFORE / "nodes.yaml"
    return nodes_from_text(path.read_text(), source=str(path))


def test_cli_seed_003_table_and_files(tmp_path: Path) -> None:
    result = plan(
        "--nodes", str(BEFORE / "nodes.yaml"), "--policy", str(BEFORE / "policy.yaml"),
        *MEASURE, "--write-dir", str(tmp_path), process=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "GPU slots: 2 (NVIDIA-L20 x 1 + Tesla-T4 x 1)" in out
    assert "GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)" in out
    assert "GPU slots: 2 -> 11" in out
    l20 = next(line for line in out.splitlines() if line.startswith("NVIDIA-L20  "))
    t4 = next(line for line in out.splitlines() if line.startswith("Tesla-T4  "))
    # MIB/GPU, MEASURED, REPLICAS, SLOTS, MIB/SLOT, HEADROOM/SLOT, USE AT FULL SLOTS
    assert l20.split()[-12:] == [
        "46068",
        "4621",
        "1",
        "->",
        "8",
        "1",
        "->",
        "8",
        "5758",
        "1137",
        "80.2",
        "%",
    ]
    assert t4.split()[-12:] == [
        "15360",
        "4401",
        "1",
        "->",
        "3",
        "1",
        "->",
        "3",
        "5120",
        "719",
        "86.0",
        "%",
    ]
    assert "warning:" not in out
    for name in FILES:
        assert (tmp_path / name).is_file()
    script = (tmp_path / "label-nodes.sh").read_text()
    assert (
        "kubectl label node 10.0.2.11 nvidia.com/device-plugin.config=nvidia-l20 --overwrite"
        in script
    )
    assert (
        "kubectl label node 10.0.2.12 nvidia.com/device-plugin.config=tesla-t4 --overwrite"
        in script
    )
    cm = yaml.safe_load((tmp_path / "device-plugin-config.yaml").read_text())
    assert list(cm["data"]) == ["any", "nvidia-l20", "tesla-t4"]
    # The existing key is kept verbatim (with the flags the plugin ran with).
    original = yaml.safe_load((BEFORE / "device-plugin-config.yaml").read_text())
    assert cm["data"]["any"] == original["data"]["any"]
    configs = parse_plugin_configmap(cm, source="written")
    assert [configs[k].resources[0].replicas for k in ("nvidia-l20", "tesla-t4")] == [8, 3]
    assert all(configs[k].fail_requests_greater_than_one for k in ("nvidia-l20", "tesla-t4"))
    assert not configs["nvidia-l20"].rename_by_default


def test_cli_json_and_measurements_file() -> None:
    result = plan(
        "--nodes", str(BEFORE / "nodes.yaml"), "--policy", str(BEFORE / "policy.yaml"),
        "--measurements", str(ROOT / "examples" / "plan" / "measurements.yaml"), "-o", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["slots"] == {"before": 2, "after": 11}
    assert [r["replicas_after"] for r in doc["sizing"]] == [8, 3]
    assert [r["workload"] for r in doc["sizing"]] == ["nlp-inference", "nlp-inference"]
    assert [r["slots"] for r in doc["after"]] == [8, 3]


def test_cli_errors_exit_2() -> None:
    result = plan("--nodes", str(BEFORE / "nodes.yaml"), "--policy", str(BEFORE / "policy.yaml"))
    assert result.returncode == 2
    assert "--measure" in result.stdout + result.stderr
    done = plan(
        "--nodes", str(BEFORE / "nodes.yaml"), "--measure", "NVIDIA-L20=lots",
    )  # fmt: skip
    assert done.returncode == 2


def test_round_trip_review_on_the_planned_layout(tmp_path: Path) -> None:
    done = plan(
        "--nodes", str(BEFORE / "nodes.yaml"), "--policy", str(BEFORE / "policy.yaml"),
        *MEASURE, "--write-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0
    policy = load_policy(tmp_path / "policy.yaml")
    assert set(policy.configs) == {"any", "nvidia-l20", "tesla-t4"}
    inventory = inventory_from_nodes(rolled_out(seed003_nodes(), tmp_path), policy, source="t")
    assert inventory.disagreements == ()
    assert sorted((o.product, o.slots) for _, o in inventory.pairs) == [
        ("NVIDIA-L20-SHARED", 8),
        ("Tesla-T4-SHARED", 3),
    ]

    def pod(n: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"infer-{n}", "namespace": "ml"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "vllm",
                        "resources": {"limits": {"nvidia.com/gpu": n}},
                    }
                ]
            },
        }

    one = review(pod(1), policy=policy, inventory=inventory, namespace="ml")
    assert one.allowed, one.denial
    two = review(pod(2), policy=policy, inventory=inventory, namespace="ml")
    assert not two.allowed
    assert "gpu-shared-request-above-one" in two.failed


def test_plan_on_its_own_output_changes_nothing(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    done = plan(
        "--nodes", str(BEFORE / "nodes.yaml"), "--policy", str(BEFORE / "policy.yaml"),
        *MEASURE, "--write-dir", str(first),
    )  # fmt: skip
    assert done.returncode == 0
    nodes_after = tmp_path / "nodes-after.yaml"
    nodes_after.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": rolled_out(seed003_nodes(), first)}
        )
    )
    done = plan(
        "--nodes", str(nodes_after), "--policy", str(first / "policy.yaml"),
        *MEASURE, "--write-dir", str(second),
    )  # fmt: skip
    code, out2 = done.returncode, done.stdout
    assert code == 0
    assert "8 -> 8" in out2 and "3 -> 3" in out2 and "GPU slots: 11 -> 11" in out2
    for name in FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_mixed_mig_round_trip_is_stable(tmp_path: Path) -> None:
    seed001 = CLUSTERS / "seed001-a100-t4"
    measure = ("--measure", "NVIDIA-A100-SXM4-40GB=4000Mi", "--measure", "Tesla-T4=4401Mi")
    first, second = tmp_path / "first", tmp_path / "second"
    done = plan(
        "--nodes", str(seed001 / "nodes.yaml"), "--policy", str(seed001 / "policy.yaml"),
        *measure, "--write-dir", str(first),
    )  # fmt: skip
    code, out = done.returncode, done.stdout
    assert code == 0
    assert "[mig-profile-fits]" in out and "MIG profile 1g.5gb" in out
    nodes = nodes_from_text((seed001 / "nodes.yaml").read_text(), source="seed001")
    after = rolled_out(nodes, first)
    a100 = next(n for n in after if n["metadata"]["name"] == "gpu-a100-0")
    assert a100["status"]["allocatable"]["nvidia.com/mig-3g.20gb"] == "4"
    assert a100["status"]["allocatable"]["nvidia.com/mig-1g.5gb"] == "2"  # unshared now
    nodes_after = tmp_path / "nodes-after.yaml"
    nodes_after.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": after}))
    done = plan(
        "--nodes", str(nodes_after), "--policy", str(first / "policy.yaml"),
        *measure, "--write-dir", str(second),
    )  # fmt: skip
    assert done.returncode == 0
    for name in FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
