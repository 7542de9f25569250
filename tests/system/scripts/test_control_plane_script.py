"""scripts/control_plane.py against a release site served on loopback (no network).

The site is laid out as the real ones are (docs/testing-control-plane.md): Kubernetes binaries
under ``vVERSION/bin/linux/ARCH/`` with a ``NAME.sha256`` holding the bare digest, etcd
archives under ``vVERSION/`` with ``SHA256SUMS`` lines (digest, two spaces, file name).
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.fake_http import JsonHandler, LoopbackServer
from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "control_plane.py"
KUBE = "1.36.2"
ETCD = "3.5.21"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


class _FileHandler(JsonHandler):
    """GET of a path the site holds: its bytes; anything else: 404."""

    def do_GET(self) -> None:
        site: ReleaseSite = self.fake
        site.requests.append(self.path)
        body = site.files.get(self.path)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ReleaseSite(LoopbackServer):
    """dl.k8s.io and etcd's GitHub releases, as files in memory."""

    handler = _FileHandler

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def etcd_tarball(version: str, arch: str, etcd: bytes) -> bytes:
    """An archive shaped like etcd's: etcd, etcdctl and a README under one folder."""
    out = io.BytesIO()
    top = f"etcd-v{version}-linux-{arch}"
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (
            ("etcd", etcd),
            ("etcdctl", b"etcdctl " + arch.encode()),
            ("README.md", b"x"),
        ):
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@dataclass
class Release:
    """What the site publishes for one architecture, and the binaries' expected contents."""

    site: ReleaseSite
    contents: dict[str, bytes] = field(default_factory=dict)

    def publish(self, arch: str = "amd64") -> None:
        for name in BINARIES:
            data = f"{name} v{KUBE} linux/{arch}\n".encode() * 1000
            path = f"/release/v{KUBE}/bin/linux/{arch}/{name}"
            self.site.files[path] = data
            # The bare digest, no newline, as the release tooling writes it.
            self.site.files[path + ".sha256"] = sha256(data).encode()
            self.contents[name] = data
        etcd = f"etcd v{ETCD} linux/{arch}\n".encode() * 500
        archive = etcd_tarball(ETCD, arch, etcd)
        name = f"etcd-v{ETCD}-linux-{arch}.tar.gz"
        self.site.files[f"/etcd/v{ETCD}/{name}"] = archive
        sums = self.site.files.get(f"/etcd/v{ETCD}/SHA256SUMS", b"").decode()
        sums += f"{sha256(b'zip')}  etcd-v{ETCD}-darwin-{arch}.zip\n{sha256(archive)}  {name}\n"
        self.site.files[f"/etcd/v{ETCD}/SHA256SUMS"] = sums.encode()
        self.contents["etcd"] = etcd

    def run(
        self, dest: Path, *, arch: str = "amd64", quiet: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The script as a user runs it; ``quiet``: stderr holds only an error."""
        cmd = [sys.executable, str(SCRIPT), KUBE, str(dest), "--arch", arch]
        cmd += ["--kube-base-url", f"{self.site.url}/release"]
        cmd += ["--etcd-base-url", f"{self.site.url}/etcd"]
        cmd += ["--quiet"] if quiet else []
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def release() -> Release:
    with ReleaseSite() as site:
        found = Release(site)
        found.publish("amd64")
        yield found


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_fetches_verifies_and_prints_the_folder(release: Release, tmp_path: Path) -> None:
    dest = tmp_path / "assets"
    done = release.run(dest)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{dest.resolve()}\n"
    assert done.stderr == ""
    for name, data in release.contents.items():
        assert (dest / name).read_bytes() == data
        assert (dest / name).stat().st_mode & 0o777 == 0o755
    assert not (dest / "etcdctl").exists()
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == sorted(
        [*BINARIES, "etcd"]
    )


def test_a_second_run_downloads_only_the_checksums(release: Release, tmp_path: Path) -> None:
    assert release.run(tmp_path).returncode == 0
    release.site.requests.clear()
    done = release.run(tmp_path, quiet=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("already there") == 4
    assert sorted(release.site.requests) == sorted(
        [f"/release/v{KUBE}/bin/linux/amd64/{n}.sha256" for n in BINARIES]
        + [f"/etcd/v{ETCD}/SHA256SUMS"]
    )


def test_a_changed_binary_is_refused_and_not_installed(release: Release, tmp_path: Path) -> None:
    path = f"/release/v{KUBE}/bin/linux/amd64/kube-scheduler"
    release.site.files[path] = b"something else"
    done = release.run(tmp_path)
    assert done.returncode == 2
    line = error_line(done)
    assert "checksum mismatch" in line
    assert f"{release.site.url}{path}" in line
    assert sha256(b"something else") in line
    assert not (tmp_path / "kube-scheduler").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_changed_etcd_archive_is_refused(release: Release, tmp_path: Path) -> None:
    path = f"/etcd/v{ETCD}/etcd-v{ETCD}-linux-amd64.tar.gz"
    release.site.files[path] = etcd_tarball(ETCD, "amd64", b"not the released etcd")
    done = release.run(tmp_path)
    assert done.returncode == 2
    assert "checksum mismatch" in error_line(done)
    assert not (tmp_path / "etcd").exists()


def test_a_binary_changed_after_install_is_fetched_again(release: Release, tmp_path: Path) -> None:
    assert release.run(tmp_path).returncode == 0
    (tmp_path / "kube-apiserver").write_bytes(b"corrupted on disk")
    done = release.run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "kube-apiserver").read_bytes() == release.contents["kube-apiserver"]


def test_a_missing_checksum_file_stops_it(release: Release, tmp_path: Path) -> None:
    path = f"/release/v{KUBE}/bin/linux/amd64/kube-controller-manager.sha256"
    del release.site.files[path]
    done = release.run(tmp_path)
    assert done.returncode == 1
    line = error_line(done)
    assert line.startswith("control_plane.py: download failed:")
    assert f"{release.site.url}{path}: HTTP 404" in line
    assert not (tmp_path / "kube-controller-manager").exists()


def test_an_archive_missing_from_the_sums_stops_it(release: Release, tmp_path: Path) -> None:
    release.site.files[f"/etcd/v{ETCD}/SHA256SUMS"] = b""
    done = release.run(tmp_path)
    assert done.returncode == 1
    assert f"no line for etcd-v{ETCD}-linux-amd64.tar.gz" in error_line(done)


def test_an_architecture_the_site_lacks_is_a_404(release: Release, tmp_path: Path) -> None:
    done = release.run(tmp_path, arch="arm64")
    assert done.returncode == 1
    assert f"/release/v{KUBE}/bin/linux/arm64/kube-apiserver.sha256: HTTP 404" in error_line(done)
    assert not list(tmp_path.iterdir())


def test_uname_names_are_accepted_and_others_refused(release: Release, tmp_path: Path) -> None:
    release.publish("arm64")
    done = release.run(tmp_path / "a", arch="aarch64")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a" / "kube-scheduler").read_bytes() == release.contents["kube-scheduler"]
    assert b"linux/arm64" in (tmp_path / "a" / "etcd").read_bytes()

    release.site.requests.clear()
    done = release.run(tmp_path / "b", arch="sparc64")
    assert done.returncode == 2
    assert "no Linux release for architecture 'sparc64'" in error_line(done)
    assert release.site.requests == []
