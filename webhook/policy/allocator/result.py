"""What the allocator answers: a fit on one node group, and a verdict over all of them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

from webhook.policy.demand.model import ALL, Request
from webhook.policy.supply import group_name

FITS = "fits"
DOES_NOT_FIT = "does-not-fit"
UNKNOWN = "unknown"

# What keeps claims off a node group (Explanation.kind): one request that cannot be allocated
# even alone; a constraint; a claim's requests together; the claims together; not found in
# time.
REQUEST = "request"
CONSTRAINT = "constraint"
TOGETHER = "together"
CLAIMS = "claims"
LATE = "late"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A request (or one alternative of ``firstAvailable``) and what a node group has for it.

    ``usable`` devices pass its class's and its own selectors, reach the node and have room
    for its capacity request; ``tainted`` of them carry a taint it does not tolerate. When
    none is usable and it has selectors, ``of_class`` counts the devices of its class alone
    and ``selector`` is the first of its selectors that none of them passes. ``products``:
    the ``productName`` of the usable devices (of the class's, when none is).
    """

    name: str
    request: Request
    usable: int
    tainted: int = 0
    of_class: int | None = None
    selector: str | None = None
    products: tuple[str, ...] = ()
    # The usable devices themselves (DeviceWithID), kept to word them without a second look.
    devices: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    @property
    def available(self) -> int:
        """The devices the request could be given: usable and not tainted against it."""
        return self.usable - self.tainted

    def asked(self) -> str:
        """``3 device(s) of class gpu.nvidia.com matching its selectors``."""
        request = self.request
        if request.allocation_mode == ALL:
            amount = "all devices"
        else:
            amount = f"{request.count} device{'' if request.count == 1 else 's'}"
        selectors = " matching its selectors" if request.selectors else ""
        return f"{amount} of class {request.device_class}{selectors}"

    def has(self) -> str:
        """``8 such device(s), 1 of them with a taint it does not tolerate``, and when none
        is usable for its selectors, how many of the class's none of them passes."""
        out = f"{self.usable} such device(s)"
        if self.tainted:
            out += f", {self.tainted} of them with a taint it does not tolerate"
        if self.selector is not None and self.of_class:
            out += (
                f" (none of its {self.of_class} device(s) of class {self.request.device_class}"
                f' passes the selector "{self.selector}")'
            )
        return out


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why claims do not fit one node group, for the message (webhook/policy/allocator/
    explain.py): ``kind`` (REQUEST, CONSTRAINT, TOGETHER, CLAIMS, LATE), the ``claim`` at fault
    (the labels of all of them for CLAIMS and LATE), and by kind: the ``request`` that cannot
    be allocated even alone with ``asked_by`` (the container, for a request the scheduler made
    of extended resources) and its ``shortfalls`` (one, or one per alternative); the
    ``constraint`` no devices meet ("" when only all of them together fail); whether the
    group's devices share ``counters`` (partitionable devices); for CLAIMS, the ``claims``'
    labels one by one, and in ``asked_by`` the containers of extended resources among them;
    for CONSTRAINT, the ``attribute`` the constraint names."""

    kind: str
    group: str
    claim: str
    request: str = ""
    asked_by: str = ""
    shortfalls: tuple[Shortfall, ...] = ()
    constraint: str = ""
    counters: bool = False
    claims: tuple[str, ...] = ()
    attribute: str = ""
    # The allocator prepared for the group (reach.Probe), kept to word the fault without
    # preparing another.
    probe: Any = field(default=None, compare=False, repr=False)

    @property
    def nearness(self) -> int:
        """How near the group comes: what it has for the request at fault; a group where
        every request fits alone (a constraint, requests together) comes nearer."""
        if self.kind == REQUEST:
            return max((s.available for s in self.shortfalls), default=0)
        return 1 << 30 if self.kind != LATE else -1

    @property
    def text(self) -> str:
        """The explanation in one sentence (Fit.detail)."""
        where = group_name(self.group)
        counters = (
            " (its devices share counter sets: partitions and the whole device they are cut "
            "from cannot all be taken together)"
            if self.counters
            else ""
        )
        if self.kind == REQUEST:
            named = self.asked_by or f"request {self.request}"
            parts = [
                f"{self.claim}: {f'request {s.name}' if len(self.shortfalls) > 1 else named} "
                f"asks for {s.asked()}; {where} has {s.has()}"
                for s in self.shortfalls
            ]
            if len(parts) == 1:
                return parts[0]
            return "no alternative of firstAvailable fits: " + "; ".join(parts)
        if self.kind == CONSTRAINT:
            what = f"its constraint {self.constraint}" if self.constraint else "its constraints"
            together = "" if self.constraint else " together"
            return f"{self.claim}: no devices of {where} meet {what}{together}"
        if self.kind == TOGETHER:
            return (
                f"{self.claim}: its requests together need more devices than {where} has{counters}"
            )
        if self.kind == CLAIMS:
            return f"the claims {self.claim} together need more devices than {where} has{counters}"
        return (
            f"{self.claim}: cannot be allocated on {where}; which request or constraint is at "
            "fault was not found in time"
        )


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether a demand fits one node group on an empty cluster.

    ``outcome`` is ``fits``, ``does-not-fit`` or ``unknown`` (the search ran out of its time
    budget: nothing proven). ``reason`` says why it does not fit, in the scheduler's terms
    (the filter that fails: ``node(s) didn't match Pod's node affinity/selector``,
    ``Insufficient nvidia.com/gpu``, ``cannot allocate all claims``, a CEL runtime error),
    and ``detail`` what in the demand fails and what the group has (``request gpu of claim
    train asks for 3 devices of class gpu.nvidia.com; node group a100 has 2``). ``stage``
    names the filter: ``node`` (NodeAffinity, TaintToleration), ``resources``
    (NodeResourcesFit), ``claims`` (DynamicResources); ``closeness`` orders the groups that
    fail (higher is closer: used to name the closest one).
    """

    outcome: str
    group: str
    reason: str = ""
    detail: str = ""
    stage: str = ""
    closeness: int = 0
    # The allocator failed with an error (a CEL runtime error, an unknown DeviceClass): the
    # scheduler then fails the pod on every node, not just this group.
    error: bool = False
    # Why the claims cannot be allocated, in parts (``detail`` is its text); None for the
    # other filters.
    explanation: Explanation | None = None

    @property
    def nearness(self) -> int:
        """Among groups that fail at one filter, how near this one comes (higher is nearer):
        for claims, what the group has for the request at fault."""
        return -1 if self.explanation is None else self.explanation.nearness

    @property
    def fits(self) -> bool:
        """True when the demand fits the group."""
        return self.outcome == FITS


class Answers(Sequence[tuple[str, "Fit"]]):
    """Every group's key and answer, in the supply's order, as a sequence of pairs made when
    read: a verdict over 5,000 node groups does not build 5,000 pairs that the review never
    reads (and that the garbage collector would then walk). Groups of one projection share
    its answer; a group judged by no one (out of time) gets ``late`` under its own key."""

    __slots__ = ("_judged", "_keys", "_late", "_names")

    def __init__(
        self,
        names: Sequence[str],
        keys: Sequence[int],
        judged: Mapping[int, Fit],
        late: Fit,
    ) -> None:
        self._names = names
        self._keys = keys
        self._judged = judged
        self._late = late

    def _answer(self, name: str, key: int) -> Fit:
        found = self._judged.get(key)
        return replace(self._late, group=name) if found is None else found

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, index: int) -> tuple[str, Fit]: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[tuple[str, Fit], ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        name = self._names[index]
        return (name, self._answer(name, self._keys[index]))

    def __iter__(self) -> Iterator[tuple[str, Fit]]:
        for name, key in zip(self._names, self._keys, strict=True):
            yield name, self._answer(name, key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Answers({list(self)!r})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a demand fits some node group, existing or able to appear.

    ``outcome`` is ``fits`` (``group`` names the first that does), ``does-not-fit`` (no group
    does; ``closest`` is the failing group that came nearest, for the message), or
    ``unknown`` (none fits for sure and some search ran out of time: allow with a warning).
    An allocation error on any group that passes the node filters (``closest.error``) is
    ``does-not-fit`` even where another group fits: the scheduler fails the pod when its
    DynamicResources filter errs on any node.
    ``answers`` holds every group's key and answer, in the supply's order; groups the demand
    cannot tell apart share one answer, which names the first of them.
    """

    outcome: str
    group: str | None = None
    closest: Fit | None = None
    answers: Sequence[tuple[str, Fit]] = ()
    # The filters at which the groups that do not fit fail (Fit.stage).
    stages: frozenset[str] = frozenset()

    @property
    def fits(self) -> bool:
        """True when some group fits."""
        return self.outcome == FITS
