"""A scenario as files, and the engine's verdict on it through ``gpu-policy review``'s path.

A scenario directory holds what ``gpu-policy review --policy policy.yaml --nodes world.yaml
pod.yaml`` reads: the policy (:data:`POLICY`, the smallest that judges: enforcement
``enforce``, no renaming, no node selection added), the world as ``kubectl get
nodes,deviceclasses,resourceslices -o yaml`` prints it (read back from the API server, so with
its defaults), and the manifests (claims, claim templates, the pod). ``verdict.txt`` says what
the scheduler and the engine did.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from tests.core.oracle.scenarios import WORKLOAD_KINDS, WORLD_LABEL, Scenario
from webhook.cli.review import review_files
from webhook.policy.engine.fit import UNPROVEN

POLICY = """\
# The smallest policy that judges: refuse what cannot run, rename nothing, add no node
# selection (docs/oracle.md). Every DeviceClass whose name ends in .nvidia.com is a GPU class.
apiVersion: gpu-policy.io/v1alpha1
kind: SharingPolicy
metadata:
  name: oracle
spec:
  enforcement: enforce
  defaultIntent: any
  exemptNamespaces: [kube-system]
  devicePlugin:
    config:
      version: v1
      flags:
        migStrategy: mixed
  mutation:
    rewriteResourceNames: false
    injectNodeSelection: never
    tolerations: []
  dra:
    deviceClassSuffixes: [nvidia.com]
"""

WORLD_KINDS = ("Node", "DeviceClass", "ResourceSlice")


def _dump(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


def world_text(world: list[dict[str, Any]]) -> str:
    """The world as one ``kind: List`` (what ``kubectl get ... -o yaml`` prints)."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": world}, sort_keys=False)


def write_scenario(folder: Path, scenario: Scenario, verdict: str = "") -> Path:
    """Write ``scenario`` as the four files that ``gpu-policy review`` replays."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.yaml").write_text(POLICY)
    (folder / "world.yaml").write_text(world_text(scenario.world))
    (folder / "pod.yaml").write_text(_dump(scenario.manifests))
    if verdict:
        (folder / "verdict.txt").write_text(verdict)
    return folder


def read_scenario(folder: Path) -> Scenario:
    """The scenario a directory holds (written by :func:`write_scenario`, or a case)."""
    world = yaml.safe_load((folder / "world.yaml").read_text())
    items = world["items"] if world.get("kind") == "List" else [world]
    manifests = [d for d in yaml.safe_load_all((folder / "pod.yaml").read_text()) if d]
    ids = {o["metadata"].get("labels", {}).get(WORLD_LABEL) for o in items if o["kind"] == "Node"}
    ids.discard(None)
    if len(ids) != 1:
        raise ValueError(f"{folder}: the Nodes must carry one {WORLD_LABEL} label, not {ids}")
    world_id = str(ids.pop())
    scenario = Scenario(world_id, items, manifests, features=[folder.name])
    scenario.alone = shares_extended_name(scenario)
    return scenario


def shares_extended_name(scenario: Scenario) -> bool:
    """Whether a DeviceClass of the world names an extended resource other worlds could use
    (one without the world's id): the scheduler maps such a name to one class cluster-wide,
    the newest (docs/oracle.md), so the world runs alone."""
    return any(
        o["kind"] == "DeviceClass"
        and o["spec"].get("extendedResourceName")
        and scenario.world_id not in o["spec"]["extendedResourceName"]
        for o in scenario.world
    )


@dataclass
class EngineVerdict:
    """What the engine said: allowed (every object), why not, and the pod it would create."""

    allowed: bool
    reasons: list[str] = field(default_factory=list)
    #: ``Kind/name ALLOWED|DENIED`` for each object reviewed.
    objects: list[str] = field(default_factory=list)
    mutated_pod: dict[str, Any] | None = None
    error: str = ""
    #: Allowed with the warning that the device search ran out of time (engine/fit.py,
    #: ``UNPROVEN``): the verdict contract's "allow what could not be proven".
    unproven: bool = False


def engine_verdict(scenario: Scenario) -> EngineVerdict:
    """The engine's verdict on the scenario, through the files and the library function of
    ``gpu-policy review`` (so that the written scenario replays it exactly)."""
    with tempfile.TemporaryDirectory(prefix="oracle-") as tmp:
        folder = write_scenario(Path(tmp), scenario)
        try:
            pairs = review_files(
                [str(folder / "pod.yaml")],
                policy_path=str(folder / "policy.yaml"),
                nodes_path=str(folder / "world.yaml"),
            )
        except Exception as exc:  # the engine failing is a finding, not a crash of the run
            return EngineVerdict(False, error=f"{type(exc).__name__}: {exc}")
    reasons: list[str] = []
    objects: list[str] = []
    mutated: dict[str, Any] | None = None
    for obj, decision in pairs:
        verdict = "ALLOWED" if decision.allowed else "DENIED"
        objects.append(f"{decision.kind}/{decision.name} {verdict}")
        if not decision.allowed:
            for r in decision.results:
                if r.status in ("fail", "error"):
                    reasons.append(f"{decision.kind}/{decision.name}: {r.rule}: {r.message}")
        if obj.get("kind") in WORKLOAD_KINDS and decision.patch:
            mutated = jsonpatch.apply_patch(copy.deepcopy(obj), list(decision.patch))
    allowed = all(d.allowed for _, d in pairs)
    unproven = any(UNPROVEN in r.message for _, d in pairs for r in d.results if r.status == "warn")
    return EngineVerdict(allowed, reasons, objects, mutated, unproven=allowed and unproven)


def strip_server_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as read back, without what only the server's bookkeeping needs."""
    out = copy.deepcopy(dict(obj))
    meta = out.get("metadata", {})
    for key in ("managedFields", "resourceVersion", "uid", "generation"):
        meta.pop(key, None)
    return out
