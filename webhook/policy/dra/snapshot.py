"""The DRA side of one inventory snapshot: classes, devices and claims read together, and the
classes' CEL selectors matched once.

CEL selectors are evaluated by ``webhook.policy.selectors``, the CEL environment of
k8s.io/dynamic-resource-allocation/cel (docs/cel.md). An expression that does not compile, or
fails at run time (which includes yielding no bool), is reported as a problem string and
matches nothing; a runtime failure is marked as one (``Match.aborts``): the scheduler aborts the
allocation of the claim on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

from webhook.policy.dra.objects import IMPLICIT_PREFIX, Allocation, Device, DeviceClass
from webhook.policy.dra.parse import (
    meta_name,
    parse_allocation,
    parse_device_class,
    parse_resource_slice,
)
from webhook.policy.errors import Diagnostic, warning
from webhook.policy.selectors import CelCompileError, CelRuntimeError, compile_selector


@dataclass(frozen=True, slots=True)
class Match:
    """Whether a device passes some selectors; ``problem`` says why a selector could not say.

    ``aborts``: the problem is a CEL runtime error, on which the scheduler aborts the claim's
    allocation (it never means "this device does not match", docs/cel.md).
    """

    matched: bool
    problem: str | None = None
    aborts: bool = False


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


def _latest_generation(
    slices: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Diagnostic]]:
    """The slices of each pool's newest generation; the scheduler ignores older ones while a
    driver replaces them, and a pool missing some of its slices is incomplete."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        key = (str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or ""))
        pools.setdefault(key, []).append(obj)
    kept: list[Mapping[str, Any]] = []
    problems: list[Diagnostic] = []
    for (driver, pool), members in sorted(pools.items()):

        def generation(obj: Mapping[str, Any]) -> int:
            return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)

        newest = max(generation(o) for o in members)
        current = [o for o in members if generation(o) == newest]
        kept += current
        expected = ((current[0].get("spec") or {}).get("pool") or {}).get("resourceSliceCount")
        if isinstance(expected, int) and expected != len(current):
            problems.append(
                warning(
                    f"pool {pool} of {driver}",
                    f"{len(current)} of its {expected} ResourceSlices published: its devices "
                    "may be incomplete",
                )
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
    read_problems: tuple[Diagnostic, ...] = ()
    # The ResourceClaimSpec of each ResourceClaim and ResourceClaimTemplate read, by (kind,
    # namespace, name): what a pod's spec.resourceClaims asks for (docs/dra-claims.md).
    claim_specs: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    selectors: Selectors = field(default_factory=Selectors, repr=False, compare=False)
    # Each ResourceSlice object read, by id: (the object, its devices, its problems). The next
    # snapshot reuses the devices of a slice that is the same object (the watch keeps an
    # unchanged object as it is), with what was evaluated on them.
    slices: Mapping[int, tuple[Mapping[str, Any], tuple[Device, ...], tuple[Diagnostic, ...]]] = (
        field(default_factory=dict, repr=False, compare=False)
    )
    _class_devices: dict[str, tuple[tuple[Device, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _lock: Lock = field(default_factory=Lock, repr=False, compare=False)
    # Answers derived from this snapshot (what a served name offers, the devices a quota
    # weight reads), so that the pods of one template pay the CEL once.
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
    def problems(self) -> tuple[Diagnostic, ...]:
        """What could not be read, and every class selector that cannot be evaluated."""
        out = dict.fromkeys(self.read_problems)
        for device_class in self.classes.values():
            for problem in self.class_devices(device_class.name)[1]:
                # The selector's problem names its expression and what is wrong with it.
                out.setdefault(warning("", problem), None)
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
                out[(kind, str(meta.get("namespace") or ""), meta_name(obj))] = spec
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
    ordered = sorted(device_classes, key=meta_name, reverse=True)
    ordered.sort(key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp") or ""))
    classes: dict[str, DeviceClass] = {}
    extended: dict[str, str] = {}
    problems: list[Diagnostic] = []
    for obj in ordered:
        parsed = parse_device_class(obj)
        classes[parsed.name] = parsed
        resource = parsed.extended_resource_name
        if resource:
            if resource in extended:
                problems.append(
                    warning(
                        f"DeviceClasses {extended[resource]} and {parsed.name} both serve "
                        f"{resource}",
                        f"the scheduler uses {parsed.name}",
                    )
                )
            extended[resource] = parsed.name
    slices, trouble = _latest_generation(resource_slices)
    problems += trouble
    devices: list[Device] = []
    read: dict[int, tuple[Mapping[str, Any], tuple[Device, ...], tuple[Diagnostic, ...]]] = {}
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
