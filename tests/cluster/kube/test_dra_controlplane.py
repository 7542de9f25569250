"""DRA on the real control plane: devices published in ResourceSlices, judged as the scheduler
judges them.

A Node with no device plugin, a ResourceSlice of GPUs as NVIDIA's DRA driver publishes them,
its DeviceClass with ``extendedResourceName: nvidia.com/gpu``: the scheduler binds a pod that
asks for ``nvidia.com/gpu``, so the webhook (watching that cluster) must allow it. For each
example DRA cluster, every pod the webhook allows is bound, and every pod it refuses as
unsatisfiable stays Pending when the webhook is off. And an API server without
``resource.k8s.io/v1`` (what a 1.28 server looks like to discovery) is served with DRA off.
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.objects import ctr, load, pod, with_gpu
from tests.support import gunicorn
from tests.support.controlplane import ControlPlane, assets_dir
from tests.support.paths import REPO
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs
from webhook.files import cluster_from_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLES = REPO / "examples" / "clusters"

MakeNode = Callable[..., dict[str, Any]]


def gpu_pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    """A pod whose one container (named as the pod) has ``resources`` as limits."""
    return pod(ctr(name, limits=dict(resources)), name=name, namespace=None)


@pytest.fixture
def dra_objects(control_plane: ControlPlane) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """``create(objects)``: DeviceClasses and ResourceSlices (cluster-scoped), deleted after
    the test so that the next one meets no extendedResourceName it did not make."""
    made: list[dict[str, Any]] = []

    def create(objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            body = copy.deepcopy(obj)
            body["metadata"] = {"name": obj["metadata"]["name"]}
            control_plane.create(body)
            made.append(body)

    yield create
    for obj in reversed(made):
        resource = control_plane.dynamic.resources.get(
            api_version=obj["apiVersion"], kind=obj["kind"]
        )
        with contextlib.suppress(ApiException):
            resource.delete(name=obj["metadata"]["name"])


def load_cluster(
    directory: Path, make_gpu_node: MakeNode, create: Callable[[list[dict[str, Any]]], None]
) -> None:
    """An example cluster's Nodes (set Ready, as a kubelet would) and DRA objects."""
    dump = cluster_from_text((directory / "nodes.yaml").read_text(), source=str(directory))
    for listed in dump.nodes:
        node = copy.deepcopy(listed)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        make_gpu_node(node=node)
    create(dump.by_kind["DeviceClass"] + dump.by_kind["ResourceSlice"])


@contextlib.contextmanager
def webhook_watching(
    plane: ControlPlane,
    policy: Path,
    register: Callable[..., Any] | None,
    namespace: str,
    tmp: Path,
) -> Iterator[gunicorn.Server]:
    """The webhook (one worker) watching ``plane`` with ``policy``, ready with DRA read;
    registered for ``namespace`` when ``register`` is given."""
    certs = write_certs(tmp / "certs")
    with gunicorn.running(
        tmp,
        certs,
        workers=1,
        GPU_POLICY_FILE=str(policy),
        GPU_POLICY_KUBE=str(plane.kubeconfig),
    ) as server:
        readyz: list[tuple[int, str]] = []

        def ready() -> bool:
            readyz.append(server.get("/readyz"))
            return readyz[-1][0] == 200 and "DRA available" in readyz[-1][1]

        assert wait_until(ready, 60, 0.2), readyz[-1:]
        registered = []
        if register is not None:
            url = f"https://127.0.0.1:{server.port}"
            registered = register(url, certs.ca_cert.read_bytes(), namespace=namespace)
        try:
            yield server
        finally:
            # Unregistered before the server stops: with failurePolicy Fail, a webhook that
            # does not answer would refuse every pod of the namespace.
            api = client.AdmissionregistrationV1Api(plane.client)
            for obj in registered:
                with contextlib.suppress(ApiException):
                    if obj["kind"] == "MutatingWebhookConfiguration":
                        api.delete_mutating_webhook_configuration(obj["metadata"]["name"])
                    else:
                        api.delete_validating_webhook_configuration(obj["metadata"]["name"])


def create_pod(core: client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> ApiException | None:
    try:
        core.create_namespaced_pod(namespace, pod)
    except ApiException as exc:
        return exc
    return None


def wait_registered(core: client.CoreV1Api, namespace: str) -> None:
    """Until the API server calls the webhook: half a GPU is refused by it (403), no longer by
    the API server's own validation (422), which comes after admission."""

    def refused_by_webhook() -> bool:
        try:
            core.create_namespaced_pod(
                namespace, gpu_pod("probe", {"nvidia.com/gpu": "0.5"}), dry_run="All"
            )
        except ApiException as exc:
            return exc.status == 403
        return False

    assert wait_until(refused_by_webhook, 30, 0.2)


def reviewed(server: gunicorn.Server, name: str) -> list[str]:
    """The webhook's log lines of its reviews of the object ``name`` (``decision=...``)."""
    return [
        line
        for line in server.log().splitlines()
        if "review uid=" in line and f"name={name} " in line
    ]


def bound_to(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 60) -> str | None:
    """The node the scheduler binds the pod to within ``timeout``, None if it does not."""
    found: list[str | None] = [None]

    def bound() -> bool:
        found[0] = core.read_namespaced_pod(name, namespace).spec.node_name
        return found[0] is not None

    wait_until(bound, timeout, 0.2)
    return found[0]


# kube-scheduler's first retry of a pod it could not place: podInitialBackoffSeconds, 1 s by
# default (docs/testing-control-plane.md). A pod it said fits nowhere, but that a moment-old
# object (a ResourceSlice, a DeviceClass its informer had not yet seen) lets in, is bound well
# within this once the scheduler requeues it.
SETTLE = 3.0
#: The reasons kube-scheduler gives a pod it tried and did not bind: it fits no node, or a
#: plugin failed on it (a CEL selector's runtime error is one).
TRIED = ("Unschedulable", "SchedulerError")


def scheduler_outcome(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    """The node the scheduler binds the pod to, or None once it has said it cannot (the pod's
    ``PodScheduled`` condition False, reason in :data:`TRIED`) and the pod stayed unbound
    for :data:`SETTLE` seconds after that. Waiting for the scheduler's own verdict, not for a
    fixed time without a binding, proves it looked at the pod, and returns soon after."""
    node: list[str | None] = [None]

    def bound() -> bool:
        node[0] = core.read_namespaced_pod(name, namespace).spec.node_name
        return node[0] is not None

    def judged() -> bool:
        if bound():
            return True
        pod = core.read_namespaced_pod(name, namespace)
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason in TRIED
            for c in pod.status.conditions or []
        )

    assert wait_until(judged, 60, 0.2), f"{name}: neither bound nor tried by the scheduler"
    if node[0] is None:
        wait_until(bound, SETTLE, 0.2)
    return node[0]


def left_unscheduled(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    """True when the scheduler says the pod fits no node and leaves it unbound
    (:func:`scheduler_outcome`)."""
    return scheduler_outcome(core, namespace, name) is None


def scheduling_failure(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The scheduler's FailedScheduling message for the pod, once there is one."""
    messages: list[str] = []

    def failed() -> bool:
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        ).items
        messages[:] = [e.message for e in events if e.reason == "FailedScheduling"]
        return bool(messages)

    assert wait_until(failed, 60, 0.2), f"{name}: no FailedScheduling event"
    return messages[0]


def delete_pod(plane: ControlPlane, core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Delete the pod at once (no kubelet) and wait until the devices of its claims are free."""
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    resource = client.ResourceV1Api(plane.client)

    def gone() -> bool:
        claims = resource.list_namespaced_resource_claim(namespace).items
        return not any(c.metadata.name.startswith(f"{name}-") for c in claims)

    assert wait_until(gone, 60, 0.2), f"{name}: its claims were not released"


# --- observation 1: a pod asking for nvidia.com/gpu on a DRA-only node --------------------


def two_gpu_cluster(node: str) -> list[dict[str, Any]]:
    """DeviceClass gpu.nvidia.com and one node's ResourceSlice of two GPUs, from the example
    DRA cluster (as NVIDIA's driver publishes them), moved to ``node``."""
    dump = cluster_from_text((EXAMPLES / "dra-a100" / "nodes.yaml").read_text(), source="dra-a100")
    gpu_class = next(
        c for c in dump.by_kind["DeviceClass"] if c["metadata"]["name"] == "gpu.nvidia.com"
    )
    rslice = copy.deepcopy(dump.by_kind["ResourceSlice"][0])
    rslice["metadata"]["name"] = f"{node}-gpu.nvidia.com"
    rslice["spec"]["nodeName"] = node
    rslice["spec"]["pool"]["name"] = node
    rslice["spec"]["devices"] = rslice["spec"]["devices"][:2]
    return [gpu_class, rslice]


def test_a_gpu_pod_on_a_dra_only_node_is_allowed_and_bound(
    control_plane: ControlPlane,
    kube_namespace: str,
    make_gpu_node: MakeNode,
    dra_objects: Callable[[list[dict[str, Any]]], None],
    register_webhooks: Callable[..., Any],
    tmp_path: Path,
) -> None:
    node = make_gpu_node(gpus=None)["metadata"]["name"]  # no device plugin: no nvidia.com/gpu
    dra_objects(two_gpu_cluster(node))
    policy = EXAMPLES / "dra-a100" / "policy.yaml"
    core = client.CoreV1Api(control_plane.client)
    # Without the webhook, the scheduler binds it and makes its claim.
    assert create_pod(core, kube_namespace, gpu_pod("unchecked", {"nvidia.com/gpu": "1"})) is None
    assert bound_to(core, kube_namespace, "unchecked") == node
    delete_pod(control_plane, core, kube_namespace, "unchecked")
    with webhook_watching(
        control_plane, policy, register_webhooks, kube_namespace, tmp_path
    ) as server:
        wait_registered(core, kube_namespace)
        pod = gpu_pod("gpu-pod-2", {"nvidia.com/gpu": "1"})
        assert create_pod(core, kube_namespace, pod) is None
        # The webhook judged it and allowed it.
        assert wait_until(lambda: reviewed(server, "gpu-pod-2"), 5, 0.1)
        assert all("decision=allowed" in line for line in reviewed(server, "gpu-pod-2"))
        assert bound_to(core, kube_namespace, "gpu-pod-2") == node
        status = control_plane.client.sanitize_for_serialization(
            core.read_namespaced_pod("gpu-pod-2", kube_namespace)
        )["status"]
        claim = status["extendedResourceClaimStatus"]["resourceClaimName"]
        assert claim.startswith("gpu-pod-2-extended-resources-")
        # Three GPUs are more than the node has: refused, with what it does have.
        denied = create_pod(core, kube_namespace, gpu_pod("three", {"nvidia.com/gpu": "3"}))
        assert denied is not None and denied.status == 403
        assert "has more than 2 matching devices" in json.loads(denied.body)["message"]


# --- the example DRA clusters, with the webhook and without it ----------------------------

# (example cluster, [(pod name, limits)]): what each example is tried with.
CASES = {
    "dra-a100": [
        ("one-gpu", {"nvidia.com/gpu": "1"}),
        ("eight-gpus", {"nvidia.com/gpu": "8"}),
        ("nine-gpus", {"nvidia.com/gpu": "9"}),
        ("mig-slice", {"nvidia.com/mig-1g.5gb": "1"}),
    ],
    "mixed-t4-dra-h100": [
        ("one-gpu", {"nvidia.com/gpu": "1"}),
        ("six-gpus", {"nvidia.com/gpu": "6"}),
        ("seven-gpus", {"nvidia.com/gpu": "7"}),
        ("shared-gpu", {"nvidia.com/gpu.shared": "1"}),
    ],
}


@pytest.mark.parametrize("cluster", sorted(CASES))
def test_what_the_webhook_allows_is_bound_and_what_it_refuses_stays_pending(
    cluster: str,
    control_plane: ControlPlane,
    kube_namespace: str,
    make_gpu_node: MakeNode,
    dra_objects: Callable[[list[dict[str, Any]]], None],
    register_webhooks: Callable[..., Any],
    tmp_path: Path,
) -> None:
    load_cluster(EXAMPLES / cluster, make_gpu_node, dra_objects)
    core = client.CoreV1Api(control_plane.client)
    verdicts: dict[str, bool] = {}
    with webhook_watching(
        control_plane,
        EXAMPLES / cluster / "policy.yaml",
        register_webhooks,
        kube_namespace,
        tmp_path,
    ):
        wait_registered(core, kube_namespace)
        for name, limits in CASES[cluster]:
            denied = create_pod(core, kube_namespace, gpu_pod(name, limits))
            verdicts[name] = denied is None
            if denied is None:
                assert bound_to(core, kube_namespace, name), f"{name}: allowed but not bound"
                delete_pod(control_plane, core, kube_namespace, name)
            else:
                assert denied.status == 403, denied.body
    assert True in verdicts.values() and False in verdicts.values(), verdicts
    # The webhook is gone (its configurations are removed before the server stops): the
    # refused pods are created as they are, and the scheduler cannot place them either.
    core_plain = client.CoreV1Api(control_plane.client)
    refused = [(n, limits) for n, limits in CASES[cluster] if not verdicts[n]]
    for name, limits in refused:
        pod = gpu_pod(f"{name}-unchecked", limits)
        assert wait_until(
            lambda pod=pod: create_pod(core_plain, kube_namespace, pod) is None, 30, 0.5
        )
        assert left_unscheduled(core_plain, kube_namespace, pod["metadata"]["name"])
        assert scheduling_failure(core_plain, kube_namespace, pod["metadata"]["name"])


# --- an API server without resource.k8s.io/v1 ----------------------------------------------


@pytest.fixture(scope="module")
def plane_without_dra() -> Iterator[ControlPlane]:
    """A second control plane whose API server does not serve resource.k8s.io/v1: what
    discovery shows of a 1.28 server (which has at most v1alpha2, behind a feature gate)."""
    assets = assets_dir()
    if assets is None:
        pytest.skip("KUBEBUILDER_ASSETS is not set")
    plane = ControlPlane(
        assets=assets,
        workdir=Path(tempfile.mkdtemp(prefix="controlplane-nodra-")),
        apiserver_args=("--runtime-config=resource.k8s.io/v1=false",),
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


def test_without_resource_k8s_io_v1_the_webhook_serves_and_says_dra_is_not_available(
    plane_without_dra: ControlPlane, tmp_path: Path
) -> None:
    certs = write_certs(tmp_path / "certs")
    policy = tmp_path / "policy.yaml"
    policy.write_text((EXAMPLES / "mixed-t4-dra-h100" / "policy.yaml").read_text())
    with gunicorn.running(
        tmp_path,
        certs,
        workers=1,
        GPU_POLICY_FILE=str(policy),
        GPU_POLICY_KUBE=str(plane_without_dra.kubeconfig),
    ) as server:
        readyz: list[tuple[int, str]] = []
        assert wait_until(
            lambda: readyz.append(server.get("/readyz")) or readyz[-1][0] == 200, 60, 0.2
        )
        text = readyz[-1][1]
        assert "DRA is not available: the API server does not serve resource.k8s.io/v1" in text
        assert "DRA is not available" in server.log()
        # It serves: the AdmissionReview a 1.28.7 API server sent is answered.
        conn = server.connect()
        try:
            doc = with_gpu(
                load("v1.28.7", "validate", "pod-create"), 2, resource="nvidia.com/gpu.shared"
            )
            conn.request(
                "POST",
                "/validate",
                body=json.dumps(doc).encode(),
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            body = json.loads(resp.read())
        finally:
            conn.close()
        assert resp.status == 200
        assert body["response"]["uid"] == doc["request"]["uid"]
        assert body["response"]["allowed"] is False  # no node offers shared GPUs here

        def dra_gauge() -> list[str]:
            lines = server.get("/metrics")[1].splitlines()
            return [
                line.split()[-1] for line in lines if line.startswith("gpu_policy_dra_available ")
            ]

        # The cluster figures are copied into the metrics every 2 s.
        assert wait_until(lambda: dra_gauge() == ["0.0"], 10, 0.2), dra_gauge()


# --- the watch and the audit's listing -----------------------------------------------------


def test_the_source_watches_device_classes_and_resource_slices(
    control_plane: ControlPlane,
    make_gpu_node: MakeNode,
    dra_objects: Callable[[list[dict[str, Any]]], None],
) -> None:
    from webhook.kube import ClusterSource, WatchTimings

    node = make_gpu_node(gpus=None)["metadata"]["name"]
    source = ClusterSource(
        control_plane.client,
        configmap=None,
        watch_pods=False,
        watch_claims=True,
        timings=WatchTimings(debounce=0.01, debounce_max=0.05),
    ).start()
    try:
        assert source.wait_synced(60)
        state = source.current
        assert state is not None and state.dra_available and state.dra == "DRA available"
        # Created after the first list: the watch brings them.
        dra_objects(two_gpu_cluster(node))

        def sliced(state: Any) -> bool:
            names = [s["metadata"]["name"] for s in state.resource_slices]
            return f"{node}-gpu.nvidia.com" in names and any(
                c["metadata"]["name"] == "gpu.nvidia.com" for c in state.device_classes
            )

        assert source.wait_for(sliced, 30)
        state = source.current
        assert state is not None
        mine = next(s for s in state.resource_slices if s["spec"]["nodeName"] == node)
        assert [d["name"] for d in mine["spec"]["devices"]] == ["gpu-0", "gpu-1"]
        assert "managedFields" not in mine["metadata"]
        assert source.health().dra == "DRA available"
    finally:
        source.stop()


def test_the_audit_lists_the_dra_kinds(
    control_plane: ControlPlane,
    make_gpu_node: MakeNode,
    dra_objects: Callable[[list[dict[str, Any]]], None],
) -> None:
    from webhook.kube.lister import read_dra

    node = make_gpu_node(gpus=None)["metadata"]["name"]
    dra_objects(two_gpu_cluster(node))
    found, listed = read_dra(control_plane.client, page_size=1)
    assert found.available
    assert f"{node}-gpu.nvidia.com" in [s["metadata"]["name"] for s in listed["resourceslices"]]
    assert "gpu.nvidia.com" in [c["metadata"]["name"] for c in listed["deviceclasses"]]
    assert listed["deviceclasses"][0]["kind"] == "DeviceClass"


def test_without_resource_k8s_io_v1_the_audit_lists_no_dra(plane_without_dra: ControlPlane) -> None:
    from webhook.kube.lister import read_dra

    found, listed = read_dra(plane_without_dra.client)
    assert found.describe() == (
        "DRA is not available: the API server does not serve resource.k8s.io/v1"
    )
    assert listed == {
        "deviceclasses": [],
        "resourceslices": [],
        "resourceclaims": [],
        "resourceclaimtemplates": [],
    }
