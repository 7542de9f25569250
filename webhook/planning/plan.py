"""What ``gpu-policy plan`` decides, as values: per offer, per pool and for the cluster, with the
warnings a reviewer of the rollout reads. :func:`webhook.planning.sizing.make_plan` makes them."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from webhook.planning.measurements import Measurement
from webhook.policy.inventory import Offer, Pool


@dataclass(frozen=True, slots=True)
class PlanWarning:
    """Something a reviewer of the rollout wants to read: ``code`` is stable, for tests."""

    code: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message} [{self.code}]"


@dataclass(frozen=True, slots=True)
class OfferPlan:
    """One resource of one pool, before and after."""

    offer: Offer
    measured: Measurement | None
    replicas_after: int

    @property
    def sized(self) -> bool:
        """True when a memory label and a measurement sized this resource."""
        return self.measured is not None and self.offer.memory_mib is not None

    @property
    def devices(self) -> int:
        """Physical devices (GPUs or MIG instances) behind the resource."""
        offer = self.offer
        if offer.devices is not None:
            return offer.devices
        return max(1, (offer.slots or 0) // max(offer.replicas, 1))

    @property
    def slots_before(self) -> int:
        """Slots advertised today."""
        return self.offer.slots if self.offer.slots is not None else self.devices

    @property
    def slots_after(self) -> int:
        """Slots advertised after the rollout."""
        return self.devices * self.replicas_after

    @property
    def memory_per_slot(self) -> int | None:
        """MiB per slot after the rollout (the GPU's memory / replicas, rounded down)."""
        mem = self.offer.memory_mib
        return None if mem is None else mem // self.replicas_after

    @property
    def headroom_per_slot(self) -> int | None:
        """MiB each slot keeps beyond one measured process (1137 MiB on the L20 above)."""
        per_slot = self.memory_per_slot
        if per_slot is None or self.measured is None:
            return None
        return per_slot - self.measured.memory_mib

    @property
    def use_at_full_slots(self) -> float | None:
        """Memory use when every slot runs one measured process (80.2 % on the L20 above)."""
        mem = self.offer.memory_mib
        if mem is None or self.measured is None:
            return None
        return self.replicas_after * self.measured.memory_mib / mem


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """One pool: the config key it runs now and the one it runs after the rollout."""

    pool: Pool
    model: str | None
    key_after: str | None
    offers: tuple[OfferPlan, ...]
    rename_by_default: bool
    config_text: str | None  # the text of key_after when the plan writes it, else None

    @property
    def changed(self) -> bool:
        """True when the pool advertises something else after the rollout."""
        return any(o.replicas_after != o.offer.replicas for o in self.offers) or (
            self.key_after != self.pool.config_key
        )


@dataclass(frozen=True)
class Plan:
    """Replicas per pool and resource, the config keys to write and what to warn about."""

    headroom: Fraction
    pools: tuple[PoolPlan, ...]
    default_config: str | None
    warnings: tuple[PlanWarning, ...]

    @property
    def configs(self) -> dict[str, str]:
        """Config keys the plan writes (new or rewritten), key -> config file text."""
        out: dict[str, str] = {}
        for pool in self.pools:
            if pool.key_after is not None and pool.config_text is not None:
                out.setdefault(pool.key_after, pool.config_text)
        return out

    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        """(node, config key) for every node of a pool on an explicit (non-default) key."""
        out = []
        for pool in self.pools:
            key = pool.key_after
            if key is None or key == self.default_config:
                continue
            out += [(node, key) for node in pool.pool.nodes]
        return tuple(sorted(out))

    def slots(self) -> tuple[int, int]:
        """Slots in the cluster (before, after)."""
        offers = [o for p in self.pools for o in p.offers]
        return sum(o.slots_before for o in offers), sum(o.slots_after for o in offers)
