"""Helpers for the Helm chart tests: paths, render cases, and a memoising ``helm template``.

Every render is a real ``helm template`` run. Each distinct set of arguments is rendered once
per session (the renderer memoises), so the many invariant tests cost one helm call per
values file, not one per assertion.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpu-policy-webhook"
CI_DIR = CHART / "ci"
TOOLS = REPO / ".cache" / "tools"
FETCH_SCRIPT = REPO / "scripts" / "fetch_tools.py"

RELEASE = "gpw"
NAMESPACE = "gpu-policy"
FULLNAME = f"{RELEASE}-gpu-policy-webhook"
# Kubernetes minor versions the chart supports (Chart.yaml kubeVersion >= 1.30) and the
# rendered manifests are validated against.
KUBE_VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35")
# API groups of custom resources: kubernetes-validate has no schema for them; their shape is
# asserted by hand instead.
CRD_GROUPS = ("cert-manager.io", "monitoring.coreos.com")

CI_FILES = sorted(CI_DIR.glob("*-values.yaml"))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# A CA certificate for the existingSecret renders (public part only; its key was discarded).
CI_CA_PEM: str = yaml.safe_load((CI_DIR / "existing-secret-values.yaml").read_text())[
    "certificates"
]["existingSecret"]["caBundle"]


@dataclass(frozen=True)
class Case:
    """One way of rendering the chart: values files and --set arguments."""

    values_files: tuple[Path, ...] = ()
    set_values: tuple[str, ...] = ()

    def args(self) -> list[str]:
        out: list[str] = []
        for f in self.values_files:
            out += ["-f", str(f)]
        for s in self.set_values:
            out += ["--set", s]
        return out


# Every ci/*-values.yaml, plus each certificate mode chosen on the command line alone.
CASES: dict[str, Case] = {f"ci/{f.name}": Case(values_files=(f,)) for f in CI_FILES}
CASES |= {
    "mode=selfManaged": Case(set_values=("certificates.mode=selfManaged",)),
    "mode=helm": Case(set_values=("certificates.mode=helm",)),
    "mode=certManager": Case(set_values=("certificates.mode=certManager",)),
    # The caBundle as base64 here (the ci file gives PEM): both forms are accepted.
    "mode=existingSecret": Case(
        set_values=(
            "certificates.mode=existingSecret",
            "certificates.existingSecret.name=webhook-tls",
            f"certificates.existingSecret.caBundle={_b64(CI_CA_PEM)}",
        )
    ),
}


@dataclass
class Rendered:
    """The documents of one render, with lookups by kind and name."""

    docs: list[dict[str, Any]]
    values: dict[str, Any] = field(default_factory=dict)

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.docs]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def maybe(self, kind: str, name: str | None = None) -> dict[str, Any] | None:
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) <= 1, f"several {kind} named {name}: {found}"
        return found[0] if found else None

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        doc = self.maybe(kind, name)
        assert doc is not None, f"no {kind} {name or ''} in the render; kinds: {self.kinds()}"
        return doc


class HelmError(Exception):
    """helm exited non-zero; the message is its stderr."""


class Renderer:
    """Runs ``helm template`` (and ``helm lint``), memoising successful renders."""

    def __init__(self, helm: str) -> None:
        self.helm = helm
        self._cache: dict[tuple[str, ...], Rendered] = {}

    def run(self, args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.helm, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if check and proc.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
        return proc

    def template_args(self, extra: Sequence[str]) -> list[str]:
        return ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *extra]

    def render(self, *extra: str) -> Rendered:
        key = tuple(extra)
        if key not in self._cache:
            out = self.run(self.template_args(extra)).stdout
            docs = [d for d in yaml.safe_load_all(out) if d]
            self._cache[key] = Rendered(docs=docs)
        return self._cache[key]

    def render_case(self, case: Case) -> Rendered:
        return self.render(*case.args())

    def fails(self, *extra: str) -> str:
        """Render expecting failure; return helm's error output."""
        proc = self.run(self.template_args(extra), check=False)
        assert proc.returncode != 0, f"helm template {extra} unexpectedly succeeded"
        return proc.stderr


def webhooks(rendered: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    """(configuration kind, webhook entry) for every entry of both configurations."""
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for doc in rendered.all(kind):
            for hook in doc["webhooks"]:
                yield kind, hook


# Fixtures: the chart tests' conftest.py files import the ones they use.
def _find_helm() -> tuple[str | None, str]:
    """helm on PATH, else the one scripts/fetch_tools.py puts in .cache/tools."""
    on_path = shutil.which("helm")
    if on_path:
        return on_path, ""
    proc = subprocess.run(
        [sys.executable, str(FETCH_SCRIPT), "--dest", str(TOOLS)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    helm = TOOLS / "helm"
    if proc.returncode == 0 and helm.is_file():
        return str(helm), ""
    return None, (proc.stderr or proc.stdout).strip()


@pytest.fixture(scope="session")
def helm_bin() -> str:
    helm, why = _find_helm()
    if helm is None:
        pytest.skip(
            "helm is not on PATH and scripts/fetch_tools.py could not fetch it "
            f"(run `make tools`): {why}"
        )
    return helm


@pytest.fixture(scope="session")
def renderer(helm_bin: str) -> Renderer:
    return Renderer(helm_bin)


@pytest.fixture(scope="session")
def default_render(renderer: Renderer) -> Rendered:
    return renderer.render()


@pytest.fixture(scope="session")
def chart_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.fixture(scope="session")
def values_schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())
