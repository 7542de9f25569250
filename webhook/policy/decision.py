"""What a review returns: the verdict, one result per rule, warnings and the mutation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.policy.records import per_review_record

Status = Literal["pass", "fail", "warn", "skip", "error"]

# Stable rule ids: users match on them in suites, alerts and audit logs. Never rename one.
RULES: dict[str, str] = {
    "gpu-ephemeral-container": "ephemeral containers ask for no GPU",
    "gpu-resource-name": "GPU resource names are ones the device plugin advertises",
    "gpu-quantity": "GPU quantities are whole, positive numbers",
    "gpu-requests-equal-limits": "GPU requests equal GPU limits",
    "gpu-container-forms": "one kind of GPU per container",
    "gpu-intent": "the pod's GPU annotations are well formed",
    "gpu-node-selection": "node selection agrees with the GPU request",
    "gpu-shared-request-above-one": "at most one shared GPU per container",
    "gpu-resource-offered": "some node offers what the pod asks for",
    # DRA claims: ResourceClaims, ResourceClaimTemplates and the claims a pod refers to
    # (docs/dra-claims.md).
    "gpu-claim-admin-access": "adminAccess only in the namespaces the policy allows",
    "gpu-claim-device-class": "claims name a DeviceClass the cluster has",
    "gpu-claim-shared-request-above-one": "a request that shares its device asks for one",
    "gpu-claim-mig-profile": "a MIG profile a claim asks for is one a ResourceSlice offers",
    "gpu-claim-devices-available": "some node has the devices every claim request asks for",
    "gpu-claim-exists": (
        "the ResourceClaims and ResourceClaimTemplates a pod names exist (a warning: "
        "Kubernetes lets them be created later)"
    ),
    "gpu-pool-at-zero": (
        "what the pod asks for is offered only by pools with no node yet, that an "
        "autoscaler can grow (a warning: the pod waits for its node)"
    ),
    # GPU isolation (docs/isolation.md): the containers that ask for no GPU.
    "gpu-isolation": "containers that ask for no GPU see none (NVIDIA_VISIBLE_DEVICES=void)",
    "gpu-visible-devices": "containers that ask for no GPU do not name GPUs in "
    "NVIDIA_VISIBLE_DEVICES",
    "gpu-privileged-without-gpu": "no privileged container without a GPU request on GPU nodes",
}

# The rules of a pod's own resources, and those of claims: a review reports the rules of what
# it judged (a ResourceClaim has no containers; a pod without claims no claim rules).
CLAIM_RULES: tuple[str, ...] = tuple(r for r in RULES if r.startswith("gpu-claim-"))
POD_RULES: tuple[str, ...] = tuple(r for r in RULES if r not in CLAIM_RULES)
# The rules that never fail: they warn under every enforcement mode (a pod a pool at zero can
# serve is exactly the pod that must be admitted for the autoscaler to add the node; the
# isolation warnings of docs/isolation.md).
WARNING_RULES: frozenset[str] = frozenset(
    {"gpu-pool-at-zero", "gpu-claim-exists", "gpu-isolation", "gpu-privileged-without-gpu"}
)

# The rules whose breach the API server's own validation also refuses, after the mutating
# webhooks and before the validating ones, with a terse message of its own ("must be an
# integer", "must be equal to ...", "cannot be set for an Ephemeral Container"): the mutating
# endpoint denies these so that users read ours (docs/device-plugin.md, "The API server").
API_SERVER_VALIDATED_RULES: frozenset[str] = frozenset(
    {"gpu-ephemeral-container", "gpu-quantity", "gpu-requests-equal-limits"}
)


@dataclass(frozen=True, slots=True)
class RuleResult:
    """One rule's verdict on one object (or one container of it)."""

    rule: str
    status: Status
    message: str = ""
    container: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form used by the CLI, the harness and audit annotations."""
        out: dict[str, Any] = {"rule": self.rule, "status": self.status, "message": self.message}
        if self.container is not None:
            out["container"] = self.container
        return out


@per_review_record
class Decision:
    """The outcome of ``review()``; the server, the CLI and the harness all read this."""

    kind: str
    namespace: str | None
    name: str | None
    allowed: bool
    results: tuple[RuleResult, ...]
    warnings: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()
    mutated: Mapping[str, Any] | None = None
    patch: tuple[dict[str, Any], ...] = ()
    enforcement: str = "enforce"

    @property
    def failed(self) -> tuple[str, ...]:
        """Ids of the rules that failed, in order, without repeats."""
        return tuple(dict.fromkeys(r.rule for r in self.results if r.status == "fail"))

    @property
    def denial(self) -> str:
        """The message a denied user reads: every failed rule, one sentence each."""
        return "; ".join(f"[{r.rule}] {r.message}" for r in self.results if r.status == "fail")
