"""The chart renders with the real helm, and what it renders is valid Kubernetes.

Each case (every ci/*-values.yaml and each certificate mode) is rendered once; every
document is validated with kubernetes-validate, strictly (unknown fields are errors),
against the schemas of each supported Kubernetes minor version. Custom resources
(cert-manager, Prometheus Operator) have no schema there; their shape is asserted instead.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.support.chart_helpers import CASES, CHART, CI_FILES, CRD_GROUPS, KUBE_VERSIONS, Renderer

pytestmark = pytest.mark.slow

_validated: set[tuple[str, str]] = set()


def _is_crd(doc: dict[str, Any]) -> bool:
    return doc["apiVersion"].split("/")[0] in CRD_GROUPS


def test_supported_versions_have_schemas() -> None:
    """The installed kubernetes-validate ships schemas for every version we claim."""
    shipped = {".".join(v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions()}
    assert set(KUBE_VERSIONS) <= shipped, f"kubernetes-validate only has {sorted(shipped)}"


def test_helm_lint_defaults(renderer: Renderer) -> None:
    proc = renderer.run(["lint", "--strict", str(CHART)])
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("values_file", CI_FILES, ids=lambda p: p.name)
def test_helm_lint_ci_values(renderer: Renderer, values_file) -> None:
    proc = renderer.run(["lint", "--strict", str(CHART), "-f", str(values_file)])
    assert "0 chart(s) failed" in proc.stdout


def test_ci_values_cover_the_modes_and_options() -> None:
    names = {p.name for p in CI_FILES}
    for expected in (
        "default-values.yaml",
        "cert-manager-values.yaml",
        "existing-secret-values.yaml",
        "networkpolicy-servicemonitor-values.yaml",
        "single-replica-values.yaml",
    ):
        assert expected in names


@pytest.mark.parametrize("case_id", list(CASES))
def test_renders_unique_named_objects(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    assert rendered.docs, "nothing rendered"
    seen = set()
    for doc in rendered.docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys()
        key = (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        assert key not in seen, f"{key} rendered twice"
        seen.add(key)
    for kind in ("Deployment", "Service", "ServiceAccount"):
        assert kind in rendered.kinds()


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case_id", list(CASES))
def test_manifests_validate_against_kubernetes(
    renderer: Renderer, case_id: str, version: str
) -> None:
    rendered = renderer.render_case(CASES[case_id])
    checked = 0
    for doc in rendered.docs:
        if _is_crd(doc):
            continue
        # The same object often renders identically in several cases: validate it once.
        key = (version, json.dumps(doc, sort_keys=True))
        if key in _validated:
            checked += 1
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{doc['kind']} {doc['metadata']['name']} invalid on {version}: {path}: {exc}"
            )
        _validated.add(key)
        checked += 1
    assert checked >= 5


def test_validation_is_not_vacuous(default_render) -> None:
    """A misspelt field in a rendered Deployment is caught by the same validation."""
    deployment = json.loads(json.dumps(default_render.one("Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)


def test_kube_version_floor(renderer: Renderer) -> None:
    """matchConditions need 1.30: older clusters are refused at install time."""
    err = renderer.fails("--kube-version", "1.29.0")
    assert "kubeVersion" in err or "incompatible" in err
    renderer.render("--kube-version", "1.30.0")


def test_cert_manager_shape(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["mode=certManager"])
    issuers = {d["metadata"]["name"]: d for d in rendered.all("Issuer")}
    certs = {d["metadata"]["name"]: d for d in rendered.all("Certificate")}
    selfsigned, ca_issuer = (
        issuers["gpw-gpu-policy-webhook-selfsigned"],
        issuers["gpw-gpu-policy-webhook-ca"],
    )
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca_cert = certs["gpw-gpu-policy-webhook-ca"]
    assert ca_cert["spec"]["isCA"] is True
    assert ca_cert["spec"]["issuerRef"]["name"] == "gpw-gpu-policy-webhook-selfsigned"
    assert ca_issuer["spec"] == {"ca": {"secretName": ca_cert["spec"]["secretName"]}}
    serving = certs["gpw-gpu-policy-webhook-serving"]
    spec = serving["spec"]
    assert spec["issuerRef"] == {
        "name": "gpw-gpu-policy-webhook-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert spec["secretName"] == "gpw-gpu-policy-webhook-tls"
    assert "gpw-gpu-policy-webhook.gpu-policy.svc" in spec["dnsNames"]
    assert "server auth" in spec["usages"]
    for doc in [*rendered.all("Issuer"), *rendered.all("Certificate")]:
        assert doc["apiVersion"] == "cert-manager.io/v1"
        assert doc["metadata"]["namespace"] == "gpu-policy"
    # No Secret from the chart: cert-manager writes it.
    assert rendered.all("Secret") == []


def test_cert_manager_external_issuer(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/cert-manager-issuer-values.yaml"])
    assert rendered.all("Issuer") == []
    (serving,) = rendered.all("Certificate")
    assert serving["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer",
        "name": "cluster-ca",
        "group": "cert-manager.io",
    }


def test_service_monitor_shape(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/networkpolicy-servicemonitor-values.yaml"])
    sm = rendered.one("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = rendered.one("Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["scheme"] == "https"
    assert endpoint["path"] == "/metrics"
    tls = endpoint["tlsConfig"]
    assert tls["serverName"] == "gpw-gpu-policy-webhook.gpu-policy.svc"
    assert tls["ca"]["secret"] == {"name": "gpw-gpu-policy-webhook-tls", "key": "ca.crt"}


# --- values the chart refuses -------------------------------------------------------------

SCHEMA_REJECTS = {
    "unknown top-level key": (["--set", "replicas=3"], "additional properties 'replicas'"),
    "unknown nested key": (["--set", "webhook.failurepolicy=Ignore"], "additional properties"),
    "bad failurePolicy": (["--set", "webhook.failurePolicy=Maybe"], "failurePolicy"),
    "timeout 0": (["--set", "webhook.timeoutSeconds=0"], "timeoutSeconds"),
    "timeout 31": (["--set", "webhook.timeoutSeconds=31"], "timeoutSeconds"),
    "bad mode": (["--set", "certificates.mode=selfSigned"], "mode"),
    "existingSecret without caBundle": (
        [
            "--set",
            "certificates.mode=existingSecret",
            "--set",
            "certificates.existingSecret.name=x",
        ],
        "caBundle",
    ),
    "zero replicas": (["--set", "replicaCount=0"], "replicaCount"),
    "bad enforcement": (["--set", "policy.spec.enforcement=strict"], "enforcement"),
}


@pytest.mark.parametrize("case", list(SCHEMA_REJECTS))
def test_schema_rejects(renderer: Renderer, case: str) -> None:
    args, needle = SCHEMA_REJECTS[case]
    err = renderer.fails(*args)
    assert needle in err, err


def test_refuses_two_configmap_refs(renderer: Renderer) -> None:
    err = renderer.fails(
        "--set",
        "policy.spec.devicePlugin.configMapRef.namespace=x",
        "--set",
        "policy.spec.devicePlugin.configMapRef.name=y",
    )
    assert "devicePlugin.configMapRef" in err


def test_refuses_a_pdb_that_blocks_drains(renderer: Renderer) -> None:
    err = renderer.fails("--set", "podDisruptionBudget.minAvailable=2")
    assert "minAvailable" in err
