"""The Flask app through its test client: every route, every bad input, metrics, logs, reload."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY

from tests.objects import IGNORED_STRATEGY, load, pod_spec, review, with_gpu, workload
from tests.support.paths import REPO
from webhook.admission import handler as handler_module
from webhook.contract import EXAMPLE_POLICY
from webhook.server import Settings, create_app, metrics
from webhook.server import app as app_module

JSON = "application/json"
EXAMPLE_TEXT = (REPO / "webhook" / "data" / EXAMPLE_POLICY).read_text()


def sample(name: str, **labels: str) -> float:
    metrics.flush()  # reviews are tallied, and reach the registry in batches
    return REGISTRY.get_sample_value(name, labels) or 0.0


def post(client: FlaskClient, path: str, doc: Any, **kwargs: Any) -> Any:
    return client.post(path, data=json.dumps(doc), content_type=JSON, **kwargs)


def assert_one_line_text(resp: Any) -> str:
    assert resp.content_type.startswith("text/plain")
    text = resp.get_data(as_text=True)
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert "Traceback" not in text and "<html" not in text.lower()
    return text


# --------------------------------------------------------------------------------------------
# Reviews
# --------------------------------------------------------------------------------------------


def test_mutate_answers_a_gpu_pod_with_a_patch(client: FlaskClient) -> None:
    doc = with_gpu(load("v1.36.2", "mutate", "pod-create"), 1)
    before = sample("gpu_policy_reviews_total", endpoint="mutate", decision="allowed")
    patches = sample("gpu_policy_patches_total", endpoint="mutate")
    resp = post(client, "/mutate?timeout=10s", doc)
    assert resp.status_code == 200 and resp.content_type == JSON
    answer = resp.get_json()
    assert answer["response"]["uid"] == doc["request"]["uid"]
    assert answer["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {k: ops[0][k] for k in ("op", "path")} == {"op": "add", "path": "/metadata/annotations"}
    assert sample("gpu_policy_reviews_total", endpoint="mutate", decision="allowed") == before + 1
    assert sample("gpu_policy_patches_total", endpoint="mutate") == patches + 1


def test_validate_denies_and_counts_the_rule(client: FlaskClient) -> None:
    doc = with_gpu(load("v1.28.7", "validate", "pod-create"), 2)
    denied = sample("gpu_policy_reviews_total", endpoint="validate", decision="denied")
    timed = sample("gpu_policy_review_duration_seconds_count", endpoint="validate")
    rule = sample(
        "gpu_policy_rule_results_total",
        endpoint="validate",
        rule="gpu-shared-request-above-one",
        status="fail",
    )
    resp = post(client, "/validate", doc)
    assert resp.status_code == 200
    response = resp.get_json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "patch" not in response
    assert sample("gpu_policy_reviews_total", endpoint="validate", decision="denied") == denied + 1
    assert (
        sample(
            "gpu_policy_rule_results_total",
            endpoint="validate",
            rule="gpu-shared-request-above-one",
            status="fail",
        )
        == rule + 1
    )
    assert sample("gpu_policy_review_duration_seconds_count", endpoint="validate") == timed + 1


def test_deployment_asking_for_two_gpus_is_denied(client: FlaskClient) -> None:
    doc = review(workload("Deployment", spec=pod_spec(2)))
    response = post(client, "/validate", doc).get_json()["response"]
    assert response["allowed"] is False
    assert "[gpu-shared-request-above-one]" in response["status"]["message"]


@pytest.mark.parametrize(
    "content_type", [JSON, "application/json; charset=utf-8", "Application/JSON"]
)
def test_json_content_types_are_accepted(client: FlaskClient, content_type: str) -> None:
    doc = load("v1.36.2", "mutate", "pod-create")
    resp = client.post("/mutate", data=json.dumps(doc), content_type=content_type)
    assert resp.status_code == 200


def test_one_log_line_per_review_without_the_object(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    doc = with_gpu(load("v1.36.2", "validate", "pod-dryrun-create"), 2)
    with caplog.at_level(logging.INFO, logger="webhook.server.app"):
        post(client, "/validate", doc)
    lines = [r.getMessage() for r in caplog.records if r.name == "webhook.server.app"]
    assert len(lines) == 1
    line = lines[0]
    for part in (
        f"uid={doc['request']['uid']}",
        "endpoint=validate",
        "kind=Pod",
        "namespace=probe",
        "name=probe-ok",
        "operation=CREATE",
        "dryRun=true",
        "decision=denied",
        "failed=gpu-shared-request-above-one",
    ):
        assert part in line, (part, line)
    assert re.search(r" ms=\d+\.\d\d", line)
    assert "registry.example" not in line and "volumes" not in line


def test_skipped_review_logs_why(client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    doc = load("v1.36.2", "mutate", "pod-dryrun-ssa-update")
    with caplog.at_level(logging.INFO, logger="webhook.server.app"):
        post(client, "/mutate", doc)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "webhook.server.app"]
    assert 'skipped="pod UPDATE: pods are mutated on CREATE only"' in line


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_engine_bug_is_a_500_with_an_admission_review_logged_and_counted(
    client: FlaskClient,
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(handler_module, "review", broken)
    errors = sample("gpu_policy_engine_errors_total", endpoint=endpoint)
    doc = with_gpu(load("v1.36.2", endpoint, "pod-create"), 1)
    with caplog.at_level(logging.INFO, logger="webhook.server.app"):
        resp = post(client, f"/{endpoint}", doc)
    assert resp.status_code == 500 and resp.content_type == JSON
    response = resp.get_json()["response"]
    assert response["uid"] == doc["request"]["uid"]
    assert response["allowed"] is False and response["status"]["code"] == 500
    assert sample("gpu_policy_engine_errors_total", endpoint=endpoint) == errors + 1
    errors_logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors_logged) == 1 and errors_logged[0].exc_info is not None
    assert "ZeroDivisionError" in caplog.text and "decision=error" in caplog.text


def test_bug_in_the_web_layer_is_a_one_line_500(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("web bug")

    monkeypatch.setattr(app_module, "reply", broken)
    resp = post(client, "/mutate", load("v1.36.2", "mutate", "pod-create"))
    assert resp.status_code == 500
    assert assert_one_line_text(resp) == "internal error (RuntimeError)\n"


# --------------------------------------------------------------------------------------------
# Bad requests
# --------------------------------------------------------------------------------------------

BAD_BODIES = [
    ("not-json", b"{", "not-json"),
    ("array", b"[]", "not-admission-review"),
    (
        "v1beta1",
        json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
        "wrong-api-version",
    ),
    (
        "no-request",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
        "no-request",
    ),
    ("empty", b"", "not-json"),
]


@pytest.mark.parametrize(
    ("body", "reason"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES]
)
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_bad_body_is_a_400(client: FlaskClient, path: str, body: bytes, reason: str) -> None:
    before = sample("gpu_policy_bad_requests_total", reason=reason)
    resp = client.post(path, data=body, content_type=JSON)
    assert resp.status_code == 400
    assert_one_line_text(resp)
    assert sample("gpu_policy_bad_requests_total", reason=reason) == before + 1


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/yaml",
        "application/jsonx",
        "multipart/form-data; boundary=x",
    ],
)
def test_other_content_types_are_a_415(client: FlaskClient, content_type: str | None) -> None:
    before = sample("gpu_policy_bad_requests_total", reason="unsupported-media-type")
    doc = json.dumps(load("v1.36.2", "mutate", "pod-create"))
    resp = client.post("/mutate", data=doc, content_type=content_type)
    assert resp.status_code == 415
    assert "Content-Type must be application/json" in assert_one_line_text(resp)
    assert sample("gpu_policy_bad_requests_total", reason="unsupported-media-type") == before + 1


def test_body_over_the_limit_is_a_413(client: FlaskClient) -> None:
    before = sample("gpu_policy_bad_requests_total", reason="too-large")
    resp = client.post("/validate", data=b" " * (7 * 1024 * 1024 + 1), content_type=JSON)
    assert resp.status_code == 413
    assert "over the limit of 7340032 bytes" in assert_one_line_text(resp)
    assert sample("gpu_policy_bad_requests_total", reason="too-large") == before + 1


def test_streamed_body_over_the_limit_is_a_413() -> None:
    # Chunked upload, no Content-Length: the limit applies while reading (gunicorn sets
    # wsgi.input_terminated for such bodies, as here).
    app = create_app(Settings(max_body_bytes=1000))
    doc = json.dumps(load("v1.36.2", "mutate", "pod-create")).encode()
    environ = {"wsgi.input_terminated": True}
    resp = app.test_client().post(
        "/mutate",
        input_stream=io.BytesIO(doc),
        content_type=JSON,
        environ_base=environ,
        headers={"Transfer-Encoding": "chunked"},
    )
    assert resp.status_code == 413, resp.data
    assert_one_line_text(resp)
    small = app.test_client().post(
        "/mutate",
        input_stream=io.BytesIO(b"[]"),
        content_type=JSON,
        environ_base=environ,
        headers={"Transfer-Encoding": "chunked"},
    )
    assert small.status_code == 400  # read whole, then judged


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/mutate", "POST"),
        ("PUT", "/validate", "POST"),
        ("DELETE", "/mutate", "POST"),
        ("POST", "/healthz", "GET"),
        ("POST", "/readyz", "GET"),
        ("PATCH", "/metrics", "GET"),
    ],
)
def test_wrong_method_is_a_405(client: FlaskClient, method: str, path: str, allowed: str) -> None:
    resp = client.open(path, method=method, data=b"{}", content_type=JSON)
    assert resp.status_code == 405
    text = assert_one_line_text(resp)
    assert f"method {method} is not allowed on {path}; use {allowed}" in text
    assert allowed in resp.headers["Allow"]


@pytest.mark.parametrize("path", ["/", "/mutate/", "/validating", "/MUTATE", "/metrics/x", "/%00"])
def test_unknown_path_is_a_404(client: FlaskClient, path: str) -> None:
    before = sample("gpu_policy_bad_requests_total", reason="not-found")
    resp = client.post(path, data=b"{}", content_type=JSON)
    assert resp.status_code == 404
    assert "paths: /mutate, /validate" in assert_one_line_text(resp)
    assert sample("gpu_policy_bad_requests_total", reason="not-found") == before + 1


# --------------------------------------------------------------------------------------------
# Probes and metrics
# --------------------------------------------------------------------------------------------


def test_healthz(client: FlaskClient) -> None:
    resp = client.get("/healthz")
    assert resp.status_code == 200 and assert_one_line_text(resp) == "ok\n"
    assert client.head("/healthz").status_code == 200


def test_readyz_without_tls(client: FlaskClient) -> None:
    resp = client.get("/readyz")
    assert resp.status_code == 200
    text = assert_one_line_text(resp)
    assert text.startswith("ready: policy example from <bundled example-policy.yaml>")
    assert "TLS not served by this process" in text


@pytest.mark.parametrize(
    ("valid", "code", "reason"),
    [
        (True, 200, "certificate valid until 2027-11-22 03:00:00+00:00"),
        (False, 503, "certificate expired at 2026-11-21 03:00:00+00:00"),
    ],
)
def test_readyz_reports_the_served_certificate(valid: bool, code: int, reason: str) -> None:
    # What webhook.server.wsgi passes: the serving context's check (ReloadingSSLContext.ready).
    app = create_app(Settings(), ready_checks=[lambda: (valid, reason)])
    resp = app.test_client().get("/readyz")
    assert resp.status_code == code
    text = assert_one_line_text(resp)
    assert reason in text
    assert text.startswith("ready: " if valid else "not ready: ")


def test_readyz_runs_extra_checks() -> None:
    app = create_app(Settings(), ready_checks=[lambda: (False, "cluster snapshot 900 s old")])
    resp = app.test_client().get("/readyz")
    assert resp.status_code == 503
    assert "cluster snapshot 900 s old" in resp.get_data(as_text=True)


def test_metrics(client: FlaskClient) -> None:
    post(client, "/mutate", load("v1.36.2", "mutate", "pod-create"))
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.content_type.startswith("text/plain; version=")
    text = resp.get_data(as_text=True)
    for name in (
        "gpu_policy_reviews_total",
        "gpu_policy_rule_results_total",
        "gpu_policy_review_duration_seconds_bucket",
        "gpu_policy_bad_requests_total",
        "gpu_policy_policy_reloads_total",
        "gpu_policy_engine_errors_total",
        "gpu_policy_patches_total",
    ):
        assert name in text, name
    assert 'gpu_policy_review_duration_seconds_bucket{endpoint="mutate",le="0.0001"}' in text


def test_app_exposes_its_state(app: Flask) -> None:
    hook = app.extensions["gpu_policy"]
    assert hook.state.snapshot.policy.name == "example"
    assert hook.settings == Settings()


# --------------------------------------------------------------------------------------------
# Policy reloads
# --------------------------------------------------------------------------------------------


def test_policy_file_changes_are_picked_up_and_bad_files_keep_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(EXAMPLE_TEXT)
    app = create_app(Settings(policy_file=policy_file, reload_interval=0))
    client = app.test_client()
    doc = with_gpu(load("v1.36.2", "validate", "pod-create"), 2)

    def allowed() -> bool:
        return bool(post(client, "/validate", doc).get_json()["response"]["allowed"])

    assert not allowed()
    ok = sample("gpu_policy_policy_reloads_total", result="success")
    failed = sample("gpu_policy_policy_reloads_total", result="failure")

    # A good change: enforcement warn allows the pod.
    policy_file.write_text(EXAMPLE_TEXT.replace("enforcement: enforce", "enforcement: warn"))
    os.utime(policy_file, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert allowed()
    assert sample("gpu_policy_policy_reloads_total", result="success") == ok + 1
    assert app.extensions["gpu_policy"].state.snapshot.generation == 2

    # A bad change: the last good policy stays, the failure is logged and counted once.
    with caplog.at_level(logging.ERROR, logger="webhook.server.state"):
        policy_file.write_text(EXAMPLE_TEXT.replace("enforcement: enforce", "enforcement: loud"))
        assert allowed()
        assert allowed()
    assert sample("gpu_policy_policy_reloads_total", result="failure") == failed + 1
    (record,) = caplog.records
    assert str(policy_file) in record.getMessage() and "enforcement" in record.getMessage()
    assert "still serving policy" in record.getMessage()
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert "last policy reload failed" in ready.get_data(as_text=True)

    # Fixed again: picked up.
    policy_file.write_text(EXAMPLE_TEXT)
    assert not allowed()
    assert app.extensions["gpu_policy"].state.last_error is None


def test_reload_checks_files_at_most_once_per_interval(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(EXAMPLE_TEXT)
    app = create_app(Settings(policy_file=policy_file, reload_interval=3600))
    state = app.extensions["gpu_policy"].state
    policy_file.write_text(EXAMPLE_TEXT.replace("enforcement: enforce", "enforcement: warn"))
    assert state.maybe_reload() is False
    assert state.snapshot.policy.enforcement == "enforce"
    assert state.maybe_reload(force=True) is True
    assert state.snapshot.policy.enforcement == "warn"


def test_removed_policy_file_keeps_the_last_good(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(EXAMPLE_TEXT)
    app = create_app(Settings(policy_file=policy_file, reload_interval=0))
    policy_file.unlink()
    state = app.extensions["gpu_policy"].state
    assert state.maybe_reload() is False
    assert state.last_error and "cannot read" in state.last_error
    assert state.snapshot.generation == 1


def test_bad_policy_at_start_raises(tmp_path: Path) -> None:
    from webhook.policy import PolicyError

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("spec: [")
    with pytest.raises(PolicyError, match=r"policy\.yaml"):
        create_app(Settings(policy_file=policy_file))


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


def test_settings_from_env() -> None:
    settings = Settings.from_env(
        {
            "GPU_POLICY_FILE": "/etc/gpu-policy/policy/policy.yaml",
            "GPU_POLICY_NODES": "nodes.yaml",
            "GPU_POLICY_KUBE": "in-cluster",
            "GPU_POLICY_LOG_LEVEL": "DEBUG",
        }
    )
    assert settings.policy_file == Path("/etc/gpu-policy/policy/policy.yaml")
    assert settings.nodes_file == Path("nodes.yaml")
    assert settings.kube == "in-cluster" and settings.watches_cluster
    assert settings.log_level == "debug"
    assert Settings.from_env({}) == Settings()
    assert not Settings.from_env({"GPU_POLICY_FILE": " "}).policy_file


def test_settings_reject_a_bad_log_level() -> None:
    with pytest.raises(ValueError, match="GPU_POLICY_LOG_LEVEL='loud'"):
        Settings.from_env({"GPU_POLICY_LOG_LEVEL": "loud"})


def test_plugin_warnings_are_logged_at_load_and_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What the device plugin would silently ignore is logged, one line each, on every load."""
    policy_file = tmp_path / "plugin.yaml"
    policy_file.write_text(IGNORED_STRATEGY.replace("strategy: balanced\n    ", ""))

    def logged() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "webhook.server.state" and r.levelno == logging.WARNING
        ]

    with caplog.at_level(logging.WARNING, logger="webhook.server.state"):
        app = create_app(Settings(policy_file=policy_file, reload_interval=3600))
        assert logged() == []  # a clean config says nothing
        policy_file.write_text(IGNORED_STRATEGY)
        assert app.extensions["gpu_policy"].state.maybe_reload(force=True) is True
    (line,) = logged()
    assert line.startswith(f"device-plugin config: {policy_file}: sharing.timeSlicing.strategy:")
    assert "\n" not in line
