"""RFC 6902 JSON Patch from the original and the mutated object.

A generic ``jsonpatch.make_patch`` of a whole pod costs about 0.8 ms of CPU, more than the rest
of a review together. The engine mutates by copying only what it changes
and sharing everything else with the original, so this diff skips any subtree that is the very
same object (``is``) and only walks the few paths that were copied. A caller that knows where
it writes can also name those places (``within``), and the walk does not even look at the rest
(a pod spec has some thirty fields, the engine writes five). The property tests check that the
result applies, with the ``jsonpatch`` library, to give exactly the mutated object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

Op = dict[str, Any]
# Keys to compare, each with the keys to compare below it, or None for the whole subtree.
Within = Mapping[str, Optional["Within"]]
_ABSENT = object()  # a key missing from the original (None is a value)


def escape(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def diff(original: Any, mutated: Any, path: str = "", *, within: Within | None = None) -> list[Op]:
    """The JSON Patch operations that turn ``original`` into ``mutated``.

    With ``within``, only the keys it names are compared (in its order), recursively; anything
    else must be the same in both, or the patch will not say so.
    """
    ops: list[Op] = []
    if within is None:
        _diff(original, mutated, path, ops)
    else:
        _diff_within(original, mutated, path, ops, within)
    return ops


def _diff_within(a: Any, b: Any, path: str, ops: list[Op], within: Within) -> None:
    if a is b:
        return
    if not (isinstance(a, dict) and isinstance(b, dict)):
        _diff(a, b, path, ops)
        return
    for key, below in within.items():
        old = a.get(key, _ABSENT)
        new = b.get(key, _ABSENT)
        if old is new:
            continue
        where = f"{path}/{escape(key)}"
        if new is _ABSENT:
            ops.append({"op": "remove", "path": where})
        elif old is _ABSENT:
            ops.append({"op": "add", "path": where, "value": new})
        elif below is None:
            _diff(old, new, where, ops)
        else:
            _diff_within(old, new, where, ops, below)


def _diff(a: Any, b: Any, path: str, ops: list[Op]) -> None:
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        _diff_dicts(a, b, path, ops)
    elif isinstance(a, list) and isinstance(b, list):
        _diff_lists(a, b, path, ops)
    elif type(a) is not type(b) or a != b:
        ops.append({"op": "replace", "path": path or "", "value": b})


def _diff_dicts(a: dict[str, Any], b: dict[str, Any], path: str, ops: list[Op]) -> None:
    if not a.keys() <= b.keys():  # one C-level check for the usual case: nothing removed
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
    get = a.get
    for key, value in b.items():
        old = get(key, _ABSENT)
        if old is value:
            continue  # shared with the original: the engine did not touch it
        if old is _ABSENT:
            ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
        else:
            _diff(old, value, f"{path}/{escape(key)}", ops)


def _diff_lists(a: list[Any], b: list[Any], path: str, ops: list[Op]) -> None:
    common = min(len(a), len(b))
    for i in range(common):
        if a[i] is not b[i]:
            _diff(a[i], b[i], f"{path}/{i}", ops)
    for i in range(common, len(b)):
        ops.append({"op": "add", "path": f"{path}/{i}", "value": b[i]})
    # Remove from the end so that earlier indexes stay valid.
    for i in range(len(a) - 1, common - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{i}"})
