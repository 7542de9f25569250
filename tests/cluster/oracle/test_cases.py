"""The cases of issue 28, each a scenario folder under ``cases/``, judged by the engine and by
kube-scheduler on the session's control plane (docs/oracle.md).

The expected verdict is what the scheduler does with the pod (bound, or left Unschedulable),
learnt on the control plane at each run, never written down: a case fails when the engine's
verdict differs, with the folder that replays it and the scheduler's message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.oracle.runner import AGREE, Outcome, Runner
from tests.core.oracle.world import read_scenario
from tests.support.controlplane import ControlPlane

CASES = Path(__file__).parent / "cases"
NAMES = sorted(p.name for p in CASES.iterdir() if (p / "pod.yaml").is_file())


@pytest.fixture(scope="module")
def outcomes(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    """Every case run once, together (a case that names a cluster-wide extended resource
    runs alone)."""
    out = tmp_path_factory.mktemp("oracle-cases")
    found = Runner(control_plane, out).run([read_scenario(CASES / n) for n in NAMES])
    return dict(zip(NAMES, found, strict=True))


@pytest.mark.parametrize("case", NAMES)
def test_the_engine_judges_the_case_as_the_scheduler_does(
    case: str, outcomes: dict[str, Outcome]
) -> None:
    o = outcomes[case]
    engine = "allowed" if o.engine.allowed else "denied"
    assert o.kind == AGREE, (
        f"{case}: the engine {engine} it ({'; '.join(o.engine.reasons) or o.engine.error}), "
        f"the scheduler: {o.scheduler_message}; replay in {o.folder}"
    )
