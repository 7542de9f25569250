"""The resource names the NVIDIA device plugin advertises, parsed into one small value type.

Forms (the device plugin's README: "Shared Access to GPUs", "MIG strategies"):

- ``nvidia.com/gpu``: a full GPU, or one MIG instance under ``migStrategy: single``
- ``nvidia.com/gpu.shared``: a replica of a time-sliced or MPS GPU (``renameByDefault: true``)
- ``nvidia.com/mig-<profile>``: a MIG instance under ``migStrategy: mixed``; the ``+me``
  profiles are spelt ``.me`` (``mig-1g.10gb.me``)
- ``nvidia.com/mig-<profile>.shared``: a replica of a shared MIG instance, renamed
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

PREFIX = "nvidia.com/"
GPU = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"

_MIG = re.compile(r"^mig-(?P<profile>\d+g\.\d+gb(?:\.me)?)$")
_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(?:\+me)?$")


@dataclass(frozen=True, slots=True)
class ResourceForm:
    """One advertised resource name, taken apart.

    ``profile`` is the MIG profile in NVIDIA's spelling (``1g.10gb+me``), or None for a GPU.
    ``renamed`` is True for the ``.shared`` forms.
    """

    profile: str | None
    renamed: bool

    @property
    def original(self) -> str:
        """The name without sharing: what GFD label keys are built from."""
        if self.profile is None:
            return GPU
        return f"{PREFIX}mig-{self.profile.replace('+me', '.me')}"

    @property
    def name(self) -> str:
        """The full resource name as a pod spells it."""
        return self.original + SHARED_SUFFIX if self.renamed else self.original

    def with_renamed(self, renamed: bool) -> ResourceForm:
        """The same device kind under the plain or the ``.shared`` name."""
        return ResourceForm(self.profile, renamed)

    def __str__(self) -> str:
        return self.name


@lru_cache(maxsize=512)
def parse_resource(name: str) -> ResourceForm | None:
    """Parse an ``nvidia.com/`` GPU resource name; None when it is not one of the GPU forms.

    Cached: the same few names come in on every request.
    """
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    renamed = rest.endswith(SHARED_SUFFIX)
    if renamed:
        rest = rest[: -len(SHARED_SUFFIX)]
    if rest == "gpu":
        return ResourceForm(None, renamed)
    match = _MIG.match(rest)
    if match is None:
        return None
    profile = match["profile"]
    if profile.endswith(".me"):
        profile = profile[: -len(".me")] + "+me"
    return ResourceForm(profile, renamed)


def is_mig_profile(profile: str) -> bool:
    """True for a MIG profile name in NVIDIA's spelling, e.g. ``1g.5gb`` or ``1g.10gb+me``."""
    return _PROFILE.match(profile) is not None


def profile_size(profile: str) -> tuple[int, int] | None:
    """(compute slices, memory GB) a MIG profile names: ``3g.40gb`` -> (3, 40); None if not one."""
    match = _PROFILE.match(profile)
    return None if match is None else (int(match[1]), int(match[2]))


def mig_form(profile: str) -> ResourceForm:
    """The unshared form of a MIG profile: ``1g.5gb``, ``mig-1g.5gb`` or ``1g.10gb.me``."""
    profile = profile.removeprefix("mig-")
    if profile.endswith(".me"):
        profile = profile[: -len(".me")] + "+me"
    return ResourceForm(profile, False)
