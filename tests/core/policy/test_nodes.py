"""The per-node view and the scheduler's filters: selectors, required node affinity, taints."""

from __future__ import annotations

from typing import Any

import pytest

from tests.objects import cpu_node, gfd_node
from webhook.kube.trim import trim_node
from webhook.policy.nodes import (
    NodeView,
    Taint,
    affinity_matches,
    node_views,
    selector_matches,
    untolerated,
)

L20 = NodeView(
    name="gpu-1",
    labels={"nvidia.com/gpu.product": "NVIDIA-L20", "zone": "a", "nvidia.com/gpu.count": "8"},
    taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
    gpus={"nvidia.com/gpu": 8},
)


def test_node_views_keep_gpu_nodes_with_their_taints() -> None:
    nodes = [
        gfd_node(
            "b-l20",
            "l20",
            gpus=2,
            taints=[
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ],
        ),
        gfd_node("a-mig", "a100-40", mig_profile="1g.5gb"),
        cpu_node("cpu-1"),
    ]
    views = node_views(nodes)
    assert [v.name for v in views] == ["a-mig", "b-l20"]
    assert views[0].gpus == {"nvidia.com/mig-1g.5gb": 7}
    # PreferNoSchedule never keeps a pod off a node: only the filtering effects are kept.
    assert views[1].taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert node_views([trim_node(n) for n in nodes]) == views  # trimmed nodes read the same


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"nvidia.com/gpu.product": "NVIDIA-L20"}, True),
        ({"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}, False),
        ({"nvidia.com/gpu.product": "NVIDIA-L20", "zone": "b"}, False),
        ({"missing": "x"}, False),
    ],
    ids=["empty", "match", "other-value", "one-of-two-wrong", "missing-label"],
)
def test_node_selector(selector: dict[str, str], matches: bool) -> None:
    assert selector_matches(selector, L20.labels) is matches


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("affinity", "matches"),
    [
        pytest.param(None, True, id="none"),
        pytest.param({"podAffinity": {}}, True, id="no-node-affinity"),
        pytest.param(
            _affinity({"matchExpressions": [_expr("zone", "In", "a", "b")]}), True, id="in"
        ),
        pytest.param(
            _affinity({"matchExpressions": [_expr("zone", "NotIn", "a")]}), False, id="not-in"
        ),
        pytest.param(
            _affinity({"matchExpressions": [_expr("gpu", "DoesNotExist")]}),
            True,
            id="does-not-exist",
        ),
        pytest.param(_affinity({"matchExpressions": [_expr("zone", "Exists")]}), True, id="exists"),
        pytest.param(
            _affinity({"matchExpressions": [_expr("nvidia.com/gpu.count", "Gt", "4")]}),
            True,
            id="gt",
        ),
        pytest.param(
            _affinity({"matchExpressions": [_expr("nvidia.com/gpu.count", "Lt", "4")]}),
            False,
            id="lt",
        ),
        pytest.param(
            _affinity(
                {"matchExpressions": [_expr("zone", "In", "b")]},
                {"matchFields": [_expr("metadata.name", "In", "gpu-1")]},
            ),
            True,
            id="terms-are-ored",
        ),
        pytest.param(
            _affinity({"matchExpressions": [_expr("zone", "In", "a"), _expr("zone", "In", "b")]}),
            False,
            id="expressions-are-anded",
        ),
        pytest.param(_affinity({}), False, id="empty-term-matches-nothing"),
        pytest.param(_affinity(), False, id="no-terms-match-nothing"),
    ],
)
def test_required_node_affinity(affinity: Any, matches: bool) -> None:
    assert affinity_matches(affinity, L20) is matches


@pytest.mark.parametrize(
    ("tolerations", "left"),
    [
        pytest.param([], ["nvidia.com/gpu=present:NoSchedule"], id="none"),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            [],
            id="exists",
        ),
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Exists"}], [], id="any-effect"),
        pytest.param(
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], [], id="equal"
        ),
        pytest.param(
            [{"key": "nvidia.com/gpu", "value": "absent", "effect": "NoSchedule"}],
            ["nvidia.com/gpu=present:NoSchedule"],
            id="other-value",
        ),
        pytest.param(
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}],
            ["nvidia.com/gpu=present:NoSchedule"],
            id="other-effect",
        ),
        pytest.param([{"operator": "Exists"}], [], id="tolerate-everything"),
    ],
)
def test_taints_and_tolerations(tolerations: list[dict[str, str]], left: list[str]) -> None:
    assert [str(t) for t in untolerated(L20, tolerations)] == left


def test_a_cordoned_node_keeps_every_pod_off() -> None:
    cordoned = NodeView("gpu-2", {}, (), {"nvidia.com/gpu": 1}, unschedulable=True)
    assert [str(t) for t in untolerated(cordoned, [])] == [
        "node.kubernetes.io/unschedulable:NoSchedule"
    ]
    assert untolerated(cordoned, [{"operator": "Exists"}]) == ()
