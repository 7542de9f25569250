"""Claim constraints: a port of the incubating allocator's ``matchAttributeConstraint``
(allocator_incubating.go) and ``distinctAttributeConstraint`` (constraint.go), with
``lookupAttribute``; k8s.io/dynamic-resource-allocation v0.36.2,
``structured/internal/incubating``. Constraints are monotonic: once one refuses a device,
adding more devices never makes it accept again, so the search backtracks at once.
"""

from __future__ import annotations

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


def _applies(names: frozenset[str], request_name: str, sub_request_name: str) -> bool:
    """``matches``: a constraint naming a request covers its subrequests too."""
    if not sub_request_name:
        return request_name in names
    return request_name in names or f"{request_name}/{sub_request_name}" in names


class MatchAttributeConstraint:
    """``matchAttributeConstraint``: every device has the attribute, all with one value."""

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        self.request_names = request_names
        self.attribute_name = attribute_name
        self.attribute: Attribute | None = None
        self.num_devices = 0

    def add(self, request_name: str, sub_request_name: str, device: Device) -> bool:
        """See :class:`Constraint`."""
        if self.request_names and not _applies(self.request_names, request_name, sub_request_name):
            return True
        attribute = lookup_attribute(device, self.attribute_name)
        if attribute is None:
            return False
        if self.num_devices == 0:
            self.attribute = attribute
            self.num_devices = 1
            return True
        assert self.attribute is not None
        if not _same(attribute, self.attribute):
            return False
        self.num_devices += 1
        return True

    def remove(self, request_name: str, sub_request_name: str, device: Device) -> None:
        """See :class:`Constraint`."""
        if self.request_names and not _applies(self.request_names, request_name, sub_request_name):
            return
        self.num_devices -= 1


class DistinctAttributeConstraint:
    """``distinctAttributeConstraint``: every device has the attribute, no two alike.

    As upstream, values are kept per request name: a second device of one request replaces
    the first one's value in the set it compares against.
    """

    def __init__(self, request_names: frozenset[str], attribute_name: str) -> None:
        self.request_names = request_names
        self.attribute_name = attribute_name
        self.attributes: dict[str, Attribute] = {}
        self.num_devices = 0

    def add(self, request_name: str, sub_request_name: str, device: Device) -> bool:
        """See :class:`Constraint`."""
        if self.request_names and not _applies(self.request_names, request_name, sub_request_name):
            return True
        attribute = lookup_attribute(device, self.attribute_name)
        if attribute is None:
            return False
        if self.num_devices == 0:
            self.attributes[request_name] = attribute
            self.num_devices = 1
            return True
        if not self.matches_attribute(attribute):
            return False
        self.attributes[request_name] = attribute
        self.num_devices += 1
        return True

    def remove(self, request_name: str, sub_request_name: str, device: Device) -> None:
        """See :class:`Constraint`."""
        if self.request_names and not _applies(self.request_names, request_name, sub_request_name):
            return
        self.attributes.pop(request_name, None)
        self.num_devices -= 1

    def matches_attribute(self, attribute: Attribute) -> bool:
        """``matchesAttribute``: no value tracked equals ``attribute``."""
        return not any(_same(attribute, seen) for seen in self.attributes.values())
