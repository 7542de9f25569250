"""Claim constraints: a port of the incubating allocator's ``matchAttributeConstraint``
(allocator_incubating.go) and ``distinctAttributeConstraint`` (constraint.go), with
``lookupAttribute``; k8s.io/dynamic-resource-allocation v0.36.2,
``structured/internal/incubating``. Constraints are monotonic: once one refuses a device,
adding more devices never makes it accept again, so the search backtracks at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

import semver

from webhook.policy.dra import Attribute, Device


class Constraint(Protocol):
    """``constraint``: ``add`` is called for each device about to be allocated, ``remove``
    once for each successful ``add`` when the search backtracks."""

    def add(self, request_name: str, sub_request_name: str, device: Device) -> bool:
        """Track the device if it satisfies the constraint; False when it does not."""

    def remove(self, request_name: str, sub_request_name: str, device: Device) -> None:
        """Forget a device added before."""


def lookup_attribute(device: Device, attribute_name: str) -> Attribute | None:
    """``lookupAttribute``: the attribute by its fully qualified name, or by its id when the
    domain is the device's driver."""
    found = device.attributes.get(attribute_name)
    if found is not None:
        return found
    domain, sep, ident = attribute_name.partition("/")
    if not sep or domain != device.driver:
        return None
    return device.attributes.get(ident)


def _kind(value: Attribute) -> str:
    # DeviceAttribute has one of four typed fields; True is not 1 there.
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, semver.Version):
        return "version"
    return "string"


def _same(a: Attribute, b: Attribute) -> bool:
    # Versions compare as strings: semver 2.0.0 strings are minimal (matchAttribute's note).
    return _kind(a) == _kind(b) and str(a) == str(b)


class _AttributeConstraint(ABC):
    """What both constraints share: the requests they cover, the attribute they compare, and
    the devices added. A device of a covered request without the attribute fails either."""

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        self.request_names = request_names
        self.attribute_name = attribute_name
        self.num_devices = 0

    def _covers(self, request_name: str, sub_request_name: str) -> bool:
        """``matches``: no names cover every request; a name covers its subrequests too."""
        names = self.request_names
        if not names:
            return True
        if not sub_request_name:
            return request_name in names
        return request_name in names or f"{request_name}/{sub_request_name}" in names

    def add(self, request_name: str, sub_request_name: str, device: Device) -> bool:
        """See :class:`Constraint`."""
        if not self._covers(request_name, sub_request_name):
            return True
        attribute = lookup_attribute(device, self.attribute_name)
        if attribute is None or not self._admit(request_name, attribute):
            return False
        self.num_devices += 1
        return True

    def remove(self, request_name: str, sub_request_name: str, device: Device) -> None:
        """See :class:`Constraint`."""
        if not self._covers(request_name, sub_request_name):
            return
        self._forget(request_name)
        self.num_devices -= 1

    @abstractmethod
    def _admit(self, request_name: str, attribute: Attribute) -> bool:
        """Track ``attribute`` of a device of ``request_name`` if it keeps the constraint."""

    @abstractmethod
    def _forget(self, request_name: str) -> None:
        """Undo what :meth:`_admit` tracked for a device of ``request_name``."""


class MatchAttributeConstraint(_AttributeConstraint):
    """``matchAttributeConstraint``: every device has the attribute, all with one value."""

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        super().__init__(request_names, attribute_name)
        self.attribute: Attribute | None = None

    def _admit(self, request_name: str, attribute: Attribute) -> bool:
        if self.num_devices == 0:
            self.attribute = attribute
            return True
        assert self.attribute is not None
        return _same(attribute, self.attribute)

    def _forget(self, request_name: str) -> None:
        # Upstream keeps the value until the count is back to 0: the next device then sets it.
        return None


class DistinctAttributeConstraint(_AttributeConstraint):
    """``distinctAttributeConstraint``: every device has the attribute, no two alike.

    As upstream, values are kept per request name: a second device of one request replaces
    the first one's value in the set it compares against.
    """

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        super().__init__(request_names, attribute_name)
        self.attributes: dict[str, Attribute] = {}

    def _admit(self, request_name: str, attribute: Attribute) -> bool:
        if self.num_devices > 0 and not self.matches_attribute(attribute):
            return False
        self.attributes[request_name] = attribute
        return True

    def _forget(self, request_name: str) -> None:
        self.attributes.pop(request_name, None)

    def matches_attribute(self, attribute: Attribute) -> bool:
        """``matchesAttribute``: no value tracked equals ``attribute``."""
        return not any(_same(attribute, seen) for seen in self.attributes.values())
