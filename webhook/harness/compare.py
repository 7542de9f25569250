"""What a review answered for a case, and how it is held against the case's expectations.

Every runner (the engine in-process, a deployed webhook, a cluster's dry run) reduces its
answer to an :class:`Observed` (not the admission package's ``Outcome``, which is what the
server answered one request); :func:`check` then compares it with the case's
:class:`~webhook.harness.suite.Expect` and lists each difference in words a reviewer reads.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from webhook.contract import MUTATIONS_ANNOTATION
from webhook.harness.suite import Case, Expect, warning_count
from webhook.policy import RuleResult

# How the object after admission is compared with a golden file:
#   exact    - equal (the engine, or a webhook's patch applied to what we sent);
#   contains - the golden is contained in what a cluster returned, which adds defaults
#              (uid, timestamps, imagePullPolicy, default tolerations, requests from limits).
Comparison = Literal["exact", "contains"]
UNCHANGED_WORD = "unchanged"


VALIDATION_NOTE = "refused by the API server's validation"
# What the API server's own validation says about the pods the webhook's gpu-quantity,
# gpu-requests-equal-limits and gpu-ephemeral-container rules refuse (kubernetes/kubernetes
# pkg/apis/core/validation/validation.go; docs/device-plugin.md, "The API server"). It answers
# 422 Invalid with these before any validating webhook is called.
_VALIDATION_MESSAGE = re.compile(
    r"must be an integer|must be equal to \S+ limit|"
    r"Limit must be set for non overcommitable resources|"
    r"cannot be set for an Ephemeral Container"
)
INVALID_CODE = 422


def refused_by_validation(code: int, message: str) -> bool:
    """True when a refusal is the API server's own validation of GPU resources, not a webhook's."""
    return code == INVALID_CODE and _VALIDATION_MESSAGE.search(message) is not None


@dataclass(frozen=True)
class Observed:
    """A review's answer, whoever gave it.

    ``mutated`` is the object after admission when something changed it, None otherwise.
    ``error`` is set when there is no answer to judge (unreachable server, bad response).
    """

    allowed: bool
    failed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    message: str = ""
    mutated: Mapping[str, Any] | None = None
    results: tuple[RuleResult, ...] = ()
    changes: tuple[str, ...] = ()
    error: str | None = None
    comparison: Comparison = "exact"
    submitted: Mapping[str, Any] | None = None  # what was sent, when not exactly case.obj
    # The API server's own validation refused the object before any validating webhook was
    # called: no rule id, warning or golden object can be seen, only the verdict.
    refused_by_validation: bool = False
    # The case's own policy was refused (file, field, reason): nothing was reviewed.
    policy_refused: str | None = None

    def summary(self) -> str:
        """A short form for the results table, e.g. ``denied [gpu-quantity]``."""
        if self.error is not None:
            return "error"
        if self.policy_refused is not None:
            return "policy refused"
        parts = ["allowed" if self.allowed else "denied"]
        if self.failed:
            parts.append(f"[{', '.join(self.failed)}]")
        if self.refused_by_validation:
            parts.append(f"({VALIDATION_NOTE})")
        if self.warnings:
            parts.append(warning_count(len(self.warnings)))
        if self.allowed:
            # A cluster always returns a changed object (defaults); what counts there is
            # whether the webhook said it changed something.
            changed = bool(self.changes) if self.comparison == "contains" else self.mutated
            parts.append("mutated" if changed else UNCHANGED_WORD)
        return " ".join(parts)


@dataclass(frozen=True)
class Difference:
    """One expectation that did not hold: a one-line summary and optional detail (a diff)."""

    what: str
    detail: str = ""


def dump_yaml(obj: Any) -> str:
    """YAML with a stable key order: golden files and diffs change only when content does."""
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False, width=100)


def read_golden(path: Path) -> Any:
    """The object a golden file holds; FileNotFoundError when it is missing."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def after_admission(case: Case, observed: Observed) -> Mapping[str, Any]:
    """The object as it would be stored: the mutated one, or the submitted one unchanged."""
    if observed.mutated is not None:
        return observed.mutated
    return observed.submitted if observed.submitted is not None else case.obj


def check(case: Case, observed: Observed) -> list[Difference]:
    """Every way ``observed`` differs from what ``case`` expects (empty: the case passes)."""
    if observed.error is not None:
        return [Difference(f"no answer: {observed.error}")]
    expect: Expect = case.expect
    if expect.refused is not None or observed.policy_refused is not None:
        return _check_refused(expect, observed)
    out: list[Difference] = []
    if expect.allowed is not None and expect.allowed != observed.allowed:
        verdict = "allowed" if observed.allowed else "denied"
        want = "allowed" if expect.allowed else "denied"
        detail = f"denial: {observed.message}" if observed.message else ""
        out.append(Difference(f"expected {want}, got {verdict}", detail))
    if observed.refused_by_validation:
        # Rule ids, warnings and the object are the webhook's; the API server answered alone.
        return out
    if expect.failed is not None:
        out += _check_failed(expect.failed, observed)
    if expect.warnings is not None:
        out += _check_warnings(expect.warnings, observed)
    if expect.message is not None and not expect.message.search(observed.message):
        shown = observed.message or "(no denial message: the object was allowed)"
        out.append(Difference(f"the denial does not match /{expect.message.pattern}/", shown))
    if expect.golden is not None:
        out += _check_golden(case, observed)
    return out


def _check_refused(expect: Expect, observed: Observed) -> list[Difference]:
    """A case whose own policy is, or should be, refused: only the reason is compared."""
    reason = observed.policy_refused
    if expect.refused is None:
        return [Difference("the case's policy is refused", reason or "")]
    if reason is None:
        return [
            Difference(
                f"expected the case's policy refused (/{expect.refused.pattern}/), but it loads"
            )
        ]
    if not expect.refused.search(reason):
        return [Difference(f"the refusal does not match /{expect.refused.pattern}/", reason)]
    return []


def _check_failed(expected: Sequence[str], observed: Observed) -> list[Difference]:
    got = set(observed.failed)
    want = set(expected)
    if got == want:
        return []
    bits = []
    if want - got:
        bits.append(f"missing {', '.join(sorted(want - got))}")
    if got - want:
        bits.append(f"unexpected {', '.join(sorted(got - want))}")
    return [
        Difference(
            f"failed rules: expected [{', '.join(sorted(want))}], got "
            f"[{', '.join(sorted(got))}] ({'; '.join(bits)})",
            _results_text(observed),
        )
    ]


def _check_warnings(patterns: Sequence[re.Pattern[str]], observed: Observed) -> list[Difference]:
    out: list[Difference] = []
    if not patterns and observed.warnings:
        out.append(
            Difference(
                f"expected no warnings, got {len(observed.warnings)}",
                _list("warnings", observed.warnings),
            )
        )
    for pattern in patterns:
        if not any(pattern.search(w) for w in observed.warnings):
            out.append(
                Difference(
                    f"no warning matches /{pattern.pattern}/",
                    _list("warnings", observed.warnings),
                )
            )
    return out


def _check_golden(case: Case, observed: Observed) -> list[Difference]:
    golden = case.expect.golden
    assert golden is not None
    if not observed.allowed:
        return [Difference("denied: there is no object to compare with the golden file")]
    if golden.path is None:
        return _check_unchanged(case, observed)
    try:
        expected = read_golden(golden.path)
    except FileNotFoundError:
        return [
            Difference(
                f"golden file {golden.written} does not exist; "
                "run with --update-golden to create it",
                dump_yaml(after_admission(case, observed)),
            )
        ]
    except (OSError, yaml.YAMLError) as exc:
        return [Difference(f"golden file {golden.written} cannot be read: {exc}")]
    got = after_admission(case, observed)
    if observed.comparison == "contains":
        missing = _not_contained(_ignoring_annotation(expected), got, "")
        if missing:
            return [
                Difference(
                    f"the object the cluster returned does not contain golden {golden.written}",
                    "\n".join(missing[:20]),
                )
            ]
        return []
    if expected != got:
        return [
            Difference(
                f"the object after the webhook differs from golden {golden.written}",
                unified(expected, got, f"{golden.written} (golden)", "after the webhook"),
            )
        ]
    return []


def _check_unchanged(case: Case, observed: Observed) -> list[Difference]:
    submitted = observed.submitted if observed.submitted is not None else case.obj
    if observed.comparison == "contains":
        got = after_admission(case, observed)
        meta = got.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        if isinstance(annotations, Mapping) and MUTATIONS_ANNOTATION in annotations:
            return [
                Difference(
                    "expected unchanged, but the webhook changed it: "
                    f"{annotations[MUTATIONS_ANNOTATION]}"
                )
            ]
        missing = _not_contained(submitted, got, "")
        if missing:
            return [Difference("expected unchanged, got changes", "\n".join(missing[:20]))]
        return []
    if observed.mutated is not None and observed.mutated != submitted:
        changes = "; ".join(observed.changes)
        return [
            Difference(
                "expected unchanged, got changes" + (f": {changes}" if changes else ""),
                unified(submitted, observed.mutated, "submitted", "after the webhook"),
            )
        ]
    return []


def unified(before: Any, after: Any, before_label: str, after_label: str) -> str:
    """A unified diff of two objects as YAML."""
    return "".join(
        difflib.unified_diff(
            dump_yaml(before).splitlines(keepends=True),
            dump_yaml(after).splitlines(keepends=True),
            fromfile=before_label,
            tofile=after_label,
        )
    ).rstrip("\n")


def _ignoring_annotation(obj: Any) -> Any:
    """A copy without the webhook's mutations annotation, whose text depends on what the API
    server's defaulting had already done (a real pod arrives with requests copied from limits)."""
    if not isinstance(obj, Mapping):
        return obj
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("annotations"), Mapping):
        return obj
    annotations = {k: v for k, v in meta["annotations"].items() if k != MUTATIONS_ANNOTATION}
    new_meta = {**meta, "annotations": annotations}
    if not annotations:
        del new_meta["annotations"]
    return {**obj, "metadata": new_meta}


def _scalar(value: Any) -> str:
    # The API server returns quantities as strings ("1"), a manifest often has numbers (1).
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _not_contained(expected: Any, got: Any, path: str) -> list[str]:
    """Where ``expected`` is not contained in ``got``: mappings by key, lists as ordered
    subsequences of contained items, scalars by their text."""
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return [f"{path or '/'}: expected a mapping, got {got!r}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in got:
                out.append(f"{path}/{key}: missing (expected {value!r})")
            else:
                out += _not_contained(value, got[key], f"{path}/{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(got, list):
            return [f"{path}: expected a list, got {got!r}"]
        start = 0
        for i, item in enumerate(expected):
            for j in range(start, len(got)):
                if not _not_contained(item, got[j], ""):
                    start = j + 1
                    break
            else:
                return _closest(item, got, i, path)
        return []
    if expected is None:
        return [] if got is None else [f"{path}: expected null, got {got!r}"]
    if got is None or _scalar(expected) != _scalar(got):
        return [f"{path}: expected {expected!r}, got {got!r}"]
    return []


def _closest(item: Any, got: list[Any], index: int, path: str) -> list[str]:
    """Why ``item`` matches nothing: compared with the item of the same name (containers,
    volumes...) or at the same position, when there is one."""
    candidate = None
    if isinstance(item, Mapping) and "name" in item:
        named = [g for g in got if isinstance(g, Mapping) and g.get("name") == item["name"]]
        candidate = named[0] if named else None
    elif index < len(got):
        candidate = got[index]
    if candidate is None:
        return [f"{path}/{index}: no matching item for {item!r}"]
    return _not_contained(item, candidate, f"{path}/{index}")


def _list(title: str, items: Sequence[str]) -> str:
    if not items:
        return f"{title}: none"
    return f"{title}:\n" + "\n".join(f"  - {item}" for item in items)


def _results_text(observed: Observed) -> str:
    lines = [
        f"{r.status.upper()} {r.rule}: {r.message}"
        for r in observed.results
        if r.status in ("fail", "warn", "error")
    ]
    if not lines and observed.message:
        lines.append(f"denial: {observed.message}")
    return "\n".join(lines)
