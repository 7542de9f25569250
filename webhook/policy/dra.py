"""Dynamic Resource Allocation as the scheduler sees it: device classes, published devices, CEL.

``resource.k8s.io/v1`` objects (docs/dra.md) come in as plain mappings and leave as immutable
values: a ``DeviceClass`` (its CEL selectors, the extended resource it serves, its opaque
config), every ``Device`` of every ResourceSlice (driver, pool, where it can be used, its
attributes and capacities), and ``DraSnapshot``, which holds both with one ``Selectors`` cache
so that each CEL expression is compiled once per snapshot and each class matched once.

CEL is evaluated with the ``cel`` package on the variable the scheduler builds
(k8s.io/dynamic-resource-allocation/cel, docs/dra.md "Selectors"): ``device.driver``,
``device.attributes[domain][id]``, ``device.capacity[domain][id]`` and
``device.allowMultipleAllocations``, where a name without a domain takes the driver's, and an
unknown domain is an empty map. Quantities and semantic
versions are values of their own there; here they are small tagged maps with the Kubernetes
functions (``quantity()``, ``compareTo()``, ``semver()``, ``isGreaterThan()``...) registered on
them. An expression that does not compile, fails at run time or yields no bool is reported as
a problem string and matches nothing, as in the scheduler, where it aborts the allocation.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache
from threading import Lock
from typing import Any

import cel
import semver

from webhook.policy.quantity import QuantityError, quantity_value

API_GROUP = "resource.k8s.io"
API_VERSION = "resource.k8s.io/v1"
# KEP-5004: every DeviceClass serves this extended resource name, besides its own
# spec.extendedResourceName (docs/dra.md, "Extended resources").
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

_QUANTITY_TAG = "__quantity__"
_SEMVER_TAG = "__semver__"

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
    def cel_input(self) -> Mapping[str, Any]:
        """The `device` variable of a CEL selector, built once, when a selector reads the
        device whole (most read a few attributes: :meth:`cel_value`)."""
        attributes: dict[str, dict[str, Any]] = {}
        for key, value in self.attributes.items():
            domain, ident = split_qualified(key, self.driver)
            attributes.setdefault(domain, {})[ident] = _cel_value(value)
        capacity: dict[str, dict[str, Any]] = {}
        for key, cap in self.capacity.items():
            domain, ident = split_qualified(key, self.driver)
            capacity.setdefault(domain, {})[ident] = _quantity(cap.value)
        device = {
            "driver": self.driver,
            "attributes": attributes,
            "capacity": capacity,
            "allowMultipleAllocations": self.allow_multiple_allocations,
        }
        return device

    @cached_property
    def _qualified(self) -> Mapping[tuple[str, str, str], Attribute | Capacity]:
        out: dict[tuple[str, str, str], Attribute | Capacity] = {}
        for key, value in self.attributes.items():
            out[("attributes", *split_qualified(key, self.driver))] = value
        for key, cap in self.capacity.items():
            out[("capacity", *split_qualified(key, self.driver))] = cap
        return out

    def cel_value(self, kind: str, domain: str, ident: str) -> Any:
        """``device.attributes[domain].ident`` (``kind`` ``attributes`` or ``capacity``) as
        CEL reads it; None when the device has none."""
        found = self._qualified.get((kind, domain, ident))
        if found is None:
            return None
        return _quantity(found.value) if isinstance(found, Capacity) else _cel_value(found)

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
    """Whether a device passes some selectors; ``problem`` says why a selector could not say."""

    matched: bool
    problem: str | None = None


def split_qualified(name: str, driver: str) -> tuple[str, str]:
    """``gpu.nvidia.com/uuid`` -> (domain, id); a name without a domain is in the driver's."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


# --- CEL values and the Kubernetes functions on them ----------------------------------------


def _fraction_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(value)


def _quantity(value: Fraction) -> dict[str, str]:
    # A canonical exact text, so that == between two quantities compares their values
    # (quantity("1Gi") == quantity("1024Mi") holds in Kubernetes too).
    return {_QUANTITY_TAG: _fraction_text(value)}


def _cel_value(value: Attribute) -> Any:
    if isinstance(value, semver.Version):
        return {_SEMVER_TAG: str(value)}
    return value


class _CelError(ValueError):
    """A Kubernetes CEL function called on what it does not take."""


def _as_quantity(value: Any) -> Fraction:
    if isinstance(value, Mapping) and _QUANTITY_TAG in value:
        return Fraction(value[_QUANTITY_TAG])
    raise _CelError(f"{value!r} is not a quantity")


def _operand(value: Any) -> Fraction:
    # quantity.add(int) and quantity.sub(int) take integers too.
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return _as_quantity(value)


def _as_semver(value: Any) -> semver.Version:
    if isinstance(value, Mapping) and _SEMVER_TAG in value:
        return semver.Version.parse(value[_SEMVER_TAG])
    raise _CelError(f"{value!r} is not a semver")


def _parse_quantity(text: Any) -> dict[str, str]:
    try:
        return _quantity(quantity_value(str(text)))
    except QuantityError as err:
        raise _CelError(f"quantity({text!r}): {err}") from None


def _parse_semver(text: Any) -> dict[str, str]:
    try:
        return {_SEMVER_TAG: str(semver.Version.parse(str(text)))}
    except ValueError:
        raise _CelError(f"semver({text!r}): not a semantic version") from None


def _is(parse: Callable[[Any], Any]) -> Callable[[Any], bool]:
    def check(text: Any) -> bool:
        try:
            parse(text)
        except _CelError:
            return False
        return True

    return check


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Mapping) and _SEMVER_TAG in a:
        return _as_semver(a).compare(_as_semver(b))
    left, right = _as_quantity(a), _as_quantity(b)
    return (left > right) - (left < right)


def _part(index: int) -> Callable[[Any], int]:
    def get(value: Any) -> int:
        version = _as_semver(value)
        return (version.major, version.minor, version.patch)[index]

    return get


def _as_integer(value: Any) -> int:
    number = _as_quantity(value)
    if number.denominator != 1 or abs(number) >= 2**63:
        raise _CelError(f"{_fraction_text(number)} is not representable as an integer")
    return int(number)


# The quantity and semver libraries of the Kubernetes CEL environment that DRA selectors use
# (k8s.io/apiserver/pkg/cel/library quantity.go and semverlib.go, docs/dra.md "Selectors").
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _parse_quantity,
    "isQuantity": _is(_parse_quantity),
    "semver": _parse_semver,
    "isSemver": _is(_parse_semver),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "add": lambda a, b: _quantity(_as_quantity(a) + _operand(b)),
    "sub": lambda a, b: _quantity(_as_quantity(a) - _operand(b)),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda a: float(_as_quantity(a)),
    "isInteger": lambda a: _as_quantity(a).denominator == 1 and abs(_as_quantity(a)) < 2**63,
    "sign": lambda a: (_as_quantity(a) > 0) - (_as_quantity(a) < 0),
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
}


# --- compiling selectors -------------------------------------------------------------------

# The domains an expression indexes (device.attributes["gpu.nvidia.com"]): the scheduler
# answers an absent domain with an empty map, the cel package with an error, so those domains
# are added empty to each device before it is evaluated.
_DOMAIN_INDEX = re.compile(r"""\b(?:attributes|capacity)\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]""")


# Every way an expression reads the device, when each is a plain field or one attribute or
# capacity of a literal domain: ``device.driver``, ``device.attributes["d"].name``. Then the
# expression depends on those values alone, and is evaluated once per distinct set of them.
_DEVICE = re.compile(r"\bdevice\b")
_READ = re.compile(
    r"""\bdevice\s*\.\s*(?:(driver|allowMultipleAllocations)\b|(attributes|capacity)\s*\[\s*"""
    r"""(?:"([^"\\]*)"|'([^'\\]*)')\s*\]\s*\.\s*([A-Za-z_]\w*))"""
)

Read = tuple[str, str, str]  # ("attributes" | "capacity", domain, id)


@dataclass(frozen=True, slots=True)
class _Compiled:
    program: Any  # cel.Program, or None when the expression did not compile
    problem: str | None
    domains: tuple[str, ...]
    # The attributes and capacities it reads, when it reads nothing else of the device.
    reads: tuple[Read, ...] | None = None
    # Whether it calls the Kubernetes functions (quantity(), semver(), compareTo()...).
    functions: bool = True


def _reads(expression: str) -> tuple[Read, ...] | None:
    found = _READ.findall(expression)
    if len(found) != len(_DEVICE.findall(expression)):
        return None  # the device is read whole somewhere (a macro over its maps, a binding)
    return tuple(sorted({(kind, a or b, ident) for _, kind, a, b, ident in found if kind}))


def _bind_to_map(expression: str) -> str:
    """Rewrite ``cel.bind(v, init, body)`` (cel-go's bindings extension) as ``[init].map(v,
    body)[0]``, which binds ``v`` the same way with macros the cel package has."""
    start = expression.find("cel.bind(")
    if start < 0:
        return expression
    args, end = _call_arguments(expression, start + len("cel.bind("))
    if len(args) != 3:
        return expression  # left as is: compiling it reports the mistake
    var, init, body = (a.strip() for a in args)
    rewritten = f"[{_bind_to_map(init)}].map({var}, {_bind_to_map(body)})[0]"
    return expression[:start] + rewritten + _bind_to_map(expression[end:])


def _call_arguments(text: str, index: int) -> tuple[list[str], int]:
    """The top-level arguments of a call whose ``(`` ends just before ``index``, and the index
    after its ``)``; strings and nested brackets are skipped whole."""
    args: list[str] = []
    depth, quote, current = 0, "", index
    i = index
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(text[current:i])
                return args, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[current:i])
            current = i + 1
        i += 1
    return [], len(text)


def _compile(expression: str) -> _Compiled:
    domains = tuple(sorted({a or b for a, b in _DOMAIN_INDEX.findall(expression)}))
    try:
        program = cel.compile(_bind_to_map(expression))
    except (ValueError, RuntimeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return _Compiled(None, f"CEL expression {expression!r} does not compile: {first}", ())
    calls = set(program.functions()) & set(_FUNCTIONS)
    return _Compiled(program, None, domains, _reads(expression), bool(calls))


class Selectors:
    """CEL selectors compiled once each, and evaluated on devices.

    An expression that reads a few attributes of a device (``device.driver``,
    ``device.attributes["gpu.nvidia.com"].type``) is evaluated once per distinct set of those
    values and remembered: thousands of GPUs of a few kinds cost a few evaluations. A
    snapshot built from the previous one shares its Selectors. Safe to share between the
    threads of one process: a race costs a second evaluation, never a wrong answer.
    """

    def __init__(self) -> None:
        self._compiled: dict[str, _Compiled] = {}
        self._known: dict[tuple[Any, ...], bool] = {}
        self._lock = Lock()
        self._local = threading.local()

    def problem(self, expression: str) -> str | None:
        """Why ``expression`` cannot be evaluated (it does not compile), or None."""
        return self._get(expression).problem

    def _get(self, expression: str) -> _Compiled:
        found = self._compiled.get(expression)
        if found is None:
            found = _compile(expression)
            with self._lock:
                self._compiled.setdefault(expression, found)
        return found

    def _context(self, device: Mapping[str, Any]) -> Any:
        # A Context with the functions registered costs more than most evaluations: one per
        # thread, its `device` variable replaced for each evaluation.
        context = getattr(self._local, "context", None)
        if context is None:
            context = self._local.context = cel.Context(None, _FUNCTIONS)
        context.add_variable("device", device)
        return context

    def _input(self, device: Device, compiled: _Compiled) -> tuple[Mapping[str, Any], Any]:
        """The `device` variable for ``compiled``, and the key of its result (None: none)."""
        if compiled.reads is None:
            value = device.cel_input
            missing = [d for d in compiled.domains if d not in value["attributes"]]
            missing_cap = [d for d in compiled.domains if d not in value["capacity"]]
            if missing or missing_cap:
                value = {
                    **value,
                    "attributes": {**{d: {} for d in missing}, **value["attributes"]},
                    "capacity": {**{d: {} for d in missing_cap}, **value["capacity"]},
                }
            return value, None
        # Only what it reads: a domain it indexes is there (empty when the device has none
        # of it, as in the scheduler), an attribute the device lacks is absent.
        maps: dict[str, dict[str, dict[str, Any]]] = {"attributes": {}, "capacity": {}}
        for domain in compiled.domains:
            maps["attributes"][domain] = {}
            maps["capacity"][domain] = {}
        key: list[Any] = [device.driver, device.allow_multiple_allocations]
        for kind, domain, ident in compiled.reads:
            found = device.cel_value(kind, domain, ident)
            if found is not None:
                maps[kind][domain][ident] = found
            # The type too: True == 1 in Python, not in CEL.
            key.append((type(found).__name__, _hashable(found)))
        value = {
            "driver": device.driver,
            "allowMultipleAllocations": device.allow_multiple_allocations,
            **maps,
        }
        return value, tuple(key)

    def evaluate(self, device: Device, expression: str) -> Match:
        """Does ``device`` pass ``expression``? A problem string when it cannot be told."""
        compiled = self._get(expression)
        if compiled.program is None:
            return Match(False, compiled.problem)
        value, key = self._input(device, compiled)
        if key is not None:
            known = self._known.get((expression, *key))
            if known is not None:
                return Match(known)
        try:
            if compiled.functions:
                result = compiled.program.execute(self._context(value))
            else:
                result = compiled.program.execute({"device": value})
        except Exception as err:  # the cel package raises several types for runtime errors
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            return Match(
                False,
                f"CEL expression {expression!r} fails on device {device.name} of "
                f"{device.driver}/{device.pool}: {reason}",
            )
        if not isinstance(result, bool):
            return Match(
                False,
                f"CEL expression {expression!r} gives {result!r} on device {device.name}, "
                "not true or false",
            )
        if key is not None:
            if len(self._known) > _KNOWN_MAX:
                self._known.clear()  # a bound on memory, whatever the cluster publishes
            self._known[(expression, *key)] = result
        return Match(result)

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


_KNOWN_MAX = 100_000


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted(value.items()))
    return value


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
