"""Build the ``kubernetes`` API client the watchers use."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from kubernetes import client, config
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

__all__ = ["load_client"]

log = logging.getLogger(__name__)


def load_client(
    kube: str,
    *,
    token_file: str = SERVICE_TOKEN_FILENAME,
    ca_file: str = SERVICE_CERT_FILENAME,
    environ: Mapping[str, str] | None = None,
) -> client.ApiClient:
    """Return an ``ApiClient`` for ``kube``: ``"in-cluster"`` or the path of a kubeconfig.

    In-cluster uses the pod's service account (token re-read as it rotates): the API server
    from ``KUBERNETES_SERVICE_HOST``/``_PORT`` of ``environ`` (default: the process's), the
    token and CA the kubelet mounts (``token_file``, ``ca_file``). A kubeconfig
    path uses its current context and is never written back (``persist_config=False``: the
    container's file system is read-only, and a refreshed token must not rewrite a user's
    file). TCP keepalive is switched on so that a watch on a connection that silently died
    (a NAT or load balancer forgot it) fails within minutes instead of hanging until the
    read timeout. Raises ``kubernetes.config.ConfigException`` or ``OSError`` when the
    configuration cannot be loaded: fail at start, not at the first request.
    """
    configuration = client.Configuration()
    configuration.keep_alive = True
    if kube == "in-cluster":
        # The loaders are untyped upstream.
        InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=token_file,
            cert_filename=ca_file,
            environ=os.environ if environ is None else environ,
        ).load_and_set(client_configuration=configuration)
        where = "in-cluster service account"
    else:
        path = os.path.expanduser(kube)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"kubeconfig not found: {path}")
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, client_configuration=configuration, persist_config=False
        )
        where = path
    log.info("Kubernetes API at %s (%s)", configuration.host, where)
    return client.ApiClient(configuration)
