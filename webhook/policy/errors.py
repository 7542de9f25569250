"""Errors and warnings for input files (never for bad pods: those are rule results)."""

from __future__ import annotations

from dataclasses import dataclass


def located(source: str, field: str, reason: str) -> str:
    """``file: field: reason``, the one way errors and warnings name where they come from."""
    where = f"{source}: {field}" if field else source
    return f"{where}: {reason}"


class PolicyError(ValueError):
    """A policy, device-plugin config or node dump that cannot be used.

    Carries the file (or other source), the field path inside it and the reason, so that a
    user can fix the input without reading a traceback.
    """

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        # One line, whatever the reason quotes (PyYAML's messages span several): the server
        # logs it and /readyz shows it.
        self.reason = " ".join(reason.split())
        super().__init__(located(source, field, self.reason))


@dataclass(frozen=True, slots=True)
class PolicyWarning:
    """Something an input file says that loads, but does not do what it seems to say.

    The device plugin silently ignores some fields and some entries. The webhook loads the
    same files, and says what is ignored and why, with the same file, field and reason shape
    as a PolicyError.
    """

    source: str
    field: str
    reason: str

    def __str__(self) -> str:
        return located(self.source, self.field, self.reason)
