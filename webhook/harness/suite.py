"""Suites and their cases: what a suite file holds, once read.

A suite file is one YAML document::

    apiVersion: gpu-policy.io/v1alpha1
    kind: Suite                  # or PolicyTest
    name: seed003                # default: the file name without .yaml
    policy: ../clusters/seed003-l20-t4/policy.yaml   # default: the bundled example policy
    nodes: ../clusters/seed003-l20-t4/nodes.yaml     # optional node dump (the inventory)
    skip: false                  # or a reason (a string)
    cases:
      - name: two-shared-gpus-denied
        object: ../manifests/pod-gpu-2-shared-denied.yaml   # or inline: {...}
        select: {kind: Pod, name: nlp-train-0}              # pick one document of a file
        operation: CREATE        # CREATE (default), UPDATE, DELETE or CONNECT
        namespace: nlp           # default: the object's own
        injectNodeSelection: always   # this case only: intent, always, when-needed or never
        policy: ../policies/mps-49.yaml   # this case only: another policy, with the suite's nodes
        skip: false
        expect:
          allowed: false
          failed: [gpu-shared-request-above-one]   # the exact set of failed rule ids
          warnings: ['replicas of a shared GPU']   # regexes; each must match some warning
          message: 'ask for 1'                     # regex searched in the denial message
          golden: golden/two-shared.yaml           # the object after the webhook, or unchanged
          refused: 'invalid --device-id-strategy'  # the case's policy must be refused (alone)

``injectNodeSelection`` reviews one case under another ``spec.mutation.injectNodeSelection``
than the suite's policy says, so one suite can show what each mode does to the same pod.
``policy`` reviews one case under another policy file (the suite's node dump still makes the
inventory). ``expect: {refused: <regex>}`` says that policy must be refused, with a reason
the regex finds: the webhook would keep its last good policy and say why, and
``gpu-policy review --policy`` would exit 2. Only the engine can be asked either: a deployed
webhook or a cluster answers with its own policy, so those runners skip such a case.

Paths are relative to the suite file. :mod:`webhook.harness.suite_files` finds and reads
suite files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from webhook.contract import SUITE_KIND
from webhook.policy import Inventory, NodeSelection, Policy
from webhook.policy.errors import Diagnostic

SUITE_KINDS = (SUITE_KIND, "PolicyTest")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
UNCHANGED = "unchanged"

# File names the harness (and the pytest plugin) treat as suites when it walks a directory:
# anything ending in "suite.yaml" (suite.yaml, seed003-suite.yaml, mps.suite.yaml) and
# gpu-policy-test.yaml (the kyverno-test.yaml convention). A file named on the command line is
# read as a suite whatever its name.
SUITE_SUFFIXES = ("suite.yaml", "suite.yml")
SUITE_NAMES = ("gpu-policy-test.yaml", "gpu-policy-test.yml")


def is_suite_file(path: str | os.PathLike[str]) -> bool:
    """True when the file's name marks it as a suite (see SUITE_SUFFIXES and SUITE_NAMES)."""
    name = Path(path).name.lower()
    return name.endswith(SUITE_SUFFIXES) or name in SUITE_NAMES


#: One thing wrong with a suite file (where, the line, what): the core's diagnostic, whose
#: text is ``file:line: reason`` (docs/diagnostics.md).
Problem = Diagnostic


def problem(path: str | os.PathLike[str], line: int | None, message: str) -> Diagnostic:
    """A problem with the file ``path``, at ``line`` when it is known."""
    return Diagnostic(str(path), "", message, "error", line)


class SuiteError(Exception):
    """A suite file (or a file it names) cannot be used; ``problems`` lists every reason."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        """Keep the problems; the message is all of them, one a line."""
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True, slots=True)
class Golden:
    """A golden expectation: a file holding the object after the webhook, or ``unchanged``."""

    path: Path | None
    written: str

    @property
    def unchanged(self) -> bool:
        """True for ``golden: unchanged``: the webhook must not change the object."""
        return self.path is None


@dataclass(frozen=True, slots=True)
class Expect:
    """What a case expects; None means "not checked"."""

    allowed: bool | None = None
    failed: tuple[str, ...] | None = None
    warnings: tuple[re.Pattern[str], ...] | None = None
    message: re.Pattern[str] | None = None
    golden: Golden | None = None
    refused: re.Pattern[str] | None = None

    def summary(self) -> str:
        """A short form for the results table, e.g. ``denied [gpu-quantity]``."""
        parts: list[str] = []
        if self.allowed is not None:
            parts.append("allowed" if self.allowed else "denied")
        if self.failed:
            parts.append(f"[{', '.join(self.failed)}]")
        elif self.failed is not None and self.allowed is None:
            parts.append("no rule fails")
        if self.warnings is not None:
            parts.append(warning_count(len(self.warnings)) if self.warnings else "no warnings")
        if self.message is not None:
            parts.append("message")
        if self.golden is not None:
            parts.append(UNCHANGED if self.golden.unchanged else "golden")
        if self.refused is not None:
            parts.append("policy refused")
        return " ".join(parts) or "-"


@dataclass(frozen=True)
class Case:
    """One object to review and what to expect of the review."""

    suite: str
    name: str
    obj: Mapping[str, Any]
    expect: Expect
    path: Path
    line: int
    source: str
    operation: str = "CREATE"
    namespace: str | None = None
    skip: str | None = None
    inject_node_selection: NodeSelection | None = None
    # ``policy:`` of the case: the file, and what loading it gave (a policy and its inventory,
    # or the reason it was refused).
    policy_path: Path | None = None
    policy: Policy | None = None
    inventory: Inventory | None = None
    refusal: str | None = None

    @property
    def id(self) -> str:
        """``suite/case``: what ``-k`` matches and reports show."""
        return f"{self.suite}/{self.name}"


@dataclass
class Suite:
    """A loaded suite: its policy and inventory, and its cases in file order."""

    path: Path
    name: str
    policy: Policy
    inventory: Inventory
    cases: list[Case] = field(default_factory=list)
    description: str = ""
    skip: str | None = None

    def policy_for(self, case: Case) -> Policy:
        """The case's policy or the suite's, under the case's injectNodeSelection if it sets one."""
        policy = case.policy or self.policy
        if case.inject_node_selection is None:
            return policy
        return replace(policy, inject_node_selection=case.inject_node_selection)

    def inventory_for(self, case: Case) -> Inventory:
        """The inventory of the case's own policy, or the suite's."""
        return case.inventory or self.inventory


def warning_count(count: int) -> str:
    """``1 warning``, ``2 warnings``."""
    return f"{count} warning" if count == 1 else f"{count} warnings"
