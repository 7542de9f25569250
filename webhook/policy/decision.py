"""What a review returns: the verdict, one result per rule, warnings and the mutation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.policy.records import per_review_record

Status = Literal["pass", "fail", "warn", "skip", "error"]


@dataclass(frozen=True, slots=True)
class RuleResult:
    """One rule's verdict on one object (or one container of it)."""

    rule: str
    status: Status
    message: str = ""
    container: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form used by the CLI, the harness and audit annotations."""
        out: dict[str, Any] = {"rule": self.rule, "status": self.status, "message": self.message}
        if self.container is not None:
            out["container"] = self.container
        return out


@per_review_record
class Decision:
    """The outcome of ``review()``; the server, the CLI and the harness all read this."""

    kind: str
    namespace: str | None
    name: str | None
    allowed: bool
    results: tuple[RuleResult, ...]
    warnings: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()
    mutated: Mapping[str, Any] | None = None
    patch: tuple[dict[str, Any], ...] = ()
    enforcement: str = "enforce"

    @property
    def failed(self) -> tuple[str, ...]:
        """Ids of the rules that failed, in order, without repeats."""
        return tuple(dict.fromkeys(r.rule for r in self.results if r.status == "fail"))

    @property
    def denial(self) -> str:
        """The message a denied user reads: every failed rule, one sentence each."""
        return "; ".join(f"[{r.rule}] {r.message}" for r in self.results if r.status == "fail")
