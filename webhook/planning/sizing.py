"""Sizing time-slicing replicas from measured memory per process, and the config keys that follow.

The sizing rule
---------------
Time-slicing does not isolate memory: every replica of a GPU shares its whole memory, so the
number of replicas is how many copies of the measured process fit at once. A *headroom* share
of the GPU's memory is kept back for the CUDA context, fragmentation and growth::

    replicas = floor(memory x (1 - headroom) / measured)

with ``memory`` from the GFD label ``nvidia.com/gpu.memory`` (``nvidia.com/mig-<p>.memory``
for a MIG slice) and ``measured`` the largest per-process use measured for that product.
The example cluster ``examples/clusters/seed003-before`` with the default headroom of 10 % of
the GPU's memory (``examples/plan/seed003`` is the rollout it gives):

- NVIDIA L20: floor(46068 x 0.9 / 4621) = floor(8.97) = 8 replicas, 5758 MiB per slot, 1137
  MiB headroom per slot, 8 x 4621 / 46068 = 80.2 % memory use at full slots;
- Tesla T4: floor(15360 x 0.9 / 4401) = floor(3.14) = 3 replicas, 5120 MiB per slot, 719 MiB
  headroom per slot, 3 x 4401 / 15360 = 86.0 % at full slots.

Headroom taken per process instead, floor(memory / (measured x 1.1)), gives 9 for the L20,
not 8. Any GPU-share headroom in (9.72 %, 14.04 %] gives both 8 and 3; 10 % is the round
figure inside that range.

The device plugin's rule bounds the result: ``replicas >= 2`` to share at all, so a process
that does not fit twice leaves the GPU unshared (1), and one larger than the GPU leaves it
unshared too, with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from webhook.planning.measurements import Measurement
from webhook.planning.plan import OfferPlan, Plan, PlanWarning, PoolPlan
from webhook.planning.plugin_texts import config_text, kept_flags
from webhook.policy.inventory import Inventory, Offer, Pool
from webhook.policy.model import Policy
from webhook.policy.plugin_config import PluginConfig
from webhook.policy.products import (
    base_model,
    mig_instances,
    mig_profiles_for,
    model_key,
    product_mig_profile,
)
from webhook.policy.resources import profile_size

DEFAULT_HEADROOM = Fraction(1, 10)


# --- the rule -----------------------------------------------------------------------------


def fitting_replicas(memory_mib: int, measured_mib: int, headroom: Fraction) -> int:
    """floor(memory x (1 - headroom) / measured), exactly (no float rounding at the edges)."""
    usable = Fraction(memory_mib) * (1 - headroom)
    return int(usable // measured_mib)


def replicas_for(memory_mib: int, measured_mib: int, headroom: Fraction) -> int:
    """The replicas to configure: the fitting count, or 1 (unshared) when it is below 2."""
    n = fitting_replicas(memory_mib, measured_mib, headroom)
    return n if n >= 2 else 1


def profile_memory_estimate(profile: str) -> int:
    """A MIG profile's usable MiB when no node labels it: nominal GB x 1024 x 0.95.

    NVML reports less than the nominal size (1g.5gb: 4864 MiB = 5 x 1024 x 0.95).
    """
    size = profile_size(profile)
    return 0 if size is None else int(size[1] * 1024 * 95 // 100)


def pct(share: Fraction) -> str:
    """A share as messages print it: ``10 %``."""
    value = float(share * 100)
    return f"{value:g} %"


# --- the plan (its values: webhook/planning/plan.py) -------------------------------------


def key_for_model(model: str) -> str:
    """The config key named from a product: ``NVIDIA-L20`` -> ``nvidia-l20``."""
    key = re.sub(r"[^a-z0-9.-]+", "-", model.lower()).strip("-.")
    return key[:63].rstrip("-.") or "gpu"


def pool_model(pool: Pool) -> str | None:
    """The GPU model of a pool, from the first offer that names its product."""
    for offer in pool.offers:
        if offer.product is not None:
            return base_model(offer.product)
    return None


def _measurement_for(
    offer: Offer, model: str, measurements: Sequence[Measurement]
) -> Measurement | None:
    specific: list[Measurement] = []
    general: list[Measurement] = []
    for m in measurements:
        if m.product is None:
            general.append(m)
            continue
        if model_key(m.product) != model_key(model):
            continue
        # GFD's spelling (``MIG-1g.10gb.me``) reads as the offer's (``1g.10gb+me``).
        profile = product_mig_profile(m.product)
        if profile is None:
            general.append(m)
        elif profile == offer.profile:
            specific.append(m)
    chosen = specific or general
    return max(chosen, key=lambda m: m.memory_mib) if chosen else None


def _matches(config: PluginConfig | None, offers: Sequence[OfferPlan], rename: bool) -> bool:
    """True when ``config`` already advertises what ``offers`` plan."""
    for o in offers:
        have = config.replicas(o.offer.form) if config is not None else 1
        if have != o.replicas_after:
            return False
    if any(o.replicas_after >= 2 for o in offers):
        assert config is not None
        return (
            config.strategy == "time-slicing"
            and config.fail_requests_greater_than_one
            and config.rename_by_default == rename
        )
    return True


def _fit_warnings(
    measured: Measurement, offer: Offer, mem: int, headroom: Fraction, subject: str
) -> list[PlanWarning]:
    """What to say about a process of ``measured`` size on ``mem`` MiB devices."""
    need = measured.memory_mib
    warnings = []
    if offer.replicas > 1 and need > mem // offer.replicas:
        warnings.append(
            PlanWarning(
                "process-larger-than-slot",
                subject,
                f"a {measured.describe()} process is larger than today's slot "
                f"({mem} MiB / {offer.replicas} replicas = "
                f"{mem // offer.replicas} MiB): full slots run out of memory",
            )
        )
    if need > mem:
        warnings.append(
            PlanWarning(
                "process-larger-than-slot",
                subject,
                f"a {measured.describe()} process is larger than the whole "
                f"device ({mem} MiB): it does not fit even unshared",
            )
        )
    elif fitting_replicas(mem, need, headroom) < 2:
        warnings.append(
            PlanWarning(
                "sharing-buys-nothing",
                subject,
                f"a {measured.describe()} process does not fit twice in {mem} MiB "
                f"with {pct(headroom)} headroom: not shared (replicas 1)",
            )
        )
    return warnings


def _size_offer(
    offer: Offer,
    model: str,
    subject: str,
    measurements: Sequence[Measurement],
    headroom: Fraction,
) -> tuple[OfferPlan, list[PlanWarning]]:
    """The replicas for one resource of a pool of ``model``, and what to warn about."""
    measured = _measurement_for(offer, model, measurements)
    if measured is None:
        warning = PlanWarning("no-measurement", subject, "no measured process: left as it is")
        return OfferPlan(offer, None, offer.replicas), [warning]
    if offer.memory_mib is None:
        warning = PlanWarning(
            "no-memory",
            subject,
            f"the node labels lack {offer.form.original}.memory: cannot size "
            f"{offer.form.name} from memory, left at {offer.replicas} replica(s)",
        )
        return OfferPlan(offer, measured, offer.replicas), [warning]
    after = replicas_for(offer.memory_mib, measured.memory_mib, headroom)
    warnings = _fit_warnings(measured, offer, offer.memory_mib, headroom, subject)
    return OfferPlan(offer, measured, after), warnings


def _mig_warning(
    model: str,
    o: OfferPlan,
    *,
    headroom: Fraction,
    known_memory: Mapping[str, int],
    subject: str,
) -> PlanWarning | None:
    """A MIG profile that holds the process, where time-slicing is planned instead."""
    if o.measured is None or o.replicas_after < 2:
        return None
    current = o.offer.profile
    current_memory = o.offer.memory_mib
    candidates = []
    for profile in mig_profiles_for(model):
        if profile.endswith("+me"):
            continue
        memory = known_memory.get(profile) or profile_memory_estimate(profile)
        if fitting_replicas(memory, o.measured.memory_mib, headroom) < 1:
            continue
        count = mig_instances(model, profile)
        if current is None and count is not None and count < 2:
            continue  # one instance per GPU isolates nothing from nothing
        if current is not None and (current_memory is None or memory >= current_memory):
            continue
        size = profile_size(profile)
        candidates.append((memory, 99 if size is None else size[0], profile, count))
    if not candidates:
        return None
    memory, _, profile, count = min(candidates)
    per = f"up to {count} per GPU, " if count else ""
    what = (
        f"time-slicing {o.offer.form.original} {o.replicas_after} ways"
        if current is not None
        else f"time-slicing the whole GPU {o.replicas_after} ways"
    )
    return PlanWarning(
        "mig-profile-fits",
        subject,
        f"MIG profile {profile} ({per}about {memory} MiB each) holds a "
        f"{o.measured.memory_mib} MiB process with {pct(headroom)} headroom, with memory "
        f"and fault isolation: consider it instead of {what} (NVIDIA's MIG user guide lists "
        "the profiles of each GPU)",
    )


@dataclass(frozen=True, slots=True)
class _Sized:
    """One pool's offers sized, before its config key is decided."""

    pool: Pool
    model: str | None
    rename: bool
    offers: tuple[OfferPlan, ...]
    warnings: tuple[PlanWarning, ...]
    matched: frozenset[Measurement]


def _size_pool(
    pool: Pool,
    current: PluginConfig | None,
    measurements: Sequence[Measurement],
    *,
    headroom: Fraction,
    rename_by_default: bool | None,
    known_memory: Mapping[tuple[str, str], int],
) -> _Sized:
    model = pool_model(pool)
    rename = (
        rename_by_default
        if rename_by_default is not None
        else bool(current and current.rename_by_default)
    )
    if model is None:
        no_product = tuple(
            PlanWarning(
                "no-product",
                pool.name,
                f"no GFD product label for {offer.form.name}: left as it is",
            )
            for offer in pool.offers
        )
        offers = tuple(OfferPlan(offer, None, offer.replicas) for offer in pool.offers)
        return _Sized(pool, None, rename, offers, no_product, frozenset())
    mem_by_profile = {p: m for (k, p), m in known_memory.items() if k == model_key(model)}
    planned: list[OfferPlan] = []
    warnings: list[PlanWarning] = []
    for offer in pool.offers:
        subject = offer.product.removesuffix("-SHARED") if offer.product else model
        sized, found = _size_offer(offer, model, subject, measurements, headroom)
        planned.append(sized)
        warnings += found
        mig = _mig_warning(
            model, sized, headroom=headroom, known_memory=mem_by_profile, subject=subject
        )
        if mig is not None:
            warnings.append(mig)
    matched = frozenset(o.measured for o in planned if o.measured is not None)
    return _Sized(pool, model, rename, tuple(planned), tuple(warnings), matched)


def _known_mig_memory(inventory: Inventory) -> dict[tuple[str, str], int]:
    """(model key, MIG profile) -> MiB, from the nodes that label their MIG slices' memory."""
    known: dict[tuple[str, str], int] = {}
    for _, offer in inventory.pairs:
        if offer.model_key is not None and offer.profile is not None and offer.memory_mib:
            known.setdefault((offer.model_key, offer.profile), offer.memory_mib)
    return known


def _models_per_key(inventory: Inventory) -> dict[str | None, set[str | None]]:
    used: dict[str | None, set[str | None]] = {}
    for pool in inventory.pools:
        used.setdefault(pool.config_key, set()).add(pool_model(pool))
    return used


def _product_key(
    model: str,
    policy: Policy,
    used: Mapping[str | None, set[str | None]],
    taken: Mapping[str, str],
) -> str:
    """The config key named from ``model``, unless the default or another model has it."""
    key = key_for_model(model)
    clash = (
        key == policy.default_config
        or (key in used and used[key] != {model})
        or taken.get(key, model) != model
    )
    return f"{key}-shared" if clash else key


def make_plan(
    inventory: Inventory,
    policy: Policy,
    measurements: Sequence[Measurement],
    *,
    headroom: Fraction = DEFAULT_HEADROOM,
    rename_by_default: bool | None = None,
    existing: Mapping[str, str] | None = None,
) -> Plan:
    """Size every pool from the measurements and decide the config key each pool runs.

    ``existing`` holds the texts of the current device-plugin config keys: the plan keeps
    their ``flags`` when it writes a pool's new key. ``rename_by_default`` None keeps each
    pool's current setting (false when it has none).

    A pool keeps its key when that key already advertises the plan; it rewrites its key in
    place when the nodes select it explicitly and no other pool shares it; otherwise it moves
    to a key named from its product (``nvidia-l20``), which its nodes are labelled with.
    """
    existing = existing or {}
    used = _models_per_key(inventory)
    known_memory = _known_mig_memory(inventory)
    warnings: list[PlanWarning] = []
    matched: set[Measurement] = set()
    plans: list[PoolPlan] = []
    taken: dict[str, str] = {}  # product-named key -> model that took it
    for pool in inventory.pools:
        current = policy.config_for(pool.config_key)
        sized = _size_pool(
            pool,
            current,
            measurements,
            headroom=headroom,
            rename_by_default=rename_by_default,
            known_memory=known_memory,
        )
        warnings += sized.warnings
        matched |= sized.matched
        key_before = pool.config_key
        if not any(o.sized for o in sized.offers) or _matches(current, sized.offers, sized.rename):
            plans.append(PoolPlan(pool, sized.model, key_before, sized.offers, sized.rename, None))
            continue
        text = config_text(
            [(o.offer.form.original, o.replicas_after) for o in sized.offers],
            flags=kept_flags(existing.get(key_before or ""), pool.mig_strategy),
            rename_by_default=sized.rename,
        )
        reusable = (
            key_before is not None
            and key_before != policy.default_config
            and len(used[key_before]) == 1
        )
        if reusable:
            key = key_before
        else:
            assert sized.model is not None  # sized offers have a product
            key = _product_key(sized.model, policy, used, taken)
            taken[key] = sized.model
        plans.append(PoolPlan(pool, sized.model, key, sized.offers, sized.rename, text))
    warnings += _unused(measurements, matched)
    warnings += _key_conflicts(plans)
    return Plan(headroom, tuple(plans), policy.default_config, tuple(warnings))


def _unused(measurements: Sequence[Measurement], matched: set[Measurement]) -> list[PlanWarning]:
    return [
        PlanWarning(
            "unused-measurement",
            m.product or "any product",
            f"{m.describe()}: no pool of this product in the cluster",
        )
        for m in measurements
        if m not in matched
    ]


def _key_conflicts(plans: Sequence[PoolPlan]) -> list[PlanWarning]:
    texts: dict[str, str] = {}
    warnings = []
    for p in plans:
        if (
            p.key_after is not None
            and p.config_text is not None
            and texts.setdefault(p.key_after, p.config_text) != p.config_text
        ):
            warnings.append(
                PlanWarning(
                    "key-conflict",
                    p.key_after,
                    f"pools of {p.model} need different configs under one key: "
                    "the first one is written",
                )
            )
    return warnings
