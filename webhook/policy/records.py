"""The dataclass of the records built on every review: slotted, and not frozen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform()
def per_review_record(cls: type[_T]) -> type[_T]:
    """A slotted dataclass that is not frozen, but read-only by convention.

    One is built on every review (Workload, Decision, AdmissionRequest, Outcome and the
    engine's steps), and a frozen dataclass sets each field through ``object.__setattr__``:
    frozen, Workload, AdmissionRequest, Decision and Outcome cost a review ~12 us more (the
    Flask app in process, on 3.11). Never assign to a field once the record is built.
    """
    return dataclass(slots=True)(cls)
