"""Serving the webhook's certificate: a server SSL context that follows its files.

``ReloadingSSLContext`` builds the server ``ssl.SSLContext`` and rebuilds it when the mounted
Secret changes (cert-manager renews it; the kubelet swaps the ``..data`` symlink), keeping the
last good context when the new files are broken or only half rotated. gunicorn asks for a
context per accepted connection (see ``webhook/server/gunicorn_conf.py``), so a rotation
reaches every new connection without a restart and without failing a request. Its
:meth:`~ReloadingSSLContext.ready` is the certificate's ``/readyz`` check.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from webhook.certs.issue import TLSError, same_public_key, utcnow
from webhook.files import FileWatch, Stamps

logger = logging.getLogger(__name__)

__all__ = [
    "TLS12_CIPHERS",
    "ClientDeadlines",
    "ReloadingSSLContext",
    "TLSStatus",
    "build_server_context",
]

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
class ClientDeadlines:
    """How long a client may take: its whole TLS handshake, and the whole of one request's
    headers and body (seconds; docs/contracts.md, ``GPU_POLICY_*_TIMEOUT``)."""

    handshake: float
    read: float


class _DeadlineSocket(ssl.SSLSocket):
    """A server-side TLS connection that a slow client cannot hold for long.

    Why here: gunicorn's gthread worker gives a connection a thread of its pool as soon as its
    first byte arrives, and that thread then does the TLS handshake and reads the request's
    headers and body with blocking calls and no time limit. A client sending a byte a second
    holds the thread for as long as it likes; a few such clients hold them all. gunicorn has
    no setting for it, and a timeout per ``recv`` would not help (each byte arrives in time).
    The context's ``sslsocket_class`` is the one place every served connection goes through,
    whatever the worker does, so the limits are set here, as deadlines for the whole:

    * the handshake: CPython's ``do_handshake`` on a socket with a timeout runs the whole
      handshake against one deadline (``_ssl.c``), so setting the timeout is all it takes;
    * a request: its deadline starts at its first ``recv`` and ends when the answer is sent
      (``sendall``); each ``recv`` waits at most until the deadline. A kept-alive connection
      starts a new deadline with its next request.

    A client past a deadline is shut down and logged in one line; gunicorn sees an ordinary
    disconnection (EOF) and frees the thread.

    One more wait is removed: to close a connection, gunicorn 27 half-closes it and then reads
    until the client closes too (up to 2 s, RFC 9112 section 9.6), and gthread does that in
    its main loop, which every connection of the worker waits on. A client that never closes
    stalled the whole worker for 2 s per connection. After the half-close, ``recv`` here takes
    only what has already arrived (that is all the draining is for) and never waits.
    """

    deadlines = ClientDeadlines(5.0, 5.0)
    _deadline: float | None = None
    _closing = False

    def shutdown(self, how: int) -> None:
        """Shut down; after a half-close (``SHUT_WR``), reads no longer wait."""
        if how in (socket.SHUT_WR, socket.SHUT_RDWR):
            self._closing = True
        super().shutdown(how)

    def do_handshake(self, block: bool = False) -> None:
        """The handshake, within ``deadlines.handshake`` seconds in all."""
        previous = self.gettimeout()
        if previous == 0.0:  # non-blocking: the caller waits for readiness itself
            super().do_handshake(block)
            return
        self.settimeout(self.deadlines.handshake)
        try:
            super().do_handshake(block)
        except TimeoutError:
            self._give_up("TLS handshake", self.deadlines.handshake)
            raise ssl.SSLEOFError(ssl.SSL_ERROR_EOF, "TLS handshake too slow") from None
        self.settimeout(previous)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        """Like ``SSLSocket.recv``, b"" (the end) once the request's deadline passed."""
        if self._closing:
            self.setblocking(False)
            try:
                return super().recv(buflen, flags)
            except (BlockingIOError, ssl.SSLWantReadError):
                return b""
        timeout = self._arm()
        if timeout is None:
            return super().recv(buflen, flags)
        previous = self.gettimeout()
        try:
            if timeout <= 0:
                raise TimeoutError
            self.settimeout(timeout if previous is None else min(previous, timeout))
            return super().recv(buflen, flags)
        except TimeoutError:
            if self._deadline is not None and time.monotonic() < self._deadline:
                raise  # the caller's own, shorter timeout
            self._give_up("request headers and body", self.deadlines.read)
            return b""
        finally:
            if self.fileno() != -1:
                self.settimeout(previous)

    def sendall(self, data: Any, flags: int = 0) -> None:
        """An answer goes out: the request it answers is complete, its deadline ends."""
        self._deadline = None
        super().sendall(data, flags)

    def _arm(self) -> float | None:
        """Seconds left for this request (starting its deadline now if it has none); None
        for a non-blocking socket, which never waits."""
        if self.gettimeout() == 0.0:
            return None
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.deadlines.read
        return self._deadline - now

    def _give_up(self, what: str, seconds: float) -> None:
        try:
            peer = "%s:%s" % self.getpeername()[:2]  # noqa: UP031 - an address tuple
        except OSError:
            peer = "a client"
        logger.info(
            "closing the connection from %s: %s not received within %g s", peer, what, seconds
        )
        with contextlib.suppress(OSError):
            self.shutdown(socket.SHUT_RDWR)


def deadline_socket_class(deadlines: ClientDeadlines) -> type[ssl.SSLSocket]:
    """The ``sslsocket_class`` that applies ``deadlines`` to every connection it serves."""
    return type("DeadlineSocket", (_DeadlineSocket,), {"deadlines": deadlines})


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
        deadlines: ClientDeadlines | None = None,
    ) -> None:
        """Load the files now; raise ``TLSError`` if they cannot be served.

        ``deadlines``: the time limits every connection served with these contexts gets.
        """
        self.socket_class = deadline_socket_class(deadlines) if deadlines is not None else None
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
        if self.socket_class is not None:
            context.sslsocket_class = self.socket_class
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
