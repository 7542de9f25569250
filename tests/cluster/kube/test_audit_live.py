"""The live audit's device-plugin ConfigMap and its in-cluster configuration, through the real
client against the real API server (in-cluster: a ServiceAccount token it issued, over TLS)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.config.incluster_config import SERVICE_TOKEN_FILENAME

from tests.support.cli import modules_loaded, run_cli
from tests.support.cluster import LiveCluster
from tests.support.controlplane import ControlPlane
from tests.support.paths import REPO
from webhook.audit import Collector
from webhook.certs import issue
from webhook.files import kubernetes_objects, read_text
from webhook.kube.lister import AUDIT_KINDS, ClusterError, connect_audit, read_for_audit
from webhook.kube.reports import apply_reports

ROOT = REPO
#: The generated API classes of the client and their model classes.
GENERATED = ("kubernetes.client.api.", "kubernetes.client.models.")
AFTER = ROOT / "examples" / "clusters" / "seed003-l20-t4"
OBJECTS = ROOT / "examples" / "audit" / "seed003-after" / "objects.yaml"
NOW = "2025-07-14T09:00:00Z"
CONFIGMAP = ("gpu-operator", "time-slicing-config")
# A Deployment asking for two shared GPUs: the ConfigMap's failRequestsGreaterThanOne makes
# that a failure; without the ConfigMap the audit cannot know it, and only warns.
TRAINER = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "trainer", "namespace": "ml", "uid": "u-trainer"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "trainer"}},
        "template": {
            "metadata": {"labels": {"app": "trainer"}},
            "spec": {
                "containers": [
                    {"name": "train", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 2}}}
                ]
            },
        },
    },
}


def ref_policy(tmp: Path) -> Path:
    """seed003-l20-t4's policy, its device-plugin config named by configMapRef only."""
    text = (AFTER / "policy.yaml").read_text()
    ref = f"configMapRef: {{namespace: {CONFIGMAP[0]}, name: {CONFIGMAP[1]}}}"
    path = tmp / "policy.yaml"
    path.write_text(text.replace("configMapFile: device-plugin-config.yaml", ref))
    return path


def configmap(**data: str) -> dict[str, Any]:
    """The device plugin's ConfigMap of seed003-l20-t4 at CONFIGMAP (or with ``data``)."""
    doc = yaml.safe_load((AFTER / "device-plugin-config.yaml").read_text())
    doc["metadata"] = {"namespace": CONFIGMAP[0], "name": CONFIGMAP[1]}
    if data:
        doc["data"] = data
    return doc


def load(cluster: LiveCluster) -> None:
    """seed003 after the rollout, plus TRAINER."""
    cluster.add_many(yaml.safe_load((AFTER / "nodes.yaml").read_text())["items"])
    cluster.add_many(d.value for d in kubernetes_objects(read_text(OBJECTS), source=str(OBJECTS)))
    cluster.add(TRAINER)


def live(cluster: LiveCluster, tmp: Path, *args: str) -> Any:
    """``gpu-policy audit --kubeconfig`` on the cluster with the configMapRef policy, as JSON."""
    common = ["--kubeconfig", str(cluster.write_kubeconfig(tmp)), "--now", NOW, "-o", "json"]
    return run_cli("audit", *common, "--policy", str(ref_policy(tmp)), *args)


def trainer_result(stdout: str) -> str:
    doc = json.loads(stdout)
    return next(f["result"] for f in doc["findings"] if f["rule"] == "gpu-shared-request-above-one")


def test_the_configmap_ref_is_read_from_the_cluster(cluster: LiveCluster, tmp_path: Path) -> None:
    load(cluster)
    cluster.add(configmap())
    done = live(cluster, tmp_path)
    assert done.returncode == 1, done.stderr
    assert trainer_result(done.stdout) == "fail"
    assert done.stderr == ""
    # One get of that ConfigMap by name: RBAC can grant exactly it.
    reads = [r for r in cluster.requests if r.resource == "configmaps"]
    assert [(r.verb, r.path) for r in reads] == [
        ("get", f"/api/v1/namespaces/{CONFIGMAP[0]}/configmaps/{CONFIGMAP[1]}")
    ]
    # The same judgement as the dump audit (`kubectl get -o yaml` of the same cluster) with
    # the policy that carries the same ConfigMap.
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for name, kinds in (("nodes", ("Node",)), ("objects", AUDIT_KINDS)):
        listed = {"apiVersion": "v1", "kind": "List", "items": cluster.dump(*kinds)}
        (dumps / f"{name}.yaml").write_text(yaml.safe_dump(listed))
    offline = run_cli(
        "audit",
        "--nodes",
        str(dumps / "nodes.yaml"),
        "--objects",
        str(dumps / "objects.yaml"),
        "--policy",
        str(AFTER / "policy.yaml"),
        "--now",
        NOW,
        "-o",
        "json",
    )
    assert json.loads(offline.stdout)["findings"] == json.loads(done.stdout)["findings"]


def test_reading_the_cluster_imports_no_generated_api_class(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    # Each generated API class of the client brings a model class per object it names: looked
    # up, the ones these commands would call cost about 1.2 s of CPU per command (docs/server.md,
    # "The Kubernetes client's API classes"). The audit lists every kind, DRA and NodePools
    # included, and reads the ConfigMap; inventory watches (webhook.kube.source).
    load(cluster)
    cluster.add(configmap())
    kubeconfig = str(cluster.write_kubeconfig(tmp_path))
    policy = str(ref_policy(tmp_path))
    commands = {
        "audit": [
            "audit",
            "--kubeconfig",
            kubeconfig,
            "--policy",
            policy,
            "--now",
            NOW,
            "-o",
            "json",
        ],
        "inventory": ["inventory", "--kubeconfig", kubeconfig, "-o", "json"],
    }
    for name, argv in commands.items():
        status, modules, stdout = modules_loaded(*argv)
        generated = [m for m in modules if m.startswith(GENERATED)]
        # The command read the cluster (the ConfigMap makes the trainer fail the audit;
        # inventory counts the nodes' GPUs) and imported none of them.
        assert generated == [], name
        if name == "audit":
            assert status == 1
            assert trainer_result(stdout) == "fail"
        else:
            assert status == 0
            assert json.loads(stdout)["total_slots"] > 0


def test_no_configmap_in_the_cluster_is_a_warning(cluster: LiveCluster, tmp_path: Path) -> None:
    load(cluster)
    done = live(cluster, tmp_path)
    assert done.returncode == 0, done.stderr
    assert trainer_result(done.stdout) == "warn"
    assert done.stderr.splitlines() == [
        "warning: the policy's devicePlugin.configMapRef gpu-operator/time-slicing-config is "
        "not in the cluster: judging with the policy file's configs"
    ]


def test_a_configmap_that_does_not_parse_is_not_used(cluster: LiveCluster, tmp_path: Path) -> None:
    load(cluster)
    cluster.add(configmap(any="version: v1\nsharing: {timeSlicing: {resources: 7}}\n"))
    done = live(cluster, tmp_path)
    assert done.returncode == 0, done.stderr
    assert trainer_result(done.stdout) == "warn"
    assert done.stderr.startswith(
        "warning: device-plugin ConfigMap refused: ConfigMap gpu-operator/time-slicing-config"
    )


def test_a_configmap_that_cannot_be_read_is_a_cluster_error(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    load(cluster)
    cluster.add(configmap())
    cluster.forbid("configmaps")
    done = live(cluster, tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(
        "gpu-policy audit: reading ConfigMap gpu-operator/time-slicing-config: HTTP 403 Forbidden"
    )
    assert done.stderr.rstrip().endswith(
        "grant get on configmaps 'time-slicing-config' in namespace gpu-operator"
    )
    assert len(done.stderr.splitlines()) == 1


def test_dumps_say_the_configmap_ref_is_not_read(tmp_path: Path) -> None:
    done = run_cli(
        "audit",
        "--nodes",
        str(AFTER / "nodes.yaml"),
        "--objects",
        str(OBJECTS),
        "--policy",
        str(ref_policy(tmp_path)),
        "--now",
        NOW,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: the policy's devicePlugin.configMapRef (gpu-operator/time-slicing-config) is "
        "read from a live cluster only; this dump audit uses no device-plugin config (only the "
        "nodes' labels and allocatable say how GPUs are shared). To judge with it, save it "
        "(kubectl get configmap -n gpu-operator time-slicing-config -o yaml > cm.yaml) and "
        "name it in the policy as devicePlugin.configMapFile: cm.yaml"
    ]


# -- in-cluster: the pod's service account ---------------------------------------------------

AUDIT_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
        "verbs": ["list"],
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["list"]},
    {
        "apiGroups": ["wgpolicyk8s.io"],
        "resources": ["policyreports", "clusterpolicyreports"],
        "verbs": ["list", "patch", "create", "delete"],
    },
]


@pytest.fixture
def service_account(
    control_plane: ControlPlane, cluster: LiveCluster, report_crds: list[str]
) -> Iterator[str]:
    """A ServiceAccount allowed what the audit reads and writes; a token the API server
    issued for it (the TokenRequest API, as the kubelet asks for a pod's)."""
    from kubernetes import client

    load(cluster)
    cluster.ensure_namespace("gpu-policy")
    rbac = "rbac.authorization.k8s.io/v1"
    name = "gpu-policy-audit-test"
    control_plane.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        namespace="gpu-policy",
    )
    control_plane.create(
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": AUDIT_RULES,
        }
    )
    control_plane.create(
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "gpu-policy"}],
        }
    )
    core = client.CoreV1Api(control_plane.client)
    token = core.create_namespaced_service_account_token(
        name, "gpu-policy", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    try:
        yield str(token)
    finally:
        rbac_api = client.RbacAuthorizationV1Api(control_plane.client)
        rbac_api.delete_cluster_role_binding(name)
        rbac_api.delete_cluster_role(name)
        core.delete_namespaced_service_account(name, "gpu-policy")


def pod_files(tmp: Path, plane: ControlPlane, token: str) -> dict[str, Any]:
    """What the kubelet gives a pod: the token and CA files, the API server's Service env."""
    account = tmp / "serviceaccount"
    account.mkdir(exist_ok=True)
    (account / "token").write_text(token)
    (account / "ca.crt").write_bytes(plane.ca_pem)
    host, port = plane.url.removeprefix("https://").rsplit(":", 1)
    return {
        "token_file": str(account / "token"),
        "ca_file": str(account / "ca.crt"),
        "environ": {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
    }


def test_in_cluster_reads_and_applies_with_the_service_account(
    control_plane: ControlPlane, service_account: str, tmp_path: Path
) -> None:
    files = pod_files(tmp_path, control_plane, service_account)
    api = connect_audit(None, **files)
    try:
        assert api.configuration.host == control_plane.url
        collector = Collector()
        nodes = read_for_audit(api, collector, timeout=30)
        assert len(nodes) == 8
        dumped = kubernetes_objects(read_text(OBJECTS), source=str(OBJECTS))
        deployments = sum(1 for d in dumped if d.value["kind"] == "Deployment")
        assert collector.scanned["Deployment"] == deployments + 1  # and TRAINER
        applied = apply_reports(api, [], api="wgpolicyk8s", timeout=30)
        assert applied.applied == ()
    finally:
        api.close()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"token": "someone-else"}, ("listing Nodes: HTTP 401 Unauthorized",)),
        ({"ca": "other"}, ("listing Nodes: ", "CERTIFICATE_VERIFY_FAILED")),
    ],
    ids=["wrong-token", "unknown-ca"],
)
def test_in_cluster_credentials_are_checked(
    control_plane: ControlPlane,
    service_account: str,
    tmp_path: Path,
    change: dict[str, str],
    words: tuple[str, ...],
) -> None:
    files = pod_files(tmp_path, control_plane, change.get("token", service_account))
    if "ca" in change:
        files["ca_file"] = str(issue.write_certs(tmp_path / "other").ca_cert)
    api = connect_audit(None, **files)
    try:
        with pytest.raises(ClusterError) as caught:
            read_for_audit(api, Collector(), timeout=30)
    finally:
        api.close()
    assert str(caught.value).startswith(words[0])
    assert all(w in str(caught.value) for w in words)


@pytest.mark.skipif(
    Path(SERVICE_TOKEN_FILENAME).exists(), reason="runs in a pod with a service account token"
)
@pytest.mark.parametrize("script", ["gpu-policy", "kubectl-gpu_policy"])
def test_in_a_pod_with_no_source_the_command_uses_the_service_account(
    tmp_path: Path, script: str
) -> None:
    # KUBERNETES_SERVICE_HOST says "in a pod": with no --kubeconfig and no dumps (and, for the
    # plugin, no kubeconfig file, as kubectl) the command loads the in-cluster config, which
    # wants the token the kubelet mounts. Without a pod's files, one line and exit 2 (before
    # any connection: the address is never reached).
    program = Path(sys.executable).parent / script
    if not program.exists():
        pytest.skip("needs the installed package (pip install -e .)")
    env = {
        "PATH": str(program.parent),
        "HOME": str(tmp_path),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    done = subprocess.run(
        [str(program), "audit", "--policy", str(AFTER / "policy.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "gpu-policy audit: in-cluster configuration (the pod's service account): Service "
        "token file does not exist. Give --kubeconfig, or run it in a pod that mounts its "
        "service account token"
    ]
