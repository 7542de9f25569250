"""Validate reports against the report CRDs' published schemas, as an API server would.

tests/fixtures/report-crds/ holds the openAPIV3Schema of each report kind (wgpolicyk8s.io
v1alpha2 from kubernetes-sigs/wg-policy-prototypes, openreports.io v1alpha1 from
openreports/reports-api; each file names its commit). The checks, like an API server's:

* the schema's types, enums, required fields and int32/int64 ranges (jsonschema);
* no field the schema does not declare: server-side apply refuses them ("field not declared
  in schema") where a plain create would drop them silently;
* metadata as for any object: a DNS-subdomain name, a namespace that is a DNS label, valid
  label keys and values (checked as a ConfigMap's metadata by kubernetes-validate, plus the
  name formats, which the OpenAPI schema leaves out).
"""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.support.paths import TESTS

CRDS = TESTS / "fixtures" / "report-crds"
KUBE_VERSION = "1.30"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _closed(schema: Any) -> Any:
    """The schema with undeclared fields refused wherever it declares its fields."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if "properties" in schema and "additionalProperties" not in schema:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the vendored openAPIV3Schema, closed."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out[(doc["apiVersion"], doc["kind"])] = _closed(doc["openAPIV3Schema"])
    return out


def errors(report: dict[str, Any]) -> list[str]:
    """Everything an API server would refuse in ``report``; empty when it is valid."""
    key = (report.get("apiVersion"), report.get("kind"))
    schema = schemas().get(key)  # type: ignore[arg-type]
    if schema is None:
        return [f"no schema for {key}"]
    validator = jsonschema.Draft7Validator(schema, format_checker=_FORMATS)
    found = [
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in validator.iter_errors(report)
    ]
    meta = report.get("metadata") or {}
    name = str(meta.get("name", ""))
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        found.append(f"metadata.name {name!r} is not a DNS subdomain")
    namespace = meta.get("namespace")
    if namespace is not None and (len(namespace) > 63 or not _DNS_LABEL.match(namespace)):
        found.append(f"metadata.namespace {namespace!r} is not a DNS label")
    for label, value in (meta.get("labels") or {}).items():
        prefix, _, label_name = label.rpartition("/")
        if prefix and not _DNS_SUBDOMAIN.match(prefix):
            found.append(f"label {label!r}: bad prefix")
        if len(label_name) > 63 or not _LABEL_NAME.match(label_name):
            found.append(f"label {label!r}: bad name")
        if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            found.append(f"label {label!r}: bad value {value!r}")
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": copy.deepcopy(meta)}
    try:
        kubernetes_validate.validate(holder, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        found.append(f"metadata: {exc}")
    return found
