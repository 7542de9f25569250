"""The server's settings: one object, read from the environment variables of docs/contracts.md.

``gpu-policy serve`` reads it to check the settings before it starts gunicorn, the gunicorn
config reads it for the listen address, the workers and the TLS files, and every worker reads
it for the policy, the cluster and the log level. The names and defaults come from
``webhook.contract``. This module imports neither flask, gunicorn nor prometheus_client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from webhook.admission import MAX_BODY_BYTES
from webhook.contract import (
    BIND_ENV,
    CERT_INTERVAL_ENV,
    CERT_SECRET_ENV,
    CLIENT_CA_ENV,
    DEFAULT_BIND,
    DEFAULT_CERT_INTERVAL,
    DEFAULT_DRA,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_KUBE,
    DEFAULT_LOG_LEVEL,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_SHUTDOWN_DELAY,
    DEFAULT_THREADS,
    DEFAULT_TLS_DIR,
    DEFAULT_WORKERS,
    DRA_ENV,
    DRA_MODES,
    DRAIN_TIMEOUT_ENV,
    HANDSHAKE_TIMEOUT_ENV,
    KUBE_ENV,
    LOG_LEVEL_ENV,
    METRICS_DIR_ENV,
    MUTATING_WEBHOOK_ENV,
    NODES_ENV,
    POLICY_FILE_ENV,
    READ_TIMEOUT_ENV,
    SERVICE_ENV,
    SHUTDOWN_DELAY_ENV,
    THREADS_ENV,
    TLS_CERT_FILE,
    TLS_DIR_ENV,
    TLS_KEY_FILE,
    VALIDATING_WEBHOOK_ENV,
    WORKERS_ENV,
)

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True)
class Settings:
    """Everything the server is told, with the defaults of docs/contracts.md.

    ``policy_file`` None means the bundled example policy; ``nodes_file`` None means the
    inventory the policy's ``pools`` describe. ``kube`` is ``off``, ``in-cluster`` or a
    kubeconfig path; ``dra`` (``auto`` or ``off``) whether its DRA objects are read.
    ``reload_interval`` is how often (seconds, at most) the policy and node files are checked
    for changes. ``bind`` to ``metrics_dir`` are gunicorn's: the listen address, the
    processes and threads, the TLS files (``tls.crt`` and ``tls.key`` in ``tls_dir``), the CA
    client certificates must be signed by, and the directory the workers share their metrics
    in (None: the gunicorn config makes one private to this server; the image and the chart
    set one). ``handshake_timeout`` and ``read_timeout`` (seconds) bound a client's whole TLS
    handshake and the whole of one request's headers and body: a slower client is
    disconnected and its thread freed. ``shutdown_delay`` is how long the server keeps
    answering, unready, after SIGTERM, and ``drain_timeout`` how long the requests it then has
    may take (docs/server.md, "Stopping").
    """

    policy_file: Path | None = None
    nodes_file: Path | None = None
    kube: str = DEFAULT_KUBE
    dra: str = DEFAULT_DRA
    log_level: str = DEFAULT_LOG_LEVEL
    max_body_bytes: int = MAX_BODY_BYTES
    reload_interval: float = 1.0
    bind: str = DEFAULT_BIND
    workers: int = DEFAULT_WORKERS
    threads: int = DEFAULT_THREADS
    tls_dir: Path = field(default_factory=lambda: Path(DEFAULT_TLS_DIR))
    client_ca: Path | None = None
    metrics_dir: Path | None = None
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    shutdown_delay: float = DEFAULT_SHUTDOWN_DELAY
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``env`` (default ``os.environ``); ValueError names a bad variable."""
        env = os.environ if env is None else env

        def text(name: str) -> str:
            return env.get(name, "").strip()

        def path(name: str) -> Path | None:
            raw = text(name)
            return Path(raw) if raw else None

        def positive_int(name: str, default: int) -> int:
            raw = text(name) or str(default)
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r}: not an integer") from None
            if value < 1:
                raise ValueError(f"{name}={raw!r}: must be at least 1")
            return value

        def seconds(name: str, default: float, least: float = 0.1) -> float:
            raw = text(name) or str(default)
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r}: not a number of seconds") from None
            if not least <= value <= 300:
                raise ValueError(f"{name}={raw!r}: use {least:g} to 300 seconds")
            return value

        log_level = text(LOG_LEVEL_ENV).lower() or DEFAULT_LOG_LEVEL
        if log_level not in LOG_LEVELS:
            raise ValueError(f"{LOG_LEVEL_ENV}={log_level!r}: use one of {', '.join(LOG_LEVELS)}")
        dra = text(DRA_ENV).lower() or DEFAULT_DRA
        if dra not in DRA_MODES:
            raise ValueError(f"{DRA_ENV}={dra!r}: use one of {', '.join(DRA_MODES)}")
        return cls(
            policy_file=path(POLICY_FILE_ENV),
            nodes_file=path(NODES_ENV),
            kube=text(KUBE_ENV) or DEFAULT_KUBE,
            dra=dra,
            log_level=log_level,
            bind=text(BIND_ENV) or DEFAULT_BIND,
            workers=positive_int(WORKERS_ENV, DEFAULT_WORKERS),
            threads=positive_int(THREADS_ENV, DEFAULT_THREADS),
            tls_dir=path(TLS_DIR_ENV) or Path(DEFAULT_TLS_DIR),
            client_ca=path(CLIENT_CA_ENV),
            metrics_dir=path(METRICS_DIR_ENV),
            handshake_timeout=seconds(HANDSHAKE_TIMEOUT_ENV, DEFAULT_HANDSHAKE_TIMEOUT),
            read_timeout=seconds(READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT),
            shutdown_delay=seconds(SHUTDOWN_DELAY_ENV, DEFAULT_SHUTDOWN_DELAY, least=0),
            drain_timeout=seconds(DRAIN_TIMEOUT_ENV, DEFAULT_DRAIN_TIMEOUT, least=1),
        )

    @property
    def policy_files(self) -> tuple[Path, ...]:
        """The files the policy and the inventory are read from: those the settings name."""
        return tuple(p for p in (self.policy_file, self.nodes_file) if p is not None)

    @property
    def watches_cluster(self) -> bool:
        """True when ``GPU_POLICY_KUBE`` asks for the Nodes and ConfigMap to be watched."""
        return self.kube != DEFAULT_KUBE

    @property
    def cert_file(self) -> Path:
        """The serving certificate (tls.crt of the mounted Secret)."""
        return self.tls_dir / TLS_CERT_FILE

    @property
    def key_file(self) -> Path:
        """The serving key (tls.key of the mounted Secret)."""
        return self.tls_dir / TLS_KEY_FILE


def _ref(env: Mapping[str, str], name: str) -> tuple[str, str]:
    raw = env.get(name, "").strip()
    namespace, _, object_name = raw.partition("/")
    if not namespace or not object_name or "/" in object_name:
        raise ValueError(f"{name}={raw!r}: use namespace/name")
    return namespace, object_name


@dataclass(frozen=True)
class CertManagerSettings:
    """The environment of the self-managed certificate mode (docs/contracts.md).

    Apart from ``Settings`` because only the gunicorn master's certificate manager and the
    workers' ``/readyz`` read it, and because it is absent (None) unless the mode is on.
    """

    secret: tuple[str, str]
    service: tuple[str, str]
    mutating: str | None
    validating: str | None
    tls_dir: Path
    interval: float
    kube: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CertManagerSettings | None:
        """The settings, or None when ``GPU_POLICY_CERT_SECRET`` is unset (mode off).

        ``env`` defaults to ``os.environ``. ValueError names the variable that is wrong and
        what it should look like.
        """
        env = os.environ if env is None else env
        if not env.get(CERT_SECRET_ENV, "").strip():
            return None
        mutating = env.get(MUTATING_WEBHOOK_ENV, "").strip() or None
        validating = env.get(VALIDATING_WEBHOOK_ENV, "").strip() or None
        if mutating is None and validating is None:
            raise ValueError(
                f"{CERT_SECRET_ENV} is set but neither {MUTATING_WEBHOOK_ENV} nor "
                f"{VALIDATING_WEBHOOK_ENV} names a webhook configuration to publish the CA in"
            )
        raw = env.get(CERT_INTERVAL_ENV, "").strip() or str(DEFAULT_CERT_INTERVAL)
        try:
            interval = float(raw)
        except ValueError:
            raise ValueError(f"{CERT_INTERVAL_ENV}={raw!r}: not a number of seconds") from None
        if not 0 < interval <= 3600:
            raise ValueError(f"{CERT_INTERVAL_ENV}={raw!r}: use 1 to 3600 seconds")
        kube = env.get(KUBE_ENV, "").strip() or DEFAULT_KUBE
        return cls(
            secret=_ref(env, CERT_SECRET_ENV),
            service=_ref(env, SERVICE_ENV),
            mutating=mutating,
            validating=validating,
            tls_dir=Path(env.get(TLS_DIR_ENV, "").strip() or DEFAULT_TLS_DIR),
            interval=interval,
            # The manager talks to the cluster even when the server watches none: through the
            # kubeconfig GPU_POLICY_KUBE names, else the pod's service account.
            kube="in-cluster" if kube == DEFAULT_KUBE else kube,
        )
