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


# The structs whose field order the webhook's memo reads (webhook/admission/memo.py): their
# fields in the order Go declares them, and the structs of their fields (a list: of each
# item). k8s.io/api admission/v1 AdmissionReview and AdmissionRequest, core/v1 Pod, PodSpec,
# Volume, ProjectedVolumeSource, Container and VolumeMount; apimachinery meta/v1 ObjectMeta,
# GroupVersionKind and GroupVersionResource.
_STRUCTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "review": (("kind", "apiVersion", "request", "response"), {"request": "request"}),
    "request": (
        (
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
        {
            **dict.fromkeys(("kind", "resource", "requestKind", "requestResource"), "kind"),
            **dict.fromkeys(("object", "oldObject"), "object"),
        },
    ),
    "kind": (("group", "version", "kind", "resource"), {}),
    "object": (
        ("kind", "apiVersion", "metadata", "spec", "status"),
        {"metadata": "metadata", "spec": "spec"},
    ),
    "metadata": (
        (
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
        {},
    ),
    "spec": (
        ("volumes", "initContainers", "containers", "ephemeralContainers"),
        {
            "volumes": "volume",
            **dict.fromkeys(("initContainers", "containers", "ephemeralContainers"), "container"),
        },
    ),
    "volume": (("name",), {"projected": "projected"}),
    "projected": (("sources", "defaultMode"), {}),
    "container": ((), {"volumeMounts": "mount"}),
    "mount": (("name", "readOnly", "recursiveReadOnly", "mountPath"), {}),
}


def _in_order(value: Any, struct: str) -> Any:
    """``value`` (a ``struct``, or a list of them) with its fields in Go's order first, then
    the others as they were, an empty ``name`` left out (its ``omitempty``); its fields'
    structs the same. Anything but a dict is left as it is."""
    if isinstance(value, list):
        return [_in_order(item, struct) for item in value]
    if not isinstance(value, dict):
        return value
    order, fields = _STRUCTS[struct]
    first = {k: value[k] for k in order if k in value}
    if first.get("name") == "":
        del first["name"]
    out = {**first, **{k: v for k, v in value.items() if k not in order}}
    for key, inner in fields.items():
        if key in out:
            out[key] = _in_order(out[key], inner)
    return out


def as_sent(doc: dict[str, Any]) -> bytes:
    """The bytes of the AdmissionReview ``doc`` as kube-apiserver sends them: compact JSON,
    each struct's fields in Go's order (the order the memo reads), empty names left out. Only
    the structs of ``_STRUCTS`` are put in order; the rest stays as built."""
    return json.dumps(_in_order(doc, "review"), separators=(",", ":")).encode()
