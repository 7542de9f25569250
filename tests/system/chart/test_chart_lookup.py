"""certificates.mode=helm keeps its Secret across `helm upgrade`: the `lookup` path, for real.

`lookup` only returns objects when helm talks to a cluster. Here helm does
(`helm template --dry-run=server`), but the cluster is a stub API server on 127.0.0.1 that
answers discovery and serves one Secret: what a previous release left behind. Without the
Secret (or with a partial one) the chart must generate new certificates; with it, the chart
must render the same Secret and put its ca.crt into every caBundle.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from tests.support.chart_helpers import CHART, FULLNAME, NAMESPACE, RELEASE, Rendered, webhooks

pytestmark = pytest.mark.slow

SECRET_NAME = f"{FULLNAME}-tls"

# group/version -> (resource, kind, namespaced): what the chart renders by default; helm maps
# every rendered object to a resource before it accepts a server-side dry run.
RESOURCES = {
    "v1": [
        ("secrets", "Secret", True),
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "admissionregistration.k8s.io/v1": [
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
    ],
}


def _discovery() -> dict[str, Any]:
    def resource_list(gv: str) -> dict[str, Any]:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": [
                {
                    "name": n,
                    "singularName": k.lower(),
                    "namespaced": ns,
                    "kind": k,
                    "verbs": ["get", "list"],
                }
                for n, k, ns in RESOURCES[gv]
            ],
        }

    groups = []
    routes: dict[str, Any] = {
        "/version": {
            "major": "1",
            "minor": "33",
            "gitVersion": "v1.33.0",
            "platform": "linux/amd64",
        },
        "/api": {"kind": "APIVersions", "versions": ["v1"]},
        "/api/v1": resource_list("v1"),
    }
    for gv in RESOURCES:
        if "/" in gv:
            group, version = gv.split("/")
            ref = {"groupVersion": gv, "version": version}
            groups.append({"name": group, "versions": [ref], "preferredVersion": ref})
            routes[f"/apis/{gv}"] = resource_list(gv)
    routes["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    return routes


class StubApiServer:
    """Discovery plus GET of the objects in ``objects`` (path -> object); 404 otherwise."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []
        routes = _discovery()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                stub.requests.append(f"GET {path}")
                body = routes.get(path) or stub.objects.get(path)
                if body is None:
                    self._reply(
                        404,
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "NotFound",
                            "code": 404,
                        },
                    )
                else:
                    self._reply(200, body)

            def _refuse(self) -> None:
                # A dry run that tried to write would be a surprise: make it fail loudly.
                stub.requests.append(f"{self.command} {self.path}")
                self._reply(
                    405, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 405}
                )

            do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add_secret(self, data: dict[str, str]) -> None:
        self.objects[f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET_NAME}"] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            # Ownership metadata a previous `helm install` leaves; helm refuses to adopt
            # an object without it.
            "metadata": {
                "name": SECRET_NAME,
                "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {
                    "meta.helm.sh/release-name": RELEASE,
                    "meta.helm.sh/release-namespace": NAMESPACE,
                },
            },
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[tuple[StubApiServer, Path]]:
    server = StubApiServer()
    server.thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": server.url}}],
                "users": [{"name": "stub", "user": {"token": "stub"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
                "current-context": "stub",
            }
        )
    )
    try:
        yield server, kubeconfig
    finally:
        server.server.shutdown()
        server.server.server_close()


def _render_against(helm: str, kubeconfig: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [
            helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--dry-run=server", "--disable-openapi-validation", "--kubeconfig", str(kubeconfig),
            "--set", "certificates.mode=helm",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _secret_and_bundles(docs: list[dict[str, Any]]) -> tuple[dict[str, str], set[str]]:
    rendered = Rendered(docs=docs)
    bundles = {hook["clientConfig"]["caBundle"] for _, hook in webhooks(rendered)}
    return rendered.one("Secret", SECRET_NAME)["data"], bundles


def test_existing_secret_is_kept(helm_bin: str, stub) -> None:
    server, kubeconfig = stub
    previous = {
        "ca.crt": "PREVIOUS CA\n",
        "tls.crt": "PREVIOUS CERT\n",
        "tls.key": "PREVIOUS KEY\n",
    }
    server.add_secret(previous)
    data, bundles = _secret_and_bundles(_render_against(helm_bin, kubeconfig))
    assert f"GET /api/v1/namespaces/{NAMESPACE}/secrets/{SECRET_NAME}" in server.requests
    assert {k: base64.b64decode(v).decode() for k, v in data.items()} == previous
    assert bundles == {data["ca.crt"]}
    assert not [r for r in server.requests if not r.startswith("GET ")]


def test_no_secret_yet_generates(helm_bin: str, stub) -> None:
    server, kubeconfig = stub
    data, bundles = _secret_and_bundles(_render_against(helm_bin, kubeconfig))
    assert f"GET /api/v1/namespaces/{NAMESPACE}/secrets/{SECRET_NAME}" in server.requests
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
    x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])).verify_directly_issued_by(ca)
    assert bundles == {data["ca.crt"]}


def test_partial_secret_is_replaced(helm_bin: str, stub) -> None:
    """A Secret without ca.crt (not made by this chart) cannot give a caBundle: start over."""
    server, kubeconfig = stub
    server.add_secret({"tls.crt": "CERT\n", "tls.key": "KEY\n"})
    data, bundles = _secret_and_bundles(_render_against(helm_bin, kubeconfig))
    assert base64.b64decode(data["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert bundles == {data["ca.crt"]}
