"""certificates.mode=selfManaged, the default: no key material rendered, two renders identical,
the server told which Secret, Service and webhook configurations are its own, and RBAC for
exactly those. (The calls the server makes against that RBAC: tests/system/robustness.)"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from tests.support.chart_helpers import (
    CASES,
    CHART,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    Rendered,
    Renderer,
    webhooks,
)
from webhook.server.settings import CertManagerSettings

SECRET = f"{FULLNAME}-tls"


def _mode(case_id: str) -> str:
    case = CASES[case_id]
    values: dict[str, Any] = {}
    for f in case.values_files:
        values.update(yaml.safe_load(f.read_text()) or {})
    mode = (values.get("certificates") or {}).get("mode", "selfManaged")
    for setting in case.set_values:
        if setting.startswith("certificates.mode="):
            mode = setting.split("=", 1)[1]
    return str(mode)


SELF_MANAGED = [case_id for case_id in CASES if _mode(case_id) == "selfManaged"]
OTHER_MODES = ["mode=helm", "mode=certManager", "mode=existingSecret"]
CERT_ENV = {
    "GPU_POLICY_CERT_SECRET",
    "GPU_POLICY_SERVICE",
    "GPU_POLICY_MUTATING_WEBHOOK",
    "GPU_POLICY_VALIDATING_WEBHOOK",
    "GPU_POLICY_CERT_INTERVAL",
}


def _pod(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Deployment")["spec"]["template"]["spec"]


def _env(rendered: Rendered) -> dict[str, str]:
    (container,) = _pod(rendered)["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("case_id", SELF_MANAGED)
def test_two_renders_are_byte_identical(renderer: Renderer, case_id: str) -> None:
    """What Argo CD and Flux need: the same values render the same manifests, every time."""
    args = renderer.template_args(CASES[case_id].args())
    first, second = (renderer.run(args).stdout for _ in range(2))
    assert first == second
    assert "PRIVATE KEY" not in first and "BEGIN CERTIFICATE" not in first


@pytest.mark.parametrize("case_id", SELF_MANAGED)
def test_no_key_material_and_no_ca_bundle(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    assert rendered.all("Secret") == [], "the server creates its Secret itself"
    for kind, hook in webhooks(rendered):
        # Absent, not empty: `helm upgrade` then leaves the caBundle the server wrote alone.
        assert "caBundle" not in hook["clientConfig"], (kind, hook["name"])


def test_the_server_is_told_its_own_objects(renderer: Renderer, default_render: Rendered) -> None:
    env = _env(default_render)
    assert env["GPU_POLICY_CERT_SECRET"] == f"{NAMESPACE}/{SECRET}"
    service = default_render.one("Service")["metadata"]
    assert env["GPU_POLICY_SERVICE"] == f"{service['namespace']}/{service['name']}"
    assert (
        env["GPU_POLICY_MUTATING_WEBHOOK"]
        == default_render.one("MutatingWebhookConfiguration")["metadata"]["name"]
    )
    assert (
        env["GPU_POLICY_VALIDATING_WEBHOOK"]
        == default_render.one("ValidatingWebhookConfiguration")["metadata"]["name"]
    )
    settings = CertManagerSettings.from_env(env)
    assert settings is not None and settings.interval == 30 and settings.kube == "in-cluster"
    assert str(settings.tls_dir) == env["GPU_POLICY_TLS_DIR"]
    pod = _pod(default_render)
    assert pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert mount["mountPath"] == env["GPU_POLICY_TLS_DIR"] and not mount.get("readOnly")
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume == {"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    # The ServiceMonitor's default trusts ca.crt of the same Secret.
    monitor = renderer.render("--set", "serviceMonitor.enabled=true")
    tls = monitor.one("ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"]
    assert tls["ca"]["secret"] == {"name": SECRET, "key": "ca.crt"}


def _rules(rendered: Rendered, kind: str) -> list[dict[str, Any]]:
    return rendered.one(kind, f"{FULLNAME}-certificates")["rules"]


@pytest.mark.parametrize(
    ("set_values", "configurations"),
    [
        ([], ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]),
        (["webhook.mutating.enabled=false"], ["validatingwebhookconfigurations"]),
        (["webhook.validating.enabled=false"], ["mutatingwebhookconfigurations"]),
    ],
    ids=["both configurations", "validating only", "mutating only"],
)
def test_rbac_names_the_one_secret_and_the_configurations(
    renderer: Renderer, set_values: list[str], configurations: list[str]
) -> None:
    args = [a for v in set_values for a in ("--set", v)]
    rendered = renderer.render(*args)
    assert _rules(rendered, "Role") == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [SECRET],
            "verbs": ["get", "update"],
        },
        # Kubernetes cannot limit create to a name (the name is not known when it decides).
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    assert rendered.one("Role", f"{FULLNAME}-certificates")["metadata"]["namespace"] == NAMESPACE
    assert _rules(rendered, "ClusterRole") == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": [resource],
            "resourceNames": [FULLNAME],
            "verbs": ["get", "patch"],
        }
        for resource in configurations
    ]
    subject = [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    for kind, role_kind in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        binding = rendered.one(kind, f"{FULLNAME}-certificates")
        assert binding["subjects"] == subject
        assert binding["roleRef"]["kind"] == role_kind
        assert binding["roleRef"]["name"] == f"{FULLNAME}-certificates"
    env = _env(rendered)
    assert ("GPU_POLICY_MUTATING_WEBHOOK" in env) == (
        "mutatingwebhookconfigurations" in configurations
    )


def test_refused_without_a_webhook_configuration(renderer: Renderer) -> None:
    error = renderer.fails(
        "--set", "webhook.mutating.enabled=false", "--set", "webhook.validating.enabled=false"
    )
    assert "selfManaged publishes the CA in the webhook configurations" in error


@pytest.mark.parametrize("case_id", OTHER_MODES)
def test_other_modes_mount_their_secret_and_get_no_certificate_rbac(
    renderer: Renderer, case_id: str
) -> None:
    rendered = renderer.render_case(CASES[case_id])
    assert not CERT_ENV & set(_env(rendered))
    pod = _pod(rendered)
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert "secret" in volume
    for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
        assert rendered.maybe(kind, f"{FULLNAME}-certificates") is None


def test_no_token_when_nothing_talks_to_the_api_server(renderer: Renderer) -> None:
    rendered = renderer.render(
        "-f",
        str(CHART / "ci" / "existing-secret-values.yaml"),
        "--set",
        "server.watchCluster=false",
    )
    assert _pod(rendered)["automountServiceAccountToken"] is False
    for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
        assert rendered.all(kind) == []


def _notes(helm: str, *args: str) -> str:
    proc = subprocess.run(
        [helm, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"KUBECONFIG": "/nonexistent", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_say_who_makes_the_certificates_and_warn_about_gitops_in_helm_mode(
    helm_bin: str,
) -> None:
    notes = _notes(helm_bin)
    assert f"made and renewed by the server itself, kept in Secret {SECRET}" in notes
    assert "WARNING" not in notes
    helm_notes = _notes(helm_bin, "--set", "certificates.mode=helm")
    assert "WARNING: certificates.mode=helm" in helm_notes
    assert "NEW CA on every sync" in helm_notes
