"""webhook.certs.issue: certificate contents, write_certs and atomic writes."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.certs import issue, serving

NOW = dt.datetime.now(dt.UTC)


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


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
    cert_pem, _ = issue.make_serving_cert(
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
    cert = load(issue.make_client_cert(*ca, common_name="apiserver")[0])
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert.verify_directly_issued_by(load(ca[0]))


def test_serials_differ(ca: tuple[bytes, bytes]) -> None:
    serials = {
        load(issue.make_serving_cert(*ca, service="s", namespace="n", days=1)[0]).serial_number
        for _ in range(3)
    }
    assert len(serials) == 3


def test_days_must_be_positive() -> None:
    with pytest.raises(ValueError, match="days"):
        issue.make_ca("x", 0)


def test_signing_with_a_key_of_another_ca_is_refused(ca: tuple[bytes, bytes]) -> None:
    other_key = issue.make_ca("other", 1)[1]
    with pytest.raises(issue.TLSError, match="does not match"):
        issue.make_serving_cert(ca[0], other_key, service="s", namespace="n", days=1)


# --------------------------------------------------------------------------------------------
# write_certs
# --------------------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def snapshot(paths: issue.CertPaths) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (paths.ca_cert, paths.ca_key, paths.cert, paths.key)}


def test_write_certs_files_modes_and_sans(tmp_path: Path) -> None:
    out = tmp_path / "certs" / "dev"
    paths = issue.write_certs(out, service="hook", namespace="ns", days=5)
    assert paths == issue.CertPaths.in_dir(out)
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert mode(paths.key) == 0o600 and mode(paths.ca_key) == 0o600
    assert mode(paths.cert) == 0o644 and mode(paths.ca_cert) == 0o644
    cert = load(paths.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "hook.ns.svc" in san.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    cert.verify_directly_issued_by(load(paths.ca_cert.read_bytes()))
    # the pair is servable
    serving.build_server_context(paths.cert, paths.key)


def test_write_certs_overwrites_without_if_missing(tmp_path: Path) -> None:
    first = snapshot(issue.write_certs(tmp_path))
    second = snapshot(issue.write_certs(tmp_path))
    assert all(first[name] != second[name] for name in first)


def test_if_missing_keeps_valid_files(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path)
    before = snapshot(paths)
    inode = paths.key.stat().st_ino
    assert issue.write_certs(tmp_path, if_missing=True) == paths
    assert snapshot(paths) == before
    assert paths.key.stat().st_ino == inode  # not even rewritten


def test_if_missing_creates_when_absent(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path / "new", if_missing=True)
    assert paths.cert.exists() and mode(paths.key) == 0o600


def test_if_missing_reissues_expired_serving_cert_and_keeps_the_ca(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path)
    ca_cert, ca_key = paths.ca_cert.read_bytes(), paths.ca_key.read_bytes()
    expired_cert, expired_key = issue.make_serving_cert(
        ca_cert,
        ca_key,
        service="gpu-policy-webhook",
        namespace="gpu-policy",
        days=1,
        now=NOW - dt.timedelta(days=3),
    )
    paths.cert.write_bytes(expired_cert)
    paths.key.write_bytes(expired_key)

    issue.write_certs(tmp_path, if_missing=True)

    assert paths.ca_cert.read_bytes() == ca_cert and paths.ca_key.read_bytes() == ca_key
    assert paths.cert.read_bytes() != expired_cert
    cert = load(paths.cert.read_bytes())
    assert cert.not_valid_after_utc > NOW + dt.timedelta(days=300)
    cert.verify_directly_issued_by(load(ca_cert))
    assert mode(paths.key) == 0o600


def test_if_missing_regenerates_everything_when_the_ca_expired(tmp_path: Path) -> None:
    paths = issue.write_certs(tmp_path)
    old_ca = issue.make_ca("old", 1, now=NOW - dt.timedelta(days=2))
    paths.ca_cert.write_bytes(old_ca[0])
    paths.ca_key.write_bytes(old_ca[1])
    issue.write_certs(tmp_path, if_missing=True)
    assert paths.ca_cert.read_bytes() != old_ca[0]
    load(paths.cert.read_bytes()).verify_directly_issued_by(load(paths.ca_cert.read_bytes()))


@pytest.mark.parametrize(
    "damage",
    ["key-of-another-pair", "garbage-cert", "missing-key", "other-namespace", "other-ca"],
)
def test_if_missing_replaces_unusable_serving_pairs(tmp_path: Path, damage: str) -> None:
    paths = issue.write_certs(tmp_path)
    namespace = "gpu-policy"
    if damage == "key-of-another-pair":
        paths.key.write_bytes(issue.make_ca("x", 1)[1])
    elif damage == "garbage-cert":
        paths.cert.write_bytes(b"-----BEGIN CERTIFICATE-----\nnope\n")
    elif damage == "missing-key":
        paths.key.unlink()
    elif damage == "other-namespace":
        namespace = "elsewhere"
    elif damage == "other-ca":
        other = issue.make_ca("other", 10)
        pair = issue.make_serving_cert(
            *other, service="gpu-policy-webhook", namespace="gpu-policy", days=10
        )
        paths.cert.write_bytes(pair[0])
        paths.key.write_bytes(pair[1])
    ca_before = paths.ca_cert.read_bytes()

    issue.write_certs(tmp_path, namespace=namespace, if_missing=True)

    assert paths.ca_cert.read_bytes() == ca_before
    ctx_ok = serving.build_server_context(paths.cert, paths.key)
    assert isinstance(ctx_ok, ssl.SSLContext)
    cert = load(paths.cert.read_bytes())
    cert.verify_directly_issued_by(load(ca_before))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"gpu-policy-webhook.{namespace}.svc" in san.get_values_for_type(x509.DNSName)


def test_write_atomic_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "k"
    issue.write_atomic(target, b"one", mode=0o600)
    issue.write_atomic(target, b"two", mode=0o600)
    assert target.read_bytes() == b"two" and mode(target) == 0o600
    assert os.listdir(tmp_path) == ["k"]
