"""The Dockerfile, built and run: the image serves the webhook as the Helm chart runs it.

scripts/image_check.py builds the image on a local stand-in for python:3.11-slim-bookworm
(no registry needed), starts it read-only as 65532 with generated certificates, and each
test below is one of its checks against that container. Where the tools (buildah, podman,
runc, mmdebstrap) cannot be had, every test is skipped with the reason; `make test` shows it
(pytest -rs) and the terminal summary repeats it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "image_check.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up by name while the class bodies run.
    sys.modules["image_check"] = module
    spec.loader.exec_module(module)
    return module


image_check = _load()


@pytest.fixture(scope="module")
def container(image_summary: list[str]) -> Iterator[Any]:
    summary = image_summary
    timings = image_check.Timings()
    try:
        session = image_check.prepare(timings)
    except image_check.Unavailable as exc:
        summary.append(f"not run: {exc}")
        pytest.skip(str(exc))
    except image_check.StepFailed as exc:
        summary.append(f"failed: {str(exc).splitlines()[0]}")
        pytest.fail(str(exc), pytrace=False)
    try:
        with timings.phase("checks"):
            yield session.container
    finally:
        session.close()
        lines = session.report()
        image_check.write_report(lines)
        summary += lines


# A cold run (base image made with mmdebstrap, tools installed) takes a few minutes.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    "check",
    [check for _, check in image_check.CHECKS],
    ids=[name for name, _ in image_check.CHECKS],
)
def test_image(container: Any, check: Callable[[Any], str | None]) -> None:
    problem = check(container)
    assert problem is None, f"{(check.__doc__ or '').splitlines()[0]}\n{problem}"


ALL = ["buildah", "podman", "runc", "mmdebstrap"]


@pytest.mark.parametrize(
    ("env", "euid", "missing", "expected"),
    [
        pytest.param(
            {"GPU_POLICY_IMAGE_CHECK": "0"},
            0,
            [],
            ["turned off", "GPU_POLICY_IMAGE_CHECK=0"],
            id="turned-off",
        ),
        pytest.param(
            {},
            1000,
            [],
            ["needs root", "sudo .venv/bin/python scripts/image_check.py"],
            id="not-root",
        ),
        pytest.param(
            {"CI": "true"},
            1000,
            ["buildah", "runc"],
            ["needs root", "also missing: buildah runc", "apt-get install -y buildah runc"],
            id="not-root-and-missing",
        ),
        pytest.param(
            {},
            0,
            ALL,
            [
                "missing buildah, podman, runc, mmdebstrap",
                "apt-get install -y buildah podman runc mmdebstrap",
                "GPU_POLICY_IMAGE_INSTALL=1",
            ],
            id="root-missing-not-allowed-to-install",
        ),
        pytest.param(
            {"CI": "false"},
            0,
            ["podman"],
            ["missing podman", "GPU_POLICY_IMAGE_INSTALL=1"],
            id="ci-false",
        ),
        pytest.param({"CI": "true"}, 0, ALL, None, id="ci-installs"),
        pytest.param(
            {"GPU_POLICY_IMAGE_INSTALL": "1"}, 0, ["mmdebstrap"], None, id="opt-in-installs"
        ),
        pytest.param({}, 0, [], None, id="root-with-tools"),
    ],
)
def test_refusal_names_what_is_missing_and_the_fix(
    env: dict[str, str],
    euid: int,
    missing: list[str],
    expected: list[str] | None,
) -> None:
    reason = image_check.refusal(env, euid, missing, "/usr/bin/apt-get")
    if expected is None:
        assert reason is None
    else:
        assert reason is not None
        for part in expected:
            assert part in reason


def test_no_apt_get_to_install_with() -> None:
    reason = image_check.refusal({"CI": "true"}, 0, ["buildah"], None)
    assert reason == "missing buildah, and no apt-get to install them"


@pytest.mark.parametrize("driver", ["overlay", "vfs"])
def test_storage_driver_chosen_by_the_variable(driver: str, tmp_path: Path) -> None:
    """GPU_POLICY_IMAGE_STORAGE wins over the probe (vfs where overlay mounts misbehave)."""
    assert image_check.storage_driver({"GPU_POLICY_IMAGE_STORAGE": driver}, tmp_path) == driver


def test_unknown_storage_driver_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(image_check.StepFailed, match="GPU_POLICY_IMAGE_STORAGE=zfs: use one of"):
        image_check.storage_driver({"GPU_POLICY_IMAGE_STORAGE": "zfs"}, tmp_path)
