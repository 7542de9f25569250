"""AdmissionReview v1 as the API server sends it, and reading the webhook's answer. Pure.

``build_review`` makes the request an API server would send for one object (the fields
captured from kube-apiserver 1.28 and 1.36 in the shared fixtures); ``parse_response``
checks the answer the way the API server does (apiVersion, kind, the echoed uid) and returns
what the harness compares: allowed, the status message, warnings, the JSON Patch and the
audit annotations. ``failed_rules`` reads the rule ids out of a denial message.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.contract import ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND

# apiVersion group -> (kind -> (plural, namespaced)) for the kinds that carry pod templates,
# plus the few others a suite is likely to hold. An unknown kind gets a lower-case plural
# guess; our webhook reads the object, not the resource name.
_RESOURCES: dict[str, tuple[str, bool]] = {
    "Pod": ("pods", True),
    "PodTemplate": ("podtemplates", True),
    "ReplicationController": ("replicationcontrollers", True),
    "Deployment": ("deployments", True),
    "ReplicaSet": ("replicasets", True),
    "StatefulSet": ("statefulsets", True),
    "DaemonSet": ("daemonsets", True),
    "Job": ("jobs", True),
    "CronJob": ("cronjobs", True),
    "ConfigMap": ("configmaps", True),
    "Service": ("services", True),
    "Secret": ("secrets", True),
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
}

# "[rule-id] message" entries of Decision.denial, joined by "; ", possibly after a prefix
# such as 'admission webhook "x" denied the request: '.
_RULE_ID = re.compile(r"(?:^|; |: )\[([a-z0-9][a-z0-9.-]*)\] ")


class ResponseError(ValueError):
    """The webhook's answer is not a usable AdmissionReview response."""


@dataclass(frozen=True)
class Answer:
    """The parts of an AdmissionReview response the harness checks."""

    allowed: bool
    message: str = ""
    code: int | None = None
    warnings: tuple[str, ...] = ()
    patch: tuple[dict[str, Any], ...] | None = None
    audit_annotations: Mapping[str, str] = field(default_factory=dict)


def group_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> ("apps", "v1"); ``v1`` -> ("", "v1")."""
    group, _, version = api_version.rpartition("/")
    return group, version


def resource_for(kind: str) -> tuple[str, bool]:
    """The plural resource name for ``kind`` and whether it is namespaced."""
    return _RESOURCES.get(kind, (kind.lower() + "s", True))


def build_review(
    obj: Mapping[str, Any],
    *,
    operation: str = "CREATE",
    namespace: str | None = None,
    uid: str | None = None,
    old_object: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    username: str = "gpu-policy-test",
) -> dict[str, Any]:
    """The AdmissionReview v1 request an API server sends for ``obj``.

    ``namespace`` defaults to the object's own, then ``default`` for namespaced kinds. On
    UPDATE without ``old_object`` the object itself is the old object (an update that changes
    nothing the webhook reads); on DELETE the object travels as ``oldObject`` only.
    """
    api_version = str(obj.get("apiVersion") or "v1")
    kind = str(obj.get("kind") or "")
    group, version = group_version(api_version)
    plural, namespaced = resource_for(kind)
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    # The API server puts the namespace of the URL in the request; kubectl defaults it.
    namespace = (namespace or meta.get("namespace") or "default") if namespaced else None
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(
        operation, "DeleteOptions"
    )
    new: Mapping[str, Any] | None = obj
    old: Mapping[str, Any] | None = None
    if operation == "UPDATE":
        old = old_object if old_object is not None else obj
    elif operation == "DELETE":
        new, old = None, obj
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": meta.get("name") or "",
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    }
    if namespace is not None:
        request["namespace"] = namespace
    if operation == "CONNECT":
        request.pop("options")
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_REVIEW_KIND, "request": request}


def parse_response(doc: Any, uid: str) -> Answer:
    """Check an AdmissionReview response as the API server would, and extract the answer."""
    if not isinstance(doc, Mapping):
        raise ResponseError("the response is not a JSON object")
    if doc.get("apiVersion") != ADMISSION_API_VERSION or doc.get("kind") != ADMISSION_REVIEW_KIND:
        raise ResponseError(
            f"expected apiVersion {ADMISSION_API_VERSION} kind {ADMISSION_REVIEW_KIND}, "
            "got apiVersion "
            f"{doc.get('apiVersion')!r} kind {doc.get('kind')!r}"
        )
    response = doc.get("response")
    if not isinstance(response, Mapping):
        raise ResponseError("the AdmissionReview has no response")
    if response.get("uid") != uid:
        raise ResponseError(f"response.uid {response.get('uid')!r} is not the request's {uid!r}")
    allowed = response.get("allowed")
    if not isinstance(allowed, bool):
        raise ResponseError("response.allowed is not a boolean")
    status = response.get("status")
    status = status if isinstance(status, Mapping) else {}
    message = str(status.get("message") or "")
    code = status.get("code") if isinstance(status.get("code"), int) else None
    raw_warnings = response.get("warnings") or []
    if not isinstance(raw_warnings, list) or not all(isinstance(w, str) for w in raw_warnings):
        raise ResponseError("response.warnings is not a list of strings")
    patch = None
    if response.get("patch") is not None:
        if response.get("patchType") != "JSONPatch":
            raise ResponseError(f"patchType is {response.get('patchType')!r}, not JSONPatch")
        patch = _decode_patch(response["patch"])
    audit = response.get("auditAnnotations") or {}
    if not isinstance(audit, Mapping):
        raise ResponseError("response.auditAnnotations is not an object")
    return Answer(
        allowed=allowed,
        message=message,
        code=code,
        warnings=tuple(raw_warnings),
        patch=patch,
        audit_annotations={str(k): str(v) for k, v in audit.items()},
    )


def _decode_patch(raw: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, str):
        raise ResponseError("response.patch is not a base64 string")
    try:
        ops = json.loads(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise ResponseError(f"response.patch is not base64 JSON: {exc}") from None
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise ResponseError("response.patch is not a JSON Patch (a list of operations)")
    return tuple(ops)


def failed_rules(
    message: str, audit_annotations: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Rule ids in a denial: ``[rule-id] ...`` entries of the message, in order, no repeats.

    When the message names none, the ``failed-rules`` audit annotation (comma-separated ids,
    as webhook/admission writes it; ``<webhook name>/failed-rules`` once the API server has
    prefixed it) is read instead.
    """
    ids = list(dict.fromkeys(_RULE_ID.findall(message)))
    if ids or not audit_annotations:
        return tuple(ids)
    for key, value in audit_annotations.items():
        if key.rsplit("/", 1)[-1] != "failed-rules":
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = re.split(r"[,\s]+", value)
        if isinstance(parsed, list):
            ids += [str(v) for v in parsed if str(v)]
    return tuple(dict.fromkeys(ids))
