"""The functions of the Kubernetes CEL environment that the ``cel`` package lacks.

Each is registered under cel-go's name and called either way CEL allows (``"A".lowerAscii()``
or ``lowerAscii("A")``); one Python function serves every overload of a name (``indexOf`` on
a string and on a list, ``compareTo`` on a quantity and on a semver) and dispatches on its
arguments as cel-go's overload resolution does. Errors carry cel-go's messages. Sources, per
group, in docs/cel.md:

- strings: github.com/google/cel-go ext/strings.go at ``StringsVersion(2)``;
- lists: k8s.io/apiserver/pkg/cel/library/lists.go and cel-go ext/lists.go at
  ``ListsVersion(3)``; sets: cel-go ext/sets.go;
- quantity, semver, regex: k8s.io/apiserver/pkg/cel/library quantity.go, semverlib.go,
  regex.go. IP, CIDR and URL: ``cel_net``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from functools import lru_cache
from itertools import pairwise
from typing import Any

import semver

from webhook.policy.selectors import net as cel_net
from webhook.policy.selectors import strings as cel_strings
from webhook.policy.selectors.values import (
    QUANTITY,
    SEMVER,
    CelFunctionError,
    as_int,
    as_list,
    as_quantity,
    as_semver,
    as_string,
    compare,
    equal,
    is_int,
    no_overload,
    parse_quantity,
    quantity,
    tag_of,
    version,
)

_INT64 = 2**63


# --- indexOf: strings and lists ------------------------------------------------------------


def _find(s: str, sub: str, start: int, last: bool) -> int:
    if sub == "":
        return start
    if start < 0:
        raise CelFunctionError(f"index out of range: {start}")
    if start >= len(s):
        return -1
    if last:
        return s.rfind(sub, 0, min(start, len(s) - len(sub)) + len(sub))
    return s.find(sub, start)


def index_of(target: Any, item: Any, offset: Any = None) -> int:
    """``<string>.indexOf(<string>[, <int>])`` and the lists library's ``<list>.indexOf(<T>)``."""
    if isinstance(target, list | tuple):
        if offset is not None:
            raise no_overload()
        return next((i for i, v in enumerate(target) if equal(v, item)), -1)
    s, sub = as_string(target), as_string(item)
    return _find(s, sub, 0 if offset is None else as_int(offset), last=False)


def last_index_of(target: Any, item: Any, offset: Any = None) -> int:
    """``<string>.lastIndexOf(<string>[, <int>])`` and ``<list>.lastIndexOf(<T>)``."""
    if isinstance(target, list | tuple):
        if offset is not None:
            raise no_overload()
        found = [i for i, v in enumerate(target) if equal(v, item)]
        return found[-1] if found else -1
    s, sub = as_string(target), as_string(item)
    if offset is None:
        if sub == "":
            return len(s)
        if len(s) < len(sub):
            return -1
        return _find(s, sub, len(s) - 1, last=True)
    return _find(s, sub, as_int(offset), last=True)


# --- lists (Kubernetes lists.go; cel-go ext/lists.go version 3; ext/sets.go) -----------------


def is_sorted(items: Any) -> bool:
    """``<list>.isSorted()``."""
    values = as_list(items)
    return all(compare(a, b) <= 0 for a, b in pairwise(values))


def sum_list(items: Any) -> Any:
    """``<list>.sum()``: 0 for an empty list; ints, uints, doubles or durations."""
    values = as_list(items)
    if not values:
        return 0
    total = values[0]
    for value in values[1:]:
        if type(value) is not type(total) or isinstance(total, bool | str | list | Mapping):
            raise no_overload()
        total = total + value
    if isinstance(total, bool | str | list | Mapping):
        raise no_overload()
    return total


def _extreme(name: str, sign: int) -> Callable[[Any], Any]:
    def pick(items: Any) -> Any:
        values = as_list(items)
        if not values:
            raise CelFunctionError(f"{name} called on empty list")
        best = values[0]
        for value in values[1:]:
            if compare(best, value) == sign:
                best = value
        compare(best, best)  # an incomparable single element is an error too
        return best

    pick.__doc__ = f"``<list>.{name}()``: an error on an empty list."
    return pick


def slice_list(items: Any, start: Any, end: Any) -> list[Any]:
    """``<list>.slice(<int>, <int>)``."""
    values, i, j = as_list(items), as_int(start), as_int(end)
    if i < 0 or j < 0:
        raise CelFunctionError(f"cannot slice({i}, {j}), negative indexes not supported")
    if i > j:
        raise CelFunctionError(
            f"cannot slice({i}, {j}), start index must be less than or equal to end index"
        )
    if j > len(values):
        raise CelFunctionError(f"cannot slice({i}, {j}), list is length {len(values)}")
    return values[i:j]


def flatten(items: Any, depth: Any = 1) -> list[Any]:
    """``<list>.flatten([<int>])``."""
    values, level = as_list(items), as_int(depth)
    if level < 0:
        raise CelFunctionError("level must be non-negative")
    out: list[Any] = []
    for value in values:
        if isinstance(value, list | tuple) and level > 0:
            out += flatten(list(value), level - 1)
        else:
            out.append(value)
    return out


def sort_list(items: Any) -> list[Any]:
    """``<list>.sort()``: elements of one comparable type."""
    values = as_list(items)
    if values and any(tag_of(v) is not None or isinstance(v, list | Mapping) for v in values):
        raise CelFunctionError("list elements must be comparable")
    if len({type(v) for v in values}) > 1:
        raise CelFunctionError("list elements must have the same type")
    return sorted(values)


def lists_range(count: Any) -> list[int]:
    """``lists.range(<int>)``: 0 .. n-1."""
    return list(range(as_int(count)))


def reverse(items: Any) -> list[Any]:
    """``<list>.reverse()`` (strings have no reverse below strings version 3)."""
    return as_list(items)[::-1]


def distinct(items: Any) -> list[Any]:
    """``<list>.distinct()``: first occurrences, by CEL equality."""
    out: list[Any] = []
    for value in as_list(items):
        if not any(equal(value, seen) for seen in out):
            out.append(value)
    return out


def sets_contains(items: Any, wanted: Any) -> bool:
    """``sets.contains(<list>, <list>)``: every element of the second is in the first."""
    have = as_list(items)
    return all(any(equal(w, h) for h in have) for w in as_list(wanted))


def sets_equivalent(a: Any, b: Any) -> bool:
    """``sets.equivalent(<list>, <list>)``: each contains the other."""
    return sets_contains(a, b) and sets_contains(b, a)


def sets_intersects(a: Any, b: Any) -> bool:
    """``sets.intersects(<list>, <list>)``: one element in common."""
    other = as_list(b)
    return any(any(equal(x, y) for y in other) for x in as_list(a))


# --- regex (Kubernetes regex.go) ---------------------------------------------------------------


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise CelFunctionError(f"Illegal regex: {err}") from None


def find(text: Any, pattern: Any) -> str:
    """``<string>.find(<string>)``: the first match, "" when none."""
    found = _regex(as_string(pattern)).search(as_string(text))
    return "" if found is None else found.group(0)


def find_all(text: Any, pattern: Any, limit: Any = -1) -> list[str]:
    """``<string>.findAll(<string>[, <int>])``: every match (at most ``limit`` if >= 0)."""
    n = as_int(limit)
    if n == 0:
        return []
    out = [m.group(0) for m in _regex(as_string(pattern)).finditer(as_string(text))]
    return out if n < 0 else out[:n]


# --- quantity and semver (Kubernetes quantity.go, semverlib.go) --------------------------------


def to_quantity(text: Any) -> dict[str, str]:
    """``quantity(<string>)``."""
    return quantity(parse_quantity(text))


def is_quantity(text: Any) -> bool:
    """``isQuantity(<string>)``."""
    try:
        parse_quantity(as_string(text))
    except CelFunctionError as err:
        if str(err) == "no such overload":
            raise
        return False
    return True


def _normalize(text: str) -> str:
    # semverlib.go normalizeAndParse: drop a "v", leading zeros, fill in minor and patch.
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            kept = part.lstrip("0")
            parts[i] = kept if kept and kept[0].isdigit() else "0" + kept
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise CelFunctionError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _parse_semver(text: Any, normalize: Any) -> semver.Version:
    s = as_string(text)
    if not isinstance(normalize, bool):
        raise no_overload()
    try:
        return semver.Version.parse(_normalize(s) if normalize else s)
    except ValueError as err:
        raise CelFunctionError(str(err)) from None


def to_semver(text: Any, normalize: Any = False) -> dict[str, str]:
    """``semver(<string>[, <bool> normalize])``."""
    return version(_parse_semver(text, normalize))


def is_semver(text: Any, normalize: Any = False) -> bool:
    """``isSemver(<string>[, <bool>])``."""
    try:
        _parse_semver(text, normalize)
    except CelFunctionError as err:
        if str(err) == "no such overload":
            raise
        return False
    return True


def compare_to(a: Any, b: Any) -> int:
    """``<quantity>.compareTo(<quantity>)`` and ``<semver>.compareTo(<semver>)``."""
    if tag_of(a) == SEMVER:
        return int(as_semver(a).compare(as_semver(b)))
    if tag_of(a) == QUANTITY:
        left, right = as_quantity(a), as_quantity(b)
        return (left > right) - (left < right)
    raise no_overload()


def _operand(value: Any) -> Fraction:
    return Fraction(value) if is_int(value) else as_quantity(value)


def as_integer(value: Any) -> int:
    """``<quantity>.asInteger()``: an error unless an int64."""
    number = as_quantity(value)
    if number.denominator != 1 or not -_INT64 <= number < _INT64:
        raise CelFunctionError("cannot convert value to integer")
    return int(number)


def is_integer(value: Any) -> bool:
    """``<quantity>.isInteger()``."""
    number = as_quantity(value)
    return number.denominator == 1 and -_INT64 <= number < _INT64


def _semver_part(index: int) -> Callable[[Any], int]:
    def get(value: Any) -> int:
        part = (as_semver(value).major, as_semver(value).minor, as_semver(value).patch)
        return int(part[index])

    return get


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    # lists (Kubernetes) and ext lists version 3, sets
    "isSorted": is_sorted,
    "sum": sum_list,
    "min": _extreme("min", 1),
    "max": _extreme("max", -1),
    "slice": slice_list,
    "flatten": flatten,
    "sort": sort_list,
    "lists.range": lists_range,
    "reverse": reverse,
    "distinct": distinct,
    "sets.contains": sets_contains,
    "sets.equivalent": sets_equivalent,
    "sets.intersects": sets_intersects,
    # regex
    "find": find,
    "findAll": find_all,
    # quantity and semver
    "quantity": to_quantity,
    "isQuantity": is_quantity,
    "semver": to_semver,
    "isSemver": is_semver,
    "compareTo": compare_to,
    "isGreaterThan": lambda a, b: compare_to(a, b) > 0,
    "isLessThan": lambda a, b: compare_to(a, b) < 0,
    "add": lambda a, b: quantity(as_quantity(a) + _operand(b)),
    "sub": lambda a, b: quantity(as_quantity(a) - _operand(b)),
    "asInteger": as_integer,
    "asApproximateFloat": lambda a: float(as_quantity(a)),
    "isInteger": is_integer,
    "sign": lambda a: (as_quantity(a) > 0) - (as_quantity(a) < 0),
    "major": _semver_part(0),
    "minor": _semver_part(1),
    "patch": _semver_part(2),
    **cel_strings.FUNCTIONS,
    **cel_net.FUNCTIONS,
}
