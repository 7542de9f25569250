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

Reviews are counted in batches. In multiprocess mode every increment of a prometheus_client value
takes a lock, checks the pid and writes the file: four times per review, ~13 of the ~250 us a
review took in process (py-spy). :func:`record_review` only adds to this process's tally (counters
summed, latencies listed); the tally goes into the Prometheus values at least every
``FLUSH_SECONDS`` (a daemon thread), before this process answers ``/metrics``, and at exit. So a
scrape sees another worker's reviews at most a second late, and a worker killed with SIGKILL loses
at most a second of counts.
"""

from __future__ import annotations

import atexit
import glob
import logging
import os
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from webhook.admission import ENDPOINTS, Outcome
from webhook.contract import METRICS_DIR_ENV
from webhook.policy import RULES

if TYPE_CHECKING:
    from webhook.kube import Health

logger = logging.getLogger(__name__)

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
    return os.environ.get(METRICS_DIR_ENV) or None


FLUSH_SECONDS = 1.0


class _Pending:
    """This process's reviews not yet in the Prometheus values (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.flushing = threading.Lock()
        self.counts: Tally[Counter] = Tally()  # a counter's child -> increments
        self.latencies: dict[Histogram, list[float]] = {}  # a histogram's child -> seconds
        self.started = False  # this process's flusher thread runs
        # A forked child has no flusher (threads do not survive fork), and what the parent
        # tallied is the parent's to flush.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self.lock = threading.Lock()
        self.flushing = threading.Lock()
        self.counts = Tally()
        self.latencies = {}
        self.started = False

    def add(self, counters: list[Counter], latency: Histogram, seconds: float) -> None:
        """Tally one review."""
        with self.lock:
            counts = self.counts
            for counter in counters:
                counts[counter] += 1
            observed = self.latencies.get(latency)
            if observed is None:
                self.latencies[latency] = [seconds]
            else:
                observed.append(seconds)
        if not self.started:
            self._start_flusher()

    def flush(self) -> None:
        """Move the tally into the Prometheus values.

        ``flushing`` is held from the swap to the last write, so a flush that returns (before
        /metrics, at exit) has seen every review tallied before it, even one that another
        thread's flush had swapped out. Requests only take ``lock``, which is held briefly.
        """
        with self.flushing:
            with self.lock:
                counts, self.counts = self.counts, Tally()
                latencies, self.latencies = self.latencies, {}
            for counter, amount in counts.items():
                counter.inc(amount)
            for histogram, observed in latencies.items():
                for seconds in observed:
                    histogram.observe(seconds)

    def _start_flusher(self) -> None:
        with self.lock:
            if self.started:
                return
            self.started = True
        threading.Thread(target=self._flush_loop, name="metrics-flush", daemon=True).start()
        atexit.register(self.flush)

    def _flush_loop(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            try:
                self.flush()
            except Exception:  # a write that failed (full disk): say so, keep flushing
                logger.exception("could not write the review metrics; retrying in a second")


_pending = _Pending()


def record_review(outcome: Outcome, seconds: float) -> None:
    """Count one answered review and its latency (into this process's tally)."""
    endpoint = outcome.endpoint
    counters = [_reviews[endpoint, outcome.verdict]]
    if outcome.patched:
        counters.append(_patches[endpoint])
    if outcome.error is not None:
        counters.append(_engine_errors[endpoint])
    for rule in outcome.failed:
        counters.append(_rule_result(endpoint, rule, "fail"))
    for rule in outcome.warned:
        counters.append(_rule_result(endpoint, rule, "warn"))
    _pending.add(counters, _latency[endpoint], seconds)


def flush() -> None:
    """Put this process's tallied reviews into the Prometheus values now."""
    _pending.flush()


def _rule_label(rule: str) -> str:
    # Rule ids are a fixed set; anything else would be an engine change not yet listed.
    return rule if rule in RULES else "other"


# The children of RULE_RESULTS, each looked up once like the ones above, but on first use: a
# child made in advance would put a zero series per rule into /metrics.
_rule_results: dict[tuple[str, str, str], Counter] = {}


def _rule_result(endpoint: str, rule: str, status: str) -> Counter:
    key = (endpoint, _rule_label(rule), status)
    child = _rule_results.get(key)
    if child is None:
        # Two threads may both look it up: .labels() gives them the same child.
        child = _rule_results[key] = RULE_RESULTS.labels(*key)
    return child


def record_bad_request(reason: str) -> None:
    """Count one request answered 4xx; ``reason`` is a fixed token."""
    BAD_REQUESTS.labels(reason).inc()


def record_reload(ok: bool) -> None:
    """Count one policy reload attempt."""
    _reloads["success" if ok else "failure"].inc()


def exposition() -> tuple[bytes, str]:
    """The metrics text (all workers' in multiprocess mode) and its content type."""
    flush()
    path = multiprocess_dir()
    if path is not None:
        registry = CollectorRegistry()
        registry.register(_SharedFiles(path))
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class _SharedFiles(Collector):
    """Every worker's metrics files, as ``multiprocess.MultiProcessCollector`` reads them.

    Except the empty ones: a worker creates its file empty and sizes it a moment later, and
    one killed in that moment leaves it so for good. prometheus_client fails the whole scrape
    on such a file (prometheus/client_python#1199, open for 0.26); it holds no value yet.
    """

    def __init__(self, path: str) -> None:
        """Read the files in ``path``."""
        self.path = path

    def collect(self) -> Iterable[Metric]:
        """The merged metrics of the non-empty files."""
        from prometheus_client.multiprocess import MultiProcessCollector

        files = []
        for name in glob.glob(os.path.join(self.path, "*.db")):
            try:
                if os.path.getsize(name) > 0:
                    files.append(name)
            except FileNotFoundError:  # a dead worker's live gauges, removed since the glob
                continue
        # prometheus_client ships py.typed but leaves merge unannotated.
        merged: Iterable[Metric] = MultiProcessCollector.merge(  # type: ignore[no-untyped-call]
            files, accumulate=True
        )
        return merged


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

DRA_AVAILABLE = Gauge(
    "gpu_policy_dra_available",
    "1 when the worker reads DeviceClasses and ResourceSlices, 0 when DRA is not available "
    "(no resource.k8s.io/v1, as before Kubernetes 1.34, or not readable) or turned off.",
    multiprocess_mode="min",
)


class ClusterMetrics:
    """Turns a ClusterSource's health (running totals, data age) into these metrics."""

    def __init__(self) -> None:
        """Nothing counted yet."""
        self._seen = {"watch_restarts": 0, "api_errors": 0, "relists": 0}

    def update(self, health: Health, *, now: float, refused: bool) -> None:
        """Record one reading: ``now`` is the wall clock at the reading."""
        totals = {
            "watch_restarts": health.watch_restarts,
            "api_errors": health.errors,
            "relists": health.relists,
        }
        for event, total in totals.items():
            delta = total - self._seen[event]
            if delta > 0:
                CLUSTER_EVENTS.labels(event).inc(delta)
                self._seen[event] = total
        if health.sync_age_seconds is not None:
            CLUSTER_LAST_SYNC.set(now - health.sync_age_seconds)
        CLUSTER_REACHABLE.set(1.0 if health.api_reachable else 0.0)
        CONFIGMAP_REFUSED.set(1.0 if refused else 0.0)
        if health.dra is not None:
            DRA_AVAILABLE.set(1.0 if health.dra_available else 0.0)
