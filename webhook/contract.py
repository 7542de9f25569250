"""Names that the package, the chart, the image and the examples must agree on: one place.

Environment variables and their defaults, the annotations the webhook reads and writes, API
versions and kinds, the port and the HTTP paths. ``docs/contracts.md`` is the table a user
reads; this module is what the code reads. A change here is a change of the project's contract:
update the chart (``values.yaml``, templates), the Dockerfile and ``docs/contracts.md`` with it.

This module is a leaf: it imports nothing of the project, so the pure core may use it too.
"""

from __future__ import annotations

from typing import Final

# -- Environment variables read by `gpu-policy serve` and the gunicorn config ------------------
POLICY_FILE_ENV: Final = "GPU_POLICY_FILE"
NODES_ENV: Final = "GPU_POLICY_NODES"
KUBE_ENV: Final = "GPU_POLICY_KUBE"
# Whether the watched cluster's DRA objects are read: "auto" asks API discovery for
# resource.k8s.io/v1 (absent before 1.34: no DRA), "off" never reads them.
DRA_ENV: Final = "GPU_POLICY_DRA"
TLS_DIR_ENV: Final = "GPU_POLICY_TLS_DIR"
CLIENT_CA_ENV: Final = "GPU_POLICY_CLIENT_CA"
BIND_ENV: Final = "GPU_POLICY_BIND"
WORKERS_ENV: Final = "GPU_POLICY_WORKERS"
THREADS_ENV: Final = "GPU_POLICY_THREADS"
LOG_LEVEL_ENV: Final = "GPU_POLICY_LOG_LEVEL"
# Time limits for a client (webhook/certs/serving.py): the whole TLS handshake, and the whole
# of one request's headers and body, so a slow or silent client cannot hold a thread.
HANDSHAKE_TIMEOUT_ENV: Final = "GPU_POLICY_HANDSHAKE_TIMEOUT"
READ_TIMEOUT_ENV: Final = "GPU_POLICY_READ_TIMEOUT"
# Stopping (docs/server.md, "Stopping"): after SIGTERM the server is unready but keeps answering
# for SHUTDOWN_DELAY seconds (while endpoints drop the pod), then gives the requests it has up
# to DRAIN_TIMEOUT seconds to finish.
SHUTDOWN_DELAY_ENV: Final = "GPU_POLICY_SHUTDOWN_DELAY"
DRAIN_TIMEOUT_ENV: Final = "GPU_POLICY_DRAIN_TIMEOUT"
# The self-managed certificate mode (chart: certificates.mode=selfManaged); see
# webhook/certs/manager.py. Set CERT_SECRET_ENV to turn it on.
CERT_SECRET_ENV: Final = "GPU_POLICY_CERT_SECRET"  # noqa: S105 - a variable's name
SERVICE_ENV: Final = "GPU_POLICY_SERVICE"
MUTATING_WEBHOOK_ENV: Final = "GPU_POLICY_MUTATING_WEBHOOK"
VALIDATING_WEBHOOK_ENV: Final = "GPU_POLICY_VALIDATING_WEBHOOK"
CERT_INTERVAL_ENV: Final = "GPU_POLICY_CERT_INTERVAL"
# prometheus_client's own name for the directory its multiprocess mode shares between workers.
METRICS_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"

# -- Their defaults (the Dockerfile and the chart set the same values) --------------------------
PORT: Final = 8443
DEFAULT_BIND: Final = f"0.0.0.0:{PORT}"
DEFAULT_TLS_DIR: Final = "/etc/gpu-policy/tls"
DEFAULT_WORKERS: Final = 2
DEFAULT_THREADS: Final = 4
DEFAULT_LOG_LEVEL: Final = "info"
# Seconds. The API server sends a review (a few KB, at most 3 MiB) at once over the cluster
# network; a client still in its handshake or request after this is slow or hostile.
DEFAULT_HANDSHAKE_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 5.0
# Seconds. Outside Kubernetes nothing has to stop sending first: no delay. The chart sets 10 s
# (server.shutdownDelaySeconds), the time endpoints and the API server need to drop the pod.
DEFAULT_SHUTDOWN_DELAY: Final = 0.0
# Seconds for requests in flight after the delay; the API server waits at most 30 s for one.
DEFAULT_DRAIN_TIMEOUT: Final = 25.0
DEFAULT_KUBE: Final = "off"
DEFAULT_DRA: Final = "auto"
DRA_MODES: Final = ("auto", "off")
DEFAULT_CERT_INTERVAL: Final = 30
# The metrics directory's name: /tmp/gpu-policy-metrics in the image and the chart (an emptyDir).
METRICS_DIR_NAME: Final = "gpu-policy-metrics"

# `gpu-policy serve --dev` (what `make run` uses): loopback only, certificates from certs/dev.
DEV_BIND: Final = f"127.0.0.1:{PORT}"
DEV_CERT_DIR: Final = "certs/dev"

# -- Files ----------------------------------------------------------------------------------------
# The bundled example policy, a resource of the package `webhook.data`.
EXAMPLE_POLICY: Final = "example-policy.yaml"
# Where `gpu-policy plan` writes the device plugin's ConfigMap unless told (--configmap), and the
# namespace a ConfigMap document without one is taken to be in.
DEVICE_PLUGIN_CONFIGMAP: Final = ("kube-system", "time-slicing-config")
TLS_CERT_FILE: Final = "tls.crt"
TLS_KEY_FILE: Final = "tls.key"
CA_CERT_FILE: Final = "ca.crt"
# Keys of the self-managed mode's Secret besides tls.crt, tls.key and ca.crt (the CA that
# signed tls.crt): the CA's key, a CA being introduced, and CAs being retired (no keys).
CA_KEY_FILE: Final = "ca.key"
NEXT_CA_CERT_FILE: Final = "ca-next.crt"
NEXT_CA_KEY_FILE: Final = "ca-next.key"
PREVIOUS_CA_CERT_FILE: Final = "ca-previous.crt"

# -- HTTP paths -----------------------------------------------------------------------------------
MUTATE_PATH: Final = "/mutate"
VALIDATE_PATH: Final = "/validate"
HEALTHZ_PATH: Final = "/healthz"
READYZ_PATH: Final = "/readyz"
METRICS_PATH: Final = "/metrics"

# -- API versions and kinds -----------------------------------------------------------------------
# The project's own documents: SharingPolicy, Suite, Measurements.
GPU_POLICY_API_VERSION: Final = "gpu-policy.io/v1alpha1"
SHARING_POLICY_KIND: Final = "SharingPolicy"
SUITE_KIND: Final = "Suite"
MEASUREMENTS_KIND: Final = "Measurements"
# What the API server sends and expects back (admissionReviewVersions: [v1]).
ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
ADMISSION_REVIEW_KIND: Final = "AdmissionReview"
ADMISSION_OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")

# -- NVIDIA's container runtime (docs/isolation.md) -----------------------------------------------
# The variable that tells the NVIDIA container runtime which GPUs a container gets, and the
# values the webhook writes (void: no GPU and no driver, as runc) and accepts (none: no GPU).
VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
VISIBLE_DEVICES_VOID: Final = "void"
VISIBLE_DEVICES_NONE: Final = "none"

# -- Annotations and labels on Kubernetes objects -------------------------------------------------
SHARING_ANNOTATION: Final = "gpu-policy.io/sharing"
PRODUCT_ANNOTATION: Final = "gpu-policy.io/product"
MIG_ANNOTATION: Final = "gpu-policy.io/mig-profile"
# A pod annotated with this key set to ISOLATION_OPT_OUT_VALUE keeps what its containers would see
# without GPU isolation (docs/isolation.md); the webhook reports every such pod.
ISOLATION_OPT_OUT_ANNOTATION: Final = "gpu-policy.io/isolation"
ISOLATION_OPT_OUT_VALUE: Final = "disabled"
# Written by the webhook on the pods it changes: what it changed, in words.
MUTATIONS_ANNOTATION: Final = "gpu-policy.io/mutations"
# On the self-managed mode's Secret: since when every webhook configuration trusts the CA being
# introduced, and until when the retired CAs stay in the caBundle (RFC 3339, UTC).
NEXT_CA_TRUSTED_ANNOTATION: Final = "gpu-policy.io/ca-next-trusted-since"
PREVIOUS_CA_UNTIL_ANNOTATION: Final = "gpu-policy.io/ca-previous-until"
# A namespace with this label set to "disabled" opts out (the chart's namespaceSelector).
OPT_OUT_LABEL: Final = "gpu-policy.io/webhook"

# -- GPU budgets (docs/quota.md) ------------------------------------------------------------------
# The synthetic extended resource the webhook requests on a GPU pod under spec.quota.enabled:
# its cost in thousandths of a GPU-equivalent, which a ResourceQuota on
# requests.gpu-policy.io/gpu-milli turns into a namespace's budget.
QUOTA_RESOURCE: Final = "gpu-policy.io/gpu-milli"
# Thousandths per GPU-equivalent: a budget of 2 GPUs is a ResourceQuota of 2000.
QUOTA_MILLI: Final = 1000
# What every GPU node advertises of QUOTA_RESOURCE: never the scarce thing on a node (a thousand
# GPU-equivalents), so the scheduler never leaves a pod Pending for it.
QUOTA_NODE_CAPACITY: Final = 1_000_000
# On a pod the webhook charged: its cost as the webhook computed it, in words.
QUOTA_ANNOTATION: Final = "gpu-policy.io/quota"
