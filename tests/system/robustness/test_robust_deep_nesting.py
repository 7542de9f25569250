"""Nesting just under Python's recursion limit, where the fuzz tests found engine errors.

A body nested deeper than 1,024 levels is refused by the JSON decoder (a 400); one nested
~950-990 deep is decoded, and a ``repr``/``str`` of such a value in the engine (a GPU
quantity's error message, a nodeSelector value, the object's kind) used to run out of
recursion: HTTP 500 for client input. The engine now quotes client values through
``webhook.policy.text`` (bounded ``reprlib``); these cases pin that.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.objects import load, with_gpu
from webhook.server import Settings, create_app

APP = create_app(Settings())
POSITIONS = {
    "kind": ("kind",),
    "quantity": ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
    "node-selector": ("spec", "nodeSelector", "nvidia.com/gpu.product"),
}


def body(position: tuple[Any, ...], depth: int) -> bytes:
    doc = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
    obj = doc["request"]["object"]
    obj["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}
    parent = obj
    for step in position[:-1]:
        parent = parent[step]
    parent[position[-1]] = "\0PLACEHOLDER"
    nested = "[" * depth + "1" + "]" * depth
    return json.dumps(copy.deepcopy(doc)).replace('"\\u0000PLACEHOLDER"', nested).encode()


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize("where", list(POSITIONS))
def test_nesting_near_the_recursion_limit(where: str, endpoint: str) -> None:
    response = APP.test_client().post(
        endpoint, data=body(POSITIONS[where], 985), content_type="application/json"
    )
    assert response.status_code < 500, response.get_data(as_text=True)[:300]


@pytest.mark.parametrize("depth", [10, 500, 900, 2000])
def test_nesting_elsewhere_is_answered(depth: int) -> None:
    for position in POSITIONS.values():
        response = APP.test_client().post(
            "/mutate", data=body(position, depth), content_type="application/json"
        )
        assert response.status_code in (200, 400), response.get_data(as_text=True)[:300]
        if depth >= 2000:
            assert b"not JSON" in response.data
