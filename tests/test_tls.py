"""Unit tests for webhook.tls: certificate contents, write_certs, the reloading context."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook import tls

NOW = dt.datetime.now(dt.UTC)


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


@pytest.fixture(scope="module")
def ca() -> tuple[bytes, bytes]:
    return tls.make_ca("test-ca", 30)


# --------------------------------------------------------------------------------------------
# certificate contents
# --------------------------------------------------------------------------------------------


def test_ca_is_a_constrained_ca(ca: tuple[bytes, bytes]) -> None:
    cert = load(ca[0])
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign and ku.crl_sign
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(cert)  # self-signed


def test_serving_cert_names_usages_and_chain(ca: tuple[bytes, bytes]) -> None:
    cert_pem, _ = tls.make_serving_cert(
        *ca, service="hook", namespace="ns", days=10, extra_sans=["hook.example.org", "10.0.0.7"]
    )
    cert, ca_cert = load(cert_pem), load(ca[0])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "hook",
        "hook.ns",
        "hook.ns.svc",
        "hook.ns.svc.cluster.local",
        "localhost",
        "hook.example.org",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
        ipaddress.ip_address("10.0.0.7"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and not bc.value.ca
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.digital_signature and not ku.value.key_cert_sign
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    cert.verify_directly_issued_by(ca_cert)
    assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc
    assert cert.not_valid_after_utc - NOW > dt.timedelta(days=9, hours=23)


def test_client_cert_is_for_client_auth(ca: tuple[bytes, bytes]) -> None:
    cert = load(tls.make_client_cert(*ca, common_name="apiserver")[0])
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert.verify_directly_issued_by(load(ca[0]))


def test_serials_differ(ca: tuple[bytes, bytes]) -> None:
    serials = {
        load(tls.make_serving_cert(*ca, service="s", namespace="n", days=1)[0]).serial_number
        for _ in range(3)
    }
    assert len(serials) == 3


def test_days_must_be_positive() -> None:
    with pytest.raises(ValueError, match="days"):
        tls.make_ca("x", 0)


def test_signing_with_a_key_of_another_ca_is_refused(ca: tuple[bytes, bytes]) -> None:
    other_key = tls.make_ca("other", 1)[1]
    with pytest.raises(tls.TLSError, match="does not match"):
        tls.make_serving_cert(ca[0], other_key, service="s", namespace="n", days=1)


# --------------------------------------------------------------------------------------------
# write_certs
# --------------------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def snapshot(paths: tls.CertPaths) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (paths.ca_cert, paths.ca_key, paths.cert, paths.key)}


def test_write_certs_files_modes_and_sans(tmp_path: Path) -> None:
    out = tmp_path / "certs" / "dev"
    paths = tls.write_certs(out, service="hook", namespace="ns", days=5)
    assert paths == tls.CertPaths.in_dir(out)
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert mode(paths.key) == 0o600 and mode(paths.ca_key) == 0o600
    assert mode(paths.cert) == 0o644 and mode(paths.ca_cert) == 0o644
    cert = load(paths.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "hook.ns.svc" in san.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    cert.verify_directly_issued_by(load(paths.ca_cert.read_bytes()))
    # the pair is servable
    tls.build_server_context(paths.cert, paths.key)


def test_write_certs_overwrites_without_if_missing(tmp_path: Path) -> None:
    first = snapshot(tls.write_certs(tmp_path))
    second = snapshot(tls.write_certs(tmp_path))
    assert all(first[name] != second[name] for name in first)


def test_if_missing_keeps_valid_files(tmp_path: Path) -> None:
    paths = tls.write_certs(tmp_path)
    before = snapshot(paths)
    inode = paths.key.stat().st_ino
    assert tls.write_certs(tmp_path, if_missing=True) == paths
    assert snapshot(paths) == before
    assert paths.key.stat().st_ino == inode  # not even rewritten


def test_if_missing_creates_when_absent(tmp_path: Path) -> None:
    paths = tls.write_certs(tmp_path / "new", if_missing=True)
    assert paths.cert.exists() and mode(paths.key) == 0o600


def test_if_missing_reissues_expired_serving_cert_and_keeps_the_ca(tmp_path: Path) -> None:
    paths = tls.write_certs(tmp_path)
    ca_cert, ca_key = paths.ca_cert.read_bytes(), paths.ca_key.read_bytes()
    expired_cert, expired_key = tls.make_serving_cert(
        ca_cert,
        ca_key,
        service="gpu-policy-webhook",
        namespace="gpu-policy",
        days=1,
        now=NOW - dt.timedelta(days=3),
    )
    paths.cert.write_bytes(expired_cert)
    paths.key.write_bytes(expired_key)

    tls.write_certs(tmp_path, if_missing=True)

    assert paths.ca_cert.read_bytes() == ca_cert and paths.ca_key.read_bytes() == ca_key
    assert paths.cert.read_bytes() != expired_cert
    cert = load(paths.cert.read_bytes())
    assert cert.not_valid_after_utc > NOW + dt.timedelta(days=300)
    cert.verify_directly_issued_by(load(ca_cert))
    assert mode(paths.key) == 0o600


def test_if_missing_regenerates_everything_when_the_ca_expired(tmp_path: Path) -> None:
    paths = tls.write_certs(tmp_path)
    old_ca = tls.make_ca("old", 1, now=NOW - dt.timedelta(days=2))
    paths.ca_cert.write_bytes(old_ca[0])
    paths.ca_key.write_bytes(old_ca[1])
    tls.write_certs(tmp_path, if_missing=True)
    assert paths.ca_cert.read_bytes() != old_ca[0]
    load(paths.cert.read_bytes()).verify_directly_issued_by(load(paths.ca_cert.read_bytes()))


@pytest.mark.parametrize(
    "damage",
    ["key-of-another-pair", "garbage-cert", "missing-key", "other-namespace", "other-ca"],
)
def test_if_missing_replaces_unusable_serving_pairs(tmp_path: Path, damage: str) -> None:
    paths = tls.write_certs(tmp_path)
    namespace = "gpu-policy"
    if damage == "key-of-another-pair":
        paths.key.write_bytes(tls.make_ca("x", 1)[1])
    elif damage == "garbage-cert":
        paths.cert.write_bytes(b"-----BEGIN CERTIFICATE-----\nnope\n")
    elif damage == "missing-key":
        paths.key.unlink()
    elif damage == "other-namespace":
        namespace = "elsewhere"
    elif damage == "other-ca":
        other = tls.make_ca("other", 10)
        pair = tls.make_serving_cert(
            *other, service="gpu-policy-webhook", namespace="gpu-policy", days=10
        )
        paths.cert.write_bytes(pair[0])
        paths.key.write_bytes(pair[1])
    ca_before = paths.ca_cert.read_bytes()

    tls.write_certs(tmp_path, namespace=namespace, if_missing=True)

    assert paths.ca_cert.read_bytes() == ca_before
    ctx_ok = tls.build_server_context(paths.cert, paths.key)
    assert isinstance(ctx_ok, ssl.SSLContext)
    cert = load(paths.cert.read_bytes())
    cert.verify_directly_issued_by(load(ca_before))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"gpu-policy-webhook.{namespace}.svc" in san.get_values_for_type(x509.DNSName)


def test_write_atomic_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "k"
    tls.write_atomic(target, b"one", mode=0o600)
    tls.write_atomic(target, b"two", mode=0o600)
    assert target.read_bytes() == b"two" and mode(target) == 0o600
    assert os.listdir(tmp_path) == ["k"]


# --------------------------------------------------------------------------------------------
# build_server_context and ReloadingSSLContext
# --------------------------------------------------------------------------------------------


def test_server_context_policy(tmp_path: Path, ca: tuple[bytes, bytes]) -> None:
    paths = tls.write_certs(tmp_path)
    ctx = tls.build_server_context(paths.cert, paths.key)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(n.startswith("ECDHE-") for n in tls12)
    assert all("GCM" in n or "CHACHA20" in n for n in tls12)
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(ca[0])
    assert tls.build_server_context(paths.cert, paths.key, client_ca).verify_mode == (
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
    paths: tls.CertPaths, *, days: int = 30, now: dt.datetime | None = None
) -> tuple[bytes, bytes]:
    return tls.make_serving_cert(
        paths.ca_cert.read_bytes(),
        paths.ca_key.read_bytes(),
        service="gpu-policy-webhook",
        namespace="gpu-policy",
        days=days,
        now=now,
    )


Served = tuple[tls.CertPaths, tls.ReloadingSSLContext, FakeClock]


@pytest.fixture
def served(tmp_path: Path) -> Served:
    paths = tls.write_certs(tmp_path)
    clock = FakeClock()
    return paths, tls.ReloadingSSLContext(paths.cert, paths.key, clock=clock), clock


def test_reload_after_interval_only(served: Served) -> None:
    paths, r, clock = served
    first_ctx, first_serial = r.context(), r.serial
    assert first_serial == serial_of(paths.cert)
    cert, key = new_pair(paths)
    tls.write_atomic(paths.key, key, mode=0o600)
    tls.write_atomic(paths.cert, cert, mode=0o644)

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
    caplog.set_level(logging.WARNING, logger="webhook.tls")

    tls.write_atomic(paths.cert, cert)  # cert first: the key on disk is still the old one
    for _ in range(3):
        clock.t += 1.1
        assert r.context() is old_ctx
    assert r.serial == old_serial
    assert r.last_error is not None and "does not match" in r.last_error
    assert len([m for m in caplog.messages if "cannot be used" in m]) == 1  # logged once
    assert r.valid()  # the old certificate is still good to serve

    tls.write_atomic(paths.key, key, mode=0o600)
    clock.t += 1.1
    assert r.context() is not old_ctx
    assert r.serial == load(cert).serial_number
    assert r.last_error is None


@pytest.mark.parametrize("target", ["cert", "key"])
def test_garbage_files_keep_the_last_good_context(served: Served, target: str) -> None:
    paths, r, clock = served
    old_ctx = r.context()
    tls.write_atomic(getattr(paths, target), b"garbage\n")
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
    paths = tls.write_certs(tmp_path)
    paths.key.write_bytes(tls.make_ca("x", 1)[1])
    with pytest.raises(tls.TLSError, match="does not match"):
        tls.ReloadingSSLContext(paths.cert, paths.key)
    with pytest.raises(tls.TLSError, match="missing"):
        tls.ReloadingSSLContext(tmp_path / "nope.crt", paths.key)


def test_expired_certificate_is_served_but_not_valid(tmp_path: Path) -> None:
    paths = tls.write_certs(tmp_path)
    cert, key = new_pair(paths, days=1, now=NOW - dt.timedelta(days=2))
    paths.cert.write_bytes(cert)
    paths.key.write_bytes(key)
    clock = FakeClock()
    r = tls.ReloadingSSLContext(paths.cert, paths.key, clock=clock)
    assert not r.valid()
    assert "expired" in r.status().reason
    assert r.not_after < NOW
    # renewal makes it valid again at the next check, without a connection
    cert, key = new_pair(paths)
    tls.write_atomic(paths.key, key, mode=0o600)
    tls.write_atomic(paths.cert, cert)
    clock.t += 1.1
    assert r.valid()
    assert r.not_after > NOW


def test_kubelet_secret_volume_swap(tmp_path: Path) -> None:
    """A Secret volume: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>, swapped by rename."""
    source = tls.write_certs(tmp_path / "source")
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
    r = tls.ReloadingSSLContext(vol / "tls.crt", vol / "tls.key", clock=clock)
    assert r.serial == serial_of(source.cert)
    cert, key = new_pair(source)
    publish("..2026_02_01_00_00_00.2", cert, key)
    clock.t += 1.1
    assert r.maybe_reload()
    assert r.serial == load(cert).serial_number


def test_client_ca_change_is_reloaded(tmp_path: Path) -> None:
    paths = tls.write_certs(tmp_path)
    client_ca = tmp_path / "clients.crt"
    client_ca.write_bytes(tls.make_ca("clients-1", 1)[0])
    clock = FakeClock()
    r = tls.ReloadingSSLContext(paths.cert, paths.key, client_ca_file=client_ca, clock=clock)
    first = r.context()
    assert first.verify_mode == ssl.CERT_REQUIRED
    tls.write_atomic(client_ca, tls.make_ca("clients-2", 1)[0])
    clock.t += 1.1
    assert r.context() is not first


def test_serving_registry(served: Served) -> None:
    previous = tls.serving()
    try:
        tls.register_serving(served[1])
        assert tls.serving() is served[1]
    finally:
        tls.register_serving(previous)
