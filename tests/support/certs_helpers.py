"""Helpers for the self-managed certificate tests: the webhook configurations as the chart
renders them (names, entries), replicas on the real API server, and reading what they did."""

from __future__ import annotations

import base64
import datetime as dt
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from tests.support.cluster import LiveCluster
from webhook.certs import trust
from webhook.certs.manager import CertManager, PublishedCACheck
from webhook.kube.certs import KubeCertStore

NS = "gpu-policy"
SVC = "gpw-gpu-policy-webhook"
CONFIG = SVC  # the chart names both configurations after the release's full name
SECRET = f"{SVC}-tls"
MUTATING_HOOKS = ("pods.mutate.gpu-policy.io",)
VALIDATING_HOOKS = (
    "pods.validate.gpu-policy.io",
    "workloads.validate.gpu-policy.io",
    "cronjobs.validate.gpu-policy.io",
)


def _hook(name: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {"service": {"name": SVC, "namespace": NS, "path": path, "port": 443}},
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
    }


#: kind -> (path, webhook names): the two configurations, mutating first.
CONFIGURATIONS = {
    "MutatingWebhookConfiguration": ("/mutate", MUTATING_HOOKS),
    "ValidatingWebhookConfiguration": ("/validate", VALIDATING_HOOKS),
}


def configuration(kind: str) -> dict[str, Any]:
    """The webhook configuration of ``kind``, with no caBundle."""
    path, hooks = CONFIGURATIONS[kind]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": CONFIG},
        "webhooks": [_hook(n, path) for n in hooks],
    }


def webhook_configurations() -> list[dict[str, Any]]:
    return [configuration(kind) for kind in CONFIGURATIONS]


def bundles(kube: LiveCluster) -> list[bytes]:
    """The decoded caBundle of every webhook entry, mutating first."""
    out = []
    for kind in CONFIGURATIONS:
        for hook in kube.get(kind, CONFIG)["webhooks"]:
            out.append(base64.b64decode(hook["clientConfig"].get("caBundle", "")))
    return out


def secret_data(kube: LiveCluster) -> dict[str, bytes]:
    doc = kube.get("Secret", SECRET, namespace=NS)
    return {k: base64.b64decode(v) for k, v in doc["data"].items()}


def serials(pem: bytes) -> list[int]:
    return [c.serial_number for c in trust.load_certificates(pem)]


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


class Clock:
    """A settable clock for the managers (certificates are dated with it)."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, delta: dt.timedelta) -> None:
        self.now += delta


class RacingStore(KubeCertStore):
    """A store whose first read waits for the other replicas' first reads.

    Every replica of a race has then read the same Secret before any of them writes: the
    writes collide at the API server, as when pods start at the same moment.
    """

    def __init__(self, barrier: threading.Barrier, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier = barrier
        self.raced = False

    def read_bundles(self) -> Any:
        out = super().read_bundles()
        if not self.raced:
            self.raced = True
            self.barrier.wait(timeout=10)
        return out


@dataclass
class Replica:
    manager: CertManager
    tls_dir: Path

    def file(self, name: str) -> bytes:
        return (self.tls_dir / name).read_bytes()

    def ready(self) -> tuple[bool, str]:
        """The /readyz check, with the certificate this replica's files hold as the served one."""
        check = PublishedCACheck(
            self.tls_dir / "ca.crt",
            served=lambda: load(self.file("tls.crt")),
            clock=self.manager.clock,
        )
        return check()

    def key_mode(self) -> int:
        return stat.S_IMODE((self.tls_dir / "tls.key").stat().st_mode)


@dataclass
class Cluster:
    kube: LiveCluster
    tmp: Path
    clock: Clock = field(default_factory=Clock)
    _clients: list[client.ApiClient] = field(default_factory=list)

    def store(self, cls: Callable[..., KubeCertStore] = KubeCertStore, *args: Any) -> KubeCertStore:
        api = client.ApiClient(client.Configuration(host=self.kube.url))
        self._clients.append(api)
        return cls(*args, api, secret=(NS, SECRET), mutating=CONFIG, validating=CONFIG)

    def replica(self, name: str, store: KubeCertStore | None = None, **kwargs: Any) -> Replica:
        tls_dir = self.tmp / name
        store = store or self.store()
        manager = CertManager(
            store, service=(NS, SVC), tls_dir=tls_dir, clock=self.clock, name=store.label, **kwargs
        )
        return Replica(manager, tls_dir)

    def calls(self, verb: str, resource: str) -> int:
        return sum(1 for r in list(self.kube.requests) if r.verb == verb and r.resource == resource)

    def close(self) -> None:
        for api in self._clients:
            api.close()


# Fixtures: the certificate tests' conftest.py files import the ones they use.


@pytest.fixture
def kube(live_cluster: LiveCluster) -> LiveCluster:
    """The real API server holding both webhook configurations (no caBundle yet) and the
    release's namespace."""
    live_cluster.ensure_namespace(NS)
    live_cluster.add_many(webhook_configurations())
    return live_cluster


@pytest.fixture
def cluster(kube: LiveCluster, tmp_path: Path) -> Iterator[Cluster]:
    """Managers ("replicas") on the API server, each with its own TLS directory."""
    c = Cluster(kube, tmp_path)
    yield c
    c.close()
