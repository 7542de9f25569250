"""DRA selectors on the real v1.36.2 control plane: the API server and kube-scheduler are the
judges of webhook/policy/selectors/ (docs/cel.md).

One Node with no device plugin and one ResourceSlice of one A100, as NVIDIA's driver publishes
it. For each selector: the API server accepts or refuses a DeviceClass with it (it compiles
selectors as the scheduler does), and where it accepts, a pod whose claim asks for that class
is bound, or stays unschedulable with the scheduler's CEL error in its FailedScheduling event.
``compile_selector(...).matches`` on the device read back from the same ResourceSlice must
give the same verdict: a match, no match, a compile error or a runtime error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.kube.test_dra_controlplane import (
    delete_pod,
    scheduler_outcome,
    scheduling_failure,
)
from tests.objects import claim_pod, claim_template, exactly
from tests.support.controlplane import ControlPlane
from webhook.policy.dra import parse_resource_slice
from webhook.policy.selectors import CelCompileError, CelRuntimeError, compile_selector

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MakeNode = Callable[..., dict[str, Any]]

ON_DRIVER = "device.driver == 'gpu.nvidia.com' && "
# (class name, selector, expected verdict): "bound", "unmatched", "compile: <words>" or
# "runtime: <words>"; the words are the scheduler's or the API server's.
CASES = [
    (
        "cel-lower",
        ON_DRIVER + "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('a100')",
        "bound",
    ),
    (
        "cel-split",
        ON_DRIVER
        + "device.attributes['gpu.nvidia.com'].productName.split(' ')[1] == 'A100-SXM4-80GB'",
        "bound",
    ),
    (
        "cel-quantity",
        ON_DRIVER + "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))",
        "bound",
    ),
    ("cel-no-match", ON_DRIVER + "device.attributes['gpu.nvidia.com'].index == 7", "unmatched"),
    (
        "cel-missing",
        "device.attributes['gpu.nvidia.com'].missing == 'x'",
        "runtime: CEL runtime error: no such key: missing",
    ),
    (
        "cel-includes",
        "device.attributes['gpu.nvidia.com'].productName.includes('A100')",
        "compile: undeclared reference to 'includes'",
    ),
    ("cel-field", "device.model == 'x'", "compile: undefined field 'model'"),
]


def gpu_slice(node: str) -> dict[str, Any]:
    """One A100 on ``node``, as NVIDIA's DRA driver publishes a GPU."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-cel"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "index": {"int": 0},
                        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                        "driverVersion": {"version": "550.54.15"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }


def on_node(name: str, template: str, node: str) -> dict[str, Any]:
    """A pod on ``node`` (by its hostname label) whose one claim comes from ``template``."""
    return claim_pod(name, template, nodeSelector={"kubernetes.io/hostname": node})


def engine_verdict(expression: str, device: Any) -> str:
    """What webhook/policy/selectors/ says, in the words of CASES."""
    try:
        matched = compile_selector(expression).matches(device)
    except CelCompileError as err:
        return f"compile: {err}"
    except CelRuntimeError as err:
        return f"runtime: CEL runtime error: {err}"
    return "bound" if matched else "unmatched"


def scheduler_verdict(
    plane: ControlPlane, namespace: str, node: str, name: str, expression: str
) -> str:
    """What the API server and kube-scheduler say of a class with ``expression``."""
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }
    try:
        plane.create(device_class)
    except ApiException as err:
        assert err.status == 422, err.body
        return f"compile: {err.body}"
    plane.create(claim_template(name, exactly(name), namespace=namespace))
    core = client.CoreV1Api(plane.client)
    core.create_namespaced_pod(namespace, on_node(name, name, node))
    try:
        if scheduler_outcome(core, namespace, name) == node:
            return "bound"
        message = scheduling_failure(core, namespace, name)
    finally:
        delete_pod(plane, core, namespace, name)  # the one GPU is free for the next case
    if "CEL runtime error" in message:
        return f"runtime: {message}"
    return f"unmatched: {message}"


def test_selectors_judged_by_the_scheduler_and_by_the_engine_agree(
    control_plane: ControlPlane, kube_namespace: str, make_gpu_node: MakeNode
) -> None:
    node = make_gpu_node(gpus=None)["metadata"]["name"]
    rslice = control_plane.create(gpu_slice(node))
    # The device as the webhook reads it from the object the API server stored.
    stored = control_plane.client.sanitize_for_serialization(rslice)
    devices, problems = parse_resource_slice(stored)
    assert problems == [] and len(devices) == 1
    classes = client.ResourceV1Api(control_plane.client)
    try:
        for name, expression, expected in CASES:
            truth = scheduler_verdict(control_plane, kube_namespace, node, name, expression)
            ours = engine_verdict(expression, devices[0])
            kind, _, words = expected.partition(": ")
            assert truth.split(":")[0] == kind, (name, truth)
            assert ours.split(":")[0] == kind, (name, ours)
            assert words in truth and words in ours, (name, truth, ours)
    finally:
        for name, _, _ in CASES:
            with contextlib.suppress(ApiException):
                classes.delete_device_class(name)
        with contextlib.suppress(ApiException):
            classes.delete_resource_slice(f"{node}-cel")
