"""webhook.certs.rotation: what the self-managed mode decides, for every state of the Secret.

No cluster here: the decisions are pure. The timeline test at the end runs three years of
rounds and checks the promise the mode makes: the serving certificate a round produces is
always verified by the caBundle that was published BEFORE that round (what the API server
trusts while the new files reach the replicas), so a rotation never fails a request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from cryptography import x509

from webhook.certs import issue, rotation, trust
from webhook.certs.rotation import Timing
from webhook.certs.trust import SecretContent

SVC, NS = "gpw-gpu-policy-webhook", "gpu-policy"
NOW = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
T = Timing()


def plan(
    content: SecretContent | None,
    published: list[bytes | None],
    now: dt.datetime = NOW,
    remembered: SecretContent | None = None,
) -> rotation.Plan:
    return rotation.plan(
        content,
        published=published,
        service=SVC,
        namespace=NS,
        now=now,
        timing=T,
        remembered=remembered,
    )


def fresh(now: dt.datetime = NOW) -> SecretContent:
    return plan(None, [], now).content


def cert(content: SecretContent, key: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(content.data[key])


def serial(content: SecretContent, key: str) -> int:
    return cert(content, key).serial_number


def bundle_serials(pem: bytes | None) -> list[int]:
    return [c.serial_number for c in trust.load_certificates(pem)]


def verified_by(content: SecretContent, bundle: bytes | None) -> bool:
    served = cert(content, "tls.crt")
    ok, _ = trust.check_served(served, trust.load_certificates(bundle), NOW)
    return ok


def with_data(content: SecretContent, changes: dict[str, bytes | None]) -> SecretContent:
    data = dict(content.data)
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return SecretContent(data, dict(content.annotations))


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# Fixed starting points
# --------------------------------------------------------------------------------------------

BASE = fresh()
BASE_BUNDLE = trust.ca_bundle(BASE)
# At 2/3 of the CA's life (243 days), a next CA is introduced beside the current one.
CA_DUE = rotation.renewal_time(cert(BASE, "ca.crt"), T.renew_fraction) + dt.timedelta(minutes=1)
INTRODUCED = plan(BASE, [BASE_BUNDLE], CA_DUE).content
BOTH = trust.ca_bundle(INTRODUCED)
MARKED = plan(INTRODUCED, [BOTH, BOTH], CA_DUE).content
SWITCHED = plan(MARKED, [BOTH, BOTH], CA_DUE + T.settle).content


@dataclass(frozen=True)
class Case:
    content: SecretContent | None
    published: list[bytes | None]
    now: dt.datetime
    says: tuple[str, ...]  # each is in one of the changes; () means: keep
    check: Callable[[SecretContent], bool] = lambda c: True
    remembered: SecretContent | None = None


def _other_ca_serving() -> tuple[bytes, bytes]:
    other_ca, other_key = issue.make_ca("someone-else", 365, now=NOW)
    return issue.make_serving_cert(other_ca, other_key, service=SVC, namespace=NS, days=90, now=NOW)


def _renamed_serving() -> tuple[bytes, bytes]:
    return issue.make_serving_cert(
        BASE.data["ca.crt"], BASE.data["ca.key"], service="old-name", namespace=NS, days=90, now=NOW
    )


CASES = {
    "no Secret: new CA and serving certificate": Case(
        None,
        [],
        NOW,
        ("the Secret does not exist: made a new CA", "new serving certificate"),
        lambda c: (
            cert(c, "tls.crt").verify_directly_issued_by(cert(c, "ca.crt")) is None
            and set(c.data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
        ),
    ),
    "all well: keep": Case(BASE, [BASE_BUNDLE, BASE_BUNDLE], NOW + 30 * DAY, ()),
    "keep even when the caBundle is not published yet": Case(BASE, [None, b""], NOW, ()),
    "serving certificate at 2/3 of its life: renewed by the same CA": Case(
        BASE,
        [BASE_BUNDLE],
        NOW + 61 * DAY,
        ("new serving certificate", "was due for renewal"),
        lambda c: (
            serial(c, "ca.crt") == serial(BASE, "ca.crt")
            and serial(c, "tls.crt") != serial(BASE, "tls.crt")
        ),
    ),
    "serving certificate for another Service name": Case(
        with_data(BASE, dict(zip(("tls.crt", "tls.key"), _renamed_serving(), strict=True))),
        [BASE_BUNDLE],
        NOW,
        ("lacks the names",),
    ),
    "serving key does not match": Case(
        with_data(BASE, {"tls.key": INTRODUCED.data["ca-next.key"]}),
        [BASE_BUNDLE],
        NOW,
        ("tls.key does not match tls.crt",),
    ),
    "serving certificate signed by another CA": Case(
        with_data(BASE, dict(zip(("tls.crt", "tls.key"), _other_ca_serving(), strict=True))),
        [BASE_BUNDLE],
        NOW,
        ("not signed by ca.crt",),
    ),
    "CA at 2/3 of its life: next CA introduced, serving one still by the old CA": Case(
        BASE,
        [BASE_BUNDLE],
        CA_DUE,
        ("introduced the next CA",),
        lambda c: (
            "ca-next.crt" in c.data
            and cert(c, "tls.crt").verify_directly_issued_by(cert(BASE, "ca.crt")) is None
        ),
    ),
    "next CA not in every caBundle yet: wait": Case(INTRODUCED, [BOTH, BASE_BUNDLE], CA_DUE, ()),
    "next CA in every caBundle: the time is noted": Case(
        INTRODUCED,
        [BOTH, BOTH],
        CA_DUE,
        ("every webhook configuration trusts the next CA",),
        lambda c: c.annotations["gpu-policy.io/ca-next-trusted-since"] == stamp(CA_DUE),
    ),
    "trusted for less than the settle time: wait": Case(
        MARKED, [BOTH, BOTH], CA_DUE + T.settle - dt.timedelta(seconds=1), ()
    ),
    "trusted for the settle time: switch, old CA retired, new serving certificate": Case(
        MARKED,
        [BOTH, BOTH],
        CA_DUE + T.settle,
        ("switched to the next CA", "new serving certificate"),
        lambda c: (
            serial(c, "ca.crt") == serial(INTRODUCED, "ca-next.crt")
            and bundle_serials(c.data["ca-previous.crt"]) == [serial(BASE, "ca.crt")]
            and "ca-next.crt" not in c.data
            and cert(c, "tls.crt").verify_directly_issued_by(cert(c, "ca.crt")) is None
            and trust.ca_bundle(c) == BOTH
        ),
    ),
    "next CA removed from a caBundle by hand after it was noted: wait again": Case(
        MARKED,
        [BOTH, BASE_BUNDLE],
        CA_DUE + T.settle,
        ("no longer trusted",),
        lambda c: "gpu-policy.io/ca-next-trusted-since" not in c.annotations,
    ),
    "overlap over: the retired CA leaves the caBundle": Case(
        SWITCHED,
        [BOTH],
        CA_DUE + T.settle + T.overlap,
        ("left the caBundle",),
        lambda c: (
            "ca-previous.crt" not in c.data
            and bundle_serials(trust.ca_bundle(c)) == [serial(SWITCHED, "ca.crt")]
        ),
    ),
    "during the overlap: keep": Case(SWITCHED, [BOTH], CA_DUE + T.settle + T.overlap / 2, ()),
    "unreadable next CA: dropped, then a new one (the CA is due)": Case(
        with_data(INTRODUCED, {"ca-next.key": b"garbage"}),
        [BOTH],
        CA_DUE,
        ("dropped the next CA", "introduced the next CA"),
    ),
    "expired CA: start over, no overlap possible": Case(
        BASE,
        [BASE_BUNDLE],
        NOW + 366 * DAY,
        ("ca.crt expired", "made a new CA"),
        lambda c: serial(c, "ca.crt") != serial(BASE, "ca.crt") and "ca-previous.crt" not in c.data,
    ),
    "CA key lost, nothing remembered: start over": Case(
        with_data(BASE, {"ca.key": None}), [BASE_BUNDLE], NOW, ("no ca.key", "made a new CA")
    ),
    "Secret deleted, last one remembered: put back, new CA introduced beside it": Case(
        None,
        [BASE_BUNDLE],
        NOW,
        ("put back the CA", "a new CA was asked for"),
        lambda c: (
            serial(c, "ca.crt") == serial(BASE, "ca.crt")
            and serial(c, "tls.crt") == serial(BASE, "tls.crt")
            and "ca-next.crt" in c.data
        ),
        remembered=BASE,
    ),
    "Secret overwritten with garbage, last one remembered: put back": Case(
        SecretContent({"ca.crt": b"garbage", "tls.crt": b"x"}, {"team": "a"}),
        [BASE_BUNDLE],
        NOW,
        ("the Secret's CA is unusable (no ca.key)", "put back the CA"),
        lambda c: serial(c, "tls.crt") == serial(BASE, "tls.crt") and c.annotations["team"] == "a",
        remembered=BASE,
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_plan(case: Case) -> None:
    result = plan(case.content, case.published, case.now, case.remembered)
    if not case.says:
        assert result.changes == ()
        assert case.content is not None and result.content.data == case.content.data
        return
    for words in case.says:
        assert any(words in change for change in result.changes), (words, result.changes)
    assert case.check(result.content), result.changes
    # Whatever happened, the result is a Secret a second look keeps as it is.
    again = plan(result.content, [trust.ca_bundle(result.content)], case.now)
    assert all("new serving certificate" not in c for c in again.changes), again.changes


def test_the_bundle_is_the_same_on_both_sides_of_a_switch() -> None:
    """Replicas that read the Secret just before and just after the switch publish the same
    bytes: neither undoes the other's caBundle."""
    assert trust.ca_bundle(MARKED) == trust.ca_bundle(SWITCHED) == BOTH
    assert bundle_serials(BOTH) == sorted(
        bundle_serials(BOTH), key=lambda s: s != serial(BASE, "ca.crt")
    ), "oldest first"


@pytest.mark.parametrize(
    ("bundles", "expected"),
    [
        ([], []),
        ([BASE_BUNDLE], ["base"]),
        ([BOTH, BASE_BUNDLE], ["base"]),
        ([BOTH, BOTH], ["base", "next"]),
        ([BOTH, None], []),
        ([BOTH, b""], []),
        ([b"not a certificate"], []),
    ],
    ids=[
        "none",
        "one",
        "intersection",
        "both everywhere",
        "one unreadable",
        "one empty",
        "garbage",
    ],
)
def test_trusted_by_all(bundles: list[bytes | None], expected: list[str]) -> None:
    names = {serial(BASE, "ca.crt"): "base", serial(INTRODUCED, "ca-next.crt"): "next"}
    assert [names[c.serial_number] for c in trust.trusted_by_all(bundles)] == expected


@pytest.mark.parametrize(
    ("served", "trusted", "ready", "words"),
    [
        (BASE, BASE_BUNDLE, True, "is verified by the caBundle"),
        (BASE, BOTH, True, "is verified by the caBundle"),
        (SWITCHED, BASE_BUNDLE, False, "not signed by any of the 1 CAs"),
        (BASE, b"", False, "no CA is trusted by every webhook configuration"),
    ],
    ids=["its CA", "its CA among two", "another CA", "nothing published"],
)
def test_check_served(served: SecretContent, trusted: bytes, ready: bool, words: str) -> None:
    ok, reason = trust.check_served(
        cert(served, "tls.crt"), trust.load_certificates(trusted), NOW + DAY
    )
    assert (ok, words in reason) == (ready, True), reason


def test_check_served_refuses_an_expired_ca() -> None:
    ok, reason = trust.check_served(cert(BASE, "tls.crt"), [cert(BASE, "ca.crt")], NOW + 400 * DAY)
    assert not ok and "expired" in reason


@pytest.mark.parametrize(
    "kwargs",
    [{"renew_fraction": 1.0}, {"renew_fraction": 0.0}, {"ca_days": 200, "serving_days": 90}],
    ids=["fraction 1", "fraction 0", "serving outlives the CA's last third"],
)
def test_timing_refuses_what_could_break_the_chain(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Timing(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Three years of rounds
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "publish_every"),
    [
        (dt.timedelta(days=1), 1),
        (dt.timedelta(days=3, minutes=1), 1),
        (dt.timedelta(days=1), 7),
    ],
    ids=["every day", "every 3 days", "publishing fails 6 rounds in 7"],
)
def test_no_round_serves_what_the_api_server_does_not_trust(
    step: dt.timedelta, publish_every: int
) -> None:
    content = fresh()
    published = trust.ca_bundle(content)  # the first publish, before anything is served
    now, end = NOW, NOW + 3 * 365 * DAY
    cas, servings = {serial(content, "ca.crt")}, {serial(content, "tls.crt")}
    rounds = 0
    while now < end:
        now += step
        rounds += 1
        result = plan(content, [published, published], now)
        content = result.content
        # The files a replica writes now are verified by what the API server trusted before
        # this round's publish (and so also after it).
        served = cert(content, "tls.crt")
        ok, why = trust.check_served(served, trust.load_certificates(published), now)
        assert ok, (now, why, result.changes)
        assert now < served.not_valid_after_utc
        if rounds % publish_every == 0:
            published = trust.ca_bundle(content)
        cas.add(serial(content, "ca.crt"))
        servings.add(serial(content, "tls.crt"))
    assert len(cas) >= 3, "the CA was rotated at least twice in three years"
    assert len(servings) >= 3 * 365 // 60, "the serving certificate every 60 days or so"
