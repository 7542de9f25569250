"""What a review judges, read once from the object: a pod, a pod template or a claim.

:func:`read_subject` reads the object's kind, name and namespace, decides its scope (every
skip rule of ``scope.py``, isolation's reach) and, for a pod spec, finds its GPU containers
and resolves the claims it names against the inventory's DRA objects. What it returns is one
of four types, each with its reviewer (``webhook/policy/engine/reviewers.py``):

* :class:`PodSubject`: a Pod, mutated on CREATE;
* :class:`TemplateSubject`: the pod template of a Deployment, Job, ... judged as the pods it
  will create, never patched (what would change in them is a warning);
* :class:`ClaimSubject`: a ResourceClaim or ResourceClaimTemplate, judged by the claim rules;
* :class:`Skipped`: anything out of scope, allowed untouched with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.policy.claims import CLAIM_SPEC_PATHS, ClaimAsk, claim_spec, read_claim
from webhook.policy.decision import RuleResult
from webhook.policy.engine.checks import Found, gpu_containers
from webhook.policy.engine.claims import gpu_requests
from webhook.policy.engine.fit import pod_claims, served_by_dra
from webhook.policy.engine.isolation import reach
from webhook.policy.engine.scope import operation_skip, skip_reason
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.records import per_review_record
from webhook.policy.workloads import Workload, locate

# Where a pod that asks for a GPU can run, in the isolation rules' words.
_GPU_POD = "the GPU node it asks for"


@per_review_record
class Subject:
    """The object under review: as sent, its kind, namespace (the request's, else its own)
    and name (else its generateName)."""

    obj: Mapping[str, Any]
    kind: str
    namespace: str | None
    name: str | None

    @property
    def what(self) -> str:
        """How messages name it: ``Pod web-0``, ``Deployment web``, ``object``."""
        return f"{self.kind or 'object'} {self.name or ''}".strip()


@per_review_record
class Skipped(Subject):
    """An object the policy does not judge, and why (the review's ``gpu-policy`` skip)."""

    why: str


@per_review_record
class PodSubject(Subject):
    """A Pod in scope: its pod spec, the containers that ask for device-plugin GPUs, the GPU
    claims it names that the inventory knows (and a ``gpu-claim-exists`` warning for each
    one it does not), whether its GPUs come only from DRA, and the GPU node it can reach."""

    workload: Workload
    found: list[Found]
    claims: tuple[ClaimAsk, ...]
    missing: tuple[RuleResult, ...]
    dra_only: bool
    where: str

    @property
    def asks_for_gpu(self) -> bool:
        """True when it asks for a GPU at all (else it is judged by GPU isolation alone)."""
        return bool(self.found) or self.dra_only


@per_review_record
class TemplateSubject(PodSubject):
    """The pod template of a workload (Deployment, Job, CronJob, PodTemplate, ...) in scope."""


@per_review_record
class ClaimSubject(Subject):
    """A ResourceClaim or ResourceClaimTemplate in scope: its ResourceClaimSpec, read."""

    spec: Mapping[str, Any]
    claim: ClaimAsk


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def read_subject(
    obj: Mapping[str, Any],
    *,
    operation: str,
    namespace: str | None,
    policy: Policy,
    inventory: Inventory,
) -> Subject:
    """The typed subject of ``obj`` for a review of ``operation``: a :class:`Skipped` when it
    is out of scope, else a :class:`PodSubject`, :class:`TemplateSubject` or
    :class:`ClaimSubject`. ``namespace`` is the request's (else the object's own)."""
    raw_kind = obj.get("kind")
    kind = raw_kind if isinstance(raw_kind, str) else ""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = _str_or_none(metadata.get("name")) or _str_or_none(metadata.get("generateName"))
    namespace = namespace or _str_or_none(metadata.get("namespace"))
    if kind in CLAIM_SPEC_PATHS:
        spec = claim_spec(obj)
        if spec is not None:
            head = Subject(obj, kind, namespace, name)
            return _claim_subject(head, spec, operation, policy=policy, inventory=inventory)
    workload = locate(obj)
    if workload is None:
        return Skipped(obj, kind, namespace, name, f"{kind or 'this object'} has no pod spec")
    found = gpu_containers(workload.spec)
    claims, missing = pod_claims(workload, namespace, policy, inventory)
    # Extended resources a GPU DeviceClass serves (deviceclass.resource.kubernetes.io/*, or a
    # class's extendedResourceName), asked for under a name the device plugin does not use.
    dra_only = bool(claims or missing) or (not found and served_by_dra(workload, policy, inventory))
    why = skip_reason(
        kind,
        operation,
        namespace,
        asks_for_gpu=bool(found or dra_only) or policy.isolation.on,
        exempt=policy.exempt_namespaces,
    )
    where = _GPU_POD
    if why is None and not found and not dra_only:
        # It asks for no GPU: GPU isolation judges it if it can reach a GPU node.
        why, where = reach(workload, namespace, policy, inventory)
    if why is not None:
        return Skipped(obj, kind, namespace, name, why)
    subject = PodSubject if kind == "Pod" else TemplateSubject
    return subject(obj, kind, namespace, name, workload, found, claims, missing, dra_only, where)


def _claim_subject(
    head: Subject,
    spec: Mapping[str, Any],
    operation: str,
    *,
    policy: Policy,
    inventory: Inventory,
) -> Subject:
    """A ResourceClaim's or template's subject (``head``: its kind, namespace and name), or
    why it is not judged."""
    obj, kind, namespace, name = head.obj, head.kind, head.namespace, head.name
    claim = read_claim(spec, f"{kind} {name or ''}".strip())
    suffixes = ", ".join(policy.dra.device_class_suffixes)
    why = operation_skip(kind, operation)
    if why is None and not gpu_requests(claim, policy.dra):
        why = f"asks for no GPU DeviceClass (spec.dra.deviceClassSuffixes: {suffixes})"
    elif why is None and namespace in policy.exempt_namespaces:
        why = f"namespace {namespace} is exempt"
    elif why is None and inventory.dra is None:
        why = f"the inventory ({inventory.source}) has no DRA objects: claims are not judged"
    if why is not None:
        return Skipped(obj, kind, namespace, name, why)
    return ClaimSubject(obj, kind, namespace, name, spec, claim)
