"""The policy and every file it names are read, watched and kept as one unit.

Whatever bytes land in any of them (control characters, deep nesting, huge integers, cut-off
text, random bytes), a worker keeps serving the last good unit, counts one failed reload per
change, says why in one line, and a worker started meanwhile serves what the master kept.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.paths import REPO
from webhook.policy import PolicyError
from webhook.server import Settings
from webhook.server.state import LastGoodFiles, PolicyState, load_snapshot

MPS = REPO / "examples" / "clusters" / "mps-l4"
CONFIG = "device-plugin-config.yaml"

# What the issue found to stop the server, and their neighbours.
BAD_TEXTS = {
    "NUL": "apiVersion: v1\x00\n",
    "ESC": "version: v1\x1b\n",
    "DEL": "version: v1\x7f\n",
    "BEL": "\x07",
    "deep nesting": "a: " + "[" * 900 + "]" * 900 + "\n",
    "deep mappings": "a: " + "{b: " * 900 + "1" + "}" * 900 + "\n",
    "huge integer": "a: " + "9" * 5000 + "\n",
    "garbage": "{{{ not yaml",
    "wrong shape": "- just\n- a list\n",
    "empty": "",
}


class Clock:
    """A clock the test moves: reloads are checked at most once per interval."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


_stamp = [10_000]


def write(path: Path, data: str | bytes) -> None:
    """Replace the file's content and give it a new mtime: the watch compares stamps."""
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    _stamp[0] += 10
    os.utime(path, (_stamp[0], _stamp[0]))


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """A copy of the mps-l4 example: policy.yaml names device-plugin-config.yaml."""
    target = tmp_path / "cluster"
    shutil.copytree(MPS, target)
    return target


def replicas(state: PolicyState) -> int:
    """The MPS replicas of the served policy (from the file policy.yaml names)."""
    config = state.snapshot.policy.configs["mps-4"]
    return next(iter(config.resources)).replicas


def with_replicas(n: int) -> str:
    return (MPS / CONFIG).read_text().replace("replicas: 4", f"replicas: {n}")


def test_an_edit_to_a_file_the_policy_names_is_reloaded(cluster: Path) -> None:
    reloads: list[bool] = []
    state = PolicyState(Settings(policy_file=cluster / "policy.yaml"), on_reload=reloads.append)
    assert replicas(state) == 4
    write(cluster / CONFIG, with_replicas(2))
    assert state.maybe_reload(force=True)
    assert replicas(state) == 2
    assert state.snapshot.generation == 2
    assert reloads == [True]


@pytest.mark.parametrize("which", ["policy.yaml", CONFIG])
@pytest.mark.parametrize("name", sorted(BAD_TEXTS))
def test_bad_bytes_in_any_file_keep_the_last_good_unit(
    cluster: Path, which: str, name: str
) -> None:
    reloads: list[bool] = []
    state = PolicyState(Settings(policy_file=cluster / "policy.yaml"), on_reload=reloads.append)
    write(cluster / which, BAD_TEXTS[name])
    assert not state.maybe_reload(force=True)
    assert replicas(state) == 4
    assert state.last_error is not None and "\n" not in state.last_error
    assert which in state.last_error
    assert not state.maybe_reload(force=True)  # counted and logged once per change
    assert reloads == [False]
    # Good again (the other file edited meanwhile is part of the unit: both are read again).
    write(cluster / "policy.yaml", (MPS / "policy.yaml").read_text())
    write(cluster / CONFIG, with_replicas(3))
    assert state.maybe_reload(force=True)
    assert replicas(state) == 3 and state.last_error is None


def test_a_file_the_policy_names_that_vanishes_keeps_the_last_good_unit(cluster: Path) -> None:
    state = PolicyState(Settings(policy_file=cluster / "policy.yaml"))
    (cluster / CONFIG).unlink()
    assert not state.maybe_reload(force=True)
    assert replicas(state) == 4
    assert state.last_error is not None and "cannot read" in state.last_error
    write(cluster / CONFIG, with_replicas(5))
    assert state.maybe_reload(force=True)
    assert replicas(state) == 5


@pytest.mark.parametrize("name", ["NUL", "deep nesting", "huge integer"])
def test_the_server_refuses_to_start_with_one_line(cluster: Path, name: str) -> None:
    write(cluster / CONFIG, BAD_TEXTS[name])
    with pytest.raises(PolicyError) as caught:
        load_snapshot(Settings(policy_file=cluster / "policy.yaml"))
    assert "\n" not in str(caught.value) and CONFIG in str(caught.value)


def test_a_worker_started_while_a_named_file_is_bad_serves_what_the_master_kept(
    cluster: Path,
) -> None:
    settings = Settings(policy_file=cluster / "policy.yaml")
    kept = LastGoodFiles(settings)
    write(cluster / CONFIG, with_replicas(2))
    assert kept.check()  # the master follows the named file too
    write(cluster / CONFIG, BAD_TEXTS["NUL"])
    assert not kept.check()
    reloads: list[bool] = []
    state = PolicyState(settings, on_reload=reloads.append, last_good=kept.texts)
    assert replicas(state) == 2  # the newest good unit, not the files of the start
    assert reloads == [False]
    write(cluster / CONFIG, with_replicas(6))
    assert state.maybe_reload(force=True)
    assert replicas(state) == 6


def test_the_masters_keeper_survives_what_a_check_raises(cluster: Path) -> None:
    settings = Settings(policy_file=cluster / "policy.yaml", reload_interval=0.01)
    said: list[str] = []
    kept = LastGoodFiles(settings, report=said.append)
    calls = [0]
    real_check = kept.check

    def failing_then_real() -> bool:
        calls[0] += 1
        if calls[0] == 1:
            raise MemoryError("a check that blew up")
        return real_check()

    kept.check = failing_then_real  # type: ignore[method-assign]
    stop = threading.Event()
    thread = kept.follow(stop)
    write(cluster / CONFIG, with_replicas(7))
    try:
        for _ in range(500):
            if kept.texts is not None and "replicas: 7" in kept.texts[cluster / CONFIG]:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join(5)
    assert said and "a check that blew up" in said[0]
    assert kept.texts is not None and "replicas: 7" in kept.texts[cluster / CONFIG]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    which=st.sampled_from(["policy.yaml", CONFIG]),
    data=st.one_of(
        st.binary(max_size=400),
        st.text(max_size=200),
        st.sampled_from(sorted(BAD_TEXTS.values())),
        st.integers(min_value=0, max_value=4000).map(lambda n: ("truncate", n)),
        st.integers(min_value=1, max_value=3000).map(lambda n: "x: " + "[" * n + "]" * n),
        st.integers(min_value=4000, max_value=6000).map(lambda n: "x: " + "7" * n),
    ),
)
def test_whatever_lands_in_a_file_a_worker_keeps_serving(
    cluster: Path, which: str, data: object
) -> None:
    """Random bytes, text, truncations at every length, deep nesting and huge integers in
    either file: the state never raises, serves a whole unit, and says why in one line."""
    good = {name: (MPS / name).read_text() for name in ("policy.yaml", CONFIG)}
    for name, text in good.items():
        write(cluster / name, text)
    settings_ = Settings(policy_file=cluster / "policy.yaml")
    state = PolicyState(settings_)
    kept = LastGoodFiles(settings_)
    if isinstance(data, tuple):
        data = good[which][: data[1]]
    assert isinstance(data, str | bytes)
    write(cluster / which, data)
    swapped = state.maybe_reload(force=True)
    kept.check()
    if swapped:
        # It loaded: then it is a whole policy (the file still made sense), served as such.
        assert state.last_error is None
    else:
        assert replicas(state) == 4
        if state.last_error is not None:
            assert "\n" not in state.last_error
    # A worker forked now starts, whatever the files hold.
    assert kept.texts is not None
    PolicyState(settings_, last_good=kept.texts)
