"""What a DRA claim asks for: ResourceClaims, ResourceClaimTemplates and pods' claim references.

``resource.k8s.io/v1`` puts the devices a claim wants in ``spec.devices`` of a ResourceClaim
and in ``spec.spec.devices`` of a ResourceClaimTemplate (docs/dra-claims.md, "What a claim
asks for"). Each request is either ``exactly`` one kind of device (a DeviceClass, CEL
selectors, ``allocationMode`` ExactCount with ``count`` or All, ``adminAccess``,
``capacity.requests``) or ``firstAvailable``: subrequests tried in order, the first that can
be satisfied wins. ``spec.devices.config`` hands opaque, driver-defined parameters to some
requests (all of them when ``requests`` is empty); the NVIDIA driver's ``GpuConfig`` and
``MigDeviceConfig`` carry ``sharing.strategy`` (TimeSlicing or MPS) there.

This module only reads: it turns the object into :class:`ClaimAsk` records and never judges.
The API server validates a claim's schema before any validating webhook sees it, so fields of
the wrong type are treated as absent here (``gpu-policy review`` of a hand-written file gets
the API server's own message when it is applied).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from webhook.policy.dra import DraSnapshot
from webhook.policy.workloads import dig

RESOURCE_GROUP: Final = "resource.k8s.io"
# kind -> path of the ResourceClaimSpec inside the object.
CLAIM_SPEC_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "ResourceClaim": ("spec",),
    "ResourceClaimTemplate": ("spec", "spec"),
}
EXACT_COUNT: Final = "ExactCount"
ALL: Final = "All"
# The NVIDIA DRA driver's opaque configuration (docs/dra-claims.md, "The NVIDIA driver's
# configuration"): its API group and version, and the kinds that can share a device.
NVIDIA_CONFIG_API_VERSION: Final = "resource.nvidia.com/v1beta1"
SHARING_CONFIG_KINDS: Final = frozenset({"GpuConfig", "MigDeviceConfig"})
SHARING_STRATEGIES: Final = ("TimeSlicing", "MPS")
# The consumable capacity the NVIDIA driver publishes with --consumable-shares=<N>.
SHARES_CAPACITY: Final = "shares"


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    """One way to satisfy a request: ``exactly``, or one subrequest of ``firstAvailable``.

    ``name`` is how the API names it in allocation results and config references: the
    request's name, or ``<request>/<subrequest>``. ``count`` is the number of devices for
    ExactCount (``all_devices`` False); under All it is 0. ``capacity`` holds
    ``capacity.requests`` as written (quantities).
    """

    name: str
    device_class: str
    selectors: tuple[str, ...]
    all_devices: bool
    count: int
    admin_access: bool
    capacity: Mapping[str, str]

    def describe(self) -> str:
        """``2 devices of class gpu.nvidia.com``: how messages name what is asked for."""
        if self.all_devices:
            amount = "all devices"
        else:
            amount = f"{self.count} device{'' if self.count == 1 else 's'}"
        extra = " matching its selectors" if self.selectors else ""
        return f"{amount} of class {self.device_class}{extra}"


@dataclass(frozen=True, slots=True)
class RequestAsk:
    """One entry of ``spec.devices.requests``: its alternatives in order, and how it shares.

    ``sharing`` is the NVIDIA driver's sharing strategy a claim config gives this request
    (``TimeSlicing`` or ``MPS``), None when no config shares it.
    """

    name: str
    alternatives: tuple[DeviceAsk, ...]
    first_available: bool
    sharing: str | None


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """The requests of one claim spec; ``label`` is how messages name the claim."""

    label: str
    requests: tuple[RequestAsk, ...]

    @property
    def classes(self) -> tuple[str, ...]:
        """Every DeviceClass name the claim refers to, in order, without repeats."""
        return tuple(dict.fromkeys(a.device_class for r in self.requests for a in r.alternatives))


def claim_spec(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ResourceClaimSpec of a ResourceClaim or ResourceClaimTemplate, else None."""
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in CLAIM_SPEC_PATHS:
        return None
    spec = dig(obj, CLAIM_SPEC_PATHS[kind])
    return spec if isinstance(spec, dict) else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _selectors(entry: Mapping[str, Any]) -> tuple[str, ...]:
    raw = entry.get("selectors")
    if not isinstance(raw, list):
        return ()
    out = []
    for selector in raw:
        expression = dig(selector, ("cel", "expression"))
        if isinstance(expression, str) and expression.strip():
            out.append(expression)
    return tuple(out)


def _count(entry: Mapping[str, Any]) -> int:
    count = entry.get("count")
    # The API server defaults an absent count to one under ExactCount.
    if isinstance(count, bool) or not isinstance(count, int):
        return 1
    return count


def _device_ask(name: str, entry: Mapping[str, Any], *, admin: bool) -> DeviceAsk:
    mode = _str(entry.get("allocationMode")) or EXACT_COUNT
    all_devices = mode == ALL
    requests = dig(entry, ("capacity", "requests"))
    capacity = {str(k): str(v) for k, v in requests.items()} if isinstance(requests, dict) else {}
    return DeviceAsk(
        name=name,
        device_class=_str(entry.get("deviceClassName")),
        selectors=_selectors(entry),
        all_devices=all_devices,
        count=0 if all_devices else _count(entry),
        admin_access=admin and entry.get("adminAccess") is True,
        capacity=capacity,
    )


def _alternatives(request: Mapping[str, Any], name: str) -> tuple[tuple[DeviceAsk, ...], bool]:
    exactly = request.get("exactly")
    if isinstance(exactly, dict):
        return (_device_ask(name, exactly, admin=True),), False
    subs = request.get("firstAvailable")
    if isinstance(subs, list):
        found = tuple(
            # firstAvailable subrequests have no adminAccess field (DeviceSubRequest).
            _device_ask(f"{name}/{_str(sub.get('name'))}", sub, admin=False)
            for sub in subs
            if isinstance(sub, dict)
        )
        return found, True
    return (), False


def sharing_strategy(config: Mapping[str, Any]) -> str | None:
    """The NVIDIA driver's sharing strategy in one opaque config entry, or None.

    ``config`` is an entry of ``spec.devices.config`` (or a DeviceClass's ``spec.config``):
    ``opaque.parameters`` must be a ``resource.nvidia.com/v1beta1`` GpuConfig or
    MigDeviceConfig whose ``sharing.strategy`` is TimeSlicing or MPS.
    """
    parameters = dig(config, ("opaque", "parameters"))
    if not isinstance(parameters, dict):
        return None
    if parameters.get("apiVersion") != NVIDIA_CONFIG_API_VERSION:
        return None
    if parameters.get("kind") not in SHARING_CONFIG_KINDS:
        return None
    strategy = dig(parameters, ("sharing", "strategy"))
    return strategy if strategy in SHARING_STRATEGIES else None


def _applies(config: Mapping[str, Any], request: str) -> bool:
    names = config.get("requests")
    if not isinstance(names, list) or not names:
        return True  # an empty list applies to every request
    # "<request>" covers all its subrequests; "<request>/<sub>" only that one, which the
    # request-level view counts as sharing the request too (the subrequest may be chosen).
    return any(isinstance(n, str) and n.split("/", 1)[0] == request for n in names)


def _sharing(configs: Sequence[Any], request: str) -> str | None:
    found = None
    for config in configs:
        if isinstance(config, dict) and _applies(config, request):
            # Later entries override earlier ones, as the driver applies them in order.
            found = sharing_strategy(config) or found
    return found


def read_claim(spec: Mapping[str, Any], label: str) -> ClaimAsk:
    """The requests of a ResourceClaimSpec (``spec`` of a claim, ``spec.spec`` of a template)."""
    requests_raw = dig(spec, ("devices", "requests"))
    configs = dig(spec, ("devices", "config"))
    configs = configs if isinstance(configs, list) else []
    requests = []
    for entry in requests_raw if isinstance(requests_raw, list) else ():
        if not isinstance(entry, dict):
            continue
        name = _str(entry.get("name"))
        alternatives, first = _alternatives(entry, name)
        if alternatives:
            requests.append(RequestAsk(name, alternatives, first, _sharing(configs, name)))
    return ClaimAsk(label, tuple(requests))


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name or made from a template."""

    name: str
    claim: str | None
    template: str | None


def pod_claim_refs(spec: Mapping[str, Any]) -> Iterator[PodClaimRef]:
    """The claims a pod spec refers to (``spec.resourceClaims``), in order."""
    raw = spec.get("resourceClaims")
    if not isinstance(raw, list):
        return
    for entry in raw:
        if not isinstance(entry, dict):
            continue
        claim = _str(entry.get("resourceClaimName")) or None
        template = _str(entry.get("resourceClaimTemplateName")) or None
        if claim or template:
            yield PodClaimRef(_str(entry.get("name")), claim, template)


def with_claim_objects(
    dra: DraSnapshot, objects: Iterable[Mapping[str, Any]], *, namespace: str | None = None
) -> DraSnapshot:
    """``dra`` with the specs of the ResourceClaims and ResourceClaimTemplates among
    ``objects`` added (the manifests of one ``gpu-policy review``), so that a pod reviewed
    with its template is judged on what the template asks for. ``namespace`` is the one of
    objects that name none (``-n``)."""
    specs = dict(dra.claim_specs)
    for obj in objects:
        spec = claim_spec(obj)
        if spec is None:
            continue
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        where = _str(meta.get("namespace")) or namespace or ""
        key = (str(obj.get("kind")), where, _str(meta.get("name")))
        specs[key] = spec
    return replace(dra, claim_specs=specs)
