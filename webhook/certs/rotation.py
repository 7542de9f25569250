"""What the self-managed certificate mode does next: decisions only, no file and no API call.

The server keeps its CA and serving certificate in one Secret and publishes the CA in the
``caBundle`` of its own webhook configurations (``webhook/certs/manager.py`` does the reading
and writing; ``webhook/certs/trust.py`` says what a bundle holds, which caBundle a Secret
stands for and what every configuration trusts). :func:`plan` takes what the Secret holds, what
the webhook configurations trust right now and the time, and returns what the Secret should
hold next, with one sentence per change. Every replica runs the same function on the same
Secret, so they agree without talking to each other; the Secret's resourceVersion decides
which write wins when two replicas act at once.

The Secret (type ``kubernetes.io/tls``, keys in ``webhook.contract``):

* ``tls.crt``, ``tls.key``: the serving certificate every replica serves;
* ``ca.crt``, ``ca.key``: the CA that signed ``tls.crt``;
* ``ca-next.crt``, ``ca-next.key``: a CA being introduced: in the caBundle, signing nothing yet;
* ``ca-previous.crt``: CAs being retired: still in the caBundle, their keys gone;
* annotation ``gpu-policy.io/ca-next-trusted-since``: when every webhook configuration was first
  seen trusting ``ca-next.crt``; ``gpu-policy.io/ca-previous-until``: when the retired CAs
  leave the caBundle.

Timing (:class:`Timing`): the serving certificate lives 90 days and is renewed at two thirds of
its life (30 days before it expires), by the same CA, so nothing else changes. The CA lives a
year; at two thirds of its life a next CA is made and published beside it. The API server
then trusts both. Only after every webhook configuration has been seen trusting the next CA
for ``settle`` (2 minutes, so that every API server instance has loaded the new caBundle) does
the next CA sign a new serving certificate; the old CA stays in the caBundle for ``overlap``
(a day), covering replicas that still serve the old certificate until they pick up the new one.
At no point does a replica serve a certificate the published caBundle does not verify.

When the Secret is gone or its CA unusable, a replica that remembers the last good Secret puts
it back and introduces a new CA beside it (deleting the Secret is how an operator asks for a new
CA, and the overlap keeps every request served meanwhile); a replica that remembers nothing
(it restarted meanwhile) makes a new CA and serving certificate, which the API server trusts
once the caBundle is published (until then the replica is not ready). Either way every CA the
webhook configurations trust at that moment stays in the caBundle, as a retired CA, for
``overlap``: the other replicas still serve certificates those CAs signed until they read the
new Secret, and a caBundle without them would make the API server refuse those replicas. An
expired CA cannot overlap anything and is replaced at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from webhook.certs import issue
from webhook.certs.trust import (
    SecretContent,
    describe,
    fingerprint,
    load_certificates,
    pem_bundle,
    trusted_by_all,
)
from webhook.contract import (
    CA_CERT_FILE,
    CA_KEY_FILE,
    NEXT_CA_CERT_FILE,
    NEXT_CA_KEY_FILE,
    NEXT_CA_TRUSTED_ANNOTATION,
    PREVIOUS_CA_CERT_FILE,
    PREVIOUS_CA_UNTIL_ANNOTATION,
    TLS_CERT_FILE,
    TLS_KEY_FILE,
)

__all__ = ["Plan", "Timing", "plan", "renewal_time"]

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Timing:
    """Lifetimes and waits of the self-managed mode (the module docstring says why these)."""

    ca_days: int = 365
    serving_days: int = 90
    renew_fraction: float = 2 / 3
    settle: dt.timedelta = dt.timedelta(minutes=2)
    overlap: dt.timedelta = dt.timedelta(days=1)

    def __post_init__(self) -> None:
        """Refuse timings under which a serving certificate could outlive its CA."""
        if not 0 < self.renew_fraction < 1:
            raise ValueError(f"renew_fraction must be between 0 and 1, got {self.renew_fraction}")
        # A CA is replaced at renew_fraction of its life; what is left of it then must cover a
        # whole serving certificate, or the chain would break before the serving one expires.
        if self.serving_days > self.ca_days * (1 - self.renew_fraction):
            raise ValueError(
                f"a {self.serving_days}-day serving certificate outlives what is left of a "
                f"{self.ca_days}-day CA when the CA is replaced"
            )


@dataclass(frozen=True)
class Plan:
    """What the Secret should hold next; ``changes`` says what changed and why (empty: keep)."""

    content: SecretContent
    changes: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# Times, and the certificates of the Secret checked
# --------------------------------------------------------------------------------------------


def _format_time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime(_TIME_FORMAT)


def _span(delta: dt.timedelta) -> str:
    return f"{delta.total_seconds():g} s"


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def renewal_time(cert: x509.Certificate, fraction: float) -> dt.datetime:
    """When ``fraction`` of the certificate's validity has passed: the time to replace it."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * fraction


def _pair(
    data: Mapping[str, bytes], cert_key: str, key_key: str
) -> tuple[x509.Certificate | None, str | None]:
    """The certificate of a cert/key pair in ``data`` when the key matches it, else why not."""
    cert_pem, key_pem = data.get(cert_key), data.get(key_key)
    if not cert_pem or not key_pem:
        return None, f"no {cert_key if not cert_pem else key_key}"
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        return None, f"{cert_key} or {key_key} unreadable ({e})"
    if not issue.same_public_key(cert, key):
        return None, f"{key_key} does not match {cert_key}"
    return cert, None


def _usable_ca(
    data: Mapping[str, bytes], cert_key: str, key_key: str, now: dt.datetime
) -> tuple[x509.Certificate | None, str | None]:
    """The CA certificate of a pair that can sign now, else None and why."""
    cert, problem = _pair(data, cert_key, key_key)
    if cert is None:
        return None, problem
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        return None, f"{cert_key} is not a CA certificate"
    if now >= cert.not_valid_after_utc:
        return None, f"{cert_key} expired at {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if now < cert.not_valid_before_utc:
        return None, f"{cert_key} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M}"
    return cert, None


def _serving_problem(
    data: Mapping[str, bytes],
    ca: x509.Certificate,
    dns_names: Sequence[str],
    now: dt.datetime,
    timing: Timing,
) -> str | None:
    """Why the serving certificate must be replaced now, or None when it can stay."""
    cert, problem = _pair(data, TLS_CERT_FILE, TLS_KEY_FILE)
    if cert is None:
        return problem
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return f"{TLS_CERT_FILE} is not signed by {CA_CERT_FILE}"
    missing = issue.missing_dns_names(cert, dns_names)
    if missing is None:
        return f"{TLS_CERT_FILE} has no subjectAltName"
    if missing:
        return f"{TLS_CERT_FILE} lacks the names {', '.join(missing)}"
    if now < cert.not_valid_before_utc:
        return f"{TLS_CERT_FILE} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M}"
    due = renewal_time(cert, timing.renew_fraction)
    if now >= due:
        return (
            f"{TLS_CERT_FILE} ({describe(cert)}) was due for renewal at {_format_time(due)}, "
            f"it expires at {_format_time(cert.not_valid_after_utc)}"
        )
    return None


# --------------------------------------------------------------------------------------------
# The decision
# --------------------------------------------------------------------------------------------

_OURS = (NEXT_CA_TRUSTED_ANNOTATION, PREVIOUS_CA_UNTIL_ANNOTATION)


def _new_ca(service: str, now: dt.datetime, timing: Timing) -> tuple[bytes, bytes]:
    # The CN names the Service and the time, so two CAs are told apart in `openssl x509` output.
    return issue.make_ca(f"{service}-ca-{now:%Y%m%d%H%M%S}", timing.ca_days, now=now)


@dataclass
class _Draft:
    """The Secret being decided on: a working copy, and what changed in it so far."""

    data: dict[str, bytes]
    notes: dict[str, str]
    service: str
    namespace: str
    now: dt.datetime
    timing: Timing
    changes: list[str] = field(default_factory=list)

    def change(self, sentence: str) -> None:
        self.changes.append(sentence)

    def plan(self) -> Plan:
        return Plan(SecretContent(self.data, self.notes), tuple(self.changes))

    def make_ca(self) -> tuple[bytes, bytes, x509.Certificate]:
        pem, key = _new_ca(self.service, self.now, self.timing)
        return pem, key, x509.load_pem_x509_certificate(pem)

    def issue_serving(self, why: str) -> None:
        """A new serving certificate from the Secret's CA."""
        crt, key = issue.make_serving_cert(
            self.data[CA_CERT_FILE],
            self.data[CA_KEY_FILE],
            service=self.service,
            namespace=self.namespace,
            days=self.timing.serving_days,
            now=self.now,
        )
        self.data[TLS_CERT_FILE], self.data[TLS_KEY_FILE] = crt, key
        new = x509.load_pem_x509_certificate(crt)
        self.change(f"new serving certificate ({describe(new)}): {why}")

    def start_over(self, why: str, published: Sequence[bytes | None]) -> Plan:
        """A new CA and serving certificate; the CAs published now stay (:meth:`keep`)."""
        pem, key, _ = self.make_ca()
        self.data = {CA_CERT_FILE: pem, CA_KEY_FILE: key}
        self.notes = {k: v for k, v in self.notes.items() if k not in _OURS}
        self.changes = [f"{why}: made a new CA"]
        self.keep(published)
        self.issue_serving("the CA is new")
        return self.plan()

    def keep(self, published: Sequence[bytes | None]) -> None:
        """Keep every CA the webhook configurations trust now in the caBundle for ``overlap``.

        Run when this replica cannot follow the Secret it read before (the Secret is gone or
        its CA unusable): another replica may still serve a certificate one of those CAs
        signed, until it reads the new Secret. Dropping them from the caBundle now would make
        the API server refuse that replica meanwhile.
        """
        mine = {
            fingerprint(c)
            for key in (CA_CERT_FILE, NEXT_CA_CERT_FILE, PREVIOUS_CA_CERT_FILE)
            for c in load_certificates(self.data.get(key))
        }
        kept: dict[bytes, x509.Certificate] = {}
        for bundle in published:
            for cert in load_certificates(bundle):
                fp = fingerprint(cert)
                if fp not in mine and self.now < cert.not_valid_after_utc:
                    kept[fp] = cert
        if not kept:
            return
        retired = load_certificates(self.data.get(PREVIOUS_CA_CERT_FILE))
        self.data[PREVIOUS_CA_CERT_FILE] = pem_bundle([*retired, *kept.values()])
        until = max(
            self.now + self.timing.overlap,
            _parse_time(self.notes.get(PREVIOUS_CA_UNTIL_ANNOTATION)) or self.now,
        )
        self.notes[PREVIOUS_CA_UNTIL_ANNOTATION] = _format_time(until)
        self.change(
            f"kept the {len(kept)} CA(s) the webhook configurations trust now in the caBundle "
            f"until {_format_time(until)}: other replicas may still serve certificates they "
            "signed"
        )

    def next_ca(
        self, ca: x509.Certificate, published: Sequence[bytes | None], *, force: bool
    ) -> tuple[x509.Certificate, bool]:
        """Introduce, wait for, and switch to the next CA; returns (signing CA, switched)."""
        data, notes, now, timing = self.data, self.notes, self.now, self.timing
        nxt, problem = _usable_ca(data, NEXT_CA_CERT_FILE, NEXT_CA_KEY_FILE, now)
        if nxt is None and (NEXT_CA_CERT_FILE in data or NEXT_CA_KEY_FILE in data):
            data.pop(NEXT_CA_CERT_FILE, None)
            data.pop(NEXT_CA_KEY_FILE, None)
            notes.pop(NEXT_CA_TRUSTED_ANNOTATION, None)
            self.change(f"dropped the next CA: {problem}")
        if nxt is None:
            due = renewal_time(ca, timing.renew_fraction)
            if force or now >= due:
                pem, key, new = self.make_ca()
                data[NEXT_CA_CERT_FILE], data[NEXT_CA_KEY_FILE] = pem, key
                why = (
                    "a new CA was asked for" if force else f"the CA was due at {_format_time(due)}"
                )
                self.change(
                    f"{why}: introduced the next CA ({describe(new)}); it signs once every "
                    f"webhook configuration has trusted it for {_span(timing.settle)}"
                )
            return ca, False

        trusted = {fingerprint(c) for c in trusted_by_all(published)}
        since = _parse_time(notes.get(NEXT_CA_TRUSTED_ANNOTATION))
        if fingerprint(nxt) not in trusted:
            if since is not None:
                notes.pop(NEXT_CA_TRUSTED_ANNOTATION)
                self.change(
                    f"the next CA ({describe(nxt)}) is no longer trusted by every webhook "
                    "configuration: waiting until it is again"
                )
            return ca, False
        if since is None:
            notes[NEXT_CA_TRUSTED_ANNOTATION] = _format_time(now)
            self.change(
                f"every webhook configuration trusts the next CA ({describe(nxt)}): it signs "
                f"from {_format_time(now + timing.settle)} on"
            )
            return ca, False
        if now < since + timing.settle:
            return ca, False

        retired = load_certificates(data.get(PREVIOUS_CA_CERT_FILE))
        retired = [c for c in retired if now < c.not_valid_after_utc] + [ca]
        data[PREVIOUS_CA_CERT_FILE] = pem_bundle(retired)
        data[CA_CERT_FILE] = data.pop(NEXT_CA_CERT_FILE)
        data[CA_KEY_FILE] = data.pop(NEXT_CA_KEY_FILE)
        notes.pop(NEXT_CA_TRUSTED_ANNOTATION)
        until = now + timing.overlap
        notes[PREVIOUS_CA_UNTIL_ANNOTATION] = _format_time(until)
        self.change(
            f"switched to the next CA ({describe(nxt)}); the old one ({describe(ca)}) stays "
            f"trusted until {_format_time(until)}"
        )
        return nxt, True

    def retire(self) -> None:
        """Drop the retired CAs once their overlap is over (or they expired)."""
        data, notes, now = self.data, self.notes, self.now
        if PREVIOUS_CA_CERT_FILE not in data:
            if notes.pop(PREVIOUS_CA_UNTIL_ANNOTATION, None) is not None:
                self.change("dropped the end time of retired CAs that are gone")
            return
        until = _parse_time(notes.get(PREVIOUS_CA_UNTIL_ANNOTATION))
        retired = load_certificates(data[PREVIOUS_CA_CERT_FILE])
        over = until is None or now >= until
        kept = [] if over else [c for c in retired if now < c.not_valid_after_utc]
        if kept and len(kept) == len(retired):
            return
        if kept:
            data[PREVIOUS_CA_CERT_FILE] = pem_bundle(kept)
            self.change(f"dropped {len(retired) - len(kept)} expired retired CA(s)")
            return
        del data[PREVIOUS_CA_CERT_FILE]
        notes.pop(PREVIOUS_CA_UNTIL_ANNOTATION, None)
        self.change(f"the retired CAs ({len(retired)}) left the caBundle: their overlap is over")


def plan(
    current: SecretContent | None,
    *,
    published: Sequence[bytes | None],
    service: str,
    namespace: str,
    now: dt.datetime,
    timing: Timing | None = None,
    remembered: SecretContent | None = None,
) -> Plan:
    """What the Secret should hold next.

    ``current``: the Secret (None when it does not exist). ``published``: the caBundle of every
    webhook entry of the webhook configurations, as read just before (None for one that could
    not be read). ``service``/``namespace``: the Service the serving certificate must name.
    ``remembered``: the last Secret this server saw with a usable CA, used to put a deleted
    or broken Secret back without an outage. Certificates are made with ``webhook.certs.issue`` and
    dated ``now``.
    """
    draft = _Draft(
        data=dict(current.data) if current is not None else {},
        notes=dict(current.annotations) if current is not None else {},
        service=service,
        namespace=namespace,
        now=now,
        timing=timing or Timing(),
    )
    force_next = False
    ca, problem = _usable_ca(draft.data, CA_CERT_FILE, CA_KEY_FILE, now)
    if ca is None:
        what = (
            "the Secret does not exist"
            if current is None
            else f"the Secret's CA is unusable ({problem})"
        )
        if remembered is not None:
            ca, _ = _usable_ca(remembered.data, CA_CERT_FILE, CA_KEY_FILE, now)
        if ca is None or remembered is None:
            return draft.start_over(what, published)
        draft.data = dict(remembered.data)
        draft.notes = {k: v for k, v in draft.notes.items() if k not in _OURS}
        draft.notes.update({k: v for k, v in remembered.annotations.items() if k in _OURS})
        draft.change(f"{what}: put back the CA ({describe(ca)}) and serving certificate")
        draft.keep(published)
        force_next = True

    ca, switched = draft.next_ca(ca, published, force=force_next)
    draft.retire()
    dns_names = issue.serving_dns_names(service, namespace)
    why = (
        "the CA changed"
        if switched
        else _serving_problem(draft.data, ca, dns_names, now, draft.timing)
    )
    if why is not None:
        draft.issue_serving(why)
    return draft.plan()
