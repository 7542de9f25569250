"""Client values in messages: shown briefly, never recursively.

A manifest can hold any JSON, nested up to the decoder's limit; ``repr`` or ``str`` of such a
value walks it all and can run out of recursion or fill a message with megabytes. Every client
value the engine quotes goes through these.
"""

from __future__ import annotations

import reprlib

_SHORT = reprlib.Repr()
_SHORT.maxlevel = 2
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxdict = 4


def shown(value: object) -> str:
    """A short ``repr`` of a client value, safe for any nesting and size."""
    return _SHORT.repr(value)


def as_text(value: object) -> str:
    """A string value as it is, anything else as ``shown`` (labels, names, annotations)."""
    return value if isinstance(value, str) else shown(value)


def counted(n: int, word: str) -> str:
    """``1 device``, ``2 devices``: a count and its noun, in messages."""
    return f"{n} {word}{'' if n == 1 else 's'}"
