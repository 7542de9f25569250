"""``spec.quota`` of the policy: GPU budgets per namespace in GPU-equivalents (docs/quota.md).

```yaml
spec:
  quota:
    enabled: false          # true: the mutating webhook requests gpu-policy.io/gpu-milli
    migShare: compute       # compute (slices of 7, 4 on A30) | memory (GB of the parent's)
    weights:                # GPU-equivalents per unit, by resource name, DeviceClass or profile
      nvidia.com/gpu: 1
      1g.10gb: 0.125
      gpu.nvidia.com: 1
```

The resource name, the thousandths per GPU-equivalent and what nodes advertise are fixed in
``webhook.contract`` (``QUOTA_RESOURCE``): a ResourceQuota names them, so they are not a choice
each policy makes differently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from webhook.policy import schema
from webhook.policy.errors import Diagnostics

MigShare = Literal["compute", "memory"]

#: The structure of ``spec.quota`` (webhook.policy.schema): checked when the policy is read, and
#: part of the chart's values.schema.json.
QUOTA_SCHEMA = schema.mapping(
    {
        "enabled": schema.boolean(
            "true: the mutating webhook requests gpu-policy.io/gpu-milli for every GPU pod.",
            null=False,
        ),
        "migShare": schema.choice(
            MigShare, "A MIG instance's share of its GPU: compute (slices) or memory."
        ),
        "weights": schema.open_mapping(
            "GPU-equivalents per unit, by resource name, DeviceClass or MIG profile (1, 0.5, 3/7).",
            schema.one_of_types(("number", "string"), null=False),
        ),
    },
    "GPU budgets per namespace in GPU-equivalents (docs/quota.md).",
)


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    """What the policy says about GPU budgets (``spec.quota``).

    ``weights`` maps a resource name (``nvidia.com/gpu.shared``), a DeviceClass name or a MIG
    profile (``3g.20gb``) to GPU-equivalents per unit, in place of the computed weight.
    """

    enabled: bool = False
    mig_share: MigShare = "compute"
    weights: Mapping[str, Fraction] = field(default_factory=dict)
    # Not in the policy file: the namespaces' budgets as the cluster holds them (namespace ->
    # (ResourceQuota name, thousandths)), filled in by the server from the ResourceQuotas it
    # reads, so that the warning names the budget (docs/quota.md).
    budgets: Mapping[str, tuple[str, int]] = field(default_factory=dict)


def _weight(value: object, diags: Diagnostics, where: str) -> Fraction | None:
    """A weight: a non-negative number, or a fraction written ``3/7`` (None: noted as wrong)."""
    try:
        weight = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        diags.error(where, f"must be a number of GPU-equivalents (1, 0.5, 3/7), not {value!r}")
        return None
    if weight < 0:
        diags.error(where, "must not be negative")
        return None
    return weight


def parse_quota(
    spec: Mapping[str, Any], source: str, diags: Diagnostics | None = None
) -> QuotaPolicy:
    """``spec.quota`` as a QuotaPolicy.

    With ``diags`` (the policy's reading, whose structure :data:`QUOTA_SCHEMA` already checked
    as part of the spec) problems join it; alone, every problem of the section is raised as
    one PolicyError naming the fields and the reasons.
    """
    alone = diags is None
    found = Diagnostics(source) if diags is None else diags
    body = spec.get("quota")
    if alone:
        body = schema.check(body, QUOTA_SCHEMA, found, "spec.quota")
    if not isinstance(body, Mapping):
        if alone:
            found.check()
        return QuotaPolicy()
    weights = {}
    for k, v in (body.get("weights") or {}).items():
        weight = _weight(v, found, f"spec.quota.weights.{k}")
        if weight is not None:
            weights[str(k).removeprefix("mig-")] = weight
    if alone:
        found.check()
    return QuotaPolicy(
        enabled=bool(body.get("enabled", False)),
        mig_share=body.get("migShare", "compute"),
        weights=weights,
    )
