"""Fixtures for the web layer: an app on the bundled example policy, and its test client."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from webhook.server import Settings, create_app


@pytest.fixture
def app() -> Flask:
    return create_app(Settings())


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
