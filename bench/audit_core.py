"""Benchmark: the pure audit of a 5,000-node, 100,000-pod cluster, in one process.

What ``gpu-policy audit`` does after each page of a paged listing arrives, without the API
server: the pages are made here as JSON text (realistic objects: managedFields, env, probes,
statuses; 10 % of the pods ask for a GPU, 5 % of those wait), then decoded page by page, as the
client decodes a response, and handed to ``Collector.add_all``; then ``audit()`` judges every GPU
workload once, explains every waiting pod, and the text and the reports are rendered.

Each variant runs in a fresh process, so that peak RSS is its own:

* ``generate``: making the pages' JSON text only (the benchmark's own cost);
* ``decode``: that, and ``orjson.loads`` of every page: the baseline, what reading the
  same pages costs without judging them;
* ``audit``: that, and trimming, grouping, judging, diagnosing and rendering.

    .venv/bin/python -m bench.audit_core                  # 5,000 nodes, 100,000 pods
    .venv/bin/python -m bench.audit_core --pods 20000     # smaller

Figures to read, not assertions; the issue's target for the whole command (listing from the API
server included) is under 30 s on one core and under 400 MB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = ("generate", "decode", "audit")
NOW = datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC)
# What each node kind of tests.objects.cluster() advertises (by i % 10), and what its
# pods ask for.
RESOURCES = ["nvidia.com/gpu"] * 8 + ["nvidia.com/mig-1g.5gb", "nvidia.com/gpu.shared"]
MANAGED = [
    {
        "manager": m,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2025-06-15T02:37:12Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {f"f:f{i}": {} for i in range(30)}},
    }
    for m in ("kube-controller-manager", "kubelet")
]


def _container(gpu: str | None) -> dict[str, Any]:
    limits = {"cpu": "2", "memory": "8Gi"}
    if gpu:
        limits[gpu] = "1"
    return {
        "name": "main",
        "image": "registry.example.com/team/app:1.4.2",
        "args": ["--port=8080", "--log-level=info"],
        "env": [{"name": f"VAR_{i}", "value": "v" * 24} for i in range(12)],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }


def _pod_spec(gpu: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            _container(gpu),
            {"name": "proxy", "image": "envoy:1.30", "resources": {"requests": {"cpu": "100m"}}},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    }
    if gpu:
        spec["tolerations"].append({"key": "nvidia.com/gpu", "operator": "Exists"})
    return spec


def _templates() -> dict[str, str]:
    """JSON text per object shape, with @NAME@-style holes filled per object (fast)."""
    meta = {
        "name": "@NAME@",
        "namespace": "@NS@",
        "uid": "@UID@",
        "creationTimestamp": "2025-06-15T02:37:12Z",
        "labels": {"app": "@APP@"},
        "managedFields": MANAGED,
    }
    owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "@OKIND@",
            "name": "@OWNER@",
            "uid": "@OUID@",
            "controller": True,
        }
    ]
    out = {}
    for gpu_key, gpu in (("gpu", "@RES@"), ("cpu", None)):
        spec = _pod_spec(gpu)
        bound = {**spec, "nodeName": "@NODE@"}
        running = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "172.16.0.1",
            "conditions": [
                {"type": t, "status": "True"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example.com/team/app:1.4.2",
                    "state": {"running": {"startedAt": "2025-06-15T02:37:20Z"}},
                }
            ],
        }
        pending = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/5000 nodes are available: 5000 Insufficient @RES@.",
                }
            ],
        }
        pod_meta = {**meta, "ownerReferences": owner}
        out[f"pod-{gpu_key}-bound"] = json.dumps(
            {"metadata": pod_meta, "spec": bound, "status": running}
        )
        out[f"pod-{gpu_key}-pending"] = json.dumps(
            {"metadata": pod_meta, "spec": spec, "status": pending}
        )
        template = {"metadata": {"labels": {"app": "@APP@"}}, "spec": spec}
        out[f"deploy-{gpu_key}"] = json.dumps(
            {
                "metadata": meta,
                "spec": {
                    "replicas": 10,
                    "selector": {"matchLabels": {"app": "@APP@"}},
                    "template": template,
                },
            }
        )
        out[f"rs-{gpu_key}"] = json.dumps(
            {
                "metadata": {**meta, "ownerReferences": owner},
                "spec": {"replicas": 10, "template": template},
            }
        )
    return out


def _fill(template: str, **holes: str) -> str:
    for key, value in holes.items():
        template = template.replace(f"@{key}@", value)
    return template


def pages(nodes: int, pods: int, page: int, gpu_share: float) -> Iterator[tuple[str, bytes]]:
    """(kind, one page of a list response as JSON) for Deployments, ReplicaSets, Pods."""
    tpl = _templates()
    deployments = pods // 10
    gpu_every = round(1 / gpu_share)

    def chunked(kind: str, items: Iterator[str]) -> Iterator[tuple[str, bytes]]:
        batch: list[str] = []
        for item in items:
            batch.append(item)
            if len(batch) == page:
                yield kind, f'{{"kind":"{kind}List","items":[{",".join(batch)}]}}'.encode()
                batch = []
        if batch:
            yield kind, f'{{"kind":"{kind}List","items":[{",".join(batch)}]}}'.encode()

    def holes(d: int) -> dict[str, str]:
        app = f"app-{d:05d}"
        return {"NS": f"team-{d % 50:02d}", "APP": app, "RES": RESOURCES[d % 10]}

    def workloads(kind: str) -> Iterator[str]:
        for d in range(deployments):
            h = holes(d)
            gpu = "gpu" if d % gpu_every == 0 else "cpu"
            if kind == "Deployment":
                yield _fill(tpl[f"deploy-{gpu}"], NAME=h["APP"], UID=f"d-{d}", **h)
            else:
                yield _fill(
                    tpl[f"rs-{gpu}"],
                    NAME=f"{h['APP']}-7f9c",
                    UID=f"r-{d}",
                    OKIND="Deployment",
                    OWNER=h["APP"],
                    OUID=f"d-{d}",
                    **h,
                )

    def all_pods() -> Iterator[str]:
        for d in range(deployments):
            h = holes(d)
            gpu = d % gpu_every == 0
            for j in range(10):
                n = d * 10 + j
                # Pods land on nodes of the kind that offers their resource (i % 10 == d % 10).
                node = f"gpu-{(d % 10) + 10 * (n % (nodes // 10)):05d}"
                waiting = gpu and n % 20 == 0  # 5 % of GPU pods wait
                shape = f"pod-{'gpu' if gpu else 'cpu'}-{'pending' if waiting else 'bound'}"
                yield _fill(
                    tpl[shape],
                    NAME=f"{h['APP']}-7f9c-{j:05d}",
                    UID=f"p-{n}",
                    OKIND="ReplicaSet",
                    OWNER=f"{h['APP']}-7f9c",
                    OUID=f"r-{d}",
                    NODE=node,
                    **h,
                )

    yield from chunked("Deployment", workloads("Deployment"))
    yield from chunked("ReplicaSet", workloads("ReplicaSet"))
    yield from chunked("Pod", all_pods())


def node_pages(nodes: int, page: int) -> Iterator[bytes]:
    """Nodes as tests.objects.cluster() makes them (about 8 KB each), as list pages.

    One JSON text per node kind, names filled in per node: the benchmark holds one page.
    """
    from tests.objects import cluster

    kinds = [orjson.dumps(n).decode().replace(n["metadata"]["name"], "@NODE@") for n in cluster(10)]
    for start in range(0, nodes, page):
        items = [
            _fill(kinds[i % 10], NODE=f"gpu-{i:05d}")
            for i in range(start, min(nodes, start + page))
        ]
        yield f'{{"kind":"NodeList","items":[{",".join(items)}]}}'.encode()


def run_variant(variant: str, nodes: int, pods: int, page: int, gpu_share: float) -> dict[str, Any]:
    """One variant, in this process: its wall and CPU seconds and the process's peak RSS."""
    from webhook.audit import Collector, audit, reports, text
    from webhook.files import load_policy
    from webhook.kube.trim import trim_node

    policy = load_policy(None)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    collector = Collector()
    kept_nodes = []
    objects = 0
    for raw in node_pages(nodes, page):
        if variant == "generate":
            continue
        items = orjson.loads(raw)["items"]
        if variant == "audit":
            kept_nodes += [trim_node(n) for n in items]
    for kind, raw in pages(nodes, pods, page, gpu_share):
        if variant == "generate":
            continue
        items = orjson.loads(raw)["items"]
        objects += len(items)
        if variant == "audit":
            collector.add_all(items, kind=kind)
    out: dict[str, Any] = {"variant": variant}
    if variant == "audit":
        listed = time.perf_counter()
        result = audit(collector, kept_nodes, policy=policy, now=NOW)
        judged = time.perf_counter()
        rendered = text(result)
        written = reports(result)
        out.update(
            judge_s=round(judged - listed, 2),
            render_s=round(time.perf_counter() - judged, 2),
            gpu_pods=result.gpu_pods,
            waiting=result.waiting,
            workloads=result.workloads,
            findings=len(result.findings),
            reports=len(written),
            text_lines=rendered.count("\n"),
            fail=result.summary()["fail"],
        )
    out.update(
        objects=objects,
        wall_s=round(time.perf_counter() - wall0, 2),
        cpu_s=round(time.process_time() - cpu0, 2),
        rss_peak_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--gpu-share", type=float, default=0.1)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(
            json.dumps(run_variant(args.variant, args.nodes, args.pods, args.page, args.gpu_share))
        )
        return
    print(
        f"{args.nodes:,} nodes, {args.pods:,} pods ({args.gpu_share:.0%} GPU), pages of {args.page}"
    )
    rows = []
    for variant in VARIANTS:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.audit_core",
                "--variant",
                variant,
                "--nodes",
                str(args.nodes),
                "--pods",
                str(args.pods),
                "--page",
                str(args.page),
                "--gpu-share",
                str(args.gpu_share),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,  # `-m bench.audit_core` finds the package from the repository's root
        )
        rows.append(json.loads(proc.stdout))
    print(f"{'variant':10} {'wall s':>7} {'cpu s':>7} {'peak RSS MiB':>13}")
    for row in rows:
        print(
            f"{row['variant']:10} {row['wall_s']:7.2f} {row['cpu_s']:7.2f} "
            f"{row['rss_peak_mib']:13.1f}"
        )
    base, full = rows[1], rows[2]
    print(
        f"\naudit over the decode baseline: +{full['cpu_s'] - base['cpu_s']:.2f} s CPU, "
        f"+{full['rss_peak_mib'] - base['rss_peak_mib']:.1f} MiB peak RSS "
        f"(judge {full['judge_s']} s, render {full['render_s']} s)"
    )
    print(
        f"{full['objects']:,} objects read; {full['gpu_pods']:,} GPU pods in {full['workloads']:,} "
        f"workloads, {full['waiting']:,} waiting; {full['findings']:,} findings "
        f"({full['fail']:,} fail), {full['reports']} reports, {full['text_lines']:,} text lines"
    )


if __name__ == "__main__":
    main()
