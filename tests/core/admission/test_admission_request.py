"""Every way a request can be wrong: a RequestError with a fixed reason and one line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.objects import load, review
from webhook.admission import MAX_BODY_BYTES, RequestError, decode, handle, parse_review
from webhook.policy import Inventory, Policy


def valid() -> dict[str, Any]:
    return load("v1.36.2", "mutate", "pod-create")


def mangled(change: Any) -> bytes:
    doc = valid()
    change(doc)
    return json.dumps(doc).encode()


def setitem(path: str, value: Any) -> Any:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        node[last] = value

    return change


def delitem(path: str) -> Any:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        del node[last]

    return change


BAD: list[tuple[str, bytes | str, str, str]] = [
    ("empty", b"", "not-json", "not JSON"),
    ("garbage", b"{nope", "not-json", "not JSON"),
    ("not-utf8", b'{"a": "\xff\xfe"}', "not-json", "not JSON"),
    ("nan", b'{"kind": NaN}', "not-json", "not JSON: unexpected character"),
    ("infinity", b"[Infinity]", "not-json", "not JSON: unexpected character"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "not-json", "depth limit exceeded"),
    ("array", b"[]", "not-admission-review", "an array, not an AdmissionReview"),
    ("string", b'"AdmissionReview"', "not-admission-review", "a string"),
    ("null", b"null", "not-admission-review", "null"),
    ("no-kind", mangled(delitem("kind")), "not-admission-review", "kind is null"),
    ("other-kind", mangled(setitem("kind", "Pod")), "not-admission-review", "'Pod'"),
    (
        "v1beta1",
        mangled(setitem("apiVersion", "admission.k8s.io/v1beta1")),
        "wrong-api-version",
        "admissionReviewVersions: [v1]",
    ),
    ("no-api-version", mangled(delitem("apiVersion")), "wrong-api-version", "null"),
    ("no-request", mangled(delitem("request")), "no-request", "no request"),
    ("request-null", mangled(setitem("request", None)), "no-request", "no request"),
    ("request-list", mangled(setitem("request", [])), "no-request", "an array"),
    ("no-uid", mangled(delitem("request.uid")), "no-uid", "no uid"),
    ("empty-uid", mangled(setitem("request.uid", "")), "no-uid", "no uid"),
    ("uid-number", mangled(setitem("request.uid", 42)), "no-uid", "no uid"),
    ("uid-huge", mangled(setitem("request.uid", "u" * 300)), "no-uid", "300 characters"),
    ("no-operation", mangled(delitem("request.operation")), "bad-field", "operation"),
    ("operation-bogus", mangled(setitem("request.operation", "PATCH")), "bad-field", "PATCH"),
    ("no-request-kind", mangled(delitem("request.kind")), "bad-field", "request.kind"),
    ("kind-string", mangled(setitem("request.kind", "Pod")), "bad-field", "request.kind"),
    ("kind-empty", mangled(setitem("request.kind.kind", "")), "bad-field", "missing"),
    ("group-number", mangled(setitem("request.kind.group", 1)), "bad-field", "kind.group"),
    ("no-object", mangled(delitem("request.object")), "no-object", "missing on CREATE"),
    ("object-null", mangled(setitem("request.object", None)), "no-object", "missing on CREATE"),
    ("object-list", mangled(setitem("request.object", [])), "bad-field", "an array"),
    ("old-object-string", mangled(setitem("request.oldObject", "x")), "bad-field", "oldObject"),
    ("dry-run-string", mangled(setitem("request.dryRun", "yes")), "bad-field", "dryRun"),
    ("namespace-number", mangled(setitem("request.namespace", 3)), "bad-field", "namespace"),
    ("name-object", mangled(setitem("request.name", {})), "bad-field", "request.name"),
    ("metadata-string", mangled(setitem("request.object.metadata", "x")), "bad-field", "metadata"),
    (
        "annotations-list",
        mangled(setitem("request.object.metadata.annotations", ["a"])),
        "bad-field",
        "map of strings",
    ),
    (
        "annotation-number",
        mangled(setitem("request.object.metadata.annotations", {"a": 1})),
        "bad-field",
        "map of strings",
    ),
    ("subresource-list", mangled(setitem("request.subResource", [])), "bad-field", "subRes"),
]


@pytest.mark.parametrize(("body", "reason", "text"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_bad_request_raises_request_error(
    body: bytes,
    reason: str,
    text: str,
    endpoint: str,
    example_policy: Policy,
    example_inventory: Inventory,
) -> None:
    with pytest.raises(RequestError) as info:
        handle(endpoint, body, policy=example_policy, inventory=example_inventory)
    error = info.value
    assert error.reason == reason
    assert error.status == 400
    assert text in str(error)
    assert "\n" not in str(error) and len(str(error)) < 400


def test_too_large_is_a_413() -> None:
    with pytest.raises(RequestError) as info:
        parse_review(b" " * (MAX_BODY_BYTES + 1))
    assert info.value.status == 413 and info.value.reason == "too-large"
    with pytest.raises(RequestError) as info:
        decode(b"[1, 2]", max_bytes=3)
    assert info.value.status == 413
    assert "over the limit of 3 bytes" in str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        lambda d: json.dumps(d).encode(),
        json.dumps,
        lambda d: memoryview(json.dumps(d).encode()),
        lambda d: d,
    ],
    ids=["bytes", "str", "memoryview", "dict"],
)
def test_parse_accepts_bytes_str_and_dicts(body: Any) -> None:
    doc = valid()
    request = parse_review(body(doc))
    assert request.uid == doc["request"]["uid"]
    assert (request.group, request.version, request.kind) == ("", "v1", "Pod")
    assert request.resource == "pods" and request.sub_resource == ""
    assert request.operation == "CREATE" and request.dry_run is False
    assert request.namespace == "probe" and request.name == "probe-ok"
    assert request.object is not None and request.object["kind"] == "Pod"
    assert request.old_object is None


def test_the_object_is_not_copied() -> None:
    doc = valid()
    assert parse_review(doc).object is doc["request"]["object"]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_need_no_object(operation: str) -> None:
    doc = review(None, operation=operation, old={"kind": "Pod"}, kind="Pod")
    request = parse_review(doc)
    assert request.object is None and request.old_object == {"kind": "Pod"}


def test_missing_optional_fields_default() -> None:
    doc = valid()
    for key in ("dryRun", "namespace", "name", "resource", "userInfo", "options"):
        doc["request"].pop(key, None)
    request = parse_review(doc)
    assert request.dry_run is False and request.namespace is None and request.name is None
    assert request.resource == ""
