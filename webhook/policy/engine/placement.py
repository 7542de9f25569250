"""Where each container's GPUs can come from: the offers that fit, the name, the node selection.

Three steps, each returning its answer or the rule result that says why there is none:
:func:`candidates` narrows the inventory's offers for one container, :func:`choose_names`
picks the resource name every container will ask for on pools they all share, and
:func:`selection` names the node labels that keep the pod on those pools.

A name a DRA DeviceClass serves (``extendedResourceName``) may also be served by the class's
devices, which are no pool (``webhook.policy.supply.served``): :func:`through_dra` says when
they can serve a container (its kind of device, product and sharing), and such a container
keeps its name, gets no node label for them, and is left to the allocator for how many fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from webhook.contract import MIG_ANNOTATION, SHARING_ANNOTATION
from webhook.policy.decision import RuleResult
from webhook.policy.engine.checks import Ask
from webhook.policy.engine.intent import Intent
from webhook.policy.inventory import Inventory, Offer, Pool, describe_pair
from webhook.policy.model import Policy
from webhook.policy.products import base_model
from webhook.policy.records import per_review_record
from webhook.policy.resources import ResourceForm
from webhook.policy.supply.served import Served, offered, served

Pair = tuple[Pool, Offer]


@per_review_record
class Choice:
    """The resource name one container will ask for, and the offers of it that can serve it;
    ``dra``: how a DeviceClass's devices can serve it too (None: they cannot)."""

    ask: Ask
    name: str
    candidates: list[Pair]
    dra: Served | None = None


def _describe_kind(form: ResourceForm, mig_profile: str | None) -> str:
    profile = form.profile or mig_profile
    return f"MIG {profile} instances" if profile else "GPUs"


def summary(pairs: Iterable[Pair], dra: Served | None = None) -> str:
    """``nvidia.com/gpu: NVIDIA-L20-SHARED (8 slots), ...``: the offers, name by name, and
    ``dra``'s devices under their name."""
    by_name: dict[str, list[str]] = {}
    for pool, offer in pairs:
        by_name.setdefault(offer.form.name, []).append(describe_pair(pool, offer))
    if dra is not None:
        by_name.setdefault(dra.resource, []).append(dra.describe())
    return "; ".join(f"{name}: {', '.join(sorted(set(v)))}" for name, v in sorted(by_name.items()))


def through_dra(ask: Ask, intent: Intent, inventory: Inventory) -> Served | None:
    """How the devices of the DeviceClass that serves ``ask``'s name can serve it: of its kind
    (its MIG profile, or whole GPUs), unshared (a DRA device is never a device-plugin share),
    of a product the pod names, with no config key asked for. None when they cannot."""
    found = served(inventory, ask.form.name)
    if found is None or ask.form.renamed or intent.sharing == "shared":
        return None
    profile = ask.form.profile or intent.mig_profile
    if intent.config_key is not None or not found.has_profile(profile):
        return None
    if intent.products and not found.model_keys(profile) & intent.products:
        return None
    return found


def _selection_admits(intent: Intent, offer: Offer) -> bool:
    """Whether the pod's node selection can reach this offer's nodes.

    Judged on the GFD labels known for the offer (its product label, its capability labels):
    a label the offer's nodes are not known to carry is not judged.
    """
    if not (intent.selectors or intent.capabilities or intent.affinity_terms):
        return True  # the common case: no GFD label is selected on, nothing to build
    labels = offer.labels()
    for sel_key, sel_value in intent.selectors + intent.capabilities:
        if sel_key in labels and sel_value not in labels[sel_key]:
            return False
    if not intent.affinity_terms:
        return True
    return any(_term_admits(term, labels) for term in intent.affinity_terms)


def _term_admits(
    term: Iterable[tuple[str, str, frozenset[str]]], labels: Mapping[str, set[str]]
) -> bool:
    for expr_key, operator, values in term:
        carried = labels.get(expr_key)
        if carried is None:
            continue
        # Nodes of one offer may differ (merged pools): the term admits the offer when some
        # of its nodes satisfy it.
        if (operator == "In" and not carried & values) or (
            operator == "NotIn" and carried <= values
        ):
            return False
    return True


def _selection_fix(intent: Intent, cands: Sequence[Pair]) -> str:
    """Name the selector value the user most likely meant (``Tesla-T4`` -> ``Tesla-T4-SHARED``)."""
    for key, value in intent.capabilities:
        carried = sorted({v for _, o in cands for k, v in o.capabilities if k == key})
        if carried and value not in carried:
            says = " or ".join(f"{key}={v}" for v in carried)
            return f"their nodes say {says}: remove the nodeSelector {key}={value}"
    for key, value in intent.selectors:
        for _, offer in cands:
            if offer.selector and offer.selector[0] == key and offer.model == base_model(value):
                return f"select {key}={offer.selector[1]} instead, or remove the nodeSelector"
    return "select one of those products, or remove the selection"


def _of_kind(ask: Ask, intent: Intent, inventory: Inventory) -> Sequence[Pair]:
    """The offers of the device kind ``ask`` wants: its MIG profile, or whole GPUs."""
    wanted = ask.form.profile or intent.mig_profile
    by_kind = inventory.of_profile(wanted)
    if not by_kind and wanted is None:
        # Only MIG instances under migStrategy single advertise nvidia.com/gpu here: a pod that
        # names no profile may take one (it would be scheduled there anyway). Where full GPUs
        # exist too, a plain request is steered to them.
        by_kind = inventory.plain_names
    return by_kind


def _shared_mig_hint(ask: Ask, intent: Intent, inventory: Inventory) -> str:
    """Where only MIG instances are shared, the annotation that asks for one of them.

    A plain GPU request means a whole GPU unless a MIG profile is stated, so a pod that asks
    for a shared GPU is not steered to a shared MIG instance by itself: a slice of a GPU has a
    fraction of its memory, which the pod must choose.
    """
    if ask.form.profile or intent.mig_profile:
        return ""
    profiles = sorted({o.profile for _, o in inventory.pairs if o.profile and o.shared})
    if not profiles:
        return ""
    offered = summary((p, o) for p, o in inventory.pairs if o.profile in profiles)
    return (
        f"; shared MIG instances are offered ({offered}): to take one, state its profile "
        f"with annotation {MIG_ANNOTATION}={profiles[0]}"
    )


def _nobody(inventory: Inventory) -> str:
    """Who offers nothing: the nodes, and the pools an autoscaler can add nodes to if any."""
    return "no node or autoscaled pool" if inventory.at_zero else "no node"


def _offering(inventory: Inventory) -> str:
    """Who offers what the message lists: the nodes, and the pools that can appear if any."""
    return "Nodes and pools that can appear offer" if inventory.at_zero else "Nodes offer"


def candidates(
    ask: Ask, intent: Intent, inventory: Inventory, dra: Served | None
) -> list[Pair] | RuleResult:
    """The (pool, offer) pairs that can serve ``ask``, or the failure that says why none can;
    none, and no failure, when only DRA devices can serve it (``dra``: what
    :func:`through_dra` says of ``ask``, which the caller keeps too)."""
    # The devices serving the unshared name, for the words of a failure.
    found = _candidates(ask, intent, inventory, served(inventory, ask.form.original))
    if isinstance(found, RuleResult) and dra is not None:
        return []
    return found


def _candidates(
    ask: Ask, intent: Intent, inventory: Inventory, dra: Served | None
) -> list[Pair] | RuleResult:
    form = ask.form
    by_kind = _of_kind(ask, intent, inventory)
    if dra is not None and not dra.has_profile(form.profile or intent.mig_profile):
        dra = None  # its devices are of another kind
    if not by_kind and dra is None:
        return RuleResult(
            "gpu-resource-offered",
            "fail",
            f"{ask.label} asks for {form.name}, but {_nobody(inventory)} offers "
            f"{_describe_kind(form, intent.mig_profile)}: the pod would stay "
            f"Pending. The cluster offers {offered(inventory)}; ask for one of those",
            ask.label,
        )
    if form.renamed and intent.sharing == "exclusive":
        return RuleResult(
            "gpu-intent",
            "fail",
            f"{ask.label} asks for {form.name}, a shared GPU, but annotation "
            f"{SHARING_ANNOTATION}=exclusive asks for an exclusive one: drop one of the two",
            ask.label,
        )
    shared_only = form.renamed or intent.sharing == "shared"
    cands = by_kind
    if shared_only:
        cands = [(p, o) for p, o in cands if o.shared]
    elif intent.sharing == "exclusive":
        cands = [(p, o) for p, o in cands if not o.shared]
    if not cands and (shared_only or dra is None):
        why = "shared" if shared_only else "exclusive (not shared)"
        source = "its name" if form.renamed else f"annotation {SHARING_ANNOTATION}"
        what = _describe_kind(form, intent.mig_profile)
        return RuleResult(
            "gpu-resource-offered",
            "fail",
            f"{ask.label} asks for {why} {what} ({source}), but {_nobody(inventory)} offers "
            f"them: the pod would stay Pending. {_offering(inventory)} {summary(by_kind, dra)}"
            f"{_shared_mig_hint(ask, intent, inventory) if shared_only else ''}",
            ask.label,
        )
    selected = [
        (p, o)
        for p, o in cands
        if (intent.config_key is None or p.config_key == intent.config_key)
        and (not intent.products or o.model_key in intent.products)
        and _selection_admits(intent, o)
    ]
    if not selected:
        return RuleResult(
            "gpu-node-selection",
            "fail",
            f"{ask.label} asks for {form.name}, but {intent.describe_selection()} matches no "
            f"node that offers it; the nodes that do offer {summary(cands, dra)}: "
            f"{_selection_fix(intent, cands)}",
            ask.label,
        )
    # Offers with enough on one node are preferred (the names and products chosen); whether
    # the pod fits at all is the allocator's to say, on the whole pod (engine/fit.py).
    enough = _enough_on_a_node(ask, selected) or selected
    return enough if ask.count == 1 else _for_several(ask, enough)


def _enough_on_a_node(ask: Ask, selected: list[Pair]) -> list[Pair]:
    """The offers with ``ask.count`` devices (or slots) on some node, where that is known."""
    return [
        (p, o) for p, o in selected if o.most_on_a_node is None or o.most_on_a_node >= ask.count
    ]


def too_many(ask: Ask, selected: Sequence[Pair]) -> RuleResult | None:
    """Why no node has ``ask.count`` of what one container asks for, in the inventory's
    terms (the most one node offers), or None when some node may: the words of a refusal the
    allocator decides (engine/fit.py, :func:`~webhook.policy.engine.fit.decided`)."""
    if not selected or _enough_on_a_node(ask, list(selected)):
        return None
    most = max(o.most_on_a_node or 0 for _, o in selected)
    return RuleResult(
        "gpu-resource-offered",
        "fail",
        f"{ask.label} asks for {ask.count} {ask.form.name}, but no node has that many: the "
        f"most one node offers is {most} ({summary(selected)}): the pod would stay Pending. "
        f"Ask for at most {most}, or spread the work over several pods",
        ask.label,
    )


def _for_several(ask: Ask, selected: list[Pair]) -> list[Pair] | RuleResult:
    """Exclusive GPUs for a container that asks for more than one, else shares the plugin allows.

    The device plugin fails shared requests above one under failRequestsGreaterThanOne.
    """
    exclusive = [(p, o) for p, o in selected if not o.shared]
    if exclusive:
        return exclusive
    lenient = [(p, o) for p, o in selected if not o.fail_requests_greater_than_one]
    if lenient:
        return lenient
    return RuleResult(
        "gpu-shared-request-above-one",
        "fail",
        f"{ask.label} asks for {ask.count} {ask.form.name}, but every node that could run "
        f"it shares its GPUs ({summary(selected)}) and the device plugin fails shared "
        "requests above one (failRequestsGreaterThanOne): the pod would fail with "
        "UnexpectedAdmissionError. Ask for 1 (a share is access to a GPU, not a "
        "fraction of its compute), or target an exclusive GPU",
        ask.label,
    )


def awaiting_nodes(choice: Choice) -> RuleResult | None:
    """The warning for a container only pools at zero can serve: which pools will add a node."""
    if choice.dra is not None or not all(pool.at_zero for pool, _ in choice.candidates):
        return None
    pools = ", ".join(dict.fromkeys(pool.describe() for pool, _ in choice.candidates))
    label = choice.ask.label
    return RuleResult(
        "gpu-pool-at-zero",
        "warn",
        f"{label} asks for {choice.name}, which no node offers yet: the pod stays Pending "
        f"until the autoscaler adds a node of {pools} (docs/autoscaling.md)",
        label,
    )


def several_shared(ask: Ask, cands: Sequence[Pair]) -> RuleResult | None:
    """The warning for a container that asks for several shares of GPUs, where allowed."""
    if ask.count == 1 or not cands or not cands[0][1].shared:
        return None
    return RuleResult(
        "gpu-shared-request-above-one",
        "warn",
        f"{ask.label} asks for {ask.count} shared {ask.form.name}: {ask.count} replicas of a "
        "shared GPU may be the same GPU and do not give more compute; ask for 1",
        ask.label,
    )


@per_review_record
class PerContainer:
    """Each container's candidates and DRA devices (in the order of the asks), the findings,
    the containers no node has enough for (in the inventory's terms: the allocator decides
    whether that refuses the pod), and whether a placement rule failed."""

    found: list[list[Pair]]
    dra: list[Served | None]
    findings: list[RuleResult]
    short: list[RuleResult]
    failed: bool


def per_container(asks: Sequence[Ask], intent: Intent, inventory: Inventory) -> PerContainer:
    """:func:`candidates` of every container, with what no node has enough of and the
    warnings about several shares."""
    out = PerContainer([], [], [], [], False)
    for ask in asks:
        dra = through_dra(ask, intent, inventory)
        cands = candidates(ask, intent, inventory, dra)
        if isinstance(cands, RuleResult):
            out.findings.append(cands)
            out.failed = True
            continue
        out.found.append(cands)
        out.dra.append(dra)
        # How many devices a DeviceClass gives one node is the allocator's to count.
        note = too_many(ask, cands) if dra is None else None
        if note is not None:
            out.short.append(note)
        warning = several_shared(ask, cands)
        if warning is not None:
            out.findings.append(warning)
    return out


def choose_names(
    asks: Sequence[Ask],
    found: Sequence[list[Pair]],
    policy: Policy,
    dra: Sequence[Served | None] = (),
) -> list[Choice] | RuleResult:
    """Pick the resource name each container will ask for, on pools they all share.

    ``found`` holds each ask's candidates, ``dra`` how a DeviceClass's devices can serve it,
    in the same order. A container DRA devices can serve keeps its name and does not narrow
    the pools of the others: the devices may be on whichever node they get.
    """
    served_too = list(dra) or [None] * len(asks)
    pools: set[str] | None = None
    for cands, devices in zip(found, served_too, strict=True):
        if devices is not None:
            continue
        names = {p.name for p, _ in cands}
        pools = names if pools is None else pools & names
    if pools is None:
        return [
            Choice(ask, ask.form.name, cands, devices)
            for ask, cands, devices in zip(asks, found, served_too, strict=True)
        ]
    if not pools:
        detail = "; ".join(
            f"{a.label} -> {', '.join(sorted({p.name for p, _ in c}))}"
            for a, c in zip(asks, found, strict=True)
        )
        return RuleResult(
            "gpu-resource-offered",
            "fail",
            f"no single node can serve every container's GPU request ({detail}): containers of "
            "one pod run on one node; ask for GPUs one node pool offers",
        )
    choices = []
    for ask, cands, devices in zip(asks, found, served_too, strict=True):
        usable = [(p, o) for p, o in cands if p.name in pools]
        if devices is not None:
            choices.append(Choice(ask, ask.form.name, usable, devices))
            continue
        choice = _choose_name(ask, usable, policy)
        if isinstance(choice, RuleResult):
            return choice
        choices.append(choice)
        pools &= {p.name for p, _ in choice.candidates}
    return choices


def _choose_name(ask: Ask, usable: list[Pair], policy: Policy) -> Choice | RuleResult:
    groups: dict[str, list[Pair]] = {}
    for pair in usable:
        groups.setdefault(pair[1].form.name, []).append(pair)
    current = ask.form.name
    if current in groups:
        return Choice(ask, current, groups[current])
    if not policy.rewrite_resource_names:
        return RuleResult(
            "gpu-resource-offered",
            "fail",
            f"{ask.label} asks for {current}, but the nodes that fit it advertise "
            f"{summary(usable)}: the pod would stay Pending. Ask for "
            f"{' or '.join(sorted(groups))} instead",
            ask.label,
        )
    # The name with the most slots, so the pod lands where there is most room.
    name = max(sorted(groups), key=lambda n: sum(o.slots or 0 for _, o in groups[n]))
    return Choice(ask, name, groups[name])


def _needs_selection(choice: Choice, inventory: Inventory) -> bool:
    # The name alone would also reach nodes that cannot serve the container: some pair that
    # advertises it is not a candidate, yet has room for the request on one of its nodes (a
    # node with fewer devices than asked for is never chosen by the scheduler anyway).
    chosen = {id(offer) for _, offer in choice.candidates}
    count = choice.ask.count
    if choice.dra is None and served(inventory, choice.name) is not None:
        return True  # a DeviceClass serves the name with devices that cannot serve it
    return any(
        id(offer) not in chosen and (offer.most_on_a_node is None or offer.most_on_a_node >= count)
        for _, offer in inventory.advertising(choice.name)
    )


def selection(
    choices: Sequence[Choice], inventory: Inventory, *, keep: bool = False
) -> dict[str, set[str]] | RuleResult:
    """Node labels (key -> values) that keep every container on nodes that can serve it.

    Only when the names alone would reach other nodes, or always with ``keep`` (the pod's
    stated intent is written down even when today's nodes make it redundant). A warning
    instead when a needed selection cannot be written: some offer's nodes carry no label that
    could select them.
    """
    needed = any(_needs_selection(c, inventory) for c in choices)
    if not needed and not keep:
        return {}
    wanted: dict[str, set[str]] = {}
    for choice in choices:
        if choice.dra is not None:
            if not needed:
                return {}  # DRA's devices are on nodes no label is known to select
            label = choice.ask.label
            return RuleResult(
                "gpu-node-selection",
                "warn",
                f"{label}: cannot steer the pod to {choice.name} on {choice.dra.describe()}: "
                "its nodes carry no known product label",
                label,
            )
        for _, offer in choice.candidates:
            if offer.selector is None:
                if not needed:
                    return {}  # nothing to steer away from: no label is no harm
                label = choice.ask.label
                return RuleResult(
                    "gpu-node-selection",
                    "warn",
                    f"{label}: cannot steer the pod to {choice.name} on "
                    f"{offer.describe()}: its nodes carry no known product label",
                    label,
                )
            wanted.setdefault(offer.selector[0], set()).add(offer.selector[1])
    return wanted
