"""Errors for bad input files (never for bad pods: those are rule results)."""

from __future__ import annotations


class PolicyError(ValueError):
    """A policy, device-plugin config or node dump that cannot be used.

    Carries the file (or other source), the field path inside it and the reason, so that a
    user can fix the input without reading a traceback.
    """

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {reason}")
