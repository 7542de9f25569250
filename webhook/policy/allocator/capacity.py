"""Consumable capacity: a port of ``consumable_capacity.go`` of the incubating allocator
(k8s.io/dynamic-resource-allocation v0.36.2, ``structured/internal/incubating``):
``CmpRequestOverCapacity``, ``requestsContainNonExistCapacity``, ``calculateConsumedCapacity``,
``fillEmptyRequest``, ``roundUpRange``, ``roundUpValidValues``,
``GetConsumedCapacityFromRequest``, ``violatesPolicy``, ``violateValidRange``,
``violateValidValues``. Quantities are exact fractions; ``Value()`` (rounded up to an
integer) where upstream calls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from webhook.policy.dra import Capacity

ConsumedCapacity = dict[str, Fraction]


class CapacityError(ValueError):
    """A request for a capacity the device does not define."""


def cmp_request_over_capacity(
    current: Mapping[str, Fraction],
    requested: Mapping[str, Fraction] | None,
    capacity: Mapping[str, Capacity],
    allocating: Mapping[str, Fraction],
) -> bool:
    """``CmpRequestOverCapacity``: does the device have room for the request, on top of
    what is allocated (``current``) and being allocated (``allocating``)? Raises
    CapacityError when the request names a capacity the device lacks."""
    if requests_contain_non_exist_capacity(requested, capacity):
        raise CapacityError("some requested capacity has not been defined")
    clone = dict(current)
    for name, cap in capacity.items():
        consumed = calculate_consumed_capacity(
            None if requested is None else requested.get(name), cap
        )
        if violates_policy(consumed, cap):
            return False
        clone[name] = clone.get(name, Fraction(0)) + consumed + allocating.get(name, Fraction(0))
        if clone[name] > cap.value:
            return False
    return True


def requests_contain_non_exist_capacity(
    requested: Mapping[str, Fraction] | None, capacity: Mapping[str, Capacity]
) -> bool:
    """``requestsContainNonExistCapacity``."""
    return requested is not None and any(name not in capacity for name in requested)


def calculate_consumed_capacity(requested: Fraction | None, cap: Capacity) -> Fraction:
    """``calculateConsumedCapacity``: the request rounded up as the policy says."""
    if requested is None:
        return fill_empty_request(cap)
    if cap.valid_range is not None and cap.valid_range[0] is not None:
        return round_up_range(requested, cap.valid_range)
    if cap.valid_values:
        return round_up_valid_values(requested, cap.valid_values)
    return requested


def fill_empty_request(cap: Capacity) -> Fraction:
    """``fillEmptyRequest``: the policy's default, else the whole capacity."""
    return cap.default if cap.default is not None else cap.value


def _value(quantity: Fraction) -> int:
    # resource.Quantity.Value(): the value rounded up to an integer.
    return math.ceil(quantity)


def round_up_range(
    requested: Fraction, valid_range: tuple[Fraction | None, Fraction | None, Fraction | None]
) -> Fraction:
    """``roundUpRange``: at least ``min``, then up to the next step."""
    low, _, step = valid_range
    assert low is not None
    if requested < low:
        return low
    if step is None:
        return requested
    added = _value(requested) - _value(low)
    n, mod = divmod(added, _value(step))
    if mod != 0:
        n += 1
    return Fraction(_value(low) + _value(step) * n)


def round_up_valid_values(requested: Fraction, valid_values: tuple[Fraction, ...]) -> Fraction:
    """``roundUpValidValues``: the first valid value at least as large."""
    for value in valid_values:
        if requested <= value:
            return value
    return requested


def get_consumed_capacity_from_request(
    requested: Mapping[str, Fraction] | None, capacity: Mapping[str, Capacity]
) -> ConsumedCapacity:
    """``GetConsumedCapacityFromRequest``: what one allocation consumes of each capacity."""
    return {
        name: calculate_consumed_capacity(None if requested is None else requested.get(name), cap)
        for name, cap in capacity.items()
    }


def violates_policy(requested: Fraction, cap: Capacity) -> bool:
    """``violatesPolicy``: outside the range or its steps, or not a valid value."""
    has_policy = cap.default is not None or cap.valid_range is not None or cap.valid_values
    if not has_policy:
        return False
    if cap.default is not None and requested == cap.default:
        return False
    if cap.valid_range is not None:
        return violate_valid_range(requested, cap.valid_range)
    if cap.valid_values:
        return violate_valid_values(requested, cap.valid_values)
    return False


def violate_valid_range(
    requested: Fraction, valid_range: tuple[Fraction | None, Fraction | None, Fraction | None]
) -> bool:
    """``violateValidRange``."""
    low, high, step = valid_range
    if high is not None and requested > high:
        return True
    if step is not None:
        # Go's % keeps the dividend's sign; the request is at least min here.
        added = _value(requested) - _value(low or Fraction(0))
        return math.fmod(added, _value(step)) != 0
    return False


def violate_valid_values(requested: Fraction, valid_values: tuple[Fraction, ...]) -> bool:
    """``violateValidValues``."""
    return all(requested != value for value in valid_values)
