"""GPU Feature Discovery's product names and label keys, and the MIG profiles per GPU.

Label key = the ORIGINAL resource name + "." + attribute (GPU-SHARING.md §4), so the product
of a mixed-MIG slice is under ``nvidia.com/mig-1g.5gb.product``, never ``nvidia.com/gpu.product``.
"""

from __future__ import annotations

import re

from webhook.policy.resources import ResourceForm

SHARED_SUFFIX = "-SHARED"
_MIG_PART = re.compile(r"-MIG-(\d+g\.\d+gb(?:\+me)?)")
_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")
_SPACES = re.compile(r" +")

# MIG profiles each GPU model offers (NVIDIA MIG user guide; mig-parted's default config),
# GPU-SHARING.md §5. Matched against the product name by substring, longest key first.
_A100_40 = ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_A100_80 = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
MIG_PROFILES: dict[str, tuple[str, ...]] = {
    "A100-SXM4-40GB": _A100_40,
    "A100-PCIE-40GB": _A100_40,
    "A800-40GB": _A100_40,
    "A100-80GB": _A100_80,
    "A100-SXM4-80GB": _A100_80,
    "H100-80GB": _A100_80,
    "H100-SXM5-80GB": _A100_80,
    "H800-80GB": _A100_80,
    "A30": ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"),
    "H100-NVL": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "H100-96GB": ("1g.12gb", "1g.12gb+me", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "GH200": ("1g.12gb", "1g.12gb+me", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    # Seed 003 lists 3g.47gb / 4g.47gb / 7g.94gb for its H20: firmware-dependent.
    "H20": (
        "1g.12gb", "1g.12gb+me", "2g.24gb", "3g.47gb", "3g.48gb", "4g.47gb", "4g.48gb",
        "7g.94gb", "7g.96gb",
    ),
    "H200": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "B200": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
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
        value += f"-MIG-{form.profile}"
    if replicas > 1 and not renamed:
        value += SHARED_SUFFIX
    return value


def base_model(product: str) -> str:
    """The GPU model a product label names, without ``-MIG-<profile>`` and ``-SHARED``."""
    product = product.removesuffix(SHARED_SUFFIX)
    return _MIG_PART.sub("", product)


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


def mig_profiles_for(product: str) -> tuple[str, ...]:
    """The MIG profiles NVIDIA documents for a product; empty for GPUs without MIG."""
    model = base_model(product).upper()
    for key in _MIG_KEYS:
        if key.upper() in model:
            return MIG_PROFILES[key]
    return ()
