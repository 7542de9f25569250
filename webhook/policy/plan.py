"""Sizing time-slicing replicas from measured memory per process, and the rollout that follows.

Pure: no files, no cluster. The shell (``webhook.plan_command``) reads the nodes, the policy
and the measurements, and writes what ``make_plan`` decides.

The sizing rule
---------------
Time-slicing does not isolate memory: every replica of a GPU shares its whole memory, so the
number of replicas is how many copies of the measured process fit at once. A *headroom* share
of the GPU's memory is kept back for the CUDA context, fragmentation and growth::

    replicas = floor(memory x (1 - headroom) / measured)

with ``memory`` from the GFD label ``nvidia.com/gpu.memory`` (``nvidia.com/mig-<p>.memory``
for a MIG slice) and ``measured`` the largest per-process use measured for that product.
Seed 003 with the default headroom of 10 % of the GPU's memory:

- NVIDIA L20: floor(46068 x 0.9 / 4621) = floor(8.97) = 8 replicas, 5758 MiB per slot, 1137
  MiB headroom per slot, 8 x 4621 / 46068 = 80.2 % memory use at full slots;
- Tesla T4: floor(15360 x 0.9 / 4401) = floor(3.14) = 3 replicas, 5120 MiB per slot, 719 MiB
  headroom per slot, 3 x 4401 / 15360 = 86.0 % at full slots.

That is the seed's 8 and 3, its "about 1137 MiB" and its 80 % / 86 %. (The seed prints "about
759 MiB" for the T4: 15360 / 3 - 4401 is 719, a slip of 40 MiB in the seed.) Headroom taken
per process instead, floor(memory / (measured x 1.1)), gives 9 for the L20, not the seed's 8:
that reading is not the one the seed used. Any GPU-share headroom in (9.72 %, 14.04 %]
reproduces both of the seed's counts; 10 % is the round figure inside that range.

The device plugin's rule bounds the result: ``replicas >= 2`` to share at all, so a process
that does not fit twice leaves the GPU unshared (1), and one larger than the GPU leaves it
unshared too, with a warning.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from math import ceil
from typing import Any

import yaml

from webhook.contract import GPU_POLICY_API_VERSION, MEASUREMENTS_KIND, SHARING_POLICY_KIND
from webhook.policy.errors import PolicyError
from webhook.policy.inventory import Inventory, Offer, Pool
from webhook.policy.model import Policy
from webhook.policy.plugin_config import PluginConfig
from webhook.policy.products import (
    base_model,
    mig_profiles_for,
    model_key,
    product_label,
    product_value,
)
from webhook.policy.resources import ResourceForm

DEFAULT_HEADROOM = Fraction(1, 10)
CONFIGMAP_FILE = "device-plugin-config.yaml"
DEFAULT_CONFIGMAP = ("kube-system", "time-slicing-config")

# Instances per GPU of each MIG profile (GPU-SHARING.md §5), per family; a family is named by
# its smallest profile, the first one products.MIG_PROFILES lists.
_A100_40 = {
    "1g.5gb": 7,
    "1g.5gb+me": 1,
    "1g.10gb": 4,
    "2g.10gb": 3,
    "3g.20gb": 2,
    "4g.20gb": 1,
    "7g.40gb": 1,
}
_A100_80 = {
    "1g.10gb": 7,
    "1g.10gb+me": 1,
    "1g.20gb": 4,
    "2g.20gb": 3,
    "3g.40gb": 2,
    "4g.40gb": 1,
    "7g.80gb": 1,
}
_A30 = {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}
_HOPPER_96 = {
    "1g.12gb": 7,
    "1g.12gb+me": 1,
    "1g.24gb": 4,
    "2g.24gb": 3,
    "3g.47gb": 2,
    "3g.48gb": 2,
    "4g.47gb": 1,
    "4g.48gb": 1,
    "7g.94gb": 1,
    "7g.96gb": 1,
}
_H200 = {
    "1g.18gb": 7,
    "1g.18gb+me": 1,
    "1g.35gb": 4,
    "2g.35gb": 3,
    "3g.71gb": 2,
    "4g.71gb": 1,
    "7g.141gb": 1,
}
MIG_INSTANCES: dict[str, dict[str, int]] = {
    "1g.5gb": _A100_40, "1g.10gb": _A100_80, "1g.6gb": _A30, "1g.12gb": _HOPPER_96,
    "1g.18gb": _H200,
}  # fmt: skip

_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[KMGT]B)?\s*$")
_MIB = 1024 * 1024
_UNITS: dict[str, Fraction] = {
    "": Fraction(1),
    "Ki": Fraction(1, 1024),
    "Mi": Fraction(1),
    "Gi": Fraction(1024),
    "Ti": Fraction(1024 * 1024),
    "K": Fraction(10**3, _MIB),
    "M": Fraction(10**6, _MIB),
    "G": Fraction(10**9, _MIB),
    "T": Fraction(10**12, _MIB),
}
_KEY = re.compile(r"^[A-Za-z0-9]([-._A-Za-z0-9]*[A-Za-z0-9])?$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


# --- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    """The memory one process was measured to use, on one product (None: on any GPU)."""

    memory_mib: int
    product: str | None = None
    workload: str | None = None

    def describe(self) -> str:
        """``nlp-inference 4621 MiB`` or ``4621 MiB``."""
        return (
            f"{self.workload} {self.memory_mib} MiB" if self.workload else f"{self.memory_mib} MiB"
        )


def parse_headroom(value: object) -> Fraction:
    """``10%``, ``10 %`` or ``0.1``: the share of each GPU's memory kept free; in [0, 0.9]."""
    text = str(value).strip()
    try:
        share = Fraction(text[:-1].strip()) / 100 if text.endswith("%") else Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise PolicyError("headroom", "", f"{value!r} is not a share such as 10% or 0.1") from None
    if not 0 <= share <= Fraction(9, 10):
        raise PolicyError("headroom", "", f"{value!r} is outside 0 % .. 90 %")
    return share


def parse_memory_mib(value: object, *, source: str = "measurement", field: str = "") -> int:
    """A memory quantity in MiB, rounded up: ``4621Mi``, ``4621MiB``, ``4.5Gi``, ``5G``, ``4621``.

    A bare number is MiB (nvidia-smi's unit). Decimal units (K, M, G, T) are powers of 1000.
    """
    if isinstance(value, bool):
        raise PolicyError(source, field, f"{value!r} is not a memory quantity")
    match = _QUANTITY.match(str(value))
    if match is None:
        raise PolicyError(source, field, f"{value!r} is not a memory quantity such as 4621Mi")
    unit = (match[2] or "").removesuffix("B")
    mib = ceil(Fraction(match[1]) * _UNITS[unit])
    if mib <= 0:
        raise PolicyError(source, field, f"{value!r}: a process uses some memory")
    return mib


def parse_measure_arg(text: str) -> Measurement:
    """``--measure NVIDIA-L20=4621Mi`` (per product) or ``--measure 4621Mi`` (every product)."""
    product, sep, quantity = text.rpartition("=")
    if not sep:
        return Measurement(parse_memory_mib(text, source="--measure"))
    if not product.strip():
        raise PolicyError("--measure", text, "name a product before '=' (NVIDIA-L20=4621Mi)")
    return Measurement(parse_memory_mib(quantity, source="--measure"), product.strip())


def parse_measurements(
    doc: object, *, source: str
) -> tuple[tuple[Measurement, ...], Fraction | None]:
    """A measurements document: its measurements and its headroom, if it states one.

    ```yaml
    apiVersion: gpu-policy.io/v1alpha1
    kind: Measurements
    headroom: 10%                  # optional
    workloads:                     # per workload, on one product or (no product) on any
      - {name: nlp-inference, product: NVIDIA-L20, memory: 4621Mi}
    products:                      # or per product
      Tesla-T4: 4401Mi
    ```
    """
    if not isinstance(doc, Mapping):
        raise PolicyError(source, "", "expected a mapping with workloads: and/or products:")
    if doc.get("kind", MEASUREMENTS_KIND) != MEASUREMENTS_KIND:
        raise PolicyError(source, "kind", f"expected {MEASUREMENTS_KIND}, found {doc['kind']!r}")
    out: list[Measurement] = []
    workloads = doc.get("workloads") or []
    if not isinstance(workloads, list):
        raise PolicyError(source, "workloads", "must be a list")
    for i, entry in enumerate(workloads):
        where = f"workloads[{i}]"
        if not isinstance(entry, Mapping) or "memory" not in entry:
            raise PolicyError(source, where, "needs at least memory: (and name:, product:)")
        product = entry.get("product")
        out.append(
            Measurement(
                parse_memory_mib(entry["memory"], source=source, field=f"{where}.memory"),
                None if product is None else str(product),
                None if entry.get("name") is None else str(entry["name"]),
            )
        )
    products = doc.get("products") or {}
    if not isinstance(products, Mapping):
        raise PolicyError(source, "products", "must map products to memory")
    for product, quantity in products.items():
        out.append(
            Measurement(
                parse_memory_mib(quantity, source=source, field=f"products.{product}"),
                str(product),
            )
        )
    if not out:
        raise PolicyError(source, "", "no measurements (workloads: or products:)")
    headroom = doc.get("headroom")
    return tuple(out), None if headroom is None else parse_headroom(headroom)


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
    match = _PROFILE.match(profile)
    return 0 if match is None else int(int(match[2]) * 1024 * 95 // 100)


def _profile_slices(profile: str) -> int:
    match = _PROFILE.match(profile)
    return 99 if match is None else int(match[1])


def mig_instances(model: str, profile: str) -> int | None:
    """How many instances of ``profile`` one GPU of ``model`` holds (§5), None if unknown."""
    profiles = mig_profiles_for(model)
    if not profiles:
        return None
    return MIG_INSTANCES.get(profiles[0], {}).get(profile)


# --- the plan -----------------------------------------------------------------------------


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
        """MiB each slot keeps beyond one measured process (seed 003's 1137 MiB)."""
        per_slot = self.memory_per_slot
        if per_slot is None or self.measured is None:
            return None
        return per_slot - self.measured.memory_mib

    @property
    def use_at_full_slots(self) -> float | None:
        """Memory use when every slot runs one measured process (seed 003's 80 % / 86 %)."""
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


def key_for_model(model: str) -> str:
    """The config key named from a product: ``NVIDIA-L20`` -> ``nvidia-l20``."""
    key = re.sub(r"[^a-z0-9.-]+", "-", model.lower()).strip("-.")
    return key[:63].rstrip("-.") or "gpu"


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
        profile = (
            m.product.removesuffix("-SHARED").split("-MIG-", 1)[1] if "-MIG-" in m.product else None
        )
        if profile is None:
            general.append(m)
        elif profile == offer.profile:
            specific.append(m)
    chosen = specific or general
    return max(chosen, key=lambda m: m.memory_mib) if chosen else None


def _flags(config_text: str | None, mig_strategy: str) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if config_text is not None:
        try:
            doc = yaml.safe_load(config_text)
        except yaml.YAMLError:
            doc = None
        if isinstance(doc, Mapping) and isinstance(doc.get("flags"), Mapping):
            flags = dict(doc["flags"])
    flags.setdefault("migStrategy", mig_strategy)
    return flags


class _IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key, as the device plugin's documentation writes them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump_yaml(doc: Any) -> str:
    """Block-style YAML in the given key order."""
    return yaml.dump(doc, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False)


def config_text(
    offers: Iterable[OfferPlan], *, flags: Mapping[str, Any], rename_by_default: bool
) -> str:
    """One device-plugin config file: the flags kept, time-slicing for every shared resource."""
    resources = [
        {"name": o.offer.form.original, "replicas": o.replicas_after}
        for o in sorted(offers, key=lambda o: o.offer.form.original)
        if o.replicas_after >= 2
    ]
    doc: dict[str, Any] = {"version": "v1", "flags": dict(flags)}
    if resources:
        doc["sharing"] = {
            "timeSlicing": {
                "renameByDefault": rename_by_default,
                "failRequestsGreaterThanOne": True,
                "resources": resources,
            }
        }
    return dump_yaml(doc).rstrip("\n")


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


def _warn_mig(
    model: str,
    o: OfferPlan,
    *,
    headroom: Fraction,
    known_memory: Mapping[str, int],
    warnings: list[PlanWarning],
    subject: str,
) -> None:
    """A MIG profile that holds the process, where time-slicing is planned instead."""
    if o.measured is None or o.replicas_after < 2:
        return
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
        candidates.append((memory, _profile_slices(profile), profile, count))
    if not candidates:
        return
    memory, _, profile, count = min(candidates)
    per = f"up to {count} per GPU, " if count else ""
    what = (
        f"time-slicing {o.offer.form.original} {o.replicas_after} ways"
        if current is not None
        else f"time-slicing the whole GPU {o.replicas_after} ways"
    )
    warnings.append(
        PlanWarning(
            "mig-profile-fits",
            subject,
            f"MIG profile {profile} ({per}about {memory} MiB each) holds a "
            f"{o.measured.memory_mib} MiB process with {_pct(headroom)} headroom, with memory "
            f"and fault isolation: consider it instead of {what} (GPU-SHARING.md §5)",
        )
    )


def _pct(share: Fraction) -> str:
    value = float(share * 100)
    return f"{value:g} %"


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
    warnings: list[PlanWarning] = []
    used: dict[str | None, set[str | None]] = defaultdict(set)
    for pool in inventory.pools:
        used[pool.config_key].add(_pool_model(pool))
    known_memory: dict[tuple[str, str], int] = {}
    for _, offer in inventory.pairs:
        if offer.model is not None and offer.profile is not None and offer.memory_mib:
            known_memory.setdefault((model_key(offer.model), offer.profile), offer.memory_mib)
    matched: set[Measurement] = set()
    plans: list[PoolPlan] = []
    taken: dict[str, str] = {}  # product-named key -> model that took it
    for pool in inventory.pools:
        model = _pool_model(pool)
        subject = model or pool.name
        current = policy.config_for(pool.config_key)
        rename = (
            rename_by_default
            if rename_by_default is not None
            else bool(current and current.rename_by_default)
        )
        offers: list[OfferPlan] = []
        for offer in pool.offers:
            o_subject = offer.product.removesuffix("-SHARED") if offer.product else subject
            measured = None if model is None else _measurement_for(offer, model, measurements)
            if measured is not None:
                matched.add(measured)
            after = offer.replicas
            if model is None:
                warnings.append(
                    PlanWarning(
                        "no-product",
                        pool.name,
                        f"no GFD product label for {offer.form.name}: left as it is",
                    )
                )
            elif measured is None:
                warnings.append(
                    PlanWarning("no-measurement", o_subject, "no measured process: left as it is")
                )
            elif offer.memory_mib is None:
                warnings.append(
                    PlanWarning(
                        "no-memory",
                        o_subject,
                        f"the node labels lack {offer.form.original}.memory: cannot size "
                        f"{offer.form.name} from memory, left at {offer.replicas} replica(s)",
                    )
                )
            else:
                mem, need = offer.memory_mib, measured.memory_mib
                after = replicas_for(mem, need, headroom)
                if offer.replicas > 1 and need > mem // offer.replicas:
                    warnings.append(
                        PlanWarning(
                            "process-larger-than-slot",
                            o_subject,
                            f"a {measured.describe()} process is larger than today's slot "
                            f"({mem} MiB / {offer.replicas} replicas = "
                            f"{mem // offer.replicas} MiB): full slots run out of memory",
                        )
                    )
                if need > mem:
                    warnings.append(
                        PlanWarning(
                            "process-larger-than-slot",
                            o_subject,
                            f"a {measured.describe()} process is larger than the whole "
                            f"device ({mem} MiB): it does not fit even unshared",
                        )
                    )
                elif fitting_replicas(mem, need, headroom) < 2:
                    warnings.append(
                        PlanWarning(
                            "sharing-buys-nothing",
                            o_subject,
                            f"a {measured.describe()} process does not fit twice in {mem} MiB "
                            f"with {_pct(headroom)} headroom: not shared (replicas 1)",
                        )
                    )
            offers.append(OfferPlan(offer, measured, after))
            if model is not None:
                mem_by_profile = {
                    p: m for (k, p), m in known_memory.items() if k == model_key(model)
                }
                _warn_mig(
                    model,
                    offers[-1],
                    headroom=headroom,
                    known_memory=mem_by_profile,
                    warnings=warnings,
                    subject=o_subject,
                )
        key_before = pool.config_key
        if not any(o.sized for o in offers) or _matches(current, offers, rename):
            plans.append(PoolPlan(pool, model, key_before, tuple(offers), rename, None))
            continue
        flags = _flags(existing.get(key_before or ""), pool.mig_strategy)
        text = config_text(offers, flags=flags, rename_by_default=rename)
        reusable = (
            key_before is not None
            and key_before != policy.default_config
            and len(used[key_before]) == 1
        )
        if reusable:
            key = key_before
        else:
            assert model is not None
            key = key_for_model(model)
            clash = (
                key == policy.default_config
                or (key in used and used[key] != {model})
                or taken.get(key, model) != model
            )
            if clash:
                key = f"{key}-shared"
            taken[key] = model
        plans.append(PoolPlan(pool, model, key, tuple(offers), rename, text))
    for m in measurements:
        if m not in matched:
            warnings.append(
                PlanWarning(
                    "unused-measurement",
                    m.product or "any product",
                    f"{m.describe()}: no pool of this product in the cluster",
                )
            )
    texts: dict[str, str] = {}
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
    return Plan(headroom, tuple(plans), policy.default_config, tuple(warnings))


def _pool_model(pool: Pool) -> str | None:
    for offer in pool.offers:
        if offer.product is not None:
            return base_model(offer.product)
    return None


# --- the after view and the files --------------------------------------------------------


def planned_inventory(plan: Plan, *, source: str = "plan") -> Inventory:
    """The inventory the cluster shows after the rollout (for ``gpu-policy inventory``'s table)."""
    pools = []
    for p in plan.pools:
        offers = []
        for o in p.offers:
            offer, n = o.offer, o.replicas_after
            if n == offer.replicas and p.key_after == p.pool.config_key:
                offers.append(offer)
                continue
            renamed = p.rename_by_default and n > 1
            form = offer.form.with_renamed(renamed)
            product = offer.product
            if p.model is not None and product is not None:
                unit = ResourceForm(offer.profile, False)
                product = product_value(p.model, unit, replicas=n, renamed=renamed)
            offers.append(
                replace(
                    offer,
                    form=form,
                    product=product,
                    replicas=n,
                    strategy="time-slicing" if n > 1 else "none",
                    fail_requests_greater_than_one=n > 1 or offer.fail_requests_greater_than_one,
                    slots=o.slots_after,
                    selector=(
                        (product_label(form, p.pool.mig_strategy), product) if product else None
                    ),
                )
            )
        name = "/".join(x for x in (p.key_after, p.model) if x) or p.pool.name
        pools.append(replace(p.pool, name=name, config_key=p.key_after, offers=tuple(offers)))
    return Inventory(pools=tuple(pools), source=source)


def _yaml_key(key: str) -> str:
    if _KEY.match(key) and key.lower() not in _YAML_WORDS and not key[0].isdigit():
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _block(text: str, indent: str) -> str:
    body = text.rstrip("\n")
    head = "|2-" if body[:1] in (" ", "\n") else "|-"
    lines = [f"{indent}{line}" if line.strip() else "" for line in body.split("\n")]
    return head + "\n" + "\n".join(lines)


def configmap_text(
    plan: Plan,
    existing: Mapping[str, str],
    *,
    namespace: str = DEFAULT_CONFIGMAP[0],
    name: str = DEFAULT_CONFIGMAP[1],
) -> str:
    """The device plugin's multi-key ConfigMap: existing keys kept, planned keys written.

    Existing keys stay in their order (rewritten ones in place), new keys follow sorted.
    """
    data = dict(existing)
    planned = plan.configs
    for key in list(data):
        if key in planned:
            data[key] = planned[key]
    for key in sorted(planned):
        data.setdefault(key, planned[key])
    lines = [
        f"# Written by `gpu-policy plan` (headroom {_pct(plan.headroom)} of each GPU's memory).",
        "# Apply it, then restart the device plugin DaemonSet: the plugin does not watch its",
        "# ConfigMap.",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        f"  name: {_yaml_key(name)}",
        f"  namespace: {_yaml_key(namespace)}",
        "data:",
    ]
    for key, text in data.items():
        lines.append(f"  {_yaml_key(key)}: {_block(text, '    ')}")
    return "\n".join(lines) + "\n"


def label_script(plan: Plan, node_label: str) -> str:
    """``kubectl label node`` commands that point each node at its planned config key."""
    lines = [
        "#!/bin/sh",
        "# Written by `gpu-policy plan`: point each GPU node at its device-plugin config key.",
        f"# Apply {CONFIGMAP_FILE} first; restart the device plugin after labelling.",
        "set -eu",
    ]
    for pool in plan.pools:
        key = pool.key_after
        if key is None or key == plan.default_config or not pool.pool.nodes:
            continue
        sizes = ", ".join(f"{o.offer.form.original} x {o.replicas_after}" for o in pool.offers)
        lines.append(f"# {pool.model or pool.pool.name}: {sizes} per device")
        for node in pool.pool.nodes:
            lines.append(f"kubectl label node {_sh(node)} {_sh(f'{node_label}={key}')} --overwrite")
    return "\n".join(lines) + "\n"


def _sh(word: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9._/=:@%+-]+", word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def policy_text(plan: Plan, policy: Policy) -> str:
    """The SharingPolicy that matches the plan: the same settings, the written ConfigMap."""
    device_plugin: dict[str, Any] = {
        "configMapFile": CONFIGMAP_FILE,
        "nodeLabel": policy.node_label,
    }
    if plan.default_config is not None:
        device_plugin["defaultConfig"] = plan.default_config
    if policy.configmap_ref is not None:
        ref = policy.configmap_ref
        device_plugin["configMapRef"] = {"namespace": ref.namespace, "name": ref.name}
    doc = {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "metadata": {"name": policy.name},
        "spec": {
            "enforcement": policy.enforcement,
            "defaultIntent": policy.default_intent,
            "exemptNamespaces": sorted(policy.exempt_namespaces),
            "devicePlugin": device_plugin,
            "mutation": {
                "rewriteResourceNames": policy.rewrite_resource_names,
                "injectNodeSelection": policy.inject_node_selection,
                "tolerations": [dict(t) for t in policy.tolerations],
            },
        },
    }
    head = (
        "# Written by `gpu-policy plan`: the webhook policy for the planned layout. The inventory\n"
        "# comes from the nodes (--nodes or the live cluster), so no `pools:` here.\n"
    )
    return head + dump_yaml(doc)
