"""The replicas of a workload, created through the real API server, are answered from the
answers kept for an earlier one (webhook/admission/memo.py).

What the memo relies on is the API server's: that the pods of one ReplicaSet reach the webhooks
in bytes that differ only in the texts its key cuts out (``memo.answer_key``: the request's uid
and name, the pod's name, uid, creation time, managed fields' times and token volume's name). Checked here on kube-apiserver v1.36.2 with the webhook's own app served in
this process (werkzeug, TLS), registered by URL, the engine's ``review`` counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from werkzeug.serving import make_server

from tests.objects import workload
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until
from webhook.admission import handler as handler_module
from webhook.certs.issue import write_certs
from webhook.server import Settings, create_app

# The ReplicaSet controller creates pods in batches of 1, 2, 4, ... (slow start): with 6, the
# last batch comes after two replicas were judged at each endpoint, whose answers were kept.
REPLICAS = 6


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """The webhook's app on a loopback port with TLS: (its URL, the CA bundle)."""
    certs = write_certs(tmp_path / "certs")
    app = create_app(Settings())
    server = make_server(
        "127.0.0.1",
        0,
        app,
        threaded=True,
        ssl_context=(str(certs.cert), str(certs.key)),
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_port}", certs.ca_cert.read_bytes()
    finally:
        server.shutdown()
        thread.join(10)


@pytest.mark.slow
def test_the_replicas_of_a_replicaset_are_answered_from_kept_answers(
    control_plane: ControlPlane,
    kube_namespace: str,
    register_webhooks: Callable[..., list[dict[str, Any]]],
    served: tuple[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, ca_bundle = served
    reviewed: list[str] = []
    real = handler_module.review

    def counted(obj: Any, **kwargs: Any) -> Any:
        reviewed.append(str(obj.get("kind")))
        return real(obj, **kwargs)

    monkeypatch.setattr(handler_module, "review", counted)
    register_webhooks(url, ca_bundle, namespace=kube_namespace)
    core = client.CoreV1Api(control_plane.client)
    probe = workload("ReplicaSet", "probe", kube_namespace, gpu={"nvidia.com/gpu": "1"})
    pod = {"apiVersion": "v1", "kind": "Pod", **probe["spec"]["template"]}
    pod["metadata"] = {**pod["metadata"], "generateName": "probe-"}

    def called() -> bool:  # the API server calls a new configuration once it has seen it
        made = core.create_namespaced_pod(kube_namespace, pod, dry_run="All")
        return any(t.key == "nvidia.com/gpu" for t in made.spec.tolerations or ())

    assert wait_until(called, 30, 0.2)
    control_plane.start_controllers()
    replicas = workload("ReplicaSet", "held", kube_namespace, gpu={"nvidia.com/gpu": "1"})
    replicas["metadata"] = {"name": "held", "namespace": kube_namespace}
    replicas["spec"]["replicas"] = REPLICAS
    reviewed.clear()
    control_plane.create(replicas)

    def made() -> list[Any]:
        return core.list_namespaced_pod(kube_namespace, label_selector="app=held").items

    assert wait_until(lambda: len(made()) == REPLICAS, 120, 0.2)
    pods = made()
    # Every replica was mutated (the webhook's toleration), and each has its own name.
    assert all(any(t.key == "nvidia.com/gpu" for t in p.spec.tolerations) for p in pods)
    assert len({p.metadata.name for p in pods}) == REPLICAS
    # The engine judged the first replicas' pods (a family's first pod is not kept, the two of
    # the second batch may come at once); the last batch got their answers.
    assert set(reviewed) == {"Pod"}
    assert len(reviewed) <= 2 * 3
