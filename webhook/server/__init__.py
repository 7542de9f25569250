"""The Flask adapter: ``create_app(settings)`` serves /mutate, /validate, /healthz, /readyz and
/metrics; ``webhook.server.wsgi:app`` is what gunicorn runs (with ``webhook.server.gunicorn_conf``).

Importing this package imports neither flask nor prometheus_client: ``create_app`` is loaded
on first use, so ``gpu-policy serve`` can read ``Settings`` before it starts gunicorn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from webhook.server.settings import Settings

if TYPE_CHECKING:
    from webhook.server.app import create_app

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from webhook.server.app import create_app

        return create_app
    raise AttributeError(name)
