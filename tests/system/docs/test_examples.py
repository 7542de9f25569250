"""Every console example of README.md and docs/ prints what the page shows.

Each command runs in a shell, as a reader would type it, from a copy of the repository's
``examples/`` and ``tests/fixtures/`` (``gpu-policy plan --write-dir`` writes there) with
``.venv`` linked in, so relative paths resolve as in a checkout. The ``curl`` examples go to a
server started as ``make run`` starts it (the bundled example policy, certificates in
``certs/dev``), on a free port instead of 8443. Examples that need an API server are run by
the tests that :data:`tests.support.doc_examples.CLUSTER_EXAMPLES` names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import doc_examples, gunicorn
from tests.support.doc_examples import ROOT, Example
from webhook.certs.issue import CertPaths

EXAMPLES = doc_examples.all_examples()
TOOLS = ROOT / ".cache" / "tools"
DEV_SERVER = "https://127.0.0.1:8443"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory laid out as the repository for the files the examples read and write."""
    where = tmp_path_factory.mktemp("checkout")
    for folder in ("examples", "tests/fixtures"):
        shutil.copytree(ROOT / folder, where / folder)
    (where / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return where


@pytest.fixture(scope="module")
def dev_server(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server of ``make run``: dev certificates in certs/dev, the bundled example policy."""
    made = run("gpu-policy certs --out certs/dev --if-missing", checkout)
    assert made.returncode == 0, made.stdout
    certs = CertPaths.in_dir(checkout / "certs" / "dev")
    with gunicorn.running(tmp_path_factory.mktemp("server"), certs) as server:
        yield f"https://127.0.0.1:{server.port}"


def run(command: str, cwd: Path, *, stderr: bool = True) -> subprocess.CompletedProcess[str]:
    """``command`` in bash from ``cwd``, stdout and stderr in one stream as a terminal shows.

    ``stderr=False`` leaves out what a program writes to stderr only when stdout is no terminal
    (curl's progress meter).
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1", NO_COLOR="1")
    env["PATH"] = os.pathsep.join([str(cwd / ".venv" / "bin"), str(TOOLS), env["PATH"]])
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
        text=True,
        timeout=120,
        check=False,
    )


def _needs(example: Example) -> str:
    """What the example needs: "shell", "server" (make run's) or "cluster"."""
    if example.command.startswith("curl ") and DEV_SERVER in example.command:
        return "server"
    first = example.command.split()[0]
    if first in {"kubectl", "helm"} or re.match(r"^\S*kubectl (?!gpu-policy)", example.command):
        return "cluster"
    return "shell"


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.source for e in EXAMPLES])
def test_example_prints_what_the_page_shows(
    example: Example, checkout: Path, request: pytest.FixtureRequest
) -> None:
    need = _needs(example)
    if need == "cluster":
        assert example.command in doc_examples.CLUSTER_EXAMPLES, (
            f"{example.source}: `{example.command}` needs a cluster: name the test that runs it "
            "in tests/support/doc_examples.CLUSTER_EXAMPLES"
        )
        pytest.skip(
            f"run against the control plane by {doc_examples.CLUSTER_EXAMPLES[example.command]}"
        )
    if example.command.split()[0] == "kubectl" and not (TOOLS / "kubectl").exists():
        pytest.skip("kubectl is not in .cache/tools (run `make tools`)")
    command = example.command
    if need == "server":
        command = command.replace(DEV_SERVER, request.getfixturevalue("dev_server"))
        doc_examples.assert_prints(example, run(command, checkout, stderr=False).stdout)
        return
    if command == "echo $?":
        previous = EXAMPLES[EXAMPLES.index(example) - 1]
        status = run(previous.command, checkout).returncode
        doc_examples.assert_prints(example, f"{status}\n")
        return
    doc_examples.assert_prints(example, run(command, checkout).stdout)


def test_cluster_examples_name_a_test_that_runs_them() -> None:
    """Each example listed as run against the control plane is on a page and in its test."""
    for command, test in doc_examples.CLUSTER_EXAMPLES.items():
        doc_examples.find(command)
        path, name = test.split("::")
        text = (ROOT / path).read_text()
        assert f"def {name}(" in text, f"{test} does not exist"


def test_plan_example_writes_the_files_in_the_repository(checkout: Path) -> None:
    """The files docs/cli.md's `plan` example writes are the ones committed beside it."""
    example = next(e for e in EXAMPLES if " plan " in e.command and "--write-dir" in e.command)
    written = Path(example.command.split("--write-dir")[1].split()[0])
    assert run(example.command, checkout).returncode == 0
    for path in sorted((ROOT / written).iterdir()):
        assert (checkout / written / path.name).read_text() == path.read_text(), path.name


def test_every_page_is_read() -> None:
    """The parser finds the examples: a console block without a command would be a mistake."""
    for page in doc_examples.pages():
        blocks = page.read_text().count("```console")
        starts = {e.source.rsplit(":", 1)[0] for e in doc_examples.examples(page)}
        assert blocks == 0 or starts == {page.relative_to(ROOT).as_posix()}, page
    assert len(EXAMPLES) >= 5
