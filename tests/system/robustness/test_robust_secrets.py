"""No secrets in the repository or the image.

Keys and certificates are made at run time (``gpu-policy certs``, the chart, cert-manager) and
live in git-ignored ``certs/*/``; nothing tracked may hold a private key. The image's build
context is an allow-list (.dockerignore: ``*`` then ``pyproject.toml``, ``README.md``,
``webhook/``), so ``certs/`` and every test fixture stay out of it.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess

import pytest

from tests.system.robustness.robust_server import REPO

KEY_SUFFIXES = (".pem", ".key", ".crt", ".p12", ".pfx", ".jks", ".der")
PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----")
TOKEN = re.compile(rb"eyJhbGciOi[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}")  # a JWT (SA token)


def tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p]


def test_no_key_or_certificate_files_are_tracked() -> None:
    files = tracked()
    assert files
    assert [f for f in files if f.lower().endswith(KEY_SUFFIXES)] == []


def test_no_tracked_file_holds_a_private_key_or_a_token() -> None:
    found = []
    for name in tracked():
        path = REPO / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        # Tests may name the PEM header to check generated Secrets; a key has a body.
        for m in PRIVATE_KEY.finditer(data):
            if re.match(rb"\s*[A-Za-z0-9+/=]{40,}", data[m.end() :]):
                found.append(name)
        if TOKEN.search(data):
            found.append(name)
    assert found == []


def test_generated_keys_are_git_ignored() -> None:
    ignore = (REPO / ".gitignore").read_text().split()
    for pattern in ("certs/*/", "*.pem", "*.key", "*.crt"):
        assert pattern in ignore


def test_the_image_context_is_an_allow_list_without_certs() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "the build context must start from nothing"
    allowed = [line[1:].rstrip("/") for line in lines if line.startswith("!")]
    assert "certs" not in allowed and not any(a.startswith("certs") for a in allowed)
    # What the allow-list lets in holds no key material.
    for name in tracked():
        if any(name == a or name.startswith(a + "/") for a in allowed):
            assert not name.lower().endswith(KEY_SUFFIXES), name
            assert not PRIVATE_KEY.search((REPO / name).read_bytes()), name
    dockerfile = (REPO / "Dockerfile").read_text()
    assert not re.search(r"^\s*(COPY|ADD)\s+.*certs", dockerfile, re.MULTILINE)
    assert not fnmatch.filter(re.findall(r"^\s*(?:COPY|ADD)\s+(\S+)", dockerfile, re.M), "*.key")
