"""Suite files are read strictly: every problem names the file, the line and what is wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import CLUSTERS, MANIFESTS
from webhook.harness import (
    KubeRunner,
    LocalRunner,
    ServerRunner,
    SuiteError,
    SuiteLoader,
    WebhookClient,
    find_suite_files,
    is_suite_file,
)
from webhook.harness.compare import check

HEAD = f"""\
apiVersion: gpu-policy.io/v1alpha1
kind: Suite
name: t
policy: {CLUSTERS / "seed003-l20-t4" / "policy.yaml"}
cases:
"""
POD = MANIFESTS / "pod-gpu-1-shared.yaml"
MULTI = MANIFESTS / "multi-document.yaml"


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "t.suite.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError) as info:
        SuiteLoader().load(path)
    return [f"{p.line}: {p.reason}" for p in info.value.problems]


def case(body: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(body), "  ")


BAD = {
    "unknown-suite-field": (
        HEAD.replace("name: t", "nmae: t") + f"  - {{name: a, object: {POD}, expect: allowed}}\n",
        "3: suite: unknown field 'nmae'; did you mean name?",
    ),
    "wrong-api-version": (
        HEAD.replace("gpu-policy.io/v1alpha1", "gpu-policy.io/v1")
        + f"  - {{name: a, object: {POD}, expect: allowed}}\n",
        "1: apiVersion is 'gpu-policy.io/v1': use gpu-policy.io/v1alpha1",
    ),
    "wrong-kind": (
        HEAD.replace("kind: Suite", "kind: TestSuite")
        + f"  - {{name: a, object: {POD}, expect: allowed}}\n",
        "2: kind is 'TestSuite': use Suite (or PolicyTest)",
    ),
    "no-cases": (HEAD.replace("cases:\n", ""), "1: cases is missing"),
    "missing-policy-file": (
        HEAD.replace(str(CLUSTERS), "/nowhere")
        + f"  - {{name: a, object: {POD}, expect: allowed}}\n",
        "4: policy: /nowhere/seed003-l20-t4/policy.yaml not found",
    ),
    "unknown-case-field": (
        case(
            f"""\
            - name: a
              object: {POD}
              expected: {{allowed: true}}
            """
        ),
        "8: case 'a': unknown field 'expected'; did you mean expect?",
    ),
    "no-expect": (
        case(f"- name: a\n  object: {POD}\n"),
        "6: case 'a': expect is missing",
    ),
    "object-and-inline": (
        case(
            f"- name: a\n  object: {POD}\n  inline: {{kind: Pod, apiVersion: v1}}\n  expect: allowed\n"
        ),
        "6: case 'a': give the object as object: <file> or inline: {...}",
    ),
    "missing-object-file": (
        case("- name: a\n  object: nope.yaml\n  expect: allowed\n"),
        "7: case 'a': object: nope.yaml not found",
    ),
    "inline-without-kind": (
        case("- name: a\n  inline:\n    metadata: {name: x}\n  expect: allowed\n"),
        "8: case 'a': the object needs apiVersion and kind",
    ),
    "unknown-rule-id": (
        case(
            f"""\
            - name: a
              object: {POD}
              expect:
                allowed: false
                failed:
                  - gpu-quantity
                  - gpu-shared-request-over-one
            """
        ),
        "12: case 'a': unknown rule id 'gpu-shared-request-over-one'; "
        "did you mean gpu-shared-request-above-one?",
    ),
    "bad-regex": (
        case(f"- name: a\n  object: {POD}\n  expect:\n    warnings: ['(unclosed']\n"),
        "9: case 'a': warnings: '(unclosed' is not a valid regular expression",
    ),
    "allowed-not-a-bool": (
        case(f"- name: a\n  object: {POD}\n  expect: {{allowed: yes please}}\n"),
        "8: case 'a': allowed must be true or false, not 'yes please'",
    ),
    "failed-but-allowed": (
        case(f"- name: a\n  object: {POD}\n  expect: {{allowed: true, failed: [gpu-quantity]}}\n"),
        "8: case 'a': a review with failed rules is denied",
    ),
    "golden-on-a-denial": (
        case(f"- name: a\n  object: {POD}\n  expect: {{allowed: false, golden: g.yaml}}\n"),
        "8: case 'a': a denied object has no golden",
    ),
    "bad-operation": (
        case(f"- name: a\n  object: {POD}\n  operation: create\n  expect: allowed\n"),
        "8: case 'a': operation 'create' is not one of CREATE, UPDATE, DELETE, CONNECT",
    ),
    "select-matches-nothing": (
        case(f"- name: a\n  object: {MULTI}\n  select: {{kind: Job}}\n  expect: allowed\n"),
        "8: case 'a': select matches no documents (the file holds Pod/md-gpu-1, "
        "Pod/md-gpu-shared, Deployment/md-two-slots, ConfigMap/md-settings, Service/md-gpu-1)",
    ),
    "golden-for-many-documents": (
        case(f"- name: a\n  object: {MULTI}\n  expect: {{golden: g.yaml}}\n"),
        "8: case 'a': the object file holds 5 documents but a golden file holds one object",
    ),
    "unknown-node-selection-mode": (
        case(f"- name: a\n  object: {POD}\n  injectNodeSelection: sometimes\n  expect: allowed\n"),
        "8: case 'a': injectNodeSelection 'sometimes' is not one of intent, always, when-needed, "
        "never",
    ),
    "duplicate-case": (
        case(
            f"- {{name: a, object: {POD}, expect: allowed}}\n"
            f"- {{name: a, object: {POD}, expect: denied}}\n"
        ),
        "7: case 'a' is already defined on line 6",
    ),
    "duplicate-key": (
        case(f"- name: a\n  name: b\n  object: {POD}\n  expect: allowed\n"),
        "7: cases[0]: name is given twice",  # which name? the label says the entry
    ),
    "not-yaml": (HEAD + "  - name: [a\n", "7: not valid YAML"),
    "two-documents": (
        HEAD + f"  - {{name: a, object: {POD}, expect: allowed}}\n---\n" + HEAD,
        "7: a suite file holds one YAML document",
    ),
}


@pytest.mark.parametrize("text,expected", BAD.values(), ids=list(BAD))
def test_problems_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(tmp_path, text)
    assert any(p.startswith(expected) for p in found), found


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        case(
            f"""\
            - name: a
              object: {POD}
              expect: {{allowed: maybe}}
            - name: b
              objekt: {POD}
              expect: allowed
            """
        ),
    )
    assert [p.split(":")[0] for p in found] == ["8", "10", "9"]


def test_problems_in_an_object_file_name_both_files(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: Pod\nmetadata: {name: [x\n")
    found = problems(tmp_path, case("- name: a\n  object: bad.yaml\n  expect: allowed\n"))
    assert len(found) == 1
    assert found[0].startswith(
        f"7: case 'a': object {tmp_path / 'bad.yaml'}:3: not valid YAML: expected ',' or ']'"
    )


def test_every_non_object_of_an_object_file_is_reported_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "two.yaml").write_text("just text\n---\nkind: Pod\n---\n7\n")
    found = problems(tmp_path, case("- name: a\n  object: two.yaml\n  expect: allowed\n"))
    where = tmp_path / "two.yaml"
    assert found == [
        f"7: case 'a': object {where}:1: a document is not a Kubernetes object",
        f"7: case 'a': object {where}:5: a document is not a Kubernetes object",
    ]


def test_a_policy_that_does_not_load_is_a_problem_of_the_suite(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("apiVersion: gpu-policy.io/v1alpha1\nkind: Nope\n")
    text = HEAD.replace(str(CLUSTERS / "seed003-l20-t4" / "policy.yaml"), "policy.yaml")
    found = problems(tmp_path, text + f"  - {{name: a, object: {POD}, expect: allowed}}\n")
    assert len(found) == 1
    assert found[0].startswith("4: cannot load the cluster: ")


def test_what_a_suite_holds(tmp_path: Path) -> None:
    path = tmp_path / "t.suite.yaml"
    path.write_text(
        case(
            f"""\
            - name: many
              object: {MULTI}
              namespace: other
              skip: later
              expect: {{warnings: []}}
            - name: picked
              object: {MULTI}
              select: {{kind: Pod, name: md-gpu-shared}}
              operation: UPDATE
              expect: denied
            - name: inline
              inline: {{apiVersion: v1, kind: Pod, metadata: {{name: p}}}}
              expect: {{golden: unchanged}}
            """
        )
    )
    suite = SuiteLoader().load(path)
    assert suite.name == "t"
    names = [c.name for c in suite.cases]
    assert names == [
        "many/Pod/md-gpu-1",
        "many/Pod/md-gpu-shared",
        "many/Deployment/md-two-slots",
        "many/ConfigMap/md-settings",
        "many/Service/md-gpu-1",
        "picked",
        "inline",
    ]
    first, picked, inline = suite.cases[0], suite.cases[5], suite.cases[6]
    assert (first.namespace, first.skip, first.line) == ("other", "later", 6)
    assert first.expect.warnings == ()
    assert (picked.operation, picked.expect.allowed, picked.obj["metadata"]["name"]) == (
        "UPDATE",
        False,
        "md-gpu-shared",
    )
    assert inline.expect.golden is not None and inline.expect.golden.unchanged
    assert inline.source == "t.suite.yaml:17 (inline)"


MODES_POD = """\
  inline:
    apiVersion: v1
    kind: Pod
    metadata: {name: p, namespace: nlp, annotations: {gpu-policy.io/sharing: shared}}
    spec:
      containers:
        - {name: a, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
  expect: allowed
"""


def test_a_case_sets_its_own_node_selection_mode(tmp_path: Path) -> None:
    """The same pod under the suite's policy (intent) and under never: only the engine is asked."""
    path = tmp_path / "t.suite.yaml"
    cases = "- name: suite-mode\n" + MODES_POD + "- name: never\n  injectNodeSelection: never\n"
    nodes = f"nodes: {CLUSTERS / 'seed003-l20-t4' / 'nodes.yaml'}\ncases:\n"
    path.write_text(case(cases + MODES_POD).replace("cases:\n", nodes, 1))
    suite = SuiteLoader().load(path)
    default, never = suite.cases
    assert (default.inject_node_selection, never.inject_node_selection) == (None, "never")
    assert suite.policy_for(default) is suite.policy
    local = LocalRunner()
    selected = local.run(suite, default).mutated
    assert selected is not None and "affinity" in selected["spec"]
    unselected = local.run(suite, never).mutated
    assert unselected is not None and "affinity" not in unselected["spec"]
    # A deployed webhook or a cluster answers with its own policy's mode: the case is skipped.
    assert local.unsupported(never) is None
    for runner in (ServerRunner(WebhookClient("https://127.0.0.1:1")), KubeRunner(_no_create)):
        assert runner.unsupported(default) is None
        assert runner.unsupported(never) == "sets injectNodeSelection (local only)"


@pytest.mark.parametrize(
    ("config", "refused", "verdict", "differences"),
    [
        # The plugin refuses to start (cmd/nvidia-device-plugin/main.go validateFlags): so does
        # the case's policy, with the plugin's reason.
        (
            "flags: {plugin: {deviceIDStrategy: serial}}",
            "device-id-strategy option",
            "policy refused",
            [],
        ),
        (
            "flags: {plugin: {deviceIDStrategy: serial}}",
            "deviceListStrategy",
            "policy refused",
            ["the refusal does not match"],
        ),
        (
            "flags: {plugin: {deviceIDStrategy: serial}}",
            None,
            "policy refused",
            ["the case's policy is refused"],
        ),
        (
            "flags: {plugin: {deviceIDStrategy: index}}",
            "device-id-strategy",
            "allowed",
            ["but it loads"],
        ),
        # An empty mapping is the plugin's empty config (api/config/v1/config.go): it loads.
        ("{}", None, "allowed", []),
    ],
    ids=["refused", "other-reason", "unexpected-refusal", "loads", "empty-loads"],
)
def test_a_case_names_its_own_policy(
    tmp_path: Path, config: str, refused: str | None, verdict: str, differences: list[str]
) -> None:
    """``policy:`` reviews one case under another file; ``refused:`` expects it refused."""
    (tmp_path / "plugin.yaml").write_text(config)
    expect = f"{{refused: '{refused}'}}" if refused else "{failed: []}"
    path = tmp_path / "t.suite.yaml"
    nodes = f"nodes: {CLUSTERS / 'seed003-l20-t4' / 'nodes.yaml'}\ncases:\n"
    body = MODES_POD.replace("  expect: allowed\n", f"  expect: {expect}\n")
    path.write_text(
        case("- name: own\n  policy: plugin.yaml\n" + body).replace("cases:\n", nodes, 1)
    )
    suite = SuiteLoader().load(path)
    (own,) = suite.cases
    assert own.policy_path == tmp_path / "plugin.yaml"
    observed = LocalRunner().run(suite, own)
    summary = observed.summary()
    assert (summary if verdict == "policy refused" else summary.split()[0]) == verdict
    found = [d.what for d in check(own, observed)]
    assert len(found) == len(differences) and all(
        want in got for want, got in zip(differences, found, strict=True)
    ), found
    for runner in (ServerRunner(WebhookClient("https://127.0.0.1:1")), KubeRunner(_no_create)):
        assert runner.unsupported(own) == "names its own policy (local only)"


def test_refused_needs_a_policy_of_the_case(tmp_path: Path) -> None:
    found = problems(tmp_path, case(f"- name: a\n  object: {POD}\n  expect: {{refused: x}}\n"))
    assert any("refused is about a policy of the case's own" in p for p in found), found
    (tmp_path / "p.yaml").write_text("flags: {plugin: {deviceIDStrategy: serial}}")
    text = (
        f"- name: a\n  policy: p.yaml\n  object: {POD}\n  expect: {{refused: x, allowed: false}}\n"
    )
    found = problems(tmp_path, case(text))
    assert any("a refused policy reviews nothing; drop allowed" in p for p in found), found


def _no_create(obj: object, namespace: str | None) -> Any:
    raise AssertionError("a skipped case is never created")


def test_suite_file_names() -> None:
    for name in ("suite.yaml", "seed003-suite.yaml", "mps.suite.yml", "gpu-policy-test.yaml"):
        assert is_suite_file(name), name
    for name in ("suites.yaml", "policy.yaml", "golden-suite.json", "suite.yaml.bak"):
        assert not is_suite_file(name), name


def test_discovery(tmp_path: Path) -> None:
    for rel in (
        "a/x.suite.yaml",
        "a/b/gpu-policy-test.yaml",
        ".hidden/y.suite.yaml",
        "a/other.yaml",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    named = tmp_path / "a" / "other.yaml"
    found, missing = find_suite_files([tmp_path, named, tmp_path / "nope"])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "a/x.suite.yaml",
        "a/b/gpu-policy-test.yaml",
        "a/other.yaml",
    ]
    assert [(p.source, p.reason) for p in missing] == [
        (str(tmp_path / "nope"), "no such file or directory")
    ]
