"""values.yaml documents every value, and values.schema.json is strict and agrees with it.

No helm needed: these read the two files directly.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.chart_helpers import CHART, CI_FILES

KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/]+):(?:\s|$)")
# Objects in the schema that are open on purpose: Kubernetes objects passed through
# verbatim (checked by the API server, and by the rendered-manifest validation in the
# tests), and the policy spec (the server's own schema, written by scripts/gen_schema.py and held
# to it by test_chart_schema.py; values.yaml sets only some of its fields).
OPEN_OBJECTS = {
    "global",
    "policy.spec",
    "podSecurityContext",
    "securityContext",
    "resources",
    "audit.resources",
    "affinity",
    "serviceMonitor.tlsConfig",
}


def _key_lines(text: str) -> list[tuple[int, str, bool, int]]:
    """(indent, key, has a '# --' comment, line number) for mapping keys outside lists."""
    lines = text.splitlines()
    out = []
    list_indent: int | None = None
    for number, line in enumerate(lines):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if not stripped or stripped.startswith("#"):
            continue
        if list_indent is not None and indent > list_indent:
            continue
        list_indent = None
        if stripped.startswith("- "):
            list_indent = indent
            continue
        match = KEY_LINE.match(line)
        if not match:
            continue
        documented = False
        above = number - 1
        while above >= 0 and lines[above].strip().startswith("#"):
            comment = lines[above].strip()
            if (
                comment.startswith("# --")
                and len(lines[above]) - len(lines[above].lstrip()) == indent
            ):
                documented = True
            above -= 1
        out.append((indent, match["key"], documented, number + 1))
    return out


def _undocumented(text: str) -> list[str]:
    """Dotted paths of leaf values with no '# --' comment on them or on an ancestor."""
    entries = _key_lines(text)
    missing = []
    stack: list[tuple[int, str, bool]] = []
    for i, (indent, key, documented, number) in enumerate(entries):
        while stack and stack[-1][0] >= indent:
            stack.pop()
        covered = documented or any(doc for _, _, doc in stack)
        is_parent = i + 1 < len(entries) and entries[i + 1][0] > indent
        path = ".".join([k for _, k, _ in stack] + [key])
        if not is_parent and not covered:
            missing.append(f"{path} (line {number})")
        stack.append((indent, key, documented))
    return missing


def test_every_value_is_documented() -> None:
    missing = _undocumented((CHART / "values.yaml").read_text())
    assert missing == [], f"values without a '# --' comment: {missing}"


def test_the_documentation_check_finds_gaps() -> None:
    text = "a:\n  # -- documented\n  b: 1\n  c: 2\n# -- whole object\nd:\n  e: 1\n"
    assert _undocumented(text) == ["a.c (line 4)"]


def test_values_match_the_schema(
    chart_values: dict[str, Any], values_schema: dict[str, Any]
) -> None:
    jsonschema.Draft7Validator.check_schema(values_schema)
    jsonschema.validate(chart_values, values_schema)


@pytest.mark.parametrize("values_file", CI_FILES, ids=lambda p: p.name)
def test_ci_values_match_the_schema(
    values_file, chart_values: dict[str, Any], values_schema: dict[str, Any]
) -> None:
    """Each ci file over the defaults, merged the way helm merges values files."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base.get(k), over[k]) if k in over else base[k] for k in base | over}
        return over

    merged = merge(chart_values, yaml.safe_load(values_file.read_text()) or {})
    jsonschema.validate(merged, values_schema)


def _objects(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if schema.get("type") == "object":
        out.append((path, schema))
        for key, sub in schema.get("properties", {}).items():
            out += _objects(sub, f"{path}.{key}" if path else key)
    return out


def test_schema_is_strict(values_schema: dict[str, Any]) -> None:
    for path, schema in _objects(values_schema):
        if path in OPEN_OBJECTS or path.startswith("policy.spec."):
            continue
        extra = schema.get("additionalProperties")
        if not schema.get("properties"):
            # A map (labels, annotations, nodeSelector): any key, typed values.
            assert isinstance(extra, dict) and extra.get("type"), f"{path}: untyped open object"
            continue
        assert extra is False, f"{path or '<root>'} accepts unknown keys"


def test_schema_and_values_have_the_same_keys(
    chart_values: dict[str, Any], values_schema: dict[str, Any]
) -> None:
    """Every value in values.yaml is in the schema, and every schema key has a default in
    values.yaml (so it is documented there), except optional sub-keys of empty defaults."""

    def walk(values: Any, schema: dict[str, Any], path: str) -> list[str]:
        problems = []
        if path in OPEN_OBJECTS or not isinstance(values, dict) or "properties" not in schema:
            return problems
        props = schema["properties"]
        for key in values:
            if key not in props:
                problems.append(f"{path}.{key} is not in the schema")
        for key, sub in props.items():
            if key not in values:
                if not values and path:  # e.g. issuerRef: {} documents its keys in the comment
                    continue
                if f"{path}.{key}".lstrip(".") == "global":
                    continue
                problems.append(f"{path}.{key} has no default in values.yaml")
            else:
                problems += walk(values[key], sub, f"{path}.{key}".lstrip("."))
        return problems

    assert walk(chart_values, values_schema, "") == []
