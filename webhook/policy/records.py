"""What the records built on every review share: their dataclass (slotted, not frozen), and
the check that a value read from a review is an object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeVar, dataclass_transform

_T = TypeVar("_T")

#: ``isinstance(x, MAPPING)`` answers as ``isinstance(x, Mapping)``, but a dict (what every
#: decoded review holds) is told by the type alone, without the ABC's ``__instancecheck__``
#: (Python code, and its cache of classes, touched anew by each review after a pause:
#: docs/performance.md, "Seventh round").
MAPPING: Final = (dict, Mapping)


@dataclass_transform()
def per_review_record(cls: type[_T]) -> type[_T]:
    """A slotted dataclass that is not frozen, but read-only by convention.

    One is built on every review (Workload, Decision, AdmissionRequest, Outcome and the
    engine's steps), and a frozen dataclass sets each field through ``object.__setattr__``:
    frozen, Workload, AdmissionRequest, Decision and Outcome cost a review ~12 us more (the
    Flask app in process, on 3.11). Never assign to a field once the record is built.
    """
    return dataclass(slots=True)(cls)
