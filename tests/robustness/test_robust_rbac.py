"""The chart's RBAC against the API calls the server really makes.

The server's cluster watch (``GPU_POLICY_KUBE``: ``webhook.server.cluster.ClusterFeed``, the code
each gunicorn worker runs) is pointed at the real API server with the policy the chart renders
(its ``configMapRef``), as the chart's ServiceAccount bound to the ClusterRole/Role the chart
renders for it (a token from the TokenRequest API); every request it makes while it lists,
watches, loses its watches, resumes and relists is taken from the fault proxy's log, with the
API server's answer: its authorizer, applying the chart's rules, must refuse none (resourceNames
are matched through ``fieldSelector=metadata.name=`` for list and watch). And the rules must
grant nothing beyond those calls, except the extras documented in ``EXTRAS`` with their reason.

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

from tests.support.cluster import LiveCluster, running_cluster
from tests.support.controlplane import ControlPlane
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


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def install_rbac(kube: LiveCluster, rendered: Any) -> tuple[str, str]:
    """The chart's ServiceAccount and the server's RBAC objects (not the certificates' ones)
    created in the cluster; (namespace, name) of the ServiceAccount."""
    for kind in RBAC_KINDS:
        for obj in rendered.all(kind):
            if not obj["metadata"]["name"].endswith("-certificates"):
                kube.add(obj)
    account = rendered.one("ServiceAccount")["metadata"]
    return account["namespace"], account["name"]


def recorded_calls(
    plane: ControlPlane, tmp: Path, policy_text: str, rendered: Any
) -> tuple[list[tuple[str, str, str | None, str | None]], list[int]]:
    """(verb, resource, namespace, name by fieldSelector) of every call the server made as
    the chart's ServiceAccount, and the real API server's answer to each (its authorizer
    applying the chart's rules)."""
    policy = tmp / "policy.yaml"
    policy.write_text(policy_text)
    with running_cluster(plane) as kube:
        load_example_cluster(kube)
        kube.act_as_service_account(*install_rbac(kube, rendered))
        app = create_app(
            Settings(policy_file=policy, kube=str(kube.write_kubeconfig(tmp)), reload_interval=0)
        )
        cluster = app.extensions["gpu_policy"].cluster
        try:
            client = app.test_client()
            ready = wait_until(lambda: client.get("/readyz").status_code == 200, 60, poll=0.05)
            assert ready, client.get("/readyz").get_data(as_text=True)
            # Lose the watches: the server resumes.
            kube.drop_watches()
            kube.wait_for(lambda: kube.open_watches >= 2, timeout=60)
            # Lose the history too (the API server restarts): the server relists.
            kube.go_down("close")
            kube.expire_watches()
            kube.modify(
                "Node",
                "10.0.0.7",
                lambda n: n["metadata"].setdefault("labels", {}).update(touched="yes"),
            )
            kube.come_back()
            kube.wait_for(lambda: kube.count("nodes", "list") >= 2, timeout=60)
            kube.wait_for(lambda: kube.open_watches >= 2, timeout=60)
        finally:
            cluster.stop()
        answers = list(kube.proxy.answers)
    calls = []
    for r, _ in answers:
        assert r.method == "GET", r
        parts = r.path.strip("/").split("/")
        namespace = parts[3] if len(parts) == 5 and parts[2] == "namespaces" else None
        selector = r.query.get("fieldSelector", "")
        name = selector.split("=", 1)[1] if selector.startswith("metadata.name=") else None
        calls.append((r.verb, r.resource or r.path, namespace, name))
    return calls, [status for _, status in answers]


@pytest.fixture(scope="module")
def recorded(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[tuple[str, str, str | None, str | None]], list[int]]:
    _, rendered = render_rbac()
    cm = rendered.one(
        "ConfigMap",
        next(
            o["metadata"]["name"]
            for o in rendered.all("ConfigMap")
            if o["metadata"]["name"].endswith("-policy")
        ),
    )
    return recorded_calls(
        control_plane, tmp_path_factory.mktemp("rbac"), cm["data"]["policy.yaml"], rendered
    )


@pytest.fixture(scope="module")
def calls(
    recorded: tuple[list[tuple[str, str, str | None, str | None]], list[int]],
) -> list[tuple[str, str, str | None, str | None]]:
    return recorded[0]


def test_the_server_makes_the_expected_calls(
    calls: list[tuple[str, str, str | None, str | None]],
) -> None:
    kinds = {(verb, resource, namespace, name) for verb, resource, namespace, name in calls}
    assert kinds == {
        ("list", "nodes", None, None),
        ("watch", "nodes", None, None),
        ("list", "configmaps", NAMESPACE, NAME),
        ("watch", "configmaps", NAMESPACE, NAME),
    }, kinds


def test_every_call_is_permitted_by_the_chart(
    recorded: tuple[list[tuple[str, str, str | None, str | None]], list[int]],
) -> None:
    """The real API server's authorizer, given the chart's rules, refused none of them."""
    calls, statuses = recorded
    refused = sorted({c for c, status in zip(calls, statuses, strict=True) if status in (401, 403)})
    assert not refused, refused
    assert all(status < 400 for status in statuses), statuses


def test_nothing_is_granted_beyond_the_calls(
    calls: list[tuple[str, str, str | None, str | None]],
) -> None:
    rules, _ = render_rbac()
    used = {(resource, verb) for verb, resource, _, _ in calls}
    granted = set()
    for obj in rules:
        for rule in obj["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            assert rule["apiGroups"] == [""], rule
            granted |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
            if "configmaps" in rule["resources"]:
                assert rule.get("resourceNames") == [NAME], rule
    assert granted - used - set(EXTRAS) == set()
