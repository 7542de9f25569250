"""AdmissionReview v1 answers, four kinds (controller-runtime's Allowed, Denied, Patched, Errored).

Each constructor returns the whole ``AdmissionReview`` document with its ``response``; the
handler serializes it. Warnings go through :func:`clean_warnings` and audit annotations
through :func:`audit_annotations`, so every answer keeps within the API server's limits.
"""

from __future__ import annotations

import base64
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from webhook.contract import ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND

# The API server's warning limits (k8s.io/apiserver/pkg/endpoints/filters/warning.go): past
# 4096 characters in all, every warning of the request is cut to 256.
WARNING_TOTAL_CHARS: Final = 4096
WARNING_ITEM_CHARS: Final = 256
# Audit annotation values end up in every audit event of the request: keep them short.
ANNOTATION_VALUE_CHARS: Final = 1024

DENIED_CODE: Final = 403
ERROR_CODE: Final = 500


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": ADMISSION_REVIEW_KIND,
        "response": response,
    }


def _with_extras(
    response: dict[str, Any], warnings: Sequence[str], annotations: dict[str, str] | None
) -> dict[str, Any]:
    if warnings:
        cleaned = clean_warnings(warnings)
        if cleaned:
            response["warnings"] = cleaned
    if annotations:
        response["auditAnnotations"] = annotations
    return _review(response)


def allowed(
    uid: str, *, warnings: Sequence[str] = (), annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """Admit the object as it is."""
    return _with_extras({"uid": uid, "allowed": True}, warnings, annotations)


def denied(
    uid: str,
    message: str,
    *,
    warnings: Sequence[str] = (),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Refuse the object: HTTP 403 Forbidden in kubectl, with ``message``."""
    response = {
        "uid": uid,
        "allowed": False,
        "status": {
            "code": DENIED_CODE,
            "status": "Failure",
            "reason": "Forbidden",
            "message": message,
        },
    }
    return _with_extras(response, warnings, annotations)


def patched(
    uid: str,
    patch: Sequence[Mapping[str, Any]],
    *,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Admit the object with a JSON Patch (none sent when ``patch`` is empty)."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode("ascii")
    return _with_extras(response, (), annotations)


def errored(uid: str, message: str, *, error: str) -> dict[str, Any]:
    """The webhook failed (HTTP 500 with it): ``error`` names the exception's type."""
    return _review(
        {
            "uid": uid,
            "allowed": False,
            "status": {
                "code": ERROR_CODE,
                "status": "Failure",
                "reason": "InternalError",
                "message": message,
            },
            "auditAnnotations": {"error": error[:ANNOTATION_VALUE_CHARS]},
        }
    )


def audit_annotations(
    *,
    failed: Iterable[str] = (),
    warned: Iterable[str] = (),
    mutations: Iterable[str] = (),
    pending: Iterable[str] = (),
) -> dict[str, str]:
    """Audit annotations; keys are lowercase names well under the 63-character limit."""
    out: dict[str, str] = {}
    for key, values, sep in (
        ("failed-rules", failed, ","),
        ("warned-rules", warned, ","),
        ("mutations", mutations, "; "),
        ("pending-mutations", pending, "; "),
    ):
        text = sep.join(values)
        if text:
            out[key] = _cut(text, ANNOTATION_VALUE_CHARS)
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: str) -> str:
    # Control characters (newlines, tabs, escapes) make the API server drop a warning whole.
    if text.isprintable():
        return text
    return " ".join(
        "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text).split()
    )


def clean_warnings(warnings: Iterable[str]) -> list[str]:
    """Warnings the API server passes on intact: single printable lines, within its limits.

    Duplicates are dropped. When all of them together exceed 4096 characters, each is cut to
    256 (what the API server would do) and those that still do not fit are left out.
    """
    # A plain loop and map(len), not nested generators resumed once per warning: each review
    # that warns comes here (docs/performance.md, "Tenth round").
    kept: dict[str, None] = {}  # in order, without duplicates
    for warning in warnings:
        line = _one_line(warning)
        if line:
            kept[line] = None
    items = list(kept)
    if sum(map(len, items)) <= WARNING_TOTAL_CHARS:
        return items
    out: list[str] = []
    total = 0
    for item in items:
        cut = _cut(item, WARNING_ITEM_CHARS)
        if total + len(cut) > WARNING_TOTAL_CHARS:
            break
        out.append(cut)
        total += len(cut)
    return out
