"""The chart's RBAC for the self-managed certificates, against the calls the server really makes.

The chart is rendered with its defaults; the certificate managers are built from the
environment the chart gives the server (``CertManagerSettings.from_env``) and run against the
fake API server holding the webhook configurations the chart renders. They go through a first
start, a second replica, two replicas racing, a renewal, a deleted Secret, a caBundle edited by
hand and a CA rotation; every request is taken from the fake's log. Each must be permitted by
the rules of the ``-certificates`` Role and ClusterRole, matched as the API server's authorizer
does (API group, resource, verb, namespace, and the object's name against resourceNames; a
create carries no name), and the rules must grant nothing those calls do not use.
test_robust_rbac.py does the same for the cluster watch; together they cover every rule.
"""

from __future__ import annotations

import base64
import datetime as dt
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from robust_server import REPO

from tests.support.apiserver import FakeApiServer

sys.path.insert(0, str(REPO / "tests" / "chart"))
sys.path.insert(0, str(REPO / "tests" / "certs"))
from certs_helpers import Clock, RacingStore
from chart_helpers import TOOLS, Rendered, Renderer

from webhook.certs import rotation
from webhook.certs.manager import CertManager
from webhook.kube.certs import KubeCertStore
from webhook.server.settings import CertManagerSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

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


def recorded_calls(tmp: Path, rendered: Rendered) -> list[Call]:
    settings = settings_of(rendered)
    clock = Clock()
    clients: list[client.ApiClient] = []
    with FakeApiServer() as fake:
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            fake.add(rendered.one(kind))

        def replica(name: str, store_class: Any = KubeCertStore, *extra: Any) -> CertManager:
            api = client.ApiClient(client.Configuration(host=fake.url))
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
            fake.delete("Secret", secret, namespace=namespace)
            a.run_once()  # put back, next CA introduced

            def edit(obj: dict[str, Any]) -> None:
                obj["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(b"x").decode()

            fake.modify("ValidatingWebhookConfiguration", settings.validating or "", edit)
            a.run_once()  # restored by a patch
            clock.advance(rotation.Timing().settle)
            a.run_once()  # the switch
            a.run_once()
        finally:
            for api in clients:
                api.close()
        return [_call(r.method, r.path, r.verb, r.resource) for r in list(fake.requests)]


def permitted(rules_objects: list[dict[str, Any]], call: Call) -> bool:
    verb, group, resource, namespace, name = call
    for obj in rules_objects:
        if obj["kind"] == "Role" and obj["metadata"]["namespace"] != namespace:
            continue
        for rule in obj["rules"]:
            if group not in rule["apiGroups"] or resource not in rule["resources"]:
                continue
            if verb not in rule["verbs"]:
                continue
            names = rule.get("resourceNames")
            # The authorizer sees no name for a create: a rule with names never allows one.
            if names and (verb == "create" or name not in names):
                continue
            return True
    return False


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Call], list[dict[str, Any]]]:
    rendered = render()
    rules = [
        o
        for kind in ("Role", "ClusterRole")
        for o in rendered.all(kind)
        if o["metadata"]["name"].endswith("-certificates")
    ]
    return recorded_calls(tmp_path_factory.mktemp("rbac-certs"), rendered), rules


def test_the_managers_make_the_expected_calls(scenario) -> None:
    calls, _ = scenario
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
    calls, rules = scenario
    refused = sorted({c for c in calls if not permitted(rules, c)}, key=str)
    assert not refused, refused


def test_nothing_is_granted_beyond_the_calls(scenario) -> None:
    calls, rules = scenario
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
    """The matcher refuses what the authorizer would: the check above is not vacuous."""
    _, rules = scenario
    assert not permitted(rules, ("get", "", "secrets", "gpu-policy", "someone-elses-secret"))
    assert not permitted(
        rules, ("update", "", "secrets", "kube-system", "gpw-gpu-policy-webhook-tls")
    )
    assert not permitted(
        rules, ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, "x")
    )
    assert not permitted(
        rules, ("delete", "", "secrets", "gpu-policy", "gpw-gpu-policy-webhook-tls")
    )
