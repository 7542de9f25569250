"""``gpu-policy test --kubeconfig``: dry-run creates through the real ``kubernetes`` client.

The API server is the real one (tests/support/controlplane.py), its admission chain the
chart's webhook configurations calling ``gpu-policy serve`` (gunicorn, the example cluster's
policy and nodes) by URL; nothing in the client is patched.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import gunicorn
from tests.support.cluster import LiveCluster
from tests.support.controlplane import ControlPlane
from tests.support.harness import CLUSTERS, MANIFESTS, REPO, SUITES, cli
from webhook.certs.issue import write_certs
from webhook.contract import NODES_ENV, POLICY_FILE_ENV
from webhook.kube.dryrun import DryRunCreator, connect, parse_warnings

pytestmark = pytest.mark.timeout(300)

EXAMPLE = CLUSTERS / "seed003-l20-t4"
#: Where the suites and manifests create their objects.
NAMESPACES = ("nlp", "ml", "video", "inference", "research", "team")
Register = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="module")
def chart_webhooks() -> list[dict[str, Any]]:
    """The chart's two webhook configurations, as ``helm template`` renders them."""
    import subprocess

    helm = shutil.which("helm") or str(REPO / ".cache" / "tools" / "helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not on PATH nor in .cache/tools (run `make tools`)")
    out = subprocess.run(
        [helm, "template", "gpw", str(REPO / "charts" / "gpu-policy-webhook"), "-n", "gpu-policy"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"].endswith("WebhookConfiguration")]


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, bytes]]:
    """``gpu-policy serve`` under gunicorn with the example cluster: (its URL, its CA)."""
    tmp = tmp_path_factory.mktemp("webhook")
    certs = write_certs(tmp / "certs")
    env = {POLICY_FILE_ENV: str(EXAMPLE / "policy.yaml"), NODES_ENV: str(EXAMPLE / "nodes.yaml")}
    with gunicorn.running(tmp, certs, workers=1, **env) as server:
        yield f"https://127.0.0.1:{server.port}", certs.ca_cert.read_bytes()


def _kubeconfig(cluster: LiveCluster, plane: ControlPlane, path: Path) -> Path:
    """The proxy's kubeconfig plus a context ``stranger`` straight to the API server with a
    token it never issued."""
    config = json.loads(cluster.write_kubeconfig(path.parent).read_text())
    config["clusters"].append(
        {
            "name": "direct",
            "cluster": {
                "server": plane.url,
                "certificate-authority-data": base64.b64encode(plane.ca_pem).decode(),
            },
        }
    )
    config["users"].append({"name": "stranger", "user": {"token": "not-a-token-it-issued"}})
    config["contexts"].append(
        {"name": "stranger", "context": {"cluster": "direct", "user": "stranger"}}
    )
    path.write_text(json.dumps(config))
    return path


def _installed(
    cluster: LiveCluster,
    plane: ControlPlane,
    register: Register,
    webhook: tuple[str, bytes],
    configurations: list[dict[str, Any]],
    tmp_path: Path,
) -> Path:
    """Register ``configurations`` and wait until the API server calls them; a kubeconfig."""
    for ns in NAMESPACES:
        cluster.ensure_namespace(ns)
    url, ca = webhook
    register(url, ca, objects=configurations)
    kubeconfig = _kubeconfig(cluster, plane, tmp_path / "config")
    probe = yaml.safe_load((MANIFESTS / "pod-gpu-2-shared-denied.yaml").read_text())
    create = DryRunCreator(connect(str(kubeconfig)))
    try:
        # The API server calls a configuration once its informer has seen it.
        for _ in range(300):
            if create(probe, None).code == 403:
                break
    finally:
        create.close()
    return kubeconfig


@pytest.fixture
def kubeconfig(
    live_cluster: LiveCluster,
    control_plane: ControlPlane,
    register_webhooks: Register,
    webhook: tuple[str, bytes],
    chart_webhooks: list[dict[str, Any]],
    tmp_path: Path,
) -> Path:
    """The chart's webhooks registered, calling the example cluster's server; a kubeconfig."""
    return _installed(
        live_cluster, control_plane, register_webhooks, webhook, chart_webhooks, tmp_path
    )


def test_the_example_suite_against_the_cluster(live_cluster: LiveCluster, kubeconfig: Path) -> None:
    before = len(live_cluster.requests)
    result = cli("test", "--kubeconfig", str(kubeconfig), str(SUITES / "seed003-l20-t4.suite.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^30 passed, 0 failed, 4 skipped in ", result.stdout, re.M)
    assert re.search(
        r"pod-update-is-not-reviewed .* skipped: UPDATE cannot be tested", result.stdout
    )
    # The cases that set their own injectNodeSelection: the cluster answers with its policy's.
    assert len(re.findall(r"skipped: sets injectNodeSelection \(local only\)", result.stdout)) == 3
    posts = [r for r in live_cluster.requests[before:] if r.method == "POST"]
    assert len(posts) == 30
    assert all(r.query["dryRun"] == "All" for r in posts)
    # The case's namespace is where the object is created.
    assert [r.path for r in posts].count("/api/v1/namespaces/kube-system/pods") == 1


def test_what_differs_from_the_cluster_is_reported(
    kubeconfig: Path, write_suite: Callable[..., Path], tmp_path: Path
) -> None:
    golden = tmp_path / "renamed.yaml"
    golden.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ported-from-eks, namespace: nlp}\n"
        "spec:\n  containers:\n  - name: app\n    resources:\n"
        "      limits: {nvidia.com/gpu.shared: 1}\n"
    )
    suite = write_suite(
        f"""\
        - name: rename
          object: {MANIFESTS / "pod-gpu-shared-on-non-renaming-cluster.yaml"}
          expect: {{allowed: true, golden: renamed.yaml}}
        - name: denied-as-expected
          object: {MANIFESTS / "pod-gpu-2-shared-denied.yaml"}
          expect:
            failed: [gpu-shared-request-above-one]
            message: '^admission webhook "pods.validate.gpu-policy.io" denied the request: \\[gpu-shared'
        - name: wrong-rule
          object: {MANIFESTS / "pod-gpu-fractional-500m.yaml"}
          expect: {{allowed: false, failed: [gpu-requests-equal-limits]}}
        - name: deployment-warning
          object: {MANIFESTS / "deployment-limits-only-gpu.yaml"}
          expect: {{warnings: ['^pods created from this Deployment will be changed: container "embedder"']}}
        """
    )
    result = cli("test", "--kubeconfig", str(kubeconfig), str(suite))
    assert result.returncode == 1
    out = result.stdout
    assert re.search(r"denied-as-expected .* PASS", out), out
    assert re.search(r"deployment-warning .* PASS", out)
    assert "- the object the cluster returned does not contain golden renamed.yaml" in out
    assert "/spec/containers/0/resources/limits/nvidia.com/gpu.shared: missing (expected 1)" in out
    assert (
        "- failed rules: expected [gpu-requests-equal-limits], got [gpu-quantity] "
        "(missing gpu-requests-equal-limits; unexpected gpu-quantity)" in out
    )
    assert "2 passed, 2 failed, 0 skipped" in out


@pytest.fixture
def validating_only(
    live_cluster: LiveCluster,
    control_plane: ControlPlane,
    register_webhooks: Register,
    webhook: tuple[str, bytes],
    chart_webhooks: list[dict[str, Any]],
    tmp_path: Path,
) -> Path:
    """A cluster where the webhook is registered as a validating webhook only; a kubeconfig."""
    validating = [c for c in chart_webhooks if c["kind"] == "ValidatingWebhookConfiguration"]
    return _installed(live_cluster, control_plane, register_webhooks, webhook, validating, tmp_path)


def test_a_refusal_by_the_api_servers_validation_is_judged_on_allowed(
    live_cluster: LiveCluster, validating_only: Path, write_suite: Callable[..., Path]
) -> None:
    kubeconfig = validating_only
    suite = write_suite(
        f"""\
        - name: half-a-gpu
          object: {MANIFESTS / "pod-gpu-fractional-500m.yaml"}
          expect: {{allowed: false, failed: [gpu-quantity], message: 'Ask for 1'}}
        - name: request-1-limit-2
          object: {MANIFESTS / "pod-gpu-request-1-limit-2.yaml"}
          expect: {{allowed: false, failed: [gpu-requests-equal-limits]}}
        - name: half-a-gpu-expected-allowed
          object: {MANIFESTS / "pod-gpu-fractional-500m.yaml"}
          expect: {{allowed: true}}
        """
    )
    before = len(live_cluster.requests)
    result = cli("test", "--kubeconfig", str(kubeconfig), str(suite))
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    # The API server answered alone: the rule id and the message cannot be seen, the verdict
    # is judged, and the report says who refused.
    assert re.search(
        r"half-a-gpu +denied \[gpu-quantity\] message +"
        r"denied \(refused by the API server's validation\) +PASS",
        out,
    ), out
    assert re.search(
        r"request-1-limit-2 +denied \[gpu-requests-equal-limits\] +"
        r"denied \(refused by the API server's validation\) +PASS",
        out,
    ), out
    assert re.search(r"half-a-gpu-expected-allowed .* FAIL", out), out
    assert "- expected allowed, got denied" in out
    assert (
        'Pod "half-a-gpu" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: '
        'Invalid value: "500m": must be an integer, '
        "spec.containers[0].resources.requests[nvidia.com/gpu]: "
        'Invalid value: "500m": must be an integer]' in out
    )
    assert "2 passed, 1 failed, 0 skipped" in out
    # Nothing reached a webhook: the API server refused each pod itself.
    posts = [r for r in live_cluster.requests[before:] if r.method == "POST"]
    assert len(posts) == 3


def test_the_api_servers_invalid_answer_reaches_the_client_whole(validating_only: Path) -> None:
    create = DryRunCreator(connect(str(validating_only)))
    try:
        pod = yaml.safe_load((MANIFESTS / "pod-gpu-request-1-limit-2.yaml").read_text())
        answer = create(pod, None)
    finally:
        create.close()
    assert (answer.allowed, answer.code, answer.error) == (False, 422, None)
    assert answer.message == (
        'Pod "req1-lim2" is invalid: spec.containers[0].resources.requests: '
        'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'
    )


def test_refused_credentials_are_errors_not_verdicts(
    kubeconfig: Path, write_suite: Callable[..., Path]
) -> None:
    suite = write_suite(
        f"- {{name: a, object: {MANIFESTS / 'pod-gpu-1-shared.yaml'}, expect: allowed}}\n"
    )
    result = cli("test", "--kubeconfig", str(kubeconfig), "--context", "stranger", str(suite))
    assert result.returncode == 1
    assert re.search(r"demo +a +allowed +error +ERROR", result.stdout)
    assert (
        "no answer: GET /api/v1 (API discovery) answered HTTP 401: Unauthorized "
        "(check the kubeconfig's credentials)" in result.stdout
    )
    assert "0 passed, 0 failed, 0 skipped, 1 errors" in result.stdout
    result = cli("test", "--kubeconfig", str(kubeconfig), "--context", "nope", str(suite))
    assert result.returncode == 2
    assert "nope" in result.stderr


def test_the_dry_run_create_function(kubeconfig: Path) -> None:
    create = DryRunCreator(connect(str(kubeconfig)))
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {
                        "name": "a",
                        "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu.shared": 1}},
                    }
                ]
            },
        }
        allowed = create(pod, "team")
        assert (allowed.allowed, allowed.code, allowed.error) == (True, 201, None)
        assert allowed.object is not None
        assert allowed.object["metadata"]["namespace"] == "team"
        # Quantities come back as the API server serialises them: strings.
        assert allowed.object["spec"]["containers"][0]["resources"] == {
            "limits": {"nvidia.com/gpu": "1"},
            "requests": {"nvidia.com/gpu": "1"},
        }
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "500m"}}
        denied = create(pod)
        assert (denied.allowed, denied.code, denied.error) == (False, 403, None)
        # The mutating webhook denies it: in a real cluster the API server's own validation
        # would refuse it before the validating webhook is called.
        assert denied.message.startswith(
            'admission webhook "pods.mutate.gpu-policy.io" denied the request: [gpu-quantity]'
        )
        other = create({"apiVersion": "v1", "kind": "Gadget", "metadata": {"name": "g"}})
        assert other.error == "the cluster serves no Gadget in v1"
    finally:
        create.close()


def test_warning_headers() -> None:
    values = [
        '299 - "first, with a comma", 299 - "second \\"quoted\\" \\\\ back"',
        '299 kube-apiserver "third\\u00e9" "Wed, 21 Oct 2015 07:28:00 GMT"',
        "not a warning",
    ]
    assert parse_warnings(values) == ["first, with a comma", 'second "quoted" \\ back', "thirdé"]
