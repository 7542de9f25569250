"""DRA device selectors in the CEL environment of k8s.io/dynamic-resource-allocation/cel.

``compile_selector(expression)`` checks an expression as the API server and kube-scheduler
compile it (docs/cel.md, "The environment"), and ``CompiledSelector.matches(device)`` evaluates
it on the ``device`` variable the scheduler builds (compile.go ``DeviceMatches``):
``device.driver``, ``device.allowMultipleAllocations``, ``device.attributes[domain][id]`` and
``device.capacity[domain][id]``, where a name without a domain is in the driver's, and an
unknown domain reads as an empty map. A runtime error (``no such key: model``) or a result that
is no bool raises ``CelRuntimeError``: the scheduler then aborts the allocation of the claim
("claim ...: selector #0: CEL runtime error: ..."); it never means "this device does not match".

The expressions run on the ``cel`` package with the Kubernetes functions it lacks registered
(``library``, ``net``). What it cannot express (two-variable comprehensions,
``sortBy``, ``.?`` optional selection, the ``format`` library) fails to compile here with a
message that says so, rather than evaluating differently from the scheduler.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, Protocol

import semver

from webhook.policy.selectors import library as cel_library
from webhook.policy.selectors.source import (
    Read,
    bind_to_map,
    check_source,
    compile_message,
    domains_indexed,
    reads_of,
    undeclared,
)
from webhook.policy.selectors.values import (
    NO_SUCH_OVERLOAD,
    CelFunctionError,
    quantity,
    version,
)

# The cel package logs a warning for each exception a registered function raises; here such
# an exception is the result of an evaluation (a runtime error the caller reports), not news.
logging.getLogger("cel").setLevel(logging.ERROR)

Attribute = int | bool | str | semver.Version


class CelCompileError(ValueError):
    """An expression the API server refuses and the scheduler cannot compile."""


class CelRuntimeError(RuntimeError):
    """An expression that fails on a device: the scheduler aborts the claim's allocation."""


class HasValue(Protocol):
    """A capacity of a device: its value."""

    @property
    def value(self) -> Fraction:
        """The capacity's quantity."""
        ...


class DeviceLike(Protocol):
    """What a selector reads of a device (``dra.Device`` is one)."""

    @property
    def driver(self) -> str:
        """The driver, the domain of every attribute and capacity named without one."""
        ...

    @property
    def attributes(self) -> Mapping[str, Attribute]:
        """Attributes as published: ``productName`` or ``gpu.nvidia.com/productName``."""
        ...

    @property
    def capacity(self) -> Mapping[str, HasValue]:
        """Capacities as published, each with its ``value``."""
        ...

    @property
    def allow_multiple_allocations(self) -> bool:
        """``allowMultipleAllocations`` (consumable capacity)."""
        ...


# One outcome per distinct set of the values an expression reads: a bound on memory.
_MEMO_MAX = 100_000

Outcome = bool | CelRuntimeError


@dataclass(frozen=True)
class CompiledSelector:
    """One compiled selector; ``matches`` evaluates it on a device.

    An expression that reads only ``device.driver``, ``device.allowMultipleAllocations`` and
    attributes or capacities of literal domains is evaluated once per distinct set of those
    values and remembered: thousands of GPUs of a few kinds cost a few evaluations.
    """

    expression: str
    _program: Any = field(repr=False, compare=False)
    _domains: tuple[str, ...] = field(repr=False, compare=False)
    _reads: tuple[Read, ...] | None = field(repr=False, compare=False)
    # The library functions it calls (registered on its Context), by cel-go name.
    _functions: tuple[str, ...] = field(repr=False, compare=False)
    _memo: dict[tuple[Any, ...], Outcome] = field(default_factory=dict, repr=False, compare=False)

    def matches(self, device: DeviceLike) -> bool:
        """Whether ``device`` passes; CelRuntimeError when the evaluation fails."""
        if self._reads is None:
            outcome = self._run(self._full_input(device))
        else:
            raw = [_lookup(device, read) for read in self._reads]
            # The type too: True == 1 in Python, not in CEL.
            key = (
                device.driver,
                device.allow_multiple_allocations,
                *((type(r).__name__, r) for r in raw),
            )
            found = self._memo.get(key)
            if found is None:
                found = self._run(self._read_input(device, raw))
                if len(self._memo) > _MEMO_MAX:
                    self._memo.clear()
                self._memo[key] = found
            outcome = found
        if isinstance(outcome, CelRuntimeError):
            raise CelRuntimeError(str(outcome))
        return outcome

    def _run(self, device: Mapping[str, Any]) -> Outcome:
        try:
            if self._functions:
                result = self._program.execute(_context(device, self._functions))
            else:
                result = self._program.execute({"device": device})
        except Exception as err:  # the cel package raises several types for runtime errors
            return CelRuntimeError(_runtime_message(err))
        if not isinstance(result, bool):
            kind = _cel_type(result)
            return CelRuntimeError(
                f"CEL result of type {kind} could not be converted to bool: type conversion "
                f"error from '{kind}' to 'bool'"
            )
        return result

    def _full_input(self, device: DeviceLike) -> Mapping[str, Any]:
        value = _device_input(device)
        # The scheduler's maps answer an unknown domain with an empty map (compile.go,
        # newStringInterfaceMapWithDefault); the cel package's answer no such key, so the
        # domains this expression indexes, and the driver's, are there, empty if need be.
        wanted = (*self._domains, device.driver)
        attributes, capacity = value["attributes"], value["capacity"]
        if all(d in attributes and d in capacity for d in wanted):
            return value
        empty: dict[str, Any] = {}
        return {
            **value,
            "attributes": {**{d: empty for d in wanted}, **attributes},
            "capacity": {**{d: empty for d in wanted}, **capacity},
        }

    def _read_input(self, device: DeviceLike, raw: list[Any]) -> Mapping[str, Any]:
        # Only what the expression reads: a domain it indexes is there (empty when the device
        # has none of it, as in the scheduler), an attribute the device lacks is absent.
        maps: dict[str, dict[str, dict[str, Any]]] = {
            "attributes": {d: {} for d in (*self._domains, device.driver)},
            "capacity": {d: {} for d in (*self._domains, device.driver)},
        }
        for (kind, domain, ident), value in zip(self._reads or (), raw, strict=True):
            if value is not None:
                maps[kind][domain][ident] = _cel_value(value)
        return {
            "driver": device.driver,
            "allowMultipleAllocations": device.allow_multiple_allocations,
            **maps,
        }


def compile_selector(expression: str) -> CompiledSelector:
    """``expression`` compiled; CelCompileError with the API server's words when it is not
    a selector the scheduler could evaluate. Remembered per expression, failures too (a
    broken class selector is met once per device)."""
    found = _compiled(expression)
    if isinstance(found, CelCompileError):
        raise CelCompileError(str(found))
    return found


def clear_cache() -> None:
    """Forget every compiled selector and what was remembered of its evaluations."""
    _compiled.cache_clear()


@lru_cache(maxsize=4096)
def _compiled(expression: str) -> CompiledSelector | CelCompileError:
    try:
        return _compile(expression)
    except CelCompileError as err:
        return err


def _compile(expression: str) -> CompiledSelector:
    problem = check_source(expression)
    if problem is not None:
        raise CelCompileError(problem)
    # Imported here, once: the cel package loads its REPL's libraries (prompt_toolkit, rich)
    # with it, about a third of a second that a process judging no CEL selector (most CLI
    # commands, most webhook workers) need not pay.
    import cel

    try:
        program = cel.compile(bind_to_map(expression))
    except (ValueError, RuntimeError) as err:
        raise CelCompileError(compile_message(str(err))) from None
    problem = undeclared(expression, program.functions(), program.variables())
    if problem is not None:
        raise CelCompileError(problem)
    # Namespaced functions are reported by their last name (strings.quote as "quote").
    reported = set(program.functions())
    calls = tuple(sorted(n for n in cel_library.FUNCTIONS if n.rsplit(".", 1)[-1] in reported))
    if "device" not in program.variables():
        _check_constant(program)
    return CompiledSelector(
        expression,
        program,
        domains_indexed(expression),
        reads_of(expression),
        calls,
    )


def _check_constant(program: Any) -> None:
    """cel-go knows the type of an expression that reads no variable (``1``, ``"a" + "b"``)
    and refuses one that is no bool at compile time; evaluating it tells the same here. A
    runtime error is left for ``matches``, as cel-go leaves it."""
    try:
        result = program.execute(_context({}, tuple(cel_library.FUNCTIONS)))
    except Exception:  # the cel package raises several types for runtime errors
        return
    if not isinstance(result, bool):
        raise CelCompileError(f"must evaluate to bool or the unknown type, not {_cel_type(result)}")


# --- the device variable ------------------------------------------------------------------


def _split(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(value: Attribute) -> Any:
    if isinstance(value, semver.Version):
        return version(value)
    return value


def _cached(device: DeviceLike, name: str) -> Any:
    # Remembered on the device when it takes attributes (dra.Device does): a device is
    # evaluated by several selectors, and kept from one snapshot to the next.
    store = getattr(device, "__dict__", None)
    return None if store is None else store.get(name)


def _remember(device: DeviceLike, name: str, value: Any) -> None:
    store = getattr(device, "__dict__", None)
    if store is not None:
        store[name] = value


def _device_input(device: DeviceLike) -> Mapping[str, Any]:
    found = _cached(device, "_cel_input")
    if found is not None:
        return found  # type: ignore[no-any-return]
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in device.attributes.items():
        domain, ident = _split(key, device.driver)
        attributes.setdefault(domain, {})[ident] = _attribute_value(value)
    capacity: dict[str, dict[str, Any]] = {}
    for key, cap in device.capacity.items():
        domain, ident = _split(key, device.driver)
        capacity.setdefault(domain, {})[ident] = quantity(cap.value)
    built = {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": attributes,
        "capacity": capacity,
    }
    _remember(device, "_cel_input", built)
    return built


def _lookup(device: DeviceLike, read: Read) -> Any:
    """The raw attribute (int, bool, str, semver.Version) or capacity value (Fraction) that
    ``device.<kind>[domain].<id>`` reads, None when the device has none."""
    kind, domain, ident = read
    source: Mapping[str, Any] = device.attributes if kind == "attributes" else device.capacity
    found = source.get(f"{domain}/{ident}")
    if found is None and domain == device.driver:
        found = source.get(ident)
    if found is None or kind == "attributes":
        return found
    return found.value


def _cel_value(raw: Any) -> Any:
    if isinstance(raw, Fraction):
        return quantity(raw)
    return _attribute_value(raw)


_local = threading.local()


def _context(device: Mapping[str, Any], functions: tuple[str, ...]) -> Any:
    # A Context costs more than most evaluations, and more with each function registered:
    # one per thread and set of functions, its `device` variable replaced for each evaluation.
    contexts: dict[tuple[str, ...], Any] | None = getattr(_local, "contexts", None)
    if contexts is None:
        contexts = _local.contexts = {}
    context = contexts.get(functions)
    if context is None:
        import cel  # loaded by _compile already: a selector is compiled before it runs

        context = contexts[functions] = cel.Context(
            None, {name: cel_library.FUNCTIONS[name] for name in functions}
        )
    context.add_variable("device", device)
    return context


# --- runtime errors in cel-go's words -----------------------------------------------------

_FUNCTION_FAILED = re.compile(r"Python function call failed: (\w+): (.*?)\. Check function", re.S)
_FUNCTION_ERROR = re.compile(r"Function '[^']*' error: (.*?)(?:\. Check function|$)", re.S)


def _runtime_message(err: Exception) -> str:
    text = str(err)
    if isinstance(err, KeyError):
        return f"no such key: {text.strip(chr(34) + chr(39))}"
    if isinstance(err, TypeError):
        return NO_SUCH_OVERLOAD
    if isinstance(err, ZeroDivisionError):
        return "modulus by zero" if "modulo" in text or "remainder" in text else "division by zero"
    if isinstance(err, OverflowError):
        return "integer overflow"
    if isinstance(err, IndexError):
        return f"index out of range: {text.rsplit(':', 1)[-1].strip()}"
    failed = _FUNCTION_FAILED.search(text)
    if failed is not None:
        return failed.group(2) if failed.group(1) == CelFunctionError.__name__ else text
    other = _FUNCTION_ERROR.search(text)
    if other is not None:
        return other.group(1).splitlines()[0]
    return text.splitlines()[0] if text else type(err).__name__


def _cel_type(value: Any) -> str:
    if value is None:
        return "null_type"
    names = {int: "int", float: "double", str: "string", bytes: "bytes", list: "list"}
    if isinstance(value, Mapping):
        return "map"
    return names.get(type(value), type(value).__name__)
