"""A large, realistic cluster for the audit's benchmark and its smoke test, and what the audit
must find in it.

``Cluster(nodes, pods, gpu_fraction)`` makes, deterministically:

* nodes: one in five is a GPU node in the mix of ``tests.objects.cluster`` (exclusive
  A100 80GB and H100, L20 time-sliced 4 ways, A100 40GB with MIG 1g.5gb in mixed mode, T4
  time-sliced 4 ways under the renamed ``nvidia.com/gpu.shared``), all tainted
  ``nvidia.com/gpu``; the others CPU nodes of the same bulk (labels, managedFields, images);
* pods, ``gpu_fraction`` of them asking for GPUs, under the owners a cluster has: Deployments
  (through their ReplicaSets), StatefulSets, Jobs and CronJobs, and some bare pods. GPU
  workloads go through the scenarios of ``SCENARIOS`` in turn: healthy ones for each pool, and
  one of each problem the audit explains (a MIG profile no node offers, a selector no GPU node
  matches, a missing toleration, more GPUs than a node has, a shared request above one that the
  kubelet refused, a pod refused by the device plugin, a Kueue-gated workload). Pods are placed
  as the scheduler would: onto the nodes of their pool while a slot is free; the ones that do
  not fit stay Pending with the scheduler's message, so pools run full at the default sizes;
* ``POLICY``: the SharingPolicy these nodes are set up for.

``Cluster.expected()`` counts what the audit must report, from the placement bookkeeping and the
scenarios, not from the audit: GPU pods bound, waiting and refused, workloads, and the findings
at fail and warn level per rule.

Objects carry what real ones carry (managedFields, env, probes, container statuses: ~4 KB a
pod) so that listing and trimming see realistic sizes. Objects are made one at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.objects import cluster as gpu_nodes
from tests.objects import gpu_node

__all__ = ["NOW", "POLICY", "SCENARIOS", "Cluster", "Scenario"]

NOW = datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC)
_EPOCH = datetime(2025, 5, 1, tzinfo=UTC)
CPU_REPLICAS = 10  # pods per CPU workload
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
EXCLUSIVE_PRODUCTS = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"]
# The node kinds of tests.objects.cluster() by (GPU node index % 10), as pools.
POOL_OF_SLOT = ["exclusive"] * 6 + ["l20"] * 2 + ["mig", "t4"]
POOL_RESOURCE = {
    "exclusive": "nvidia.com/gpu",
    "l20": "nvidia.com/gpu",
    "mig": "nvidia.com/mig-1g.5gb",
    "t4": "nvidia.com/gpu.shared",
}

POLICY: dict[str, Any] = {
    "apiVersion": "gpu-policy.io/v1alpha1",
    "kind": "SharingPolicy",
    "metadata": {"name": "bench"},
    "spec": {
        "enforcement": "enforce",
        "defaultIntent": "any",
        "exemptNamespaces": ["kube-system"],
        "devicePlugin": {
            "configMap": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "device-plugin-config", "namespace": "gpu-operator"},
                "data": {
                    "any": "version: v1\nflags:\n  migStrategy: none\n",
                    "l20": (
                        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n"
                        "    failRequestsGreaterThanOne: true\n    resources:\n"
                        "      - name: nvidia.com/gpu\n        replicas: 4\n"
                    ),
                    "t4": (
                        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n"
                        "    renameByDefault: true\n    failRequestsGreaterThanOne: true\n"
                        "    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n"
                    ),
                    "a100-40gb": "version: v1\nflags:\n  migStrategy: mixed\n",
                },
            },
            "nodeLabel": "nvidia.com/device-plugin.config",
            "defaultConfig": "any",
        },
        "mutation": {"tolerations": [TOLERATION]},
    },
}


@dataclass(frozen=True)
class Scenario:
    """One kind of GPU workload; ``problem`` is what keeps its pods from running, if anything.

    ``policy`` lists the findings below pass, as (rule, result), that ``review()`` gives its
    template; ``webhook_made``: its pods were made through the webhook (they carry its
    annotation and the toleration it adds).
    """

    name: str
    kind: str  # Deployment, StatefulSet, Job, CronJob, or Pod: bare pods
    pool: str
    gpus: int = 1
    replicas: int = 4
    resource: str | None = None  # default: the pool's resource
    problem: str | None = None
    policy: tuple[tuple[str, str], ...] = ()
    webhook_made: bool = True


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("inference", "Deployment", "exclusive"),
    Scenario("notebook", "Deployment", "l20"),
    Scenario("embeddings", "Deployment", "t4"),
    Scenario("batch-mig", "Job", "mig"),
    Scenario("trainer", "StatefulSet", "exclusive", gpus=8, replicas=2),
    Scenario("legacy-api", "Deployment", "exclusive"),
    Scenario("nightly-eval", "CronJob", "l20"),
    # A MIG profile no node offers.
    Scenario(
        "mig-3g",
        "Deployment",
        "mig",
        resource="nvidia.com/mig-3g.20gb",
        problem="not-offered",
        policy=(("gpu-resource-offered", "fail"),),
    ),
    # Pinned to a product no node has.
    Scenario(
        "v100-pinned",
        "Deployment",
        "exclusive",
        replicas=2,
        problem="selection",
        policy=(("gpu-node-selection", "fail"),),
    ),
    # Made before the webhook ran: no toleration for the GPU nodes' taint.
    Scenario(
        "pre-webhook",
        "Deployment",
        "exclusive",
        problem="taints",
        policy=(("gpu-webhook-changes", "warn"),),
        webhook_made=False,
    ),
    # Two shared GPUs: the device plugin refused every pod at the kubelet.
    Scenario(
        "shared-two",
        "Job",
        "t4",
        gpus=2,
        replicas=2,
        problem="refused",
        policy=(("gpu-shared-request-above-one", "fail"),),
    ),
    Scenario("debug", "Pod", "exclusive", replicas=2),
    # One pod refused by the kubelet (a GPU went unhealthy), the others running.
    Scenario("flaky-device", "Deployment", "l20", problem="device-unhealthy"),
    # Held back by a queue (Kueue) through scheduling gates.
    Scenario("queued", "Deployment", "mig", problem="gated"),
    # More GPUs than any node has: the engine refuses it too (no node has that many).
    Scenario(
        "too-big",
        "Job",
        "exclusive",
        gpus=16,
        replicas=1,
        problem="too-large",
        policy=(("gpu-resource-offered", "fail"),),
    ),
    Scenario("ranker", "Deployment", "exclusive"),
    Scenario("tokenizer", "StatefulSet", "l20"),
    Scenario("search", "Deployment", "exclusive", gpus=2),
    Scenario("ocr", "Deployment", "l20"),
    Scenario("mig-report", "CronJob", "mig"),
)
# Problems that keep every pod from a node before any slot is looked at.
_UNPLACED = ("not-offered", "selection", "taints", "too-large", "gated")
_API = {
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}
_STANDARD_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{t}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for t in ("not-ready", "unreachable")
]


def cpu_node(name: str) -> dict[str, Any]:
    """A CPU node with a real node's bulk (labels, managedFields, images), no GPU, no taint."""
    node = gpu_node(name, "a100-80", taints=[])
    meta = node["metadata"]
    meta["labels"] = {
        k: v
        for k, v in meta["labels"].items()
        if not k.startswith(("nvidia.com/", "feature.node.kubernetes.io/pci-10de"))
    }
    meta["labels"]["node.kubernetes.io/instance-type"] = "m6i.8xlarge"
    for entry in meta["managedFields"]:
        entry["fieldsV1"] = {"f:metadata": {"f:labels": {f"f:{k}": {} for k in meta["labels"]}}}
    for section in ("allocatable", "capacity"):
        node["status"][section].pop("nvidia.com/gpu")
    return node


def _time(minutes: int) -> str:
    return (_EPOCH + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _container(name: str, limits: dict[str, str], *, main: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "image": f"registry.example.com/ml/{name}:2.3.1" if main else "envoyproxy/envoy:v1.30.2",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": dict(limits), "limits": limits},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if main:
        out.update(
            {
                "args": ["--port=8080", "--log-level=info", "--model=/models/current"],
                "env": [{"name": f"SETTING_{i}", "value": f"value-{i:03d}"} for i in range(10)],
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 10,
                    "timeoutSeconds": 1,
                    "successThreshold": 1,
                    "failureThreshold": 3,
                },
                "volumeMounts": [
                    {"name": "models", "mountPath": "/models", "readOnly": True},
                    {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io"},
                ],
            }
        )
    return out


def _volumes() -> list[dict[str, Any]]:
    """The volumes the main container mounts (an API server refuses a mount of a volume the
    pod does not have)."""
    return [
        {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
        {
            "name": "kube-api-access",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
        },
    ]


def _managed(manager: str, created: str) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": created,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:team": {}}},
                "f:spec": {
                    f"f:{k}": {}
                    for k in ("containers", "dnsPolicy", "restartPolicy", "schedulerName")
                },
            },
        }
    ]


@dataclass
class _Node:
    name: str
    slots: int
    held: int = 0


@dataclass
class Expected:
    """What the audit of a Cluster must report."""

    gpu_pods: int = 0
    bound: int = 0
    waiting: int = 0
    refused: int = 0
    workloads: int = 0
    #: Findings below pass, per (rule, result).
    findings: Counter[tuple[str, str]] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (findings keyed ``rule/result``)."""
        return {
            "pods": {
                "gpu": self.gpu_pods,
                "bound": self.bound,
                "waiting": self.waiting,
                "refused": self.refused,
            },
            "workloads": self.workloads,
            "findings": {f"{r}/{s}": n for (r, s), n in sorted(self.findings.items())},
        }


class Cluster:
    """The generated cluster: iterate ``nodes()`` and ``objects()``, then ask ``expected()``."""

    def __init__(self, nodes: int, pods: int, gpu_fraction: float = 0.1) -> None:
        if nodes < 50 or pods < 0 or not 0 <= gpu_fraction <= 1:
            # One node in five is a GPU node, and the GPU node kinds come in tens.
            raise ValueError("at least 50 nodes, pods >= 0, a GPU fraction between 0 and 1")
        self.n_nodes, self.n_pods = nodes, pods
        self.n_gpu_pods = round(pods * gpu_fraction)
        self.n_gpu_nodes = -(-nodes // 5)
        self.n_cpu_nodes = nodes - self.n_gpu_nodes
        self._pools: dict[str, list[_Node]] = {p: [] for p in POOL_RESOURCE}
        for i, node in enumerate(gpu_nodes(10)):
            pool = POOL_OF_SLOT[i]
            slots = int(node["status"]["allocatable"][POOL_RESOURCE[pool]])
            self._pools[pool] += [
                _Node(f"gpu-{j:05d}", slots) for j in range(i, self.n_gpu_nodes, 10)
            ]
        self._cursor: Counter[str] = Counter()
        self._serial = 0
        self._expected = Expected()
        self._full_pools: set[str] = set()
        self._done = False

    def nodes(self) -> Iterator[dict[str, Any]]:
        """Every node: GPU nodes ``gpu-NNNNN`` first, then CPU nodes ``cpu-NNNNN``."""
        yield from gpu_nodes(self.n_gpu_nodes)
        for j in range(self.n_cpu_nodes):
            yield cpu_node(f"cpu-{j:05d}")

    def objects(self) -> Iterator[dict[str, Any]]:
        """Every workload and pod, GPU workloads first; once per Cluster."""
        if self._done:
            raise RuntimeError("a Cluster places its pods once: make another")
        g, left = 0, self.n_gpu_pods
        while left > 0:
            scenario = SCENARIOS[g % len(SCENARIOS)]
            replicas = min(scenario.replicas, left)
            yield from self._gpu_workload(g, scenario, replicas)
            left -= replicas
            g += 1
        w, left = 0, self.n_pods - self.n_gpu_pods
        while left > 0:
            replicas = min(CPU_REPLICAS, left)
            yield from self._cpu_workload(w, replicas)
            left -= replicas
            w += 1
        self._done = True

    def expected(self) -> Expected:
        """What the audit must report, once ``objects()`` has been read to the end."""
        if not self._done:
            raise RuntimeError("read objects() first: the pods are placed as they are made")
        out = self._expected
        full = sum(1 for pool in self._full_pools for n in self._pools[pool] if n.held >= n.slots)
        out.findings[("gpu-node-capacity", "warn")] = full
        return out

    # ---------------------------------------------------------------- placement

    def _place(self, pool: str, gpus: int) -> _Node | None:
        """The next node of the pool (round robin, as spreading does) with ``gpus`` free."""
        nodes = self._pools[pool]
        start = self._cursor[pool]
        for step in range(len(nodes)):
            node = nodes[(start + step) % len(nodes)]
            if node.slots - node.held >= gpus:
                node.held += gpus
                self._cursor[pool] = (start + step + 1) % len(nodes)
                return node
        return None

    def _next_node(self, pool: str) -> str:
        """A node of the pool for a pod the kubelet refused (it holds no slot)."""
        nodes = self._pools[pool]
        self._cursor[pool] = (self._cursor[pool] + 1) % len(nodes)
        return nodes[self._cursor[pool]].name

    # ---------------------------------------------------------------- objects

    def _uid(self) -> str:
        self._serial += 1
        n = self._serial
        return f"6a3e{n >> 16 & 0xFFFF:04x}-{n & 0xFFFF:04x}-4000-8000-{n:012x}"

    def _meta(
        self, name: str, namespace: str, created: str, owner: dict[str, Any] | None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": self._uid(),
            "resourceVersion": "1",
            "creationTimestamp": created,
            "labels": {"app": name, "team": namespace},
            "managedFields": _managed("kube-controller-manager", created),
        }
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": _API[owner["kind"]],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        return meta

    def _gpu_template(self, scenario: Scenario) -> dict[str, Any]:
        resource = scenario.resource or POOL_RESOURCE[scenario.pool]
        limits = {"cpu": "4", "memory": "16Gi", resource: str(scenario.gpus)}
        spec: dict[str, Any] = {
            "containers": [
                _container("main", limits, main=True),
                _container("proxy", {"cpu": "100m", "memory": "128Mi"}, main=False),
            ],
            "restartPolicy": "OnFailure" if scenario.kind in ("Job", "CronJob") else "Always",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "volumes": _volumes(),
            "tolerations": [*_STANDARD_TOLERATIONS],
        }
        annotations: dict[str, str] = {}
        if scenario.webhook_made:
            spec["tolerations"].append(dict(TOLERATION))
        if scenario.problem == "selection":
            spec["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}
        elif scenario.pool == "exclusive":
            annotations["gpu-policy.io/sharing"] = "exclusive"
            term = {
                "key": "nvidia.com/gpu.product",
                "operator": "In",
                "values": EXCLUSIVE_PRODUCTS,
            }
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [term]}]
                    }
                }
            }
        elif scenario.pool == "l20":
            annotations["gpu-policy.io/sharing"] = "shared"
            spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}
        if scenario.problem == "gated":
            spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
        template: dict[str, Any] = {"metadata": {"labels": {}}, "spec": spec}
        if annotations:
            template["metadata"]["annotations"] = annotations
        return template

    def _gpu_workload(self, g: int, scenario: Scenario, replicas: int) -> Iterator[dict[str, Any]]:
        namespace = f"team-{g % 40:02d}"
        name = f"{scenario.name}-{g:05d}"
        minutes = (g * 7919) % 100_000
        created = _time(minutes)
        template = self._gpu_template(scenario)
        template["metadata"]["labels"] = {"app": name, "team": namespace}
        expected = self._expected
        owner: dict[str, Any] | None = None
        pod_names = [f"{name}-{j}" for j in range(replicas)]
        if scenario.kind == "Deployment":
            deployment = self._workload("Deployment", name, namespace, created, template, None)
            deployment["spec"]["replicas"] = replicas
            owner = self._workload(
                "ReplicaSet", f"{name}-6d8f7b9c5", namespace, created, template, deployment
            )
            owner["spec"]["replicas"] = replicas
            yield deployment
            yield owner
            pod_names = [f"{name}-6d8f7b9c5-{_suffix(g, j)}" for j in range(replicas)]
        elif scenario.kind == "StatefulSet":
            owner = self._workload("StatefulSet", name, namespace, created, template, None)
            owner["spec"]["replicas"] = replicas
            yield owner
        elif scenario.kind in ("Job", "CronJob"):
            cron = None
            job_name = name
            if scenario.kind == "CronJob":
                cron = self._workload("CronJob", name, namespace, created, template, None)
                yield cron
                job_name = f"{name}-29198880"
            owner = self._workload("Job", job_name, namespace, created, template, cron)
            owner["spec"]["parallelism"] = replicas
            yield owner
            pod_names = [f"{job_name}-{_suffix(g, j)}" for j in range(replicas)]
        expected.workloads += 1 if owner is not None else replicas
        pending = gated = refused = 0
        for j, pod_name in enumerate(pod_names):
            pod_created = _time(minutes + j)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": self._meta(pod_name, namespace, pod_created, owner),
                "spec": {**template["spec"], "nodeName": None},
            }
            pod["metadata"]["labels"] = dict(template["metadata"]["labels"])
            annotations = dict(template["metadata"].get("annotations") or {})
            if scenario.webhook_made:
                annotations["gpu-policy.io/mutations"] = "added toleration nvidia.com/gpu"
            if annotations:
                pod["metadata"]["annotations"] = annotations
            state = self._pod_state(scenario, j, pod)
            expected.gpu_pods += 1
            if state == "bound":
                expected.bound += 1
            elif state == "refused":
                expected.refused += 1
                refused += 1
            else:
                expected.waiting += 1
                gated += state == "gated"
                pending += state != "gated"
            if owner is None:  # a bare pod is its own workload
                self._count_findings(scenario, pending, gated, refused)
                pending = gated = refused = 0
            yield pod
        if owner is not None:
            self._count_findings(scenario, pending, gated, refused)

    def _count_findings(self, scenario: Scenario, pending: int, gated: int, refused: int) -> None:
        findings = self._expected.findings
        findings.update(scenario.policy)
        if pending:
            findings[("gpu-pod-scheduled", "fail")] += 1
        elif gated:
            findings[("gpu-pod-scheduled", "warn")] += 1
        if refused:
            findings[("gpu-pod-admitted", "fail")] += 1

    def _pod_state(self, scenario: Scenario, j: int, pod: dict[str, Any]) -> str:
        """Bind, refuse or leave the pod Pending, as the cluster would have; its state."""
        spec = pod["spec"]
        resource = scenario.resource or POOL_RESOURCE[scenario.pool]
        problem = scenario.problem
        if problem == "refused" or (problem == "device-unhealthy" and j == 0):
            spec["nodeName"] = self._next_node(scenario.pool)
            if problem == "refused":
                message = (
                    "Allocate failed due to rpc error: code = Unknown desc = request for "
                    f"'{resource}: {scenario.gpus}' too large: maximum request size for shared "
                    "resources is 1, which is unexpected"
                )
            else:
                message = (
                    "Allocate failed due to requested number of devices unavailable for "
                    f"{resource}. Requested: 1, Available: 0, which is unexpected"
                )
            pod["status"] = {
                "phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": f"Pod was rejected: {message}",
                "startTime": pod["metadata"]["creationTimestamp"],
            }
            return "refused"
        node = None if problem in _UNPLACED else self._place(scenario.pool, scenario.gpus)
        if node is None:
            del spec["nodeName"]
            if problem is None:
                self._full_pools.add(scenario.pool)
            pod["status"] = _pending(problem, resource, self.n_nodes)
            return "gated" if problem == "gated" else "pending"
        spec["nodeName"] = node.name
        pod["status"] = _running(pod["metadata"]["creationTimestamp"], len(spec["containers"]))
        return "bound"

    def _workload(
        self,
        kind: str,
        name: str,
        namespace: str,
        created: str,
        template: dict[str, Any],
        owner: dict[str, Any] | None,
    ) -> dict[str, Any]:
        meta = self._meta(name, namespace, created, owner)
        selector = {"matchLabels": {"app": template["metadata"]["labels"].get("app", name)}}
        spec: dict[str, Any]
        if kind == "CronJob":
            spec = {
                "schedule": "0 2 * * *",
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"template": template}},
            }
        elif kind == "Job":
            spec = {"backoffLimit": 6, "completions": 1, "template": template}
        else:
            spec = {"selector": selector, "template": template}
        return {"apiVersion": _API[kind], "kind": kind, "metadata": meta, "spec": spec}

    def _cpu_workload(self, w: int, replicas: int) -> Iterator[dict[str, Any]]:
        namespace = f"team-{w % 40:02d}"
        name = f"svc-{w:05d}"
        minutes = (w * 7927) % 100_000
        created = _time(minutes)
        spec = {
            "containers": [
                _container("main", {"cpu": "500m", "memory": "1Gi"}, main=True),
                _container("proxy", {"cpu": "100m", "memory": "128Mi"}, main=False),
            ],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "volumes": _volumes(),
            "tolerations": [*_STANDARD_TOLERATIONS],
        }
        template = {"metadata": {"labels": {"app": name, "team": namespace}}, "spec": spec}
        batch = w % 10 == 9  # one CPU workload in ten is a Job whose pods have finished
        if batch:
            spec["restartPolicy"] = "Never"
            owner = self._workload("Job", name, namespace, created, template, None)
            yield owner
        elif w % 10 == 8:
            owner = self._workload("StatefulSet", name, namespace, created, template, None)
            yield owner
        else:
            deployment = self._workload("Deployment", name, namespace, created, template, None)
            yield deployment
            owner = self._workload(
                "ReplicaSet", f"{name}-5c9d8f7b6", namespace, created, template, deployment
            )
            yield owner
        for j in range(replicas):
            pod_created = _time(minutes + j)
            node = f"cpu-{(w * CPU_REPLICAS + j) % max(1, self.n_cpu_nodes):05d}"
            status = _running(pod_created, 2)
            if batch:
                status["phase"] = "Succeeded"
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **self._meta(
                        f"{owner['metadata']['name']}-{_suffix(w, j)}",
                        namespace,
                        pod_created,
                        owner,
                    ),
                    "labels": {"app": name, "team": namespace},
                },
                "spec": {**spec, "nodeName": node},
                "status": status,
            }


def _suffix(w: int, j: int) -> str:
    """A pod name suffix as the controllers make them (5 characters)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    n = (w * 131 + j) * 2654435761 % 27**5
    out = ""
    for _ in range(5):
        n, r = divmod(n, 27)
        out += alphabet[r]
    return out


def _running(created: str, containers: int) -> dict[str, Any]:
    return {
        "phase": "Running",
        "hostIP": "10.0.3.17",
        "podIP": "10.244.3.21",
        "startTime": created,
        "qosClass": "Guaranteed",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": created}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
        ]
        + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": created}],
        "containerStatuses": [
            {
                "name": name,
                "ready": True,
                "started": True,
                "restartCount": 0,
                "image": f"registry.example.com/ml/{name}:2.3.1",
                "imageID": f"registry.example.com/ml/{name}@sha256:{'ab' * 32}",
                "containerID": f"containerd://{'cd' * 32}",
                "state": {"running": {"startedAt": created}},
            }
            for name in ("main", "proxy")[:containers]
        ],
    }


def _pending(problem: str | None, resource: str, nodes: int) -> dict[str, Any]:
    if problem == "gated":
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }
    else:
        why = {
            "selection": "node(s) didn't match Pod's node affinity/selector",
            "taints": "node(s) had untolerated taint {nvidia.com/gpu: present}",
        }.get(problem or "", f"Insufficient {resource}")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/{nodes} nodes are available: {nodes} {why}. preemption: 0/{nodes} "
            "nodes are available: "
            f"{nodes} Preemption is not helpful for scheduling.",
        }
    return {"phase": "Pending", "qosClass": "Guaranteed", "conditions": [condition]}
