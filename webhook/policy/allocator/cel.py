"""CEL selectors as the allocator calls them: compile once, match a device, fail loudly.

A thin interface over ``webhook.policy.dra.Selectors`` until the full CEL environment of
``k8s.io/dynamic-resource-allocation/cel`` replaces this module with the same interface:
:func:`compile_selector` raises :class:`CelCompileError` for an expression that does not
compile; :meth:`CompiledSelector.matches` raises :class:`CelRuntimeError` where the
evaluation fails or gives no bool, which fails the allocation as in the scheduler
(docs/allocator.md, "CEL").
"""

from __future__ import annotations

from functools import lru_cache

from webhook.policy.dra import Device, Selectors

_SELECTORS = Selectors()


class CelCompileError(ValueError):
    """A selector that does not compile; the text says why."""


class CelRuntimeError(RuntimeError):
    """A selector whose evaluation on a device fails (``no such key``) or gives no bool."""


class CompiledSelector:
    """One compiled CEL selector expression."""

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def matches(self, device: Device) -> bool:
        """Does ``device`` pass the selector? Raises CelRuntimeError when it cannot be told."""
        found = _SELECTORS.evaluate(device, self.expression)
        if found.problem is not None:
            raise CelRuntimeError(found.problem)
        return found.matched


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile ``expression``; raises CelCompileError when it does not compile."""
    problem = _SELECTORS.problem(expression)
    if problem is not None:
        raise CelCompileError(problem)
    return CompiledSelector(expression)
