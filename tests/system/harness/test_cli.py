"""``gpu-policy test`` as a user runs it: its table, its exit code, its files."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.harness import LATER_CASE, MANIFESTS, SHARED_GPU_CASES, cli

CASES = (
    SHARED_GPU_CASES
    + f"""\
- name: half-a-gpu
  object: {MANIFESTS / "pod-gpu-fractional-500m.yaml"}
  expect: {{allowed: false, failed: [gpu-quantity]}}
"""
    + LATER_CASE
)

# The same, with one expectation deliberately wrong: two shared GPUs are denied, not allowed.
BROKEN = CASES.replace(
    "expect: {allowed: false, failed: [gpu-shared-request-above-one]}",
    "expect: {allowed: true, failed: [], warnings: ['two replicas']}",
)


def rows(stdout: str) -> dict[str, list[str]]:
    """Table rows by case name: the cells split on runs of two or more spaces."""
    out = {}
    for line in stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 4 and cells[0] == "demo":
            out[cells[1]] = cells
    return out


def test_a_passing_suite(write_suite: Callable[..., Path]) -> None:
    suite = write_suite(CASES)
    result = cli("test", str(suite), process=True)
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result.stdout)
    assert table["one-shared-gpu"][-1] == "PASS"
    assert table["two-shared-gpus"][2:] == [
        "denied [gpu-shared-request-above-one]",
        "denied [gpu-shared-request-above-one]",
        "PASS",
    ]
    assert table["later"][-2:] == ["skipped: not written yet", "SKIP"]
    assert re.search(r"^3 passed, 0 failed, 1 skipped in ", result.stdout, re.M)
    assert "\033[" not in result.stdout  # not a terminal: no colour


def test_a_broken_expectation_fails_with_a_readable_report(
    write_suite: Callable[..., Path],
) -> None:
    suite = write_suite(BROKEN)
    result = cli("test", str(suite))
    assert result.returncode == 1
    out = result.stdout
    table = rows(out)
    assert table["two-shared-gpus"][2:] == [
        "allowed 1 warning",
        "denied [gpu-shared-request-above-one]",
        "FAIL",
    ]
    assert table["one-shared-gpu"][-1] == "PASS"
    # The details say where the case is and every way the answer differed.
    assert (
        f"FAIL demo/two-shared-gpus  ({suite}:10; object {MANIFESTS}/pod-gpu-2-shared-denied.yaml:10)"
        in out
    )
    detail = out.split("FAIL demo/two-shared-gpus", 1)[1]
    assert "- expected allowed, got denied" in detail
    assert 'denial: [gpu-shared-request-above-one] container "server" asks for 2' in detail
    assert (
        "- failed rules: expected [], got [gpu-shared-request-above-one] "
        "(unexpected gpu-shared-request-above-one)" in detail
    )
    assert "- no warning matches /two replicas/" in detail
    assert out.rstrip().splitlines()[-1].startswith("2 passed, 1 failed, 1 skipped in ")


def test_colour_on_request(write_suite: Callable[..., Path]) -> None:
    result = cli("test", "--colour", "always", str(write_suite(BROKEN)))
    assert "\033[32mPASS\033[0m" in result.stdout
    assert "\033[31mFAIL\033[0m" in result.stdout
    assert "\033[33mSKIP\033[0m" in result.stdout


def test_k_selects_by_substring_or_glob(write_suite: Callable[..., Path]) -> None:
    suite = str(write_suite(CASES))
    result = cli("test", "-k", "SHARED", suite)  # substrings ignore case
    assert set(rows(result.stdout)) == {"one-shared-gpu", "two-shared-gpus"}
    assert "2 passed, 0 failed, 0 skipped, 2 deselected" in result.stdout
    result = cli("test", "-k", "demo/h*", "-k", "later", suite)  # globs match the whole id
    assert set(rows(result.stdout)) == {"half-a-gpu", "later"}
    result = cli("test", "-k", "nothing-like-this", suite)
    assert result.returncode == 2
    assert "no case matches -k nothing-like-this" in result.stderr


def test_junit_xml(write_suite: Callable[..., Path], tmp_path: Path) -> None:
    report = tmp_path / "reports" / "junit.xml"
    result = cli("test", "--junit", str(report), str(write_suite(BROKEN)))
    assert result.returncode == 1
    root = ET.parse(report).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "4",
        "1",
        "0",
        "1",
    )
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "demo"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["one-shared-gpu", "two-shared-gpus", "half-a-gpu", "later"]
    failure = cases["two-shared-gpus"].find("failure")
    assert failure is not None
    assert failure.get("message") == "expected allowed, got denied"
    assert "no warning matches /two replicas/" in (failure.text or "")
    assert cases["later"].find("skipped") is not None
    assert cases["one-shared-gpu"].find("failure") is None
    assert cases["one-shared-gpu"].get("classname") == "gpu-policy.demo"


GOLDEN_CASE = f"""\
- name: l20
  object: {MANIFESTS / "pod-annotation-product-l20.yaml"}
  expect: {{allowed: true, golden: golden/l20.yaml}}
"""


def test_golden_files_round_trip(write_suite: Callable[..., Path], tmp_path: Path) -> None:
    suite = str(write_suite(GOLDEN_CASE))
    golden = tmp_path / "golden" / "l20.yaml"
    # Missing: the case fails and says how to create it.
    result = cli("test", suite)
    assert result.returncode == 1
    assert "golden file golden/l20.yaml does not exist; run with --update-golden" in result.stdout
    # Created, then passing; a second update changes nothing.
    result = cli("test", "--update-golden", suite)
    assert result.returncode == 0, result.stdout
    assert "updated golden file" in result.stdout
    first = golden.read_text()
    stored = yaml.safe_load(first)
    assert stored["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}
    assert list(stored) == sorted(stored)  # stable key order
    assert cli("test", suite).returncode == 0
    assert cli("test", "--update-golden", suite).stdout.count("updated golden file") == 0
    assert golden.read_text() == first
    # Someone edits the expectation: the diff shows, and an update puts the answer back.
    golden.write_text(first.replace("NVIDIA-L20-SHARED", "Tesla-T4-SHARED"))
    result = cli("test", suite)
    assert result.returncode == 1
    assert "the object after the webhook differs from golden golden/l20.yaml" in result.stdout
    assert "-    nvidia.com/gpu.product: Tesla-T4-SHARED" in result.stdout
    assert "+    nvidia.com/gpu.product: NVIDIA-L20-SHARED" in result.stdout
    assert cli("test", "--update-golden", suite).returncode == 0
    assert golden.read_text() == first


def test_suite_file_errors_exit_2_naming_file_and_line(write_suite: Callable[..., Path]) -> None:
    good = write_suite(CASES, file="a/good.suite.yaml")
    bad = write_suite(
        CASES.replace("failed: [gpu-quantity]", "failed: [gpu-quantities]"),
        file="b/bad.suite.yaml",
    )
    result = cli("test", str(good.parent.parent))
    assert result.returncode == 2
    assert (
        f"error: {bad}:15: case 'half-a-gpu': unknown rule id 'gpu-quantities'; "
        "did you mean gpu-quantity?" in result.stderr
    )
    # The good suite still runs; the closing line counts the broken file.
    assert "3 passed, 0 failed, 1 skipped, 1 suite file errors" in result.stdout


def test_usage_errors(write_suite: Callable[..., Path], tmp_path: Path) -> None:
    suite = str(write_suite(CASES))
    result = cli("test", "--server", "https://127.0.0.1:1", "--kubeconfig", "k", suite)
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "gpu-policy test: give --server or --kubeconfig, not both",
    )
    result = cli("test", "--server", "http://127.0.0.1:1", suite)
    assert result.returncode == 2
    assert "expected https://HOST:PORT" in result.stderr
    result = cli("test", "--kubeconfig", str(tmp_path / "nope"), suite)
    assert result.returncode == 2
    assert "kubeconfig not found" in result.stderr
    result = cli("test", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "missing: no such file or directory" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("test", str(empty))
    assert result.returncode == 2
    assert "no suite files here" in result.stderr


def test_json_output_carries_every_case_answer_and_difference(
    write_suite: Callable[..., Path],
) -> None:
    suite = write_suite(BROKEN)
    result = cli("test", str(suite), "-o", "json")
    assert result.returncode == 1
    doc = json.loads(result.stdout)  # the document alone on stdout: no table, no closing line
    assert doc["summary"] | {"seconds": 0} == {
        "passed": 2,
        "failed": 1,
        "skipped": 1,
        "errors": 0,
        "deselected": 0,
        "suiteFileErrors": 0,
        "seconds": 0,
    }
    by_name = {c["case"]: c for c in doc["cases"]}
    broken = by_name["two-shared-gpus"]
    assert (broken["status"], broken["line"]) == ("fail", 10)
    assert broken["got"]["allowed"] is False
    assert broken["got"]["failed"] == ["gpu-shared-request-above-one"]
    assert 'container "server" asks for 2 nvidia.com/gpu' in broken["got"]["message"]
    assert broken["differences"][0]["what"] == "expected allowed, got denied"
    assert by_name["later"]["skipReason"] == "not written yet"
    assert by_name["later"]["got"] is None


def test_two_json_runs_differ_only_in_their_timings(write_suite: Callable[..., Path]) -> None:
    suite = write_suite(CASES)

    def without_times() -> Any:
        doc = json.loads(cli("test", str(suite), "-o", "json").stdout)
        doc["summary"].pop("seconds")
        for case in doc["cases"]:
            case.pop("seconds")
        return doc

    first = without_times()
    assert first == without_times()
    assert [c["status"] for c in first["cases"]] == ["pass", "pass", "pass", "skip"]
