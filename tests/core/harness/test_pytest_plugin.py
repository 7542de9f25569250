"""The pytest plugin: suite cases as pytest items, collected only when asked."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from tests.support.harness import LATER_CASE, MANIFESTS, SHARED_GPU_CASES, suite_text

pytest_plugins = ["pytester"]

# Once pyproject registers the entry point (pytest11 gpu_policy), pytest loads the plugin by
# itself; until then the test loads it with -p.
REGISTERED = any(
    ep.value == "webhook.harness.pytest_plugin" for ep in entry_points(group="pytest11")
)
# Hypothesis's plugin costs most of a second per in-process session; these sessions need none.
PLUGIN = ["-p", "no:hypothesispytest", "-p", "no:cacheprovider"]
PLUGIN += [] if REGISTERED else ["-p", "webhook.harness.pytest_plugin"]

CASES = SHARED_GPU_CASES + LATER_CASE


def write(pytester: pytest.Pytester, rel: str, text: str) -> None:
    path = pytester.path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with a suite, an ordinary YAML file and an ordinary test."""
    write(pytester, "gpu/team.suite.yaml", suite_text("seed003-l20-t4", CASES, name="team"))
    write(pytester, "deploy/values.yaml", "replicas: 3\n")
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    return pytester


def test_idle_unless_asked(project: pytest.Pytester) -> None:
    result = project.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)


def test_collects_one_item_per_case(project: pytest.Pytester) -> None:
    result = project.runpytest(*PLUGIN, "--gpu-policy-suites", "-v")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*gpu/team.suite.yaml::one-shared-gpu PASSED*",
            "*gpu/team.suite.yaml::two-shared-gpus PASSED*",
            "*gpu/team.suite.yaml::later SKIPPED*not written yet*",
        ]
    )


def test_an_ini_setting_turns_it_on(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\ngpu_policy_suites = true\n")
    project.runpytest(*PLUGIN).assert_outcomes(passed=3, skipped=1)


def test_a_named_suite_file_is_collected(project: pytest.Pytester) -> None:
    result = project.runpytest(*PLUGIN, "gpu/team.suite.yaml", "-k", "two")
    result.assert_outcomes(passed=1, deselected=2)


def test_a_failing_case_shows_what_differed(project: pytest.Pytester) -> None:
    broken = CASES.replace("failed: [gpu-shared-request-above-one]", "failed: [gpu-quantity]")
    write(project, "gpu/team.suite.yaml", suite_text("seed003-l20-t4", broken, name="team"))
    result = project.runpytest(*PLUGIN, "--gpu-policy-suites")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    out = result.stdout.str()
    assert (
        "FAIL team/two-shared-gpus  (gpu/team.suite.yaml:10; object "
        f"{MANIFESTS}/pod-gpu-2-shared-denied.yaml:10)" in out
    )
    assert (
        "  - failed rules: expected [gpu-quantity], got [gpu-shared-request-above-one] "
        "(missing gpu-quantity; unexpected gpu-shared-request-above-one)" in out
    )
    assert "Traceback" not in result.stdout.str()
    assert "runtest" not in result.stdout.str()


def test_a_broken_suite_is_a_collection_error_naming_the_line(project: pytest.Pytester) -> None:
    broken = CASES.replace("expect: {allowed: true}", "expect: {allowed: sure}", 1)
    write(project, "gpu/team.suite.yaml", suite_text("seed003-l20-t4", broken, name="team"))
    result = project.runpytest(*PLUGIN, "--gpu-policy-suites")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*team.suite.yaml:9: case 'one-shared-gpu': allowed must be true or false, not 'sure'*"]
    )


def test_golden_updates_through_pytest(project: pytest.Pytester) -> None:
    cases = f"""\
    - name: l20
      object: {MANIFESTS / "pod-annotation-product-l20.yaml"}
      expect: {{golden: golden/l20.yaml}}
    """
    write(project, "gpu/golden.suite.yaml", suite_text("seed003-l20-t4", cases, name="g"))
    project.runpytest(*PLUGIN, "gpu/golden.suite.yaml").assert_outcomes(failed=1)
    project.runpytest(
        *PLUGIN, "gpu/golden.suite.yaml", "--gpu-policy-update-golden"
    ).assert_outcomes(passed=1)
    assert "NVIDIA-L20-SHARED" in (project.path / "gpu" / "golden" / "l20.yaml").read_text()
    project.runpytest(*PLUGIN, "gpu/golden.suite.yaml").assert_outcomes(passed=1)
