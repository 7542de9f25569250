"""Suite files: finding them, reading them strictly, and turning them into suites and cases.

The format is described in :mod:`webhook.harness.suite`. Every problem is reported with the
file, the line and what is wrong, all of them at once, and nothing runs from a file that has one.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from webhook.files import (
    Document,
    kubernetes_objects,
    load_inventory,
    load_policy,
    read_text,
    yaml_error,
)
from webhook.harness.suite import (
    OPERATIONS,
    Case,
    Expect,
    Problem,
    Suite,
    SuiteError,
    is_suite_file,
    problem,
)
from webhook.harness.suite_fields import (
    case_label,
    check_kind,
    golden_file,
    inline_object,
    metadata_of,
    node_selection,
    select,
    suite_name,
    warning_patterns,
)
from webhook.harness.yaml_nodes import NodeReader, line_of, shape
from webhook.policy import (
    RULES,
    Inventory,
    Policy,
    PolicyError,
)

_SUITE_FIELDS: tuple[str, ...] = (
    "apiVersion",
    "kind",
    "name",
    "metadata",
    "description",
    "policy",
    "nodes",
    "skip",
    "cases",
)
_CASE_FIELDS: tuple[str, ...] = (
    "name",
    "description",
    "object",
    "inline",
    "select",
    "operation",
    "namespace",
    "injectNodeSelection",
    "policy",
    "skip",
    "expect",
)
_EXPECT_FIELDS: tuple[str, ...] = ("allowed", "failed", "warnings", "message", "golden", "refused")
_PRUNED_DIRS = frozenset({"node_modules", "__pycache__", "venv"})


def find_suite_files(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[Problem]]:
    """Suite files under ``paths``: files as given, directories walked for suite names.

    Hidden directories, ``node_modules``, ``__pycache__`` and ``venv`` are not entered. A path
    that does not exist, or a directory without a suite file, is a Problem.
    """
    found: list[Path] = []
    problems: list[Problem] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            here = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _PRUNED_DIRS)
                here += [Path(root, f) for f in sorted(files) if is_suite_file(f)]
            if not here:
                problems.append(
                    problem(
                        str(path),
                        None,
                        "no suite files here (names ending in suite.yaml, or gpu-policy-test.yaml)",
                    )
                )
            found += here
        else:
            problems.append(problem(str(path), None, "no such file or directory"))
    unique = list(dict.fromkeys(found))
    return unique, problems


def load_suites(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Suite], list[Problem]]:
    """Every suite under ``paths``, and every problem with the files found."""
    files, problems = find_suite_files(paths)
    loader = SuiteLoader()
    suites = []
    for path in files:
        try:
            suites.append(loader.load(path))
        except SuiteError as exc:
            problems += exc.problems
    return suites, problems


def _yaml_problem(exc: yaml.YAMLError, source: str) -> Problem:
    error = yaml_error(exc, source)
    return problem(source, error.line, error.reason)


class SuiteLoader:
    """Loads suite files; policies, inventories and manifests read once and shared."""

    def __init__(self) -> None:
        """Start with empty caches."""
        self._policies: dict[tuple[Path | None, Path | None], tuple[Policy, Inventory]] = {}
        self._manifests: dict[Path, list[Document]] = {}

    def load(self, path: str | os.PathLike[str]) -> Suite:
        """Read and check one suite file; SuiteError lists every problem found in it."""
        path = Path(path)
        source = str(path)
        try:
            text = read_text(path)
        except PolicyError as exc:
            raise SuiteError([problem(source, None, exc.reason)]) from None
        loader = yaml.SafeLoader(text)
        try:
            try:
                node = loader.get_single_node()
            except yaml.YAMLError as exc:
                if "expected a single document" in str(exc):
                    line = getattr(getattr(exc, "problem_mark", None), "line", None)
                    raise SuiteError(
                        [
                            problem(
                                source,
                                line + 1 if line is not None else None,
                                "a suite file holds one YAML document; put each suite in its "
                                "own file",
                            )
                        ]
                    ) from None
                raise SuiteError([_yaml_problem(exc, source)]) from None
            if node is None:
                raise SuiteError([problem(source, None, "the file is empty")])
            return self._suite(NodeReader(path, loader), node)
        finally:
            loader.dispose()

    def _suite(self, r: NodeReader, node: yaml.Node) -> Suite:
        fields = r.mapping(node, "suite", _SUITE_FIELDS)
        if not isinstance(node, yaml.MappingNode):
            raise SuiteError(r.problems)
        check_kind(r, node, fields)
        name = suite_name(r, fields)
        description = ""
        if "description" in fields:
            description = r.string(fields["description"], "description") or ""
        policy_path = r.relative(fields["policy"], "policy") if "policy" in fields else None
        nodes_path = r.relative(fields["nodes"], "nodes") if "nodes" in fields else None
        skip = r.skip(fields.get("skip"), "suite")
        cases = self._suite_cases(r, node, fields.get("cases"), name, nodes_path)
        cluster = None
        if not r.problems:
            try:
                cluster = self._policy(policy_path, nodes_path)
            except PolicyError as exc:
                where = fields.get("nodes") if "nodes in" in exc.source else fields.get("policy")
                r.problem(where or node, f"cannot load the cluster: {exc}")
        if r.problems or cluster is None:
            raise SuiteError(r.problems)
        return Suite(
            path=r.path,
            name=name,
            policy=cluster[0],
            inventory=cluster[1],
            cases=cases,
            description=description,
            skip=skip,
        )

    def _suite_cases(
        self,
        r: NodeReader,
        node: yaml.Node,
        cases_node: yaml.Node | None,
        suite: str,
        nodes: Path | None,
    ) -> list[Case]:
        """The cases in file order; a name given twice is a problem on its second entry."""
        if cases_node is None:
            r.problem(node, "cases is missing: a suite needs at least one case")
            return []
        if not isinstance(cases_node, yaml.SequenceNode) or not cases_node.value:
            r.problem(cases_node, f"cases must be a non-empty list, not {shape(cases_node)}")
            return []
        cases: list[Case] = []
        seen: dict[str, int] = {}
        for i, case_node in enumerate(cases_node.value):
            for case in self._cases(r, case_node, suite, i, nodes):
                if case.name in seen:
                    r.problem(
                        case_node,
                        f"case {case.name!r} is already defined on line {seen[case.name]}",
                    )
                seen.setdefault(case.name, case.line)
                cases.append(case)
        return cases

    def _policy(self, policy: Path | None, nodes: Path | None) -> tuple[Policy, Inventory]:
        key = (policy, nodes)
        if key not in self._policies:
            loaded = load_policy(policy)
            self._policies[key] = (loaded, load_inventory(loaded, nodes))
        return self._policies[key]

    def _case_policy(
        self,
        r: NodeReader,
        fields: Mapping[str, yaml.Node],
        expect: Expect | None,
        nodes: Path | None,
        what: str,
    ) -> tuple[Path | None, dict[str, Any]]:
        """``policy:`` of a case: its path, and the Case fields loading it gives."""
        if "policy" not in fields:
            if expect is not None and expect.refused is not None:
                r.problem(fields["expect"], f"{what}: refused is about a policy of the case's own")
            return None, {}
        path = r.relative(fields["policy"], f"{what}: policy")
        if path is None:
            return None, {}
        try:
            policy = load_policy(path)
        except PolicyError as exc:
            return path, {"refusal": str(exc)}
        try:
            inventory = load_inventory(policy, nodes)
        except PolicyError as exc:
            r.problem(fields["policy"], f"{what}: cannot load the cluster with this policy: {exc}")
            return path, {}
        return path, {"policy": policy, "inventory": inventory}

    def _cases(
        self, r: NodeReader, node: yaml.Node, suite: str, index: int, nodes: Path | None
    ) -> Iterator[Case]:
        fields = r.mapping(node, case_label(node, index), _CASE_FIELDS)
        if not isinstance(node, yaml.MappingNode):
            return
        name = r.string(fields["name"], "case name") if "name" in fields else None
        if "name" not in fields:
            r.problem(node, f"cases[{index}]: name is missing")
        what = f"case {name!r}" if name else f"cases[{index}]"
        operation = "CREATE"
        if "operation" in fields:
            op = r.string(fields["operation"], f"{what}: operation")
            if op is not None and op not in OPERATIONS:
                r.problem(
                    fields["operation"],
                    f"{what}: operation {op!r} is not one of {', '.join(OPERATIONS)}",
                )
            elif op is not None:
                operation = op
        namespace = None
        if "namespace" in fields:
            namespace = r.string(fields["namespace"], f"{what}: namespace")
        mode = node_selection(r, fields.get("injectNodeSelection"), what)
        skip = r.skip(fields.get("skip"), what)
        expect = self._expect(r, fields.get("expect"), node, what)
        objects = self._objects(r, fields, node, what)
        policy_path, loaded = self._case_policy(r, fields, expect, nodes, what)
        if name is None or expect is None or objects is None:
            return
        if len(objects) > 1 and expect.golden is not None and not expect.golden.unchanged:
            r.problem(
                fields["expect"],
                f"{what}: the object file holds {len(objects)} documents but a golden file "
                "holds one object; pick one with select: {kind, name}",
            )
            return
        for source, obj in objects:
            case_name = name
            if len(objects) > 1:
                meta = metadata_of(obj)
                obj_name = meta.get("name") or meta.get("generateName") or "?"
                case_name = f"{name}/{obj.get('kind')}/{obj_name}"
            yield Case(
                suite=suite,
                name=case_name,
                obj=obj,
                expect=expect,
                path=r.path,
                line=line_of(node),
                source=source,
                operation=operation,
                namespace=namespace,
                skip=skip,
                inject_node_selection=mode,
                policy_path=policy_path,
                **loaded,
            )

    def _objects(
        self, r: NodeReader, fields: Mapping[str, yaml.Node], node: yaml.Node, what: str
    ) -> list[tuple[str, dict[str, Any]]] | None:
        if ("object" in fields) == ("inline" in fields):
            r.problem(node, f"{what}: give the object as object: <file> or inline: {{...}}")
            return None
        if "inline" in fields:
            if "select" in fields:
                r.problem(fields["select"], f"{what}: select picks documents of an object file")
            return inline_object(r, fields["inline"], what)
        objects = self._file_objects(r, fields["object"], what)
        if objects is not None and "select" in fields:
            return select(r, fields["select"], objects, what)
        return objects

    def _file_objects(
        self, r: NodeReader, file_node: yaml.Node, what: str
    ) -> list[tuple[str, dict[str, Any]]] | None:
        """The objects of ``object: <file>``, each labelled ``file:line``."""
        path = r.relative(file_node, f"{what}: object")
        if path is None:
            return None
        try:
            docs = self._manifest(path)
        except SuiteError as exc:
            for p in exc.problems:
                r.problem(file_node, f"{what}: object {p}")
            return None
        objects = [(f"{r.value(file_node)}:{line}", obj) for line, obj in docs]
        for label, obj in objects:
            if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
                r.problem(file_node, f"{what}: {label} has no apiVersion and kind")
                return None
        if not objects:
            r.problem(file_node, f"{what}: {r.value(file_node)} holds no object")
            return None
        return objects

    def _manifest(self, path: Path) -> list[Document]:
        if path not in self._manifests:
            try:
                self._manifests[path] = kubernetes_objects(read_text(path), source=str(path))
            except PolicyError as exc:
                # Every object of the file that is not one, each with its line.
                raise SuiteError(
                    [problem(str(path), d.line, d.reason) for d in exc.diagnostics]
                ) from None
        return self._manifests[path]

    def _expect(
        self, r: NodeReader, node: yaml.Node | None, case_node: yaml.Node, what: str
    ) -> Expect | None:
        if node is None:
            r.problem(case_node, f"{what}: expect is missing (e.g. expect: {{allowed: true}})")
            return None
        if isinstance(node, yaml.ScalarNode) and r.value(node) in ("allowed", "denied"):
            return Expect(allowed=r.value(node) == "allowed")
        fields = r.nonempty_mapping(
            node, f"{what}: expect", _EXPECT_FIELDS, f"{what}: expect is empty; say what to check"
        )
        if fields is None:
            return None
        before = len(r.problems)
        allowed = r.boolean(fields["allowed"], f"{what}: allowed") if "allowed" in fields else None
        failed = None
        if "failed" in fields:
            failed = self._rule_ids(r, fields["failed"], what)
            if failed and allowed is True:
                r.problem(
                    fields["failed"],
                    f"{what}: a review with failed rules is denied; "
                    "set allowed: false or drop failed",
                )
        warnings = warning_patterns(r, fields["warnings"], what) if "warnings" in fields else None
        message = None
        if "message" in fields:
            message = r.regex(fields["message"], f"{what}: message")
            if allowed is True:
                r.problem(fields["message"], f"{what}: message is the denial's; allowed is true")
        golden = golden_file(r, fields["golden"], what, allowed) if "golden" in fields else None
        refused = None
        if "refused" in fields:
            refused = r.regex(fields["refused"], f"{what}: refused")
            others = [f for f in fields if f != "refused"]
            if others:
                r.problem(
                    fields["refused"],
                    f"{what}: a refused policy reviews nothing; drop {', '.join(others)}",
                )
        if len(r.problems) != before:
            return None
        return Expect(
            allowed=allowed,
            failed=failed,
            warnings=warnings,
            message=message,
            golden=golden,
            refused=refused,
        )

    def _rule_ids(self, r: NodeReader, node: yaml.Node, what: str) -> tuple[str, ...] | None:
        if not isinstance(node, yaml.SequenceNode):
            r.problem(node, f"{what}: failed must be a list of rule ids (may be empty)")
            return None
        ids: list[str] = []
        for item in node.value:
            rule = r.string(item, f"{what}: failed")
            if rule is None:
                continue
            if rule not in RULES:
                close = difflib.get_close_matches(rule, list(RULES), n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                r.problem(
                    item, f"{what}: unknown rule id {rule!r}; {hint}known: {', '.join(RULES)}"
                )
                continue
            ids.append(rule)
        return tuple(sorted(set(ids)))
