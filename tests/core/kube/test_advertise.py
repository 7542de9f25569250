"""Which nodes the quota loop patches (webhook/kube/advertise.py, docs/quota.md "Nodes")."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.contract import QUOTA_RESOURCE
from webhook.kube.advertise import lacks_resource, status_patch


def _node(capacity: str | None, allocatable: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {}}
    if capacity is not None:
        status["capacity"][QUOTA_RESOURCE] = capacity
    if allocatable is not None:
        status["allocatable"][QUOTA_RESOURCE] = allocatable
    return {"metadata": {"name": "gpu-1"}, "status": status}


@pytest.mark.parametrize(
    ("capacity", "allocatable", "lacks"),
    [
        ("1M", "1M", False),  # as the API server writes 1000000 back
        ("1000000", "1000000", False),
        (None, None, True),  # never advertised
        ("0", "0", True),  # zeroed by a kubelet that found its node recreated
        ("1M", None, True),  # capacity alone: the scheduler reads allocatable
        ("1M", "not-a-quantity", True),
    ],
)
def test_lacks_resource(capacity: str | None, allocatable: str | None, lacks: bool) -> None:
    assert lacks_resource(_node(capacity, allocatable)) is lacks


def test_the_patch_advertises_what_the_check_wants() -> None:
    patched = _node(None, None)
    for key, amounts in status_patch()["status"].items():
        patched["status"][key].update(amounts)
    assert not lacks_resource(patched)
