"""Strict reading of a composed YAML document: values, the lines they are on, and problems.

Problems are collected, not raised, so that every mistake in a suite file is reported at once,
each with its line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from webhook.harness.suite import Problem
from webhook.policy.errors import Diagnostics


def line_of(node: yaml.Node) -> int:
    """The 1-based line ``node`` starts on."""
    return int(node.start_mark.line) + 1


class NodeReader:
    """Walks a composed document of ``path``, building values and collecting problems."""

    def __init__(self, path: Path, loader: yaml.SafeLoader) -> None:
        """Read nodes composed by ``loader`` from the file ``path``."""
        self.path = path
        self.loader = loader
        self.diagnostics = Diagnostics(str(path))

    @property
    def problems(self) -> list[Problem]:
        """Every problem noted so far, in reading order."""
        return list(self.diagnostics.errors)

    def problem(self, node: yaml.Node | None, message: str) -> None:
        """Note a problem at ``node``'s line (the file's, for None)."""
        line = line_of(node) if node is not None else None
        self.diagnostics.error("", message, line=line)

    def value(self, node: yaml.Node) -> Any:
        """The Python value of ``node``."""
        return self.loader.construct_object(node, deep=True)

    def mapping(self, node: yaml.Node, what: str, allowed: Sequence[str]) -> dict[str, yaml.Node]:
        """The fields of a mapping node; wrong shape, duplicates and unknown keys reported."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{what} must be a mapping, not {shape(node)}")
            return {}
        fields: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                self.problem(key_node, f"{what}: keys must be strings")
                continue
            if key in fields:
                self.problem(key_node, f"{what}: {key} is given twice")
                continue
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                self.problem(
                    key_node, f"{what}: unknown field {key!r}; {hint}known: {', '.join(allowed)}"
                )
                continue
            fields[key] = value_node
        return fields

    def nonempty_mapping(
        self, node: yaml.Node, what: str, allowed: Sequence[str], empty: str
    ) -> dict[str, yaml.Node] | None:
        """The fields of a mapping that must say something; None (problem noted) otherwise,
        with ``empty`` as the message for an empty one."""
        fields = self.mapping(node, what, allowed)
        if not isinstance(node, yaml.MappingNode):
            return None
        if not fields:
            self.problem(node, empty)
            return None
        return fields

    def string(self, node: yaml.Node, what: str) -> str | None:
        """A non-empty string, or None with a problem noted."""
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or not value.strip():
            self.problem(node, f"{what} must be a non-empty string, not {shape(node)}")
            return None
        return value

    def boolean(self, node: yaml.Node, what: str) -> bool | None:
        """true or false, or None with a problem noted."""
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, bool):
            self.problem(node, f"{what} must be true or false, not {shape(node)}")
            return None
        return value

    def skip(self, node: yaml.Node | None, what: str) -> str | None:
        """``skip: true`` or ``skip: <reason>``: the reason, or None when not skipped."""
        if node is None:
            return None
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if value is True:
            return "skip: true"
        if value is False:
            return None
        if isinstance(value, str) and value.strip():
            return value.strip()
        self.problem(node, f"{what}: skip must be true, false or a reason, not {shape(node)}")
        return None

    def regex(self, node: yaml.Node, what: str) -> re.Pattern[str] | None:
        """A compiled regular expression, or None with a problem noted."""
        text = self.string(node, what)
        if text is None:
            return None
        try:
            return re.compile(text)
        except re.error as exc:
            self.problem(node, f"{what}: {text!r} is not a valid regular expression: {exc}")
            return None

    def relative(self, node: yaml.Node, what: str, *, must_exist: bool = True) -> Path | None:
        """A path relative to the file's directory, or None with a problem noted."""
        text = self.string(node, what)
        if text is None:
            return None
        path = self.path.parent / text
        if must_exist and not path.is_file():
            self.problem(node, f"{what}: {text} not found (looked for {path})")
            return None
        return path


def shape(node: yaml.Node | None) -> str:
    """What a node is, for messages: a mapping, a list, null or the scalar's text."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.ScalarNode):
        return "null" if node.tag.endswith(":null") else repr(node.value)
    return "nothing"
