"""Self-managed certificates across replicas never serve a certificate the caBundle refuses.

Against the real control plane (``tests/support/controlplane.py``: a real Secret, real
Mutating/ValidatingWebhookConfigurations, real optimistic concurrency on resourceVersion):
two or three replicas of the webhook (gunicorn with our config, each with its own TLS folder,
as each pod has its own emptyDir) manage one Secret. At each step the Secret is deleted (the
documented way to ask for a new CA) and one replica is restarted (a new pod: a new folder,
nothing remembered). Meanwhile a client does what the API server does: it reads the caBundle
of both configurations, trusts only what every one of them holds, and opens a TLS connection
to every replica that is ready (as only ready pods are a Service's endpoints). Not one
handshake may fail.

Also: with the API server unreachable at the first start, a replica says so (the address and
the error), keeps trying, and serves as soon as the API server answers; it never blames RBAC.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cert_replicas import Gate, Handshakes, Replicas, insecure
from tests.support.controlplane import ControlPlane
from tests.support.gunicorn import argv, free_port, launch, server_env, wait_until_serving
from tests.support.waiting import wait_until
from webhook.contract import (
    CERT_SECRET_ENV,
    KUBE_ENV,
    MUTATING_WEBHOOK_ENV,
    SERVICE_ENV,
    VALIDATING_WEBHOOK_ENV,
)

SECRET = "webhook-tls"
SERVICE = "webhook"


@pytest.fixture
def replica_env(
    control_plane: ControlPlane, kube_namespace: str, register_webhooks: Any
) -> tuple[dict[str, str], tuple[str, str]]:
    made = register_webhooks("https://127.0.0.1:9", b"", namespace=kube_namespace)
    mutating, validating = (o["metadata"]["name"] for o in made)
    env = {
        CERT_SECRET_ENV: f"{kube_namespace}/{SECRET}",
        SERVICE_ENV: f"{kube_namespace}/{SERVICE}",
        MUTATING_WEBHOOK_ENV: mutating,
        VALIDATING_WEBHOOK_ENV: validating,
        KUBE_ENV: str(control_plane.kubeconfig),
    }
    return env, (mutating, validating)


@pytest.fixture
def replicas(
    tmp_path: Path, replica_env: tuple[dict[str, str], tuple[str, str]]
) -> Iterator[Replicas]:
    env, _ = replica_env
    made = Replicas(tmp_path, env)
    try:
        yield made
    finally:
        made.stop_all()


@pytest.mark.parametrize("count", [2, 3])
def test_secret_deleted_and_each_replica_restarted_fail_no_handshake(
    control_plane: ControlPlane,
    kube_namespace: str,
    replica_env: tuple[dict[str, str], tuple[str, str]],
    replicas: Replicas,
    count: int,
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(control_plane.client)
    for _ in range(count):
        replicas.servers.append(replicas.start())
    assert wait_until(replicas.all_ready, 60, poll=0.2), replicas.logs()
    clients = Handshakes(control_plane, replica_env[1], replicas)
    clients.start(f"{SERVICE}.{kube_namespace}.svc")
    try:
        for i in range(count):
            before = clients.tally["handshake"]
            core.delete_namespaced_secret(SECRET, kube_namespace)
            replicas.restart(i)
            assert wait_until(replicas.all_ready, 90, poll=0.2), replicas.logs()
            # Every replica serves what the Secret holds now, and answers handshakes.
            assert wait_until(lambda b=before: clients.tally["handshake"] > b + 3 * count, 30)
    finally:
        clients.stop()
    assert not clients.failures, (clients.failures[:5], clients.tally, replicas.logs())
    assert clients.tally["handshake"] > 10 * count, clients.tally
    assert set(clients.statuses) == {200}, clients.statuses


def test_first_start_with_the_api_server_unreachable(
    control_plane: ControlPlane,
    replica_env: tuple[dict[str, str], tuple[str, str]],
    replicas: Replicas,
    tmp_path: Path,
) -> None:
    from urllib.parse import urlsplit

    url = urlsplit(control_plane.url)
    gate = Gate((url.hostname or "127.0.0.1", url.port or 443))
    kubeconfig = tmp_path / "through-the-gate"
    kubeconfig.write_text(
        control_plane.kubeconfig.read_text().replace(
            control_plane.url, f"https://127.0.0.1:{gate.port}"
        )
    )
    replicas.env = {**replica_env[0], KUBE_ENV: str(kubeconfig)}
    folder = tmp_path / "first"
    folder.mkdir()
    port = free_port()
    env = server_env(folder, port, folder / "tls", workers=1, threads=2, **replicas.env)
    server = launch(argv(), folder, env, insecure(), port)
    replicas.servers.append(server)
    try:
        address = f"https://127.0.0.1:{gate.port}"
        assert wait_until(lambda: server.log().count("does not answer") >= 2, 60), server.log()
        assert address in server.log()
        assert server.proc.poll() is None  # still trying
        gate.open()
        wait_until_serving(server, workers=1, timeout=90)
        assert wait_until(lambda: replicas.ready(server), 60), server.log()
        log = server.log()
        assert "service account needs" not in log
        assert "Traceback" not in log
    finally:
        gate.close()
