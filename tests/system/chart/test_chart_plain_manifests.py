"""certs/README.md's path without Helm, step by step, checked end to end.

1. `gpu-policy certs --out DIR --service NAME --namespace NS`;
2. `helm template` with certificates.mode=existingSecret and the CA as caBundle;
3. `kubectl create secret tls` from tls.crt and tls.key (client-side dry run here).
Then the pieces must fit: the Secret is the one the Deployment mounts, with the keys it
mounts; the caBundle is the CA that signed tls.crt; tls.crt names the rendered Service.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tests.support.chart_helpers import CHART, TOOLS, Rendered, webhooks

pytestmark = pytest.mark.slow

RELEASE = "gpu-policy-webhook"  # the README's release name: the Service is then called so too
NAMESPACE = "gpu-policy"
SECRET = "gpu-policy-webhook-tls"


def _tool(name: str) -> str | None:
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    if (TOOLS / name).exists():
        return str(TOOLS / name)
    return shutil.which(name)


def _run(*cmd: str) -> str:
    env = {**os.environ, "KUBECONFIG": os.devnull}  # no cluster is needed, none is touched
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return proc.stdout


def test_plain_manifest_path(helm_bin: str, tmp_path: Path) -> None:
    gpu_policy, kubectl = _tool("gpu-policy"), _tool("kubectl")
    if gpu_policy is None or kubectl is None:
        pytest.skip("needs the gpu-policy command (pip install -e .) and kubectl (make tools)")
    out = tmp_path / "certs"
    _run(gpu_policy, "certs", "--out", str(out), "--service", RELEASE, "--namespace", NAMESPACE)
    manifests = _run(
        helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "certificates.mode=existingSecret",
        "--set", f"certificates.existingSecret.name={SECRET}",
        "--set-file", f"certificates.existingSecret.caBundle={out / 'ca.crt'}",
    )  # fmt: skip
    secret = yaml.safe_load(
        _run(
            kubectl, "-n", NAMESPACE, "create", "secret", "tls", SECRET,
            f"--cert={out / 'tls.crt'}", f"--key={out / 'tls.key'}", "--dry-run=client", "-o", "yaml",
        )
    )  # fmt: skip
    rendered = Rendered(docs=[d for d in yaml.safe_load_all(manifests) if d])

    assert rendered.all("Secret") == [], "the rendered manifests carry no key"
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    (tls_volume,) = [v["secret"] for v in pod["volumes"] if v["name"] == "tls"]
    assert tls_volume["secretName"] == secret["metadata"]["name"]
    assert {i["key"] for i in tls_volume["items"]} <= secret["data"].keys()
    assert secret["metadata"]["namespace"] == rendered.one("Deployment")["metadata"]["namespace"]

    ca_pem = (out / "ca.crt").read_bytes()
    bundles = {hook["clientConfig"]["caBundle"] for _, hook in webhooks(rendered)}
    assert len(bundles) == 1
    assert base64.b64decode(bundles.pop()).strip() == ca_pem.strip()

    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    service = rendered.one("Service")["metadata"]["name"]
    assert service == RELEASE
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{service}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
