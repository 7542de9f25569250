#!/usr/bin/env python3
"""Fetch a real control plane for the tests: the official kube-apiserver, kube-controller-manager
and kube-scheduler release binaries and an etcd release, each checked against its published
SHA-256, into one folder; print that folder, for ``KUBEBUILDER_ASSETS``.

Usage::

    export KUBEBUILDER_ASSETS="$(python3 scripts/control_plane.py 1.36.2 .cache/control-plane)"

Where the files come from (docs/testing-control-plane.md cites the sources):

- ``https://dl.k8s.io/release/vVERSION/bin/linux/ARCH/NAME``, and beside each binary
  ``NAME.sha256``, which holds the hex digest alone;
- ``https://github.com/etcd-io/etcd/releases/download/vETCD/etcd-vETCD-linux-ARCH.tar.gz``,
  whose digest is the line for that archive in ``SHA256SUMS`` beside it; the archive holds
  ``etcd-vETCD-linux-ARCH/etcd``.

Nothing is installed until its digest matches; a file already in DIR with the published digest
is not downloaded again (the small checksum files are). Exit codes: 0 done (the folder is
printed on stdout), 1 a download failed (unreachable, missing, not a release), 2 a checksum
did not match or an argument is wrong; always one line on stderr. Standard library only, so it
runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

KUBE_BASE_URL = "https://dl.k8s.io/release"
ETCD_BASE_URL = "https://github.com/etcd-io/etcd/releases/download"
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The tests were written against etcd 3.5 (docs/testing-control-plane.md).
ETCD_VERSION = "3.5.21"
# The Linux architectures both projects publish; uname's names for the first two are accepted.
ARCHES = ("amd64", "arm64", "ppc64le", "s390x")
MACHINE_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
CHUNK = 1 << 20
TIMEOUT = 60.0
EXIT_OK, EXIT_FETCH, EXIT_REFUSED = 0, 1, 2


class FetchError(Exception):
    """A download failed: exit 1."""


class Refused(Exception):
    """A checksum did not match, or an argument is wrong: exit 2."""


def arch_name(value: str) -> str:
    """The release name of an architecture (``amd64``), from it or from uname's (``x86_64``)."""
    name = MACHINE_ARCH.get(value, value)
    if name not in ARCHES:
        choices = ", ".join(ARCHES)
        raise Refused(f"no Linux release for architecture {value!r}: use one of {choices}")
    return name


def plain_version(value: str) -> str:
    """``1.36.2`` from ``1.36.2`` or ``v1.36.2``; refuses what is not a version."""
    version = value.removeprefix("v")
    parts = version.split("-", 1)[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise Refused(f"{value!r} is not a release version such as 1.36.2")
    return version


def kube_url(base: str, version: str, arch: str, name: str) -> str:
    """Where Kubernetes publishes one binary of a release (its ``.sha256`` is beside it)."""
    return f"{base.rstrip('/')}/v{version}/bin/linux/{arch}/{name}"


def etcd_archive(version: str, arch: str) -> str:
    """The file name of an etcd release archive: ``etcd-v3.5.21-linux-amd64.tar.gz``."""
    return f"etcd-v{version}-linux-{arch}.tar.gz"


def etcd_url(base: str, version: str, name: str) -> str:
    """Where etcd publishes a file of a release (the archives and ``SHA256SUMS``)."""
    return f"{base.rstrip('/')}/v{version}/{name}"


def _open(url: str) -> BinaryIO:
    if not url.startswith(("https://", "http://")):
        raise Refused(f"{url}: only http and https URLs are fetched")
    try:
        # The scheme is checked above: no file:// or custom opener reaches urlopen.
        return urllib.request.urlopen(url, timeout=TIMEOUT)  # noqa: S310
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"{url}: {reason}") from exc


def fetch_text(url: str) -> str:
    """A small text file (a checksum file), whole."""
    with _open(url) as answer:
        return answer.read(1 << 20).decode("utf-8", "replace")


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def download(url: str, dest: Path) -> str:
    """Write the file at ``url`` to ``dest`` and return its SHA-256 (hex)."""
    digest = hashlib.sha256()
    with _open(url) as answer, dest.open("wb") as out:
        try:
            for chunk in _chunks(answer):
                digest.update(chunk)
                out.write(chunk)
        except OSError as exc:
            raise FetchError(f"{url}: {exc}") from exc
    return digest.hexdigest()


def file_sha256(path: Path) -> str | None:
    """The SHA-256 of a file, or None where there is none."""
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in _chunks(f):
            digest.update(chunk)
    return digest.hexdigest()


def _digest(text: str, where: str) -> str:
    value = text.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise Refused(f"{where}: not a SHA-256 digest: {text.strip()[:80]!r}")
    return value


def sha256_file_digest(text: str, url: str) -> str:
    """The digest of a Kubernetes ``NAME.sha256`` file: the hex digest alone (a ``sha256sum``
    line, digest then name, is read too)."""
    words = text.split()
    return _digest(words[0] if words else "", url)


def sums_digest(text: str, name: str, url: str) -> str:
    """The digest of ``name`` in a ``SHA256SUMS`` file (``sha256sum`` lines: digest, two
    spaces or a space and ``*``, the file name)."""
    for line in text.splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and words[1].strip().lstrip("*").removeprefix("./") == name:
            return _digest(words[0], url)
    raise FetchError(f"{url}: no line for {name}")


def _check(got: str, want: str, what: str) -> None:
    if got != want:
        raise Refused(f"checksum mismatch for {what}: published {want}, downloaded {got}")


def install_binary(url: str, want: str, dest: Path) -> bool:
    """Put the verified file at ``url`` at ``dest`` (executable); False when it was there."""
    if file_sha256(dest) == want:
        return False
    with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", delete=False) as t:
        tmp = Path(t.name)
    try:
        _check(download(url, tmp), want, url)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def install_etcd(base: str, version: str, arch: str, folder: Path) -> bool:
    """Put ``etcd`` from the verified release archive into ``folder``; False when it was there.

    The archive's digest is kept beside the binary (``.etcd.sha256``): the binary itself has no
    published digest, so this is how a later run knows it came from that archive.
    """
    name = etcd_archive(version, arch)
    sums_url = etcd_url(base, version, "SHA256SUMS")
    want = sums_digest(fetch_text(sums_url), name, sums_url)
    stamp, binary = folder / ".etcd.sha256", folder / "etcd"
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == want:
        return False
    url = etcd_url(base, version, name)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".etcd-") as work:
        archive = Path(work) / name
        _check(download(url, archive), want, url)
        member = f"etcd-v{version}-linux-{arch}/etcd"
        try:
            with tarfile.open(archive, "r:gz") as tar:
                found = tar.getmember(member)
                source = tar.extractfile(found) if found.isfile() else None
                if source is None:
                    raise FetchError(f"{url}: {member} is not a file")
                tmp = Path(work) / "etcd"
                with tmp.open("wb") as out:
                    for chunk in _chunks(source):
                        out.write(chunk)
        except KeyError as exc:
            raise FetchError(f"{url}: no {member} in the archive") from exc
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise FetchError(f"{url}: not a readable .tar.gz ({exc})") from exc
        tmp.chmod(0o755)
        os.replace(tmp, binary)
    stamp.write_text(want + "\n")
    return True


def fetch_control_plane(args: argparse.Namespace) -> Path:
    """Every binary into ``args.dir``; returns the folder's absolute path."""
    version, etcd_version = plain_version(args.version), plain_version(args.etcd_version)
    arch = arch_name(args.arch)
    folder = Path(args.dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for name in KUBE_BINARIES:
        url = kube_url(args.kube_base_url, version, arch, name)
        want = sha256_file_digest(fetch_text(url + ".sha256"), url + ".sha256")
        fetched = install_binary(url, want, folder / name)
        _say(args, f"{name} v{version} {arch}: {'fetched' if fetched else 'already there'}")
    fetched = install_etcd(args.etcd_base_url, etcd_version, arch, folder)
    _say(args, f"etcd v{etcd_version} {arch}: {'fetched' if fetched else 'already there'}")
    return folder


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.quiet:
        print(line, file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The command line: VERSION DIR and where to fetch from."""
    p = argparse.ArgumentParser(
        prog="control_plane.py",
        description="Fetch kube-apiserver, kube-controller-manager, kube-scheduler and etcd, "
        "verify their published SHA-256 sums, and print the folder for KUBEBUILDER_ASSETS.",
    )
    p.add_argument("version", metavar="VERSION", help="Kubernetes release, e.g. 1.36.2")
    p.add_argument("dir", metavar="DIR", help="folder to put the four binaries in")
    p.add_argument("--etcd-version", default=ETCD_VERSION, help=f"default: {ETCD_VERSION}")
    p.add_argument(
        "--arch",
        default=platform.machine(),
        help=f"one of {', '.join(ARCHES)} (default: this machine's)",
    )
    p.add_argument("--kube-base-url", default=KUBE_BASE_URL, help=f"default: {KUBE_BASE_URL}")
    p.add_argument("--etcd-base-url", default=ETCD_BASE_URL, help=f"default: {ETCD_BASE_URL}")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the folder")
    return p


def main(argv: list[str] | None = None) -> int:
    """Fetch, verify, print the folder; one line on stderr and exit 1 or 2 otherwise."""
    args = build_parser().parse_args(argv)
    try:
        folder = fetch_control_plane(args)
    except Refused as exc:
        print(f"control_plane.py: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except FetchError as exc:
        print(f"control_plane.py: download failed: {exc}", file=sys.stderr)
        return EXIT_FETCH
    except OSError as exc:
        print(f"control_plane.py: {exc}", file=sys.stderr)
        return EXIT_FETCH
    print(folder)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
