"""The certificate manager against the real API server, through the real ``kubernetes`` client.

Each "replica" is a ``CertManager`` with its own TLS directory (what one pod's server serves),
all sharing one cluster: first start, a second replica, replicas racing, a deleted Secret,
a caBundle edited by hand, a CA rotation, a missing configuration and a refusing API server.
The readiness check is the one /readyz runs, given the certificate the replica's files hold.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import threading
import time
from typing import Any

import pytest

from tests.support.certs_helpers import (
    CONFIG,
    NS,
    SECRET,
    Cluster,
    RacingStore,
    Replica,
    bundles,
    configuration,
    load,
    secret_data,
    serials,
)
from webhook.certs import issue, rotation, trust
from webhook.kube.certs import KubeCertStore

MINUTE = dt.timedelta(minutes=1)
DAY = dt.timedelta(days=1)


def assert_in_step(cluster: Cluster, *replicas: Replica) -> None:
    """Every replica serves the Secret's pair, and every webhook entry trusts it: ready."""
    data = secret_data(cluster.kube)
    published = bundles(cluster.kube)
    assert len(set(published)) == 1, "every webhook entry holds the same caBundle"
    assert published[0] == trust.ca_bundle(trust.SecretContent(data))
    for replica in replicas:
        assert replica.file("tls.crt") == data["tls.crt"]
        assert replica.file("tls.key") == data["tls.key"]
        assert replica.key_mode() == 0o600
        ok, reason = replica.ready()
        assert ok, reason


def race(*replicas: Replica) -> list[Any]:
    """Run one round of every replica at the same time; their results (or exceptions)."""
    results: list[Any] = [None] * len(replicas)

    def run(i: int) -> None:
        try:
            results[i] = replicas[i].manager.run_once()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_first_start_makes_the_secret_publishes_the_ca_and_writes_the_files(
    cluster: Cluster,
) -> None:
    a = cluster.replica("a")
    result = a.manager.run_once()
    assert any("made a new CA" in c for c in result.changes), result.changes
    secret = cluster.kube.get("Secret", SECRET, namespace=NS)
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-policy-webhook"
    data = secret_data(cluster.kube)
    assert bundles(cluster.kube) == [data["ca.crt"]] * 4, "all four webhook entries"
    assert_in_step(cluster, a)
    assert a.file("ca.crt") == data["ca.crt"], "ca.crt: what every configuration trusts"
    served = load(a.file("tls.crt"))
    served.verify_directly_issued_by(load(data["ca.crt"]))
    assert "gpw-gpu-policy-webhook.gpu-policy.svc" in str(served.extensions)
    assert (cluster.calls("create", "secrets"), cluster.calls("update", "secrets")) == (1, 0)


def test_a_second_replica_adopts_the_secret_and_writes_nothing(cluster: Cluster) -> None:
    a, b = cluster.replica("a"), cluster.replica("b")
    a.manager.run_once()
    writes = cluster.calls("create", "secrets") + cluster.calls("update", "secrets")
    patches = cluster.calls("patch", "mutatingwebhookconfigurations") + cluster.calls(
        "patch", "validatingwebhookconfigurations"
    )
    result = b.manager.run_once()
    assert result.changes == ()
    assert cluster.calls("create", "secrets") + cluster.calls("update", "secrets") == writes
    assert (
        cluster.calls("patch", "mutatingwebhookconfigurations")
        + cluster.calls("patch", "validatingwebhookconfigurations")
        == patches
    )
    assert b.file("tls.crt") == a.file("tls.crt")
    assert_in_step(cluster, a, b)


def test_replicas_starting_together_agree_on_one_ca(cluster: Cluster) -> None:
    barrier = threading.Barrier(3)
    replicas = [
        cluster.replica(name, cluster.store(RacingStore, barrier)) for name in ("a", "b", "c")
    ]
    results = race(*replicas)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert cluster.calls("create", "secrets") == 3, "all three tried"
    assert len(set(serials(secret_data(cluster.kube)["ca.crt"]))) == 1
    assert sum(1 for r in results if r.changes) == 1, "one write won, two adopted it"
    assert_in_step(cluster, *replicas)


def test_replicas_renewing_together_agree_on_one_certificate(cluster: Cluster) -> None:
    first = cluster.replica("first")
    first.manager.run_once()
    before = secret_data(cluster.kube)
    cluster.clock.advance(61 * DAY)  # past 2/3 of the serving certificate's 90 days
    barrier = threading.Barrier(2)
    a, b = (cluster.replica(n, cluster.store(RacingStore, barrier)) for n in ("a", "b"))
    results = race(a, b)
    assert not [r for r in results if isinstance(r, Exception)], results
    after = secret_data(cluster.kube)
    assert after["tls.crt"] != before["tls.crt"]
    assert after["ca.crt"] == before["ca.crt"], "same CA: nothing to publish"
    assert cluster.calls("update", "secrets") == 2, "both tried, one got 409 Conflict"
    assert_in_step(cluster, a, b)


def test_a_deleted_secret_is_put_back_and_its_ca_rotated_without_an_outage(
    cluster: Cluster,
) -> None:
    a, b = cluster.replica("a"), cluster.replica("b")
    a.manager.run_once()
    b.manager.run_once()
    old = secret_data(cluster.kube)
    cluster.kube.delete("Secret", SECRET, namespace=NS)

    cluster.clock.advance(MINUTE)
    result = a.manager.run_once()
    assert any("put back the CA" in c for c in result.changes), result.changes
    data = secret_data(cluster.kube)
    assert data["ca.crt"] == old["ca.crt"] and data["tls.crt"] == old["tls.crt"]
    assert serials(bundles(cluster.kube)[0]) == serials(old["ca.crt"]) + serials(
        data["ca-next.crt"]
    ), "the caBundle now holds the old CA and the new one"
    b.manager.run_once()
    assert_in_step(cluster, a, b)

    # Trusted everywhere: noted; after the settle time, the new CA signs.
    a.manager.run_once()
    cluster.clock.advance(rotation.Timing().settle)
    result = a.manager.run_once()
    assert any("switched to the next CA" in c for c in result.changes), result.changes
    # b has not picked up the new certificate yet: it still serves the old one, which the
    # caBundle still verifies.
    assert b.ready()[0]
    b.manager.run_once()
    assert_in_step(cluster, a, b)
    new = secret_data(cluster.kube)
    load(new["tls.crt"]).verify_directly_issued_by(load(data["ca-next.crt"]))

    # After the overlap, the old CA leaves the caBundle.
    cluster.clock.advance(rotation.Timing().overlap)
    a.manager.run_once()
    b.manager.run_once()
    assert serials(bundles(cluster.kube)[0]) == serials(data["ca-next.crt"])
    assert_in_step(cluster, a, b)


def test_a_deleted_secret_no_replica_remembers_gets_a_new_ca(cluster: Cluster) -> None:
    cluster.replica("gone").manager.run_once()
    old = secret_data(cluster.kube)
    cluster.kube.delete("Secret", SECRET, namespace=NS)
    fresh = cluster.replica("fresh")
    result = fresh.manager.run_once()
    assert any("the Secret does not exist: made a new CA" in c for c in result.changes)
    assert serials(secret_data(cluster.kube)["ca.crt"]) != serials(old["ca.crt"])
    assert_in_step(cluster, fresh)


@pytest.mark.parametrize(
    ("kind", "index", "value"),
    [
        ("ValidatingWebhookConfiguration", 1, "another"),
        ("MutatingWebhookConfiguration", 0, None),
        ("ValidatingWebhookConfiguration", 2, ""),
    ],
    ids=["another CA in one entry", "caBundle removed", "caBundle emptied"],
)
def test_a_ca_bundle_edited_by_hand_is_restored(
    cluster: Cluster, kind: str, index: int, value: str | None
) -> None:
    a = cluster.replica("a")
    a.manager.run_once()
    other_ca = base64.b64encode(issue.make_ca("someone-else", 30)[0]).decode()

    def edit(obj: dict[str, Any]) -> None:
        config = obj["webhooks"][index]["clientConfig"]
        if value is None:
            config.pop("caBundle")
        else:
            config["caBundle"] = other_ca if value == "another" else value

    cluster.kube.modify(kind, CONFIG, edit)
    result = a.manager.run_once()
    assert result.changes == (), "the Secret stays as it is"
    assert_in_step(cluster, a)


def test_a_ca_rotation_at_two_thirds_of_its_life_keeps_every_replica_ready(
    cluster: Cluster,
) -> None:
    a, b = cluster.replica("a"), cluster.replica("b")
    a.manager.run_once()
    first_ca = secret_data(cluster.kube)["ca.crt"]
    # Two weeks: shorter than every window a round must fall in (a serving certificate is renewed
    # 30 days before it expires, a CA 122 days before), longer than the overlap (1 day); a
    # weekly round checked the same states twice as often, for twice the time.
    step = dt.timedelta(days=14)
    seen_cas = set()
    # A year and a half (two CA rotations, the first CA expiring in between), two
    # rounds a step for each replica, the settle time after each.
    for _ in range(40):
        cluster.clock.advance(step)
        for replica in (a, b, a, b):
            replica.manager.run_once()
            assert replica.ready()[0], replica.ready()
            cluster.clock.advance(rotation.Timing().settle / 2)
        seen_cas.add(secret_data(cluster.kube)["ca.crt"])
    assert first_ca in seen_cas and len(seen_cas) >= 2
    assert_in_step(cluster, a, b)


def test_a_missing_configuration_is_published_once_it_appears(cluster: Cluster) -> None:
    cluster.kube.delete("ValidatingWebhookConfiguration", CONFIG)
    a = cluster.replica("a")
    result = a.manager.run_once()
    assert any("ValidatingWebhookConfiguration" in p and "not found" in p for p in result.problems)
    assert a.ready()[0], "the one configuration that exists trusts what is served"
    cluster.kube.add(configuration("ValidatingWebhookConfiguration"))
    result = a.manager.run_once()
    assert result.problems == ()
    assert_in_step(cluster, a)


def test_a_refusing_api_server_is_named_and_changes_nothing_served(cluster: Cluster) -> None:
    a = cluster.replica("a")
    a.manager.run_once()
    served = a.file("tls.crt")
    cluster.kube.forbid("secrets")
    with pytest.raises(RuntimeError, match=f"cannot read Secret {NS}/{SECRET}: 403"):
        a.manager.run_once()
    cluster.kube.allow_all()
    cluster.kube.go_down("503")
    with pytest.raises(RuntimeError, match="503"):
        a.manager.run_once()
    assert a.file("tls.crt") == served
    assert a.ready()[0], "an unreachable API server does not make the server unready"


def test_a_secret_read_too_long_ago_is_not_published(cluster: Cluster) -> None:
    a = cluster.replica("a", max_staleness=-1.0)
    result = a.manager.run_once()
    assert not result.published
    assert cluster.calls("patch", "mutatingwebhookconfigurations") == 0
    assert not a.ready()[0]


class SlowStore(KubeCertStore):
    """A store whose rounds take a while and say when they end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = threading.Event()
        self.ended: list[float] = []

    def read_secret(self) -> Any:
        self.started.set()
        time.sleep(0.3)
        return super().read_secret()

    def publish(self, bundle: bytes) -> Any:
        out = super().publish(bundle)
        self.ended.append(time.monotonic())
        return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_loop_runs_rounds_and_a_fork_waits_for_the_round_in_progress(
    cluster: Cluster,
) -> None:
    store = cluster.store(SlowStore)
    a = cluster.replica("a", store, interval=0.01)
    a.manager.start()
    try:
        assert store.started.wait(10)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forked_at = time.monotonic()
        os.waitpid(pid, 0)
        assert store.ended and store.ended[0] <= forked_at, "the fork waited for the round"
    finally:
        a.manager.stop()
    assert_in_step(cluster, a)
