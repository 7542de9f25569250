"""Problems with input files (never with pods: those are rule results), in one shape.

Every reader of an input (the policy, the device plugin's config, suites, node dumps, DRA
objects) reports what is wrong as :class:`Diagnostic` values: the file (or other source), the
field path inside it, the line where it is known, the severity and the reason. A reader collects
them in a :class:`Diagnostics` and goes on reading, so that a file with five mistakes is told
about all five at once (docs/diagnostics.md). What cannot be used at all ends as one
:class:`PolicyError` carrying every error found; warnings (what loads, but does not do what it
seems to say) travel with the value that was read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Self

Severity = Literal["error", "warning"]


def located(source: str, field: str, reason: str, line: int | None = None) -> str:
    """``file: field: reason`` (``file:line: ...`` when the line is known), the one way errors
    and warnings name where they come from."""
    where = f"{source}:{line}" if line else source
    if field:
        where = f"{where}: {field}" if where else field
    return f"{where}: {reason}" if where else reason


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem with an input: where (source, field path, line when known), how bad, why.

    ``error``: the input cannot be used as it is. ``warning``: it loads, but something in it
    is ignored or does not do what it seems to say (the device plugin silently ignores some
    fields; the webhook says so, in the same shape).
    """

    source: str
    field: str
    reason: str
    severity: Severity = "error"
    line: int | None = None

    def __str__(self) -> str:
        # A problem with a whole YAML document has no field inside it: its field is its line,
        # ``line N``, named once (``file: line N: reason``).
        line = None if self.field == f"line {self.line}" else self.line
        return located(self.source, self.field, self.reason, line)


def _one_line(reason: str) -> str:
    # One line, whatever the reason quotes (PyYAML's messages span several): the server logs
    # it and /readyz shows it.
    return " ".join(reason.split())


class PolicyError(ValueError):
    """A policy, device-plugin config or node dump that cannot be used.

    Carries every error found (``diagnostics``, in the order they were found); ``source``,
    ``field`` and ``reason`` are the first one's, so that a user can fix the input without
    reading a traceback and a caller that looks at one problem sees the same one as before.
    The message is one line: the first problem, then the others after ``;``.
    """

    def __init__(self, source: str, field: str, reason: str, *, line: int | None = None) -> None:
        self.source = source
        self.field = field
        self.reason = _one_line(reason)
        self.line = line
        self.diagnostics: tuple[Diagnostic, ...] = (
            Diagnostic(source, field, self.reason, "error", line),
        )
        super().__init__(self._message())

    def _message(self) -> str:
        return "; ".join(str(d) for d in self.diagnostics)

    @classmethod
    def of(cls, diagnostics: Iterable[Diagnostic]) -> PolicyError:
        """One error for several problems (at least one); the first names the error."""
        found = tuple(diagnostics)
        first = found[0]
        return PolicyError(first.source, first.field, first.reason, line=first.line).carrying(found)

    def carrying(self, diagnostics: Iterable[Diagnostic]) -> Self:
        """This error, reporting ``diagnostics`` (its own first one among them) as its problems."""
        self.diagnostics = tuple(
            Diagnostic(d.source, d.field, _one_line(d.reason), "error", d.line) for d in diagnostics
        )
        self.args = (self._message(),)
        return self


def warning(source: str, reason: str, field: str = "") -> Diagnostic:
    """A warning about ``source`` (a node, a ResourceSlice, a NodePool, a file): what the
    webhook reads from it loads, but not as it seems to say."""
    return Diagnostic(source, field, reason, "warning")


class Diagnostics:
    """The collector one reading of one input fills: errors and warnings, in reading order.

    A reader calls :meth:`error` and goes on with a harmless value in place of the bad one;
    :meth:`check` raises every error at once when the reading is done. A PolicyError that a
    nested reader raised joins the others through :meth:`absorb`.
    """

    def __init__(self, source: str) -> None:
        """Collect the problems of ``source`` (a file name, or a file and a key in it)."""
        self.source = source
        self.items: list[Diagnostic] = []

    def error(self, field: str, reason: str, *, line: int | None = None) -> None:
        """Note that ``field`` cannot be used, and why."""
        self.items.append(Diagnostic(self.source, field, reason, "error", line))

    def warn(self, field: str, reason: str, *, line: int | None = None) -> None:
        """Note that ``field`` loads but is ignored or misleading, and why."""
        self.items.append(Diagnostic(self.source, field, reason, "warning", line))

    def absorb(self, exc: PolicyError) -> None:
        """Every error a nested reader raised joins this collection."""
        self.items.extend(exc.diagnostics)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The errors found so far."""
        return tuple(d for d in self.items if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        """The warnings found so far."""
        return tuple(d for d in self.items if d.severity == "warning")

    def check(self) -> None:
        """Raise one PolicyError carrying every error found, if there is any."""
        errors = self.errors
        if errors:
            raise PolicyError.of(errors)
