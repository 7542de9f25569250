"""The audit CronJob's RBAC against the API calls ``gpu-policy audit --apply`` really makes.

The command the chart's CronJob runs is run twice against the real API server, as the audit's
ServiceAccount bound to the ClusterRole and Role the chart renders for it, with the policy the
chart renders (its ``configMapRef``), on a cluster whose GPU workloads in one
namespace go away between the runs, so that the second run deletes a report the first one
wrote, and a cluster report continuation (``gpu-policy-audit-2``, which a run with over 1 MB of
node findings writes) is left over from an earlier run, so that it deletes one of those too. Every request is taken from the fault proxy's log as (verb, API group, resource, namespace,
name) with the API server's answer; a server-side apply that created its object (201) is also a
``create`` (the API server authorizes it so: "Patch and apply" in the Kubernetes API concepts,
kubernetes/website content/en/docs/reference/using-api/api-concepts.md). The API server's
authorizer must refuse none of them, and the rules must grant nothing beyond them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.objects import PLUGIN_CONFIGMAP, load_example_cluster
from tests.support.chart_helpers import FULLNAME, TOOLS, Renderer
from tests.support.cli import run_cli
from tests.support.cluster import LiveCluster, running_cluster
from tests.support.controlplane import ControlPlane
from tests.system.robustness.robust_server import REPO
from webhook.audit import APIS as REPORT_APIS
from webhook.audit import LABELS, REPORT_NAME

pytestmark = [pytest.mark.slow]

AUDIT = f"{FULLNAME}-audit"
OBJECTS = REPO / "examples" / "audit" / "seed003-after" / "objects.yaml"
NAMESPACE, NAME = PLUGIN_CONFIGMAP
#: report API -> (group, cluster resource, namespaced resource)
APIS = {
    "wgpolicyk8s": ("wgpolicyk8s.io", "clusterpolicyreports", "policyreports"),
    "openreports": ("openreports.io", "clusterreports", "reports"),
}
Call = tuple[str, str, str, str | None, str | None]  # verb, group, resource, namespace, name


def render_args(api: str) -> list[str]:
    """``helm template`` arguments: the audit on, its report API, the policy's ConfigMap."""
    return [
        "--set",
        "audit.enabled=true",
        "--set",
        f"audit.reportApi={api}",
        "--set",
        f"devicePlugin.configMapRef.namespace={NAMESPACE}",
        "--set",
        f"devicePlugin.configMapRef.name={NAME}",
    ]


def render(api: str) -> tuple[list[dict[str, Any]], list[str], str]:
    """(the audit's ClusterRole and Role, the CronJob's arguments, the rendered policy)."""
    helm = shutil.which("helm") or str(TOOLS / "helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not on PATH nor in .cache/tools (run `make tools`)")
    rendered = Renderer(helm).render(*render_args(api))
    rules = [
        o
        for o in [*rendered.all("ClusterRole"), *rendered.all("Role")]
        if o["metadata"]["name"].startswith(AUDIT)
    ]
    cron = rendered.one("CronJob", AUDIT)
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    policy = rendered.one("ConfigMap", f"{FULLNAME}-policy")["data"]["policy.yaml"]
    return rules, container["command"], policy


def _call(method: str, verb: str, path: str) -> Call:
    parts = path.strip("/").split("/")
    if parts == ["apis"]:
        # API discovery (is resource.k8s.io/v1 served?): every authenticated user may, by the
        # default ClusterRole system:discovery.
        return ("discover", "", "/apis", None, None)
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    return (verb, group, rest[0], namespace, rest[1] if len(rest) > 1 else None)


def install_rbac(kube: LiveCluster, api: str) -> tuple[str, str]:
    """The audit's ServiceAccount, ClusterRole, Role and their bindings as the chart renders
    them, created in the cluster; (namespace, name) of the ServiceAccount."""
    helm = shutil.which("helm") or str(TOOLS / "helm")
    rendered = Renderer(helm).render(*render_args(api))
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        for obj in rendered.all(kind):
            if obj["metadata"]["name"].startswith(AUDIT):
                kube.add(obj)
    account = rendered.one("ServiceAccount", AUDIT)["metadata"]
    return account["namespace"], account["name"]


def recorded_calls(plane: ControlPlane, tmp: Path, api: str) -> tuple[list[Call], list[int]]:
    """Every call of two runs of the CronJob's command as the audit's ServiceAccount, the
    second deleting a stale report; and the real API server's answer to each."""
    _, command, policy_text = render(api)
    policy = tmp / "policy.yaml"
    policy.write_text(policy_text)
    # The CronJob's arguments, with the policy file here and a kubeconfig (the fault proxy's,
    # forwarding the ServiceAccount's token) in place of the pod's service account.
    args = command[2:]
    args[args.index("--policy") + 1] = str(policy)
    objects = [d for d in yaml.safe_load(OBJECTS.read_text())["items"]]
    with running_cluster(plane) as kube:
        load_example_cluster(kube)
        kube.add_many(objects)
        kube.act_as_service_account(*install_rbac(kube, api))
        kubeconfig = str(kube.write_kubeconfig(tmp))
        first = run_cli("audit", "--kubeconfig", kubeconfig, *args)
        assert first.returncode == 0, first.stderr
        for obj in objects:
            if obj["metadata"]["namespace"] == "pii":
                kube.delete(obj["kind"], obj["metadata"]["name"], namespace="pii")
        api_version, _, cluster_kind = REPORT_APIS[api]
        leftover = {"name": f"{REPORT_NAME}-2", "labels": dict(LABELS)}
        kube.add({"apiVersion": api_version, "kind": cluster_kind, "metadata": leftover})
        second = run_cli("audit", "--kubeconfig", kubeconfig, *args)
        assert second.returncode == 0, second.stderr
        assert "deleted, from an earlier run" in second.stderr
        answers = list(kube.proxy.answers)
    calls = [_call(r.method, r.verb, r.path) for r, _ in answers]
    # A server-side apply that made its object is authorized as a create too (201 Created).
    for r, status in answers:
        if r.verb == "patch" and status == 201:
            _, group, resource, namespace, _ = _call(r.method, r.verb, r.path)
            calls.append(("create", group, resource, namespace, None))
    return calls, [status for _, status in answers]


@pytest.fixture(scope="module", params=list(APIS))
def recorded(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    report_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, list[Call], list[int]]:
    api = request.param
    calls, statuses = recorded_calls(
        control_plane, tmp_path_factory.mktemp(f"rbac-audit-{api}"), api
    )
    return api, calls, statuses


@pytest.fixture(scope="module")
def api_calls(recorded: tuple[str, list[Call], list[int]]) -> tuple[str, list[Call]]:
    return recorded[0], recorded[1]


def test_the_audit_makes_the_expected_calls(api_calls: tuple[str, list[Call]]) -> None:
    api, calls = api_calls
    group, cluster_reports, reports = APIS[api]
    assert {(v, g, r) for v, g, r, _, _ in calls} == {
        ("get", "", "configmaps"),
        ("list", "", "nodes"),
        ("list", "", "pods"),
        *(("list", "apps", r) for r in ("deployments", "statefulsets", "daemonsets")),
        ("list", "apps", "replicasets"),
        ("list", "batch", "jobs"),
        ("list", "batch", "cronjobs"),
        # Karpenter's NodePools (no such CRD here: 404, the audit reads none).
        ("list", "karpenter.sh", "nodepools"),
        # v1.36 serves resource.k8s.io/v1 (API discovery says so): the audit lists the DRA kinds.
        ("discover", "", "/apis"),
        *(
            ("list", "resource.k8s.io", r)
            for r in ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
        ),
        *((verb, group, r) for r in (cluster_reports, reports) for verb in ("list", "patch")),
        ("create", group, cluster_reports),
        ("create", group, reports),
        ("delete", group, reports),
        ("delete", group, cluster_reports),
    }
    assert {(n, m) for v, _, r, n, m in calls if r == "configmaps"} == {(NAMESPACE, NAME)}


def test_every_call_is_permitted_by_the_chart(recorded: tuple[str, list[Call], list[int]]) -> None:
    """The real API server's authorizer, given the chart's rules, refused none of them."""
    _, calls, statuses = recorded
    answered = calls[: len(statuses)]
    refused = sorted(
        {c for c, s in zip(answered, statuses, strict=True) if s in (401, 403)}, key=str
    )
    assert not refused, refused
    # Only Karpenter's NodePools are not served here (no CRD): 404.
    failed = {c for c, s in zip(answered, statuses, strict=True) if s >= 400}
    assert {c[2] for c in failed} <= {"nodepools"}, failed


def test_nothing_is_granted_beyond_the_calls(api_calls: tuple[str, list[Call]]) -> None:
    api, calls = api_calls
    rules, _, _ = render(api)
    used = {(g, r, v) for v, g, r, _, _ in calls if v != "discover"}
    granted = set()
    for obj in rules:
        for rule in obj["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            granted |= {
                (g, r, v)
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
            }
            if "configmaps" in rule["resources"]:
                assert obj["kind"] == "Role" and obj["metadata"]["namespace"] == NAMESPACE
                assert rule.get("resourceNames") == [NAME], rule
    assert granted == used
