"""Prometheus metrics of the webhook, correct across gunicorn workers.

With ``PROMETHEUS_MULTIPROC_DIR`` set (``gpu-policy serve`` and the gunicorn config always set
it), prometheus_client keeps every value in a per-process file in that directory and
``/metrics`` sums the files of all workers, whichever worker answers the scrape. Without it
(tests, a single process) the default registry is used. prometheus_client chooses between the
two when it is first imported, so the variable must be set before that: the gunicorn config
does it before any worker imports the app.

Series (label values come from fixed sets, never from user input):

* ``gpu_policy_reviews_total{endpoint, decision}``: answered AdmissionReviews; decision is
  ``allowed``, ``denied`` or ``error`` (an engine bug).
* ``gpu_policy_rule_results_total{endpoint, rule, status}``: rules that failed or warned, one
  per rule per review (the stable rule ids of ``webhook.policy.RULES``).
* ``gpu_policy_patches_total{endpoint}``: mutating answers that carried a JSON Patch.
* ``gpu_policy_review_duration_seconds{endpoint}``: time to answer a review, from the body
  read to the serialized answer (buckets from 0.1 ms to 100 ms).
* ``gpu_policy_bad_requests_total{reason}``: requests answered 4xx (not JSON, wrong
  apiVersion, too large, wrong Content-Type, unknown path, ...).
* ``gpu_policy_policy_reloads_total{result}``: policy file reloads, ``success`` or ``failure``
  (counted by each worker).
* ``gpu_policy_engine_errors_total{endpoint}``: exceptions inside the engine (bugs).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from webhook.admission import ENDPOINTS, Outcome
from webhook.policy import RULES

# Sub-millisecond for a pod without a GPU, a few milliseconds for a large one; the API
# server's own webhook latency metric starts at 5 ms, these look finer.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
)
DECISIONS = ("allowed", "denied", "error")

REVIEWS = Counter(
    "gpu_policy_reviews_total",
    "AdmissionReviews answered, by endpoint and decision (allowed, denied, error).",
    ["endpoint", "decision"],
)
RULE_RESULTS = Counter(
    "gpu_policy_rule_results_total",
    "Rules that failed or warned in a review, by endpoint, rule id and status.",
    ["endpoint", "rule", "status"],
)
PATCHES = Counter(
    "gpu_policy_patches_total",
    "Mutating answers that carried a JSON Patch.",
    ["endpoint"],
)
LATENCY = Histogram(
    "gpu_policy_review_duration_seconds",
    "Time to answer an AdmissionReview, from the body read to the serialized answer.",
    ["endpoint"],
    buckets=LATENCY_BUCKETS,
)
BAD_REQUESTS = Counter(
    "gpu_policy_bad_requests_total",
    "Requests answered with HTTP 4xx, by reason.",
    ["reason"],
)
RELOADS = Counter(
    "gpu_policy_policy_reloads_total",
    "Policy file reloads by result (success, failure), counted by each worker.",
    ["result"],
)
ENGINE_ERRORS = Counter(
    "gpu_policy_engine_errors_total",
    "Exceptions inside the policy engine (bugs), by endpoint.",
    ["endpoint"],
)

# Label children looked up once: .labels() takes a lock and a dict lookup on every call.
_reviews = {(e, d): REVIEWS.labels(e, d) for e in ENDPOINTS for d in DECISIONS}
_latency = {e: LATENCY.labels(e) for e in ENDPOINTS}
_patches = {e: PATCHES.labels(e) for e in ENDPOINTS}
_engine_errors = {e: ENGINE_ERRORS.labels(e) for e in ENDPOINTS}
_reloads = {"success": RELOADS.labels("success"), "failure": RELOADS.labels("failure")}


def multiprocess_dir() -> str | None:
    """The shared metrics directory when running in multiprocess mode, else None."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def record_review(outcome: Outcome, seconds: float) -> None:
    """Count one answered review and its latency."""
    endpoint = outcome.endpoint
    _reviews[endpoint, outcome.verdict].inc()
    _latency[endpoint].observe(seconds)
    if outcome.patched:
        _patches[endpoint].inc()
    if outcome.error is not None:
        _engine_errors[endpoint].inc()
    for rule in outcome.failed:
        RULE_RESULTS.labels(endpoint, _rule_label(rule), "fail").inc()
    for rule in outcome.warned:
        RULE_RESULTS.labels(endpoint, _rule_label(rule), "warn").inc()


def _rule_label(rule: str) -> str:
    # Rule ids are a fixed set; anything else would be an engine change not yet listed.
    return rule if rule in RULES else "other"


def record_bad_request(reason: str) -> None:
    """Count one request answered 4xx; ``reason`` is a fixed token."""
    BAD_REQUESTS.labels(reason).inc()


def record_reload(ok: bool) -> None:
    """Count one policy reload attempt."""
    _reloads["success" if ok else "failure"].inc()


def exposition() -> tuple[bytes, str]:
    """The metrics text (all workers' in multiprocess mode) and its content type."""
    if multiprocess_dir() is not None:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        # prometheus_client ships py.typed but leaves this constructor unannotated.
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


# The cluster watch, per worker. Counters add up over the workers; the gauges keep the worst
# worker's value, which is the one to alert on.
CLUSTER_EVENTS = Counter(
    "gpu_policy_cluster_watch_events_total",
    "Cluster watch trouble by kind: watch_restarts, api_errors, relists.",
    ["event"],
)
CLUSTER_LAST_SYNC = Gauge(
    "gpu_policy_cluster_last_sync_timestamp_seconds",
    "Unix time the worker's cluster data was last known current (the oldest worker's); "
    "alert on time() minus this.",
    multiprocess_mode="min",
)
CLUSTER_REACHABLE = Gauge(
    "gpu_policy_cluster_api_reachable",
    "1 while every worker reaches the API server, 0 when one does not.",
    multiprocess_mode="min",
)
CONFIGMAP_REFUSED = Gauge(
    "gpu_policy_configmap_refused",
    "1 while a worker refuses the device-plugin ConfigMap (the last good configs are in force).",
    multiprocess_mode="max",
)
_EVENT_KEYS = {
    "watch_restarts": "watch_restarts_total",
    "api_errors": "api_errors_total",
    "relists": "relists_total",
}


class ClusterMetrics:
    """Turns a ClusterSource's running totals (``source.metrics()``) into these metrics."""

    def __init__(self) -> None:
        """Nothing counted yet."""
        self._seen = dict.fromkeys(_EVENT_KEYS, 0.0)

    def update(self, figures: dict[str, float], *, now: float, refused: bool) -> None:
        """Record one reading: ``now`` is the wall clock at the reading."""
        for event, key in _EVENT_KEYS.items():
            delta = figures.get(key, 0.0) - self._seen[event]
            if delta > 0:
                CLUSTER_EVENTS.labels(event).inc(delta)
                self._seen[event] += delta
        age = figures.get("sync_age_seconds", -1.0)
        if age >= 0:
            CLUSTER_LAST_SYNC.set(now - age)
        CLUSTER_REACHABLE.set(figures.get("api_reachable", 0.0))
        CONFIGMAP_REFUSED.set(1.0 if refused else 0.0)
