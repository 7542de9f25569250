"""GPU isolation's cost on the example clusters: reviews that reach the webhook, and latency.

For each example cluster (``examples/clusters/<name>``: policy, node dump), with the policy's
``spec.isolation.mode`` set to ``enforce``:

1. **Reviews sent.** The chart is rendered twice with the real ``helm`` (isolation off; on, with
   ``webhook.isolation.gpuNodeTaints`` printed from the cluster's nodes as ``gpu-policy
   inventory --gpu-node-taints`` prints it), and the pod webhook's ``matchConditions`` are
   evaluated (the ``cel`` library, as ``tests/system/chart/test_chart_match_conditions.py``
   does) on a fixed mix of 1,000 pod creations: 100 GPU pods, 40 pods of agents with a catch-all
   toleration (one DaemonSet pod per node and agent), 30 pods that tolerate ``nvidia.com/gpu``
   without a GPU request, 10 in ``gpu-operator`` tolerating everything, 820 plain pods. Printed:
   how many are sent with isolation off (the baseline) and on, and how many of those the webhook
   changes.
2. **Engine time.** ``review()`` over all the pods each configuration sends, in milliseconds
   per 1,000 creations (the baseline, isolation off, in the same run).
3. **Latency of one extra call.** The webhook under gunicorn (``tests.support.gunicorn``, one
   worker, the cluster's policy and nodes), one kept-alive TLS connection as the API server
   uses: p50 / p99 of ``/mutate`` and ``/validate`` for a pod now sent (a tolerating pod that gets
   ``void``) beside those of a GPU pod (the baseline, measured in the same run, interleaved).
   Each pod newly sent costs one call to each endpoint.

    .venv/bin/python bench/isolation.py [--requests 400]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent
if __name__ == "__main__":
    # Run as a script, only bench/ is on sys.path: add the repository, for `bench.` and
    # `tests.` imports.
    sys.path.insert(0, str(_REPO))

import yaml  # noqa: E402

from bench.figures import percentile  # noqa: E402
from tests.support import gunicorn  # noqa: E402
from webhook.certs.issue import write_certs  # noqa: E402
from webhook.cli.inventory import gpu_node_taints  # noqa: E402
from webhook.files import load_inventory, load_policy  # noqa: E402
from webhook.harness.admission_review import build_review  # noqa: E402
from webhook.policy import review  # noqa: E402
from webhook.policy.model import Isolation  # noqa: E402

CLUSTERS = _REPO / "examples" / "clusters"
CHART = _REPO / "charts" / "gpu-policy-webhook"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _pod(name: str, namespace: str, *, gpu: bool = False, **spec: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if gpu:
        limits["nvidia.com/gpu"] = 1
    container = {
        "name": "main",
        "image": "registry.example/app:1",
        "env": [{"name": f"VAR_{i}", "value": "x" * 20} for i in range(4)],
        "resources": {"limits": limits, "requests": dict(limits)},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container], **spec},
    }


def population(nodes: list[str]) -> list[dict[str, Any]]:
    """The fixed mix of 1,000 pod creations (module docstring)."""
    pods = [_pod(f"train-{i}", "ml", gpu=True, tolerations=TOLERATE_GPU) for i in range(100)]
    agents = [
        _pod(
            f"agent-{i}",
            "monitoring",
            tolerations=[{"operator": "Exists"}],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [nodes[i % len(nodes)]],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        )
        for i in range(40)
    ]
    tolerating = [_pod(f"prep-{i}", "ml", tolerations=TOLERATE_GPU) for i in range(30)]
    operator = [
        _pod(f"op-{i}", "gpu-operator", tolerations=[{"operator": "Exists"}]) for i in range(10)
    ]
    plain = [_pod(f"web-{i}", "web") for i in range(820)]
    return pods + agents + tolerating + operator + plain


def _helm() -> str:
    found = shutil.which("helm") or str(_REPO / ".cache" / "tools" / "helm")
    if not Path(found).is_file():
        sys.exit("bench/isolation.py: helm not found (run `make tools`)")
    return found


def pod_conditions(helm: str, taints: list[Any] | None) -> list[str]:
    """The pod mutating webhook's matchConditions, rendered with isolation on (``taints``)."""
    args = [helm, "template", "t", str(CHART), "--namespace", "gpu-policy"]
    if taints is not None:
        args += ["--set", "policy.spec.isolation.mode=enforce"]
        args += ["--set-json", f"webhook.isolation.gpuNodeTaints={json.dumps(taints)}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    for doc in yaml.safe_load_all(out):
        if doc and doc.get("kind") == "MutatingWebhookConfiguration":
            for hook in doc["webhooks"]:
                if any("pods" in r["resources"] for r in hook["rules"]):
                    return [c["expression"] for c in hook["matchConditions"]]
    raise SystemExit("bench/isolation.py: no pod webhook in the rendered chart")


def sent(cel: Any, conditions: list[str], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the API server would send under these matchConditions."""
    out = []
    for pod in pods:
        context = {
            "object": pod,
            "oldObject": None,
            "request": {"operation": "CREATE", "namespace": pod["metadata"]["namespace"]},
        }
        if all(cel.evaluate(e, context) is True for e in conditions):
            out.append(pod)
    return out


def engine_ms(pods: list[dict[str, Any]], policy: Any, inventory: Any, rounds: int = 5) -> float:
    """Milliseconds of ``review()`` over all of ``pods`` (best of ``rounds``)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for pod in pods:
            review(pod, policy=policy, inventory=inventory)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def http_latency(
    cluster: Path, policy_file: Path, requests: int, tmp: Path
) -> dict[str, tuple[float, float]]:
    """(p50, p99) in ms per (endpoint, pod), the GPU pod and the tolerating pod interleaved."""
    certs = write_certs(tmp / "certs")
    bodies = {
        "gpu pod": _pod("train", "ml", gpu=True, tolerations=TOLERATE_GPU),
        "tolerating pod": _pod("prep", "ml", tolerations=TOLERATE_GPU),
    }
    timings: dict[str, list[float]] = {}
    with gunicorn.running(
        tmp,
        certs,
        workers=1,
        GPU_POLICY_FILE=str(policy_file),
        GPU_POLICY_NODES=str(cluster / "nodes.yaml"),
    ) as server:
        connection = server.connect()
        try:
            for i in range(requests + 20):
                for endpoint in ("/mutate", "/validate"):
                    for what, pod in bodies.items():
                        body = json.dumps(build_review(pod)).encode()
                        start = time.perf_counter()
                        connection.request(
                            "POST", endpoint, body, {"Content-Type": "application/json"}
                        )
                        answer = connection.getresponse().read()
                        took = (time.perf_counter() - start) * 1000
                        assert b'"allowed":true' in answer, answer[:200]
                        if i >= 20:  # the first calls warm the worker up
                            timings.setdefault(f"{endpoint} {what}", []).append(took)
        finally:
            connection.close()
    return {key: (statistics.median(v), percentile(sorted(v), 0.99)) for key, v in timings.items()}


def main() -> None:
    """Print the figures for every example cluster with a node dump."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400, help="HTTP calls per row")
    args = parser.parse_args()
    try:
        import cel  # a dev dependency
    except ImportError:
        sys.exit("bench/isolation.py: the common-expression-language package is not installed")
    helm = _helm()
    off = pod_conditions(helm, None)
    print(
        f"{'cluster':18} {'pods':>5} {'sent off':>8} {'sent on':>8} {'voided':>6} "
        f"{'engine ms off':>13} {'engine ms on':>12}"
    )
    latencies: dict[str, dict[str, tuple[float, float]]] = {}
    for cluster in sorted(p for p in CLUSTERS.iterdir() if (p / "nodes.yaml").is_file()):
        base = load_policy(str(cluster / "policy.yaml"))
        policy = replace(base, isolation=Isolation("enforce"))
        inventory = load_inventory(policy, str(cluster / "nodes.yaml"))
        taints = yaml.safe_load(gpu_node_taints(inventory))["webhook"]["isolation"]
        on = pod_conditions(helm, taints["gpuNodeTaints"])
        nodes = [n.name for n in inventory.gpu_nodes.nodes or ()] or ["none"]
        pods = population(nodes)
        sent_off, sent_on = sent(cel, off, pods), sent(cel, on, pods)
        decisions = [review(p, policy=policy, inventory=inventory) for p in sent_on]
        voided = sum(1 for d in decisions if any("NVIDIA_VISIBLE_DEVICES" in c for c in d.changes))
        print(
            f"{cluster.name:18} {len(pods):5} {len(sent_off):8} {len(sent_on):8} {voided:6} "
            f"{engine_ms(sent_off, base, inventory):13.1f} "
            f"{engine_ms(sent_on, policy, inventory):12.1f}"
        )
        if cluster.name == "h100-mig-single":
            with tempfile.TemporaryDirectory() as tmp:
                policy_file = Path(tmp) / "policy.yaml"
                doc = yaml.safe_load((cluster / "policy.yaml").read_text())
                doc["spec"]["devicePlugin"]["configMapFile"] = str(
                    cluster / doc["spec"]["devicePlugin"]["configMapFile"]
                )
                policy_file.write_text(yaml.safe_dump(doc))
                latencies[cluster.name] = http_latency(
                    cluster, policy_file, args.requests, Path(tmp)
                )
    for name, rows in latencies.items():
        print(f"\none call per endpoint, {name}, 1 gunicorn worker, one kept-alive TLS connection:")
        for key, (p50, p99) in sorted(rows.items()):
            print(f"  {key:28} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")


if __name__ == "__main__":
    main()
