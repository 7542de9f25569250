"""GPU budgets on the real control plane: the API server's ResourceQuota is the ledger.

Four GPU nodes, one of each way to get a GPU (whole GPUs, time-sliced replicas, MIG slices,
DRA devices), none advertising ``gpu-policy.io/gpu-milli`` until the webhook's server patches
it in; a namespace with a ResourceQuota of ``requests.gpu-policy.io/gpu-milli: 2000`` (2.0
GPU-equivalents). Sixteen clients at once create a random mix of pods through the webhook,
some as server dry runs. What must hold (docs/quota.md):

* the charged total of the pods that exist never exceeds 2.0, sampled throughout;
* dry runs are mutated (they carry their cost) and charge nothing;
* every admitted pod is bound by kube-scheduler (the synthetic resource never leaves one
  Pending), and every refusal is the quota's, naming budget, use and the pod's cost;
* after the pods are deleted the quota controller brings the use back to 0.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.objects import (
    GPU_CLASS_CEL,
    claim_template,
    device_class,
    dra_gpu,
    exactly,
    gpu_node,
    resource_slice,
    time_slicing_config,
)
from tests.support import doc_examples, gunicorn
from tests.support.cli import run_cli
from tests.support.controlplane import ControlPlane, delete_namespace
from tests.support.paths import REPO
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs
from webhook.contract import QUOTA_NODE_CAPACITY, QUOTA_RESOURCE
from webhook.policy.quantity import quantity_value

MakeNode = Callable[..., dict[str, Any]]
KUBECTL = REPO / ".cache" / "tools" / "kubectl"
CLIENTS = 16
PER_CLIENT = 5
BUDGET = 2000
COST = {"exclusive": 1000, "shared": 250, "mig": 142, "dra": 1000}

EXCLUSIVE = "version: v1\nflags: {migStrategy: none}\n"
MIG = "version: v1\nflags: {migStrategy: mixed}\n"


def _policy(tag: str) -> str:
    configs = {
        "exclusive": EXCLUSIVE,
        "ts4": time_slicing_config(4).replace("renameByDefault: false", "renameByDefault: true"),
        "mig": MIG,
    }
    data = "".join(
        f"        {key}: |\n" + "".join(f"          {line}\n" for line in text.splitlines())
        for key, text in configs.items()
    )
    return (
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\n"
        f"metadata: {{name: quota-{tag}}}\n"
        "spec:\n"
        "  devicePlugin:\n"
        "    configMap:\n"
        "      apiVersion: v1\n      kind: ConfigMap\n"
        "      metadata: {name: device-plugin-config, namespace: gpu-operator}\n"
        "      data:\n" + data + "    defaultConfig: exclusive\n"
        "  quota:\n    enabled: true\n"
    )


def _pod(name: str, kind: str, template: str) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    if kind == "exclusive":
        resources = {"limits": {"nvidia.com/gpu": "1"}}
    elif kind == "shared":
        resources = {"limits": {"nvidia.com/gpu.shared": "1"}}
    elif kind == "mig":
        resources = {"limits": {"nvidia.com/mig-1g.5gb": "1"}}
    else:
        resources = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "cuda:12", "resources": resources}],
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }


def _charge(pod: Any) -> int:
    """The synthetic request of a pod (a kubernetes model or a dict), 0 when none."""
    data = pod if isinstance(pod, dict) else client.ApiClient().sanitize_for_serialization(pod)
    total = 0
    for container in data["spec"]["containers"]:
        requests = (container.get("resources") or {}).get("requests") or {}
        total += int(quantity_value(requests.get(QUOTA_RESOURCE, 0)))
    return total


@pytest.fixture
def quota_cluster(control_plane: ControlPlane, make_gpu_node: MakeNode) -> Iterator[dict[str, Any]]:
    """The four nodes (none advertising the synthetic resource), the DRA slice and class."""
    tag = uuid.uuid4().hex[:6]
    nodes = {
        "exclusive": gpu_node(
            f"q-{tag}-excl", "a100-80", gpus=4, config_key="exclusive", taints=[], heavy=False
        ),
        "shared": gpu_node(
            f"q-{tag}-ts",
            "l20",
            gpus=2,
            replicas=4,
            rename=True,
            config_key="ts4",
            taints=[],
            heavy=False,
        ),
        "mig": gpu_node(
            f"q-{tag}-mig",
            "a100-40",
            gpus=2,
            mig_profile="1g.5gb",
            config_key="mig",
            taints=[],
            heavy=False,
        ),
    }
    for node in nodes.values():
        make_gpu_node(node=node)
    dra_node = make_gpu_node(f"q-{tag}-dra", gpus=None)["metadata"]["name"]
    klass = device_class(f"gpu-{tag}.nvidia.com", GPU_CLASS_CEL)
    # The node name carries the tag: the slice (named after it) is this test's own.
    slice_ = resource_slice(dra_node, *(dra_gpu(i) for i in range(4)))
    names = [n["metadata"]["name"] for n in nodes.values()] + [dra_node]
    with control_plane.created(klass, slice_):
        yield {"tag": tag, "class": klass["metadata"]["name"], "nodes": names}


@dataclass
class Serving:
    """The webhook's server, with quota on, once it advertised the synthetic resource."""

    gunicorn: gunicorn.Server
    url: str
    ca: bytes


@contextmanager
def _serving(plane: ControlPlane, cluster: dict[str, Any], tmp_path: Path) -> Iterator[Serving]:
    """The server (two workers, watching the cluster) with the quota policy in
    ``tmp_path/policy.yaml``; it has advertised the synthetic resource on the four nodes."""
    core = client.CoreV1Api(plane.client)
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy(cluster["tag"]))
    certs = write_certs(tmp_path / "certs")
    with gunicorn.running(
        tmp_path,
        certs,
        workers=2,
        GPU_POLICY_KUBE=str(plane.kubeconfig),
        GPU_POLICY_FILE=str(policy),
    ) as server:
        # Each worker judges from its own snapshot of the cluster (the claim template too).
        assert wait_until(lambda: server.cluster_ready(2), 60, 0.2), server.log()
        # The server's loop advertises the synthetic resource on the four GPU nodes.
        assert wait_until(lambda: all(_advertised(core, n) for n in cluster["nodes"]), 60, 0.3), (
            server.log()
        )
        yield Serving(server, f"https://127.0.0.1:{server.port}", certs.ca_cert.read_bytes())


def _advertised(core: client.CoreV1Api, name: str) -> bool:
    """The node's status advertises the synthetic resource (the API server writes 1M)."""
    status = core.read_node_status(name).status
    return all(
        quantity_value((amounts or {}).get(QUOTA_RESOURCE, "0")) == QUOTA_NODE_CAPACITY
        for amounts in (status.capacity, status.allocatable)
    )


def _used(core: client.CoreV1Api, namespace: str) -> int | None:
    quota = core.read_namespaced_resource_quota("gpu-budget", namespace)
    used = (quota.status.used or {}) if quota.status else {}
    value = used.get(f"requests.{QUOTA_RESOURCE}")
    return None if value is None else int(quantity_value(value))


@pytest.mark.slow
def test_sixteen_clients_never_exceed_the_budget_and_every_admitted_pod_is_bound(
    control_plane: ControlPlane,
    kube_namespace: str,
    quota_cluster: dict[str, Any],
    register_webhooks: Callable[..., list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    core = client.CoreV1Api(control_plane.client)
    ns = kube_namespace
    control_plane.create(
        claim_template("one-gpu", exactly(quota_cluster["class"]), namespace=ns), namespace=ns
    )
    core.create_namespaced_resource_quota(
        ns,
        {
            "metadata": {"name": "gpu-budget"},
            "spec": {"hard": {f"requests.{QUOTA_RESOURCE}": str(BUDGET)}},
        },
    )
    # The quota admission refuses pods until the quota controller has written the quota's
    # status: wait for it.
    assert wait_until(lambda: _used(core, ns) == 0, 60, 0.2)
    policy = tmp_path / "policy.yaml"
    with _serving(control_plane, quota_cluster, tmp_path) as server:
        # A GPU pod made before the webhook charged anything: it runs uncounted.
        core.create_namespaced_pod(ns, _pod("old-train", "exclusive", ""))
        register_webhooks(server.url, server.ca, namespace=ns)
        # Until the API server calls the webhook (its informer sees the new configuration a
        # moment later), a dry run of a DRA pod comes back without its cost: wait for eight in
        # a row with it.
        probe = _pod("probe", "dra", "one-gpu")
        streak = [0]

        def charged_in_a_row() -> bool:
            made = core.create_namespaced_pod(ns, probe, dry_run="All")
            streak[0] = streak[0] + 1 if _charge(made) == COST["dra"] else 0
            return streak[0] >= 8

        assert wait_until(charged_in_a_row, 60, 0.1), server.gunicorn.log()

        outcomes, peak = _storm(core, ns)

        admitted = [o for o in outcomes if o["status"] == 201 and not o["dry_run"]]
        refused = [o for o in outcomes if o["status"] == 403]
        dry = [o for o in outcomes if o["dry_run"]]
        assert not [o for o in outcomes if o["status"] not in (201, 403)], outcomes
        # Every admitted pod carries its cost: a whole GPU 1000, a 4-way replica 250, a MIG
        # 1g.5gb slice 1/7 (142, rounded down), a DRA GPU 1000.
        wrong = [
            (o["name"], o["kind"], o["charge"]) for o in admitted if o["charge"] != COST[o["kind"]]
        ]
        assert wrong == [], [
            line
            for line in server.gunicorn.log().splitlines()
            if any(f"name={w[0]} " in line for w in wrong)
        ]
        # The ledger held under 16 concurrent writers: the pods that exist never cost more.
        assert peak["pods"] <= BUDGET, peak
        assert peak["used"] <= BUDGET, peak
        total = sum(o["charge"] for o in admitted)
        assert BUDGET - 1000 < total <= BUDGET
        assert admitted and refused and dry, outcomes
        # Dry runs were mutated like the real thing (or refused by the quota like it), and the
        # use is what the pods that exist cost: the dry runs charged nothing.
        wrong = [
            (o["name"], o["kind"], o["charge"])
            for o in dry
            if o["status"] == 201 and o["charge"] != COST[o["kind"]]
        ]
        assert wrong == [], [
            line
            for line in server.gunicorn.log().splitlines()
            if any(f"name={w[0]} " in line for w in wrong)
        ]
        assert wait_until(lambda: _used(core, ns) == total, 30, 0.2), (_used(core, ns), total)
        # Every refusal is the quota's, and says budget, use and the pod's cost.
        for o in refused:
            said = _quota_refusal(o["message"])
            assert said["requested"] == o["cost"], o["message"]
            assert said["limited"] == BUDGET, o["message"]
            assert said["used"] + said["requested"] > BUDGET >= said["used"], o["message"]
        # What the inventory and the audit show: budget, use, the uncounted pod.
        for command in ("inventory", "audit"):
            shown = run_cli(
                command, "--policy", str(policy), "--kubeconfig", str(control_plane.kubeconfig)
            )
            assert shown.returncode in (0, 1), shown.stderr
            (line,) = [
                x
                for x in shown.stdout.splitlines()
                if x.startswith(ns + " ") and "(gpu-budget)" in x
            ]
            assert line.split()[1:4] == ["2", "(gpu-budget)", f"{total / 1000:g}"], line
            assert f"uncounted: {ns}/old-train (predates the charge)" in shown.stdout
            (tmp_path / f"{command}.txt").write_text(shown.stdout)
        # What a user sees with kubectl: the webhook's cost, then the quota's refusal.
        seen = _kubectl_refusal(control_plane, ns, tmp_path, BUDGET - total)
        # Every admitted pod is bound: the synthetic resource never keeps one Pending.
        names = [o["name"] for o in admitted] + ["old-train"]
        assert wait_until(
            lambda: all(core.read_namespaced_pod(n, ns).spec.node_name for n in names), 120, 0.5
        ), [n for n in names if not core.read_namespaced_pod(n, ns).spec.node_name]
        for name in names:
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        assert wait_until(lambda: _used(core, ns) == 0, 120, 0.5), _used(core, ns)
        # With the whole budget free, two dry runs of a whole GPU each are admitted, carry
        # their cost, and charge nothing.
        for i in range(2):
            made = core.create_namespaced_pod(ns, _pod(f"dry-{i}", "exclusive", ""), dry_run="All")
            assert _charge(made) == COST["exclusive"]
        assert _used(core, ns) == 0
    (tmp_path / "kubectl.txt").write_text(seen)


def _storm(core: client.CoreV1Api, ns: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """16 clients creating a random mix at once while a sampler reads the pods and the quota."""
    rng = random.Random(32)
    plans = [
        [
            (f"c{c}-{i}", rng.choice(["exclusive", "shared", "mig", "dra"]), rng.random() < 0.2)
            for i in range(PER_CLIENT)
        ]
        for c in range(CLIENTS)
    ]
    peak = {"pods": 0, "used": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            pods = core.list_namespaced_pod(ns).items
            peak["pods"] = max(peak["pods"], sum(_charge(p) for p in pods))
            peak["used"] = max(peak["used"], _used(core, ns) or 0)

    def run(plan: list[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        out = []
        for name, kind, dry_run in plan:
            body = _pod(name, kind, "one-gpu")
            try:
                made = core.create_namespaced_pod(ns, body, dry_run="All" if dry_run else None)
                out.append(
                    {
                        "name": name,
                        "kind": kind,
                        "dry_run": dry_run,
                        "status": 201,
                        "charge": _charge(made),
                    }
                )
            except ApiException as exc:
                message = json.loads(exc.body).get("message", "") if exc.body else str(exc)
                out.append(
                    {
                        "name": name,
                        "kind": kind,
                        "dry_run": dry_run,
                        "status": exc.status,
                        "message": message,
                        "cost": COST[kind],
                    }
                )
        return out

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            outcomes = [o for found in pool.map(run, plans) for o in found]
    finally:
        stop.set()
        sampler.join()
    return outcomes, peak


def _quota_refusal(message: str) -> dict[str, int]:
    """requested, used and limited of the quota's refusal (quantities in canonical form:
    the API server writes 2000 as 2k)."""
    assert "exceeded quota: gpu-budget" in message, message
    found = {
        key: re.search(rf"{key}: requests\.{re.escape(QUOTA_RESOURCE)}=([0-9.]+[kM]?)", message)
        for key in ("requested", "used", "limited")
    }
    assert all(found.values()), message
    return {k: int(quantity_value(m[1])) for k, m in found.items() if m is not None}


def _kubectl_refusal(plane: ControlPlane, ns: str, tmp_path: Path, left: int) -> str:
    """``kubectl create`` of a pod that costs more than what is left: its whole output."""
    if not KUBECTL.is_file():
        pytest.skip("kubectl is not in .cache/tools (run `make tools`)")
    assert left < 1000
    manifest = tmp_path / "train.json"
    manifest.write_text(json.dumps(_pod("train", "exclusive", "one-gpu")))
    done = subprocess.run(
        [
            str(KUBECTL),
            "--kubeconfig",
            str(plane.kubeconfig),
            "-n",
            ns,
            "create",
            "-f",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    text = done.stderr
    assert "Warning: [gpu-quota] this pod costs 1 GPU-equivalent (" in text, text
    assert "budget of 2 GPU-equivalents (ResourceQuota gpu-budget:" in text, text
    assert f"{QUOTA_RESOURCE}: 1000" in text
    assert _quota_refusal(text)["limited"] == BUDGET
    return text


DRY_TRAIN = "kubectl create --dry-run=server -f examples/quota/pod-train.yaml"
EXAMPLE = "tests/cluster/kube/test_quota_controlplane.py::test_the_worked_example_of_docs_quota_prints_what_it_shows"


@pytest.mark.slow
def test_the_worked_example_of_docs_quota_prints_what_it_shows(
    control_plane: ControlPlane,
    quota_cluster: dict[str, Any],
    register_webhooks: Callable[..., list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    """docs/quota.md's kubectl session, command by command, on this cluster."""
    if not KUBECTL.is_file():
        pytest.skip("kubectl is not in .cache/tools (run `make tools`)")
    core = client.CoreV1Api(control_plane.client)
    examples = doc_examples.checked_by(EXAMPLE)
    assert len(examples) == 11

    def kubectl(command: str) -> str:
        return control_plane.shell(command).stdout

    probe = _pod("probe", "exclusive", "")
    # Every command runs (the later ones need the earlier ones' effects); what differs from the
    # page is reported at the end, all of it.
    wrong: list[str] = []
    try:
        with _serving(control_plane, quota_cluster, tmp_path) as server:
            register_webhooks(server.url, server.ca, namespace="team-a")
            for example in examples:
                printed = kubectl(example.command)
                (tmp_path / "printed.txt").open("a").write(f"$ {example.command}\n{printed}")
                if not doc_examples.prints(example.output, printed):
                    wrong.append(f"{example.source}: `{example.command}` printed:\n{printed}")
                if example.command.endswith("budget.yaml"):
                    # Pods are refused until the quota controller wrote the quota's status, and
                    # charged only once the API server calls the webhook: a dry run says when.
                    assert wait_until(lambda: _used(core, "team-a") == 0, 60, 0.2)
                    assert wait_until(
                        lambda: (
                            _charge(core.create_namespaced_pod("team-a", probe, dry_run="All"))
                            == COST["exclusive"]
                        ),
                        60,
                        0.2,
                    )
                    # And once both workers have read the budget (polled every 5 s).
                    assert wait_until(
                        lambda: all(
                            "ResourceQuota gpu-budget" in kubectl(DRY_TRAIN) for _ in range(4)
                        ),
                        60,
                        0.5,
                    )
                if example.command.startswith("kubectl delete pod train "):
                    # The quota controller gives the charge back when it sees the pod gone.
                    assert wait_until(lambda: (_used(core, "team-a") or 0) < 1000, 60, 0.2)
    finally:
        delete_namespace(control_plane, "team-a")
    assert not wrong, "\n".join(wrong)
