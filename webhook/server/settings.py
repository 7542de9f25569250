"""The server's settings, read from the environment variables of docs/contracts.md.

Only what the Flask app needs lives here; the listen address, workers, threads and TLS files
are read by ``webhook/server/gunicorn_conf.py``. This module imports neither flask nor
prometheus_client, so ``gpu-policy serve`` can check the settings before it starts gunicorn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from webhook.admission import MAX_BODY_BYTES
from webhook.contract import (
    DEFAULT_KUBE,
    DEFAULT_LOG_LEVEL,
    KUBE_ENV,
    LOG_LEVEL_ENV,
    NODES_ENV,
    POLICY_FILE_ENV,
)

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True)
class Settings:
    """What ``create_app`` needs to know.

    ``policy_file`` None means the bundled example policy; ``nodes_file`` None means the
    inventory the policy's ``pools`` describe. ``kube`` is ``off``, ``in-cluster`` or a
    kubeconfig path. ``reload_interval`` is how often (seconds, at most) the policy and node
    files are checked for changes.
    """

    policy_file: Path | None = None
    nodes_file: Path | None = None
    kube: str = DEFAULT_KUBE
    log_level: str = DEFAULT_LOG_LEVEL
    max_body_bytes: int = MAX_BODY_BYTES
    reload_interval: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``env`` (default ``os.environ``); ValueError names a bad variable."""
        env = os.environ if env is None else env

        def path(name: str) -> Path | None:
            raw = env.get(name, "").strip()
            return Path(raw) if raw else None

        log_level = env.get(LOG_LEVEL_ENV, "").strip().lower() or DEFAULT_LOG_LEVEL
        if log_level not in LOG_LEVELS:
            raise ValueError(f"{LOG_LEVEL_ENV}={log_level!r}: use one of {', '.join(LOG_LEVELS)}")
        return cls(
            policy_file=path(POLICY_FILE_ENV),
            nodes_file=path(NODES_ENV),
            kube=env.get(KUBE_ENV, "").strip() or DEFAULT_KUBE,
            log_level=log_level,
        )

    @property
    def watches_cluster(self) -> bool:
        """True when ``GPU_POLICY_KUBE`` asks for the Nodes and ConfigMap to be watched."""
        return self.kube != DEFAULT_KUBE
