"""``gpu-policy serve``: flags to environment, the checks before gunicorn, the exec itself."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from webhook.certs import issue
from webhook.cli import serve
from webhook.cli.main import main


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    serve.add_parser(sub)
    return parser.parse_args(["serve", *argv])


def test_flags_override_the_environment() -> None:
    env = serve.server_env(
        args("--bind", "0.0.0.0:9443", "--policy", "p.yaml", "--workers", "3", "--threads", "8"),
        {"GPU_POLICY_BIND": "127.0.0.1:1", "GPU_POLICY_FILE": "old.yaml", "KEEP": "me"},
    )
    assert env["GPU_POLICY_BIND"] == "0.0.0.0:9443"
    assert env["GPU_POLICY_FILE"] == "p.yaml"
    assert env["GPU_POLICY_WORKERS"] == "3" and env["GPU_POLICY_THREADS"] == "8"
    assert env["KEEP"] == "me"


def test_dev_mode_defaults() -> None:
    env = serve.server_env(
        args("--dev"),
        {"GPU_POLICY_FILE": "prod.yaml", "GPU_POLICY_KUBE": "in-cluster", "GPU_POLICY_NODES": "n"},
    )
    assert "GPU_POLICY_FILE" not in env and "GPU_POLICY_NODES" not in env
    assert env["GPU_POLICY_KUBE"] == "off"
    assert env["GPU_POLICY_BIND"] == "127.0.0.1:8443"
    assert env["GPU_POLICY_TLS_DIR"] == "certs/dev"
    env = serve.server_env(args("--dev", "--cert-dir", "/tmp/c", "--policy", "mine.yaml"), {})
    assert env["GPU_POLICY_TLS_DIR"] == "/tmp/c" and env["GPU_POLICY_FILE"] == "mine.yaml"


def test_curl_command() -> None:
    env = {"GPU_POLICY_BIND": "127.0.0.1:8443", "GPU_POLICY_TLS_DIR": "certs/dev"}
    assert serve.curl_command(env) == (
        "curl --cacert certs/dev/ca.crt -H 'Content-Type: application/json' "
        "--data @examples/admissionreview-gpu-pod.json https://127.0.0.1:8443/mutate"
    )
    wildcard = serve.curl_command({"GPU_POLICY_BIND": "0.0.0.0:9443"}, "x.json", "validate")
    assert wildcard.endswith("--data @x.json https://127.0.0.1:9443/validate")


def test_gunicorn_is_the_one_beside_python() -> None:
    argv = serve.gunicorn_argv()
    assert argv[0] == str(Path(sys.executable).parent / "gunicorn")
    assert argv[1:] == ["-c", "python:webhook.server.gunicorn_conf", "webhook.server.wsgi:app"]


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str], dict[str, str]]]:
    calls: list[tuple[str, list[str], dict[str, str]]] = []

    def fake_exec(file: str, argv: list[str], env: dict[str, str]) -> None:
        calls.append((file, argv, env))

    monkeypatch.setattr(serve.os, "execvpe", fake_exec)
    return calls


def test_dev_run_prints_curl_and_execs_gunicorn(
    tmp_path: Path, execs: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    issue.write_certs(tmp_path)
    assert main(["serve", "--dev", "--cert-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"curl --cacert {tmp_path}/ca.crt" in out
    assert "https://127.0.0.1:8443/mutate" in out and "https://127.0.0.1:8443/validate" in out
    ((file, argv, env),) = execs
    assert file == argv[0] and argv[-1] == "webhook.server.wsgi:app"
    assert env["GPU_POLICY_TLS_DIR"] == str(tmp_path)
    assert env["GPU_POLICY_BIND"] == "127.0.0.1:8443"


def test_missing_certificates_stop_before_gunicorn(
    tmp_path: Path, execs: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--dev", "--cert-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no tls.crt or tls.key" in err and "gpu-policy certs --out" in err
    assert execs == []


def test_bad_policy_stops_before_gunicorn(
    tmp_path: Path, execs: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    issue.write_certs(tmp_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec: 3\n")
    assert main(["serve", "--cert-dir", str(tmp_path), "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-policy: {policy}") and err.count("\n") == 1
    assert execs == []


def test_bad_log_level_is_a_usage_error(
    tmp_path: Path,
    execs: list[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPU_POLICY_LOG_LEVEL", "chatty")
    assert main(["serve", "--cert-dir", str(tmp_path)]) == 2
    assert "GPU_POLICY_LOG_LEVEL='chatty'" in capsys.readouterr().err


def test_unusable_cluster_configuration_stops_before_gunicorn(
    tmp_path: Path,
    execs: list[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    issue.write_certs(tmp_path)
    monkeypatch.setenv("GPU_POLICY_KUBE", "in-cluster")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["serve", "--cert-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-policy: GPU_POLICY_KUBE=in-cluster: ") and err.count("\n") == 1
    assert execs == []
