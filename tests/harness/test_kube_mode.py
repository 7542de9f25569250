"""``gpu-policy test --kubeconfig``: dry-run creates through the real ``kubernetes`` client.

The API server is a loopback fake (tests/support/dryrun_apiserver.py) that answers the way kube-apiserver
does, with this project's admission handler as its webhooks; nothing in the client is patched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.dryrun_apiserver import DryRunApiServer
from webhook.files import load_inventory, load_policy
from webhook.kube.dryrun import DryRunCreator, connect, parse_warnings

from .conftest import CLUSTERS, MANIFESTS, SUITES, cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def fake() -> Iterator[DryRunApiServer]:
    cluster = CLUSTERS / "seed003-l20-t4"
    policy = load_policy(cluster / "policy.yaml")
    with DryRunApiServer(policy, load_inventory(policy, cluster / "nodes.yaml")) as server:
        yield server


@pytest.fixture
def kubeconfig(fake: DryRunApiServer, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(fake.kubeconfig())
    return path


def test_the_example_suite_against_the_cluster(fake: DryRunApiServer, kubeconfig: Path) -> None:
    before = len(fake.requests)
    result = cli("test", "--kubeconfig", str(kubeconfig), str(SUITES / "seed003-l20-t4.suite.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^30 passed, 0 failed, 4 skipped in ", result.stdout, re.M)
    assert re.search(
        r"pod-update-is-not-reviewed .* skipped: UPDATE cannot be tested", result.stdout
    )
    # The cases that set their own injectNodeSelection: the cluster answers with its policy's.
    assert len(re.findall(r"skipped: sets injectNodeSelection \(local only\)", result.stdout)) == 3
    posts = [r for r in fake.requests[before:] if r.method == "POST"]
    assert len(posts) == 30
    assert all(r.query["dryRun"] == ["All"] for r in posts)
    # The case's namespace is where the object is created.
    exempt = [r for r in posts if r.path == "/api/v1/namespaces/kube-system/pods"]
    assert [r.body["metadata"]["namespace"] for r in exempt] == ["kube-system"]


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
            message: '^admission webhook "validate.gpu-policy.io" denied the request: \\[gpu-shared'
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
    assert re.search(r"denied-as-expected .* PASS", out)
    assert re.search(r"deployment-warning .* PASS", out)
    assert "- the object the cluster returned does not contain golden renamed.yaml" in out
    assert "/spec/containers/0/resources/limits/nvidia.com/gpu.shared: missing (expected 1)" in out
    assert (
        "- failed rules: expected [gpu-requests-equal-limits], got [gpu-quantity] "
        "(missing gpu-requests-equal-limits; unexpected gpu-quantity)" in out
    )
    assert "2 passed, 2 failed, 0 skipped" in out


@pytest.fixture(scope="module")
def validating_only() -> Iterator[DryRunApiServer]:
    """A cluster where the webhook is registered as a validating webhook only."""
    cluster = CLUSTERS / "seed003-l20-t4"
    policy = load_policy(cluster / "policy.yaml")
    inventory = load_inventory(policy, cluster / "nodes.yaml")
    with DryRunApiServer(policy, inventory, mutating=False) as server:
        yield server


def test_a_refusal_by_the_api_servers_validation_is_judged_on_allowed(
    validating_only: DryRunApiServer, write_suite: Callable[..., Path], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(validating_only.kubeconfig())
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
    before = len(validating_only.requests)
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
    posts = [r for r in validating_only.requests[before:] if r.method == "POST"]
    assert len(posts) == 3


def test_the_api_servers_invalid_answer_reaches_the_client_whole(tmp_path: Path) -> None:
    cluster = CLUSTERS / "seed003-l20-t4"
    policy = load_policy(cluster / "policy.yaml")
    with DryRunApiServer(
        policy, load_inventory(policy, cluster / "nodes.yaml"), mutating=False
    ) as server:
        path = tmp_path / "kubeconfig"
        path.write_text(server.kubeconfig())
        create = DryRunCreator(connect(str(path)))
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
        assert allowed.object["spec"]["containers"][0]["resources"] == {
            "limits": {"nvidia.com/gpu": 1},
            "requests": {"nvidia.com/gpu": 1},
        }
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "500m"}}
        denied = create(pod)
        assert (denied.allowed, denied.code, denied.error) == (False, 403, None)
        # The mutating webhook denies it: in a real cluster the API server's own validation
        # would refuse it before the validating webhook is called.
        assert denied.message.startswith(
            'admission webhook "mutate.gpu-policy.io" denied the request: [gpu-quantity]'
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
