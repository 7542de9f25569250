"""webhook.files: the one reader of YAML documents (List items, line numbers, one-line errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.files import (
    DocumentError,
    kubernetes_objects,
    load_inventory,
    load_policy,
    nodes_from_text,
    read_text,
    single_document,
)
from webhook.policy import PolicyError

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\n"
NODE_LIST = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: a}
- apiVersion: v1
  kind: Node
  metadata:
    name: b
"""

OBJECTS = {
    "one-document": (POD % "a", [(1, "a")]),
    "documents-and-empty-ones": (
        "---\n" + POD % "a" + "---\n---\n" + POD % "b",
        [(2, "a"), (7, "b")],
    ),
    "list-items-with-their-own-lines": (NODE_LIST, [(4, "a"), (7, "b")]),
    "empty-list": ("apiVersion: v1\nkind: List\nitems: []\n", []),
    "list-without-items": ("apiVersion: v1\nkind: PodList\n", []),
    "list-then-document": (NODE_LIST + "---\n" + POD % "c", [(4, "a"), (7, "b"), (12, "c")]),
    "items-from-a-merge-key": (
        "kind: List\n<<: {items: [{kind: Pod, metadata: {name: m}}]}\n",
        [(2, "m")],
    ),
}


@pytest.mark.parametrize("text,expected", OBJECTS.values(), ids=list(OBJECTS))
def test_objects_and_their_lines(text: str, expected: list[tuple[int, str]]) -> None:
    found = kubernetes_objects(text, source="s")
    assert [(d.line, d.value["metadata"]["name"]) for d in found] == expected


ERRORS = {
    "broken-yaml": ("kind: Pod\nspec: [unclosed\n", "s: line 3: not valid YAML: ", 3),
    "a-scalar-document": (POD % "a" + "---\njust text\n", "s: line 5: a document is not", 5),
    "a-scalar-list-item": (
        "kind: List\nitems:\n- {kind: Pod}\n- 7\n",
        "s: line 4: an item of the List is not a Kubernetes object",
        4,
    ),
    "tabs": ("kind: Pod\n\tspec: {}\n", "s: line 2: not valid YAML: ", 2),
}


@pytest.mark.parametrize("text,message,line", ERRORS.values(), ids=list(ERRORS))
def test_errors_name_the_file_and_the_line(text: str, message: str, line: int) -> None:
    with pytest.raises(DocumentError) as caught:
        kubernetes_objects(text, source="s")
    assert str(caught.value).startswith(message)
    assert caught.value.line == line
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, PolicyError)


def test_every_object_that_is_not_one_is_named_with_its_line() -> None:
    text = "kind: List\nitems:\n- {kind: Pod}\n- 7\n- 8\n---\njust text\n"
    with pytest.raises(DocumentError) as caught:
        kubernetes_objects(text, source="s")
    assert caught.value.line == 4
    assert [d.line for d in caught.value.diagnostics] == [4, 5, 7]
    assert str(caught.value).startswith(
        "s: line 4: an item of the List is not a Kubernetes object; s: line 5: "
    )


def test_a_dump_names_every_object_of_another_kind() -> None:
    text = NODE_LIST + "---\n" + POD % "p" + "---\n" + "apiVersion: v1\nkind: Secret\n"
    with pytest.raises(DocumentError) as caught:
        nodes_from_text(text, source="nodes.yaml")
    assert [(d.line, d.reason.rsplit(" ", 1)[-1]) for d in caught.value.diagnostics] == [
        (12, "Pod"),
        (16, "Secret"),
    ]


SINGLE = {
    "one": ("a: 1\n", {"a": 1}),
    "empty": ("# nothing\n", None),
    "empty-documents-around-one": ("---\n---\na: 1\n---\n", {"a": 1}),
}


@pytest.mark.parametrize("text,expected", SINGLE.values(), ids=list(SINGLE))
def test_single_document(text: str, expected: object) -> None:
    assert single_document(text, source="s") == expected


def test_two_documents_where_one_is_expected() -> None:
    with pytest.raises(PolicyError, match=r"^s: expected one YAML document, found 2$"):
        single_document("a: 1\n---\nb: 2\n", source="s")


def test_nodes_from_a_dump_and_a_wrong_kind() -> None:
    assert [n["metadata"]["name"] for n in nodes_from_text(NODE_LIST, source="s")] == ["a", "b"]
    with pytest.raises(
        PolicyError,
        match=r"^s: line 12: expected a Node or a DeviceClass, ResourceSlice, ResourceClaim, "
        r"ResourceClaimTemplate, not Pod$",
    ):
        nodes_from_text(NODE_LIST + "---\n" + POD % "p", source="s")


def test_a_file_that_cannot_be_read_is_one_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"nope\.yaml: cannot read: No such file"):
        read_text(tmp_path / "nope.yaml")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PolicyError, match=r"b\.yaml: not a UTF-8 text file"):
        load_policy(binary)
    broken = tmp_path / "n.yaml"
    broken.write_text("items: [\n")
    with pytest.raises(PolicyError, match=r"n\.yaml: line 2: not valid YAML"):
        load_inventory(load_policy(None), broken)
