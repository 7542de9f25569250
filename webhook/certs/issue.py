"""Making certificates for the webhook: a private CA, serving and client certificates, on disk.

A private CA, a serving certificate whose SANs are the names the API server uses to reach the
Service (``<service>.<namespace>.svc``), and client certificates for the optional mutual TLS.
``write_certs`` writes them the way a reader can never see half a file (temporary file +
``os.replace``), which is what ``gpu-policy certs`` and the Helm-less dev setup use. Serving
them is ``webhook.certs.serving``.

Keys are ECDSA P-256, not RSA 2048. Both are accepted by the API server (Go's crypto/tls) and
by cert-manager; P-256 is the cheaper of the two where it matters to us: the server's half of
a handshake signs with the key (an ECDSA P-256 signature costs a fraction of an RSA-2048
one), and key generation takes a millisecond instead of tens, which keeps tests and
``gpu-policy certs`` fast. A cert-manager Certificate may still issue RSA keys: nothing here
depends on the key type except the KeyUsage bits we put in our own certificates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.contract import CA_CERT_FILE, CA_KEY_FILE, TLS_CERT_FILE, TLS_KEY_FILE

logger = logging.getLogger(__name__)

__all__ = [
    "CertPaths",
    "TLSError",
    "make_ca",
    "make_client_cert",
    "make_serving_cert",
    "missing_dns_names",
    "same_public_key",
    "serving_dns_names",
    "utcnow",
    "write_atomic",
    "write_certs",
]


# Certificates are backdated a little so a node whose clock is slightly behind ours does not
# reject a certificate "not yet valid" right after it was issued.
_BACKDATE = dt.timedelta(minutes=5)


class TLSError(Exception):
    """A certificate or key file is missing, unreadable, malformed or does not match."""


# --------------------------------------------------------------------------------------------
# Making certificates
# --------------------------------------------------------------------------------------------


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def utcnow() -> dt.datetime:
    """Now, in UTC (what certificate validity is compared with)."""
    return dt.datetime.now(dt.UTC)


def _check_days(days: int) -> None:
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")


# Key types that can sign a certificate (what CertificateIssuerPrivateKeyTypes lists, minus
# the post-quantum ones no API server accepts yet), as a tuple isinstance and mypy understand.
_ISSUER_KEY_TYPES = (
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
    dsa.DSAPrivateKey,
)


def _load_ca(
    ca_cert_pem: bytes, ca_key_pem: bytes
) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, _ISSUER_KEY_TYPES):
        raise TLSError(f"the CA key ({type(ca_key).__name__}) cannot sign certificates")
    if not same_public_key(ca_cert, ca_key):
        raise TLSError("the CA key does not match the CA certificate")
    return ca_cert, ca_key


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """digitalSignature, and for a CA keyCertSign and cRLSign.

    ECDSA keys only sign (ECDHE does the key exchange): no keyEncipherment, which RFC 5480
    forbids for EC keys.
    """
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer_ski: x509.SubjectKeyIdentifier,
    *,
    ca: bool,
    days: int,
    now: dt.datetime | None,
) -> x509.CertificateBuilder:
    """What every certificate made here has: a random serial, the validity (backdated by
    ``_BACKDATE``), basic constraints (a CA signs only end-entity certificates: pathLen 0),
    key usage, and the key identifiers (SKI, and the issuer's as AKI)."""
    start = (now or utcnow()) - _BACKDATE
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + _BACKDATE + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(_key_usage(ca=ca), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski),
            critical=False,
        )
    )


def _leaf_builder(
    ca_cert: x509.Certificate,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    *,
    days: int,
    now: dt.datetime | None,
) -> x509.CertificateBuilder:
    """Serving and client certificates: issued by ``ca_cert``."""
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return _builder(subject, ca_cert.subject, public_key, ca_ski, ca=False, days=days, now=now)


def make_ca(common_name: str, days: int, *, now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """Create a self-signed CA able to sign serving and client certificates.

    Returns ``(cert_pem, key_pem)``; the key is an unencrypted PKCS#8 ECDSA P-256 key. The CA
    may sign only end-entity certificates (pathLen 0). ``now`` backdates or postdates the
    validity window (tests use it to make expired certificates).
    """
    _check_days(days)
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = _builder(name, name, key.public_key(), ski, ca=True, days=days, now=now).sign(
        key, hashes.SHA256()
    )
    return _cert_pem(cert), _key_pem(key)


def serving_dns_names(service: str, namespace: str) -> list[str]:
    """The DNS names a Service is reached by, shortest first, plus ``localhost``.

    The API server calls ``<service>.<namespace>.svc``; the other forms cover clients that
    use the short or the fully qualified name, and ``localhost`` covers port-forwards and
    local runs.
    """
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    ]


_LOOPBACK_IPS = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def make_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    *,
    service: str,
    namespace: str,
    days: int,
    extra_sans: Iterable[str] = (),
    now: dt.datetime | None = None,
) -> tuple[bytes, bytes]:
    """Issue a server certificate for the webhook Service, signed by the given CA.

    SANs: the names from ``serving_dns_names``, the IPs 127.0.0.1 and ::1, and
    ``extra_sans`` (an entry that parses as an IP address becomes an IP SAN, anything else a
    DNS SAN). Extended key usage serverAuth. Returns ``(cert_pem, key_pem)``.
    """
    _check_days(days)
    ca_cert, ca_key = _load_ca(ca_cert_pem, ca_key_pem)
    key = _new_key()

    dns_names = serving_dns_names(service, namespace)
    ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = list(_LOOPBACK_IPS)
    for extra in extra_sans:
        try:
            ip = ipaddress.ip_address(extra)
        except ValueError:
            if extra not in dns_names:
                dns_names.append(extra)
        else:
            if ip not in ips:
                ips.append(ip)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]

    # The CN is informational (Go ignores it since 1.15); the SANs are what is checked.
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")])
    cert = (
        _leaf_builder(ca_cert, subject, key.public_key(), days=days, now=now)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def make_client_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    *,
    common_name: str = "kube-apiserver-webhook-client",
    days: int = 365,
    now: dt.datetime | None = None,
) -> tuple[bytes, bytes]:
    """Issue a client certificate (clientAuth) for mutual TLS, signed by the given CA.

    The API server presents such a certificate when its admission configuration names one
    for our Service; the webhook then requires it (``GPU_POLICY_CLIENT_CA``). Returns
    ``(cert_pem, key_pem)``.
    """
    _check_days(days)
    ca_cert, ca_key = _load_ca(ca_cert_pem, ca_key_pem)
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _leaf_builder(ca_cert, subject, key.public_key(), days=days, now=now)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


# --------------------------------------------------------------------------------------------
# Writing certificates
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CertPaths:
    """Where ``write_certs`` put (or found) the four files."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path

    @classmethod
    def in_dir(cls, directory: str | os.PathLike[str]) -> CertPaths:
        """The conventional names inside ``directory``: ca.crt, ca.key, tls.crt, tls.key.

        tls.crt and tls.key are the names a kubernetes.io/tls Secret mounts.
        """
        d = Path(directory)
        return cls(d, d / CA_CERT_FILE, d / CA_KEY_FILE, d / TLS_CERT_FILE, d / TLS_KEY_FILE)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that a reader sees either the old or the new file.

    The bytes go to a temporary file in the same directory, created with ``mode`` from the
    start (a key is never world-readable, not even for a moment), are fsynced, and the file is
    renamed over ``path``. A crash leaves at most a stray ``.tmp`` file, never half a key.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # Make the rename itself durable; not every filesystem lets a directory be opened.
    with contextlib.suppress(OSError):
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _problem_with_pair(
    cert_path: Path,
    key_path: Path,
    *,
    now: dt.datetime,
    renew_before: dt.timedelta,
    issuer: x509.Certificate | None = None,
    dns_names: Sequence[str] = (),
) -> str | None:
    """Why the cert/key pair on disk cannot be kept, or None when it can."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except FileNotFoundError as e:
        return f"{e.filename} is missing"
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as e:
        return f"{cert_path.name}/{key_path.name} unreadable: {e}"
    if not same_public_key(cert, key):
        return f"{key_path.name} does not match {cert_path.name}"
    if cert.not_valid_after_utc - renew_before <= now:
        return f"{cert_path.name} expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_before_utc > now:
        return f"{cert_path.name} is not valid before {cert.not_valid_before_utc:%Y-%m-%d}"
    if issuer is not None:
        try:
            cert.verify_directly_issued_by(issuer)
        except (ValueError, TypeError, InvalidSignature):
            return f"{cert_path.name} was not issued by the CA in this directory"
    if dns_names:
        missing = missing_dns_names(cert, dns_names)
        if missing is None:
            return f"{cert_path.name} has no subjectAltName"
        if missing:
            return f"{cert_path.name} lacks the names {', '.join(missing)}"
    return None


def missing_dns_names(cert: x509.Certificate, dns_names: Iterable[str]) -> list[str] | None:
    """Which of ``dns_names`` the certificate does not name (sorted); None: no subjectAltName."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return sorted(set(dns_names) - set(san.get_values_for_type(x509.DNSName)))


def write_certs(
    out_dir: str | os.PathLike[str],
    *,
    service: str = "gpu-policy-webhook",
    namespace: str = "gpu-policy",
    days: int = 365,
    if_missing: bool = False,
    extra_sans: Iterable[str] = (),
    renew_before: dt.timedelta = dt.timedelta(days=1),
) -> CertPaths:
    """Write ca.crt, ca.key, tls.crt and tls.key into ``out_dir`` and return their paths.

    Keys are written with mode 0600, certificates 0644, each file atomically. With
    ``if_missing``, files already there are kept when they are usable: a pair is kept when it
    parses, the key matches the certificate and it is valid for at least ``renew_before``
    more; the serving pair must also be issued by the CA in the directory and name the
    Service. A usable CA with an unusable serving pair keeps the CA and reissues only the
    serving certificate, so a caBundle already installed in the webhook configuration stays
    right. Without ``if_missing`` everything is created afresh.
    """
    _check_days(days)
    extra_sans = list(extra_sans)
    paths = CertPaths.in_dir(out_dir)
    paths.directory.mkdir(parents=True, exist_ok=True)
    now = utcnow()

    ca_cert_pem: bytes | None = None
    ca_key_pem: bytes | None = None
    if if_missing:
        ca_problem = _problem_with_pair(
            paths.ca_cert, paths.ca_key, now=now, renew_before=renew_before
        )
        if ca_problem is None:
            ca_cert_pem = paths.ca_cert.read_bytes()
            ca_key_pem = paths.ca_key.read_bytes()
            ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
            serving_problem = _problem_with_pair(
                paths.cert,
                paths.key,
                now=now,
                renew_before=renew_before,
                issuer=ca_cert,
                dns_names=serving_dns_names(service, namespace)
                + [s for s in extra_sans if not _is_ip(s)],
            )
            if serving_problem is None:
                logger.info("keeping the certificates in %s", paths.directory)
                return paths
            logger.info(
                "keeping the CA in %s, new serving certificate: %s",
                paths.directory,
                serving_problem,
            )
        else:
            logger.info("new CA and serving certificate in %s: %s", paths.directory, ca_problem)

    if ca_cert_pem is None or ca_key_pem is None:
        # The CA outlives the serving certificates it signs, so renewing a serving
        # certificate (if_missing) does not force a new caBundle every time.
        ca_cert_pem, ca_key_pem = make_ca(f"{service}-ca", max(days, 3650))
        write_atomic(paths.ca_key, ca_key_pem, mode=0o600)
        write_atomic(paths.ca_cert, ca_cert_pem, mode=0o644)

    cert_pem, key_pem = make_serving_cert(
        ca_cert_pem,
        ca_key_pem,
        service=service,
        namespace=namespace,
        days=days,
        extra_sans=extra_sans,
    )
    # Key first: a reloading server that looks in between sees a mismatched pair and keeps
    # its current certificate (see ReloadingSSLContext), and picks the pair up once both
    # are in place.
    write_atomic(paths.key, key_pem, mode=0o600)
    write_atomic(paths.cert, cert_pem, mode=0o644)
    logger.info("wrote %s and %s (valid %d days)", paths.cert, paths.key, days)
    return paths


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def same_public_key(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    """True when ``key`` is the private half of the key ``cert`` certifies."""
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        return bool(cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt))
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return False
