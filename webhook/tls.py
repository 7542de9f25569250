"""Certificates for the webhook: generation, atomic writing and a reloading server context.

Two jobs live here:

* Making certificates: a private CA, a serving certificate whose SANs are the names the API
  server uses to reach the Service (``<service>.<namespace>.svc``), and client certificates
  for the optional mutual TLS. ``write_certs`` writes them the way a reader can never see half
  a file (temporary file + ``os.replace``), which is what ``gpu-policy certs`` and the
  Helm-less dev setup use.
* Serving them: ``ReloadingSSLContext`` builds the server ``ssl.SSLContext`` and rebuilds it
  when the mounted Secret changes (cert-manager renews it; the kubelet swaps the ``..data``
  symlink), keeping the last good context when the new files are broken or only half
  rotated. gunicorn asks for a context per accepted connection (see
  ``webhook/web/gunicorn_conf.py``), so a rotation reaches every new connection without a
  restart and without failing a request.

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
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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

from webhook.files import FileStamp, file_stamps

logger = logging.getLogger(__name__)

__all__ = [
    "CertPaths",
    "ReloadingSSLContext",
    "TLSError",
    "TLSStatus",
    "build_server_context",
    "make_ca",
    "make_client_cert",
    "make_serving_cert",
    "missing_dns_names",
    "register_serving",
    "serving",
    "serving_dns_names",
    "write_certs",
]


# TLS 1.2 suites we accept: forward secrecy (ECDHE) and AEAD only. TLS 1.3 suites are all
# modern and are not affected by set_ciphers. Go's crypto/tls (the API server) offers
# ECDHE-ECDSA/RSA with AES-GCM and ChaCha20 first, so nothing real is turned away.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"

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


def _utcnow() -> dt.datetime:
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
    if not _same_public_key(ca_cert, ca_key):
        raise TLSError("the CA key does not match the CA certificate")
    return ca_cert, ca_key


def _leaf_builder(
    ca_cert: x509.Certificate,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    *,
    days: int,
    now: dt.datetime | None,
) -> x509.CertificateBuilder:
    """Common part of serving and client certificates: validity, key usage, SKI/AKI."""
    start = (now or _utcnow()) - _BACKDATE
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + _BACKDATE + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # ECDSA keys only sign (ECDHE does the key exchange): digitalSignature, no
        # keyEncipherment, which RFC 5480 forbids for EC keys.
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
    )


def make_ca(common_name: str, days: int, *, now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """Create a self-signed CA able to sign serving and client certificates.

    Returns ``(cert_pem, key_pem)``; the key is an unencrypted PKCS#8 ECDSA P-256 key. The CA
    may sign only end-entity certificates (pathLen 0). ``now`` backdates or postdates the
    validity window (tests use it to make expired certificates).
    """
    _check_days(days)
    key = _new_key()
    start = (now or _utcnow()) - _BACKDATE
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + _BACKDATE + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
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
        return cls(d, d / "ca.crt", d / "ca.key", d / "tls.crt", d / "tls.key")


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
    if not _same_public_key(cert, key):
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
    now = _utcnow()

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


def _same_public_key(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        return bool(cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt))
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return False


# --------------------------------------------------------------------------------------------
# Serving: the SSL context and its reloading
# --------------------------------------------------------------------------------------------


def build_server_context(
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str],
    client_ca_file: str | os.PathLike[str] | None = None,
) -> ssl.SSLContext:
    """A server-side context: TLS 1.2 or 1.3, ECDHE with AEAD only, optional client CA.

    With ``client_ca_file`` every client must present a certificate that CA signed
    (CERT_REQUIRED); the handshake of any other client fails. Raises ``ssl.SSLError`` or
    ``OSError`` when the files are unusable (for instance cert and key do not match).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    # No renegotiation (a CPU drain and a historical source of bugs), no compression (CRIME);
    # prefer our cipher order over the client's.
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.load_cert_chain(certfile=os.fspath(cert_file), keyfile=os.fspath(key_file))
    if client_ca_file is not None:
        ctx.load_verify_locations(cafile=os.fspath(client_ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@dataclass(frozen=True)
class TLSStatus:
    """What the server presents right now; ``/readyz`` reports it."""

    valid: bool
    reason: str
    serial: int
    not_before: dt.datetime
    not_after: dt.datetime
    last_error: str | None


@dataclass(frozen=True)
class _Loaded:
    context: ssl.SSLContext
    stamps: tuple[FileStamp, ...]
    certificate: x509.Certificate


class ReloadingSSLContext:
    """An ``ssl.SSLContext`` that follows its certificate files.

    ``context()`` returns the current context. At most once per ``check_interval`` seconds it
    first stats the files (``os.stat``, following the Secret volume's symlinks) and, when the
    device, inode, size or mtime of any of them changed, builds a new context from them. The
    new context replaces the old one only when it is whole: the certificate and key parse, the
    key matches the certificate, and the files did not change while they were being read.
    Otherwise the last good context stays, the reason is logged once per state of the files,
    and the files are tried again when they change next.

    Construction loads the files once and raises ``TLSError`` when they are unusable: a server
    fails at start, not at its first connection.

    Thread-safe: ``context()`` never blocks on a reload that another thread is doing, it
    returns the context it has.
    """

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        *,
        client_ca_file: str | os.PathLike[str] | None = None,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Load the files now; raise ``TLSError`` if they cannot be served."""
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca_file = Path(client_ca_file) if client_ca_file is not None else None
        self.check_interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._failed_stamps: tuple[FileStamp, ...] | None = None
        self._last_error: str | None = None
        self._current = self._load(self._stamps())
        self._next_check = clock() + check_interval
        logger.info("serving certificate %s", self._describe(self._current.certificate))

    # -- files -----------------------------------------------------------------------------

    def _watched(self) -> tuple[Path, ...]:
        files = (self.cert_file, self.key_file)
        return (*files, self.client_ca_file) if self.client_ca_file is not None else files

    def _stamps(self) -> tuple[FileStamp, ...]:
        return file_stamps(self._watched())

    def _load(self, stamps: tuple[FileStamp, ...]) -> _Loaded:
        """Build a context from the files whose stamps were just taken."""
        try:
            certs = x509.load_pem_x509_certificates(self.cert_file.read_bytes())
            key = serialization.load_pem_private_key(self.key_file.read_bytes(), password=None)
        except FileNotFoundError as e:
            raise TLSError(f"{e.filename} is missing") from e
        except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as e:
            raise TLSError(f"{self.cert_file} or {self.key_file} is unreadable: {e}") from e
        leaf = certs[0]
        if not _same_public_key(leaf, key):
            raise TLSError(f"{self.key_file} does not match {self.cert_file}")
        try:
            context = build_server_context(self.cert_file, self.key_file, self.client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise TLSError(f"cannot build the TLS context: {e}") from e
        if self._stamps() != stamps:
            # The pair we parsed may not be the pair OpenSSL loaded. The stamps differ from
            # the ones recorded, so the next check loads the files again.
            raise TLSError("the files changed while they were being loaded")
        return _Loaded(context, stamps, leaf)

    @staticmethod
    def _describe(cert: x509.Certificate) -> str:
        return (
            f"serial {cert.serial_number:x}, {cert.subject.rfc4514_string()},"
            f" valid {cert.not_valid_before_utc:%Y-%m-%d %H:%M} to"
            f" {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )

    # -- public ----------------------------------------------------------------------------

    def maybe_reload(self, *, force: bool = False) -> bool:
        """Check the files (at most once per interval unless ``force``); True if reloaded."""
        now = self._clock()
        if not force and now < self._next_check:
            return False
        # Another thread is checking: serve with what we have rather than wait.
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._next_check = now + self.check_interval
            stamps = self._stamps()
            if stamps in (self._current.stamps, self._failed_stamps):
                return False
            try:
                loaded = self._load(stamps)
            except TLSError as e:
                self._failed_stamps = stamps
                self._last_error = str(e)
                # Half a rotation (one file replaced, the other not yet) lands here too; the
                # second file's change makes the next check try again.
                logger.warning(
                    "TLS files changed but cannot be used, still serving %s: %s"
                    " (tried again when they change)",
                    self._describe(self._current.certificate),
                    e,
                )
                return False
            self._current = loaded
            self._failed_stamps = None
            self._last_error = None
            logger.info("reloaded TLS files, now serving %s", self._describe(loaded.certificate))
            return True
        finally:
            self._lock.release()

    def context(self) -> ssl.SSLContext:
        """The context to wrap the next connection with (after a cheap change check)."""
        self.maybe_reload()
        return self._current.context

    @property
    def certificate(self) -> x509.Certificate:
        """The leaf certificate currently served."""
        return self._current.certificate

    @property
    def serial(self) -> int:
        """Serial number of the certificate currently served."""
        return self._current.certificate.serial_number

    @property
    def not_before(self) -> dt.datetime:
        """Start of the served certificate's validity (UTC)."""
        return self._current.certificate.not_valid_before_utc

    @property
    def not_after(self) -> dt.datetime:
        """End of the served certificate's validity (UTC)."""
        return self._current.certificate.not_valid_after_utc

    @property
    def last_error(self) -> str | None:
        """Why the files on disk are not served, if they are not; None when they are."""
        return self._last_error

    def valid(self, now: dt.datetime | None = None) -> bool:
        """True when the served certificate is within its validity window.

        Checks the files first (same throttle as ``context()``), so a renewed certificate
        makes the server ready again without waiting for a connection.
        """
        return self.status(now).valid

    def status(self, now: dt.datetime | None = None) -> TLSStatus:
        """Validity of the served certificate, with a reason a human can read."""
        self.maybe_reload()
        now = now or _utcnow()
        cert = self._current.certificate
        if now < cert.not_valid_before_utc:
            valid, reason = False, f"certificate not valid before {cert.not_valid_before_utc}"
        elif now >= cert.not_valid_after_utc:
            valid, reason = False, f"certificate expired at {cert.not_valid_after_utc}"
        else:
            valid, reason = True, f"certificate valid until {cert.not_valid_after_utc}"
        if self._last_error:
            reason += f"; files on disk not used: {self._last_error}"
        return TLSStatus(
            valid=valid,
            reason=reason,
            serial=cert.serial_number,
            not_before=cert.not_valid_before_utc,
            not_after=cert.not_valid_after_utc,
            last_error=self._last_error,
        )


# The context of the server in this process (set by the gunicorn config), so the Flask app's
# /readyz can ask about the certificate without knowing how the server was started.
_serving: ReloadingSSLContext | None = None


def register_serving(context: ReloadingSSLContext | None) -> None:
    """Record the context this process serves with (None to forget it)."""
    global _serving  # noqa: PLW0603 - one process-wide serving context, set once at start
    _serving = context


def serving() -> ReloadingSSLContext | None:
    """The context this process serves with, or None when not served by our gunicorn config.

    In a gunicorn worker this is the copy inherited from the master, which follows the files
    by itself. None means TLS is terminated elsewhere (Flask's test client, a dev server).
    """
    return _serving
