"""The README's DRA session on a real control plane: the webhook installed by URL, then kubectl.

The commands are the README's own (its console block checked by
:data:`TEST`, see ``tests/support/doc_examples.py``): ``scripts/readme_dra_demo.py`` runs them on
a control plane of its own and prints what they print, for the page; the test runs them on the
session's control plane and compares. The webhook runs as ``gpu-policy serve`` does in a pod
(``examples/clusters/dra-a100/policy.yaml``, watching the cluster), with certificates made here,
and is registered with the chart's own webhook configurations (``helm template``), each
pointed at the local server by URL instead of the Service (no kubelet runs the chart's pod).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import doc_examples
from tests.support.controlplane import ControlPlane, create_node, webhook_configurations
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs

ROOT = doc_examples.ROOT
DEMO = ROOT / "examples" / "dra-demo"
POLICY = ROOT / "examples" / "clusters" / "dra-a100" / "policy.yaml"
TOOLS = ROOT / ".cache" / "tools"
NAMESPACE = "ml"
#: The test that runs the README's session and compares what it prints.
TEST = (
    "tests/cluster/kube/test_readme_dra_demo.py::test_the_readme_dra_session_prints_what_it_shows"
)
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def commands() -> list[doc_examples.Example]:
    """The README's DRA session, command by command."""
    return doc_examples.checked_by(TEST)


def chart_webhooks(url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The chart's Mutating- and ValidatingWebhookConfiguration (``helm template`` with its
    defaults), every webhook calling ``url`` + its path."""
    rendered = subprocess.run(
        [str(TOOLS / "helm"), "template", "gpu-policy-webhook", "charts/gpu-policy-webhook",
         "--namespace", "gpu-policy"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    objects = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in WEBHOOK_KINDS]
    return webhook_configurations(url, ca_pem, name="gpu-policy-webhook", objects=objects)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Webhook:
    """``gpu-policy serve`` running, and where."""

    url: str
    ca_pem: bytes
    process: subprocess.Popen[bytes]
    log: Path

    def readyz(self) -> str:
        """``/readyz``'s body, "" while it does not answer 200."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as r:
                return str(r.read().decode())
        except OSError:
            return ""


@contextlib.contextmanager
def serving(plane: ControlPlane, tmp: Path) -> Iterator[Webhook]:
    """``gpu-policy serve`` (one worker) watching ``plane`` with the demo's policy, until it
    says DRA is available; stopped (by its pid) at the end."""
    certs = write_certs(tmp / "certs", days=1)
    port = _free_port()
    log = tmp / "serve.log"
    env = dict(os.environ, GPU_POLICY_KUBE=str(plane.kubeconfig))
    serve = Path(sys.executable).parent / "gpu-policy"
    argv = [str(serve), "serve", "--cert-dir", str(certs.directory), "--policy", str(POLICY),
            "--bind", f"127.0.0.1:{port}", "--workers", "1"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Webhook(f"https://127.0.0.1:{port}", certs.ca_cert.read_bytes(), process, log)
    try:
        if not wait_until(lambda: "DRA available" in server.readyz(), 90, 0.3):
            raise RuntimeError(f"gpu-policy serve did not get ready:\n{log.read_text()}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def register(plane: ControlPlane, webhook: Webhook) -> list[tuple[str, str]]:
    """Create the chart's webhook configurations pointed at ``webhook``; their (kind, name)."""
    from kubernetes import client

    api = client.AdmissionregistrationV1Api(plane.client)
    made = []
    for obj in chart_webhooks(webhook.url, webhook.ca_pem):
        if obj["kind"] == "MutatingWebhookConfiguration":
            api.create_mutating_webhook_configuration(obj)
        else:
            api.create_validating_webhook_configuration(obj)
        made.append((obj["kind"], obj["metadata"]["name"]))
    return made


def unregister(plane: ControlPlane, made: list[tuple[str, str]]) -> None:
    """Delete the configurations :func:`register` made."""
    plane.delete_webhook_configurations(made)


def prepare(plane: ControlPlane) -> None:
    """The namespace and the Node of the session (with its status, as the kubelet sets it)."""
    from kubernetes import client

    core = client.CoreV1Api(plane.client)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    create_node(plane, yaml.safe_load((DEMO / "node.yaml").read_text()))
    # Pods need the namespace's default ServiceAccount, which the controller-manager makes.
    wait_until(lambda: _has_default_account(core), 30, 0.2)


def _has_default_account(core: Any) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespaced_service_account("default", NAMESPACE)
    except ApiException:
        return False
    return True


def clean(plane: ControlPlane) -> None:
    """Everything :func:`prepare` and the session made."""
    from kubernetes.client.exceptions import ApiException

    from tests.support.controlplane import delete_namespace

    delete_namespace(plane, NAMESPACE)
    for doc in yaml.safe_load_all((DEMO / "dra.yaml").read_text()):
        with contextlib.suppress(ApiException):
            plane.dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).delete(
                name=doc["metadata"]["name"]
            )
    from kubernetes import client

    with contextlib.suppress(ApiException):
        client.CoreV1Api(plane.client).delete_node("gpu-node-1")


def kubectl(plane: ControlPlane, command: str) -> str:
    """``command`` (a shell line starting with kubectl), stdout and stderr in one stream as a
    terminal shows them."""
    return plane.shell(command, timeout=120).stdout


def _sees_devices(plane: ControlPlane) -> bool:
    """Whether the webhook has read the slice: the template it allows only then passes a dry
    run (the first document of any-and-80gi.yaml)."""
    printed = kubectl(
        plane,
        "kubectl create --dry-run=server -f - <<'EOF'\n"
        + yaml.safe_dump(next(yaml.safe_load_all((DEMO / "any-and-80gi.yaml").read_text())))
        + "EOF",
    )
    return "created (server dry run)" in printed


def _sees_template(plane: ControlPlane) -> bool:
    """Whether the webhook has read the template the pod names (it warns until then, and does
    not judge the claim: Kubernetes lets a template come after its pod)."""
    printed = kubectl(plane, "kubectl create --dry-run=server -f examples/dra-demo/train.yaml")
    return "created (server dry run)" in printed and "gpu-claim-exists" not in printed


def _called(plane: ControlPlane) -> bool:
    """Whether the API server calls the webhook yet: the refused template is refused by it."""
    printed = kubectl(
        plane, "kubectl create --dry-run=server -f examples/dra-demo/two-of-a-kind-denied.yaml"
    )
    return "denied the request" in printed


def session(plane: ControlPlane, webhook: Webhook) -> list[tuple[doc_examples.Example, str]]:
    """Register the webhook, run the README's commands in order, and return what each printed.

    Between commands it waits only for what a person at a terminal would wait for: the API
    server to call the new webhook configurations, and the webhook to read the ResourceSlice
    just applied (its watch sees it within a second).
    """
    made = register(plane, webhook)
    out = []
    try:
        for example in commands():
            printed = kubectl(plane, example.command)
            out.append((example, printed))
            if example.command.endswith("examples/dra-demo/dra.yaml"):
                if not wait_until(lambda: _called(plane), 60, 0.5):
                    raise RuntimeError("the API server never called the webhook")
                if not wait_until(lambda: _sees_devices(plane), 60, 0.5):
                    raise RuntimeError("the webhook never allowed the template after the slice")
            template = example.command.endswith("examples/dra-demo/any-and-80gi.yaml")
            if template and not wait_until(lambda: _sees_template(plane), 60, 0.5):
                raise RuntimeError("the webhook never read the template")
    finally:
        unregister(plane, made)
    return out
