"""The generator and the scenario files, without a control plane: worlds stay apart, a seed
replays, and a written scenario gives ``gpu-policy review`` the verdict the runner used."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.core.oracle.scenarios import WORLD_LABEL, generate, scenarios
from tests.core.oracle.world import (
    shares_extended_name,
)

MANY = scenarios(3, 200)
# A Node's Ready condition carries the time it was written: not part of what a seed decides.
_TIMESTAMP = re.compile(r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"')


def _replayable(scenario: Any) -> str:
    return _TIMESTAMP.sub('"<time>"', json.dumps(scenario.__dict__))


def test_a_seed_and_an_index_replay_the_same_scenario() -> None:
    assert _replayable(generate(3, 17)) == _replayable(MANY[17])
    assert json.dumps(generate(3, 17).manifests) != json.dumps(generate(3, 18).manifests)
    assert json.dumps(generate(4, 17).world) != json.dumps(MANY[17].world)


def test_every_world_stays_apart_from_the_others() -> None:
    """What one world creates reaches no other: names carry the world's id, the pod selects
    its world's nodes, no slice reaches all nodes, a shared extended name runs alone."""
    names: set[str] = set()
    for s in MANY:
        for obj in s.world:
            name = obj["metadata"]["name"]
            assert name.startswith(f"{s.world_id}-"), name
            assert obj["metadata"]["labels"][WORLD_LABEL] == s.world_id
            assert name not in names
            names.add(name)
            if obj["kind"] == "ResourceSlice":
                assert "allNodes" not in obj["spec"]
                where = obj["spec"].get("nodeName") or json.dumps(obj["spec"]["nodeSelector"])
                assert s.world_id in where
        assert s.pod["spec"]["nodeSelector"][WORLD_LABEL] == s.world_id
        assert s.alone == shares_extended_name(s)
    assert any(s.alone for s in MANY) and not all(s.alone for s in MANY)


def test_every_pod_asks_for_a_gpu() -> None:
    """The webhook judges GPU pods only: a pod without a GPU request would test nothing."""
    for s in MANY:
        spec = s.pod["spec"]
        containers = spec["containers"] + spec.get("initContainers", [])
        limits = [c["resources"].get("limits") for c in containers]
        assert spec.get("resourceClaims") or any(limits), s.world_id
