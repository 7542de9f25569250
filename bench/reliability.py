"""The four ways the webhook was found to stop answering, replayed while a client sends reviews.

Each row starts what it needs, runs a client that sends reviews (at most 50/s, kept-alive,
``bench/reviews.py``) through the whole scenario, and prints what the reviews got: answered,
5xx, without an answer (a connection refused, reset or timed out), latency p50/p99/worst.

1. ``bad-bytes``: the webhook (2 workers) on a copy of the bundled example policy. For each of
   a NUL, ESC, DEL and BEL byte, YAML nested 900 levels and an integer of 5,000 digits: the
   bytes go into the policy file, a worker is killed (SIGKILL) 2 s later, the good file comes
   back 2 s after that.
2. ``named-file``: the same on a copy of ``examples/clusters/mps-l4``, the bytes going into
   ``device-plugin-config.yaml``, the file ``policy.yaml`` names.
3. ``slow-8-headers`` / ``slow-8-hello``: eight connections sending their request headers or
   their TLS ClientHello one byte a second (``bench/slowloris.py`` has 32 and 128).
4. ``cert-replicas``: needs ``KUBEBUILDER_ASSETS`` (docs/testing-control-plane.md): a real
   control plane, two replicas in the self-managed certificate mode; the Secret is deleted and
   one replica restarted, twice. The client here is the API server's part: for every ready
   replica it reads the published caBundles, trusts only them, opens a connection and sends a
   review (``tests/support/cert_replicas.py``); a failed handshake counts as no answer.

    .venv/bin/python -m bench.reliability
    .venv/bin/python -m bench.reliability --rows bad-bytes,named-file --out bench/results/r.json

A killed worker takes the connections it held with it: a review in flight on one of them has
no answer (the client reconnects). That is SIGKILL, not the policy; the row says how many.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.figures import write_json
from bench.reviews import ReviewClient, Tally
from bench.slowloris import run_row

_HERE = Path(__file__).resolve().parent

REPO = _HERE.parent
BAD = {
    "NUL": "apiVersion: v1\x00\n",
    "ESC": "version: v1\x1b\n",
    "DEL": "version: v1\x7f\n",
    "BEL": "\x07",
    "900 levels": "a: " + "[" * 900 + "]" * 900 + "\n",
    "5000 digits": "a: " + "9" * 5000 + "\n",
}


def replace_file(path: Path, text: str) -> None:
    """Replace atomically, as the kubelet swaps a mounted ConfigMap."""
    new = path.with_suffix(".new")
    new.write_text(text)
    new.replace(path)


def bad_bytes_row(name: str, folder: Path, policy: str, target: str) -> dict[str, Any]:
    """Bad bytes into ``target`` (a file of ``folder``), a worker killed, the file restored."""
    from tests.support.gunicorn import running
    from webhook.certs.issue import write_certs

    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        files = Path(tmp) / "files"
        shutil.copytree(folder, files)
        certs = write_certs(Path(tmp) / "tls")
        good = (files / target).read_text()
        env = {"GPU_POLICY_FILE": str(files / policy)}
        with running(Path(tmp), certs, workers=2, threads=4, **env) as server:
            client = ReviewClient(server.port, certs.ca_cert).warm().start()
            for text in BAD.values():
                replace_file(files / target, text)
                time.sleep(2)
                workers = server.workers()
                if workers:  # none left: the server stopped (what this row looks for)
                    os.kill(workers[0], signal.SIGKILL)
                time.sleep(2)
                replace_file(files / target, good)
                time.sleep(1)
            tally = client.stop()
            alive = server.proc.poll() is None
            failed_boot = "Worker failed to boot" in server.log()
        return {
            "row": name,
            **tally.row(),
            "server": "alive" if alive and not failed_boot else "STOPPED",
        }


def cert_replicas_row() -> dict[str, Any]:
    """Two self-managed replicas; the Secret deleted and one restarted, twice."""
    from tests.support.cert_replicas import Handshakes, Replicas
    from tests.support.controlplane import (
        ControlPlane,
        assets_dir,
        create_namespace,
        webhook_configurations,
    )
    from tests.support.waiting import wait_until
    from webhook import contract

    assets = assets_dir()
    if assets is None:
        return {"row": "cert-replicas", "failures": "skipped: KUBEBUILDER_ASSETS is not set"}
    from kubernetes import client

    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        plane = ControlPlane(assets=assets, workdir=Path(tmp) / "plane")
        plane.start()
        try:
            namespace = create_namespace(plane, "bench")
            api = client.AdmissionregistrationV1Api(plane.client)
            names = []
            for obj in webhook_configurations(
                "https://127.0.0.1:9", b"", name="bench", namespace=namespace
            ):
                create = (
                    api.create_mutating_webhook_configuration
                    if obj["kind"] == "MutatingWebhookConfiguration"
                    else api.create_validating_webhook_configuration
                )
                names.append(create(obj).metadata.name)
            env = {
                contract.CERT_SECRET_ENV: f"{namespace}/webhook-tls",
                contract.SERVICE_ENV: f"{namespace}/webhook",
                contract.MUTATING_WEBHOOK_ENV: names[0],
                contract.VALIDATING_WEBHOOK_ENV: names[1],
                contract.KUBE_ENV: str(plane.kubeconfig),
            }
            replicas = Replicas(Path(tmp), env)
            try:
                replicas.servers += [replicas.start(), replicas.start()]
                wait_until(replicas.all_ready, 60, poll=0.2)
                clients = Handshakes(plane, (names[0], names[1]), replicas)
                clients.start(f"webhook.{namespace}.svc")
                core = client.CoreV1Api(plane.client)
                for i in range(2):
                    core.delete_namespaced_secret("webhook-tls", namespace)
                    replicas.restart(i)
                    wait_until(replicas.all_ready, 90, poll=0.2)
                    time.sleep(5)
                clients.stop()
            finally:
                replicas.stop_all()
        finally:
            plane.stop()
    tally = Tally(statuses=dict(clients.statuses), latencies=clients.latencies)
    if clients.failures:
        tally.failures["failed handshake"] = len(clients.failures)
    return {"row": "cert-replicas", **tally.row()}


def main(argv: list[str] | None = None) -> int:
    """Run the rows and print the table."""
    rows_wanted = "bad-bytes,named-file,slow-8-headers,slow-8-hello,cert-replicas"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=rows_wanted)
    parser.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)

    def slow(kind: str) -> Callable[[], dict[str, Any]]:
        def row() -> dict[str, Any]:
            from bench.slowloris import webhook_server

            with webhook_server(2, 4) as (port, ca):
                figures = run_row(port, ca, 8, kind, 15.0)
            return {"row": f"slow-8-{kind}", **figures}

        return row

    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "bad-bytes": lambda: bad_bytes_row(
            "bad-bytes", REPO / "webhook" / "data", "example-policy.yaml", "example-policy.yaml"
        ),
        "named-file": lambda: bad_bytes_row(
            "named-file",
            REPO / "examples" / "clusters" / "mps-l4",
            "policy.yaml",
            "device-plugin-config.yaml",
        ),
        "slow-8-headers": slow("headers"),
        "slow-8-hello": slow("hello"),
        "cert-replicas": cert_replicas_row,
    }
    rows = [runs[name]() for name in args.rows.split(",")]
    columns = ["row", "answered", "5xx", "no_answer", "p50_ms", "p99_ms", "worst_ms", "server"]
    print(" ".join(f"{c:>14}" for c in columns))
    for row in rows:
        print(" ".join(f"{row.get(c, '-')!s:>14}" for c in columns))
    for row in rows:
        if row.get("failures"):
            print(f"{row['row']}: {row['failures']}")
    if args.out:
        write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
