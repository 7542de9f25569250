"""The JSON Patch builder on its own: any two JSON documents, and the ``within`` limit."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.policy.patch import diff

keys = st.sampled_from(["a", "b", "c", "x/y", "t~0", ""])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(a=json_values, b=json_values)
def test_the_patch_turns_one_document_into_the_other(a: Any, b: Any) -> None:
    original = copy.deepcopy(a)
    ops = diff(a, b)
    assert jsonpatch.apply_patch(a, ops) == b
    assert a == original  # diff reads, never writes
    assert diff(b, copy.deepcopy(b)) == []


def test_within_compares_only_the_keys_it_names() -> None:
    original = {"metadata": {"name": "p"}, "spec": {"a": 1, "b": [1], "c": {"d": 1}}}
    mutated = {
        "metadata": {"name": "p", "annotations": {"k": "v"}},
        "spec": {"a": 2, "b": [1, 2], "c": {"d": 1}, "e": True},
    }
    within = {"metadata": {"annotations": None}, "spec": {"b": None, "e": None}}
    assert diff(original, mutated, within=within) == [
        {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
        {"op": "add", "path": "/spec/b/1", "value": 2},
        {"op": "add", "path": "/spec/e", "value": True},
    ]  # spec.a changed too, but within does not name it
    removed = {"metadata": {"name": "p"}, "spec": {"c": {"d": 1}}}
    assert diff(original, removed, within=within) == [{"op": "remove", "path": "/spec/b"}]
