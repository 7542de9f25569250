"""Reading the cluster's objects one at a time, and grouping GPU pods under their owners.

``Collector.add`` trims each object as it is read (a page of a paged API listing, or the
items of a ``kubectl get ... -A -o yaml`` dump) and keeps only GPU pods and the workloads
whose pod template asks for a GPU. ``Collector.groups`` then puts every pod under the object
users manage: a ReplicaSet's pods under its Deployment, a Job's under its CronJob, each
reported once with their count. A pod whose controller was not listed (an operator's custom
resource, or a ReplicaSet missing from the dump) is grouped under that controller by name;
a pod without a controller (or a static pod, owned by its Node) is its own group.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from webhook.audit.findings import Ref
from webhook.audit.isolation import exposure
from webhook.audit.trim import trim
from webhook.policy.workloads import API_VERSIONS

__all__ = ["Collector", "Group", "as_utc", "parse_time", "ref_of"]

_Key = tuple[str, str, str]
#: The DRA kinds a listing or a dump may hold beside pods and workloads.
DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")


def as_utc(when: datetime) -> datetime:
    """``when``, read as UTC when it carries no time zone."""
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as the API writes it (``2025-06-15T02:37:00Z``), or None."""
    if isinstance(value, datetime):
        return as_utc(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None


def ref_of(obj: Mapping[str, Any]) -> Ref:
    """The reference to a (trimmed) object."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind", ""))
    return Ref(
        kind=kind,
        namespace=meta.get("namespace") or None,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        api_version=str(obj.get("apiVersion") or API_VERSIONS.get(kind, "v1")),
    )


def _owner(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return owners[0] if owners else None


@dataclass(slots=True)
class Group:
    """The pods of one reported object, and the object ``review()`` judges for it.

    ``judged`` is the topmost listed object of the owner chain (the Deployment when it was
    listed, its ReplicaSet when only that was, else the oldest pod), or None for a workload
    with neither a listed object nor pods (which cannot happen for a listed group).
    """

    subject: Ref
    judged: Mapping[str, Any] | None = None
    pods: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def created(self) -> datetime | None:
        """When the judged object was created."""
        if self.judged is None:
            return None
        return parse_time((self.judged.get("metadata") or {}).get("creationTimestamp"))


class Collector:
    """Trimmed GPU pods and workloads, fed one object (or one page) at a time."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.workloads: list[dict[str, Any]] = []
        #: DRA objects read (DeviceClasses, ResourceSlices, ResourceClaims and their
        #: templates), by kind: what the devices are and who holds them (docs/audit.md).
        self.dra: dict[str, list[Mapping[str, Any]]] = {k: [] for k in DRA_KINDS}
        #: Objects read per kind, GPU or not (what the audit looked at).
        self.scanned: Counter[str] = Counter()
        #: Bound pods with containers that see GPUs without asking for one, cut down to
        #: those containers (webhook.audit.isolation.exposure).
        self.exposed: list[dict[str, Any]] = []

    def add(self, obj: Mapping[str, Any], kind: str | None = None) -> None:
        """Read one object; a ``List`` (or ``PodList``, ...) is read item by item.

        ``kind`` is for objects that carry none, as the items of an API list response.
        """
        found = obj.get("kind")
        kind = found if isinstance(found, str) and found else kind
        if kind and kind.endswith("List") and isinstance(obj.get("items"), list):
            item_kind = kind.removesuffix("List") or None
            for item in obj["items"]:
                if isinstance(item, Mapping):
                    self.add(item, item_kind)
            return
        if not kind:
            return
        self.scanned[kind] += 1
        if kind in self.dra:
            self.dra[kind].append(obj)
            return
        if kind == "Pod":
            seen = exposure(obj)
            if seen is not None:
                seen["created"] = parse_time(seen["created"])
                self.exposed.append(seen)
        trimmed = trim(obj, kind)
        if trimmed is None:
            return
        if trimmed["kind"] == "Pod":
            self.pods.append(trimmed)
        else:
            self.workloads.append(trimmed)

    def add_all(self, objects: Iterable[Mapping[str, Any]], kind: str | None = None) -> None:
        """Read every object of an iterable (one page of a listing, a dump's documents)."""
        for obj in objects:
            self.add(obj, kind)

    def groups(self) -> list[Group]:
        """Every GPU workload and bare GPU pod once, with its pods, sorted by object."""
        owners = _Owners(self.workloads)
        groups: dict[_Key, Group] = {}

        def group_for(ref: Ref) -> Group:
            key = (ref.kind, ref.namespace or "", ref.name)
            if key not in groups:
                groups[key] = Group(subject=ref)
            return groups[key]

        for workload in self.workloads:
            ref, judged = owners.resolve(workload)
            group = group_for(ref)
            # The object of the subject's own kind wins (the Deployment over its ReplicaSet).
            if group.judged is None or judged.get("kind") == ref.kind:
                group.judged = judged
        for pod in self.pods:
            ref, judged = owners.resolve(pod)
            group = group_for(ref)
            group.pods.append(pod)
            if group.judged is None:
                group.judged = judged
        for group in groups.values():
            group.pods.sort(key=_pod_order)
            if group.judged is not None and group.judged.get("kind") == "Pod" and group.pods:
                group.judged = group.pods[0]  # the oldest pod speaks for an unlisted owner
        return sorted(
            groups.values(),
            key=lambda g: (g.subject.namespace or "", g.subject.kind, g.subject.name),
        )


class _Owners:
    """The listed workloads by uid and by (kind, namespace, name), to walk owner chains."""

    def __init__(self, workloads: Iterable[Mapping[str, Any]]) -> None:
        self.by_uid: dict[str, Mapping[str, Any]] = {}
        self.by_key: dict[_Key, Mapping[str, Any]] = {}
        for workload in workloads:
            ref = ref_of(workload)
            if ref.uid:
                self.by_uid[ref.uid] = workload
            self.by_key[(ref.kind, ref.namespace or "", ref.name)] = workload

    def listed(self, owner: Mapping[str, Any], namespace: str) -> Mapping[str, Any] | None:
        """The listed object an owner reference points at, by uid first, else by name."""
        uid = owner.get("uid")
        if uid and uid in self.by_uid:
            return self.by_uid[uid]
        return self.by_key.get((str(owner.get("kind")), namespace, str(owner.get("name"))))

    def resolve(self, obj: Mapping[str, Any]) -> tuple[Ref, Mapping[str, Any]]:
        """The top of the owner chain as far as it is known, and the topmost listed object."""
        current, judged = obj, obj
        namespace = (obj.get("metadata") or {}).get("namespace") or ""
        for _ in range(8):  # owner chains are two deep; a cycle in bad input stops here
            owner = _owner(current)
            # A static pod's mirror is owned by its Node: it is a bare pod.
            if owner is None or owner.get("kind") == "Node":
                return ref_of(current), judged
            found = self.listed(owner, namespace)
            if found is None:
                return _unlisted(owner, namespace), judged
            current = judged = found
        return ref_of(current), judged


def _unlisted(owner: Mapping[str, Any], namespace: str) -> Ref:
    """The reference to an owner that was not listed, from the owner reference alone."""
    kind = str(owner.get("kind"))
    return Ref(
        kind=kind,
        namespace=namespace or None,
        name=str(owner.get("name")),
        uid=str(owner.get("uid") or ""),
        api_version=str(owner.get("apiVersion") or API_VERSIONS.get(kind, "v1")),
    )


def _pod_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name", "")))
