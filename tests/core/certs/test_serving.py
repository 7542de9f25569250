"""webhook.certs.serving: the server context's policy and how it follows its files."""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from webhook.certs import issue, serving

NOW = dt.datetime.now(dt.UTC)


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


# --------------------------------------------------------------------------------------------
# build_server_context and ReloadingSSLContext
# --------------------------------------------------------------------------------------------


def test_server_context_policy(tmp_path: Path, ca: tuple[bytes, bytes]) -> None:
    paths = issue.write_certs(tmp_path)
    ctx = serving.build_server_context(paths.cert, paths.key)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(n.startswith("ECDHE-") for n in tls12)
    assert all("GCM" in n or "CHACHA20" in n for n in tls12)
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(ca[0])
    assert serving.build_server_context(paths.cert, paths.key, client_ca).verify_mode == (
        ssl.CERT_REQUIRED
    )


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def serial_of(path: Path) -> int:
    return load(path.read_bytes()).serial_number


def new_pair(
    paths: issue.CertPaths, *, days: int = 30, now: dt.datetime | None = None
) -> tuple[bytes, bytes]:
    return issue.make_serving_cert(
        paths.ca_cert.read_bytes(),
        paths.ca_key.read_bytes(),
        service="gpu-policy-webhook",
        namespace="gpu-policy",
        days=days,
        now=now,
    )


Served = tuple[issue.CertPaths, serving.ReloadingSSLContext, FakeClock]


@pytest.fixture
def served(tmp_path: Path) -> Served:
    paths = issue.write_certs(tmp_path)
    clock = FakeClock()
    return paths, serving.ReloadingSSLContext(paths.cert, paths.key, clock=clock), clock


def test_reload_after_interval_only(served: Served) -> None:
    paths, r, clock = served
    first_ctx, first_serial = r.context(), r.serial
    assert first_serial == serial_of(paths.cert)
    cert, key = new_pair(paths)
    issue.write_atomic(paths.key, key, mode=0o600)
    issue.write_atomic(paths.cert, cert, mode=0o644)

    clock.t += 0.5  # inside the interval: not even a stat
    assert r.context() is first_ctx
    clock.t += 0.6
    new_ctx = r.context()
    assert new_ctx is not first_ctx
    assert r.serial == load(cert).serial_number != first_serial
    assert r.last_error is None
    clock.t += 5  # unchanged files: the same context object
    assert r.context() is new_ctx


def test_half_rotated_pair_keeps_old_then_completes(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    paths, r, clock = served
    old_ctx, old_serial = r.context(), r.serial
    cert, key = new_pair(paths)
    caplog.set_level(logging.WARNING, logger="webhook.certs.serving")

    issue.write_atomic(paths.cert, cert)  # cert first: the key on disk is still the old one
    for _ in range(3):
        clock.t += 1.1
        assert r.context() is old_ctx
    assert r.serial == old_serial
    assert r.last_error is not None and "does not match" in r.last_error
    assert len([m for m in caplog.messages if "cannot be used" in m]) == 1  # logged once
    assert r.valid()  # the old certificate is still good to serve

    issue.write_atomic(paths.key, key, mode=0o600)
    clock.t += 1.1
    assert r.context() is not old_ctx
    assert r.serial == load(cert).serial_number
    assert r.last_error is None


@pytest.mark.parametrize("target", ["cert", "key"])
def test_garbage_files_keep_the_last_good_context(served: Served, target: str) -> None:
    paths, r, clock = served
    old_ctx = r.context()
    issue.write_atomic(getattr(paths, target), b"garbage\n")
    clock.t += 2
    assert r.context() is old_ctx
    assert r.status().last_error
    assert "files on disk not used" in r.status().reason


def test_missing_files_keep_the_last_good_context(served: Served) -> None:
    paths, r, clock = served
    old_ctx = r.context()
    paths.key.unlink()
    clock.t += 2
    assert r.context() is old_ctx
    assert r.last_error and "missing" in r.last_error


def test_broken_files_at_start_raise(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path)
    paths.key.write_bytes(issue.make_ca("x", 1)[1])
    with pytest.raises(issue.TLSError, match="does not match"):
        serving.ReloadingSSLContext(paths.cert, paths.key)
    with pytest.raises(issue.TLSError, match="missing"):
        serving.ReloadingSSLContext(tmp_path / "nope.crt", paths.key)


def test_expired_certificate_is_served_but_not_valid(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path)
    cert, key = new_pair(paths, days=1, now=NOW - dt.timedelta(days=2))
    paths.cert.write_bytes(cert)
    paths.key.write_bytes(key)
    clock = FakeClock()
    r = serving.ReloadingSSLContext(paths.cert, paths.key, clock=clock)
    assert not r.valid()
    assert "expired" in r.status().reason
    assert r.not_after < NOW
    # renewal makes it valid again at the next check, without a connection
    cert, key = new_pair(paths)
    issue.write_atomic(paths.key, key, mode=0o600)
    issue.write_atomic(paths.cert, cert)
    clock.t += 1.1
    assert r.valid()
    assert r.not_after > NOW


def test_kubelet_secret_volume_swap(tmp_path: Path) -> None:
    """A Secret volume: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>, swapped by rename."""
    source = issue.write_certs(tmp_path / "source")
    vol = tmp_path / "vol"
    vol.mkdir()

    def publish(name: str, cert: bytes, key: bytes) -> None:
        d = vol / name
        d.mkdir()
        (d / "tls.crt").write_bytes(cert)
        (d / "tls.key").write_bytes(key)
        (vol / "..data_tmp").symlink_to(name)
        os.replace(vol / "..data_tmp", vol / "..data")

    publish("..2026_01_01_00_00_00.1", source.cert.read_bytes(), source.key.read_bytes())
    for f in ("tls.crt", "tls.key"):
        (vol / f).symlink_to(f"..data/{f}")

    clock = FakeClock()
    r = serving.ReloadingSSLContext(vol / "tls.crt", vol / "tls.key", clock=clock)
    assert r.serial == serial_of(source.cert)
    cert, key = new_pair(source)
    publish("..2026_02_01_00_00_00.2", cert, key)
    clock.t += 1.1
    assert r.maybe_reload()
    assert r.serial == load(cert).serial_number


def test_client_ca_change_is_reloaded(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path)
    client_ca = tmp_path / "clients.crt"
    client_ca.write_bytes(issue.make_ca("clients-1", 1)[0])
    clock = FakeClock()
    r = serving.ReloadingSSLContext(paths.cert, paths.key, client_ca_file=client_ca, clock=clock)
    first = r.context()
    assert first.verify_mode == ssl.CERT_REQUIRED
    issue.write_atomic(client_ca, issue.make_ca("clients-2", 1)[0])
    clock.t += 1.1
    assert r.context() is not first


def test_ready_is_the_status_of_the_served_certificate(served: Served) -> None:
    status = served[1].status()
    assert served[1].ready() == (status.valid, status.reason)
    assert status.valid and status.reason.startswith("certificate valid until")
