"""Serving the webhook's certificate: a server SSL context that follows its files.

``ReloadingSSLContext`` builds the server ``ssl.SSLContext`` and rebuilds it when the mounted
Secret changes (cert-manager renews it; the kubelet swaps the ``..data`` symlink), keeping the
last good context when the new files are broken or only half rotated. gunicorn asks for a
context per accepted connection (see ``webhook/server/gunicorn_conf.py``), so a rotation
reaches every new connection without a restart and without failing a request. Its
:meth:`~ReloadingSSLContext.ready` is the certificate's ``/readyz`` check.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from webhook.certs.issue import TLSError, same_public_key, utcnow
from webhook.files import FileWatch, Stamps

logger = logging.getLogger(__name__)

__all__ = ["TLS12_CIPHERS", "ReloadingSSLContext", "TLSStatus", "build_server_context"]

# TLS 1.2 suites we accept: forward secrecy (ECDHE) and AEAD only. TLS 1.3 suites are all
# modern and are not affected by set_ciphers. Go's crypto/tls (the API server) offers
# ECDHE-ECDSA/RSA with AES-GCM and ChaCha20 first, so nothing real is turned away.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


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
        self._files = FileWatch(self._watched(), interval=check_interval, clock=clock)
        self._last_error: str | None = None
        self._current = self._load(self._files.loaded)
        logger.info("serving certificate %s", self._describe(self._current.certificate))

    # -- files -----------------------------------------------------------------------------

    def _watched(self) -> tuple[Path, ...]:
        files = (self.cert_file, self.key_file)
        return (*files, self.client_ca_file) if self.client_ca_file is not None else files

    def _load(self, stamps: Stamps) -> _Loaded:
        """Build a context from the files whose stamps were just taken."""
        try:
            certs = x509.load_pem_x509_certificates(self.cert_file.read_bytes())
            key = serialization.load_pem_private_key(self.key_file.read_bytes(), password=None)
        except FileNotFoundError as e:
            raise TLSError(f"{e.filename} is missing") from e
        except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as e:
            raise TLSError(f"{self.cert_file} or {self.key_file} is unreadable: {e}") from e
        leaf = certs[0]
        if not same_public_key(leaf, key):
            raise TLSError(f"{self.key_file} does not match {self.cert_file}")
        try:
            context = build_server_context(self.cert_file, self.key_file, self.client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise TLSError(f"cannot build the TLS context: {e}") from e
        if self._files.stamps() != stamps:
            # The pair we parsed may not be the pair OpenSSL loaded. The stamps differ from
            # the ones recorded, so the next check loads the files again.
            raise TLSError("the files changed while they were being loaded")
        return _Loaded(context, leaf)

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
        return self._files.reload(self._try_load, self._swap_in, force=force)

    def _try_load(self, stamps: Stamps) -> _Loaded | None:
        try:
            return self._load(stamps)
        except TLSError as e:
            self._last_error = str(e)
            # Half a rotation (one file replaced, the other not yet) lands here too; the
            # second file's change makes the next check try again.
            logger.warning(
                "TLS files changed but cannot be used, still serving %s: %s"
                " (tried again when they change)",
                self._describe(self._current.certificate),
                e,
            )
            return None

    def _swap_in(self, loaded: _Loaded) -> None:
        self._current = loaded
        self._last_error = None
        logger.info("reloaded TLS files, now serving %s", self._describe(loaded.certificate))

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

    def ready(self) -> tuple[bool, str]:
        """The ``/readyz`` check: (the served certificate is within its validity, the reason)."""
        status = self.status()
        return status.valid, status.reason

    def status(self, now: dt.datetime | None = None) -> TLSStatus:
        """Validity of the served certificate, with a reason a human can read."""
        self.maybe_reload()
        now = now or utcnow()
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
