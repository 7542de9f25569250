"""make test's workers start the longest test files first (tests/support/ordering.py), as
measured in a run's JUnit XML (scripts/test_durations.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from scripts.test_durations import main as write_durations
from tests.support.ordering import UNKNOWN_SECONDS_PER_TEST, file_seconds, longest_first

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.cluster.kube.test_slow" name="test_a" time="40.5"/>
<testcase classname="tests.cluster.kube.test_slow" name="test_b" time="20.0"/>
<testcase classname="tests.system.server.test_mid.TestGroup" name="test_c" time="30.24"/>
<testcase classname="tests.core.test_quick" name="test_d" time="0.1"/>
</testsuite></testsuites>
"""


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_the_table_sums_each_files_tests_and_leaves_out_quick_files(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    out = tmp_path / "durations.json"
    assert write_durations([str(junit), "--out", str(out)]) == 0
    assert list(json.loads(out.read_text())["files"].items()) == [
        ("tests/cluster/kube/test_slow.py", 60.5),
        ("tests/system/server/test_mid.py", 30.2),
    ]
    assert file_seconds(out) == {
        "tests/cluster/kube/test_slow.py": 60.5,
        "tests/system/server/test_mid.py": 30.2,
    }


def test_the_table_averages_several_runs(tmp_path: Path) -> None:
    (tmp_path / "one.xml").write_text(JUNIT)
    (tmp_path / "two.xml").write_text(JUNIT.replace('time="40.5"', 'time="80.5"'))
    out = tmp_path / "durations.json"
    runs = [str(tmp_path / "one.xml"), str(tmp_path / "two.xml")]
    assert write_durations([*runs, "--out", str(out)]) == 0
    assert file_seconds(out)["tests/cluster/kube/test_slow.py"] == 80.5


def test_files_run_longest_first_and_keep_their_tests_in_order() -> None:
    items = _items(
        "tests/core/test_quick.py::test_1",
        "tests/cluster/test_long.py::test_1",
        "tests/core/test_quick.py::test_2",
        "tests/system/test_new.py::test_1",
        "tests/cluster/test_long.py::test_2",
        "tests/system/test_mid.py::Group::test_1",
    )
    seconds = {"tests/cluster/test_long.py": 90.0, "tests/system/test_mid.py": 30.0}
    assert [i.nodeid for i in longest_first(items, seconds)] == [
        "tests/cluster/test_long.py::test_1",
        "tests/cluster/test_long.py::test_2",
        "tests/system/test_mid.py::Group::test_1",
        # Not in the table: a guess from their number of tests, more tests first.
        "tests/core/test_quick.py::test_1",
        "tests/core/test_quick.py::test_2",
        "tests/system/test_new.py::test_1",
    ]
    assert UNKNOWN_SECONDS_PER_TEST * 2 < 30.0


def test_the_committed_table_names_files_that_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    table = file_seconds()
    assert table, "tests/durations.json is empty or missing"
    assert [name for name in table if not (root / name).is_file()] == []
