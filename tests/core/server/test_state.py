"""The last good policy files: kept by gunicorn's master, served by a worker started later."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import REPO
from webhook.policy import PolicyError
from webhook.server import Settings
from webhook.server.state import LastGoodFiles, PolicyState

EXAMPLE = REPO / "webhook" / "data" / "example-policy.yaml"
ENFORCE = EXAMPLE.read_text()
WARN = ENFORCE.replace("enforcement: enforce", "enforcement: warn")
GARBAGE = "{{{ not yaml"


def write(path: Path, text: str, stamp: int) -> None:
    """Replace the file and give it a distinct mtime: the watch compares stamps."""
    path.write_text(text)
    os.utime(path, (stamp, stamp))


def enforcement(state: PolicyState) -> str:
    """The enforcement of the policy the state serves now."""
    return state.snapshot.policy.enforcement


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    write(path, ENFORCE, 1_000)
    return path


def test_a_worker_started_while_the_file_is_bad_serves_the_last_good_texts(policy: Path) -> None:
    settings = Settings(policy_file=policy)
    kept = LastGoodFiles(settings)
    write(policy, GARBAGE, 2_000)
    reloads: list[bool] = []
    state = PolicyState(settings, on_reload=reloads.append, last_good=kept.texts)
    assert enforcement(state) == "enforce"
    assert state.last_error is not None and "not valid YAML" in state.last_error
    assert reloads == [False]  # counted like a failed reload
    # The file is followed from there on.
    write(policy, WARN, 3_000)
    assert state.maybe_reload(force=True)
    assert enforcement(state) == "warn"
    assert state.last_error is None


def test_without_last_good_texts_a_bad_file_still_stops_the_worker(policy: Path) -> None:
    write(policy, GARBAGE, 2_000)
    settings = Settings(policy_file=policy)
    assert LastGoodFiles(settings).texts is None
    with pytest.raises(PolicyError, match="not valid YAML"):
        PolicyState(settings, last_good=None)


def test_the_master_keeps_the_newest_good_texts_and_never_a_bad_one(policy: Path) -> None:
    kept = LastGoodFiles(Settings(policy_file=policy))
    assert kept.texts == {policy: ENFORCE}
    assert not kept.check()  # unchanged
    write(policy, WARN, 2_000)
    assert kept.check()
    assert kept.texts == {policy: WARN}
    write(policy, GARBAGE, 3_000)
    assert not kept.check()
    assert kept.texts == {policy: WARN}
    # A file that parses but is not a valid policy is not kept either.
    write(policy, "apiVersion: gpu-policy.io/v1alpha1\nkind: Nope\n", 4_000)
    assert not kept.check()
    assert kept.texts == {policy: WARN}
