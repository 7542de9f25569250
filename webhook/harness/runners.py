"""Three ways to get an answer for a case: the engine, a deployed webhook, a cluster.

* :class:`LocalRunner` calls ``review()`` in-process, the function the server calls.
* :class:`ServerRunner` sends AdmissionReviews to a running webhook over HTTPS, as the API
  server does: a Pod on CREATE goes to ``/mutate`` and then, with the patch applied, to
  ``/validate``; everything else goes to ``/validate`` only.
* :class:`KubeRunner` creates the object through an API server with ``dryRun=All``, so the
  cluster's whole admission chain answers and nothing is stored. The create function comes
  from :mod:`webhook.kube.dryrun` (wired in by the CLI: the harness never imports
  ``kubernetes``).
"""

from __future__ import annotations

import copy
import http.client
import json
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import jsonpatch

from webhook.contract import MUTATIONS_ANNOTATION
from webhook.harness.admission_review import (
    Answer,
    ResponseError,
    build_review,
    failed_rules,
    parse_response,
)
from webhook.harness.compare import Observed, refused_by_validation
from webhook.harness.suite import Case, Suite
from webhook.policy import review


class Runner(Protocol):
    """Something that answers a case."""

    mode: str

    def unsupported(self, case: Case) -> str | None:
        """Why this runner cannot run ``case`` (it is then skipped), or None."""

    def run(self, suite: Suite, case: Case) -> Observed:
        """The answer for ``case``."""


def _json_copy(obj: Mapping[str, Any]) -> dict[str, Any]:
    # What goes over the wire is JSON: YAML dates and the like become strings, as kubectl
    # would send them, and the patch then applies to exactly what was sent.
    out: dict[str, Any] = json.loads(json.dumps(obj, default=str))
    return out


class LocalRunner:
    """The policy engine in-process, with the suite's policy and inventory."""

    mode = "local"

    def unsupported(self, case: Case) -> str | None:
        """Every case can be reviewed locally."""
        return None

    def run(self, suite: Suite, case: Case) -> Observed:
        """Review the case's object with ``review()``."""
        if case.refusal is not None:
            # The case's policy cannot be loaded: there is nothing to review it with.
            return Observed(allowed=False, policy_refused=case.refusal)
        try:
            decision = review(
                case.obj,
                policy=suite.policy_for(case),
                inventory=suite.inventory_for(case),
                operation=case.operation,
                namespace=case.namespace,
            )
        except Exception as exc:  # a crash of the engine is this case's result, not ours
            return Observed(allowed=False, error=f"review() raised {type(exc).__name__}: {exc}")
        return Observed(
            allowed=decision.allowed,
            failed=decision.failed,
            warnings=decision.warnings,
            message=decision.denial,
            mutated=decision.mutated,
            results=decision.results,
            changes=decision.changes,
        )


class HarnessConnectionError(Exception):
    """The webhook could not be reached or did not answer with an AdmissionReview."""


class _Connection(http.client.HTTPSConnection):
    """HTTPS to ``host`` with the certificate checked against ``server_name``."""

    def __init__(
        self, host: str, port: int, *, context: ssl.SSLContext, server_name: str, timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._ctx = context
        self._server_name = server_name

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self._server_name)


class WebhookClient:
    """POSTs AdmissionReviews to a webhook over HTTPS, keeping the connection alive."""

    def __init__(
        self,
        url: str,
        *,
        cacert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        server_name: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """``url`` is ``https://HOST:PORT[/prefix]``; ``cacert`` verifies the server
        (default: the system's CAs); ``cert``/``key`` are a client certificate for mutual
        TLS; ``server_name`` is the name to check the certificate for (default: HOST)."""
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"--server {url}: expected https://HOST:PORT (the webhook is HTTPS)")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or 443
        self.prefix = parts.path.rstrip("/")
        self.server_name = server_name or self.host
        self.timeout = timeout
        try:
            self.context = ssl.create_default_context(cafile=cacert)
            if cert:
                self.context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the TLS files: {exc}") from None
        self._conn: _Connection | None = None

    def close(self) -> None:
        """Close the kept-alive connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON to ``path`` and return the decoded JSON answer."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = _Connection(
                    self.host,
                    self.port,
                    context=self.context,
                    server_name=self.server_name,
                    timeout=self.timeout,
                )
            try:
                self._conn.request("POST", self.prefix + path, body=data, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
            except ssl.SSLError as exc:
                self.close()
                raise HarnessConnectionError(f"TLS with {self.url} failed: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                # A kept-alive connection the server closed in between: try once afresh.
                if attempt == 1 and isinstance(
                    exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                ):
                    continue
                raise HarnessConnectionError(f"cannot reach {self.url}{path}: {exc}") from None
            if resp.status != 200:
                text = raw[:300].decode("utf-8", "replace").strip()
                raise HarnessConnectionError(f"POST {path}: HTTP {resp.status}: {text}")
            try:
                return json.loads(raw)
            except ValueError:
                raise HarnessConnectionError(f"POST {path}: the answer is not JSON") from None
        raise HarnessConnectionError(f"cannot reach {self.url}{path}")  # pragma: no cover


class ServerRunner:
    """A deployed webhook answers, as it would answer the API server."""

    mode = "server"

    def __init__(self, client: WebhookClient) -> None:
        """Use ``client`` for every request."""
        self.client = client

    def unsupported(self, case: Case) -> str | None:
        """A case that sets its own injectNodeSelection: the webhook answers with its policy's."""
        return _own_mode(case)

    def _ask(self, path: str, obj: Mapping[str, Any], case: Case) -> Answer:
        review_doc = build_review(obj, operation=case.operation, namespace=case.namespace)
        uid = review_doc["request"]["uid"]
        return parse_response(self.client.post(path, review_doc), uid)

    def run(self, suite: Suite, case: Case) -> Observed:
        """Send the case through /mutate (Pods on CREATE) and /validate."""
        obj = _json_copy(case.obj)
        warnings: list[str] = []
        mutated: dict[str, Any] | None = None
        try:
            if obj.get("kind") == "Pod" and case.operation == "CREATE":
                answer = self._ask("/mutate", obj, case)
                warnings += answer.warnings
                if not answer.allowed:
                    return _denied(answer, warnings, "/mutate")
                if answer.patch:
                    try:
                        mutated = jsonpatch.apply_patch(copy.deepcopy(obj), list(answer.patch))
                    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                        return Observed(
                            allowed=False, error=f"the patch from /mutate does not apply: {exc}"
                        )
            answer = self._ask("/validate", mutated if mutated is not None else obj, case)
        except (HarnessConnectionError, ResponseError) as exc:
            return Observed(allowed=False, error=str(exc))
        warnings += answer.warnings
        if not answer.allowed:
            return _denied(answer, warnings, "/validate")
        return Observed(
            allowed=True,
            warnings=tuple(dict.fromkeys(warnings)),
            mutated=mutated if mutated != obj else None,
            changes=_changes(mutated),
            submitted=obj,
        )


def _own_mode(case: Case) -> str | None:
    """Why a case with its own policy or injectNodeSelection is not asked of a webhook, or None.

    A deployed webhook, or a cluster's, answers with its own policy and its mode: only the
    local engine can review a case under another one.
    """
    if case.policy_path is not None:
        return "names its own policy (local only)"
    if case.inject_node_selection is None:
        return None
    return "sets injectNodeSelection (local only)"


def _denied(answer: Answer, warnings: Sequence[str], path: str) -> Observed:
    message = answer.message or f"denied by {path} without a message"
    return Observed(
        allowed=False,
        failed=failed_rules(answer.message, answer.audit_annotations),
        warnings=tuple(dict.fromkeys(warnings)),
        message=message,
    )


def _changes(obj: Mapping[str, Any] | None) -> tuple[str, ...]:
    if obj is None:
        return ()
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(annotations, Mapping) and isinstance(annotations.get(MUTATIONS_ANNOTATION), str):
        return (annotations[MUTATIONS_ANNOTATION],)
    return ()


class DryRunAnswer(Protocol):
    """What a dry-run create returns (webhook.kube.dryrun.DryRunResult has this shape)."""

    @property
    def allowed(self) -> bool:
        """True when the API server accepted the object."""

    @property
    def code(self) -> int:
        """The HTTP status code."""

    @property
    def message(self) -> str:
        """The Status message of a refusal."""

    @property
    def warnings(self) -> Sequence[str]:
        """The texts of the Warning headers."""

    @property
    def object(self) -> Mapping[str, Any] | None:
        """The object as the API server would have stored it."""

    @property
    def error(self) -> str | None:
        """Set when there is no admission answer (unreachable, unauthorized, no such kind)."""


DryRunCreate = Callable[[Mapping[str, Any], "str | None"], DryRunAnswer]


class KubeRunner:
    """A cluster answers: each object is created with ``dryRun=All``; nothing is stored."""

    mode = "kube"

    def __init__(self, create: DryRunCreate) -> None:
        """``create(obj, namespace)`` performs one dry-run create."""
        self.create = create

    def unsupported(self, case: Case) -> str | None:
        """Only CREATE can be asked of a cluster without touching what it stores."""
        if case.operation != "CREATE":
            return f"{case.operation} cannot be tested with a dry-run create"
        return _own_mode(case)

    def run(self, suite: Suite, case: Case) -> Observed:
        """Create the case's object with dryRun=All and read the cluster's answer."""
        obj = _json_copy(case.obj)
        if case.namespace:
            # The case's namespace is where the object is created; the API server refuses an
            # object whose own namespace says otherwise, so the copy sent says the same.
            obj.setdefault("metadata", {})["namespace"] = case.namespace
        answer = self.create(obj, case.namespace)
        if answer.error is not None:
            return Observed(allowed=False, error=answer.error)
        warnings = tuple(dict.fromkeys(answer.warnings))
        if not answer.allowed:
            return Observed(
                allowed=False,
                failed=failed_rules(answer.message),
                warnings=warnings,
                message=answer.message,
                comparison="contains",
                submitted=obj,
                refused_by_validation=refused_by_validation(answer.code, answer.message),
            )
        returned = dict(answer.object) if answer.object is not None else obj
        return Observed(
            allowed=True,
            warnings=warnings,
            mutated=returned,
            changes=_changes(returned),
            comparison="contains",
            submitted=obj,
        )
