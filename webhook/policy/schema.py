"""The structure of an input, declared once as JSON Schema and checked with ``jsonschema``.

A reader declares the shape of what it reads with the builders here (:func:`mapping`,
:func:`string`, :func:`choice`, ...): the same declaration is the JSON Schema that
``scripts/gen_schema.py`` writes into the chart's ``values.schema.json`` (so ``helm install``
refuses what the server would refuse) and the one :func:`check` validates a file against. Every
structural problem (an unknown field, a wrong type, a value not among the choices) becomes a
:class:`~webhook.policy.errors.Diagnostic` with its field path and a reason in the words the
readers have always used; the value at fault is left out of what :func:`check` returns, so the
reader goes on with its default and reports what else is wrong (docs/diagnostics.md).

JSON Schema draft 7, the draft Helm validates values with.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, get_args

from webhook.policy.errors import Diagnostics
from webhook.policy.text import shown

Schema = dict[str, Any]

DRAFT = "http://json-schema.org/draft-07/schema#"

# What each JSON type is called in a reason ("must be a mapping, not 3").
_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
}


def _described(schema: Schema, description: str | None, null: bool = False) -> Schema:
    # ``null``: a null value means "not given", the field's default (every reader has always
    # read a null that way), so the schema accepts it too.
    if null:
        kind = schema["type"]
        schema["type"] = [*([kind] if isinstance(kind, str) else kind), "null"]
    if description:
        schema["description"] = description
    return schema


def mapping(
    properties: Mapping[str, Schema],
    description: str | None = None,
    *,
    required: Sequence[str] = (),
    null: bool = True,
) -> Schema:
    """A mapping with exactly these fields (any other is an unknown field), in reading order.

    Here and below, ``null``: a null value stands for the default.
    """
    schema: Schema = {"type": "object", "additionalProperties": False}
    schema["properties"] = dict(properties)
    if required:
        schema["required"] = list(required)
    return _described(schema, description, null)


def open_mapping(
    description: str | None = None, values: Schema | None = None, *, null: bool = True
) -> Schema:
    """A mapping whose keys are the user's (a ConfigMap, weights); ``values``: their shape."""
    schema: Schema = {"type": "object"}
    if values is not None:
        schema["additionalProperties"] = values
    return _described(schema, description, null)


def string(description: str | None = None, *, nonempty: bool = False, null: bool = True) -> Schema:
    """A string (``nonempty``: with at least one character)."""
    schema: Schema = {"type": "string"}
    if nonempty:
        schema["minLength"] = 1
    return _described(schema, description, null)


def integer(
    description: str | None = None, *, minimum: int | None = None, null: bool = True
) -> Schema:
    """An integer (``minimum``: at least that)."""
    schema: Schema = {"type": "integer"}
    if minimum is not None:
        schema["minimum"] = minimum
    return _described(schema, description, null)


def boolean(description: str | None = None, *, null: bool = True) -> Schema:
    """true or false."""
    return _described({"type": "boolean"}, description, null)


def strings(description: str | None = None, *, null: bool = True) -> Schema:
    """A list of strings."""
    return _described({"type": "array", "items": {"type": "string"}}, description, null)


def names(description: str | None = None) -> Schema:
    """A list of names (namespaces): strings, or numbers YAML read from a name of digits,
    which the reader turns back into the name."""
    return _described(
        {"type": ["array", "null"], "items": {"type": ["string", "integer"]}}, description
    )


def items(of: Schema, description: str | None = None, *, null: bool = True) -> Schema:
    """A list whose every item has the shape ``of``."""
    return _described({"type": "array", "items": of}, description, null)


def one_of_types(
    types: Sequence[str], description: str | None = None, *, null: bool = True
) -> Schema:
    """A value of any of these JSON types (``["string", "object"]``)."""
    return _described({"type": list(types)}, description, null)


def choice(
    literal: Any, description: str | None = None, *, aliases: Iterable[object] = ()
) -> Schema:
    """One of the values of a ``Literal`` type (or a tuple of them), and the ``aliases``
    (``None`` among them: a null stands for the default).

    The choices come from the type the code reads, so the schema cannot list others.
    """
    values = list(literal) if isinstance(literal, tuple) else list(get_args(literal))
    return _described({"enum": [*values, *aliases]}, description)


def path_of(where: str, parts: Iterable[object]) -> str:
    """``spec.pools[0].config`` from a base and the keys and indexes below it."""
    out = where
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def check(value: object, schema: Schema, diags: Diagnostics, where: str) -> Any:
    """Every structural problem of ``value`` (found at ``where``) noted in ``diags``.

    Returns a copy of ``value`` without the parts at fault (an unknown key, a value of the
    wrong type: the key is left out; an item of a list: the whole list), so that a reader of
    the copy finds only values of the declared types and falls back on its defaults.
    """
    # Imported here: it costs about a quarter of a second of CPU (attrs, referencing), which
    # only a reading of a SharingPolicy needs, not every command that imports the core.
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    clean = copy.deepcopy(value)
    for error in validator.iter_errors(value):
        parts = list(error.absolute_path)
        for field, reason, drop in _explain(error, where, parts):
            diags.error(field, reason)
            if drop == []:
                clean = None  # the value itself is of the wrong type: nothing of it is kept
            elif drop is not None:
                _drop(clean, drop)
    _drop_nulls(clean, schema)
    return clean


def _drop_nulls(value: Any, schema: Schema) -> None:
    """Leave out the null fields of the declared mappings: a null stands for the default.

    The mappings whose keys are the user's (a ConfigMap, weights) keep theirs: their readers
    judge them.
    """
    properties = schema.get("properties")
    if isinstance(value, dict) and properties is not None:
        for key in [k for k, v in value.items() if v is None]:
            del value[key]
        for key, sub in properties.items():
            if key in value:
                _drop_nulls(value[key], sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _drop_nulls(item, schema["items"])


def _explain(
    error: Any, where: str, parts: list[Any]
) -> Iterator[tuple[str, str, list[Any] | None]]:
    """(field, reason, the path to leave out or None) for one jsonschema error."""
    kind, instance, expected = error.validator, error.instance, error.validator_value
    if kind == "additionalProperties" and isinstance(instance, Mapping):
        known = sorted(error.schema.get("properties", {}))
        for key in sorted((k for k in instance if k not in known), key=str):
            yield (
                path_of(where, [*parts, key]),
                f"unknown field (known: {', '.join(known)})",
                [*parts, key],
            )
        return
    if kind == "required" and isinstance(instance, Mapping):
        for key in expected:
            if key not in instance:
                yield path_of(where, [*parts, key]), "required", None
        return
    field = path_of(where, parts)
    if kind == "type":
        # A null stands for the default where it is allowed: the reason names what to write.
        types = [t for t in ([expected] if isinstance(expected, str) else expected) if t != "null"]
        names = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        reason = f"must be {names}, not {shown(instance)}"
    elif kind == "enum":
        named = ", ".join(str(v) for v in expected if isinstance(v, str))
        reason = f"{shown(instance)} is not one of {named}"
    elif kind == "minimum":
        reason = f"must be >= {expected}, not {shown(instance)}"
    elif kind == "minLength":
        reason = "must not be empty"
    else:
        reason = error.message
    # An item of a list at fault: the list goes (its other items' problems are reported all
    # the same); a field at fault: the field goes.
    while parts and isinstance(parts[-1], int):
        parts = parts[:-1]
    yield field, reason, parts


def _drop(value: Any, parts: list[Any]) -> None:
    """Leave ``parts`` (a path of keys) out of ``value``, if it is still there."""
    if not parts:
        return
    *above, last = parts
    for part in above:
        found = (isinstance(value, Mapping) and part in value) or (
            isinstance(value, list) and isinstance(part, int) and part < len(value)
        )
        if not found:
            return
        value = value[part]
    if isinstance(value, dict):
        value.pop(last, None)
