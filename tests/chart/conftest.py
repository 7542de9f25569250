"""Fixtures for the Helm chart tests: the real ``helm`` binary and cached renders."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, FETCH_SCRIPT, TOOLS, Rendered, Renderer


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
