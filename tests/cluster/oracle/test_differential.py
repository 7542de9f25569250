"""The engine against kube-scheduler on random scenarios (docs/oracle.md).

A fixed seed and count of scenarios from :mod:`tests.core.oracle.scenarios`, run at once on the
session's control plane (skipped without ``KUBEBUILDER_ASSETS``). Every scenario the engine
and the scheduler judge differently fails the test; the message names each scenario's folder
(``gpu-policy review --policy policy.yaml --nodes world.yaml pod.yaml`` replays it there) and
what the scheduler said. ``bench/oracle.py`` runs more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cluster.oracle.runner import AGREE, Runner, summary
from tests.core.oracle.scenarios import scenarios
from tests.support.controlplane import ControlPlane

SEED = int(os.environ.get("ORACLE_SEED", "28"))
COUNT = int(os.environ.get("ORACLE_COUNT", "100"))


@pytest.fixture
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where disagreements are written (kept by pytest for its last runs)."""
    return tmp_path_factory.mktemp("oracle")


def test_the_engine_agrees_with_the_scheduler_on_random_scenarios(
    control_plane: ControlPlane, out_dir: Path
) -> None:
    outcomes = Runner(control_plane, out_dir, batch_size=50).run(scenarios(SEED, COUNT))
    assert len(outcomes) == COUNT
    disagreements = [o for o in outcomes if o.kind != AGREE]
    if disagreements:
        pytest.fail(
            f"{len(disagreements)} of {COUNT} scenarios (seed {SEED}) judged otherwise than "
            f"kube-scheduler:\n{summary(outcomes)}",
            pytrace=False,
        )
