"""A second mutating webhook for the reinvocation test: it states a pod's GPU model.

Platform teams run other mutating webhooks beside this one (injectors of sidecars, labels,
annotations). This one adds ``gpu-policy.io/product: NVIDIA-L20`` to every pod it is sent,
after the gpu-policy webhook has already been called (the API server calls mutating webhooks
in the order of their configurations' names, and this configuration's name sorts last). The
gpu-policy webhook's ``reinvocationPolicy: IfNeeded`` then makes the API server call it again,
and only that second call sees the product the pod now asks for.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

PRODUCT = "NVIDIA-L20"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Answer every AdmissionReview with a patch adding the product annotation."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    review = json.loads(environ["wsgi.input"].read(length) or b"{}")
    request = review.get("request") or {}
    annotations = ((request.get("object") or {}).get("metadata") or {}).get("annotations")
    patch: list[dict[str, Any]] = []
    if annotations is None:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    patch.append(
        {"op": "add", "path": "/metadata/annotations/gpu-policy.io~1product", "value": PRODUCT}
    )
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    if environ.get("PATH_INFO") == "/mutate":
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    body = json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
