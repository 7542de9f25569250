"""A pending pod's GPU verdict, the allocator's: could it run now, on an empty cluster, or never?

The audit has no filters of its own: every "does it fit" is the allocator's
(``webhook.policy.allocator``, docs/allocator.md), the port of kube-scheduler's NodeName,
TaintToleration, NodeAffinity, NodeResourcesFit and DynamicResources filters.

- ``ever``: the pod's demand on an empty cluster over every node group, existing or able to
  appear (the webhook's question, ``fit_anywhere``). No group: it never runs.
- ``could``: the existing nodes it fits, empty. None, though some group fits: it waits for a
  node that can appear (``scale-up``).
- ``now``: those of them it fits with what is in use now (bound pods' requests, allocated
  claims: :class:`~webhook.policy.allocator.usage.Usage`). None: the holders keep it waiting.

Where it never runs, the filter at fault is found as the scheduler would report it, by asking
the allocator again with parts of the demand left out (docs/audit.md, "Why a GPU pod is
stuck"): each resource name alone, one of it, wherever the pod may run (``offered``: none is an
absent resource); one of each name together (``together``); with its nodeSelector, node
affinity and nodeName (``selected``: NodeAffinity); with its tolerations (``admitted``:
TaintToleration); and the whole demand on the groups left (NodeResourcesFit insufficient, or
the DynamicResources filter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from webhook.policy.allocator import DOES_NOT_FIT, Fit, Verdict, fit, fit_anywhere
from webhook.policy.allocator.usage import Usage
from webhook.policy.demand import Demand
from webhook.policy.supply import NodeGroup, Supply
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S

__all__ = ["Fault", "Judged", "judge", "locate", "only_one_of", "unplaced"]

#: The toleration of every taint (an empty key with ``Exists``: core/v1 ``Toleration``).
TOLERATE_ALL: tuple[Mapping[str, str], ...] = ({"operator": "Exists"},)

Answer = tuple[NodeGroup, Fit]


def _answers(demand: Demand, supply: Supply) -> tuple[Verdict, list[Answer]]:
    """The allocator's verdict for ``demand`` over ``supply``, with each group's answer."""
    verdict = fit_anywhere(demand, supply, budget_s=OFFLINE_FIT_BUDGET_S)
    pairs = [(g, f) for g, (_key, f) in zip(supply.groups, verdict.answers, strict=True)]
    return verdict, pairs


def _passing(answers: Sequence[Answer]) -> list[NodeGroup]:
    # A search that ran out of time proves nothing against the group: it counts as a fit.
    return [g for g, f in answers if f.outcome != DOES_NOT_FIT]


def unplaced(demand: Demand) -> Demand:
    """``demand`` wherever it may run: no nodeName, selector or affinity, every taint
    tolerated (what is left is NodeResourcesFit's and DynamicResources' question)."""
    return replace(
        demand, node_name=None, node_selector={}, required_terms=None, tolerations=TOLERATE_ALL
    )


def only_one_of(demand: Demand, names: Sequence[str]) -> Demand:
    """``demand`` asking for one of each of ``names`` and nothing else, in one container:
    does a node have any of them at all (an absent resource, not an insufficient one)?"""
    one = dict.fromkeys(names, Fraction(1))
    return replace(demand, resources=one, containers=(("probe", False, None, one),))


@dataclass(frozen=True)
class Judged:
    """The allocator's answers for one pending pod's demand (see the module docstring)."""

    ever: Verdict
    # Every group's answer on the empty cluster, in the supply's order.
    answers: tuple[Answer, ...]
    # The existing groups it fits, empty; those it fits now.
    could: tuple[NodeGroup, ...]
    now: tuple[NodeGroup, ...]

    @property
    def appearing(self) -> list[NodeGroup]:
        """The groups able to appear (no node yet) that it fits, empty."""
        return [g for g, f in self.answers if not g.node_names and f.outcome != DOES_NOT_FIT]


def judge(demand: Demand, supply: Supply, usage: Usage) -> Judged:
    """The allocator's verdict on ``demand``: ever, on the existing nodes empty, and now."""
    ever, answers = _answers(demand, supply)
    could: list[NodeGroup] = []
    now: list[NodeGroup] = []
    if ever.outcome != DOES_NOT_FIT:
        could = [g for g in _passing(answers) if g.node_names]
        now = [
            g
            for g in could
            if fit(demand, g, supply, budget_s=OFFLINE_FIT_BUDGET_S, usage=usage).outcome
            != DOES_NOT_FIT
        ]
    return Judged(ever, tuple(answers), tuple(could), tuple(now))


@dataclass(frozen=True)
class Fault:
    """Where a demand that never fits fails, filter by filter, on every group:
    ``missing`` the names no group has any of; ``offering`` the groups that have one of each
    name; ``selected`` those of them its node selection admits; ``admitted`` those of them
    whose taints it tolerates; ``closest`` the answers of the whole demand on ``admitted``."""

    missing: tuple[str, ...]
    per_name: Mapping[str, tuple[NodeGroup, ...]]
    offering: tuple[NodeGroup, ...]
    selected: tuple[NodeGroup, ...]
    admitted: tuple[NodeGroup, ...]
    answers: tuple[Answer, ...]


def locate(demand: Demand, supply: Supply, judged: Judged) -> Fault:
    """Which filter keeps ``demand`` off every group of ``supply``, existing or able to
    appear (see the module docstring)."""
    names = sorted(demand.resources)
    bare = unplaced(demand)
    offered: dict[str, tuple[NodeGroup, ...]] = {}
    for name in names:
        _, answers = _answers(only_one_of(bare, [name]), supply)
        offered[name] = tuple(_passing(answers))
    missing = tuple(n for n in names if not offered[n])
    empty: tuple[NodeGroup, ...] = ()
    if missing:
        return Fault(missing, offered, empty, empty, empty, ())
    every = only_one_of(bare, names)
    _, answers = _answers(every, supply)
    offering = tuple(_passing(answers))
    if not offering:
        return Fault((), offered, empty, empty, empty, ())
    placed = replace(
        every,
        node_name=demand.node_name,
        node_selector=demand.node_selector,
        required_terms=demand.required_terms,
    )
    keys = {g.key for g in offering}
    _, answers = _answers(placed, supply)
    selected = tuple(g for g in _passing(answers) if g.key in keys)
    if not selected:
        return Fault((), offered, offering, empty, empty, ())
    keys = {g.key for g in selected}
    _, answers = _answers(replace(placed, tolerations=demand.tolerations), supply)
    admitted = tuple(g for g in _passing(answers) if g.key in keys)
    keys = {g.key for g in admitted}
    closest = tuple((g, f) for g, f in judged.answers if g.key in keys)
    return Fault((), offered, offering, selected, admitted, closest)
