"""The chart's RBAC against the API calls the server really makes.

The server's cluster watch (``GPU_POLICY_KUBE``: ``webhook.server.cluster.ClusterFeed``, the code
each gunicorn worker runs) is pointed at the fake API server of tests/kube with the policy the
chart renders (its ``configMapRef``); every request it makes while it lists, watches, loses its
watches and resumes is taken from the fake's request log. Each must be permitted by the
ClusterRole/Role the chart renders for the server's ServiceAccount (verb from the request,
resource, namespace, and resourceNames matched through ``fieldSelector=metadata.name=``, as the
API server's authorizer does for list and watch). And the rules must grant nothing beyond
those calls, except the extras documented in ``EXTRAS`` with their reason.

Not the server's: ``gpu-policy inventory --kubeconfig`` (which also lists pods) and the harness's
dry-run creates (webhook/kube/dryrun.py) run with the user's own credentials, never with the
chart's ServiceAccount, so they need no rule here.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from robust_server import REPO

from tests.support.apiserver import FakeApiServer
from tests.support.objects import PLUGIN_CONFIGMAP, load_example_cluster
from tests.support.waiting import wait_until

sys.path.insert(0, str(REPO / "tests" / "chart"))
from chart_helpers import TOOLS, Renderer

from webhook.server import Settings, create_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

#: (resource, verb) granted but not called, and why that is acceptable.
EXTRAS = {
    (
        "nodes",
        "get",
    ): "get of one object returns nothing list does not (the chart grants get/list/watch)",
    ("configmaps", "get"): "the one ConfigMap (resourceNames); list already returns it whole",
    ("nodepools", "get"): "as for nodes: the chart grants get/list/watch",
    (
        "nodepools",
        "watch",
    ): "watched where the CRD exists (tests/kube/test_autoscaled_controlplane.py); the fake has none",
}
NAMESPACE, NAME = PLUGIN_CONFIGMAP


def render_rbac() -> list[dict[str, Any]]:
    helm = shutil.which("helm") or str(TOOLS / "helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not on PATH nor in .cache/tools (run `make tools`)")
    rendered = Renderer(helm).render(
        "--set",
        f"devicePlugin.configMapRef.namespace={NAMESPACE}",
        "--set",
        f"devicePlugin.configMapRef.name={NAME}",
    )
    rules = [*rendered.all("ClusterRole"), *rendered.all("Role")]
    # The self-managed certificates' rules: proven against their calls in
    # test_robust_rbac_certs.py.
    return [o for o in rules if not o["metadata"]["name"].endswith("-certificates")], rendered


def recorded_calls(tmp: Path, policy_text: str) -> list[tuple[str, str, str | None, str | None]]:
    """(verb, resource, namespace, name by fieldSelector) of every call the server made."""
    policy = tmp / "policy.yaml"
    policy.write_text(policy_text)
    with FakeApiServer() as fake:
        load_example_cluster(fake)
        app = create_app(
            Settings(policy_file=policy, kube=str(fake.write_kubeconfig(tmp)), reload_interval=0)
        )
        cluster = app.extensions["gpu_policy"].cluster
        try:
            client = app.test_client()
            ready = wait_until(lambda: client.get("/readyz").status_code == 200, 15, poll=0.05)
            assert ready, client.get("/readyz").get_data(as_text=True)
            # Lose the watches and the history: the server resumes, then relists.
            fake.drop_watches()
            fake.wait_for(lambda: fake.open_watches >= 2, timeout=10)
            fake.compact()
            fake.drop_watches()
            fake.modify(
                "Node",
                next(iter(fake._objects["nodes"].values()))["metadata"]["name"],
                lambda n: n["metadata"].setdefault("labels", {}).update(touched="yes"),
            )
            fake.wait_for(lambda: fake.open_watches >= 2, timeout=10)
        finally:
            cluster.stop()
        requests = list(fake.requests)
    calls = []
    for r in requests:
        assert r.method == "GET", r
        if r.path.rstrip("/") in ("/api", "/apis"):
            # API discovery: a non-resource URL, not a resource a Role grants.
            calls.append(("discovery", "", r.path.rstrip("/"), None, None))
            continue
        parts = r.path.strip("/").split("/")
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        namespace = rest[1] if len(rest) == 3 and rest[0] == "namespaces" else None
        selector = r.query.get("fieldSelector", "")
        name = selector.split("=", 1)[1] if selector.startswith("metadata.name=") else None
        # A kind the fake does not serve (Karpenter's NodePools, answered 404) is still a
        # list or a watch to the API server's authorizer, which runs before it looks.
        verb = r.verb if r.verb != "other" else "watch" if "watch" in r.query else "list"
        calls.append((verb, group, rest[-1], namespace, name))
    return calls


Call = tuple[str, str, str, str | None, str | None]  # verb, group, resource, namespace, name


def permitted(rules_objects: list[dict[str, Any]], call: Call) -> bool:
    verb, group, resource, namespace, name = call
    for obj in rules_objects:
        scope = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
        if scope is not None and scope != namespace:
            continue
        for rule in obj["rules"]:
            if group not in rule.get("apiGroups", []):
                continue
            if resource not in rule.get("resources", []) and "*" not in rule["resources"]:
                continue
            if verb not in rule.get("verbs", []) and "*" not in rule["verbs"]:
                continue
            names = rule.get("resourceNames")
            if names and name not in names:
                continue
            return True
    return False


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> list[Call]:
    _, rendered = render_rbac()
    cm = rendered.one(
        "ConfigMap",
        next(
            o["metadata"]["name"]
            for o in rendered.all("ConfigMap")
            if o["metadata"]["name"].endswith("-policy")
        ),
    )
    return recorded_calls(tmp_path_factory.mktemp("rbac"), cm["data"]["policy.yaml"])


def test_the_server_makes_the_expected_calls(calls: list[Call]) -> None:
    kinds = set(calls)
    assert kinds == {
        ("list", "", "nodes", None, None),
        ("watch", "", "nodes", None, None),
        ("list", "", "configmaps", NAMESPACE, NAME),
        ("watch", "", "configmaps", NAMESPACE, NAME),
        # Karpenter's NodePools: the fake has no such CRD, so the server lists them once
        # (404: none) and would look again a minute later; with the CRD it watches them.
        ("list", "karpenter.sh", "nodepools", None, None),
        # API discovery: is resource.k8s.io/v1 served? (the fake serves none, so DRA is off)
        ("discovery", "", "/apis", None, None),
    }, kinds


def test_every_call_is_permitted_by_the_chart(calls: list[Call]) -> None:
    rules, _ = render_rbac()
    # Discovery needs no grant: the default ClusterRole system:discovery allows every
    # authenticated user to read /apis.
    refused = sorted({c for c in calls if c[0] != "discovery" and not permitted(rules, c)})
    assert not refused, refused


def test_nothing_is_granted_beyond_the_calls(calls: list[Call]) -> None:
    rules, _ = render_rbac()
    used = {(resource, verb) for verb, _, resource, _, _ in calls}
    granted = set()
    for obj in rules:
        for rule in obj["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            assert rule["apiGroups"] in ([""], ["karpenter.sh"]), rule
            granted |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
            if "configmaps" in rule["resources"]:
                assert rule.get("resourceNames") == [NAME], rule
    assert granted - used - set(EXTRAS) == set()
