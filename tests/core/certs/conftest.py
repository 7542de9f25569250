"""Shared by the certificate tests: a CA made once per module."""

from __future__ import annotations

import pytest

from webhook.certs import issue


@pytest.fixture(scope="module")
def ca() -> tuple[bytes, bytes]:
    return issue.make_ca("test-ca", 30)
