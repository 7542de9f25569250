"""YAML documents with their line numbers: one document, or the Kubernetes objects of a file,
and a one-line error (file, line, reason) for anything that cannot be read."""

from __future__ import annotations

from typing import Any, NamedTuple

import yaml

from webhook.policy import PolicyError
from webhook.policy.errors import Diagnostic


class DocumentError(PolicyError):
    """A YAML file that cannot be read as documents; ``line`` (1-based) when it is known.

    A PolicyError (file, ``line N``, reason) for the commands and the server, with the line as
    a number for the harness, which reports ``file:line: reason``. Its diagnostics carry the
    line of each problem.
    """

    def __init__(self, source: str, line: int | None, reason: str) -> None:
        """Keep the line; the message is the PolicyError's."""
        super().__init__(source, _at(line), reason, line=line)

    @classmethod
    def at_lines(cls, source: str, found: list[tuple[int | None, str]]) -> DocumentError:
        """One error for every (line, reason) found in a file (at least one), the first first."""
        line, reason = found[0]
        return cls(source, line, reason).carrying(
            Diagnostic(source, _at(n), r, line=n) for n, r in found
        )


def _at(line: int | None) -> str:
    """Where in a file a problem with a whole document is: ``line N`` (its field)."""
    return f"line {line}" if line is not None else ""


def one_line(exc: BaseException) -> str:
    """Any exception as a short one-line reason: what a log line or ``/readyz`` can carry."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return text or type(exc).__name__


def yaml_error(exc: yaml.YAMLError, source: str) -> DocumentError:
    """A PyYAML error as a DocumentError naming the line it broke on."""
    if isinstance(exc, yaml.reader.ReaderError):
        # Raised before any mark exists (a control character, a bad encoding): the position
        # is a character offset, the line is counted from it.
        text = exc.name if isinstance(exc.name, str) else ""
        line = text.count("\n", 0, exc.position) + 1 if text else None
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else "a byte"
        return DocumentError(source, line, f"not valid YAML: unacceptable character {char}")
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = int(mark.line) + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    return DocumentError(source, line, f"not valid YAML: {problem}")


# Deeper than any policy, config or node dump is nested (a dozen levels), far below what
# Python's recursion limit lets PyYAML compose (~450), and cheap: PyYAML's scanner spends time
# quadratic in the depth (1.7 s for 900 levels).
MAX_DEPTH = 100


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting deeper than :data:`MAX_DEPTH` as it scans."""

    def _too_deep(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise yaml.scanner.ScannerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", self.get_mark()
            )

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        self._too_deep(self.flow_level + 1)
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column: int) -> bool:
        self._too_deep(len(self.indents) + 1)
        return bool(super().add_indent(column))


class Document(NamedTuple):
    """One YAML document, or one item of a ``List`` document, and the line it starts on."""

    line: int
    value: Any


def composed(text: str, *, source: str) -> list[tuple[yaml.Node, Any]]:
    """Every non-empty YAML document: its node (for line numbers) and its value.

    Anything PyYAML raises becomes a DocumentError: a control character (raised by the loader's
    constructor), nesting deeper than Python's recursion limit, an integer of more digits than
    Python converts.
    """
    out: list[tuple[yaml.Node, Any]] = []
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        raise yaml_error(_named(exc, text), source) from None
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # check_node() said there is one; for the type checker
                break
            value = loader.construct_document(node)
            if value is not None:
                out.append((node, value))
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source) from None
    except (RecursionError, ValueError) as exc:
        raise DocumentError(source, None, f"not valid YAML: {one_line(exc)}") from None
    finally:
        loader.dispose()
    return out


def _named(exc: yaml.YAMLError, text: str) -> yaml.YAMLError:
    """A ReaderError names the stream "<unicode string>": give it the text to count lines in."""
    if isinstance(exc, yaml.reader.ReaderError):
        exc.name = text
    return exc


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def single_document(text: str, *, source: str) -> Any:
    """The one YAML document ``text`` holds (None when it is empty)."""
    docs = composed(text, source=source)
    if len(docs) > 1:
        raise DocumentError(source, None, f"expected one YAML document, found {len(docs)}")
    return docs[0][1] if docs else None


def kubernetes_objects(text: str, *, source: str) -> list[Document]:
    """Every object in ``text``: plain documents, and the items of ``List`` documents
    (``kubectl get -o yaml``), each with the line its mapping starts on.

    A document or a List item that is not a mapping is a DocumentError, which names every
    such document and item of the file.
    """
    out: list[Document] = []
    wrong: list[tuple[int | None, str]] = []
    for node, value in composed(text, source=source):
        if not isinstance(value, dict):
            wrong.append((_line(node), "a document is not a Kubernetes object"))
            continue
        items = value.get("items") or []
        if not (str(value.get("kind", "")).endswith("List") and isinstance(items, list)):
            out.append(Document(_line(node), value))
            continue
        for line, item in zip(_item_lines(node, len(items)), items, strict=True):
            if not isinstance(item, dict):
                wrong.append((line, "an item of the List is not a Kubernetes object"))
                continue
            out.append(Document(line, item))
    if wrong:
        raise DocumentError.at_lines(source, wrong)
    return out


def _item_lines(node: yaml.Node, count: int) -> list[int]:
    """The line of each item of a List document: the children of its ``items`` node, or the
    document's own line when the items came from elsewhere (a YAML merge key)."""
    for key, child in reversed(node.value):
        if (
            isinstance(key, yaml.ScalarNode)
            and key.value == "items"
            and isinstance(child, yaml.SequenceNode)
            and len(child.value) == count
        ):
            return [_line(item) for item in child.value]
    return [_line(node)] * count
