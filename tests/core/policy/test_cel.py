"""DRA device selectors in the scheduler's CEL environment (webhook/policy/selectors/,
docs/cel.md).

Cases marked ``upstream`` are those of k8s.io/dynamic-resource-allocation/cel/compile_test.go
at kubernetes-1.36.2 (``testcases``, by their names there), with the same expression, device
and expected match or error; the others take their expected values from the library sources
named in docs/cel.md (cel-go ext/strings.go examples, k8s.io/apiserver/pkg/cel/library).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from webhook.policy.dra import Device, dra_snapshot, parse_resource_slice
from webhook.policy.selectors import CelCompileError, CelRuntimeError, compile_selector

EXAMPLE = "dra.example.com"


def device(
    driver: str = EXAMPLE,
    attributes: dict[str, Any] | None = None,
    capacity: dict[str, str] | None = None,
    *,
    allow_multiple: bool | None = None,
) -> Device:
    """One device as dra.py reads it from a ResourceSlice (the webhook's only source)."""
    raw: dict[str, Any] = {
        "name": "dev-0",
        "attributes": attributes or {},
        "capacity": {k: {"value": v} for k, v in (capacity or {}).items()},
    }
    if allow_multiple is not None:
        raw["allowMultipleAllocations"] = allow_multiple
    spec = {"driver": driver, "pool": {"name": "p"}, "nodeName": "n", "devices": [raw]}
    devices, problems = parse_resource_slice({"metadata": {"name": "s"}, "spec": spec})
    assert problems == []
    return devices[0]


NAME_TRUE = {"name": {"bool": True}}
GPU = {
    "productName": {"string": "NVIDIA A100-SXM4-80GB"},
    "index": {"int": 0},
    "driverVersion": {"version": "550.54.15"},
}

# (id, expression, device, expected): True/False, or ("runtime" | "compile", words).
CASES: list[tuple[str, str, Device, Any]] = [
    # upstream compile_test.go
    ("upstream true", "true", device(), True),
    ("upstream false", "false", device(), False),
    ("upstream syntax-error", "?!", device(), ("compile", "Syntax error")),
    (
        "upstream type-error",
        "1",
        device(),
        ("compile", "must evaluate to bool or the unknown type, not int"),
    ),
    (
        "upstream runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        device(),
        ("runtime", "no such key: noSuchAttr"),
    ),
    (
        "upstream runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        device(),
        ("runtime", "no such key: noSuchAttr"),
    ),
    ("upstream domain-check-negative", '"no-such-domain" in device.attributes', device(), False),
    (
        "upstream domain-check-positive",
        '"dra.example.com" in device.attributes',
        device(attributes={"dra.example.com/something": {"bool": True}}),
        True,
    ),
    ("upstream real-driver-name", 'device.driver == "dra.example.com"', device(), True),
    (
        "upstream driver-name-qualifier",
        'device.attributes["dra.example.com"].name',
        device(attributes=NAME_TRUE),
        True,
    ),
    (
        "upstream driver-name-qualifier-map-lookup",
        'device.attributes["dra.example.com"]["name"]',
        device(attributes=NAME_TRUE),
        True,
    ),
    (
        "upstream bind",
        'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
        device(attributes=NAME_TRUE),
        True,
    ),
    (
        "upstream qualified-attribute-name",
        'device.attributes["other.example.com"].name',
        device(attributes={"other.example.com/name": {"bool": True}}),
        True,
    ),
    (
        "upstream int",
        'device.attributes["dra.example.com"].name > 0',
        device(attributes={"name": {"int": 1}}),
        True,
    ),
    (
        "upstream string",
        'device.attributes["dra.example.com"].name == "fish"',
        device(attributes={"name": {"string": "fish"}}),
        True,
    ),
    (
        "upstream includes-function-undeclared-error (DRAListTypeAttributes off)",
        'device.attributes["dra.example.com"].name.includes("fish")',
        device(),
        ("compile", "undeclared reference to 'includes'"),
    ),
    (
        "upstream version",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        device(attributes={"name": {"version": "1.0.0"}}),
        True,
    ),
    (
        "upstream version_v",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) '
        '&& isSemver("v1.0.0", true)',
        device(attributes={"name": {"version": "1.0.0"}}),
        True,
    ),
    (
        "upstream quantity",
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        device(capacity={"name": "1Mi"}),
        True,
    ),
    (
        "upstream check-positive",
        '"name" in device.capacity["dra.example.com"] && '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        device(capacity={"name": "1Mi"}),
        True,
    ),
    (
        "upstream check-negative",
        '!("name" in device.capacity["dra.example.com"]) || '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        device(),
        True,
    ),
    (
        "upstream check_attribute_domains",
        'device.attributes.exists_one(x, x == "dra.example.com")',
        device(attributes={"services": {"string": "some_example_value"}}),
        True,
    ),
    (
        "upstream check_attribute_ids",
        'device.attributes["dra.example.com"].exists_one(x, x == "services")',
        device(attributes={"services": {"string": "some_example_value"}}),
        True,
    ),
    (
        "upstream split_attribute",
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        device(attributes={"services": {"string": "some_example_value"}}),
        True,
    ),
    (
        "upstream regexp_attribute",
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        device(attributes={"services": {"string": "asymetric"}}),
        True,
    ),
    (
        "upstream allow_multiple_allocations",
        "device.allowMultipleAllocations == true",
        device(allow_multiple=True),
        True,
    ),
    (
        "upstream allow_multiple_allocations_default",
        "device.allowMultipleAllocations == false",
        device(),
        True,
    ),
    # issue 28: the string extensions, and a missing key is an error, not a mismatch
    (
        "lowerAscii matches",
        'device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("a100")',
        device("gpu.nvidia.com", GPU),
        True,
    ),
    (
        "missing key is a runtime error",
        'device.attributes["gpu.nvidia.com"].missing == "x"',
        device("gpu.nvidia.com", GPU),
        ("runtime", "no such key: missing"),
    ),
    (
        "an error absorbed by || is no error (cel-go's commutative ||)",
        'device.attributes["gpu.nvidia.com"].missing == "x" || true',
        device("gpu.nvidia.com", GPU),
        True,
    ),
    (
        "a result that is no bool is a runtime error",
        'device.attributes["gpu.nvidia.com"].index',
        device("gpu.nvidia.com", GPU),
        ("runtime", "could not be converted to bool"),
    ),
    # cel-go ext/strings.go examples (version 2)
    ("charAt", "'hello'.charAt(4) == 'o' && 'hello'.charAt(5) == ''", device(), True),
    ("charAt out of range", "'hello'.charAt(-1) == ''", device(), ("runtime", "out of range")),
    (
        "indexOf",
        "'hello mellow'.indexOf('ello', 2) == 7 && 'hello mellow'.indexOf('') == 0",
        device(),
        True,
    ),
    (
        "lastIndexOf",
        "'hello mellow'.lastIndexOf('ello') == 7 && 'hello mellow'.lastIndexOf('ello', 6) == 1",
        device(),
        True,
    ),
    ("upperAscii", "'TacoCÆt Xii'.upperAscii() == 'TACOCÆT XII'", device(), True),
    ("replace", "'hello hello'.replace('he', 'we', 1) == 'wello hello'", device(), True),
    (
        "split limit",
        "'hello hello hello'.split(' ', 2) == ['hello', 'hello hello']",
        device(),
        True,
    ),
    ("substring", "'tacocat'.substring(0, 4) == 'taco'", device(), True),
    (
        "substring bad range",
        "'tacocat'.substring(2, 1) == ''",
        device(),
        ("runtime", "invalid substring range. start: 2, end: 1"),
    ),
    ("trim", "'  \\ttrim\\n    '.trim() == 'trim'", device(), True),
    ("join", "['hello', 'mellow'].join(' ') == 'hello mellow'", device(), True),
    ("quote", "strings.quote('a\"b') == '\"a\\\\\"b\"'", device(), True),
    ("format", "'%s has %d GPUs'.format(['node', 8]) == 'node has 8 GPUs'", device(), True),
    (
        "string reverse is version 3",
        "'gums'.reverse() == 'smug'",
        device(),
        ("runtime", "no such overload"),
    ),
    # Kubernetes lists.go, cel-go ext/lists.go (version 3), ext/sets.go, regex.go
    ("isSorted", "[1, 2, 3].isSorted() && !['b', 'a'].isSorted()", device(), True),
    (
        "sum min max",
        "[1, 2, 3].sum() == 6 && [3, 1].min() == 1 && [3, 1].max() == 3",
        device(),
        True,
    ),
    ("min of empty list", "[].min() == 0", device(), ("runtime", "min called on empty list")),
    ("list indexOf", "[1, 2, 2].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2", device(), True),
    ("slice", "[1, 2, 3, 4].slice(1, 3) == [2, 3]", device(), True),
    ("flatten", "[[1], [2, [3]]].flatten() == [1, 2, [3]]", device(), True),
    ("sort distinct reverse", "[3, 1, 1].distinct().sort().reverse() == [3, 1]", device(), True),
    ("lists.range", "lists.range(3) == [0, 1, 2]", device(), True),
    (
        "sets",
        "sets.contains([1, 2], [2]) && sets.intersects([1], [1, 3]) && sets.equivalent([1, 1], [1])",
        device(),
        True,
    ),
    ("sets: bool is no int", "sets.contains([1], [true])", device(), False),
    ("find", "'abc 123'.find('[0-9]+') == '123'", device(), True),
    ("findAll", "'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22']", device(), True),
    ("bad regex", "'a'.find('[') == ''", device(), ("runtime", "Illegal regex")),
    # Kubernetes quantity.go, semverlib.go
    (
        "quantity arithmetic",
        'device.capacity["gpu.nvidia.com"].memory.sub(quantity("16Gi")).add(1).asInteger() '
        "== 68719476737",
        device("gpu.nvidia.com", GPU, {"memory": "80Gi"}),
        True,
    ),
    ("quantity equality by value", 'quantity("1Gi") == quantity("1024Mi")', device(), True),
    (
        "isInteger sign",
        'quantity("1500m").isInteger() == false && quantity("-1").sign() == -1',
        device(),
        True,
    ),
    (
        "bad quantity",
        'quantity("lots").sign() == 1',
        device(),
        ("runtime", "quantities must match"),
    ),
    ("isQuantity", '!isQuantity("lots") && isQuantity("1.5Gi")', device(), True),
    (
        "semver parts",
        'device.attributes["gpu.nvidia.com"].driverVersion.major() == 550 && '
        'device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.54.15")) == 0',
        device("gpu.nvidia.com", GPU),
        True,
    ),
    ("semver prerelease", "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", device(), True),
    (
        "quantity is no semver",
        'quantity("1").compareTo(semver("1.0.0")) == 0',
        device(),
        ("runtime", "no such overload"),
    ),
    # Kubernetes ip.go, cidr.go, urls.go
    ("ip", "ip('10.0.0.1').family() == 4 && isIP('::1') && !isIP('1.2.3')", device(), True),
    (
        "cidr",
        "cidr('10.0.0.0/8').containsIP('10.1.2.3') && cidr('10.1.0.0/16').prefixLength() == 16",
        device(),
        True,
    ),
    (
        "url",
        "url('https://gpu.example:8443/a?x=1').getPort() == '8443' && isURL('/path')",
        device(),
        True,
    ),
    # what cel-go refuses at compile time
    (
        "unknown field of device",
        "device.model == 'x'",
        device(),
        ("compile", "undefined field 'model'"),
    ),
    (
        "unknown function",
        "device.driver.toLower() == 'x'",
        device(),
        ("compile", "undeclared reference to 'toLower'"),
    ),
    ("unknown variable", "gpu.index == 0", device(), ("compile", "undeclared reference to 'gpu'")),
    (
        "math is not loaded",
        "math.greatest(1, 2) == 2",
        device(),
        ("compile", "undeclared reference to 'math.greatest'"),
    ),
    # what the cel package cannot evaluate: refused, never evaluated differently
    (
        "two-variable comprehension",
        "{'a': 1}.all(k, v, v > 0)",
        device(),
        ("compile", "not supported"),
    ),
    ("sortBy", "[2, 1].sortBy(x, x) == [1, 2]", device(), ("compile", "not supported")),
    (
        "optional field selection",
        'device.attributes["d"].?name.hasValue()',
        device(),
        ("compile", "unsupported syntax '.?'"),
    ),
    (
        "format library",
        "format.dns1123Label().validate('a').hasValue()",
        device(),
        ("compile", "not supported"),
    ),
]


@pytest.mark.parametrize(
    ("expression", "dev", "expected"),
    [(e, d, x) for _, e, d, x in CASES],
    ids=[i for i, _, _, _ in CASES],
)
def test_a_selector_evaluates_as_the_scheduler_does(expression, dev, expected):
    if isinstance(expected, bool):
        assert compile_selector(expression).matches(dev) is expected
        return
    kind, words = expected
    if kind == "compile":
        with pytest.raises(CelCompileError, match=_literal(words)):
            compile_selector(expression)
    else:
        selector = compile_selector(expression)
        with pytest.raises(CelRuntimeError, match=_literal(words)):
            selector.matches(dev)


def _literal(words: str) -> str:
    return re.escape(words)


def test_an_absent_domain_reads_as_an_empty_map_whatever_path_evaluates_it():
    # The fast path (literal reads) and the whole-device path give one answer.
    dev = device("gpu.nvidia.com", GPU)
    fast = compile_selector('device.attributes["other.example"].size() == 0')
    whole = compile_selector('device.attributes["other.example"].exists(k, true) == false')
    assert fast.matches(dev) and whole.matches(dev)


def test_a_remembered_runtime_error_is_raised_again_for_each_device_that_has_it():
    selector = compile_selector('device.attributes["gpu.nvidia.com"].missing == "x"')
    for index in range(3):
        attributes = {**GPU, "index": {"int": index}}
        with pytest.raises(CelRuntimeError, match="no such key: missing"):
            selector.matches(device("gpu.nvidia.com", attributes))


def test_the_claim_rules_see_a_runtime_error_as_an_aborted_allocation_not_a_mismatch():
    expression = 'device.attributes["gpu.nvidia.com"].missing == "x"'
    cls = {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }
    spec = {
        "driver": "gpu.nvidia.com",
        "pool": {"name": "p"},
        "nodeName": "n",
        "devices": [{"name": "gpu-0", "attributes": GPU}],
    }
    snapshot = dra_snapshot([cls], [{"metadata": {"name": "s"}, "spec": spec}])
    match = snapshot.selectors.matches(snapshot.devices[0], (expression,))
    assert match.matched is False and match.aborts is True
    assert "the scheduler would abort the allocation" in match.problem
    assert "no such key: missing" in match.problem
    devices, problems = snapshot.class_devices("gpu")
    assert devices == () and any("no such key: missing" in p for p in problems)


def test_a_mismatch_is_no_problem():
    snapshot_device = device("gpu.nvidia.com", GPU)
    selector = compile_selector('device.attributes["gpu.nvidia.com"].index == 1')
    assert selector.matches(snapshot_device) is False


def test_an_expression_that_does_not_compile_is_compiled_once(monkeypatch):
    import cel

    from webhook.policy import selectors

    selectors.clear_cache()
    calls = []
    real = cel.compile
    monkeypatch.setattr(cel, "compile", lambda e: calls.append(e) or real(e))
    for _ in range(3):
        with pytest.raises(CelCompileError, match="undefined field 'model'"):
            compile_selector("device.model == 'x'")
    assert len(calls) == 1
