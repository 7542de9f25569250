"""Run scenarios on a real control plane, many at once, and compare with the engine.

Each scenario is a world of its own on the one control plane: its Nodes carry the label
:data:`~tests.core.oracle.scenarios.WORLD_LABEL` that its pod selects, its DeviceClasses and
ResourceSlices carry the world's id, its claims and pod live in a namespace of their own. A
batch creates every world, reads the world back (the dump the engine judges is what the API
server stores), asks the engine, creates every pod, and waits until kube-scheduler has bound
each pod or left it ``PodScheduled=False`` reason ``Unschedulable``. When the engine allows a
pod and changes it, the changed pod is scheduled again, after the first ones are gone.

The verdict contract (docs/oracle.md): allowed means the pod (as the engine changed it) binds;
denied means the pod as written stays Unschedulable. Anything else is a disagreement, and its
scenario is written out where ``gpu-policy review`` replays it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.core.oracle.scenarios import WORKLOAD_KINDS, WORLD_LABEL, Scenario, copy_scenario
from tests.core.oracle.world import (
    EngineVerdict,
    engine_verdict,
    strip_server_fields,
    write_scenario,
)
from tests.support.controlplane import ControlPlane, create_node

#: How long a batch waits for the scheduler to decide every pod (seconds).
RESOLVE_TIMEOUT = 90.0
#: After every pod is decided, how long to wait before reading again: a pod first seen
#: Unschedulable while its world was still arriving is retried and may bind.
SETTLE = 2.0

AGREE = "agree"
ALLOWED_UNSCHEDULABLE = "allowed-but-unschedulable"
#: Allowed because the device search ran out of time, and the scheduler does not bind it: the
#: verdict contract allows what it could not prove; not a wrong answer of the port, a slow one.
ALLOWED_UNPROVEN = "allowed-unproven-unschedulable"
DENIED_BINDS = "denied-but-binds"
UNKNOWN = "scheduler-undecided"
ENGINE_ERROR = "engine-error"
REFUSED = "refused-by-api-server"


@dataclass
class Truth:
    """What kube-scheduler did with a pod: ``bound`` (to ``node``), False (Unschedulable,
    with its ``message``), or None (undecided in time)."""

    bound: bool | None
    node: str = ""
    message: str = ""

    def __str__(self) -> str:
        if self.bound:
            return f"bound to {self.node}"
        if self.bound is None:
            return f"undecided after {RESOLVE_TIMEOUT:.0f} s {self.message}".rstrip()
        return f"Unschedulable: {self.message}"


@dataclass
class Outcome:
    """One scenario's result: the engine's verdict, the scheduler's, and whether they agree."""

    scenario: Scenario
    engine: EngineVerdict
    original: Truth
    mutated: Truth | None = None
    folder: Path | None = None
    kind: str = field(init=False, default=AGREE)

    def __post_init__(self) -> None:
        self.kind = judge(self.engine, self.original, self.mutated)

    @property
    def scheduler_message(self) -> str:
        """The scheduler's words on the pod that decides the comparison."""
        truth = self.mutated if self.mutated is not None else self.original
        return str(truth)

    def verdict_text(self) -> str:
        """``verdict.txt``: both verdicts, the disagreement, and how to replay it."""
        engine = "ALLOWED" if self.engine.allowed else "DENIED"
        lines = [
            f"disagreement: {self.kind}",
            f"scheduler (pod as written): {self.original}",
        ]
        if self.mutated is not None:
            lines.append(f"scheduler (pod as the engine changed it): {self.mutated}")
        lines.append(f"engine: {engine} ({', '.join(self.engine.objects)})")
        if self.engine.unproven:
            lines.append("  allowed unproven: the device search ran out of time")
        lines += [f"  {r}" for r in self.engine.reasons]
        if self.engine.error:
            lines.append(f"  error: {self.engine.error}")
        lines += [
            f"category: {self.scenario.category}",
            f"features: {', '.join(self.scenario.features)}",
            "replay: gpu-policy review --policy policy.yaml --nodes world.yaml pod.yaml",
        ]
        return "\n".join(lines) + "\n"


def _api_error(exc: ApiException) -> str:
    """The API server's one-line reason for refusing an object."""
    try:
        message = str(json.loads(exc.body)["message"])
    except (TypeError, ValueError, KeyError):
        message = str(exc.reason)
    return f"API server: {message[:400]}"


def judge(engine: EngineVerdict, original: Truth, mutated: Truth | None) -> str:
    """The kind of (dis)agreement between the engine and the scheduler."""
    if original.bound is None and original.message.startswith("API server: "):
        return REFUSED
    if engine.error:
        return ENGINE_ERROR
    if engine.allowed:
        truth = mutated if mutated is not None else original
        if truth.bound is None:
            return UNKNOWN
        if truth.bound:
            return AGREE
        return ALLOWED_UNPROVEN if engine.unproven else ALLOWED_UNSCHEDULABLE
    if original.bound is None:
        return UNKNOWN
    return DENIED_BINDS if original.bound else AGREE


def scheduling_view(workload: dict[str, Any] | None) -> dict[str, Any]:
    """What the scheduler reads of a pod or workload: without annotations, and with each
    container's requests defaulted from its limits, as the API server defaults them
    (``pkg/apis/core/v1/defaults.go``, ``SetDefaults_Pod``). A change the engine makes that
    leaves this equal needs no second run."""
    view = copy.deepcopy(workload or {})
    view.get("metadata", {}).pop("annotations", None)
    spec = view.get("spec", {})
    spec = spec.get("template", {}).get("spec", spec)
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        res = c.get("resources", {})
        if res.get("limits"):
            res["requests"] = {**res["limits"], **res.get("requests", {})}
    return view


def _batches(scenarios: Sequence[Scenario], size: int) -> Iterable[list[Scenario]]:
    """Batches of at most ``size``; a scenario that names a cluster-wide extended resource
    is a batch of its own."""
    alone = [[s] for s in scenarios if s.alone]
    rest = [s for s in scenarios if not s.alone]
    for i in range(0, len(rest), size):
        yield rest[i : i + size]
    yield from alone


class Runner:
    """Runs scenarios on ``plane`` in batches, writing disagreements under ``out``."""

    def __init__(self, plane: ControlPlane, out: Path, *, batch_size: int = 40) -> None:
        from kubernetes import client

        self.plane = plane
        self.out = out
        self.batch_size = batch_size
        self.core = client.CoreV1Api(plane.client)
        self.resource = client.ResourceV1Api(plane.client)

    def run(self, scenarios: Sequence[Scenario]) -> list[Outcome]:
        """Every scenario's outcome, in the order given."""
        done: dict[str, Outcome] = {}
        for batch in _batches(scenarios, self.batch_size):
            for outcome in self._batch([copy_scenario(s) for s in batch]):
                done[outcome.scenario.world_id] = outcome
        return [done[s.world_id] for s in scenarios]

    # --- one batch -----------------------------------------------------------------------

    def _batch(self, batch: list[Scenario]) -> list[Outcome]:
        tag = uuid.uuid4().hex[:4]
        namespaces: list[str] = []
        refused: dict[str, Truth] = {}
        try:
            for s in batch:
                try:
                    self._create_world(s)
                except ApiException as exc:
                    refused[s.world_id] = Truth(None, message=_api_error(exc))
            verdicts = {s.world_id: engine_verdict(s) for s in batch}
            first = {s.world_id: f"o-{s.world_id}-{tag}" for s in batch}
            namespaces += first.values()
            for s in batch:
                if s.world_id in refused:
                    continue
                try:
                    self._create_manifests(s, first[s.world_id], s.manifests)
                except ApiException as exc:
                    refused[s.world_id] = Truth(None, message=_api_error(exc))
            originals = self._resolve([s for s in batch if s.world_id not in refused], first)
            originals.update(refused)
            again = [
                s
                for s in batch
                if s.world_id not in refused
                and verdicts[s.world_id].allowed
                and verdicts[s.world_id].mutated_pod is not None
                and scheduling_view(verdicts[s.world_id].mutated_pod) != scheduling_view(s.pod)
            ]
            mutated: dict[str, Truth] = {}
            if again:
                self._clear(list(first.values()))
                second = {s.world_id: f"o-{s.world_id}-{tag}-m" for s in again}
                for s in again:
                    changed = [m for m in s.manifests if m is not s.pod]
                    changed.append(verdicts[s.world_id].mutated_pod or s.pod)
                    self._create_manifests(s, second[s.world_id], changed)
                namespaces += second.values()
                mutated = self._resolve(again, second)
            outcomes = []
            for s in batch:
                o = Outcome(s, verdicts[s.world_id], originals[s.world_id], mutated.get(s.world_id))
                if o.kind != AGREE:
                    o.folder = write_scenario(
                        self.out / f"scenario-{s.world_id.removeprefix('s')}", s, o.verdict_text()
                    )
                outcomes.append(o)
            return outcomes
        finally:
            self._cleanup(namespaces, [s.world_id for s in batch])

    def _create_world(self, s: Scenario) -> None:
        """Create the world's objects and keep them as the API server stored them."""
        stored = []
        for obj in s.world:
            if obj["kind"] == "Node":
                stored.append(strip_server_fields(create_node(self.plane, obj)))
            else:
                stored.append(strip_server_fields(self.plane.create(obj)))
        s.world = stored

    def _create_manifests(
        self, s: Scenario, namespace: str, manifests: list[dict[str, Any]]
    ) -> None:
        self.core.create_namespace(
            {"metadata": {"name": namespace, "labels": {WORLD_LABEL: s.world_id}}}
        )
        # The controller-manager makes it a moment later; the ServiceAccount admission plugin
        # refuses pods until it exists.
        with contextlib.suppress(Exception):
            self.core.create_namespaced_service_account(
                namespace, {"metadata": {"name": "default"}}
            )
        for m in manifests:
            obj = strip_server_fields(m)
            obj["metadata"]["namespace"] = namespace
            if obj["kind"] == "Pod":
                obj["metadata"].setdefault("labels", {})[WORLD_LABEL] = s.world_id
            elif obj["kind"] in WORKLOAD_KINDS:
                template = obj["spec"]["template"].setdefault("metadata", {})
                template.setdefault("labels", {})[WORLD_LABEL] = s.world_id
            self.plane.create(obj, namespace=namespace)

    def _read(self, namespaces: dict[str, str]) -> dict[str, Truth]:
        """Each world's pod as the scheduler left it so far."""
        found: dict[str, Truth] = {}
        pods = self.core.list_pod_for_all_namespaces(label_selector=WORLD_LABEL).items
        wanted = {ns: world for world, ns in namespaces.items()}
        for pod in pods:
            world = wanted.get(pod.metadata.namespace)
            if world is None:
                continue
            if pod.spec.node_name:
                found[world] = Truth(True, pod.spec.node_name)
                continue
            for c in pod.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False":
                    # Unschedulable, or SchedulerError (a filter failed, e.g. a CEL runtime
                    # error in a selector): either way the scheduler does not place the pod,
                    # and retries it with the same result.
                    message = c.message or ""
                    if c.reason != "Unschedulable":
                        message = f"{c.reason}: {message}"
                    found[world] = Truth(False, message=message)
        return found

    def _resolve(self, batch: list[Scenario], namespaces: dict[str, str]) -> dict[str, Truth]:
        """Wait until the scheduler decided every pod (or the timeout), then settle unless
        every pod is bound (a binding is final; a verdict of "unschedulable" may not be)."""
        deadline = time.monotonic() + RESOLVE_TIMEOUT
        while True:
            found = self._read(namespaces)
            decided = [w for w, t in found.items() if t.bound is not None]
            if len(decided) == len(batch) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if len(batch) == len(found) and all(t.bound for t in found.values()):
            return {s.world_id: found[s.world_id] for s in batch}
        time.sleep(SETTLE)
        found = self._read(namespaces)
        return {s.world_id: found.get(s.world_id, Truth(None)) for s in batch}

    def _clear(self, namespaces: list[str]) -> None:
        """Delete the pods of ``namespaces`` and wait until their claims are gone, so that
        the devices they held are free again."""
        for ns in namespaces:
            self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            self.resource.delete_collection_namespaced_resource_claim(ns)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = sum(
                len(self.resource.list_namespaced_resource_claim(ns).items) for ns in namespaces
            )
            left += sum(len(self.core.list_namespaced_pod(ns).items) for ns in namespaces)
            if not left:
                return
            time.sleep(0.5)

    def _cleanup(self, namespaces: list[str], worlds: list[str]) -> None:
        """Delete what the batch made (pods at once, as a kubelet's final delete does)."""
        if not self.plane.alive():
            return
        for ns in namespaces:
            with contextlib.suppress(ApiException):
                self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(ns, grace_period_seconds=0)
        selector = f"{WORLD_LABEL} in ({','.join(worlds)})"
        with contextlib.suppress(ApiException):
            self.core.delete_collection_node(label_selector=selector)
        with contextlib.suppress(ApiException):
            self.resource.delete_collection_resource_slice(label_selector=selector)
        with contextlib.suppress(ApiException):
            self.resource.delete_collection_device_class(label_selector=selector)


def summary(outcomes: Sequence[Outcome]) -> str:
    """Agreement overall and by category, then one line per disagreement."""
    lines = []
    agree = sum(o.kind == AGREE for o in outcomes)
    lines.append(f"agreement: {agree}/{len(outcomes)}")
    for category in sorted({o.scenario.category for o in outcomes}):
        of = [o for o in outcomes if o.scenario.category == category]
        lines.append(f"  {category}: {sum(o.kind == AGREE for o in of)}/{len(of)}")
    for o in outcomes:
        if o.kind != AGREE:
            lines.append(f"{o.kind}: {o.folder} (scheduler: {o.scheduler_message})")
    return "\n".join(lines)
