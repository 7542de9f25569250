"""``review()``: the object read once into its subject, judged by the reviewer of its kind.

``subjects.py`` reads the object (its kind, scope and claims), ``reviewers.py`` has one
reviewer per kind of subject, ``results.py`` turns the findings into the Decision under the
policy's enforcement mode, and ``quota/charge.py`` adds the pod's cost under
``spec.quota.enabled``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.policy.decision import Decision
from webhook.policy.engine.results import skipped_decision
from webhook.policy.engine.reviewers import review_claim, review_pod, review_template
from webhook.policy.engine.subjects import (
    ClaimSubject,
    PodSubject,
    Skipped,
    TemplateSubject,
    read_subject,
)
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.quota.charge import charge


def review(
    obj: Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    operation: str = "CREATE",
    namespace: str | None = None,
) -> Decision:
    """Judge one object against the policy and the inventory, and mutate a copy of it.

    ``operation`` is the admission operation (CREATE, UPDATE, ...). Pods are mutated on CREATE
    only (their resources are immutable afterwards); pod templates are validated on CREATE and
    UPDATE as the pods they will create, after the mutation those pods will get. Under
    ``spec.quota.enabled`` an admitted GPU pod also requests its cost (docs/quota.md).
    """
    subject = read_subject(
        obj, operation=operation, namespace=namespace, policy=policy, inventory=inventory
    )
    if isinstance(subject, Skipped):
        decision = skipped_decision(subject, subject.why, policy.enforcement)
    elif isinstance(subject, TemplateSubject):
        decision = review_template(subject, policy=policy, inventory=inventory)
    elif isinstance(subject, PodSubject):
        decision = review_pod(subject, policy=policy, inventory=inventory)
    else:
        assert isinstance(subject, ClaimSubject)
        decision = review_claim(subject, policy=policy, inventory=inventory)
    return charge(decision, obj, policy=policy, inventory=inventory, operation=operation)
