"""A loopback fake of kube-apiserver for dry-run creates, with our webhook as its admission chain.

It answers what ``gpu-policy test --kubeconfig`` sends, the way the real API server does:

* discovery: ``GET /api/v1``, ``/apis/apps/v1``, ``/apis/batch/v1`` (APIResourceLists);
* ``POST /api/v1/namespaces/{ns}/{plural}?dryRun=All`` (and ``/apis/{group}/{version}/...``):
  bearer-token authentication (401 Status otherwise); a request without ``dryRun=All`` is
  refused with 400, so a test can never store anything by mistake; an object whose namespace
  differs from the URL's gets the API server's 400; then

  1. defaulting: a Pod container's ``requests`` default to its ``limits``;
  2. mutating admission (Pods on CREATE): an AdmissionReview to our handler's ``mutate``,
     whose JSON Patch is applied; skipped when the fake is built with ``mutating=False``,
     as in a cluster whose chart sets ``webhook.mutating.enabled: false``;
  3. the API server's own validation of a Pod's extended resources (kubernetes/kubernetes
     ``pkg/apis/core/validation/validation.go`` ``ValidateResourceRequirements``; see
     docs/device-plugin.md, "The API server"): a 422 ``Invalid`` Status built as
     ``apierrors.NewInvalid`` builds it, with one cause per field error;
  4. validating admission: the same to ``validate``;
  5. 201 with the object as it would be stored (uid, creationTimestamp, imagePullPolicy,
     the DefaultTolerationSeconds tolerations...), or 403 with the Status
     ``admission webhook "validate.gpu-policy.io" denied the request: <message>``.

  Warnings from the webhooks travel as one ``Warning: 299 - "<text>"`` header each, on
  allowed and denied answers alike.

Every request is recorded in :attr:`DryRunApiServer.requests`. Standard library plus
``webhook.admission`` and ``jsonpatch``; plain HTTP on 127.0.0.1, port chosen by the kernel
(see ``fake_http``).
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch

from tests.support.fake_http import JsonHandler, LoopbackServer, kubeconfig, status
from webhook.admission import handle
from webhook.harness.admission_review import build_review
from webhook.policy import Inventory, Policy

TOKEN = "test-token"
MUTATING = "mutate.gpu-policy.io"
VALIDATING = "validate.gpu-policy.io"

# group-version -> [(plural, kind, namespaced)]
DISCOVERY: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("pods", "Pod", True),
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("podtemplates", "PodTemplate", True),
        ("replicationcontrollers", "ReplicationController", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [
        ("deployments", "Deployment", True),
        ("replicasets", "ReplicaSet", True),
        ("statefulsets", "StatefulSet", True),
        ("daemonsets", "DaemonSet", True),
    ],
    "batch/v1": [("jobs", "Job", True), ("cronjobs", "CronJob", True)],
}


@dataclass(frozen=True)
class Request:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


def _default_pod(obj: dict[str, Any]) -> None:
    """The API server's pod defaulting that matters here: requests default to limits."""
    spec = obj.get("spec") or {}
    for list_name in ("initContainers", "containers"):
        for container in spec.get(list_name) or []:
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            if limits:
                requests = resources.setdefault("requests", {})
                for key, value in limits.items():
                    requests.setdefault(key, value)
                container["resources"] = resources


def _quantity(raw: object) -> Fraction:
    """A quantity as the manifests here write GPU counts: 1, "1", "2", "500m", 0.5."""
    text = str(raw)
    if text.endswith("m"):
        return Fraction(int(text[:-1]), 1000)
    return Fraction(text)


def _extended(name: str) -> bool:
    # v1helper.IsExtendedResourceName: a domain other than kubernetes.io, not requests.*.
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def _resource_errors(path: str, resources: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, error body) for what ValidateResourceRequirements refuses in extended resources.

    The order is the API server's: every limit, then every request (with its limit).
    """
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    errors: list[tuple[str, str]] = []
    for key, amounts in (("limits", limits), ("requests", requests)):
        for name, raw in amounts.items():
            if _extended(name) and _quantity(raw).denominator != 1:
                errors.append(
                    (f"{path}.{key}[{name}]", f'Invalid value: "{raw}": must be an integer')
                )
            if key != "requests" or not _extended(name):
                continue
            if name not in limits:
                errors.append(
                    (
                        f"{path}.limits",
                        "Required value: Limit must be set for non overcommitable resources",
                    )
                )
            elif _quantity(raw) != _quantity(limits[name]):
                errors.append(
                    (
                        f"{path}.requests",
                        f'Invalid value: "{raw}": must be equal to {name} limit of {limits[name]}',
                    )
                )
    return errors


def validation_errors(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The API server's own validation errors for a Pod's extended resources."""
    errors: list[tuple[str, str]] = []
    spec = obj.get("spec") or {}
    for list_name in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(list_name) or []):
            resources = container.get("resources") or {}
            errors += _resource_errors(f"spec.{list_name}[{i}].resources", resources)
    return errors


def invalid(kind: str, name: str, errors: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The 422 Status of ``apierrors.NewInvalid``: one error is the message, several a list."""
    texts = [f"{field}: {body}" for field, body in errors]
    listed = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    body = status(422, "Invalid", f"{kind} {json.dumps(name)} is invalid: {listed}")
    reasons = {"Invalid": "FieldValueInvalid", "Required": "FieldValueRequired"}
    body["details"] = {
        "name": name,
        "kind": kind,
        "causes": [
            {"reason": reasons[b.split(" ", 1)[0]], "message": b, "field": f} for f, b in errors
        ],
    }
    return body


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server adds to an object it would store."""
    meta = obj.setdefault("metadata", {})
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("creationTimestamp", "2025-01-01T00:00:00Z")
    if obj.get("kind") == "Pod":
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        for container in spec.get("containers") or []:
            container.setdefault("imagePullPolicy", "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
        # DefaultTolerationSeconds appends these to every pod.
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return obj


class DryRunApiServer(LoopbackServer):
    """The fake; use as a context manager (``url`` is its base URL)."""

    def __init__(self, policy: Policy, inventory: Inventory, *, mutating: bool = True) -> None:
        """``mutating=False``: our webhook is registered as a validating webhook only."""
        super().__init__()
        self.policy = policy
        self.inventory = inventory
        self.mutating = mutating
        self.requests: list[Request] = []

    def kubeconfig(self, *, namespace: str = "default") -> str:
        """A kubeconfig with a good context (current) and one whose token is wrong."""
        return kubeconfig(
            self.url,
            {"tester": {"token": TOKEN}, "stranger": {"token": "not-the-token"}},
            {"fake": {"user": "tester", "namespace": namespace}, "stranger": {"user": "stranger"}},
        )

    # ------------------------------------------------------------------ admission chain

    def admit(self, obj: dict[str, Any], namespace: str) -> tuple[int, Any, list[str]]:
        """Defaulting, mutating and validating admission: (HTTP status, body, warnings)."""
        warnings: list[str] = []
        if obj.get("kind") == "Pod":
            _default_pod(obj)
            if self.mutating:
                answer = self._webhook("mutate", obj, namespace)
                warnings += answer.get("warnings") or []
                if not answer["allowed"]:
                    return self._denied(MUTATING, answer, obj, warnings)
                if answer.get("patch"):
                    patch = json.loads(base64.b64decode(answer["patch"]))
                    obj = jsonpatch.apply_patch(obj, patch)
            errors = validation_errors(obj)
            if errors:
                return (
                    422,
                    invalid("Pod", (obj.get("metadata") or {}).get("name", ""), errors),
                    warnings,
                )
        answer = self._webhook("validate", obj, namespace)
        warnings += answer.get("warnings") or []
        if not answer["allowed"]:
            return self._denied(VALIDATING, answer, obj, warnings)
        return 201, _stored(copy.deepcopy(obj)), warnings

    def _webhook(self, endpoint: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        review = build_review(obj, operation="CREATE", namespace=namespace, dry_run=True)
        outcome = handle(
            endpoint,  # type: ignore[arg-type]
            review,
            policy=self.policy,
            inventory=self.inventory,
        )
        response: dict[str, Any] = outcome.response["response"]
        return response

    @staticmethod
    def _denied(
        webhook: str, answer: dict[str, Any], obj: dict[str, Any], warnings: list[str]
    ) -> tuple[int, Any, list[str]]:
        result = answer.get("status") or {}
        code = int(result.get("code") or 403)
        message = result.get("message") or "without explanation"
        body = status(
            code,
            "Forbidden" if code == 403 else "BadRequest",
            f'admission webhook "{webhook}" denied the request: {message}',
        )
        body["details"] = {"name": (obj.get("metadata") or {}).get("name", ""), "kind": "pods"}
        return code, body, warnings


class _Handler(JsonHandler):
    fake: DryRunApiServer

    def _send(self, code: int, body: Any, warnings: Sequence[str] = ()) -> None:
        warning_headers = [
            ("Warning", f"299 - {json.dumps(text, ensure_ascii=False)}") for text in warnings
        ]
        self.send_json(code, json.dumps(body).encode(), warning_headers)

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self._send(401, status(401, "Unauthorized", "Unauthorized"))
        return False

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        self.fake.requests.append(Request("GET", parts.path, parse_qs(parts.query), None))
        if not self._authorised():
            return
        gv = parts.path.removeprefix("/api/").removeprefix("/apis/")
        if gv not in DISCOVERY:
            self._send(
                404, status(404, "NotFound", "the server could not find the requested resource")
            )
            return
        self._send(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": gv,
                "resources": [
                    {
                        "name": plural,
                        "singularName": "",
                        "namespaced": ns,
                        "kind": kind,
                        "verbs": ["create", "get", "list"],
                    }
                    for plural, kind, ns in DISCOVERY[gv]
                ]
                + [{"name": "pods/status", "namespaced": True, "kind": "Pod", "verbs": ["get"]}],
            },
        )

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.fake.requests.append(Request("POST", parts.path, query, body))
        if not self._authorised():
            return
        if query.get("dryRun") != ["All"]:
            self._send(400, status(400, "BadRequest", "this test server answers dry runs only"))
            return
        segments = parts.path.strip("/").split("/")
        # api/v1/namespaces/NS/PLURAL or apis/G/V/namespaces/NS/PLURAL
        gv = segments[1] if segments[0] == "api" else "/".join(segments[1:3])
        rest = segments[2:] if segments[0] == "api" else segments[3:]
        if len(rest) != 3 or rest[0] != "namespaces" or gv not in DISCOVERY:
            self._send(
                404, status(404, "NotFound", "the server could not find the requested resource")
            )
            return
        namespace, plural = rest[1], rest[2]
        kinds = {p: k for p, k, _ in DISCOVERY[gv]}
        if not isinstance(body, dict) or body.get("kind") != kinds.get(plural):
            self._send(400, status(400, "BadRequest", f"the body is not a {kinds.get(plural)}"))
            return
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            self._send(
                400,
                status(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                ),
            )
            return
        meta["namespace"] = namespace
        code, answer, warnings = self.fake.admit(body, namespace)
        self._send(code, answer, warnings)


# Defined after the server class, which names its handler here.
DryRunApiServer.handler = _Handler
