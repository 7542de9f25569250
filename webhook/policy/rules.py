"""The rules: each declared once, with its stable id, what it judges and when.

A review reports one result per rule in force, in the order of :data:`DECLARATIONS` (the
report order users read). What a rule applies to (:data:`Aspect`) decides on which subjects
it is in force: a ResourceClaim has no containers, a pod without claims has no claim rules,
GPU isolation's rules are in force only while ``spec.isolation`` is on. Its phase decides
when it is judged: the placement rules follow the checks, and are skipped ("fix the errors
above first") when the review stops after a failed check. ``webhook/policy/engine/results.py``
turns a review's findings into the results from these declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

# What a rule judges:
# - "containers": the device-plugin GPU requests of a pod's or pod template's containers, its
#   GPU annotations and node selection, and where those requests can run;
# - "claims": what DRA claims ask for (a ResourceClaim, a ResourceClaimTemplate, the claims
#   a pod names);
# - "claim-refs": how a pod refers to its claims (only pods have references);
# - "isolation": the containers that ask for no GPU (docs/isolation.md).
Aspect = Literal["containers", "claims", "claim-refs", "isolation"]
ASPECTS: Final[tuple[Aspect, ...]] = ("containers", "claims", "claim-refs", "isolation")
# When a rule is judged: the checks first, then (only once they pass) where the pod can run.
Phase = Literal["checks", "placement"]
PHASES: Final[tuple[Phase, ...]] = ("checks", "placement")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: its stable id and summary, what it judges and when, how it may end.

    ``warns_only``: it never fails, under every enforcement mode. ``api_server_validated``:
    the API server's own validation also refuses its breach, with a terse message of its own,
    after the mutating webhooks and before the validating ones, so the mutating endpoint
    denies it to have users read ours (docs/device-plugin.md, "The API server").
    """

    id: str
    summary: str
    applies_to: Aspect
    phase: Phase = "checks"
    warns_only: bool = False
    api_server_validated: bool = False


# Stable rule ids: users match on them in suites, alerts and audit logs. Never rename one.
DECLARATIONS: Final[tuple[Rule, ...]] = (
    Rule(
        "gpu-ephemeral-container",
        "ephemeral containers ask for no GPU",
        "containers",
        api_server_validated=True,
    ),
    Rule(
        "gpu-resource-name",
        "GPU resource names are ones the device plugin advertises",
        "containers",
    ),
    Rule(
        "gpu-quantity",
        "GPU quantities are whole, positive numbers",
        "containers",
        api_server_validated=True,
    ),
    Rule(
        "gpu-requests-equal-limits",
        "GPU requests equal GPU limits",
        "containers",
        api_server_validated=True,
    ),
    Rule("gpu-container-forms", "one kind of GPU per container", "containers"),
    Rule("gpu-intent", "the pod's GPU annotations are well formed", "containers"),
    Rule(
        "gpu-node-selection",
        "node selection agrees with the GPU request",
        "containers",
        phase="placement",
    ),
    Rule(
        "gpu-shared-request-above-one",
        "at most one shared GPU per container",
        "containers",
        phase="placement",
    ),
    Rule(
        "gpu-resource-offered",
        "some node offers what the pod asks for",
        "containers",
        phase="placement",
    ),
    # DRA claims: ResourceClaims, ResourceClaimTemplates and the claims a pod refers to
    # (docs/dra-claims.md).
    Rule(
        "gpu-claim-admin-access",
        "adminAccess only in the namespaces the policy allows",
        "claims",
    ),
    Rule("gpu-claim-device-class", "claims name a DeviceClass the cluster has", "claims"),
    Rule(
        "gpu-claim-shared-request-above-one",
        "a request that shares its device asks for one",
        "claims",
    ),
    Rule(
        "gpu-claim-mig-profile",
        "a MIG profile a claim asks for is one a ResourceSlice offers",
        "claims",
    ),
    Rule(
        "gpu-claim-devices-available",
        "some node has the devices every claim request asks for",
        "claims",
    ),
    Rule(
        "gpu-claim-exists",
        "the ResourceClaims and ResourceClaimTemplates a pod names exist (a warning: "
        "Kubernetes lets them be created later)",
        "claim-refs",
        warns_only=True,
    ),
    Rule(
        "gpu-claim-dual-published",
        "a pod with GPU claims stays off nodes that publish the same GPUs through the device "
        "plugin and DRA (spec.dra.dualPublishedNodes; docs/migrate.md)",
        "claim-refs",
    ),
    # A pod only pools at zero can serve is exactly the pod that must be admitted for the
    # autoscaler to add the node: a warning under every mode.
    Rule(
        "gpu-pool-at-zero",
        "what the pod asks for is offered only by pools with no node yet, that an "
        "autoscaler can grow (a warning: the pod waits for its node)",
        "containers",
        phase="placement",
        warns_only=True,
    ),
    # GPU isolation (docs/isolation.md): the containers that ask for no GPU.
    Rule(
        "gpu-isolation",
        "containers that ask for no GPU see none (NVIDIA_VISIBLE_DEVICES=void)",
        "isolation",
        warns_only=True,
    ),
    Rule(
        "gpu-visible-devices",
        "containers that ask for no GPU do not name GPUs in NVIDIA_VISIBLE_DEVICES",
        "isolation",
    ),
    Rule(
        "gpu-privileged-without-gpu",
        "no privileged container without a GPU request on GPU nodes",
        "isolation",
        warns_only=True,
    ),
)

#: Each rule's id and summary, in report order (the ids suites, metrics and the audit know).
RULES: Final[dict[str, str]] = {rule.id: rule.summary for rule in DECLARATIONS}
#: The rules that never fail: they warn under every enforcement mode.
WARNING_RULES: Final[frozenset[str]] = frozenset(r.id for r in DECLARATIONS if r.warns_only)
#: The rules whose breach the API server's own validation also refuses.
API_SERVER_VALIDATED_RULES: Final[frozenset[str]] = frozenset(
    r.id for r in DECLARATIONS if r.api_server_validated
)
