"""What a selector's text says before it runs: the checks cel-go's compiler makes that the
``cel`` package does not, what it reads of the device, and rewrites for the ``cel`` package.

cel-go type-checks an expression against its declarations (the ``device`` variable, the
functions of the environment: docs/cel.md) and refuses an unknown name or field at compile
time; the ``cel`` package would only fail at run time. The checks here refuse the same names,
and refuse what the ``cel`` package cannot evaluate as cel-go would, with a message saying so.
Every function returns a message (None: fine), the caller raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from webhook.policy.selectors import library as cel_library

Read = tuple[str, str, str]  # ("attributes" | "capacity", domain, id)

DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})

# The CEL standard functions (cel-go checker/decls, the language definition) and the optional
# types' (cel.OptionalTypes, on since Kubernetes 1.28) that the cel package has natively.
STANDARD = frozenset(
    {
        "size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double",
        "string", "bytes", "bool", "timestamp", "duration", "dyn", "type", "getDate",
        "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getFullYear", "getHours",
        "getMilliseconds", "getMinutes", "getMonth", "getSeconds", "of", "ofNonZeroValue",
        "none", "value", "hasValue", "or", "orValue",
    }
)  # fmt: skip
_OPTIONAL = frozenset({"optional.of", "optional.ofNonZeroValue", "optional.none"})
_QUALIFIED = frozenset(n for n in cel_library.FUNCTIONS if "." in n) | _OPTIONAL
_NAMESPACES = frozenset(n.split(".")[0] for n in _QUALIFIED) | {"math", "base64", "format"}
_MEMBERS = frozenset(n.rsplit(".", 1)[-1] for n in cel_library.FUNCTIONS) | STANDARD
_TYPE_NAMES = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)

# cel-go features of the Kubernetes environment that the cel package cannot evaluate.
_TWO_VARIABLES = re.compile(
    r"\.\s*(all|exists|existsOne|exists_one)\s*\(\s*[A-Za-z_]\w*\s*,\s*[A-Za-z_]\w*\s*,"
)
_UNSUPPORTED_MACRO = re.compile(
    r"\.\s*(transformList|transformMap|transformMapEntry|sortBy|optMap|optFlatMap)\s*\("
)
_QUALIFIED_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*\(")
_BOUND = re.compile(
    r"(?:\.\s*(?:all|exists|exists_one|map|filter)\s*\(|\bcel\s*\.\s*bind\s*\()\s*([A-Za-z_]\w*)"
)
_DEVICE_FIELD = re.compile(r"\bdevice\s*\.\s*([A-Za-z_]\w*)")

# The domains an expression indexes with a literal (device.attributes["gpu.nvidia.com"]).
_DOMAIN_INDEX = re.compile(r"""\b(?:attributes|capacity)\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]""")
# Every way an expression reads the device, when each is a plain field or one attribute or
# capacity of a literal domain: ``device.driver``, ``device.attributes["d"].name``.
_DEVICE = re.compile(r"\bdevice\b")
_READ = re.compile(
    r"""\bdevice\s*\.\s*(?:(driver|allowMultipleAllocations)\b|(attributes|capacity)\s*\[\s*"""
    r"""(?:"([^"\\]*)"|'([^'\\]*)')\s*\]\s*\.\s*([A-Za-z_]\w*)\b(?!\s*\())"""
)


def _error(expression: str, index: int, message: str) -> str:
    # cel-go's issues.String(): the location, the message, the line and a caret.
    line_start = expression.rfind("\n", 0, index) + 1
    line_no = expression.count("\n", 0, index) + 1
    line_end = expression.find("\n", index)
    line = expression[line_start : line_end if line_end >= 0 else len(expression)]
    column = index - line_start
    return (
        f"compilation failed: ERROR: <input>:{line_no}:{column + 1}: {message}\n"
        f" | {line}\n | {'.' * column}^"
    )


def check_source(expression: str) -> str | None:
    """Why the ``cel`` package cannot evaluate ``expression`` as cel-go would, or None."""
    found = _TWO_VARIABLES.search(expression)
    if found is not None:
        return _error(
            expression,
            found.start(1),
            f"{found.group(1)}() with two variables (cel-go's two-variable comprehensions) "
            "is not supported by this webhook (docs/cel.md)",
        )
    found = _UNSUPPORTED_MACRO.search(expression)
    if found is not None:
        return _error(
            expression,
            found.start(1),
            f"{found.group(1)}() is not supported by this webhook (docs/cel.md)",
        )
    for call in _QUALIFIED_CALL.finditer(expression):
        if call.group(1) == "format":
            return _error(
                expression,
                call.start(),
                "the format library (format.named, format.dns1123Label...) is not "
                "supported by this webhook (docs/cel.md)",
            )
    return None


def undeclared(expression: str, functions: Iterable[str], variables: Iterable[str]) -> str | None:
    """The first name cel-go's checker would not know: a function, a variable, a field of
    ``device``; None when every one is declared."""
    bound = set(_BOUND.findall(expression))
    qualified_roots: set[str] = set()
    for call in _QUALIFIED_CALL.finditer(expression):
        root, name = call.group(1), call.group(2)
        if root in bound or root not in _NAMESPACES:
            continue
        qualified_roots.add(root)
        if f"{root}.{name}" not in _QUALIFIED:
            return _error(
                expression,
                call.start(),
                f"undeclared reference to '{root}.{name}' (in container '')",
            )
    for name in functions:
        if name[:1] in "_@!-" or name in _MEMBERS:
            continue
        return _error(
            expression,
            max(expression.find(name), 0),
            f"undeclared reference to '{name}' (in container '')",
        )
    for name in variables:
        if name == "device" or name in bound or name in _TYPE_NAMES or name in qualified_roots:
            continue
        return _error(
            expression,
            max(expression.find(name), 0),
            f"undeclared reference to '{name}' (in container '')",
        )
    if "device" not in bound:
        for use in _DEVICE_FIELD.finditer(expression):
            if use.group(1) not in DEVICE_FIELDS:
                return _error(expression, use.start(1), f"undefined field '{use.group(1)}'")
    return None


def compile_message(parse_error: str) -> str:
    """The cel package's parse error in cel-go's words ("compilation failed: ERROR: ...")."""
    text = parse_error
    found = text.find("ERROR: ")
    if found >= 0:
        text = text[found:]
    lines = text.splitlines()
    shown = [lines[0], *(" | " + line.lstrip("| ").rstrip() for line in lines[1:3])]
    return "compilation failed: " + "\n".join(shown)


def domains_indexed(expression: str) -> tuple[str, ...]:
    """The domains an expression indexes with a literal string."""
    return tuple(sorted({a or b for a, b in _DOMAIN_INDEX.findall(expression)}))


def reads_of(expression: str) -> tuple[Read, ...] | None:
    """What the expression reads of the device when that is all fields and attributes or
    capacities of literal domains; None when it reads the device otherwise (a macro over
    its maps, a binding, a non-literal domain)."""
    found = _READ.findall(expression)
    if len(found) != len(_DEVICE.findall(expression)):
        return None
    return tuple(sorted({(kind, a or b, ident) for _, kind, a, b, ident in found if kind}))


def bind_to_map(expression: str) -> str:
    """Rewrite ``cel.bind(v, init, body)`` (cel-go's bindings extension) as ``[init].map(v,
    body)[0]``, which binds ``v`` the same way with macros the cel package has."""
    start = expression.find("cel.bind(")
    if start < 0:
        return expression
    args, end = _call_arguments(expression, start + len("cel.bind("))
    if len(args) != 3:
        return expression  # left as is: compiling it reports the mistake
    var, init, body = (a.strip() for a in args)
    rewritten = f"[{bind_to_map(init)}].map({var}, {bind_to_map(body)})[0]"
    return expression[:start] + rewritten + bind_to_map(expression[end:])


def _call_arguments(text: str, index: int) -> tuple[list[str], int]:
    """The top-level arguments of a call whose ``(`` ends just before ``index``, and the index
    after its ``)``; strings and nested brackets are skipped whole."""
    args: list[str] = []
    depth, quote, current = 0, "", index
    i = index
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(text[current:i])
                return args, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[current:i])
            current = i + 1
        i += 1
    return [], len(text)
