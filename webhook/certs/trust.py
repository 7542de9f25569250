"""Certificates in PEM bundles, the Secret that holds them, and what the API server trusts.

The self-managed certificate mode (``webhook/certs/rotation.py`` decides, ``manager.py`` reads
and writes) keeps its CAs and serving certificate in one Secret and publishes the CAs in the
``caBundle`` of its own webhook configurations. This module answers what both ask of
certificates, deciding nothing: which certificates a bundle holds, which caBundle a Secret
stands for (:func:`ca_bundle`), which CAs every webhook configuration trusts
(:func:`trusted_by_all`), and whether the certificate served now would be verified
(:func:`check_served`, the certificate part of ``/readyz``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization

from webhook.contract import CA_CERT_FILE, NEXT_CA_CERT_FILE, PREVIOUS_CA_CERT_FILE

__all__ = [
    "SecretContent",
    "ca_bundle",
    "check_served",
    "describe",
    "fingerprint",
    "load_certificates",
    "pem_bundle",
    "trusted_by_all",
]


@dataclass(frozen=True)
class SecretContent:
    """The parts of the Secret the decisions read and write: its data and annotations."""

    data: Mapping[str, bytes]
    annotations: Mapping[str, str] = field(default_factory=dict)


def load_certificates(pem: bytes | None) -> list[x509.Certificate]:
    """The certificates of a PEM bundle; none for an empty or unreadable one."""
    if not pem:
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def pem_bundle(certs: Sequence[x509.Certificate]) -> bytes:
    """The certificates as one PEM bundle, in order."""
    return b"".join(_pem(c) for c in certs)


def fingerprint(cert: x509.Certificate) -> bytes:
    """The certificate's SHA-256 fingerprint: what tells two certificates apart."""
    return cert.fingerprint(hashes.SHA256())


def describe(cert: x509.Certificate) -> str:
    """How a message names a certificate: its serial number in hex."""
    return f"serial {cert.serial_number:x}"


def ca_bundle(content: SecretContent) -> bytes:
    """The caBundle to publish for this Secret: its CA, the next one, the retired ones.

    Oldest first (then by fingerprint), each certificate once: before and after a CA switch
    the bundle holds the same two CAs in the same order, so replicas that read the Secret
    on either side of the switch publish the same bytes and never undo each other.
    """
    certs = [
        *load_certificates(content.data.get(CA_CERT_FILE)),
        *load_certificates(content.data.get(NEXT_CA_CERT_FILE)),
        *load_certificates(content.data.get(PREVIOUS_CA_CERT_FILE)),
    ]
    unique = {fingerprint(c): c for c in certs}
    ordered = sorted(unique.items(), key=lambda item: (item[1].not_valid_before_utc, item[0]))
    return pem_bundle([c for _, c in ordered])


def trusted_by_all(bundles: Sequence[bytes | None]) -> list[x509.Certificate]:
    """The CAs that every one of ``bundles`` holds (None: a bundle that could not be read).

    What the API server trusts for every webhook entry it calls: a CA missing from any one of
    them is not trusted. No bundles at all trust nothing.
    """
    if not bundles:
        return []
    sets = [load_certificates(b) for b in bundles]
    common = set.intersection(*({fingerprint(c) for c in certs} for certs in sets))
    seen: set[bytes] = set()
    out = []
    for cert in sets[0]:
        fp = fingerprint(cert)
        if fp in common and fp not in seen:
            seen.add(fp)
            out.append(cert)
    return out


def check_served(
    served: x509.Certificate, trusted: Sequence[x509.Certificate], now: dt.datetime
) -> tuple[bool, str]:
    """(ready, reason): does one of the ``trusted`` CAs verify the ``served`` certificate now?"""
    if not trusted:
        return False, (
            "no CA is trusted by every webhook configuration yet: the certificate manager "
            "publishes the caBundle (see its log lines in the server's output)"
        )
    for ca in trusted:
        try:
            served.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        if not ca.not_valid_before_utc <= now < ca.not_valid_after_utc:
            return False, f"the CA that signed the served certificate ({describe(ca)}) is expired"
        return True, (
            f"served certificate {describe(served)} is verified by the caBundle of every "
            f"webhook configuration (CA {describe(ca)})"
        )
    return False, (
        f"the served certificate ({describe(served)}) is not signed by any of the "
        f"{len(trusted)} CAs every webhook configuration trusts: the API server would refuse it "
        "until the new certificate is picked up"
    )
