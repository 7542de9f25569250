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
from pathlib import Path
from typing import Any

import pytest

from tests.objects import PLUGIN_CONFIGMAP, load_example_cluster
from tests.support.chart_helpers import TOOLS, Renderer
from tests.support.cluster import LiveCluster, running_cluster
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until
from webhook.server import Settings, create_app

pytestmark = [pytest.mark.slow]

#: (resource, verb) granted but not called, and why that is acceptable.
EXTRAS = {
    (
        "nodes",
        "get",
    ): "get of one object returns nothing list does not (the chart grants get/list/watch)",
    ("configmaps", "get"): "the one ConfigMap (resourceNames); list already returns it whole",
    **{
        (r, "get"): "as for nodes: get of one object returns nothing list does not"
        for r in ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
    },
    ("resourceclaims", "list"): "the claims themselves: watched when the policy reads claims",
    ("resourceclaims", "watch"): "the claims themselves: watched when the policy reads claims",
    ("nodepools", "get"): "as for nodes: the chart grants get/list/watch",
    (
        "nodepools",
        "watch",
    ): "watched where Karpenter's CRD exists (tests/cluster/kube/test_autoscaled_controlplane.py)",
}
#: Answers the server expects: Karpenter's NodePools are not served here (no CRD): 404.
EXPECTED_404 = {("list", "karpenter.sh", "nodepools", None, None)}
Call = tuple[str, str, str, str | None, str | None]  # verb, group, resource, namespace, name
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
) -> tuple[list[Call], list[int]]:
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
            # Every kind it reads is watched again (a watch opens once its list answered).
            watched = ("nodes", "configmaps", "deviceclasses", "resourceslices")
            assert kube.wait_for(
                lambda: (
                    all(kube.count(r, "watch") >= 2 for r in watched)
                    and kube.count("resourceclaimtemplates", "watch") >= 1
                ),
                timeout=120,
            ), [(r.resource, r.verb) for r in kube.requests]
        finally:
            cluster.stop()
        answers = list(kube.proxy.answers)
    calls = []
    for r, _ in answers:
        assert r.method == "GET", r
        parts = r.path.strip("/").split("/")
        if parts == ["apis"]:
            # API discovery (is resource.k8s.io/v1 served?): granted to every authenticated
            # user by the default ClusterRole system:discovery.
            calls.append(("discover", "", "/apis", None, None))
            continue
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        namespace = rest[1] if len(rest) == 3 and rest[0] == "namespaces" else None
        selector = r.query.get("fieldSelector", "")
        name = selector.split("=", 1)[1] if selector.startswith("metadata.name=") else None
        calls.append((r.verb, group, rest[-1], namespace, name))
    return calls, [status for _, status in answers]


@pytest.fixture(scope="module")
def recorded(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Call], list[int]]:
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
    recorded: tuple[list[Call], list[int]],
) -> list[Call]:
    return recorded[0]


def test_the_server_makes_the_expected_calls(calls: list[Call]) -> None:
    kinds = set(calls)
    # Every call is one of these (a watch opens once its list answered: which of the DRA
    # watches are open when the scenario ends depends on timing), and the lists all happen.
    dra = {
        (verb, "resource.k8s.io", r, None, None)
        for r in ("deviceclasses", "resourceslices", "resourceclaimtemplates")
        for verb in ("list", "watch")
    }
    required = {
        ("list", "", "nodes", None, None),
        ("watch", "", "configmaps", NAMESPACE, NAME),
        ("list", "", "configmaps", NAMESPACE, NAME),
        # Karpenter's NodePools: no such CRD here, so the server lists them (404: none) and
        # would look again later; with the CRD it watches them.
        ("list", "karpenter.sh", "nodepools", None, None),
        # API discovery: v1.36 serves resource.k8s.io/v1, so the server reads the DRA kinds.
        ("discover", "", "/apis", None, None),
        *(c for c in dra if c[0] == "list"),
    }
    allowed = required | dra | {("watch", "", "nodes", None, None)}
    assert required <= kinds <= allowed, kinds


def test_every_call_is_permitted_by_the_chart(recorded: tuple[list[Call], list[int]]) -> None:
    """The real API server's authorizer, given the chart's rules, refused none of them."""
    calls, statuses = recorded
    refused = sorted({c for c, status in zip(calls, statuses, strict=True) if status in (401, 403)})
    assert not refused, refused
    unexpected = {(c, s) for c, s in zip(calls, statuses, strict=True) if s >= 400}
    assert {c for c, _ in unexpected} <= EXPECTED_404, unexpected


def test_nothing_is_granted_beyond_the_calls(calls: list[Call]) -> None:
    rules, _ = render_rbac()
    used = {(resource, verb) for verb, _, resource, _, _ in calls if verb != "discover"}
    granted = set()
    for obj in rules:
        for rule in obj["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            assert rule["apiGroups"] in ([""], ["resource.k8s.io"], ["karpenter.sh"]), rule
            granted |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
            if "configmaps" in rule["resources"]:
                assert rule.get("resourceNames") == [NAME], rule
    assert granted - used - set(EXTRAS) == set()
