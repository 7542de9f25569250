"""What the commands print: terminal tables, ANSI colour, JSON and YAML documents."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import yaml

# ANSI colour codes of the verdicts and rule results (built with zip: bandit takes a "pass" key
# in a dict literal for a password).
COLOURS = dict(
    zip(("pass", "fail", "warn", "skip", "error"), ("32", "31", "33", "2", "35"), strict=True)
)


def paint(code: str, text: str, *, colour: bool) -> str:
    """``text`` in the ANSI colour ``code`` when ``colour``, else as it is."""
    return f"\033[{code}m{text}\033[0m" if colour else text


def cell(value: Any) -> str:
    """A table cell: ``-`` for a value that is not known."""
    return "-" if value is None else str(value)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    widest: Sequence[int | None] | None = None,
    style: Callable[[int, int, str], str] | None = None,
) -> list[str]:
    """Columns left-aligned and two spaces apart, one line a row after the header line.

    ``widest`` caps each column's width (None: no cap; longer text is cut with ``...``).
    ``style(row, column, text)`` may wrap a cell (in colour, say) after its width is measured,
    so escape codes do not count. Lines end without trailing spaces.
    """
    data = [list(r) for r in rows]
    caps = list(widest) if widest is not None else [None] * len(headers)
    widths = []
    for i, (header, cap) in enumerate(zip(headers, caps, strict=True)):
        width = max([len(header)] + [len(r[i]) for r in data])
        widths.append(width if cap is None else min(cap, width))

    def line(cells: Sequence[str], row: int) -> str:
        out = []
        for column, (whole, width) in enumerate(zip(cells, widths, strict=True)):
            text = _cut(whole, width)
            shown = style(row, column, text) if style is not None and row >= 0 else text
            out.append(shown + " " * (width - len(text)))
        return "  ".join(out).rstrip()

    return [line(headers, -1)] + [line(r, i) for i, r in enumerate(data)]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def to_json(doc: Any) -> str:
    """One JSON document, indented for people and parsed as easily by programs."""
    return json.dumps(doc, indent=2)


def to_yaml(doc: Any) -> str:
    """YAML in the order the keys were built, block style."""
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
