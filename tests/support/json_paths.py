"""JSON documents taken apart for fuzzing: every path into one, and a value put at a path.

The property tests of the engine (``tests/core/admission/test_admission_properties.py``) and
of the server (``tests/system/robustness/test_robust_fuzz_server.py``) mangle captured
AdmissionReviews with these.
"""

from __future__ import annotations

from typing import Any

__all__ = ["paths", "put"]


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and list indexes) into ``node``, the empty one included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, (*prefix, i))
    return out


def put(doc: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> None:
    """Set what ``path`` (not empty) names in ``doc`` to ``value``; with ``delete``, remove
    it instead where it is a key of a mapping."""
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
