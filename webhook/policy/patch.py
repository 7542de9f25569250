"""RFC 6902 JSON Patch from the original and the mutated object.

A generic ``jsonpatch.make_patch`` of a whole pod costs about 0.8 ms of CPU (PERFORMANCE.md),
more than the rest of a review together. The engine mutates by copying only what it changes
and sharing everything else with the original, so this diff skips any subtree that is the very
same object (``is``) and only walks the few paths that were copied. The property tests check
that the result applies, with the ``jsonpatch`` library, to give exactly the mutated object.
"""

from __future__ import annotations

from typing import Any

Op = dict[str, Any]
_ABSENT = object()  # a key missing from the original (None is a value)


def escape(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def diff(original: Any, mutated: Any, path: str = "") -> list[Op]:
    """The JSON Patch operations that turn ``original`` into ``mutated``."""
    ops: list[Op] = []
    _diff(original, mutated, path, ops)
    return ops


def _diff(a: Any, b: Any, path: str, ops: list[Op]) -> None:
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
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
        return
    if isinstance(a, list) and isinstance(b, list):
        common = min(len(a), len(b))
        for i in range(common):
            if a[i] is not b[i]:
                _diff(a[i], b[i], f"{path}/{i}", ops)
        for i in range(common, len(b)):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": b[i]})
        # Remove from the end so that earlier indexes stay valid.
        for i in range(len(a) - 1, common - 1, -1):
            ops.append({"op": "remove", "path": f"{path}/{i}"})
        return
    if type(a) is not type(b) or a != b:
        ops.append({"op": "replace", "path": path or "", "value": b})
