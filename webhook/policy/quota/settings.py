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

from webhook.policy.errors import PolicyError

MigShare = Literal["compute", "memory"]
MIG_SHARES: tuple[MigShare, ...] = ("compute", "memory")
QUOTA_FIELDS = frozenset({"enabled", "migShare", "weights"})


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


def _weight(value: object, source: str, where: str) -> Fraction:
    """A weight: a non-negative number, or a fraction written ``3/7``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PolicyError(source, where, f"must be a number of GPU-equivalents, not {value!r}")
    try:
        weight = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise PolicyError(
            source, where, f"must be a number of GPU-equivalents (1, 0.5, 3/7), not {value!r}"
        ) from None
    if weight < 0:
        raise PolicyError(source, where, "must not be negative")
    return weight


def parse_quota(spec: Mapping[str, Any], source: str) -> QuotaPolicy:
    """``spec.quota`` as a QuotaPolicy; PolicyError names the field and the reason."""
    body = spec.get("quota")
    if body is None:
        return QuotaPolicy()
    if not isinstance(body, Mapping):
        raise PolicyError(source, "spec.quota", "must be a mapping")
    unknown = sorted(set(body) - QUOTA_FIELDS)
    if unknown:
        raise PolicyError(
            source,
            f"spec.quota.{unknown[0]}",
            f"unknown field (known: {', '.join(sorted(QUOTA_FIELDS))})",
        )
    enabled = body.get("enabled", False)
    if not isinstance(enabled, bool):
        raise PolicyError(source, "spec.quota.enabled", f"must be true or false, not {enabled!r}")
    share = body.get("migShare", "compute")
    if share not in MIG_SHARES:
        raise PolicyError(
            source, "spec.quota.migShare", f"{share!r} is not one of {', '.join(MIG_SHARES)}"
        )
    raw = body.get("weights") or {}
    if not isinstance(raw, Mapping):
        raise PolicyError(source, "spec.quota.weights", "must map names to GPU-equivalents")
    weights = {
        str(k).removeprefix("mig-"): _weight(v, source, f"spec.quota.weights.{k}")
        for k, v in raw.items()
    }
    return QuotaPolicy(enabled=enabled, mig_share=share, weights=weights)
