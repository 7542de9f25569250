"""What the allocator answers: a fit on one node group, and a verdict over all of them."""

from __future__ import annotations

from dataclasses import dataclass

FITS = "fits"
DOES_NOT_FIT = "does-not-fit"
UNKNOWN = "unknown"


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

    @property
    def fits(self) -> bool:
        """True when the demand fits the group."""
        return self.outcome == FITS


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
    answers: tuple[tuple[str, Fit], ...] = ()

    @property
    def fits(self) -> bool:
        """True when some group fits."""
        return self.outcome == FITS
