"""The server: the Flask app, its settings and state, and the gunicorn config that serves it.

``create_app(settings)`` serves /mutate, /validate, /healthz, /readyz and /metrics; gunicorn
runs ``WSGI_APP`` with the config ``GUNICORN_CONFIG`` (what ``gpu-policy serve`` execs).

Importing this package imports neither flask nor prometheus_client: ``create_app`` is loaded
on first use, so ``gpu-policy serve`` can read ``Settings`` before it starts gunicorn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from webhook.server.settings import CertManagerSettings, Settings

if TYPE_CHECKING:
    from webhook.server.app import create_app

__all__ = ["GUNICORN_CONFIG", "WSGI_APP", "CertManagerSettings", "Settings", "create_app"]

# What gunicorn is started with: ``gunicorn -c GUNICORN_CONFIG WSGI_APP``.
GUNICORN_CONFIG = "python:webhook.server.gunicorn_conf"
WSGI_APP = "webhook.server.wsgi:app"


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from webhook.server.app import create_app

        return create_app
    raise AttributeError(name)
