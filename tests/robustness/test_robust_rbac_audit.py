"""The audit CronJob's RBAC against the API calls ``gpu-policy audit --apply`` really makes.

The command the chart's CronJob runs is run twice against the fake API server, with the
policy the chart renders (its ``configMapRef``), on a cluster whose GPU workloads in one
namespace go away between the runs, so that the second run deletes a report the first one
wrote, and a cluster report continuation (``gpu-policy-audit-2``, which a run with over 1 MB of
node findings writes) is left over from an earlier run, so that it deletes one of those too. Every request is taken from the fake's request log as (verb, API group, resource,
namespace, name); a server-side apply that created its object is also a ``create`` (the API
server authorizes it so: "Patch and apply" in the Kubernetes API concepts,
kubernetes/website content/en/docs/reference/using-api/api-concepts.md). The ClusterRole and
Role the chart renders for the audit's ServiceAccount must permit every call, and grant
nothing beyond them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from robust_server import REPO

from tests.support.apiserver import FakeApiServer
from tests.support.cli import run_cli
from tests.support.objects import PLUGIN_CONFIGMAP, load_example_cluster
from webhook.audit import APIS as REPORT_APIS
from webhook.audit import LABELS, REPORT_NAME

sys.path.insert(0, str(REPO / "tests" / "chart"))
from chart_helpers import FULLNAME, TOOLS, Renderer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

AUDIT = f"{FULLNAME}-audit"
OBJECTS = REPO / "examples" / "audit" / "seed003-after" / "objects.yaml"
NAMESPACE, NAME = PLUGIN_CONFIGMAP
#: report API -> (group, cluster resource, namespaced resource)
APIS = {
    "wgpolicyk8s": ("wgpolicyk8s.io", "clusterpolicyreports", "policyreports"),
    "openreports": ("openreports.io", "clusterreports", "reports"),
}
Call = tuple[str, str, str, str | None, str | None]  # verb, group, resource, namespace, name


def render(api: str) -> tuple[list[dict[str, Any]], list[str], str]:
    """(the audit's ClusterRole and Role, the CronJob's arguments, the rendered policy)."""
    helm = shutil.which("helm") or str(TOOLS / "helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not on PATH nor in .cache/tools (run `make tools`)")
    rendered = Renderer(helm).render(
        "--set",
        "audit.enabled=true",
        "--set",
        f"audit.reportApi={api}",
        "--set",
        f"devicePlugin.configMapRef.namespace={NAMESPACE}",
        "--set",
        f"devicePlugin.configMapRef.name={NAME}",
    )
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
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    name = rest[1] if len(rest) > 1 else None
    if verb == "other" and method == "GET":
        # A kind the fake does not serve (a CRD it lacks, answered 404): to RBAC, still a
        # list (or a get), the verb the API server authorizes before it looks for the kind.
        verb = "get" if name else "list"
    return (verb, group, rest[0], namespace, name)


def recorded_calls(tmp: Path, api: str) -> list[Call]:
    """Every call of two runs of the CronJob's command, the second deleting a stale report."""
    _, command, policy_text = render(api)
    policy = tmp / "policy.yaml"
    policy.write_text(policy_text)
    # The CronJob's arguments, with the policy file here and a kubeconfig in place of the
    # pod's service account (the same calls; tests/kube/test_audit_live.py drives in-cluster).
    args = command[2:]
    args[args.index("--policy") + 1] = str(policy)
    objects = [d for d in yaml.safe_load(OBJECTS.read_text())["items"]]
    with FakeApiServer() as fake:
        load_example_cluster(fake)
        fake.add_many(objects)
        kubeconfig = str(fake.write_kubeconfig(tmp))
        first = run_cli("audit", "--kubeconfig", kubeconfig, *args)
        assert first.returncode == 0, first.stderr
        for obj in objects:
            if obj["metadata"]["namespace"] == "pii":
                fake.delete(obj["kind"], obj["metadata"]["name"], namespace="pii")
        api_version, _, cluster_kind = REPORT_APIS[api]
        leftover = {"name": f"{REPORT_NAME}-2", "labels": dict(LABELS)}
        fake.add({"apiVersion": api_version, "kind": cluster_kind, "metadata": leftover})
        second = run_cli("audit", "--kubeconfig", kubeconfig, *args)
        assert second.returncode == 0, second.stderr
        assert "deleted, from an earlier run" in second.stderr
        requests = list(fake.requests)
        created = [
            e
            for e in fake._events
            if e.type == "ADDED"
            and e.resource in APIS[api][1:]
            and e.new["metadata"]["name"] == REPORT_NAME
        ]
    calls = [_call(r.method, r.verb, r.path) for r in requests]
    for event in created:
        meta = event.new["metadata"]
        calls.append(("create", APIS[api][0], event.resource, meta.get("namespace"), None))
    return calls


def permitted(rules_objects: list[dict[str, Any]], call: Call) -> bool:
    verb, group, resource, namespace, name = call
    for obj in rules_objects:
        scope = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
        if scope is not None and scope != namespace:
            continue
        for rule in obj["rules"]:
            names = rule.get("resourceNames")
            if (
                group in rule["apiGroups"]
                and resource in rule["resources"]
                and verb in rule["verbs"]
                and (not names or name in names)
            ):
                return True
    return False


@pytest.fixture(scope="module", params=list(APIS))
def api_calls(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[Call]]:
    api = request.param
    return api, recorded_calls(tmp_path_factory.mktemp(f"rbac-audit-{api}"), api)


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
        # Karpenter's NodePools (the fake serves no such CRD: the audit reads none).
        ("list", "karpenter.sh", "nodepools"),
        *((verb, group, r) for r in (cluster_reports, reports) for verb in ("list", "patch")),
        ("create", group, cluster_reports),
        ("create", group, reports),
        ("delete", group, reports),
        ("delete", group, cluster_reports),
    }
    assert {(n, m) for v, _, r, n, m in calls if r == "configmaps"} == {(NAMESPACE, NAME)}


def test_every_call_is_permitted_by_the_chart(api_calls: tuple[str, list[Call]]) -> None:
    api, calls = api_calls
    rules, _, _ = render(api)
    refused = sorted({c for c in calls if not permitted(rules, c)}, key=str)
    assert not refused, refused


def test_nothing_is_granted_beyond_the_calls(api_calls: tuple[str, list[Call]]) -> None:
    api, calls = api_calls
    rules, _, _ = render(api)
    used = {(g, r, v) for v, g, r, _, _ in calls}
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
