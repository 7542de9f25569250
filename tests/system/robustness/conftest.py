"""Fixtures and the run summary of the robustness tests.

The tests here start the webhook as it runs in a cluster (gunicorn with
``webhook.server.gunicorn_conf`` over real TLS) and feed it bad input and faults. The helpers are
in ``robust_server.py`` beside this file; the AdmissionReview builders come from
tests/objects/reviews.py, the control plane and the gunicorn launcher from tests/support.
"""

from __future__ import annotations

import pytest

from tests.support.workers import add_lines
from tests.system.robustness import robust_server


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Say how many inputs the fuzz tests sent to the real server, and what came back."""
    tally = robust_server.FUZZ_TALLY
    if not tally:
        return
    total = sum(tally.values())
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(tally.items()))
    line = f"{total} fuzz inputs sent to gunicorn over TLS; answers {statuses}"
    add_lines(session.config, "robustness", [line])
