"""Kubernetes quantities: GPU counts, and the memory a process was measured to use.

The API server accepts only integer quantities for extended resources ("must be an integer"),
but a manifest can spell an integer many ways: ``1``, ``"1"``, ``'2'``, ``"1000m"``, ``1.0``.
We parse the full quantity grammar so that the message for ``"500m"`` or ``0.5`` can say what
the value means, not merely that it failed to parse. Memory (``gpu-policy plan``'s measurements)
goes through the same grammar and units, in the spellings nvidia-smi uses too.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from webhook.policy.text import shown

#: An exact quantity as the demand adds them up: an ``int`` when the value is whole (every GPU
#: count, most memory and CPU), else a ``Fraction``. The two compare, hash and add as one
#: number, and a whole value as an ``int`` is added and compared in C, where a ``Fraction``
#: runs Python code (and the ``numbers`` ABC checks) for every ``+``, ``<=`` and ``==``: a
#: review after a pause pays for each function it runs (docs/performance.md, "Eighth round").
Quantity = int | Fraction

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


# A measured memory: a number and an optional unit, in Kubernetes' spelling (Mi, G) or
# nvidia-smi's (MiB, GB, KB), with spaces allowed around them.
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[KMGT]B)?\s*$")


class QuantityError(ValueError):
    """A GPU quantity that Kubernetes or the device plugin would refuse; the text says why."""


def quantity_value(raw: object) -> Fraction:
    """The exact value of a Kubernetes quantity (``"80Gi"``, ``"500m"``, ``2``, ``"1e3"``).

    Raises QuantityError for anything that is not one.
    """
    if isinstance(raw, bool) or raw is None:
        raise QuantityError(f"{shown(raw)} is not a quantity")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        if math.isnan(raw) or raw in (float("inf"), float("-inf")):
            raise QuantityError(f"{shown(raw)} is not a quantity")
        return Fraction(raw)
    if not isinstance(raw, str):
        raise QuantityError(f"{shown(raw)} is not a quantity")
    return _short_value(raw) if len(raw) <= _CACHED_LENGTH else _string_value(raw)


def _string_value(raw: str) -> Fraction:
    match = _QUANTITY.match(raw.strip())
    if match is None:
        raise QuantityError(f"{shown(raw)} is not a quantity")
    value = Fraction(match["num"])
    suffix = match["suffix"]
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    elif suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{shown(raw)} is out of range")
        value *= Fraction(10) ** exponent
    return -value if match["sign"] == "-" else value


# Every review reads each container's quantities ("1", "500m", "2Gi"), and a cluster's pods
# spell few distinct ones: a short string's value is worked out once (a Fraction is
# immutable; ~3-5 us a string otherwise). A string that is no quantity raises each time, and
# the bounds on the count and the length keep what a client sends from growing the cache.
_CACHED_LENGTH = 32
_short_value = functools.lru_cache(maxsize=4096)(_string_value)


def _exact(raw: str) -> Quantity:
    value = _string_value(raw)
    return value.numerator if value.denominator == 1 else value


# As _short_value, but whole values as int (the same bounds keep the cache small).
_short_exact = functools.lru_cache(maxsize=4096)(_exact)


def exact_quantity(raw: object) -> Quantity:
    """The exact value of a Kubernetes quantity, as :func:`quantity_value` reads it, but an
    ``int`` when it is whole (``"2"``, ``"1Gi"``, ``"1000m"``, ``2.0``): the same number,
    cheaper to add up and compare. Raises QuantityError for anything that is not a quantity."""
    if type(raw) is int:  # not bool, which quantity_value refuses
        return raw
    if type(raw) is str and len(raw) <= _CACHED_LENGTH:
        return _short_exact(raw)
    value = quantity_value(raw)
    return value.numerator if value.denominator == 1 else value


def parse_gpu_quantity(raw: object) -> int:
    """Return the whole, positive number of devices ``raw`` asks for.

    Raises QuantityError for anything the API server or the device plugin would refuse:
    fractions (``"500m"``, ``0.5``), zero, negative numbers and text that is no quantity.
    """
    # Fast path: the overwhelming majority of manifests say 1 or "1".
    if type(raw) is int and raw > 0:
        return raw
    if type(raw) is str and raw.isdigit() and raw[0] != "0":
        return int(raw)
    value = quantity_value(raw)
    if value.denominator != 1:
        raise QuantityError(
            f"{shown(raw)} is {float(value):g} of a device: GPUs are whole devices, "
            "ask for an integer (time-slicing, MPS or MIG share a GPU, not a fraction of one)"
        )
    if value == 0:
        raise QuantityError(f"{shown(raw)} asks for no device: remove the resource instead")
    if value < 0:
        raise QuantityError(f"{shown(raw)} is negative")
    return int(value)


def parse_memory_mib(raw: object) -> int:
    """A memory quantity in MiB, rounded up: ``4621Mi``, ``4621MiB``, ``4.5Gi``, ``5G``, ``4621``.

    A bare number is MiB (nvidia-smi's unit). Decimal units (K, M, G, T) are powers of 1000.
    Raises QuantityError for anything else, and for no memory at all.
    """
    if isinstance(raw, bool):
        raise QuantityError(f"{raw!r} is not a memory quantity")
    match = _MEMORY.match(str(raw))
    if match is None:
        raise QuantityError(f"{raw!r} is not a memory quantity such as 4621Mi")
    unit = (match[2] or "Mi").removesuffix("B")
    mib = math.ceil(quantity_value(match[1] + ("k" if unit == "K" else unit)) / _BINARY["Mi"])
    if mib <= 0:
        raise QuantityError(f"{raw!r}: a process uses some memory")
    return mib
