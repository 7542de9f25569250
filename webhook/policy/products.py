"""GPU Feature Discovery's product names and label keys, and the MIG profiles per GPU.

Label key = the ORIGINAL resource name + "." + attribute (GPU Feature Discovery names its labels
after the resource the device plugin would advertise unshared), so the product of a mixed-MIG
slice is under ``nvidia.com/mig-1g.5gb.product``, never ``nvidia.com/gpu.product``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from webhook.policy.resources import ResourceForm, nvidia_spelling, resource_spelling

SHARED_SUFFIX = "-SHARED"
# GFD's node-wide capability labels (internal/lm/nvml.go; docs/device-plugin.md, "GFD
# labels"): mps.capable is "true" only where the plugin's config shares by MPS, mig.capable
# where some GPU of the node can be partitioned.
MPS_CAPABLE = "nvidia.com/mps.capable"
MIG_CAPABLE = "nvidia.com/mig.capable"
CAPABILITY_LABELS = (MPS_CAPABLE, MIG_CAPABLE)
# Both spellings of the suffixed profiles: GFD writes ``.`` (``-MIG-1g.5gb.me``), older
# labels and hand-written ones use NVIDIA's ``+`` (docs/device-plugin.md, "MIG names").
_MIG_PART = re.compile(r"-MIG-(\d+g\.\d+gb(?:-me|[.+]me\.all|[.+]me|[.+]gfx)?)")
_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")
_SPACES = re.compile(r" +")

# MIG profiles each GPU model offers, each with the instances of it one GPU holds (NVIDIA MIG
# user guide, "Supported MIG Profiles": https://docs.nvidia.com/datacenter/tesla/mig-user-guide/;
# mig-parted's default config). Matched against the product name by substring, longest key
# first. None: no instance count recorded for that GPU.
_A100_40 = {
    "1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1,
    "7g.40gb": 1,
}  # fmt: skip
_A100_80 = {
    "1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
    "7g.80gb": 1,
}  # fmt: skip
_HOPPER_96 = {"1g.12gb": 7, "1g.12gb+me": 1, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1}
MIG_PROFILES: dict[str, Mapping[str, int | None]] = {
    "A100-SXM4-40GB": _A100_40,
    "A100-PCIE-40GB": _A100_40,
    "A800-40GB": _A100_40,
    "A100-80GB": _A100_80,
    "A100-SXM4-80GB": _A100_80,
    "H100-80GB": _A100_80,
    "H100-SXM5-80GB": _A100_80,
    "H800-80GB": _A100_80,
    "A30": {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
    "H100-NVL": {
        "1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1,
    },
    "H100-96GB": _HOPPER_96,
    "GH200": _HOPPER_96,
    # The H20's 47 / 48 GB profiles depend on its firmware.
    "H20": {
        "1g.12gb": 7, "1g.12gb+me": 1, "2g.24gb": 3, "3g.47gb": 2, "3g.48gb": 2, "4g.47gb": 1,
        "4g.48gb": 1, "7g.94gb": 1, "7g.96gb": 1,
    },
    "H200": {
        "1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
        "7g.141gb": 1,
    },
    "B200": dict.fromkeys(("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")),
}  # fmt: skip
_MIG_KEYS = sorted(MIG_PROFILES, key=len, reverse=True)


def sanitise_model(model: str) -> str:
    """GFD's product value for a model name: odd characters dropped, spaces joined by ``-``."""
    return _SPACES.sub("-", _DROP.sub("", model).strip())


def product_value(model: str, form: ResourceForm, *, replicas: int, renamed: bool) -> str:
    """The ``.product`` label GFD writes for ``form`` on a GPU of ``model``.

    ``-MIG-<profile>`` for a MIG instance, then ``-SHARED`` only when the resource is
    replicated and not renamed (with ``renameByDefault`` the ``.shared`` name says it).
    """
    value = sanitise_model(model)
    if form.profile is not None:
        # GFD writes the profile as the resource name does (``1g.5gb.me``): a ``+`` is not a
        # valid label value.
        value += f"-MIG-{resource_spelling(form.profile)}"
    if replicas > 1 and not renamed:
        value += SHARED_SUFFIX
    return value


def base_model(product: str) -> str:
    """The GPU model a product label names, without ``-MIG-<profile>`` and ``-SHARED``."""
    product = product.removesuffix(SHARED_SUFFIX)
    return _MIG_PART.sub("", product)


def product_mig_profile(product: str) -> str | None:
    """The MIG profile a product label names, in NVIDIA's spelling; None for a whole GPU.

    ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me-SHARED`` -> ``1g.5gb+me`` (GFD writes the dot).
    """
    match = _MIG_PART.search(product.removesuffix(SHARED_SUFFIX))
    return None if match is None else nvidia_spelling(match[1])


def model_key(product: str) -> str:
    """A model name for comparisons: case-insensitive, and older drivers omit ``NVIDIA-``."""
    return base_model(product).upper().removeprefix("NVIDIA-")


def product_label(form: ResourceForm, mig_strategy: str) -> str:
    """The label key that carries the product for ``form`` on a node with ``mig_strategy``.

    Under ``single`` every unit is ``nvidia.com/gpu``; under ``mixed`` MIG slices have their
    own label keys.
    """
    if form.profile is not None and mig_strategy == "mixed":
        return f"{form.original}.product"
    return "nvidia.com/gpu.product"


def _mig_table(product: str) -> Mapping[str, int | None]:
    model = base_model(product).upper()
    for key in _MIG_KEYS:
        if key.upper() in model:
            return MIG_PROFILES[key]
    return {}


def mig_profiles_for(product: str) -> tuple[str, ...]:
    """The MIG profiles NVIDIA documents for a product; empty for GPUs without MIG."""
    return tuple(_mig_table(product))


def mig_instances(product: str, profile: str) -> int | None:
    """How many instances of ``profile`` one GPU of ``product`` holds; None if not recorded."""
    return _mig_table(product).get(profile)
