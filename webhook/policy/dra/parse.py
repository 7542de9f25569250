"""Reading DeviceClass, ResourceSlice and ResourceClaim objects into the values of
``webhook.policy.dra.objects``.

What cannot be read (an attribute of an unknown kind, a capacity that is no quantity) is
reported as a problem string, beside the values that could be read.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from typing import Any

import semver

from webhook.policy.dra.objects import (
    Allocation,
    Attribute,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceClass,
    DeviceTaint,
    ResourceSlice,
)
from webhook.policy.errors import Diagnostic, warning
from webhook.policy.quantity import QuantityError, quantity_value

# --- parsing the objects -------------------------------------------------------------------


def meta_name(obj: Mapping[str, Any]) -> str:
    """The object's ``metadata.name``, ``?`` when it has none."""
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
        name=meta_name(obj),
        selectors=_selectors(spec),
        extended_resource_name=str(extended) if extended else None,
        config=config,
    )


def _attribute(raw: Any) -> Attribute | None:
    if type(raw) is dict and len(raw) == 1:
        # The usual: one typed value (thousands of devices, a few names each).
        for kind, value in raw.items():
            if kind == "string":
                return value  # type: ignore[no-any-return]
            if kind == "version":
                return _version(str(value))
    elif not isinstance(raw, Mapping):
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
    if type(raw) is dict and len(raw) == 1 and isinstance(raw.get("value"), str):
        # The usual: a value and no request policy, shared by every device that has it.
        return _plain_capacity(raw["value"])
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


@lru_cache(maxsize=4096)
def _plain_capacity(text: str) -> Capacity | None:
    value = _quantity_of(text)
    return None if value is None else Capacity(value)


def _counters(raw: Any) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for key, counter in (raw or {}).items() if isinstance(raw, Mapping) else ():
        value = _fraction((counter or {}).get("value")) if isinstance(counter, Mapping) else None
        if value is not None:
            out[str(key)] = value
    return out


_EXTRAS = frozenset(
    ("taints", "consumesCounters", "bindingConditions", "bindingFailureConditions", "bindsToNode")
)


def _device_extras(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a device the allocator reads besides attributes and capacity."""
    if _EXTRAS.isdisjoint(raw):
        return {}  # The usual: none of them, the defaults hold.
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


def parse_slice(obj: Mapping[str, Any]) -> tuple[ResourceSlice | None, list[Diagnostic]]:
    """One ResourceSlice object, and what could not be read in it (None without a driver or
    pool name)."""
    spec = obj.get("spec") or {}
    name = meta_name(obj)
    driver = str(spec.get("driver") or "")
    pool_spec = spec.get("pool") or {}
    pool = str(pool_spec.get("name") or "")
    here = f"ResourceSlice {name}"
    problems: list[Diagnostic] = []
    if not driver or not pool:
        return None, [warning(here, "no driver or pool name")]
    per_device = bool(spec.get("perDeviceNodeSelection"))
    devices = []
    for raw in spec.get("devices") or ():
        if not isinstance(raw, Mapping) or not raw.get("name"):
            problems.append(warning(here, "a device without a name"))
            continue
        # perDeviceNodeSelection: each device says where it is; otherwise the slice does.
        where = raw if per_device else spec
        attributes = {}
        for key, value in (raw.get("attributes") or {}).items():
            parsed = _attribute(value)
            if parsed is None:
                problems.append(
                    warning(
                        here,
                        f"attribute {key} has no value this webhook can read",
                        f"device {raw['name']}",
                    )
                )
                continue
            attributes[str(key)] = parsed
        capacity = {}
        for key, value in (raw.get("capacity") or {}).items():
            parsed_cap = _capacity(value)
            if parsed_cap is None:
                problems.append(
                    warning(here, f"capacity {key} is no quantity", f"device {raw['name']}")
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


def parse_resource_slice(obj: Mapping[str, Any]) -> tuple[list[Device], list[Diagnostic]]:
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
