"""The values of the Kubernetes CEL types in the ``cel`` package, and CEL's equality on them.

cel-go carries a quantity, a semantic version, an IP address, a CIDR or a URL as a value of
its own type (k8s.io/apiserver/pkg/cel/types.go); the ``cel`` package passes only plain values
to and from Python functions. Here each is a one-key map whose key names the type and whose
value is a canonical text, so that ``==`` between two of them compares what they denote
(``quantity("1Gi") == quantity("1024Mi")`` holds in Kubernetes, and here: both are
``{"__quantity__": "1073741824"}``). docs/cel.md says what this cannot tell apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import semver

from webhook.policy.quantity import QuantityError, quantity_value

QUANTITY = "__quantity__"
SEMVER = "__semver__"
IP = "__ip__"
CIDR = "__cidr__"
URL = "__url__"
TAGS = (QUANTITY, SEMVER, IP, CIDR, URL)

# k8s.io/apimachinery/pkg/api/resource ErrFormatWrong, what quantity("x") fails with.
QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class CelFunctionError(ValueError):
    """A Kubernetes CEL function's runtime error; the message is cel-go's."""


NO_SUCH_OVERLOAD = "no such overload"


def no_overload() -> CelFunctionError:
    """cel-go's answer to a function applied to a value of a type it does not take."""
    return CelFunctionError(NO_SUCH_OVERLOAD)


def fraction_text(value: Fraction) -> str:
    """An exact canonical text of ``value`` (``"3/2"``, ``"1073741824"``)."""
    return str(value.numerator) if value.denominator == 1 else str(value)


def quantity(value: Fraction) -> dict[str, str]:
    """A quantity as a CEL value."""
    return {QUANTITY: fraction_text(value)}


def version(value: semver.Version) -> dict[str, str]:
    """A semantic version as a CEL value."""
    return {SEMVER: str(value)}


def tag_of(value: Any) -> str | None:
    """The Kubernetes type ``value`` carries (QUANTITY, SEMVER...), None for a plain value."""
    if isinstance(value, Mapping) and len(value) == 1:
        (key,) = value
        if key in TAGS:
            return str(key)
    return None


def as_quantity(value: Any) -> Fraction:
    """The value of a quantity; ``no such overload`` for anything else."""
    if tag_of(value) != QUANTITY:
        raise no_overload()
    return Fraction(value[QUANTITY])


def as_semver(value: Any) -> semver.Version:
    """The version of a semver value; ``no such overload`` for anything else."""
    if tag_of(value) != SEMVER:
        raise no_overload()
    return semver.Version.parse(value[SEMVER])


def parse_quantity(text: Any) -> Fraction:
    """``resource.ParseQuantity``: a CelFunctionError with its message when ``text`` is none."""
    if not isinstance(text, str):
        raise no_overload()
    if not text or text != text.strip():
        raise CelFunctionError(QUANTITY_FORMAT)
    try:
        return quantity_value(text)
    except QuantityError:
        raise CelFunctionError(QUANTITY_FORMAT) from None


def is_int(value: Any) -> bool:
    """A CEL int (Python's bool is an int; CEL's is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def as_string(value: Any) -> str:
    """A CEL string argument; ``no such overload`` for anything else."""
    if not isinstance(value, str):
        raise no_overload()
    return value


def as_int(value: Any) -> int:
    """A CEL int argument; ``no such overload`` for anything else."""
    if not is_int(value):
        raise no_overload()
    return int(value)


def as_list(value: Any) -> list[Any]:
    """A CEL list argument; ``no such overload`` for anything else."""
    if not isinstance(value, list | tuple):
        raise no_overload()
    return list(value)


def is_number(value: Any) -> bool:
    """A CEL int, uint or double."""
    return is_int(value) or isinstance(value, float)


def equal(a: Any, b: Any) -> bool:
    """CEL's ``==`` (cel-go heterogeneous equality): numbers by value whatever their type,
    bool never equal to a number, lists and maps element by element."""
    if is_number(a) and is_number(b):
        return bool(a == b)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            other = [v for k, v in b.items() if equal(k, key)]
            if not other or not equal(value, other[0]):
                return False
        return True
    return type(a) is type(b) and bool(a == b)


def compare(a: Any, b: Any) -> int:
    """CEL's ordering of two comparable values (numbers across types, strings, bytes, bools,
    timestamps, durations): -1, 0 or 1; ``no such overload`` for any other pair."""
    same_kind = (is_number(a) and is_number(b)) or (isinstance(a, bool) and isinstance(b, bool))
    if same_kind:
        pass
    elif type(a) is not type(b) or isinstance(a, list | tuple | Mapping) or a is None:
        raise no_overload()
    try:
        return int((a > b) - (a < b))
    except TypeError:
        raise no_overload() from None
