"""The audit CronJob (``audit.enabled``): off by default; on, the server's image, policy and
security, its own ServiceAccount, and pods the server's Service never selects.

Its RBAC is proven from the calls the audit really makes in
tests/system/robustness/test_robust_rbac_audit.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart_helpers import CASES, FULLNAME, NAMESPACE, Renderer

pytestmark = pytest.mark.slow

AUDIT = f"{FULLNAME}-audit"
ON = CASES["ci/audit-values.yaml"]


def _audit_objects(rendered: Any) -> list[tuple[str, str]]:
    return sorted(
        (d["kind"], d["metadata"]["name"])
        for d in rendered.docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "audit"
        or d["metadata"]["name"].startswith(AUDIT)
    )


@pytest.mark.parametrize("case_id", [c for c in CASES if c != "ci/audit-values.yaml"])
def test_off_by_default(renderer: Renderer, case_id: str) -> None:
    assert _audit_objects(renderer.render_case(CASES[case_id])) == []


def test_on_renders_the_cronjob_its_account_and_rbac(renderer: Renderer) -> None:
    assert _audit_objects(renderer.render_case(ON)) == [
        ("ClusterRole", AUDIT),
        ("ClusterRoleBinding", AUDIT),
        ("CronJob", AUDIT),
        ("Role", f"{AUDIT}-device-plugin-config"),
        ("RoleBinding", f"{AUDIT}-device-plugin-config"),
        ("ServiceAccount", AUDIT),
    ]


def test_the_cronjob_runs_the_audit_as_the_server_runs(renderer: Renderer) -> None:
    rendered = renderer.render_case(ON)
    cron = rendered.one("CronJob", AUDIT)
    assert cron["metadata"]["namespace"] == NAMESPACE
    assert cron["spec"]["schedule"] == "*/30 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    pod = job["template"]["spec"]
    server = rendered.one("Deployment", FULLNAME)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (webhook,) = server["containers"]
    # Its own ServiceAccount, whose token only this pod mounts (in-cluster configuration).
    assert pod["serviceAccountName"] == AUDIT
    assert pod["automountServiceAccountToken"] is True
    assert rendered.one("ServiceAccount", AUDIT)["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    # The server's image, security contexts and policy ConfigMap.
    assert container["image"] == webhook["image"]
    assert pod["securityContext"] == server["securityContext"]
    assert container["securityContext"] == webhook["securityContext"]
    policy_file = next(e["value"] for e in webhook["env"] if e["name"] == "GPU_POLICY_FILE")
    assert container["command"] == [
        "gpu-policy",
        "audit",
        "--apply",
        "--policy",
        policy_file,
        "--report-api",
        "openreports",
        "--colour",
        "never",
        "--page-size",
        "200",
    ]
    (mount,) = container["volumeMounts"]
    assert policy_file.startswith(mount["mountPath"] + "/") and mount["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    server_volumes = {v["name"]: v for v in server["volumes"]}
    assert volumes[mount["name"]] == server_volumes["policy"]
    assert container["resources"]["limits"]["memory"] == "512Mi"


def test_the_services_selectors_never_select_an_audit_pod(renderer: Renderer) -> None:
    rendered = renderer.render_case(ON)
    labels = rendered.one("CronJob", AUDIT)["spec"]["jobTemplate"]["spec"]["template"]["metadata"][
        "labels"
    ]
    selectors = [
        rendered.one("Service")["spec"]["selector"],
        rendered.one("Deployment")["spec"]["selector"]["matchLabels"],
        rendered.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert not selector.items() <= labels.items(), selector


def test_the_names_fit_a_cronjob(renderer: Renderer) -> None:
    # A CronJob's name is at most 52 characters (its Jobs' names add 11).
    rendered = renderer.render(
        "--set", "audit.enabled=true", "--set", "fullnameOverride=" + "x" * 63
    )
    (cron,) = rendered.all("CronJob")
    assert len(cron["metadata"]["name"]) <= 52
    assert cron["metadata"]["name"].endswith("-audit")


def test_no_configmap_ref_no_role(renderer: Renderer) -> None:
    rendered = renderer.render(
        "--set",
        "audit.enabled=true",
        "--set",
        "devicePlugin.configMapRef.name=",
        "--set-json",
        'policy.spec.devicePlugin={"config": {"version": "v1"}, "defaultConfig": "default"}',
    )
    assert rendered.maybe("Role", f"{AUDIT}-device-plugin-config") is None
    assert rendered.one("ClusterRole", AUDIT)


def test_a_report_api_outside_the_two_is_refused(renderer: Renderer) -> None:
    assert "reportApi" in renderer.fails(
        "--set", "audit.enabled=true", "--set", "audit.reportApi=x"
    )
