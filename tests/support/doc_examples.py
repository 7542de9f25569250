"""The console examples of README.md and docs/*.md, read as the tests check them.

A ```` ```console ```` block is an example a test runs: each line starting with ``$ `` is a
command (a trailing ``\\`` continues it on the next line), and the lines up to the next command
are what it prints, stdout and stderr together as a terminal shows them. A line ``...`` in the
output stands for lines left out. Blocks that only show what to type are ```` ```sh ````, and
recorded measurements (benchmarks) are ```` ```text ````: neither is run.

``tests/system/docs/test_examples.py`` runs every example that needs no cluster. An example that needs
an API server is listed in :data:`CLUSTER_EXAMPLES` with the test that runs it against the real
control plane and compares its output here with :func:`assert_prints`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Parts of an output that change from run to run, and what both sides become before comparing.
VOLATILE = (
    (re.compile(r" in \d+\.\d+s$", re.M), " in <seconds>s"),  # gpu-policy test's duration
)

# Examples that need a cluster: command -> the test (its pytest node id) that runs them
# against the real control plane and compares what they print.
_INSTALL = "tests/system/e2e/test_install.py::test_the_examples_through_the_api_server"
CLUSTER_EXAMPLES: dict[str, str] = {
    "kubectl create -f examples/manifests/pod-gpu-2-shared-denied.yaml": _INSTALL,
    "kubectl create -f examples/manifests/pod-annotation-product-l20.yaml": _INSTALL,
    'kubectl get pod llm-l20 -n nlp -o jsonpath=\'{.spec.nodeSelector}{"\\n"}'
    '{.metadata.annotations}{"\\n"}\'': _INSTALL,
    "kubectl apply --server-side --dry-run=server -f "
    "examples/manifests/deployment-gpu-2-denied.yaml": _INSTALL,
}
# docs/quota.md's worked example, on the control plane of its test.
_QUOTA = "tests/cluster/kube/test_quota_controlplane.py::test_the_worked_example_of_docs_quota_prints_what_it_shows"
CLUSTER_EXAMPLES |= {
    command: _QUOTA
    for command in (
        "kubectl create namespace team-a",
        "kubectl create -f examples/quota/budget.yaml",
        "kubectl create -f examples/quota/pod-train.yaml",
        "kubectl create -f examples/quota/pod-infer.yaml",
        "kubectl create -f examples/quota/pod-notebook.yaml",
        "kubectl get resourcequota gpu-budget -n team-a -o jsonpath='{.status.used}{\"\\n\"}'",
        "kubectl create --dry-run=server -f examples/quota/pod-train-2.yaml",
        "kubectl create -f examples/quota/pod-train-2.yaml",
        "kubectl delete pod train -n team-a --grace-period=0 --force",
        "kubectl apply -f examples/quota/pod-train-2.yaml",
        "kubectl get pod train-2 -n team-a -o jsonpath='{.spec.containers[0].resources}{\"\\n\"}'",
    )
}

# The README's DRA session, with the webhook installed by the chart's configurations.
_DRA_DEMO = (
    "tests/cluster/kube/test_readme_dra_demo.py::test_the_readme_dra_session_prints_what_it_shows"
)
CLUSTER_EXAMPLES |= {
    command: _DRA_DEMO
    for command in (
        "kubectl apply -f examples/dra-demo/dra.yaml",
        "kubectl apply -f examples/dra-demo/two-of-a-kind-denied.yaml",
        "kubectl apply -f examples/dra-demo/any-and-80gi.yaml",
        "kubectl apply -f examples/dra-demo/train.yaml",
        "kubectl wait --for=condition=PodScheduled pod/train -n ml --timeout=60s",
        "kubectl get pod train -n ml -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName",
        "kubectl get resourceclaims -n ml -o custom-columns="
        "REQUESTS:.status.allocation.devices.results[*].request,"
        "DEVICES:.status.allocation.devices.results[*].device",
    )
}


@dataclass(frozen=True)
class Example:
    """One command of a console block and what the page says it prints."""

    source: str  # "docs/cli.md:46": the page and the line of the command
    command: str  # continuations joined, as a shell reads it
    output: str  # the lines after the command, each ending in a newline


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples(page: Path) -> list[Example]:
    """The commands of ``page``'s console blocks, in order."""
    found: list[Example] = []
    lines = page.read_text().splitlines()
    rel = page.relative_to(ROOT).as_posix()
    in_block = False
    command: list[str] = []
    start = 0
    output: list[str] = []

    def flush() -> None:
        if command:
            found.append(Example(f"{rel}:{start}", " ".join(command), "".join(output)))

    for number, line in enumerate(lines, 1):
        if not in_block:
            in_block = line.strip() == "```console"
            continue
        if line.strip() == "```":
            flush()
            in_block, command, output = False, [], []
        elif line.startswith("$ "):
            flush()
            command, output, start = [line[2:].strip()], [], number
        elif command and not output and command[-1].endswith("\\"):
            # A continuation line: the shell drops the backslash and the newline.
            command[-1] = command[-1][:-1].rstrip()
            command.append(line.strip())
        else:
            output.append(line + "\n")
    return found


def all_examples() -> list[Example]:
    """Every example of every page."""
    return [example for page in pages() for example in examples(page)]


def find(command: str) -> Example:
    """The one example whose command is ``command``."""
    matching = [e for e in all_examples() if e.command == command]
    assert len(matching) == 1, f"{len(matching)} examples run {command!r}"
    return matching[0]


def checked_by(test: str) -> list[Example]:
    """The examples :data:`CLUSTER_EXAMPLES` gives to ``test`` (a node id), in page order."""
    return [e for e in all_examples() if CLUSTER_EXAMPLES.get(e.command) == test]


def _normal(text: str) -> list[str]:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def prints(expected: str, actual: str) -> bool:
    """Whether ``actual`` is ``expected``, a ``...`` line standing for any lines (or none)."""
    want, got = _normal(expected), _normal(actual)

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i] == "...":
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and want[i] == got[j] and match(i + 1, j + 1)

    return match(0, 0)


def assert_prints(example: Example, actual: str) -> None:
    """Fail, showing both, unless ``actual`` is what ``example`` says the command prints."""
    assert prints(example.output, actual), (
        f"{example.source}: `{example.command}` printed something else than the page shows.\n"
        f"--- the page\n{example.output}--- the command\n{actual}"
    )
