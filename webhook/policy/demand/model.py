"""The demand model: claims as the structured allocator reads them, and a pod's demand.

The types mirror ``resource.k8s.io/v1`` ``ResourceClaimSpec`` (``DeviceRequest``,
``ExactDeviceRequest``, ``DeviceSubRequest``, ``DeviceConstraint``, ``DeviceToleration``),
reduced to what allocation reads; an exact request and a subrequest share one type,
:class:`Request`, as upstream's ``requestAccessor`` lets the allocator treat them alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.policy.quantity import Quantity

EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """A request's toleration of device taints (``operator`` ``Equal`` or ``Exists``; an
    empty ``effect`` tolerates every effect)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """An exact device request (``exactly``) or one subrequest of ``firstAvailable``.

    ``allocation_mode`` is ``ExactCount`` (``count`` devices) or ``All``; ``admin_access``
    None when unset (subrequests have none); ``capacity`` the ``capacity.requests`` of
    consumable capacity, None when unset.
    """

    name: str
    device_class: str
    allocation_mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    selectors: tuple[str, ...] = ()
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity: Mapping[str, Fraction] | None = None


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One entry of ``spec.devices.requests``: either ``exactly`` or ``first_available``."""

    name: str
    exactly: Request | None = None
    first_available: tuple[Request, ...] = ()
    # Who asked, in the pod's words, for requests the scheduler names itself (the claim it
    # builds for extended resources: "container-0-request-0"); empty for a claim's own.
    asked_by: str = ""


@dataclass(frozen=True, slots=True)
class Constraint:
    """One ``spec.devices.constraints`` entry: ``requests`` it applies to (empty: all),
    and the attribute every device shares (``match_attribute``) or none shares
    (``distinct_attribute``); neither set is a constraint of a kind unknown here."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True)
class Claim:
    """The device part of one ResourceClaimSpec, named for messages (``label``:
    ``claim gpu``, ``template gpu-template``, ``extended resources``)."""

    label: str
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Demand:
    """What one pod (or pod template, or lone claim) asks of the node it will run on.

    ``resources`` are its requests added up as the scheduler does (:func:`pod_requests`),
    every resource name; ``containers`` the init containers then the containers, as
    ``(name, is_init, restart_policy, requests)``, which the claim for extended resources
    served by DeviceClasses is built from, per node. ``claims`` are the claims it names
    (each once, a shared claim too). ``node_name``, ``node_selector``, ``required_terms``
    (the required node affinity's terms, None when none) and ``tolerations`` say where it
    may run. ``missing`` names the claims and templates it names that were not given.
    """

    label: str
    resources: Mapping[str, Quantity] = field(default_factory=dict)
    containers: tuple[tuple[str, bool, str | None, Mapping[str, Quantity]], ...] = ()
    claims: tuple[Claim, ...] = ()
    node_name: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_terms: tuple[Any, ...] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    missing: tuple[str, ...] = ()
