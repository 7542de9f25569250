"""What the issue and docs/contracts.md require of the rendered chart, asserted on real renders."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.support.chart_helpers import (
    CASES,
    CHART,
    CI_CA_PEM,
    FULLNAME,
    NAMESPACE,
    Renderer,
    webhooks,
)
from webhook import contract

pytestmark = pytest.mark.slow

ALL_CASES = list(CASES)

# (apiGroup, apiVersion, resource) the validating configuration must cover, and nothing else.
VALIDATED = {
    ("", "v1", "pods"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "replicasets"),
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "daemonsets"),
    ("batch", "v1", "jobs"),
    ("batch", "v1", "cronjobs"),
    ("", "v1", "replicationcontrollers"),
    ("", "v1", "podtemplates"),
}
# With dra.enabled (the default), the DRA entries of the validating configuration, on CREATE
# only (a claim's spec is immutable; a pod's claims cannot change either).
DRA_VALIDATED = {
    ("resource.k8s.io", "v1", "resourceclaims", ("CREATE",)),
    ("resource.k8s.io", "v1", "resourceclaimtemplates", ("CREATE",)),
    ("", "v1", "pods", ("CREATE",)),
}
DRA_HOOKS = (
    "resourceclaims.validate.gpu-policy.io",
    "resourceclaimtemplates.validate.gpu-policy.io",
    "pod-claims.validate.gpu-policy.io",
)
DRA_KINDS = ["deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"]


def _container(rendered) -> dict[str, Any]:
    (container,) = rendered.one("Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _env(rendered) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _container(rendered)["env"]}


def _rules(hook: dict[str, Any]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    out = set()
    for rule in hook["rules"]:
        for group in rule["apiGroups"]:
            for version in rule["apiVersions"]:
                for resource in rule["resources"]:
                    out.add((group, version, resource, tuple(sorted(rule["operations"]))))
    return out


# --- both webhook configurations ----------------------------------------------------------


@pytest.mark.parametrize("case_id", ALL_CASES)
def test_every_webhook_entry(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    values_timeout = 10 if case_id == "ci/single-replica-values.yaml" else 5
    values_policy = "Ignore" if case_id == "ci/single-replica-values.yaml" else "Fail"
    entries = list(webhooks(rendered))
    assert entries
    names = [hook["name"] for _, hook in entries]
    assert len(names) == len(set(names))
    for kind, hook in entries:
        assert hook["sideEffects"] == "None", hook["name"]
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["failurePolicy"] == values_policy
        assert hook["timeoutSeconds"] == values_timeout
        assert len(hook["name"].split(".")) >= 3, "webhook names must be fully qualified"
        service = hook["clientConfig"]["service"]
        assert service == {
            "name": rendered.one("Service")["metadata"]["name"],
            "namespace": NAMESPACE,
            "path": "/mutate" if kind.startswith("Mutating") else "/validate",
            "port": 443,
        }
        (condition,) = hook["matchConditions"]
        # Only what asks for an nvidia.com/* resource or a GPU DeviceClass, or (validating)
        # what may use DRA: claims or extended names, whose classes only the webhook's snapshot
        # knows (test_chart_match_conditions.py evaluates them); with quota.enabled the
        # mutating webhook too, to charge those pods (docs/quota.md).
        expression = condition["expression"]
        charges = case_id == "ci/quota-values.yaml"
        assert "nvidia.com" in expression or (
            (kind.startswith("Validating") or charges) and "resourceClaims" in expression
        )
        for rule in hook["rules"]:
            assert rule["scope"] == "Namespaced"


@pytest.mark.parametrize("case_id", ALL_CASES)
def test_namespace_exclusions(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    for _, hook in webhooks(rendered):
        expressions = hook["namespaceSelector"]["matchExpressions"]
        by_key = {e["key"]: e for e in expressions}
        names = by_key["kubernetes.io/metadata.name"]
        assert names["operator"] == "NotIn"
        assert {"kube-system", NAMESPACE} <= set(names["values"])
        opt_out = by_key["gpu-policy.io/webhook"]
        assert opt_out == {
            "key": "gpu-policy.io/webhook",
            "operator": "NotIn",
            "values": ["disabled"],
        }
        assert "matchLabels" not in hook["namespaceSelector"]


def test_extra_excluded_namespaces(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/existing-policy-no-watch-values.yaml"])
    for _, hook in webhooks(rendered):
        (names,) = [
            e
            for e in hook["namespaceSelector"]["matchExpressions"]
            if e["key"] == "kubernetes.io/metadata.name"
        ]
        assert names["values"] == ["kube-system", NAMESPACE, "monitoring", "gpu-operator"]


def test_release_in_kube_system_is_listed_once(renderer: Renderer) -> None:
    out = renderer.run(["template", "x", str(CHART), "-n", "kube-system"]).stdout
    for doc in yaml.safe_load_all(out):
        if doc and doc["kind"].endswith("WebhookConfiguration"):
            for hook in doc["webhooks"]:
                names = hook["namespaceSelector"]["matchExpressions"][0]["values"]
                assert names == ["kube-system"]


def test_mutating_configuration(default_render) -> None:
    """Pods on CREATE (patched, reinvoked); pod templates too, for the denials only."""
    doc = default_render.one("MutatingWebhookConfiguration", FULLNAME)
    pods, *templates = doc["webhooks"]
    assert pods["reinvocationPolicy"] == "IfNeeded"
    assert _rules(pods) == {("", "v1", "pods", ("CREATE",))}
    rules = set()
    for hook in templates:
        assert "reinvocationPolicy" not in hook  # never patched: nothing to reinvoke for
        assert hook["clientConfig"]["service"]["path"] == contract.MUTATE_PATH
        rules |= _rules(hook)
    assert rules == {(g, v, r, ("CREATE", "UPDATE")) for g, v, r in VALIDATED if r != "pods"}


def test_mutating_pods_only(renderer: Renderer) -> None:
    rendered = renderer.run(
        ["template", "x", str(CHART), "--set", "webhook.mutating.workloads=false"]
    ).stdout
    (doc,) = [
        d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "MutatingWebhookConfiguration"
    ]
    (hook,) = doc["webhooks"]
    assert _rules(hook) == {("", "v1", "pods", ("CREATE",))}


def test_validating_configuration(default_render) -> None:
    doc = default_render.one("ValidatingWebhookConfiguration", FULLNAME)
    rules = set()
    dra = set()
    for hook in doc["webhooks"]:
        assert "reinvocationPolicy" not in hook
        if hook["name"] in DRA_HOOKS:
            dra |= _rules(hook)
        else:
            rules |= _rules(hook)
    assert rules == {(g, v, r, ("CREATE", "UPDATE")) for g, v, r in VALIDATED}
    assert dra == DRA_VALIDATED


def test_dra_off(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/no-dra-values.yaml"])
    names = [hook["name"] for _, hook in webhooks(rendered)]
    assert not set(DRA_HOOKS) & set(names)
    groups = [g for r in rendered.one("ClusterRole", FULLNAME)["rules"] for g in r["apiGroups"]]
    assert "resource.k8s.io" not in groups
    policy = yaml.safe_load(
        next(iter(rendered.one("ConfigMap", f"{FULLNAME}-policy")["data"].values()))
    )
    assert "dra" not in policy["spec"]


def test_dra_classes_reach_policy_and_conditions(renderer: Renderer) -> None:
    rendered = renderer.run(
        ["template", "x", str(CHART), "--set", "dra.deviceClassSuffixes={example.com}"]
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    (config,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    (claims,) = [h for h in config["webhooks"] if h["name"] == DRA_HOOKS[0]]
    assert "endsWith('.example.com')" in claims["matchConditions"][0]["expression"]
    assert "nvidia" not in claims["matchConditions"][0]["expression"]
    (policy_map,) = [
        d for d in docs if d["kind"] == "ConfigMap" and "policy" in d["metadata"]["name"]
    ]
    policy = yaml.safe_load(next(iter(policy_map["data"].values())))
    assert policy["spec"]["dra"]["deviceClassSuffixes"] == ["example.com"]


def test_dual_published_guard_reaches_the_policy(renderer: Renderer) -> None:
    rendered = renderer.run(
        ["template", "x", str(CHART), "--set", "dra.dualPublishedNodes=avoid"]
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    (policy_map,) = [
        d for d in docs if d["kind"] == "ConfigMap" and "policy" in d["metadata"]["name"]
    ]
    policy = yaml.safe_load(next(iter(policy_map["data"].values())))
    assert policy["spec"]["dra"]["dualPublishedNodes"] == "avoid"


def test_match_condition_paths(default_render) -> None:
    """Each validating entry reads the pod spec where its kinds keep it."""
    doc = default_render.one("ValidatingWebhookConfiguration")
    paths = {
        "pods": "object.spec.containers",
        "deployments": "object.spec.template.spec.containers",
        "cronjobs": "object.spec.jobTemplate.spec.template.spec.containers",
        "podtemplates": "object.template.spec.containers",
    }
    for hook in doc["webhooks"]:
        if hook["name"] in DRA_HOOKS:
            continue  # claims: test_chart_match_conditions.py
        resources = {r for rule in hook["rules"] for r in rule["resources"]}
        expression = hook["matchConditions"][0]["expression"]
        (resource,) = resources & paths.keys()
        assert f"{paths[resource]}.exists(" in expression
        assert f"{paths[resource].removesuffix('containers')}initContainers.exists(" in expression


def test_validating_pods_only(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/existing-policy-no-watch-values.yaml"])
    assert rendered.all("MutatingWebhookConfiguration") == []
    (hook,) = rendered.one("ValidatingWebhookConfiguration")["webhooks"]
    assert _rules(hook) == {("", "v1", "pods", ("CREATE", "UPDATE"))}


# --- certificates -------------------------------------------------------------------------


def _ca_bundles(rendered) -> set[str]:
    return {hook["clientConfig"].get("caBundle", "") for _, hook in webhooks(rendered)}


def test_helm_mode_certificates(renderer: Renderer) -> None:
    default_render = renderer.render_case(CASES["mode=helm"])
    secret = default_render.one("Secret", f"{FULLNAME}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    assert _ca_bundles(default_render) == {secret["data"]["ca.crt"]}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{FULLNAME}.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert b"PRIVATE KEY" in data["tls.key"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert "cert-manager.io/inject-ca-from" not in default_render.one(kind)["metadata"].get(
            "annotations", {}
        )


def test_helm_mode_without_lookup_regenerates(renderer: Renderer) -> None:
    """The documented limitation: without a cluster, `lookup` finds nothing, so every
    `helm template` makes a new CA (test_chart_lookup.py covers the kept-on-upgrade side)."""
    args = renderer.template_args(["--set", "certificates.mode=helm"])
    first, second = (
        [d for d in yaml.safe_load_all(renderer.run(args).stdout) if d] for _ in range(2)
    )
    bundles = [
        {
            h["clientConfig"]["caBundle"]
            for d in docs
            if d["kind"].endswith("WebhookConfiguration")
            for h in d["webhooks"]
        }
        for docs in (first, second)
    ]
    assert len(bundles[0]) == len(bundles[1]) == 1
    assert bundles[0] != bundles[1]


def test_cert_manager_mode(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["mode=certManager"])
    serving = rendered.one("Certificate", f"{FULLNAME}-serving")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = rendered.one(kind)["metadata"]["annotations"]
        assert (
            annotations["cert-manager.io/inject-ca-from"]
            == f"{NAMESPACE}/{serving['metadata']['name']}"
        )
    assert _ca_bundles(rendered) == {""}, "cert-manager's CA injector writes the caBundle"
    assert _tls_secret_name(rendered) == serving["spec"]["secretName"]


@pytest.mark.parametrize("case_id", ["ci/existing-secret-values.yaml", "mode=existingSecret"])
def test_existing_secret_mode(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    assert rendered.all("Secret") == []
    (bundle,) = _ca_bundles(rendered)
    assert base64.b64decode(bundle).decode().strip() == CI_CA_PEM.strip()
    x509.load_pem_x509_certificate(base64.b64decode(bundle))
    expected = "gpu-policy-webhook-tls" if case_id.startswith("ci/") else "webhook-tls"
    assert _tls_secret_name(rendered) == expected


def _tls_secret_name(rendered) -> str:
    volumes = rendered.one("Deployment")["spec"]["template"]["spec"]["volumes"]
    (tls,) = [v for v in volumes if v["name"] == "tls"]
    return tls["secret"]["secretName"]


# --- the Deployment -----------------------------------------------------------------------


def test_deployment_defaults(default_render) -> None:
    deployment = default_render.one("Deployment", FULLNAME)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    assert pod["serviceAccountName"] == FULLNAME
    assert pod["automountServiceAccountToken"] is True


@pytest.mark.parametrize("case_id", ALL_CASES)
def test_restricted_security_context(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "hostPID" not in pod
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    metrics_dir = _env(rendered)["PROMETHEUS_MULTIPROC_DIR"]
    assert metrics_dir.startswith("/tmp/")
    assert "emptyDir" in volumes[mounts[metrics_dir]]


def test_container_contract(default_render) -> None:
    """The server's settings as docs/contracts.md names them."""
    container = _container(default_render)
    assert container["command"] == ["gpu-policy", "serve"]
    assert container["image"] == "gpu-policy-webhook:0.1.0"
    env = _env(default_render)
    assert env["GPU_POLICY_KUBE"] == "in-cluster"
    assert env[contract.DRA_ENV] == "auto"
    assert env["GPU_POLICY_TLS_DIR"] == "/etc/gpu-policy/tls"
    assert env["GPU_POLICY_BIND"] == "0.0.0.0:8443"
    assert env["GPU_POLICY_FILE"] == "/etc/gpu-policy/policy/policy.yaml"
    assert env["GPU_POLICY_WORKERS"] == "2"
    assert env["GPU_POLICY_THREADS"] == "4"
    assert env["GPU_POLICY_LOG_LEVEL"] == "info"
    assert all(isinstance(v, str) for v in env.values())
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get == {"path": path, "port": "https", "scheme": "HTTPS"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["tls"]["mountPath"] == "/etc/gpu-policy/tls"
    volumes = {
        v["name"]: v
        for v in default_render.one("Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    # certificates.mode=selfManaged: the server writes the files (test_chart_selfmanaged.py).
    assert volumes["tls"]["emptyDir"]["medium"] == "Memory"
    assert volumes["policy"]["configMap"]["name"] == f"{FULLNAME}-policy"
    assert (
        env["GPU_POLICY_FILE"]
        == f"{mounts['policy']['mountPath']}/{volumes['policy']['configMap']['items'][0]['path']}"
    )


def test_chart_defaults_are_the_contracts(default_render) -> None:
    """What the chart sets by default is what the server assumes unset (webhook/contract.py)."""
    env = _env(default_render)
    assert env[contract.TLS_DIR_ENV] == contract.DEFAULT_TLS_DIR
    assert env[contract.BIND_ENV] == contract.DEFAULT_BIND
    assert env[contract.WORKERS_ENV] == str(contract.DEFAULT_WORKERS)
    assert env[contract.THREADS_ENV] == str(contract.DEFAULT_THREADS)
    assert float(env[contract.HANDSHAKE_TIMEOUT_ENV]) == contract.DEFAULT_HANDSHAKE_TIMEOUT
    assert float(env[contract.READ_TIMEOUT_ENV]) == contract.DEFAULT_READ_TIMEOUT
    assert env[contract.LOG_LEVEL_ENV] == contract.DEFAULT_LOG_LEVEL
    assert env[contract.METRICS_DIR_ENV] == f"/tmp/{contract.METRICS_DIR_NAME}"
    container = _container(default_render)
    assert [p["containerPort"] for p in container["ports"]] == [contract.PORT]
    assert container["livenessProbe"]["httpGet"]["path"] == contract.HEALTHZ_PATH
    assert container["readinessProbe"]["httpGet"]["path"] == contract.READYZ_PATH
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["tls"] == contract.DEFAULT_TLS_DIR
    paths = {
        (kind, hook["clientConfig"]["service"]["path"]) for kind, hook in webhooks(default_render)
    }
    assert paths == {
        ("MutatingWebhookConfiguration", contract.MUTATE_PATH),
        ("ValidatingWebhookConfiguration", contract.VALIDATE_PATH),
    }


def test_no_watch_contract(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/existing-policy-no-watch-values.yaml"])
    env = _env(rendered)
    assert env["GPU_POLICY_KUBE"] == "off"
    assert env["GPU_POLICY_FILE"] == "/etc/gpu-policy/policy/sharing-policy.yaml"
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    # The token stays for the self-managed certificates (the default mode) alone.
    assert pod["automountServiceAccountToken"] is True
    assert "GPU_POLICY_CERT_SECRET" in env
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["policy"]["configMap"]["name"] == "my-gpu-policy"
    assert rendered.all("ConfigMap") == []
    assert "checksum/policy" not in rendered.one("Deployment")["spec"]["template"]["metadata"].get(
        "annotations", {}
    )


def test_service(default_render) -> None:
    service = default_render.one("Service", FULLNAME)
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    ]
    pod_labels = default_render.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_service_account(default_render) -> None:
    sa = default_render.one("ServiceAccount", FULLNAME)
    assert sa["metadata"]["namespace"] == NAMESPACE


# --- RBAC ---------------------------------------------------------------------------------


def test_rbac_is_minimal(default_render) -> None:
    # The watch's RBAC; the certificates' is in test_chart_selfmanaged.py.
    cluster_role = default_render.one("ClusterRole", FULLNAME)
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": DRA_KINDS,
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["karpenter.sh"],
            "resources": ["nodepools"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    role = default_render.one("Role", f"{FULLNAME}-device-plugin-config")
    assert role["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["time-slicing-config"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    subject = {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    crb = default_render.one("ClusterRoleBinding", FULLNAME)
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": cluster_role["metadata"]["name"],
    }
    assert crb["subjects"] == [subject]
    rb = default_render.one("RoleBinding", f"{FULLNAME}-device-plugin-config")
    assert rb["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert rb["subjects"] == [subject]


def test_no_rbac_without_watch(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/existing-policy-no-watch-values.yaml"])
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        # Only the self-managed certificates' RBAC (the default mode) is left.
        names = [d["metadata"]["name"] for d in rendered.all(kind)]
        assert names == [f"{FULLNAME}-certificates"], (kind, names)


def test_role_follows_the_configmap_ref(renderer: Renderer) -> None:
    rendered = renderer.render(
        "--set",
        "devicePlugin.configMapRef.namespace=nvidia",
        "--set",
        "devicePlugin.configMapRef.name=plugin-cfg",
    )
    role = rendered.one("Role", f"{FULLNAME}-device-plugin-config")
    assert role["metadata"]["namespace"] == "nvidia"
    assert role["rules"][0]["resourceNames"] == ["plugin-cfg"]
    binding = rendered.one("RoleBinding", f"{FULLNAME}-device-plugin-config")
    assert binding["metadata"]["namespace"] == "nvidia"
    policy = _policy(rendered)
    assert policy["spec"]["devicePlugin"]["configMapRef"] == {
        "namespace": "nvidia",
        "name": "plugin-cfg",
    }


# --- policy -------------------------------------------------------------------------------


def _policy(rendered) -> dict[str, Any]:
    cm = rendered.one("ConfigMap", f"{FULLNAME}-policy")
    return yaml.safe_load(cm["data"]["policy.yaml"])


def test_policy_configmap(default_render, chart_values) -> None:
    policy = _policy(default_render)
    assert policy["apiVersion"] == "gpu-policy.io/v1alpha1"
    assert policy["kind"] == "SharingPolicy"
    device_plugin = policy["spec"]["devicePlugin"]
    assert device_plugin["configMapRef"] == {
        "namespace": "gpu-operator",
        "name": "time-slicing-config",
    }
    expected = dict(chart_values["policy"]["spec"])
    expected["devicePlugin"] = {
        **expected["devicePlugin"],
        "configMapRef": device_plugin["configMapRef"],
    }
    # The GPU DeviceClasses come from dra.deviceClassSuffixes, which the claim entries'
    # matchConditions read too; the guard of a migration from dra.dualPublishedNodes.
    expected["dra"] = {
        "deviceClassSuffixes": chart_values["dra"]["deviceClassSuffixes"],
        "dualPublishedNodes": chart_values["dra"]["dualPublishedNodes"],
    }
    assert policy["spec"] == expected
    annotations = default_render.one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/policy"])


def test_rendered_policy_loads_in_the_server(default_render) -> None:
    """The policy file the chart writes is one the server's own parser accepts."""
    model = pytest.importorskip("webhook.policy.model")
    policy = model.parse_policy(_policy(default_render), source="chart policy.yaml")
    assert policy.configmap_ref == model.ConfigMapRef("gpu-operator", "time-slicing-config")
    assert policy.node_label == "nvidia.com/device-plugin.config"
    assert policy.default_config == "any"
    assert policy.enforcement == "enforce"


def test_declared_pools_reach_the_server(renderer: Renderer) -> None:
    """policy.spec.pools is rendered as written, and the server reads the autoscaled pool."""
    model = pytest.importorskip("webhook.policy.model")
    rendered = renderer.render_case(CASES["ci/autoscaled-values.yaml"])
    policy = model.parse_policy(_policy(rendered), source="chart policy.yaml")
    (pool,) = policy.pools
    assert (pool.name, pool.config, pool.product) == ("gpu-t4", "t4", "Tesla-T4")
    assert (pool.min_nodes, pool.max_nodes, pool.nodes) == (0, 4, 0)
    assert pool.autoscaled


def test_a_misspelt_pool_field_fails_the_schema(renderer: Renderer) -> None:
    error = renderer.fails("--set-json", 'policy.spec.pools=[{"config": "t4", "minNode": 0}]')
    assert "minNode" in error


# --- optional objects ---------------------------------------------------------------------


@pytest.mark.parametrize("case_id", ALL_CASES)
def test_pdb_iff_more_than_one_replica(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    replicas = rendered.one("Deployment")["spec"]["replicas"]
    pdbs = rendered.all("PodDisruptionBudget")
    assert len(pdbs) == (1 if replicas > 1 else 0)
    for pdb in pdbs:
        assert pdb["spec"]["minAvailable"] < replicas
        assert (
            pdb["spec"]["selector"]["matchLabels"]
            == rendered.one("Deployment")["spec"]["selector"]["matchLabels"]
        )


def test_single_replica(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/single-replica-values.yaml"])
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert rendered.one("Deployment")["spec"]["replicas"] == 1
    assert "affinity" not in pod


@pytest.mark.parametrize("case_id", ALL_CASES)
def test_optional_objects_only_when_enabled(renderer: Renderer, case_id: str) -> None:
    rendered = renderer.render_case(CASES[case_id])
    enabled = case_id == "ci/networkpolicy-servicemonitor-values.yaml"
    assert len(rendered.all("NetworkPolicy")) == int(enabled)
    assert len(rendered.all("ServiceMonitor")) == int(enabled)


def test_network_policy(renderer: Renderer) -> None:
    rendered = renderer.render_case(CASES["ci/networkpolicy-servicemonitor-values.yaml"])
    np = rendered.one("NetworkPolicy")
    spec = np["spec"]
    assert (
        spec["podSelector"]["matchLabels"]
        == rendered.one("Deployment")["spec"]["selector"]["matchLabels"]
    )
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]
    assert ingress["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert {"ipBlock": {"cidr": "10.0.0.0/24"}} in ingress["from"]
    egress_ports = {(p["port"], p["protocol"]) for rule in spec["egress"] for p in rule["ports"]}
    assert {(53, "UDP"), (53, "TCP"), (443, "TCP"), (6443, "TCP")} <= egress_ports
    api_rule = next(r for r in spec["egress"] if any(p["port"] == 6443 for p in r["ports"]))
    assert api_rule["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]


def test_network_policy_admits_only_the_listed_sources(renderer: Renderer) -> None:
    """Enabled without sources would admit everybody (or, guessed, block the API server)."""
    err = renderer.fails("--set", "networkPolicy.enabled=true")
    assert "networkPolicy.ingressFrom" in err and "API server" in err


def test_client_time_limits_reach_the_server(renderer: Renderer) -> None:
    env = _env(renderer.render_case(CASES["ci/client-timeouts-values.yaml"]))
    assert env[contract.HANDSHAKE_TIMEOUT_ENV] == "2"
    assert env[contract.READ_TIMEOUT_ENV] == "2.5"


def test_labels_everywhere(default_render) -> None:
    for doc in default_render.docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "gpu-policy-webhook"
        assert labels["app.kubernetes.io/instance"] == "gpw"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding") and not doc["kind"].endswith(
            "WebhookConfiguration"
        ):
            plugin_config = doc["metadata"]["name"].endswith("-device-plugin-config")
            expected = "gpu-operator" if plugin_config else NAMESPACE
            assert doc["metadata"]["namespace"] == expected, doc["kind"]
