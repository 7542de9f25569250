"""The strings extension of the Kubernetes CEL environment (and ``bool()``).

github.com/google/cel-go ext/strings.go at ``StringsVersion(2)``, the version
k8s.io/apiserver/pkg/cel/environment/base.go selects since Kubernetes 1.29 (docs/cel.md).
Indexes count characters (Go runes), as cel-go's do. ``reverse`` on strings arrived in
version 3: not here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from webhook.policy.selectors.values import (
    CelFunctionError,
    as_int,
    as_list,
    as_string,
    is_int,
    no_overload,
)


def char_at(text: Any, index: Any) -> str:
    """``<string>.charAt(<int>)``: the character at ``index``; "" at the end."""
    s, i = as_string(text), as_int(index)
    if i < 0 or i > len(s):
        raise CelFunctionError(f"index out of range: {i}")
    return s[i] if i < len(s) else ""


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_ASCII_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def lower_ascii(text: Any) -> str:
    """``<string>.lowerAscii()``: ASCII letters only, as cel-go (no Unicode case mapping)."""
    return as_string(text).translate(_ASCII_LOWER)


def upper_ascii(text: Any) -> str:
    """``<string>.upperAscii()``."""
    return as_string(text).translate(_ASCII_UPPER)


def replace(text: Any, old: Any, new: Any, limit: Any = -1) -> str:
    """``<string>.replace(<string>, <string>[, <int>])``: Go's strings.Replace."""
    s, o, n, count = as_string(text), as_string(old), as_string(new), as_int(limit)
    return s.replace(o, n, count if count >= 0 else -1)


def split(text: Any, separator: Any, limit: Any = -1) -> list[str]:
    """``<string>.split(<string>[, <int>])``: Go's strings.SplitN (0: [], negative: all)."""
    s, sep, n = as_string(text), as_string(separator), as_int(limit)
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        return chars if n < 0 or n >= len(chars) else [*chars[: n - 1], "".join(chars[n - 1 :])]
    return s.split(sep, n - 1 if n > 0 else -1)


def substring(text: Any, start: Any, end: Any = None) -> str:
    """``<string>.substring(<int>[, <int>])``, in characters; out of range is an error."""
    s, i = as_string(text), as_int(start)
    j = len(s) if end is None else as_int(end)
    if end is not None and i > j:
        raise CelFunctionError(f"invalid substring range. start: {i}, end: {j}")
    for bound in (i, j):
        if bound < 0 or bound > len(s):
            raise CelFunctionError(f"index out of range: {bound}")
    return s[i:j]


# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's isspace adds \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
_GO_SPACE += "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def trim(text: Any) -> str:
    """``<string>.trim()``: leading and trailing Unicode white space."""
    return as_string(text).strip(_GO_SPACE)


def join(items: Any, separator: Any = "") -> str:
    """``<list<string>>.join([<string>])``."""
    sep = as_string(separator)
    out = []
    for item in as_list(items):
        if not isinstance(item, str):
            raise CelFunctionError(f"join: invalid input: {item}")
        out.append(item)
    return sep.join(out)


_QUOTED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTED |= {"\v": "\\v", "\\": "\\\\", '"': '\\"'}


def quote(text: Any) -> str:
    """``strings.quote(<string>)``: double-quoted, with CEL's escapes."""
    return '"' + "".join(_QUOTED.get(c, c) for c in as_string(text)) + '"'


_VERB = re.compile(r"%(?:\.(\d+))?(.)")


def format_string(template: Any, args: Any) -> str:
    """``<string>.format(<list>)`` (version 1): the verbs %s %d %f %e %b %o %x %X and %%.

    ``%s`` of a double, a list, a map, a timestamp or a duration is not supported (cel-go
    prints them its own way): a runtime error that says so.
    """
    s, values = as_string(template), as_list(args)
    out: list[str] = []
    used = 0
    pos = 0
    for match in _VERB.finditer(s):
        out.append(s[pos : match.start()])
        pos = match.end()
        precision, verb = match.group(1), match.group(2)
        if verb == "%":
            out.append("%")
            continue
        if used >= len(values):
            raise CelFunctionError(
                f"index {used} out of range"
                if used
                else "could not parse formatting clause: index 0 out of range"
            )
        out.append(_format_one(verb, precision, values[used]))
        used += 1
    out.append(s[pos:])
    return "".join(out)


def _format_one(verb: str, precision: str | None, value: Any) -> str:
    digits = 6 if precision is None else int(precision)
    if verb == "s" and isinstance(value, str):
        return value
    if verb == "s" and isinstance(value, bool):
        return "true" if value else "false"
    if verb in "sd" and is_int(value):
        return str(value)
    if verb == "f" and isinstance(value, float | int) and not isinstance(value, bool):
        return f"{float(value):.{digits}f}"
    if verb in "boxX" and (is_int(value) or isinstance(value, bool)):
        return format(int(value), verb)
    if verb in "xX" and isinstance(value, str):
        return value.encode().hex() if verb == "x" else value.encode().hex().upper()
    raise CelFunctionError(
        f"format: %{verb} of {type(value).__name__} is not supported here (docs/cel.md)"
    )


_BOOL_TEXT = {"1": True, "t": True, "true": True, "TRUE": True, "True": True}
_BOOL_TEXT |= {"0": False, "f": False, "false": False, "FALSE": False, "False": False}


def to_bool(value: Any) -> bool:
    """``bool(<bool or string>)``, a standard conversion the ``cel`` package lacks."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _BOOL_TEXT:
        return _BOOL_TEXT[value]
    if isinstance(value, str):
        raise CelFunctionError("type conversion error from 'string' to 'bool'")
    raise no_overload()


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "bool": to_bool,
    "charAt": char_at,
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "replace": replace,
    "split": split,
    "substring": substring,
    "trim": trim,
    "join": join,
    "format": format_string,
    "strings.quote": quote,
}
