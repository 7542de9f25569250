"""The resource names the NVIDIA device plugin advertises, parsed into one small value type.

Forms (docs/device-plugin.md, "What the plugin advertises"):

- ``nvidia.com/gpu``: a full GPU, or one MIG instance under ``migStrategy: single``
- ``nvidia.com/gpu.shared``: a replica of a time-sliced or MPS GPU (``renameByDefault: true``)
- ``nvidia.com/mig-<profile>``: a MIG instance under ``migStrategy: mixed``; the profile's
  ``+`` is written ``.`` (``1g.10gb+me`` is ``mig-1g.10gb.me``). Since v0.20.0 the suffixed
  profiles ``-me``, ``+me.all`` and ``+gfx`` are resources of their own (docs/device-plugin.md,
  "MIG names and the +me profiles").
- ``nvidia.com/mig-<profile>.shared``: a replica of a shared MIG instance, renamed
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

PREFIX = "nvidia.com/"
GPU = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"

# The profile suffixes as a resource name spells them ("+" written "."), longest first.
_MIG = re.compile(r"^mig-(?P<profile>\d+g\.\d+gb(?:-me|\.me\.all|\.me|\.gfx)?)$")
_PROFILE = re.compile(r"^\d+g\.\d+gb(?:-me|\+me\.all|\+me|\+gfx)?$")
_SIZE = re.compile(r"^(\d+)g\.(\d+)gb")


@dataclass(frozen=True, slots=True)
class ResourceForm:
    """One advertised resource name, taken apart.

    ``profile`` is the MIG profile in NVIDIA's spelling (``1g.10gb+me``), or None for a GPU.
    ``renamed`` is True for the ``.shared`` forms.
    """

    profile: str | None
    renamed: bool
    #: The name without sharing: what GFD label keys are built from.
    original: str = field(init=False, repr=False, compare=False)
    #: The full resource name as a pod spells it.
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Worked out once per form, not on every read: a review reads them a dozen times, and
        # as properties each read was a Python call building a string (docs/performance.md,
        # "Eighth round"); the forms themselves are few and cached (parse_resource).
        original = GPU if self.profile is None else f"{PREFIX}mig-{resource_spelling(self.profile)}"
        object.__setattr__(self, "original", original)
        object.__setattr__(self, "name", original + SHARED_SUFFIX if self.renamed else original)

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
    return ResourceForm(nvidia_spelling(match["profile"]), renamed)


def resource_spelling(profile: str) -> str:
    """A profile as resource names and GFD labels write it: ``1g.10gb+me`` -> ``1g.10gb.me``.

    The plugin and GFD replace every ``+`` by ``.`` (internal/rm/rm.go
    AddDefaultResourcesToConfig, internal/resource/nvml-mig-device.go GetName).
    """
    return profile.replace("+", ".")


def nvidia_spelling(profile: str) -> str:
    """A profile as nvidia-smi writes it: ``1g.10gb.me`` -> ``1g.10gb+me`` (``-me`` stays)."""
    size = _SIZE.match(profile)
    if size is None:
        return profile
    suffix = profile[size.end() :]
    if suffix.startswith("."):
        suffix = "+" + suffix[1:]
    return profile[: size.end()] + suffix


def is_mig_profile(profile: str) -> bool:
    """True for a MIG profile name in NVIDIA's spelling, e.g. ``1g.5gb`` or ``1g.10gb+me``."""
    return _PROFILE.match(profile) is not None


def profile_size(profile: str) -> tuple[int, int] | None:
    """(compute slices, memory GB) a MIG profile names: ``3g.40gb`` -> (3, 40); None if not one."""
    size = _SIZE.match(profile) if _PROFILE.match(profile) else None
    return None if size is None else (int(size[1]), int(size[2]))


def mig_form(profile: str) -> ResourceForm:
    """The unshared form of a MIG profile: ``1g.5gb``, ``mig-1g.5gb`` or ``1g.10gb.me``."""
    return ResourceForm(nvidia_spelling(profile.removeprefix("mig-")), False)
