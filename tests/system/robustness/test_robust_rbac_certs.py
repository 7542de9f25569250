"""The chart's RBAC for the self-managed certificates, against the calls the server really makes.

The chart is rendered with its defaults; the certificate managers are built from the
environment the chart gives the server (``CertManagerSettings.from_env``) and run against the
real API server holding the webhook configurations the chart renders, as the chart's
ServiceAccount bound only to the ``-certificates`` Role and ClusterRole. They go through a first
start, a second replica, two replicas racing, a renewal, a deleted Secret, a caBundle edited by
hand and a CA rotation; every request is taken from the fault proxy's log with the API server's
answer. Its authorizer must refuse none of them, must refuse calls outside the rules, and the
rules must grant nothing those calls do not use.
test_robust_rbac.py does the same for the cluster watch; together they cover every rule.
"""

from __future__ import annotations

import base64
import datetime as dt
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.certs_helpers import Clock, RacingStore
from tests.support.chart_helpers import TOOLS, Rendered, Renderer
from tests.support.cluster import LiveCluster, running_cluster
from tests.support.controlplane import ControlPlane
from webhook.certs import rotation
from webhook.certs.manager import CertManager
from webhook.kube.certs import KubeCertStore
from webhook.server.settings import CertManagerSettings

pytestmark = [pytest.mark.slow]

Call = tuple[str, str, str, str | None, str | None]  # verb, group, resource, namespace, name


def render() -> Rendered:
    helm = shutil.which("helm") or str(TOOLS / "helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not on PATH nor in .cache/tools (run `make tools`)")
    return Renderer(helm).render()


def settings_of(rendered: Rendered) -> CertManagerSettings:
    (container,) = rendered.one("Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = CertManagerSettings.from_env(env)
    assert settings is not None, "the default render is in self-managed mode"
    return settings


def _call(method: str, path: str, verb: str, resource: str | None) -> Call:
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    namespace = rest[1] if rest[0] == "namespaces" else None
    tail = rest[2:] if namespace else rest
    name = tail[1] if len(tail) == 2 else None
    return verb, group, resource or path, namespace, name


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: What the certificates' rules must not allow, tried as the ServiceAccount after the scenario.
OUTSIDE = (
    ("get", "secrets", "gpu-policy", "someone-elses-secret"),
    ("update", "secrets", "kube-system", "gpw-gpu-policy-webhook-tls"),
    ("patch", "mutatingwebhookconfigurations", None, "x"),
    ("delete", "secrets", "gpu-policy", "gpw-gpu-policy-webhook-tls"),
)


def install_rbac(kube: LiveCluster, rendered: Rendered) -> tuple[str, str]:
    """The chart's ServiceAccount with the certificates' Role and ClusterRole only, created in
    the cluster; (namespace, name) of the ServiceAccount."""
    for kind in RBAC_KINDS:
        for obj in rendered.all(kind):
            if kind == "ServiceAccount" or obj["metadata"]["name"].endswith("-certificates"):
                kube.add(obj)
    account = rendered.one("ServiceAccount")["metadata"]
    return account["namespace"], account["name"]


def try_outside(api: client.ApiClient) -> dict[tuple[str, str, str | None, str | None], int]:
    """The HTTP status the API server gives each call of OUTSIDE."""
    core = client.CoreV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    attempts = {
        OUTSIDE[0]: lambda: core.read_namespaced_secret("someone-elses-secret", "gpu-policy"),
        OUTSIDE[1]: lambda: core.replace_namespaced_secret(
            "gpw-gpu-policy-webhook-tls", "kube-system", {"metadata": {"name": "x"}}
        ),
        OUTSIDE[2]: lambda: admission.patch_mutating_webhook_configuration("x", {}),
        OUTSIDE[3]: lambda: core.delete_namespaced_secret(
            "gpw-gpu-policy-webhook-tls", "gpu-policy"
        ),
    }
    out = {}
    for call, attempt in attempts.items():
        try:
            attempt()
            out[call] = 200
        except ApiException as e:
            out[call] = e.status
    return out


def recorded_calls(
    plane: ControlPlane, tmp: Path, rendered: Rendered
) -> tuple[list[Call], list[int], dict[Any, int]]:
    """Every call of the scenario as the chart's ServiceAccount with the certificates' rules,
    the real API server's answer to each, and its answers to the calls of OUTSIDE."""
    settings = settings_of(rendered)
    clock = Clock()
    clients: list[client.ApiClient] = []
    with running_cluster(plane) as kube:
        kube.ensure_namespace(settings.secret[0])
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            kube.add(rendered.one(kind))
        kube.act_as_service_account(*install_rbac(kube, rendered))

        def replica(name: str, store_class: Any = KubeCertStore, *extra: Any) -> CertManager:
            api = client.ApiClient(client.Configuration(host=kube.url))
            clients.append(api)
            store = store_class(
                *extra,
                api,
                secret=settings.secret,
                mutating=settings.mutating,
                validating=settings.validating,
            )
            return CertManager(store, service=settings.service, tls_dir=tmp / name, clock=clock)

        try:
            # Two replicas start together: one create wins, the other gets 409 and adopts.
            barrier = threading.Barrier(2)
            a, b = (replica(n, RacingStore, barrier) for n in ("a", "b"))
            threads = [threading.Thread(target=m.run_once) for m in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            replica("c").run_once()  # a later replica reads and adopts
            clock.advance(dt.timedelta(days=61))  # serving certificate renewed
            a.run_once()
            namespace, secret = settings.secret
            kube.delete("Secret", secret, namespace=namespace)
            a.run_once()  # put back, next CA introduced

            def edit(obj: dict[str, Any]) -> None:
                obj["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(b"x").decode()

            kube.modify("ValidatingWebhookConfiguration", settings.validating or "", edit)
            a.run_once()  # restored by a patch
            clock.advance(rotation.Timing().settle)
            a.run_once()  # the switch
            a.run_once()
            answers = list(kube.proxy.answers)
            outside = try_outside(clients[-1])
        finally:
            for api in clients:
                api.close()
    calls = [_call(r.method, r.path, r.verb, r.resource) for r, _ in answers]
    return calls, [status for _, status in answers], outside


@pytest.fixture(scope="module")
def scenario(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Call], list[dict[str, Any]], list[int], dict[Any, int]]:
    rendered = render()
    rules = [
        o
        for kind in ("Role", "ClusterRole")
        for o in rendered.all(kind)
        if o["metadata"]["name"].endswith("-certificates")
    ]
    calls, statuses, outside = recorded_calls(
        control_plane, tmp_path_factory.mktemp("rbac-certs"), rendered
    )
    return calls, rules, statuses, outside


def test_the_managers_make_the_expected_calls(scenario) -> None:
    calls, _, _, _ = scenario
    settings = settings_of(render())
    namespace, secret = settings.secret
    kinds = {(verb, group, resource) for verb, group, resource, _, _ in calls}
    assert kinds == {
        ("get", "", "secrets"),
        ("create", "", "secrets"),
        ("update", "", "secrets"),
        ("get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("get", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        ("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    }, kinds
    names = {name for verb, _, resource, _, name in calls if resource == "secrets"}
    assert names == {secret, None}, "one Secret by name, and creates (which carry none)"
    assert {ns for _, _, resource, ns, _ in calls if resource == "secrets"} == {namespace}


def test_every_call_is_permitted_by_the_chart(scenario) -> None:
    """The real API server's authorizer, given the certificates' rules, refused none of them
    (a 409 Conflict or a 404 is an answer the managers expect)."""
    calls, _, statuses, _ = scenario
    refused = sorted({c for c, s in zip(calls, statuses, strict=True) if s in (401, 403)}, key=str)
    assert not refused, refused


def test_nothing_is_granted_beyond_the_calls(scenario) -> None:
    calls, rules, _, _ = scenario
    used = {(group, resource, verb) for verb, group, resource, _, _ in calls}
    granted = set()
    for obj in rules:
        for rule in obj["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            if rule["verbs"] != ["create"]:
                assert rule.get("resourceNames"), f"{rule} should name its objects"
            granted |= {
                (g, r, v)
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
            }
    assert granted == used


def test_a_call_outside_the_rules_is_refused(scenario) -> None:
    """The API server refuses what the rules do not grant: the check above is not vacuous."""
    _, _, _, outside = scenario
    assert outside == dict.fromkeys(OUTSIDE, 403)
