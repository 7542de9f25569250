"""Checking the values of single fields as the plugin does: the reader that collects what it
refuses and warns about (every problem of a file, not only the first), device references,
resource names, and typed values.

The sections (``webhook.policy.plugin_config.sections``) and the flags
(``webhook.policy.plugin_config.read``) are checked with these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.policy.errors import Diagnostics
from webhook.policy.plugin_config.config import MAX_RESOURCE_NAME
from webhook.policy.resources import PREFIX

# k8s.io/apimachinery NameIsDNSSubdomain: a lowercase RFC 1123 subdomain, at most 253.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_SUBDOMAIN_MAX = 253
_HEX = re.compile(r"^[0-9A-Fa-f]+$")
_UUID = re.compile(r"^[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")


_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")


class _Reader(Diagnostics):
    """Reads one config document, collecting what the plugin refuses (errors) and what it
    ignores (warnings) in the order the plugin meets them: the first error is the one the
    plugin stops on. A refused value is read as the plugin's zero value, so that the reading
    goes on and finds the rest."""

    def mapping(self, value: object, field: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(field, f"must be a mapping, not {type(value).__name__}")
            return {}
        return value

    def unknown_keys(
        self, body: Mapping[str, Any], known: Sequence[str], field: str, *, fold: bool = False
    ) -> None:
        """Warn about keys the plugin never reads (``fold``: Go struct fields, any case)."""
        names = {k.lower() for k in known} if fold else set(known)
        for key in body:
            if (str(key).lower() if fold else str(key)) in names:
                continue
            where = f"{field}.{key}" if field else str(key)
            if field.startswith("sharing.") and key == "strategy":
                reason = (
                    "removed in v0.12 (CHANGELOG v0.12.0-rc.2); the device plugin ignores it: "
                    "delete the line"
                )
            else:
                reason = (
                    f"unknown field, ignored by the device plugin (known here: "
                    f"{', '.join(known)}): check the spelling"
                )
            self.warn(where, reason)

    def boolean(self, value: object, field: str) -> bool | None:
        # A null leaves the Go field at its zero value (false, or an unset *bool).
        if value is None or isinstance(value, bool):
            return value
        self.error(field, f"must be true or false, not {value!r}")
        return None


def _struct_field(body: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """``(present, value)`` of a Go struct field: encoding/json also takes other letter cases.

    The last matching key wins, as each key of the object is assigned in turn.
    """
    present, value = False, None
    for key, item in body.items():
        if isinstance(key, str) and key.lower() == name.lower():
            present, value = True, item
    return present, value


def _uuid(text: str) -> bool:
    """What github.com/google/uuid Parse accepts."""
    if len(text) == 36 + 9:
        if text[:9].lower() != "urn:uuid:":
            return False
        text = text[9:]
    elif len(text) == 36 + 2:
        text = text[1:37]
    elif len(text) == 32:
        return _HEX.match(text) is not None
    return _UUID.match(text) is not None


def _device_ref(text: str) -> bool:
    """A GPU index, a MIG index ``<gpu>:<mig>``, or a GPU or MIG UUID (replicas.go)."""
    if text.isascii() and text.isdigit():
        return True
    parts = text.split(":")
    if len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts):
        return True
    if text.startswith("GPU-"):
        return _uuid(text[len("GPU-") :])
    if text.startswith("MIG-"):
        rest = text[len("MIG-") :]
        if _uuid(rest):
            return True
        gpu, *indexes = rest.split("/")
        return (
            len(indexes) == 2
            and gpu.startswith("GPU-")
            and _uuid(gpu[len("GPU-") :])
            and all(i.isascii() and i.isdigit() for i in indexes)
        )
    return False


def _integral(value: object) -> int | None:
    """An int as Go decodes it from YAML: integers, and floats with no fraction."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _devices(r: _Reader, value: object, field: str) -> bool:
    """Check ``devices`` as ReplicatedDevices.UnmarshalJSON does; True when it is ``all``."""
    if value is None or isinstance(value, str):
        if value != "all":
            r.error(
                field,
                f"devices set as {value or ''!r} but the only valid string input is 'all'",
            )
        return True
    count = _integral(value)
    if count is not None:
        if count <= 0:
            r.error(field, f"devices set as {count} but a count of devices must be > 0")
        return False
    if isinstance(value, list):
        for i, item in enumerate(value):
            index = _integral(item)
            if (index is not None and index >= 0) or (isinstance(item, str) and _device_ref(item)):
                continue
            r.error(
                f"{field}[{i}]",
                f"unsupported type for device in devices list: {item!r} (use a GPU index, "
                "a MIG index <gpu>:<mig>, or a GPU-/MIG- UUID)",
            )
        return False
    r.error(field, f"unrecognized type for devices spec: {value!r}")
    return True


def _resource_name(r: _Reader, value: object, field: str) -> str | None:
    """The full name, as NewResourceName (api/config/v1/resources.go) builds and checks it;
    None when the plugin refuses it (noted)."""
    if not isinstance(value, str):
        r.error(field, f"must be a resource name, not {value!r}")
        return None
    name = value if value.startswith(PREFIX) else PREFIX + value
    if len(name) > MAX_RESOURCE_NAME:
        r.error(
            field,
            f"fully-qualified resource name must be {MAX_RESOURCE_NAME} characters or less: {name}",
        )
        return None
    part = name[len(PREFIX) :]
    if len(part) > _DNS_SUBDOMAIN_MAX or _DNS_SUBDOMAIN.match(part) is None:
        r.error(
            field,
            f"incorrect format for resource name {name!r}: after nvidia.com/ it must be a "
            "lowercase RFC 1123 subdomain (lower case letters, digits, '-' and '.', starting "
            "and ending with a letter or digit)",
        )
        return None
    return name


_JSON_TYPES = {bool: "bool", str: "string", int: "number", float: "number", list: "array"}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), "object")


def _typed(r: _Reader, value: object, kind: str, field: str) -> object:
    """One flag as encoding/json decodes it into its Go type; refuses what it cannot decode."""
    if value is None:
        return None  # a nil pointer: the command-line / environment value
    ok = {
        "bool": isinstance(value, bool),
        "string": isinstance(value, str),
        "strings": isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
        "duration": (isinstance(value, (int, float)) and not isinstance(value, bool))
        or (isinstance(value, str) and (value == "infinite" or _GO_DURATION.match(value))),
    }[kind]
    if ok:
        return value
    if kind == "strings":
        reason = f"invalid deviceListStrategy: {value!r}: give a strategy or a list of them"
    elif kind == "duration":
        reason = f"invalid duration {value!r}: use a Go duration such as 60s, or infinite"
    else:
        go = "bool" if kind == "bool" else "string"
        hint = "write true or false" if kind == "bool" else "quote the value"
        reason = (
            f"json: cannot unmarshal {_json_type(value)} into Go struct field of type {go}: {hint}"
        )
    r.error(field, f"the device plugin cannot read {value!r} ({reason})")
    return None


def _typed_fields(
    r: _Reader, body: Mapping[str, Any], fields: Mapping[str, str], where: str
) -> dict[str, object]:
    """The typed fields of one flags struct, by their Go names (keys match in any case)."""
    values: dict[str, object] = {}
    for name, kind in fields.items():
        present, raw = _struct_field(body, name)
        if present:
            values[name] = _typed(r, raw, kind, f"{where}.{name}")
    return values
