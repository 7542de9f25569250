"""``gpu-policy review`` as a user runs it: real files, stdin, exit codes and output."""

from __future__ import annotations

import json
from pathlib import Path

import jsonpatch
import yaml

from tests.objects import IGNORED_STRATEGY

from .conftest import CLUSTERS, gpu_policy

SEED003 = CLUSTERS / "seed003-l20-t4"

POD = """
apiVersion: v1
kind: Pod
metadata: {name: infer, namespace: ml, annotations: {gpu-policy.io/product: NVIDIA-L20}}
spec:
  containers:
  - name: main
    image: vllm
    resources: {limits: {nvidia.com/gpu: 1}}
"""
GREEDY = POD.replace("infer", "greedy").replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2")
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {}\n"


def test_allowed_pod_exits_0_and_shows_the_diff() -> None:
    result = gpu_policy("review", "-", stdin=POD, process=True)  # a pipe into a process
    assert result.returncode == 0, result.stderr
    assert "ALLOWED Pod/infer -n ml" in result.stdout
    assert "+    nvidia.com/gpu.product: NVIDIA-L20-SHARED" in result.stdout
    assert "1 reviewed, 0 denied" in result.stdout


def test_denied_pod_exits_1_with_the_reason() -> None:
    result = gpu_policy(
        "review",
        "--policy",
        str(SEED003 / "policy.yaml"),
        "--nodes",
        str(SEED003 / "nodes.yaml"),
        "-",
        stdin=GREEDY,
    )
    assert result.returncode == 1
    assert "DENIED Pod/greedy" in result.stdout
    assert "gpu-shared-request-above-one" in result.stdout


def test_json_output_shape_and_patch() -> None:
    docs = "\n---\n".join([POD, GREEDY, CONFIGMAP])
    result = gpu_policy("review", "-o", "json", "-", stdin=docs)
    assert result.returncode == 1
    out = json.loads(result.stdout)
    assert [(o["kind"], o["name"], o["allowed"]) for o in out] == [
        ("Pod", "infer", True),
        ("Pod", "greedy", False),
        ("ConfigMap", "c", True),
    ]
    for key in ("results", "warnings", "patch", "mutated"):
        assert key in out[0]
    assert {"rule", "status", "message"} <= set(out[1]["results"][0])
    assert jsonpatch.apply_patch(yaml.safe_load(POD), out[0]["patch"]) == out[0]["mutated"]
    assert out[2]["results"][0]["status"] == "skip"


def test_yaml_output() -> None:
    result = gpu_policy("review", "-o", "yaml", "-", stdin=POD)
    assert yaml.safe_load(result.stdout)[0]["allowed"] is True


def test_usage_and_file_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    missing = gpu_policy("review", str(tmp_path / "nope.yaml"))
    assert (
        missing.returncode == 2
        and "cannot read" in missing.stderr
        and "Traceback" not in missing.stderr
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nspec: [unclosed\n")
    broken = gpu_policy("review", str(bad))
    assert (
        broken.returncode == 2
        and "not valid YAML" in broken.stderr
        and "Traceback" not in broken.stderr
    )
    bad_policy = gpu_policy("review", "--policy", str(bad), "-", stdin=POD)
    assert bad_policy.returncode == 2 and str(bad) in bad_policy.stderr
    assert gpu_policy("review").returncode == 2


def test_plugin_warnings_go_to_stderr_one_line_each(tmp_path: Path) -> None:
    """A config key the plugin ignores loads, and the user is told so without spoiling stdout."""
    config = tmp_path / "plugin.yaml"
    config.write_text(IGNORED_STRATEGY)
    for command in ("review", "inventory"):
        args = ("-", "-o", "json") if command == "review" else ("-o", "json")
        result = gpu_policy(command, "--policy", str(config), *args, stdin=POD)
        assert result.returncode in (0, 1), result.stderr
        json.loads(result.stdout)  # the report stays machine-readable
        (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
        assert line.startswith(f"warning: {config}: ")
        assert "strategy" in line


DRA_A100 = CLUSTERS / "dra-a100"
TEMPLATE_AND_POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: nine, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com, count: 9}
---
apiVersion: v1
kind: Pod
metadata: {name: train, namespace: ml}
spec:
  containers:
  - name: main
    image: pytorch
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: nine}
"""


def test_a_pod_is_judged_on_the_template_reviewed_beside_it() -> None:
    result = gpu_policy(
        "review",
        "--policy",
        str(DRA_A100 / "policy.yaml"),
        "--nodes",
        str(DRA_A100 / "nodes.yaml"),
        "-",
        stdin=TEMPLATE_AND_POD,
    )
    assert result.returncode == 1, result.stderr
    assert "DENIED ResourceClaimTemplate/nine -n ml" in result.stdout
    assert "DENIED Pod/train -n ml" in result.stdout
    assert (
        'claim "gpu" (ResourceClaimTemplate nine), request "gpu" asks for 9 devices'
        in result.stdout
    )
    assert "2 reviewed, 2 denied" in result.stdout
