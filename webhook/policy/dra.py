"""Dynamic Resource Allocation as the scheduler sees it: device classes, published devices, CEL.

``resource.k8s.io/v1`` objects (docs/dra.md) come in as plain mappings and leave as immutable
values: a ``DeviceClass`` (its CEL selectors, the extended resource it serves, its opaque
config), every ``Device`` of every ResourceSlice (driver, pool, where it can be used, its
attributes and capacities), and ``DraSnapshot``, which holds both with ``Selectors`` so that
each class is matched once.

CEL selectors are evaluated by ``webhook.policy.selectors``, the CEL environment of
k8s.io/dynamic-resource-allocation/cel (docs/cel.md). An expression that does not compile, or
fails at run time (which includes yielding no bool), is reported as a problem string and
matches nothing; a runtime failure is marked as one (``Match.aborts``): the scheduler aborts the
allocation of the claim on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache
from threading import Lock
from typing import Any

import semver

from webhook.policy.quantity import QuantityError, quantity_value
from webhook.policy.selectors import CelCompileError, CelRuntimeError, compile_selector

API_GROUP = "resource.k8s.io"
API_VERSION = "resource.k8s.io/v1"
# KEP-5004: every DeviceClass serves this extended resource name, besides its own
# spec.extendedResourceName (docs/dra.md, "Extended resources").
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

Attribute = int | bool | str | semver.Version


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device: its value, and how much a request may consume of it.

    ``default`` and ``valid_range``/``valid_values`` come from ``requestPolicy`` (consumable
    capacity, for devices with ``allowMultipleAllocations``); None where the driver set none.
    """

    value: Fraction
    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    valid_range: tuple[Fraction | None, Fraction | None, Fraction | None] | None = None


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint of one device (``spec.devices[].taints``): ``NoSchedule`` and ``NoExecute``
    keep it from being allocated to a request that does not tolerate it."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """How much a device consumes of one of its pool's shared counter sets
    (``consumesCounters``: partitionable devices, e.g. a MIG slice of a GPU's memory)."""

    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class CounterSet:
    """One shared counter set of a ResourceSlice (``sharedCounters``): what the devices of
    the pool that consume it may use up together."""

    name: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True)
class Device:
    """One device of one ResourceSlice, where it may be used and what it is.

    ``node`` is its node, when it has one; ``all_nodes`` means every node reaches it (network
    devices); ``node_selector`` is the NodeSelector of the nodes that reach it otherwise.
    ``attributes`` and ``capacity`` keep the names as published (``productName`` or
    ``gpu.nvidia.com/productName``); ``qualified()`` resolves the implicit domain.
    """

    driver: str
    pool: str
    name: str
    slice: str
    node: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    attributes: Mapping[str, Attribute]
    capacity: Mapping[str, Capacity]
    allow_multiple_allocations: bool = False
    # What the structured allocator reads besides (docs/allocator.md): the device's taints,
    # the shared counters it consumes (partitionable devices), its binding conditions.
    taints: tuple[DeviceTaint, ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False

    @cached_property
    def has_capacity_policy(self) -> bool:
        """True when some capacity has a ``requestPolicy`` (consumable capacity)."""
        return any(
            c.default is not None or c.valid_values or c.valid_range is not None
            for c in self.capacity.values()
        )

    @property
    def key(self) -> tuple[str, str, str]:
        """(driver, pool, device): how allocations name a device."""
        return (self.driver, self.pool, self.name)

    def attribute(self, name: str) -> Attribute | None:
        """The attribute ``name`` (``productName``, or ``domain/productName``), None if absent."""
        domain, ident = split_qualified(name, self.driver)
        for key, value in self.attributes.items():
            if split_qualified(key, self.driver) == (domain, ident):
                return value
        return None

    def capacity_of(self, name: str) -> Capacity | None:
        """The capacity ``name`` (``memory``, or ``domain/memory``), None if absent."""
        domain, ident = split_qualified(name, self.driver)
        for key, value in self.capacity.items():
            if split_qualified(key, self.driver) == (domain, ident):
                return value
        return None


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: the CEL selectors its devices pass, and the extended resource it serves."""

    name: str
    selectors: tuple[str, ...]
    extended_resource_name: str | None
    config: tuple[Mapping[str, Any], ...] = ()

    @property
    def implicit_resource_name(self) -> str:
        """``deviceclass.resource.kubernetes.io/<class>``, which every class serves."""
        return IMPLICIT_PREFIX + self.name

    @property
    def resource_names(self) -> tuple[str, ...]:
        """Every extended resource name a pod may ask for to get this class's devices."""
        explicit = (self.extended_resource_name,) if self.extended_resource_name else ()
        return (*explicit, self.implicit_resource_name)


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the scheduler gave a ResourceClaim, and who holds it (``status``)."""

    namespace: str
    name: str
    devices: tuple[tuple[str, str, str, str], ...]  # (request, driver, pool, device)
    reserved_for: tuple[str, ...]  # "<resource>/<name>" of each consumer, e.g. "pods/train-0"


@dataclass(frozen=True, slots=True)
class Match:
    """Whether a device passes some selectors; ``problem`` says why a selector could not say.

    ``aborts``: the problem is a CEL runtime error, on which the scheduler aborts the claim's
    allocation (it never means "this device does not match", docs/cel.md).
    """

    matched: bool
    problem: str | None = None
    aborts: bool = False


def split_qualified(name: str, driver: str) -> tuple[str, str]:
    """``gpu.nvidia.com/uuid`` -> (domain, id); a name without a domain is in the driver's."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


# --- evaluating selectors ------------------------------------------------------------------


class Selectors:
    """CEL selectors evaluated on devices, in the scheduler's CEL environment (docs/cel.md).

    Compiling and the per-value memo of each expression live in
    ``webhook.policy.selectors``; this adds what the claim rules need: a ``Match`` with
    a problem that names the device, and the answer for a set of ANDed selectors remembered
    on each device. Safe to share between the threads of one process.
    """

    def problem(self, expression: str) -> str | None:
        """Why ``expression`` cannot be evaluated (it does not compile), or None."""
        try:
            compile_selector(expression)
        except CelCompileError as err:
            return _compile_problem(expression, err)
        return None

    def evaluate(self, device: Device, expression: str) -> Match:
        """Does ``device`` pass ``expression``? A problem string when it cannot be told; a
        runtime error is marked ``aborts``: the scheduler aborts the allocation on it."""
        try:
            matched = compile_selector(expression).matches(device)
        except CelCompileError as err:
            return Match(False, _compile_problem(expression, err))
        except CelRuntimeError as err:
            return Match(
                False,
                f"CEL expression {expression!r} fails on device {device.name} of "
                f"{device.driver}/{device.pool}: the scheduler would abort the allocation: "
                f"CEL runtime error: {err}",
                aborts=True,
            )
        return Match(matched)

    def matches(self, device: Device, expressions: Iterable[str]) -> Match:
        """True when ``device`` passes every expression (selectors are ANDed, as in the API).

        Remembered on the device: a device unchanged from one snapshot to the next (the same
        object, see :func:`dra_snapshot`) is not evaluated again.
        """
        key = tuple(expressions)
        known: dict[tuple[str, ...], Match] = device.__dict__.setdefault("_cel_matches", {})
        found = known.get(key)
        if found is not None:
            return found
        found = Match(True)
        for expression in key:
            found = self.evaluate(device, expression)
            if not found.matched:
                break
        known[key] = found
        return found


def _compile_problem(expression: str, err: CelCompileError) -> str:
    first = str(err).splitlines()[0]
    return f"CEL expression {expression!r} does not compile: {first}"


# --- parsing the objects -------------------------------------------------------------------


def _meta_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "?")


def _selectors(spec: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    for selector in spec.get("selectors") or ():
        expression = ((selector or {}).get("cel") or {}).get("expression")
        if isinstance(expression, str):
            out.append(expression)
    return tuple(out)


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """A DeviceClass object (``resource.k8s.io/v1``) as a ``DeviceClass``."""
    spec = obj.get("spec") or {}
    extended = spec.get("extendedResourceName")
    config = tuple(c for c in spec.get("config") or () if isinstance(c, Mapping))
    return DeviceClass(
        name=_meta_name(obj),
        selectors=_selectors(spec),
        extended_resource_name=str(extended) if extended else None,
        config=config,
    )


def _attribute(raw: Any) -> Attribute | None:
    if not isinstance(raw, Mapping):
        return None
    for kind in ("bool", "int", "string"):
        if kind in raw:
            value = raw[kind]
            return value if kind == "string" else bool(value) if kind == "bool" else int(value)
    if "version" in raw:
        return _version(str(raw["version"]))
    return None


@lru_cache(maxsize=4096)
def _version(text: str) -> semver.Version | None:
    # Thousands of devices publish the same few driver and CUDA versions.
    try:
        return semver.Version.parse(text)
    except ValueError:
        return None


def _fraction(raw: Any) -> Fraction | None:
    if raw is None or isinstance(raw, bool):
        return None
    return _quantity_of(str(raw))


@lru_cache(maxsize=4096)
def _quantity_of(text: str) -> Fraction | None:
    # Thousands of devices publish the same few capacities.
    try:
        return quantity_value(text)
    except QuantityError:
        return None


def _capacity(raw: Any) -> Capacity | None:
    if not isinstance(raw, Mapping):
        return None
    value = _fraction(raw.get("value"))
    if value is None:
        return None
    policy = raw.get("requestPolicy") or {}
    valid = policy.get("validRange")
    valid_range = None
    if isinstance(valid, Mapping):
        valid_range = (
            _fraction(valid.get("min")),
            _fraction(valid.get("max")),
            _fraction(valid.get("step")),
        )
    values = tuple(v for v in map(_fraction, policy.get("validValues") or ()) if v is not None)
    return Capacity(value, _fraction(policy.get("default")), values, valid_range)


@dataclass(frozen=True)
class ResourceSlice:
    """One ResourceSlice: its pool (name, generation, number of slices), where its devices
    may be used (``node_name``, ``all_nodes``, ``node_selector``, or per device), its shared
    counter sets, and its devices. The structured allocator reads pools of these
    (docs/allocator.md, "Pools")."""

    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    per_device_node_selection: bool
    shared_counters: tuple[CounterSet, ...]
    devices: tuple[Device, ...]


def _counters(raw: Any) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for key, counter in (raw or {}).items() if isinstance(raw, Mapping) else ():
        value = _fraction((counter or {}).get("value")) if isinstance(counter, Mapping) else None
        if value is not None:
            out[str(key)] = value
    return out


def _device_extras(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a device the allocator reads besides attributes and capacity."""
    taints = tuple(
        DeviceTaint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in raw.get("taints") or ()
        if isinstance(t, Mapping)
    )
    consumes = tuple(
        CounterConsumption(str(c.get("counterSet") or ""), _counters(c.get("counters")))
        for c in raw.get("consumesCounters") or ()
        if isinstance(c, Mapping)
    )
    return {
        "taints": taints,
        "consumes_counters": consumes,
        "binding_conditions": tuple(map(str, raw.get("bindingConditions") or ())),
        "binding_failure_conditions": tuple(map(str, raw.get("bindingFailureConditions") or ())),
        "binds_to_node": bool(raw.get("bindsToNode")),
    }


def parse_slice(obj: Mapping[str, Any]) -> tuple[ResourceSlice | None, list[str]]:
    """One ResourceSlice object, and what could not be read in it (None without a driver or
    pool name)."""
    spec = obj.get("spec") or {}
    name = _meta_name(obj)
    driver = str(spec.get("driver") or "")
    pool_spec = spec.get("pool") or {}
    pool = str(pool_spec.get("name") or "")
    problems: list[str] = []
    if not driver or not pool:
        return None, [f"ResourceSlice {name}: no driver or pool name"]
    per_device = bool(spec.get("perDeviceNodeSelection"))
    devices = []
    for raw in spec.get("devices") or ():
        if not isinstance(raw, Mapping) or not raw.get("name"):
            problems.append(f"ResourceSlice {name}: a device without a name")
            continue
        # perDeviceNodeSelection: each device says where it is; otherwise the slice does.
        where = raw if per_device else spec
        attributes = {}
        for key, value in (raw.get("attributes") or {}).items():
            parsed = _attribute(value)
            if parsed is None:
                problems.append(
                    f"ResourceSlice {name}: device {raw['name']}: attribute {key} has no value "
                    "this webhook can read"
                )
                continue
            attributes[str(key)] = parsed
        capacity = {}
        for key, value in (raw.get("capacity") or {}).items():
            parsed_cap = _capacity(value)
            if parsed_cap is None:
                problems.append(
                    f"ResourceSlice {name}: device {raw['name']}: capacity {key} is no quantity"
                )
                continue
            capacity[str(key)] = parsed_cap
        devices.append(
            Device(
                driver=driver,
                pool=pool,
                name=str(raw["name"]),
                slice=name,
                node=str(where["nodeName"]) if where.get("nodeName") else None,
                all_nodes=bool(where.get("allNodes")),
                node_selector=where.get("nodeSelector") or None,
                attributes=attributes,
                capacity=capacity,
                allow_multiple_allocations=bool(raw.get("allowMultipleAllocations")),
                **_device_extras(raw),
            )
        )
    shared = tuple(
        CounterSet(str(c.get("name") or ""), _counters(c.get("counters")))
        for c in spec.get("sharedCounters") or ()
        if isinstance(c, Mapping)
    )
    count = pool_spec.get("resourceSliceCount")
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=pool,
        generation=int(pool_spec.get("generation") or 0),
        resource_slice_count=int(count) if isinstance(count, int) else 1,
        node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=spec.get("nodeSelector") or None,
        per_device_node_selection=per_device,
        shared_counters=shared,
        devices=tuple(devices),
    ), problems


def parse_resource_slice(obj: Mapping[str, Any]) -> tuple[list[Device], list[str]]:
    """The devices of one ResourceSlice, and what could not be read in it."""
    found, problems = parse_slice(obj)
    return (list(found.devices) if found is not None else []), problems


def parse_allocation(obj: Mapping[str, Any]) -> Allocation:
    """A ResourceClaim's allocated devices and consumers (empty when not allocated)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
    devices = tuple(
        (
            str(r.get("request", "")),
            str(r.get("driver", "")),
            str(r.get("pool", "")),
            str(r.get("device", "")),
        )
        for r in results
        if isinstance(r, Mapping)
    )
    reserved = tuple(
        f"{r.get('resource', '')}/{r.get('name', '')}"
        for r in status.get("reservedFor") or ()
        if isinstance(r, Mapping)
    )
    return Allocation(
        str(meta.get("namespace") or ""), str(meta.get("name") or "?"), devices, reserved
    )


def _latest_generation(
    slices: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The slices of each pool's newest generation; the scheduler ignores older ones while a
    driver replaces them, and a pool missing some of its slices is incomplete."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        key = (str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or ""))
        pools.setdefault(key, []).append(obj)
    kept: list[Mapping[str, Any]] = []
    problems: list[str] = []
    for (driver, pool), members in sorted(pools.items()):

        def generation(obj: Mapping[str, Any]) -> int:
            return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)

        newest = max(generation(o) for o in members)
        current = [o for o in members if generation(o) == newest]
        kept += current
        expected = ((current[0].get("spec") or {}).get("pool") or {}).get("resourceSliceCount")
        if isinstance(expected, int) and expected != len(current):
            problems.append(
                f"pool {pool} of {driver}: {len(current)} of its {expected} ResourceSlices "
                "published: its devices may be incomplete"
            )
    return kept, problems


@dataclass(frozen=True)
class DraSnapshot:
    """The DRA side of one inventory snapshot: classes, devices, and the compiled selectors.

    ``problems`` lists what could not be read or evaluated (an expression that does not
    compile, a device attribute of an unknown kind, an incomplete pool).
    """

    classes: Mapping[str, DeviceClass]
    devices: tuple[Device, ...]
    # extended resource name -> the class that serves it (the implicit names are not listed)
    extended: Mapping[str, str] = field(default_factory=dict)
    allocations: tuple[Allocation, ...] = ()
    read_problems: tuple[str, ...] = ()
    # The ResourceClaimSpec of each ResourceClaim and ResourceClaimTemplate read, by (kind,
    # namespace, name): what a pod's spec.resourceClaims asks for (docs/dra-claims.md).
    claim_specs: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    selectors: Selectors = field(default_factory=Selectors, repr=False, compare=False)
    # Each ResourceSlice object read, by id: (the object, its devices, its problems). The next
    # snapshot reuses the devices of a slice that is the same object (the watch keeps an
    # unchanged object as it is), with what was evaluated on them.
    slices: Mapping[int, tuple[Mapping[str, Any], tuple[Device, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _class_devices: dict[str, tuple[tuple[Device, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _lock: Lock = field(default_factory=Lock, repr=False, compare=False)
    # Answers derived from this snapshot by the claim rules (the devices a request's class,
    # selectors and capacity match), so that the pods of one template pay the CEL once.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def class_devices(self, name: str) -> tuple[tuple[Device, ...], tuple[str, ...]]:
        """The devices the class ``name`` selects (its selectors ANDed), and the problems met;
        ((), ("device class ... does not exist",)) for an unknown class."""
        cached = self._class_devices.get(name)
        if cached is not None:
            return cached
        device_class = self.classes.get(name)
        if device_class is None:
            found: tuple[tuple[Device, ...], tuple[str, ...]] = (
                (),
                (f"DeviceClass {name} does not exist",),
            )
        else:
            found = self.select(self.devices, device_class.selectors)
        with self._lock:
            self._class_devices.setdefault(name, found)
        return found

    def select(
        self, devices: Iterable[Device], expressions: Sequence[str]
    ) -> tuple[tuple[Device, ...], tuple[str, ...]]:
        """The devices that pass every expression, and each distinct problem met once."""
        chosen: list[Device] = []
        problems: dict[str, None] = {}
        for device in devices:
            match = self.selectors.matches(device, expressions)
            if match.matched:
                chosen.append(device)
            elif match.problem is not None:
                problems.setdefault(match.problem, None)
        return tuple(chosen), tuple(problems)

    def class_for_resource(self, resource: str) -> DeviceClass | None:
        """The class that serves the extended resource ``resource``, None when none does.

        The implicit ``deviceclass.resource.kubernetes.io/<class>`` always maps to its class;
        of several classes naming the same ``extendedResourceName`` the scheduler takes the
        newest one (docs/dra.md, "Extended resources"), and so does ``extended``.
        """
        if resource.startswith(IMPLICIT_PREFIX):
            return self.classes.get(resource.removeprefix(IMPLICIT_PREFIX))
        name = self.extended.get(resource)
        return None if name is None else self.classes.get(name)

    @property
    def problems(self) -> tuple[str, ...]:
        """What could not be read, and every class selector that cannot be evaluated."""
        out = dict.fromkeys(self.read_problems)
        for device_class in self.classes.values():
            for problem in self.class_devices(device_class.name)[1]:
                out.setdefault(problem, None)
        return tuple(out)


def _claim_specs(
    claims: Iterable[Mapping[str, Any]], templates: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for kind, objs, path in (
        ("ResourceClaim", claims, ("spec",)),
        ("ResourceClaimTemplate", templates, ("spec", "spec")),
    ):
        for obj in objs:
            spec: Any = obj
            for step in path:
                spec = spec.get(step) if isinstance(spec, Mapping) else None
            meta = obj.get("metadata") or {}
            if isinstance(spec, Mapping):
                out[(kind, str(meta.get("namespace") or ""), _meta_name(obj))] = spec
    return out


def dra_snapshot(
    device_classes: Iterable[Mapping[str, Any]],
    resource_slices: Iterable[Mapping[str, Any]],
    resource_claims: Iterable[Mapping[str, Any]] = (),
    resource_claim_templates: Iterable[Mapping[str, Any]] = (),
    *,
    previous: DraSnapshot | None = None,
) -> DraSnapshot:
    """Read DeviceClass, ResourceSlice, ResourceClaim and ResourceClaimTemplate objects into
    one snapshot.

    ``previous``: the snapshot before this one, whose compiled selectors and whose devices of
    the ResourceSlices that are still the same objects are reused.
    """
    resource_claims = tuple(resource_claims)
    # Of several classes with one extendedResourceName, the scheduler uses the newest, and of
    # those created in the same second the lowest name (docs/dra.md, "Extended resources"):
    # sorted so, the one it uses comes last and is the one kept per name.
    ordered = sorted(device_classes, key=_meta_name, reverse=True)
    ordered.sort(key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp") or ""))
    classes: dict[str, DeviceClass] = {}
    extended: dict[str, str] = {}
    problems: list[str] = []
    for obj in ordered:
        parsed = parse_device_class(obj)
        classes[parsed.name] = parsed
        resource = parsed.extended_resource_name
        if resource:
            if resource in extended:
                problems.append(
                    f"DeviceClasses {extended[resource]} and {parsed.name} both serve {resource}: "
                    f"the scheduler uses {parsed.name}"
                )
            extended[resource] = parsed.name
    slices, trouble = _latest_generation(resource_slices)
    problems += trouble
    devices: list[Device] = []
    read: dict[int, tuple[Mapping[str, Any], tuple[Device, ...], tuple[str, ...]]] = {}
    before = previous.slices if previous is not None else {}
    for obj in slices:
        known = before.get(id(obj))
        if known is None or known[0] is not obj:
            found, found_problems = parse_resource_slice(obj)
            known = (obj, tuple(found), tuple(found_problems))
        read[id(obj)] = known
        devices += known[1]
        problems += known[2]
    return DraSnapshot(
        classes=classes,
        extended=extended,
        devices=tuple(sorted(devices, key=lambda d: (d.driver, d.pool, d.name))),
        allocations=tuple(parse_allocation(c) for c in resource_claims),
        read_problems=tuple(problems),
        claim_specs=_claim_specs(resource_claims, resource_claim_templates),
        selectors=previous.selectors if previous is not None else Selectors(),
        slices=read,
    )
