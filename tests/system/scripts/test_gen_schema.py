"""scripts/gen_schema.py as a user runs it: --check on the committed file, on a stale copy,
and the rewrite of that copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gen_schema.py"
CHART_SCHEMA = ROOT / "charts" / "gpu-policy-webhook" / "values.schema.json"


def _generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_committed_schema_passes_the_check() -> None:
    done = _generate("--check")
    assert done.returncode == 0, done.stderr


def test_a_stale_schema_is_found_and_rewritten(tmp_path: Path) -> None:
    stale = json.loads(CHART_SCHEMA.read_text())
    spec = stale["properties"]["policy"]["properties"]["spec"]
    del spec["properties"]["quota"]
    copy = tmp_path / "values.schema.json"
    copy.write_text(json.dumps(stale, indent=2) + "\n")
    checked = _generate("--check", "--file", str(copy))
    assert checked.returncode == 1
    assert "run scripts/gen_schema.py" in checked.stderr
    assert _generate("--file", str(copy)).returncode == 0
    assert copy.read_text() == CHART_SCHEMA.read_text()
    assert _generate("--check", "--file", str(copy)).returncode == 0


def test_a_file_that_is_not_the_charts_schema_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "values.schema.json"
    other.write_text("{}\n")
    done = _generate("--check", "--file", str(other))
    assert done.returncode == 2
    assert "cannot read the chart's schema" in done.stderr
