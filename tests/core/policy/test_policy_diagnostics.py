"""A policy file with several mistakes is told about all of them at once (docs/diagnostics.md):
its structure checked against the spec's JSON Schema, then what a schema cannot say, each
problem with its field and reason; the first is the one a single mistake gives alone."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.policy import PolicyError, parse_policy
from webhook.policy.errors import Diagnostic, Diagnostics


def _policy(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"devicePlugin": {"config": {"version": "v1"}}}
    body.update(spec)
    return {"apiVersion": "gpu-policy.io/v1alpha1", "kind": "SharingPolicy", "spec": body}


def _problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc, source="p.yaml")
    return [(d.field, d.reason) for d in caught.value.diagnostics]


def test_every_problem_of_a_policy_is_reported_at_once() -> None:
    doc = _policy(
        enforcement="sometimes",
        exemptNamespace=["a"],
        pools=[
            {"config": "default", "gpusPerNode": "two", "minNodes": 3, "maxNodes": 2},
            {"config": "missing", "migDevices": {"big": 1}},
        ],
        quota={"enabled": "yes", "weights": {"nvidia.com/gpu": "half"}},
        isolation={"mode": "strict"},
    )
    fields = [field for field, _ in _problems(doc)]
    assert sorted(fields) == sorted(
        [
            "spec.exemptNamespace",
            "spec.pools[0].gpusPerNode",
            "spec.isolation.mode",
            "spec.quota.enabled",
            "spec.enforcement",
            "spec.pools[0].minNodes",
            "spec.pools[1].migDevices.big",
            "spec.pools[1].config",
            "spec.quota.weights.nvidia.com/gpu",
        ]
    )
    # Structure first (the schema), then what only the readers can say.
    assert fields.index("spec.enforcement") < fields.index("spec.pools[0].minNodes")


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({"enforcement": "sometimes"}, "spec.enforcement", "'sometimes' is not one of enforce"),
        ({"pools": [{"config": "default", "minNode": 0}]}, "spec.pools[0].minNode", "unknown"),
        ({"quota": {"migShare": "slices"}}, "spec.quota.migShare", "is not one of compute"),
        ({"isolation": {"mode": "strict"}}, "spec.isolation.mode", "off, warn, enforce"),
        ({"dra": {"deviceClassSuffixes": []}}, "spec.dra.deviceClassSuffixes", "DNS suffixes"),
    ],
    ids=["enum", "unknown", "quota", "isolation", "dra"],
)
def test_one_mistake_is_reported_as_it_was_alone_and_first_among_others(
    spec: dict[str, Any], field: str, reason: str
) -> None:
    (alone,) = _problems(_policy(**spec))
    assert alone[0] == field and reason in alone[1]
    with_others = _problems(_policy(**spec, defaultIntent="never", mutation={"typo": 1}))
    assert alone in with_others and len(with_others) == 3


def test_a_null_field_takes_its_default() -> None:
    policy = parse_policy(
        _policy(
            pools=None,
            exemptNamespaces=None,
            mutation={"injectNodeSelection": None, "tolerations": None},
            isolation=None,
            quota=None,
        ),
        source="p.yaml",
    )
    assert policy.pools == () and "kube-system" in policy.exempt_namespaces
    assert policy.inject_node_selection == "intent" and policy.tolerations
    assert not policy.quota.enabled and policy.isolation.mode == "off"


def test_the_message_is_one_line_with_every_problem() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(_policy(enforcement="x", defaultIntent="y"), source="p.yaml")
    text = str(caught.value)
    assert "\n" not in text
    assert text == (
        "p.yaml: spec.enforcement: 'x' is not one of enforce, warn, audit; "
        "p.yaml: spec.defaultIntent: 'y' is not one of any, shared, exclusive"
    )
    assert (caught.value.field, caught.value.source) == ("spec.enforcement", "p.yaml")


def test_the_collector_keeps_warnings_apart_and_raises_every_error() -> None:
    diags = Diagnostics("f.yaml")
    diags.warn("a", "ignored")
    diags.check()  # warnings alone do not stop anything
    diags.error("b", "wrong", line=3)
    diags.error("c", "also\n wrong")
    assert diags.warnings == (Diagnostic("f.yaml", "a", "ignored", "warning"),)
    with pytest.raises(PolicyError) as caught:
        diags.check()
    assert str(caught.value) == "f.yaml:3: b: wrong; f.yaml: c: also wrong"
    assert caught.value.line == 3


def test_a_namespace_of_digits_is_read_as_its_name() -> None:
    """YAML reads `exemptNamespaces: [2024]` as a number: it is still the namespace 2024."""
    policy = parse_policy(
        _policy(exemptNamespaces=[2024, "ml"], isolation={"exemptNamespaces": [7]}),
        source="p.yaml",
    )
    assert policy.exempt_namespaces == {"2024", "ml"}
    assert policy.isolation.exempt_namespaces == {"7"}
    assert _problems(_policy(exemptNamespaces=[{"name": "ml"}])) == [
        ("spec.exemptNamespaces[0]", "must be a string or an integer, not {'name': 'ml'}")
    ]
