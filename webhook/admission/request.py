"""Reading an ``admission.k8s.io/v1`` AdmissionReview request: bytes in, AdmissionRequest out.

Everything wrong with a request (not JSON, not an AdmissionReview, another apiVersion, no
``request``, ``uid`` or ``object``, too large) raises :class:`RequestError`, whose ``reason``
is a short fixed token (a metrics label) and whose message is one line a human can act on.
The web layer turns it into an HTTP 4xx; nothing a client sends becomes a 500.

The body is decoded with one ``orjson.loads`` and never copied: the engine reads the object in
place and mutates copies of only what it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import orjson

from webhook.contract import ADMISSION_API_VERSION, ADMISSION_OPERATIONS, ADMISSION_REVIEW_KIND
from webhook.policy.records import MAPPING, per_review_record

# The API server refuses request bodies above 3 MiB (etcd's limit is 1.5 MiB per object), and
# an UPDATE carries the object twice; 7 MiB leaves room for both plus the request's envelope.
MAX_BODY_BYTES: Final = 7 * 1024 * 1024

# A UID is a 36-character UUID; anything far longer is not from an API server.
_MAX_UID_CHARS: Final = 256

OPERATIONS: Final = frozenset(ADMISSION_OPERATIONS)

Reason = Literal[
    "too-large",
    "not-json",
    "not-admission-review",
    "wrong-api-version",
    "no-request",
    "no-uid",
    "no-object",
    "bad-field",
]


class RequestError(ValueError):
    """The request itself is wrong: the web layer answers HTTP 4xx with ``str(error)``.

    ``reason`` is one of a fixed set of tokens (see ``Reason``), safe as a metrics label;
    ``status`` is the HTTP status to answer with (400, or 413 for a body that is too large).
    """

    def __init__(self, reason: Reason, message: str, *, status: int = 400) -> None:
        """Record the reason token, the one-line message and the HTTP status."""
        # One line, always: the message ends up in an HTTP body and a log line.
        super().__init__(" ".join(message.split()))
        self.reason: Reason = reason
        self.status = status


# What a JSON object decodes to: MAPPING (webhook.policy.records), dict first.
_OBJECT = MAPPING
# What parse_review decodes (JSON text): told by type, before _OBJECT's ABC check would run
# on the bytes.
_ENCODED: Final = (bytes, bytearray, memoryview, str)


@per_review_record
class AdmissionRequest:
    """The fields of ``AdmissionReview.request`` the webhook uses, checked and typed.

    ``object`` and ``old_object`` are the decoded JSON objects themselves (not copies): treat
    them as read-only. ``object`` is None only for DELETE and CONNECT.
    """

    uid: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str
    operation: str
    namespace: str | None
    name: str | None
    dry_run: bool
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None

    @property
    def display_name(self) -> str:
        """The object's name, or ``<generateName>*`` when the API server has not named it yet."""
        if self.name:
            return self.name
        metadata = self.object.get("metadata") if self.object is not None else None
        if isinstance(metadata, _OBJECT):
            name = metadata.get("name")
            if isinstance(name, str) and name:
                return name
            generate = metadata.get("generateName")
            if isinstance(generate, str) and generate:
                return f"{generate}*"
        return ""


def decode(body: bytes | bytearray | memoryview | str, *, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """The JSON document in ``body``; RequestError when it is too large or not JSON."""
    if len(body) > max_bytes:
        raise RequestError(
            "too-large",
            f"request body of {len(body)} bytes is over the limit of {max_bytes} bytes",
            status=413,
        )
    try:
        # orjson: strict RFC 8259 (UTF-8 only; no NaN or Infinity, which a patch echoing them
        # back would make undecodable for the API server; nesting capped at 1024 levels), and
        # several times faster than the json module on a pod, which is most of a review's
        # parsing cost.
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # A ValueError whose str() is one line with the position.
        raise RequestError("not-json", f"request body is not JSON: {exc}") from None


def _optional_str(request: Mapping[str, Any], key: str) -> str | None:
    value = request.get(key)
    if value is None or isinstance(value, str):
        return value
    raise RequestError("bad-field", f"request.{key} must be a string, not {_json_type(value)}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _group_version_kind(request: Mapping[str, Any], key: str, name: str) -> tuple[str, str, str]:
    value = request.get(key)
    if not isinstance(value, _OBJECT):
        raise RequestError("bad-field", f"request.{key} must be an object, not {_json_type(value)}")
    parts = []
    for field in ("group", "version", name):
        part = value.get(field, "")
        if not isinstance(part, str):
            raise RequestError(
                "bad-field", f"request.{key}.{field} must be a string, not {_json_type(part)}"
            )
        parts.append(part)
    if not parts[2]:
        raise RequestError("bad-field", f"request.{key}.{name} is missing")
    return parts[0], parts[1], parts[2]


def _check_metadata(obj: Mapping[str, Any]) -> None:
    # The API server only sends objects it decoded, so metadata is an object and annotations
    # a map of strings; anything else was not sent by an API server.
    metadata = obj.get("metadata")
    if metadata is None:
        return
    if not isinstance(metadata, _OBJECT):
        raise RequestError(
            "bad-field", f"request.object.metadata must be an object, not {_json_type(metadata)}"
        )
    annotations = metadata.get("annotations")
    if annotations is None:
        return
    if not isinstance(annotations, _OBJECT) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        raise RequestError(
            "bad-field", "request.object.metadata.annotations must be a map of strings"
        )


def _request(doc: Any) -> Mapping[str, Any]:
    """``doc.request``, once ``doc`` is an ``admission.k8s.io/v1`` AdmissionReview."""
    if not isinstance(doc, _OBJECT):
        raise RequestError(
            "not-admission-review", f"request body is {_json_type(doc)}, not an AdmissionReview"
        )
    kind = doc.get("kind")
    if kind != ADMISSION_REVIEW_KIND:
        raise RequestError(
            "not-admission-review",
            f"kind is {kind!r}, expected {ADMISSION_REVIEW_KIND}"
            if isinstance(kind, str)
            else f"not an AdmissionReview: kind is {_json_type(kind)}",
        )
    api_version = doc.get("apiVersion")
    if api_version != ADMISSION_API_VERSION:
        shown = repr(api_version) if isinstance(api_version, str) else _json_type(api_version)
        raise RequestError(
            "wrong-api-version",
            f"apiVersion {shown[:80]} is not supported: "
            f"this webhook speaks {ADMISSION_API_VERSION} "
            "(admissionReviewVersions: [v1])",
        )
    request = doc.get("request")
    if not isinstance(request, _OBJECT):
        raise RequestError(
            "no-request", f"AdmissionReview has no request object ({_json_type(request)})"
        )
    return request


def _uid(request: Mapping[str, Any]) -> str:
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise RequestError("no-uid", "AdmissionReview request has no uid")
    if len(uid) > _MAX_UID_CHARS:
        raise RequestError("no-uid", f"request.uid is {len(uid)} characters long, not a UID")
    return uid


def _operation(request: Mapping[str, Any]) -> str:
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        shown = repr(operation)[:40] if isinstance(operation, str) else _json_type(operation)
        raise RequestError(
            "bad-field",
            f"request.operation is {shown}, expected one of {', '.join(sorted(OPERATIONS))}",
        )
    return operation


def _resource(request: Mapping[str, Any]) -> str:
    resource = request.get("resource")
    if isinstance(resource, _OBJECT):
        raw = resource.get("resource", "")
        return raw if isinstance(raw, str) else ""
    return ""


def _object(request: Mapping[str, Any], operation: str) -> Mapping[str, Any] | None:
    """``request.object``: required on CREATE and UPDATE, with the metadata an API server sends."""
    obj = request.get("object")
    if obj is not None and not isinstance(obj, _OBJECT):
        raise RequestError("bad-field", f"request.object must be an object, not {_json_type(obj)}")
    if obj is None and operation in ("CREATE", "UPDATE"):
        raise RequestError("no-object", f"request.object is missing on {operation}")
    if obj is not None:
        _check_metadata(obj)
    return obj


def _old_object(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    old = request.get("oldObject")
    if old is not None and not isinstance(old, _OBJECT):
        raise RequestError(
            "bad-field", f"request.oldObject must be an object, not {_json_type(old)}"
        )
    return old


def _dry_run(request: Mapping[str, Any]) -> bool:
    dry_run = request.get("dryRun", False)
    if dry_run is None:
        return False
    if not isinstance(dry_run, bool):
        raise RequestError(
            "bad-field", f"request.dryRun must be a boolean, not {_json_type(dry_run)}"
        )
    return dry_run


def parse_review(
    body: bytes | bytearray | memoryview | str | Mapping[str, Any],
    *,
    max_bytes: int = MAX_BODY_BYTES,
) -> AdmissionRequest:
    """Check an AdmissionReview v1 request (raw bytes or an already decoded dict).

    Raises :class:`RequestError` when the body is over ``max_bytes``, is not JSON, is not an
    ``admission.k8s.io/v1`` AdmissionReview, or lacks ``request``, ``request.uid``,
    ``request.kind``, a known ``request.operation``, or ``request.object`` on CREATE/UPDATE.
    The checks run in the order of those fields, so a request with several faults is always
    told about the same one.
    """
    if isinstance(body, _ENCODED) or not isinstance(body, _OBJECT):
        doc = decode(body, max_bytes=max_bytes)
    else:
        doc = body
    request = _request(doc)
    uid = _uid(request)
    operation = _operation(request)
    group, version, object_kind = _group_version_kind(request, "kind", "kind")
    resource = _resource(request)
    obj = _object(request, operation)
    old = _old_object(request)
    dry_run = _dry_run(request)
    return AdmissionRequest(
        uid=uid,
        group=group,
        version=version,
        kind=object_kind,
        resource=resource,
        sub_resource=_optional_str(request, "subResource") or "",
        operation=operation,
        namespace=_optional_str(request, "namespace") or None,
        name=_optional_str(request, "name") or None,
        dry_run=dry_run,
        object=obj,
        old_object=old,
    )
