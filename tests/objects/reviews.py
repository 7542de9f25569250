"""AdmissionReview requests: the captured fixtures, with GPUs put into copies, and built ones.

The fixtures in tests/fixtures/admissionreviews were sent by real API servers (1.28.7 and
1.36.2); their pods ask for no GPU. Tests copy them (``copy.deepcopy``) before changing
anything, so every test starts from the bytes the API server sent.
"""

from __future__ import annotations

import copy
import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from tests.objects.pods import ctr
from tests.objects.workloads import TEMPLATE_KINDS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "admissionreviews"
VERSIONS = ("v1.28.7", "v1.36.2")
CASES = ("pod-create", "pod-dryrun-create", "pod-dryrun-ssa-create", "pod-dryrun-ssa-update")


def fixture_ids() -> list[tuple[str, str, str]]:
    """(version, endpoint it was captured for, case) of every captured request."""
    return [(v, e, c) for v in VERSIONS for e in ("mutate", "validate") for c in CASES]


@cache
def _raw(version: str, endpoint: str, case: str) -> bytes:
    return (FIXTURES / version / f"{endpoint}-{case}.json").read_bytes()


def load(version: str, endpoint: str, case: str) -> dict[str, Any]:
    """A fresh copy of one captured AdmissionReview."""
    return dict(json.loads(_raw(version, endpoint, case)))


def with_gpu(
    doc: dict[str, Any],
    quantity: Any = 1,
    *,
    resource: str = "nvidia.com/gpu",
    requests: bool = True,
    container: int = 0,
) -> dict[str, Any]:
    """A copy of ``doc`` whose pod's container asks for ``quantity`` of ``resource``."""
    doc = copy.deepcopy(doc)
    for key in ("object", "oldObject"):
        obj = doc["request"].get(key)
        if not obj:
            continue
        c = obj["spec"]["containers"][container]
        res: dict[str, Any] = {"limits": {resource: quantity}}
        if requests:
            res["requests"] = {resource: quantity}
        c["resources"] = res
    return doc


def new_uid() -> str:
    """A fresh request uid, as the API server makes them."""
    return str(uuid.uuid4())


def pod_spec(quantity: Any = 1, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A pod spec with one container asking for ``quantity`` of ``resource``."""
    return {
        "containers": [
            ctr("cuda", limits={resource: quantity}, image="registry.example/cuda:12"),
        ]
    }


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
    uid: str | None = None,
    group: str | None = None,
    version: str = "v1",
    kind: str | None = None,
    resource: str | None = None,
    sub_resource: str | None = None,
    namespace: str = "ml",
) -> dict[str, Any]:
    """An AdmissionReview v1 request for ``obj``, shaped like the captured ones."""
    source = obj or old or {}
    kind = kind or source.get("kind", "Pod")
    if group is None or resource is None:
        g, _, r = TEMPLATE_KINDS.get(kind, ("", "v1", kind.lower() + "s"))
        group = g if group is None else group
        resource = r if resource is None else resource
    name = (source.get("metadata") or {}).get("name", "")
    request: dict[str, Any] = {
        "uid": uid or new_uid(),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions",
        },
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# The fields of the structs whose order the webhook's memo reads (webhook/admission/memo.py),
# in the order Go declares them: k8s.io/api admission/v1 AdmissionReview and AdmissionRequest,
# core/v1 Pod, PodSpec, Volume, ProjectedVolumeSource and VolumeMount, meta/v1 ObjectMeta,
# GroupVersionKind and GroupVersionResource.
_ORDERS = {
    "review": ("kind", "apiVersion", "request", "response"),
    "request": (
        "uid",
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "operation",
        "userInfo",
        "object",
        "oldObject",
        "dryRun",
        "options",
    ),
    "kind": ("group", "version", "kind", "resource"),
    "object": ("kind", "apiVersion", "metadata", "spec", "status"),
    "metadata": (
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ),
    "spec": ("volumes", "initContainers", "containers", "ephemeralContainers"),
    "volume": ("name",),
    "projected": ("sources", "defaultMode"),
    "mount": ("name", "readOnly", "recursiveReadOnly", "mountPath"),
}


def _in_order(fields: dict[str, Any], order: str) -> dict[str, Any]:
    """``fields`` with those of ``order`` first, in Go's order, then the others as they were;
    an empty ``name`` left out (its ``omitempty``)."""
    first = {k: fields[k] for k in _ORDERS[order] if k in fields}
    if first.get("name") == "":
        del first["name"]
    return {**first, **{k: v for k, v in fields.items() if k not in _ORDERS[order]}}


def _volume_in_order(volume: Any) -> Any:
    if not isinstance(volume, dict):
        return volume
    volume = _in_order(volume, "volume")
    if isinstance(volume.get("projected"), dict):
        volume["projected"] = _in_order(volume["projected"], "projected")
    return volume


def _pod_in_order(obj: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    obj = _in_order(obj, "object")
    if isinstance(obj.get("metadata"), dict):
        obj["metadata"] = _in_order(obj["metadata"], "metadata")
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec = obj["spec"] = _in_order(spec, "spec")
        if isinstance(spec.get("volumes"), list):
            spec["volumes"] = [_volume_in_order(v) for v in spec["volumes"]]
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for c in spec.get(key) or ():
                if isinstance(c, dict) and isinstance(c.get("volumeMounts"), list):
                    c["volumeMounts"] = [_in_order(m, "mount") for m in c["volumeMounts"]]
    return obj


def as_sent(doc: dict[str, Any]) -> bytes:
    """The bytes of the AdmissionReview ``doc`` as kube-apiserver sends them: compact JSON,
    each struct's fields in Go's order (the order the memo's patterns read), empty names
    left out. Only the structs of ``_ORDERS`` are put in order; the rest stays as built."""
    doc = copy.deepcopy(doc)
    request = _in_order(doc["request"], "request")
    for key in ("kind", "resource", "requestKind", "requestResource"):
        if isinstance(request.get(key), dict):
            request[key] = _in_order(request[key], "kind")
    for key in ("object", "oldObject"):
        if key in request:
            request[key] = _pod_in_order(request[key])
    doc = _in_order({**doc, "request": request}, "review")
    return json.dumps(doc, separators=(",", ":")).encode()
