#!/usr/bin/env python3
"""Write tests/durations.json (seconds per test file) from the JUnit XML of pytest runs.

``make test`` hands the longest files to its workers first (tests/support/ordering.py reads
the table). Refresh it after adding or changing slow tests::

    PYTEST_ADDOPTS=--junitxml=/tmp/junit.xml make pytest
    .venv/bin/python scripts/test_durations.py /tmp/junit.xml

A file's figure is the sum of its tests' times (setup, call and teardown, as JUnit records
them), averaged over the runs given (the machine's load moves a single run's figures), rounded
to a tenth of a second; files that took less than ``--min`` seconds are left
out (the table keeps the files whose place in the order matters).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "durations.json"


def test_file(classname: str) -> str:
    """The test file of a JUnit ``classname`` (``tests.a.test_b`` or ``tests.a.test_b.Class``)."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return "/".join(parts) + ".py"


def seconds_per_file(junit: Path) -> Counter[str]:
    """Sum of each test file's test times in the JUnit XML ``junit``."""
    per_file: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314 - pytest's own output
        per_file[test_file(case.get("classname", ""))] += float(case.get("time", "0"))
    return per_file


def main(argv: list[str] | None = None) -> int:
    """Read the JUnit XML, write the table; 0 when written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, nargs="+", help="pytest's --junitxml files")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--min", type=float, default=2.0, help="leave out quicker files")
    args = parser.parse_args(argv)
    per_file: Counter[str] = Counter()
    for junit in args.junit:
        per_file.update(seconds_per_file(junit))
    per_file = Counter({name: total / len(args.junit) for name, total in per_file.items()})
    files = {
        name: round(seconds, 1)
        for name, seconds in sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0]))
        if seconds >= args.min
    }
    table = {
        "about": "seconds per test file, averaged over make test runs; scripts/test_durations.py",
        "files": files,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{args.out}: {len(files)} files, {sum(files.values()):.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
