"""The self-managed certificate mode at run time: one manager per server, a round every 30 s.

A round reads the Secret and the caBundle of every webhook entry, asks ``rotation.plan`` what
the Secret should hold, writes it (create, or replace at the resourceVersion it read), publishes
``trust.ca_bundle`` of the Secret in every webhook entry whose caBundle differs (a hand edit is
undone on the next round), and writes three files into the directory the server's
``ReloadingSSLContext`` follows (``GPU_POLICY_TLS_DIR``):

* ``ca.crt``: the CAs every webhook configuration trusts, as just read back (the readiness check
  compares the served certificate with it);
* ``tls.key`` then ``tls.crt``: the serving pair of the Secret, each written atomically and only
  when it changed; the server picks them up within a second, new connections get the new
  certificate, open ones finish with theirs.

**Replicas.** Every replica runs its own manager; they agree through the Secret. Writes are
compare-and-swap on the resourceVersion: the loser of a race gets 409, reads the winner's Secret
and adopts it (the next plan on it changes nothing), so two CAs never fight. No Lease: every
replica reaches the same decision from the same Secret, so electing one to make it buys nothing,
and the only thing a stale replica could do, publish a caBundle from an older Secret, is ruled out
by publishing only from a Secret read less than ``MAX_STALENESS`` (30 s) before, while a CA
switch waits until every configuration has trusted the new CA for ``Timing.settle`` (2 min).

The Kubernetes calls are behind :class:`CertStore` (``webhook.kube.certs`` implements it): this
package does not import ``kubernetes``, and ``webhook.kube`` does not import this package; the
server wires the two together (``webhook.server.selfmanaged``).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography import x509

from webhook.certs import issue, rotation, trust
from webhook.contract import CA_CERT_FILE, DEFAULT_CERT_INTERVAL, TLS_CERT_FILE, TLS_KEY_FILE

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_STALENESS",
    "CertManager",
    "CertStore",
    "PublishedCACheck",
    "Round",
]

#: Seconds after reading the Secret within which a caBundle may be published from it.
MAX_STALENESS = 30.0
#: Seconds a fork waits for a round in progress to finish (see ``CertManager.start``).
FORK_WAIT = 5.0
#: Attempts at writing the Secret in one round when other replicas keep writing it first.
WRITE_ATTEMPTS = 3
#: Seconds between two looks at the Secret's resourceVersion (one GET): a Secret another
#: replica changed (a new CA, a renewed certificate) starts a round at once, not after the
#: interval.
CHANGE_CHECK = 3.0


# --------------------------------------------------------------------------------------------
# What the manager needs from the cluster
# --------------------------------------------------------------------------------------------


class StoredSecret(Protocol):
    """The Secret as read or written: data (decoded), annotations, resourceVersion."""

    @property
    def data(self) -> Mapping[str, bytes]:
        """The Secret's data, base64-decoded."""

    @property
    def annotations(self) -> Mapping[str, str]:
        """The Secret's annotations."""

    @property
    def resource_version(self) -> str:
        """The resourceVersion a replace must name."""


class PublishedBundles(Protocol):
    """The caBundles of the webhook configurations, one per webhook entry found."""

    @property
    def bundles(self) -> Sequence[bytes | None]:
        """PEM per webhook entry (None: a configuration that could not be read)."""

    @property
    def problems(self) -> Sequence[str]:
        """Configurations that are missing or could not be read or patched, one line each."""


class CertStore(Protocol):
    """The Secret and the webhook configurations, in the cluster."""

    def read_secret(self) -> StoredSecret | None:
        """The Secret, or None when it does not exist."""

    def create_secret(
        self, data: Mapping[str, bytes], annotations: Mapping[str, str]
    ) -> StoredSecret | None:
        """Create the Secret; None when another writer created it first."""

    def replace_secret(
        self, data: Mapping[str, bytes], annotations: Mapping[str, str], resource_version: str
    ) -> StoredSecret | None:
        """Replace the Secret read at ``resource_version``; None when it changed or went."""

    def read_bundles(self) -> PublishedBundles:
        """The caBundle of every webhook entry of the configurations."""

    def publish(self, bundle: bytes) -> PublishedBundles:
        """Set ``bundle`` in every webhook entry that differs; the bundles afterwards."""


# --------------------------------------------------------------------------------------------
# The manager
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """What one round did: the Secret's changes, whether it published, what is trusted."""

    changes: tuple[str, ...]
    published: bool
    trusted: int
    problems: tuple[str, ...]


def _write_if_changed(path: Path, data: bytes, mode: int) -> bool:
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    issue.write_atomic(path, data, mode=mode)
    return True


class CertManager:
    """Keeps the Secret, the caBundles and the served files in step (see the module doc)."""

    def __init__(
        self,
        store: CertStore,
        *,
        service: tuple[str, str],
        tls_dir: str | os.PathLike[str],
        interval: float = DEFAULT_CERT_INTERVAL,
        timing: rotation.Timing | None = None,
        clock: Callable[[], dt.datetime] = issue.utcnow,
        max_staleness: float = MAX_STALENESS,
        name: str = "Secret",
    ) -> None:
        """A manager for ``store``; ``service`` is the (namespace, name) the certificate names."""
        self.store = store
        self.namespace, self.service = service
        self.tls_dir = Path(tls_dir)
        self.interval = interval
        self.timing = timing or rotation.Timing()
        self.clock = clock
        self.max_staleness = max_staleness
        self.name = name
        self.last_round: Round | None = None
        self.change_check = min(CHANGE_CHECK, interval)
        self._remembered: trust.SecretContent | None = None
        self._resource_version: str | None = None
        # The CAs every configuration trusted at the end of the last round (None: no round yet).
        self._trusted_before: list[x509.Certificate] | None = None
        # A new serving certificate is waiting for its CA to have been published a round ago.
        self.waiting = False
        # Held for a whole round; a fork waits for it (see start()).
        self._lock = threading.Lock()
        self._forking = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one round -------------------------------------------------------------------------

    def run_once(self) -> Round:
        """One round; raises what the store raises when the cluster cannot be reached."""
        with self._lock:
            result = self._round()
        self.last_round = result
        return result

    def _settle_secret(self) -> tuple[StoredSecret, PublishedBundles, float, list[str]]:
        """Read, decide, write (retrying on conflicts); the Secret as it now stands."""
        changes: list[str] = []
        for _ in range(WRITE_ATTEMPTS):
            read_at = time.monotonic()
            record = self.store.read_secret()
            published = self.store.read_bundles()
            current = trust.SecretContent(record.data, record.annotations) if record else None
            plan = rotation.plan(
                current,
                published=published.bundles,
                service=self.service,
                namespace=self.namespace,
                now=self.clock(),
                timing=self.timing,
                remembered=self._remembered,
            )
            if record is not None and not plan.changes:
                return record, published, read_at, changes
            content = plan.content
            if record is None:
                written = self.store.create_secret(content.data, content.annotations)
            else:
                written = self.store.replace_secret(
                    content.data, content.annotations, record.resource_version
                )
            if written is None:
                logger.info("%s: another replica wrote it first; reading theirs", self.name)
                continue
            for change in plan.changes:
                logger.info("%s: %s", self.name, change)
            changes += plan.changes
            return written, published, read_at, changes
        raise RuntimeError(
            f"{self.name} changed under this server {WRITE_ATTEMPTS} times in a row; "
            "trying again next round"
        )

    def _round(self) -> Round:
        record, published, read_at, changes = self._settle_secret()
        self._resource_version = record.resource_version
        content = trust.SecretContent(dict(record.data), dict(record.annotations))
        self._remembered = content
        # A caBundle made from a Secret read long ago could undo what a newer one published.
        fresh = time.monotonic() - read_at <= self.max_staleness
        if fresh:
            published = self.store.publish(trust.ca_bundle(content))
        else:
            logger.warning("%s: read too long ago, not publishing this round", self.name)
        for problem in published.problems:
            logger.warning("%s: %s", self.name, problem)
        trusted = trust.trusted_by_all(published.bundles)
        before, self._trusted_before = self._trusted_before, trusted
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        _write_if_changed(self.tls_dir / CA_CERT_FILE, trust.pem_bundle(trusted), 0o644)
        self.waiting = self._must_wait(content, before, trusted)
        if self.waiting:
            return Round(tuple(changes), fresh, len(trusted), tuple(published.problems))
        # Key first: a server that looks in between sees a mismatched pair and keeps serving
        # the old one until the certificate follows.
        key_changed = _write_if_changed(
            self.tls_dir / TLS_KEY_FILE, content.data[TLS_KEY_FILE], 0o600
        )
        crt_changed = _write_if_changed(
            self.tls_dir / TLS_CERT_FILE, content.data[TLS_CERT_FILE], 0o644
        )
        if key_changed or crt_changed:
            logger.info("%s: wrote the serving certificate to %s", self.name, self.tls_dir)
        return Round(tuple(changes), fresh, len(trusted), tuple(published.problems))

    def _must_wait(
        self,
        content: trust.SecretContent,
        before: list[x509.Certificate] | None,
        trusted: list[x509.Certificate],
    ) -> bool:
        """True when the Secret's serving certificate should not be served yet.

        A certificate whose CA the configurations did not already trust at the previous round
        waits one more round (``CHANGE_CHECK`` seconds) while the one served now is still
        trusted: its CA was published moments ago, and an API server may not have loaded that
        caBundle yet (another replica made the CA, after the Secret was deleted). A server
        with nothing trusted to serve takes the new one at once (it is not ready until the
        caBundle verifies it).
        """
        now = self.clock()
        new = x509.load_pem_x509_certificate(content.data[TLS_CERT_FILE])
        if before is None or trust.check_served(new, before, now)[0]:
            return False
        try:
            served = x509.load_pem_x509_certificate((self.tls_dir / TLS_CERT_FILE).read_bytes())
        except (OSError, ValueError):
            return False
        if served == new or not trust.check_served(served, trusted, now)[0]:
            return False
        logger.info(
            "%s: the new serving certificate's CA was published just now; serving the "
            "current one for one more round",
            self.name,
        )
        return True

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> CertManager:
        """Run a round every ``interval`` seconds in a daemon thread (the first after one),
        and at once when the Secret changes (looked at every ``CHANGE_CHECK`` seconds).

        The thread runs in the gunicorn master, which forks workers. A fork while a round
        holds a lock inside OpenSSL or the HTTP client would leave the child with that lock
        taken forever, so every fork first waits (up to ``FORK_WAIT`` s) for the round to end.
        """
        os.register_at_fork(
            before=self._before_fork,
            after_in_parent=self._after_fork,
            after_in_child=self._after_fork,
        )
        self._thread = threading.Thread(target=self._loop, name="cert-manager", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (a round in progress finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _before_fork(self) -> None:
        self._forking = self._lock.acquire(timeout=FORK_WAIT)

    def _after_fork(self) -> None:
        if self._forking:
            self._forking = False
            self._lock.release()

    def secret_changed(self) -> bool:
        """True when the Secret is not the one the last round left (another replica wrote
        it, or it was deleted); False when it is, or when it cannot be read now."""
        with self._lock:
            try:
                record = self.store.read_secret()
            except Exception:  # the next full round says why, once per interval
                return False
        return record is None or record.resource_version != self._resource_version

    def _loop(self) -> None:
        next_round = time.monotonic() + self.interval
        while not self._stop.wait(self.change_check):
            if time.monotonic() < next_round and not self.waiting and not self.secret_changed():
                continue
            next_round = time.monotonic() + self.interval
            try:
                self.run_once()
            except Exception as exc:  # the cluster is unreachable, RBAC refuses...: next round
                logger.error(
                    "%s: certificate round failed, trying again in %g s: %s",
                    self.name,
                    self.interval,
                    exc,
                )


# --------------------------------------------------------------------------------------------
# Readiness
# --------------------------------------------------------------------------------------------


class PublishedCACheck:
    """``/readyz``: not ready until the served certificate is one the API server would trust.

    Compares the certificate this process serves with ``ca.crt`` in the TLS directory, the CAs
    every webhook configuration trusted when the manager last read them back. The file changes
    only when the manager reads the configurations, so an unreachable API server does not make
    the server unready (it keeps serving what the configurations last trusted).
    """

    def __init__(
        self,
        ca_file: str | os.PathLike[str],
        served: Callable[[], x509.Certificate | None],
        clock: Callable[[], dt.datetime] = issue.utcnow,
    ) -> None:
        """Check against ``ca_file``; ``served`` gives the certificate served now."""
        self.ca_file = Path(ca_file)
        self.served = served
        self.clock = clock

    def __call__(self) -> tuple[bool, str]:
        """(ready, reason)."""
        cert = self.served()
        if cert is None:
            return True, "TLS not served by this process"
        try:
            pem = self.ca_file.read_bytes()
        except OSError as e:
            return False, f"no published caBundle yet ({self.ca_file}: {e.strerror})"
        trusted = trust.load_certificates(pem)
        return trust.check_served(cert, trusted, self.clock())
