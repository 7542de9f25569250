"""Dry-run creates through the API server: the cluster's whole admission chain answers.

``DryRunCreator(api_client)(obj, namespace)`` POSTs the object to its collection with
``dryRun=All`` (exactly what ``kubectl create --dry-run=server`` does): authentication,
every mutating and validating webhook, the built-in admission plugins and validation run,
and nothing is stored. The answer carries whether the object was accepted, the refusal's
Status message (``admission webhook "..." denied the request: ...``), the texts of the
``Warning`` response headers, and the object as it would have been stored.

The resource path comes from API discovery (``/api/v1``, ``/apis/GROUP/VERSION``), cached
per group-version, so custom resources work as well as built-in kinds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client, config

from webhook.kube.raw import read_json, request

__all__ = [
    "DiscoveryError",
    "DryRunCreator",
    "DryRunResult",
    "connect",
    "dry_run_create",
    "parse_warnings",
]

# RFC 7234 warn-value: 299 - "text" [date]. The API server quotes the text like Go's
# strconv.Quote, and may put several warnings in one header separated by commas.
_WARNING = re.compile(r'(\d{3})\s+(\S+)\s+"((?:[^"\\]|\\.)*)"(?:\s+"[^"]*")?')
_ESCAPE = re.compile(r'\\(["\\abfnrtv]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})')
_SIMPLE_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
# Refusals that come from admission or validation (the object's verdict); anything else
# (401, 404, 409, 5xx...) means the cluster could not judge the object at all.
_VERDICT_CODES = frozenset({400, 403, 422})


class DiscoveryError(Exception):
    """The cluster cannot judge the object (discovery failed, credentials refused)."""


@dataclass(frozen=True)
class DryRunResult:
    """What the API server answered to one dry-run create."""

    allowed: bool
    code: int
    message: str = ""
    reason: str = ""
    warnings: tuple[str, ...] = ()
    object: Mapping[str, Any] | None = None
    error: str | None = None


def _unescape(match: re.Match[str]) -> str:
    esc = match.group(1)
    if esc in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[esc]
    return chr(int(esc[1:], 16))


def parse_warnings(values: Iterable[str]) -> list[str]:
    """The texts of ``Warning`` header values (each may hold several warnings)."""
    out = []
    for value in values:
        for match in _WARNING.finditer(value):
            out.append(_ESCAPE.sub(_unescape, match.group(3)))
    return out


def connect(kubeconfig: str, context: str | None = None) -> client.ApiClient:
    """An ``ApiClient`` for ``context`` (default: the current one) of ``kubeconfig``.

    The file is never written back (``persist_config=False``). Raises ``ValueError`` with one
    line when the file or the context cannot be used.
    """
    path = os.path.expanduser(kubeconfig)
    if not os.path.isfile(path):
        raise ValueError(f"kubeconfig not found: {path}")
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except config.ConfigException as exc:
        raise ValueError(f"kubeconfig {path}: {exc}") from None
    api = client.ApiClient(configuration)
    api.user_agent = "gpu-policy-test"
    return api


class DryRunCreator:
    """Dry-run creates through one ``ApiClient``, with discovery cached."""

    def __init__(self, api_client: client.ApiClient, *, timeout: float = 10.0) -> None:
        """Use ``api_client`` (see :func:`connect`); ``timeout`` is per request, in seconds."""
        if not hasattr(api_client, "param_serialize"):
            raise ValueError(
                "the kubernetes client is too old for dry-run creates: upgrade the "
                "kubernetes package (ApiClient.param_serialize is missing)"
            )
        self.api = api_client
        self.timeout = timeout
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    def __call__(self, obj: Mapping[str, Any], namespace: str | None = None) -> DryRunResult:
        """Create ``obj`` with dryRun=All; see :func:`dry_run_create`."""
        return self.create(obj, namespace)

    def close(self) -> None:
        """Close the client's connection pool."""
        self.api.close()  # type: ignore[no-untyped-call]

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, Any]:
        # Every answer is returned (check=False): a refusal is the verdict, not an error.
        query = [("dryRun", "All")] if method == "POST" else []
        response = request(
            self.api, method, path, query=query, body=body, timeout=self.timeout, check=False
        )
        try:
            data = read_json(response)
        except ValueError:  # orjson.JSONDecodeError: a proxy's HTML or plain text
            data = response.data.decode("utf-8", "replace")
        return int(response.status), data, response.headers

    def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        """kind -> (plural, namespaced) for one group-version."""
        if api_version not in self._resources:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            status, data, _ = self._request("GET", path)
            if status != 200 or not isinstance(data, Mapping):
                said = data.get("message") if isinstance(data, Mapping) else None
                hint = " (check the kubeconfig's credentials)" if status in (401, 403) else ""
                raise DiscoveryError(
                    f"GET {path} (API discovery) answered HTTP {status}"
                    + (f": {said}" if said else "")
                    + hint
                )
            found: dict[str, tuple[str, bool]] = {}
            for res in data.get("resources") or []:
                name = res.get("name", "")
                if "/" not in name and res.get("kind") and res["kind"] not in found:
                    found[res["kind"]] = (name, bool(res.get("namespaced")))
            self._resources[api_version] = found
        return self._resources[api_version]

    def create(self, obj: Mapping[str, Any], namespace: str | None = None) -> DryRunResult:
        """POST ``obj`` to its collection with ``dryRun=All``; never raises for an answer."""
        api_version = str(obj.get("apiVersion") or "")
        kind = str(obj.get("kind") or "")
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        try:
            resources = self._discover(api_version)
            if kind not in resources:
                return DryRunResult(
                    False, 0, error=f"the cluster serves no {kind} in {api_version}"
                )
            plural, namespaced = resources[kind]
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            if namespaced:
                ns = namespace or meta.get("namespace") or "default"
                path = f"{base}/namespaces/{quote(str(ns), safe='')}/{plural}"
            else:
                path = f"{base}/{plural}"
            status, data, headers = self._request("POST", path, dict(obj))
        except DiscoveryError as exc:
            return DryRunResult(False, 0, error=str(exc))
        except Exception as exc:  # urllib3/ssl/auth plugin errors: report, do not crash
            return DryRunResult(False, 0, error=f"{type(exc).__name__}: {exc}")
        warning_values = (
            headers.getlist("Warning")
            if hasattr(headers, "getlist")
            else [headers.get("Warning", "")]
        )
        warnings = tuple(parse_warnings(v for v in warning_values if v))
        if 200 <= status < 300:
            return DryRunResult(
                True,
                status,
                warnings=warnings,
                object=data if isinstance(data, Mapping) else None,
            )
        message = reason = ""
        if isinstance(data, Mapping):
            message = str(data.get("message") or "")
            reason = str(data.get("reason") or "")
        elif isinstance(data, str):
            message = data.strip()
        if status not in _VERDICT_CODES:
            return DryRunResult(
                False,
                status,
                message=message,
                reason=reason,
                warnings=warnings,
                error=f"HTTP {status} {reason}: {message}".strip(),
            )
        return DryRunResult(False, status, message=message, reason=reason, warnings=warnings)


def dry_run_create(
    api_client: client.ApiClient, obj: Mapping[str, Any], namespace: str | None = None
) -> DryRunResult:
    """Create ``obj`` through ``api_client`` with ``dryRun=All`` and return the answer."""
    return DryRunCreator(api_client).create(obj, namespace)
