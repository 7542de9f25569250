"""What every command shares: colour, one-line errors, the kubectl plugin, light imports."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import modules_loaded
from webhook.cli.common import use_colour
from webhook.cli.main import main

from .conftest import ROOT

POD = ROOT / "examples" / "manifests" / "pod-no-gpu.yaml"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


COLOUR = {
    "auto-terminal": ("auto", True, {}, True),
    "auto-pipe": ("auto", False, {}, False),
    "auto-no-color-set": ("auto", True, {"NO_COLOR": "1"}, False),
    # https://no-color.org: set *and not empty*; an empty NO_COLOR leaves colour on.
    "auto-no-color-empty": ("auto", True, {"NO_COLOR": ""}, True),
    "always-beats-no-color": ("always", False, {"NO_COLOR": "1"}, True),
    "never-on-a-terminal": ("never", True, {}, False),
}


@pytest.mark.parametrize("choice,tty,environ,expected", COLOUR.values(), ids=list(COLOUR))
def test_colour(choice: str, tty: bool, environ: dict[str, str], expected: bool) -> None:
    stream = _Terminal() if tty else io.StringIO()
    assert use_colour(choice, stream, environ) is expected


def test_a_file_error_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nspec: [unclosed\n")
    assert main(["review", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-policy: {bad}: line 3: not valid YAML: ")
    assert err.count("\n") == 1


def test_an_option_error_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", "--context", "c", str(ROOT / "examples" / "suites")]) == 2
    assert capsys.readouterr().err == "gpu-policy test: --context needs --kubeconfig\n"


def test_help_has_no_restructuredtext(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["review", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "``" not in capsys.readouterr().out


def test_review_loads_neither_flask_gunicorn_kubernetes_nor_cel() -> None:
    # Each costs a review's start time (the cel package loads its REPL's libraries with it:
    # a third of a second); a pod with no CEL selector to judge needs none of them.
    status, modules, _ = modules_loaded("review", str(POD))
    assert status == 0
    heavy = {m.split(".")[0] for m in modules} & {"flask", "gunicorn", "kubernetes", "cel"}
    assert heavy == set()


def test_kubectl_runs_it_as_a_plugin(tmp_path: Path) -> None:
    beside_python = Path(sys.executable).parent
    kubectl = shutil.which("kubectl") or str(ROOT / ".cache" / "tools" / "kubectl")
    if not (beside_python / "kubectl-gpu_policy").exists() or not Path(kubectl).exists():
        pytest.skip("needs the installed package (pip install -e .) and kubectl (make tools)")
    env = {
        **os.environ,
        "PATH": f"{beside_python}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": os.devnull,  # kubectl reads no cluster to run a plugin
        "HOME": str(tmp_path),
    }
    proc = subprocess.run(
        [kubectl, "gpu-policy", "review", str(POD)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 reviewed, 0 denied" in proc.stdout
