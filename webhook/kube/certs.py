"""The self-managed certificate mode's API calls: one Secret, two webhook configurations.

:class:`KubeCertStore` is the ``CertStore`` of ``webhook.certs.manager`` (it matches that
protocol; this package does not import ``webhook.certs``):

* the Secret: ``get``; ``create`` when it is missing (409 AlreadyExists: another replica made it
  first); ``update`` (PUT) naming the resourceVersion that was read, so a write based on an
  outdated Secret fails with 409 Conflict instead of overwriting another replica's CA;
* the MutatingWebhookConfiguration and the ValidatingWebhookConfiguration, by name: ``get``, and
  a JSON patch that sets ``/webhooks/<i>/clientConfig/caBundle`` of each entry whose caBundle
  differs, each guarded by a ``test`` of that entry's name, so an entry moved by a concurrent
  edit never receives the change meant for another (the patch then fails with 422 and is tried
  again next round).

These are the calls the chart's RBAC grants in this mode, and nothing else (a test records them
against the fake API server and checks them against the rendered rules).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.kube.failures import status_message
from webhook.kube.raw import JSON_PATCH, SECRET, SECRETS, call_json, group_path

__all__ = ["ApiRefused", "KubeCertStore", "SecretObject", "WebhookBundles"]

log = logging.getLogger(__name__)

#: Labels on the Secret the server creates (it is not part of the Helm release).
SECRET_LABELS = {
    "app.kubernetes.io/name": "gpu-policy-webhook",
    "app.kubernetes.io/component": "admission-webhook",
    "app.kubernetes.io/managed-by": "gpu-policy-webhook",
}


class ApiRefused(RuntimeError):
    """The API server answered, and refused: ``status`` is its HTTP status (403: RBAC)."""

    def __init__(self, message: str, status: int | None) -> None:
        """One line for the log, and the status the API server gave."""
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SecretObject:
    """The Secret as read or written: data (decoded), annotations, resourceVersion, labels."""

    data: dict[str, bytes]
    annotations: dict[str, str]
    resource_version: str
    labels: dict[str, str]


@dataclass(frozen=True)
class WebhookBundles:
    """The caBundle of every webhook entry found (None: a configuration not read)."""

    bundles: tuple[bytes | None, ...]
    problems: tuple[str, ...]


def _message(exc: ApiException) -> str:
    """``403 Forbidden: <the API server's message>``, or the raw body when it has none."""
    said = status_message(exc) or f": {exc.body}"
    return f"{exc.status} {exc.reason}{said}"


def _bundle(hook: Mapping[str, Any]) -> bytes:
    encoded = (hook.get("clientConfig") or {}).get("caBundle") or ""
    try:
        return base64.b64decode(encoded)
    except ValueError:
        return b""


@dataclass(frozen=True)
class _Configuration:
    kind: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def path(self) -> str:
        """The configuration's path (``{name}`` to fill)."""
        return group_path("admissionregistration.k8s.io/v1", self.kind.lower() + "s/{name}")


class KubeCertStore:
    """The Secret and webhook configurations of the self-managed mode, via ``api_client``."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        secret: tuple[str, str],
        mutating: str | None,
        validating: str | None,
        timeout: tuple[float, float] = (5.0, 10.0),
    ) -> None:
        """``secret`` is (namespace, name); ``mutating``/``validating`` name configurations."""
        self.api = api_client
        self.namespace, self.secret_name = secret
        self.timeout = timeout
        self.configurations: list[_Configuration] = []
        if mutating:
            self.configurations.append(_Configuration("MutatingWebhookConfiguration", mutating))
        if validating:
            self.configurations.append(_Configuration("ValidatingWebhookConfiguration", validating))
        self._labels: dict[str, str] = dict(SECRET_LABELS)

    @property
    def label(self) -> str:
        """The Secret, as messages name it."""
        return f"Secret {self.namespace}/{self.secret_name}"

    # -- the Secret --------------------------------------------------------------------------

    def _secret(self, doc: Mapping[str, Any]) -> SecretObject:
        meta = doc.get("metadata") or {}
        data = {k: base64.b64decode(v) for k, v in (doc.get("data") or {}).items()}
        labels = dict(meta.get("labels") or {})
        self._labels = labels
        return SecretObject(
            data=data,
            annotations=dict(meta.get("annotations") or {}),
            resource_version=str(meta.get("resourceVersion") or ""),
            labels=labels,
        )

    def _secret_body(
        self, data: Mapping[str, bytes], annotations: Mapping[str, str], rv: str | None
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.secret_name,
            "namespace": self.namespace,
            "labels": self._labels,
            "annotations": dict(annotations),
        }
        if rv is not None:
            metadata["resourceVersion"] = rv
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            # kubernetes.io/tls: tls.crt and tls.key are always there, and tools that
            # understand TLS Secrets (kubectl describe, the ServiceMonitor's ca.crt) work.
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in sorted(data.items())},
        }

    def _secret_call(
        self,
        what: str,
        method: str,
        body: dict[str, Any] | None = None,
        *,
        absent: tuple[int, ...],
    ) -> SecretObject | None:
        """One Secret request; None for the statuses in ``absent``, RuntimeError for others."""
        # create POSTs to the namespace's Secrets; the others name the Secret.
        path = SECRETS if method == "POST" else SECRET
        params = {"namespace": self.namespace, "name": self.secret_name}
        try:
            doc = call_json(self.api, method, path, params=params, body=body, timeout=self.timeout)
        except ApiException as exc:
            if exc.status in absent:
                return None
            raise ApiRefused(f"cannot {what} {self.label}: {_message(exc)}", exc.status) from None
        return self._secret(doc)

    def read_secret(self) -> SecretObject | None:
        """The Secret, or None when it does not exist."""
        return self._secret_call("read", "GET", absent=(404,))

    def create_secret(
        self, data: Mapping[str, bytes], annotations: Mapping[str, str]
    ) -> SecretObject | None:
        """Create the Secret; None when another replica created it first (409)."""
        self._labels = dict(SECRET_LABELS)
        body = self._secret_body(data, annotations, None)
        return self._secret_call("create", "POST", body, absent=(409,))

    def replace_secret(
        self, data: Mapping[str, bytes], annotations: Mapping[str, str], resource_version: str
    ) -> SecretObject | None:
        """Replace the Secret read at ``resource_version``; None if it changed (409) or went."""
        body = self._secret_body(data, annotations, resource_version)
        return self._secret_call("update", "PUT", body, absent=(404, 409))

    # -- the webhook configurations ----------------------------------------------------------

    def _read(self, config: _Configuration) -> dict[str, Any] | None:
        """The configuration; None when it does not exist; raises on other errors."""
        try:
            return call_json(
                self.api, "GET", config.path, params={"name": config.name}, timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ApiRefused(f"cannot read {config.label}: {_message(exc)}", exc.status) from None

    def read_bundles(self) -> WebhookBundles:
        """The caBundle of every webhook entry of both configurations."""
        return self._collect(lambda config, doc: doc)

    def publish(self, bundle: bytes) -> WebhookBundles:
        """Set ``bundle`` as the caBundle of every webhook entry that differs."""
        return self._collect(lambda config, doc: self._patch(config, doc, bundle))

    def _collect(
        self, step: Callable[[_Configuration, dict[str, Any]], dict[str, Any]]
    ) -> WebhookBundles:
        bundles: list[bytes | None] = []
        problems: list[str] = []
        for config in self.configurations:
            try:
                doc = self._read(config)
                if doc is None:
                    # Not there (yet: helm creates it beside the Deployment): nothing calls
                    # the webhook through it, so it neither trusts nor distrusts anything.
                    problems.append(f"{config.label} not found; the CA is published when it is")
                    continue
                doc = step(config, doc)
            except Exception as exc:  # RuntimeError, or the connection failed
                bundles.append(None)
                problems.append(
                    str(exc) if isinstance(exc, RuntimeError) else f"{config.label}: {exc}"
                )
                continue
            bundles += [_bundle(hook) for hook in doc.get("webhooks") or ()]
        return WebhookBundles(tuple(bundles), tuple(problems))

    def _patch(self, config: _Configuration, doc: dict[str, Any], bundle: bytes) -> dict[str, Any]:
        encoded = base64.b64encode(bundle).decode()
        ops: list[dict[str, Any]] = []
        stale: list[str] = []
        for i, hook in enumerate(doc.get("webhooks") or ()):
            if _bundle(hook) == bundle:
                continue
            stale.append(f"{hook.get('name')} ({'empty' if not _bundle(hook) else 'another CA'})")
            # `test` first: the patch applies only if entry i is still the one we read.
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
            ops.append(
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded}
            )
        if not ops:
            return doc
        try:
            done = call_json(
                self.api,
                "PATCH",
                config.path,
                params={"name": config.name},
                body=ops,
                content_type=JSON_PATCH,
                timeout=self.timeout,
            )
        except ApiException as exc:
            raise ApiRefused(
                f"cannot set the caBundle of {config.label}: {_message(exc)}", exc.status
            ) from None
        log.info("set the caBundle of %s for %s", config.label, ", ".join(stale))
        return done
