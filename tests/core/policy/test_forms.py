"""Resource forms and GPU quantities: every spelling a manifest can use."""

from __future__ import annotations

import pytest

from webhook.policy.products import base_model, product_value
from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.resources import ResourceForm, mig_form, parse_resource


@pytest.mark.parametrize(
    ("name", "profile", "renamed", "original"),
    [
        ("nvidia.com/gpu", None, False, "nvidia.com/gpu"),
        ("nvidia.com/gpu.shared", None, True, "nvidia.com/gpu"),
        ("nvidia.com/mig-1g.5gb", "1g.5gb", False, "nvidia.com/mig-1g.5gb"),
        ("nvidia.com/mig-1g.10gb.me", "1g.10gb+me", False, "nvidia.com/mig-1g.10gb.me"),
        ("nvidia.com/mig-3g.40gb.shared", "3g.40gb", True, "nvidia.com/mig-3g.40gb"),
        ("nvidia.com/mig-1g.10gb.me.shared", "1g.10gb+me", True, "nvidia.com/mig-1g.10gb.me"),
    ],
    ids=str,
)
def test_parse_and_format_round_trip(
    name: str, profile: str | None, renamed: bool, original: str
) -> None:
    form = parse_resource(name)
    assert form == ResourceForm(profile, renamed)
    assert form.name == name
    assert form.original == original


@pytest.mark.parametrize(
    ("profile", "replicas", "product"),
    [
        ("1g.5gb", 1, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
        ("1g.5gb+me", 1, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me"),
        ("1g.5gb+me", 4, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me-SHARED"),
        ("1g.10gb-me", 2, "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb-me-SHARED"),
        ("1g.10gb+me.all", 1, "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb.me.all"),
        ("1g.10gb+gfx", 1, "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb.gfx"),
    ],
    ids=str,
)
def test_product_values_spell_profiles_as_gfd(profile: str, replicas: int, product: str) -> None:
    """GFD writes ``.me`` (a ``+`` is no label value); the model reads back from either."""
    value = product_value(
        "NVIDIA A100-SXM4-40GB", ResourceForm(profile, False), replicas=replicas, renamed=False
    )
    assert value == product
    assert base_model(value) == "NVIDIA-A100-SXM4-40GB"
    assert base_model(value.replace(".me", "+me").replace(".gfx", "+gfx")) == base_model(value)


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpus",
        "nvidia.com/mig-1g",
        "nvidia.com/mig-1g.5gb+me",
        "amd.com/gpu",
        "nvidia.com/gpu.shared.shared",
        "nvidia.com/hostdev",
        "gpu",
    ],
)
def test_not_a_gpu_form(name: str) -> None:
    assert parse_resource(name) is None


def test_mig_profile_spellings() -> None:
    assert mig_form("1g.10gb+me").name == "nvidia.com/mig-1g.10gb.me"
    assert mig_form("mig-1g.10gb.me") == mig_form("1g.10gb+me")
    assert mig_form("2g.10gb").name == "nvidia.com/mig-2g.10gb"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(1, 1), ("1", 1), ("2", 2), (2, 2), (1.0, 1), ("1000m", 1), ("1e0", 1), (" 3 ", 3), ("+1", 1)],
    ids=repr,
)
def test_integer_quantities(raw: object, expected: int) -> None:
    assert parse_gpu_quantity(raw) == expected


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("500m", "0.5 of a device"),
        (0.5, "0.5 of a device"),
        ("1.5", "1.5 of a device"),
        (0, "asks for no device"),
        ("0", "asks for no device"),
        (-1, "negative"),
        ("-1", "negative"),
        ("one", "not a quantity"),
        (None, "not a quantity"),
        (True, "not a quantity"),
        ([1], "not a quantity"),
        ("", "not a quantity"),
        (float("nan"), "not a quantity"),
    ],
    ids=repr,
)
def test_refused_quantities(raw: object, says: str) -> None:
    with pytest.raises(QuantityError, match=says):
        parse_gpu_quantity(raw)
