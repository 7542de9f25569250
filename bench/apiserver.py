"""Pod-create latency the webhook adds through a real API server, against a Go webhook.

What a user waits for is ``kubectl create``: the API server decodes the pod, calls the mutating
webhooks, defaults and validates, calls the validating webhooks, writes to etcd and answers.
This measures that, on a real control plane (``tests/support/controlplane.py``: etcd,
kube-apiserver, controller-manager and scheduler from ``KUBEBUILDER_ASSETS``), in three setups
that differ only in the webhooks the API server calls:

* ``none``: no webhook;
* ``go``: ``bench/go``, the standard-library Go webhook of bench/latency.py (built the same
  way), which decodes each AdmissionReview and allows it;
* ``ours``: ``gpu-policy serve`` (gunicorn with the project's config, 2 gthread workers x 4
  threads, the bundled example policy), which mutates the pod (a JSON Patch: the GPU toleration
  and the ``gpu-policy.io/mutations`` annotation) and validates it.

Both webhooks are registered with the chart's own webhook configurations (``helm template`` of
``charts/gpu-policy-webhook``; both the mutating and the validating one, their
``matchConditions``, timeouts and policies as rendered), pointed by URL at each server, each
limited to a namespace of its own. So a pod created in ``bench-go`` is sent to Go twice (mutate
and validate) exactly where one in ``bench-ours`` is sent to this webhook, and one in
``bench-none`` to no webhook. The pod asks for ``nvidia.com/gpu: 1`` (the matchConditions let
only such pods through) and names a scheduler that does not run, so that nothing schedules it.

Clients: 1, then 8 processes (``--clients 1,8,32`` for other counts), each with one kept-alive
TLS connection to the API server (admin client certificate), creating the next pod when the
answer is in, in the setups' namespaces in turn, each turn in a new order: the setups are
interleaved request by request, so a change of the machine's load (other work shares it) meets
them all alike, and none always follows the same other one (a create leaves work behind in the
API server and etcd that the next one meets). After each run the pods are deleted (not timed).
Printed per setup and client count, from every round pooled: the pods created and the p50 and
p99 in microseconds (and each round's p50); then what each webhook adds to ``none`` (p50 and
p99) and the ratio ours/Go of the added p50 and p99.

With ``--go-patch`` a setup ``go+patch``: the Go webhook answering ``/mutate`` with the JSON
Patch (and audit annotation) this webhook answers for the benchmark's pod, worked out in
process: the API server then does the same work with Go's answers as with ours (applying the
patch, a larger pod to validate and store), and ``ours/Go+patch`` compares the servers alone.

    export KUBEBUILDER_ASSETS="$(python3 scripts/control_plane.py 1.36.2 .cache/control-plane)"
    .venv/bin/python -m bench.apiserver                    # 5 rounds of 6 s per client count
    .venv/bin/python -m bench.apiserver --rounds 9 --out bench/results/apiserver.json
    git archive OLD webhook | tar -x -C /tmp/before   # another version of the server ...
    .venv/bin/python -m bench.apiserver --before /tmp/before   # ... as a fourth setup
    .venv/bin/python -m bench.apiserver --service --before . --before-shape 1x8   # shapes
    .venv/bin/python -m bench.apiserver --service --go-patch --stacks threads,uvloop

``--distinct`` gives every pod created a spec of its own (a label and a toleration with a
counter) and a ``generateName`` of its own, as the first pod of each workload has: the webhook
then keeps nothing from one pod for the next, neither the answer to a repeated pod
(webhook/admission/memo.py) nor the allocator's verdict on its spec. ``--distinct spec``
keeps one ``generateName`` for all, as the pods of a DaemonSet (one workload, a spec per node):
the memo then works out a key for each pod and finds nothing. ``--distinct app`` gives each pod
a ``generateName``, a label, a container name and a CPU request of its own but no toleration,
as the first pods of other workloads that ask for the same GPU: no answer is kept for the
next, but the allocator's verdict is (kept by what a pod asks of a node, which leaves CPU and
memory out; docs/performance.md, "Tenth round"). Without it every pod has the
same spec, as the replicas of one workload have (docs/performance.md, "Eighth round").

``--stacks`` adds a setup per prototype serving stack of bench/stacks.py (named after it),
answering the same reviews with none of this server's guards (docs/performance.md, "Sixth
round").

How the webhooks are registered changes what the API server does (kube-apiserver v1.36.2,
``k8s.io/apiserver/pkg/util/webhook/client.go``, ``ClientManager.hookClientConfig``, and
``k8s.io/client-go/transport/cache.go``, ``tlsTransportCache.get``; docs/performance.md, "Fifth
round"). By URL (the default, ``https://127.0.0.1:PORT/mutate``): a loopback URL is the one case
where the API server offers HTTP/2, which the Go webhook accepts (one connection carries every
call) and this webhook does not; and the mutating and validating configurations share one
transport, so both calls of a pod go over the same kept-alive connection. ``--service``
registers them as the chart does, through a Service (``clientConfig.service`` with the chart's
paths): an ExternalName Service named ``webhook`` in each setup's namespace, pointing at
127.0.0.1, which the API server's default service resolver dials at the webhook's port (no
kube-proxy is needed). Then the API server asks for HTTP/1.1 from both webhooks and keeps a
transport, so connections, per configuration: a pod's two calls come on two connections,
which gunicorn may have given to two workers. The serving certificate names each Service
(``webhook.<namespace>.svc``), as the chart's names its own.

With ``--before DIR`` a fourth setup, ``before``, runs the ``webhook`` package found in DIR (an
older version of the server, with this environment's libraries and gunicorn) in the same way,
interleaved with the others: a before/after comparison from one run. ``--shape`` and
``--before-shape`` (``WORKERSxTHREADS``, default the chart's 2x4) compare worker shapes, also of
the same code (``--before .``).

The client, the API server, etcd, both webhooks and the Go build share the machine's cores:
every setup pays the same API server and etcd costs, and only the difference to ``none`` is the
webhook's. About 3 minutes with the defaults (the first run also builds the Go server).
"""

from __future__ import annotations

import argparse
import base64
import copy
import http.client
import json
import multiprocessing
import os
import platform
import random
import ssl
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bench.figures import percentile, write_json
from bench.latency import GUNICORN, build_go, start_go, start_other

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent

if TYPE_CHECKING:
    from tests.support.controlplane import ControlPlane
    from tests.support.gunicorn import Server
    from webhook.certs.issue import CertPaths

SETUPS: tuple[str, ...] = ("none", "go", "ours")  # + "before" with --before
GO_PATCH = "go+patch"  # with --go-patch: Go answering /mutate with our patch
CONNECTIONS: tuple[int, ...] = (1, 8)  # --clients
DISTINCT: str | None = None  # --distinct: "workload" or "spec", every pod its own (pod_body)
HELM = _REPO / ".cache" / "tools" / "helm"
CHART = _REPO / "charts" / "gpu-policy-webhook"
# A scheduler that does not run: the default scheduler leaves these pods alone.
NO_SCHEDULER = "bench-unscheduled"
# With --service: the Service each setup's webhooks are registered through, in its namespace.
SERVICE = "webhook"


def namespace(setup: str) -> str:
    """The namespace whose pods ``setup``'s webhooks (if any) are called for (also the name of
    its webhook configurations)."""
    return "bench-" + setup.replace("+", "-")


def pod_body(
    setup: str, distinct: str | None = None, mode: str = "workload", serial: int = 0
) -> bytes:
    """A pod asking for one GPU, named by the API server (generateName). With ``distinct``, a
    spec of its own (``--distinct``): a label and a toleration that name it, so that the
    webhook keeps nothing from one pod for the next (neither the answer, whose key holds the
    labels, nor the allocator's verdict, whose key holds the tolerations: webhook/admission/
    memo.py, webhook/policy/engine/fit.py), and with ``mode`` ``workload`` a generateName of
    its own. The toleration is of a taint no node has. ``mode`` ``app``: a generateName, a
    label, a container name and a CPU request (``serial`` millicores) of its own and no
    toleration, as the first pods of other workloads that ask for the same GPU."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "bench-", "namespace": namespace(setup)},
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    if distinct is not None:
        pod["metadata"]["labels"] = {"bench.gpu-policy.io/pod": distinct}
        if mode in ("workload", "app"):
            pod["metadata"]["generateName"] = f"bench-{distinct}-"
        if mode == "app":
            container = pod["spec"]["containers"][0]
            container["name"] = f"cuda-{distinct}"
            container["resources"]["requests"] = {"cpu": f"{serial + 1}m"}
            return json.dumps(pod).encode()
        pod["spec"]["tolerations"] = [
            {"key": f"bench.gpu-policy.io/pod-{distinct}", "operator": "Exists"}
        ]
    return json.dumps(pod).encode()


# --------------------------------------------------------------------------------------------
# The clients
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    """Where the API server is and the admin's credentials, as files a client process reads."""

    port: int
    ca_file: str
    cert_file: str
    key_file: str

    def connect(self) -> http.client.HTTPSConnection:
        """A kept-alive TLS connection, verified against the API server's CA."""
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=30)


def api_of(plane: ControlPlane, where: Path) -> Api:
    """The admin kubeconfig's server and credentials, written as files into ``where``."""
    config = json.loads(plane.kubeconfig.read_text())
    user = config["users"][0]["user"]
    files = {
        "ca.crt": config["clusters"][0]["cluster"]["certificate-authority-data"],
        "admin.crt": user["client-certificate-data"],
        "admin.key": user["client-key-data"],
    }
    for name, data in files.items():
        (where / name).write_bytes(base64.b64decode(data))
        (where / name).chmod(0o600)
    port = int(plane.url.rsplit(":", 1)[1])
    return Api(port, str(where / "ca.crt"), str(where / "admin.crt"), str(where / "admin.key"))


def _cause(body: bytes) -> str:
    """The end of an API server error: for a failed webhook call, the cause (a timeout, EOF)."""
    try:
        message = str(json.loads(body).get("message", ""))
    except ValueError:
        message = body.decode(errors="replace")
    return message[:60] + " ... " + message[-100:] if len(message) > 170 else message


def setup_order(idx: int) -> Iterator[int]:
    """The setups' indexes in the order client ``idx`` takes them: every setup once per
    cycle, each cycle in a new order (the same for a given ``idx``), so that no setup always
    comes right after the same other one (a create leaves work behind in the API server and
    etcd, e.g. the watch events of the new pod, which the next create meets)."""
    shuffle = random.Random(idx).shuffle
    cycle = list(range(len(SETUPS)))
    while True:
        shuffle(cycle)
        yield from cycle


def client(idx: int, api: Api, measure_from: float, stop_at: float, out: Any) -> None:
    """Create pods until ``stop_at``, in each setup's namespace in turn (:func:`setup_order`);
    report each setup's latencies via ``out``."""
    bodies = [pod_body(s) for s in SETUPS]
    paths = [f"/api/v1/namespaces/{namespace(s)}/pods" for s in SETUPS]
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    conn = api.connect()
    latencies: dict[str, list[float]] = {s: [] for s in SETUPS}
    errors: dict[str, int] = {}
    for n, i in enumerate(setup_order(idx)):
        # --distinct: every pod a spec of its own, built before the clock starts
        if DISTINCT is not None:
            # A CPU request of its own per client and pod (--distinct app): n * 64 + idx.
            body = pod_body(SETUPS[i], f"{idx}-{n}-{time.time_ns()}", DISTINCT, n * 64 + idx)
        else:
            body = bodies[i]
        start = time.monotonic()
        if start >= stop_at:
            break
        try:
            conn.request("POST", paths[i], body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            error = "" if resp.status == 201 else f"HTTP {resp.status}: {_cause(data)}"
        except (OSError, http.client.HTTPException) as exc:
            error = type(exc).__name__
            conn.close()
        done = time.monotonic()
        if start >= measure_from and done <= stop_at:
            if error:
                key = f"{SETUPS[i]}: {error}"
                errors[key] = errors.get(key, 0) + 1
            else:
                latencies[SETUPS[i]].append(done - start)
    conn.close()
    out.put((latencies, errors))


def drive(api: Api, connections: int, warmup: float, seconds: float) -> dict[str, Any]:
    """One run: ``connections`` client processes creating pods for ``seconds``, each going
    round the setups request by request, so that every setup meets the same machine."""
    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    measure_from = time.monotonic() + 0.3 + warmup  # time for the processes to start
    stop_at = measure_from + seconds
    procs = [
        mp.Process(target=client, args=(i, api, measure_from, stop_at, out))
        for i in range(connections)
    ]
    for p in procs:
        p.start()
    latencies: dict[str, list[float]] = {s: [] for s in SETUPS}
    errors: dict[str, int] = {}
    for _ in procs:
        lat, errs = out.get(timeout=seconds + warmup + 60)
        for s in SETUPS:
            latencies[s].extend(lat[s])
        for kind, n in errs.items():
            errors[kind] = errors.get(kind, 0) + n
    for p in procs:
        p.join()
    return {"latencies": latencies, "errors": errors, "seconds": seconds}


def delete_pods(plane: ControlPlane) -> None:
    """Delete every benchmark pod (unscheduled pods go at once with grace period 0)."""
    from kubernetes import client

    core = client.CoreV1Api(plane.client)
    for setup in SETUPS:
        core.delete_collection_namespaced_pod(namespace(setup), grace_period_seconds=0)
    for setup in SETUPS:
        while core.list_namespaced_pod(namespace(setup), limit=1).items:
            time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# The setups
# --------------------------------------------------------------------------------------------


def chart_webhook_configurations() -> list[dict[str, Any]]:
    """The chart's Mutating and Validating webhook configurations, as ``helm template``
    renders them with the default values."""
    if not HELM.exists():
        raise SystemExit(f"{HELM.relative_to(_REPO)} is missing: run `make tools`")
    rendered = subprocess.run(
        [str(HELM), "template", "gpu-policy-webhook", str(CHART), "--namespace", "gpu-policy"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    return [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in kinds]


def service_name(setup: str) -> str:
    """The host name the API server verifies ``setup``'s certificate against under
    ``--service`` (``<service>.<namespace>.svc``, as for the chart's Service)."""
    return f"{SERVICE}.{namespace(setup)}.svc"


def register(plane: ControlPlane, setup: str, port: int, ca_pem: bytes, *, service: bool) -> None:
    """The chart's configurations, named after ``setup``, calling the server on ``port`` for
    its namespace: by URL (``https://127.0.0.1:PORT/path``), or with ``service`` through a
    Service, as the chart registers them (see the module's docstring)."""
    bundle = base64.b64encode(ca_pem).decode()
    if service:
        # ExternalName: the API server's default service resolver (kube-apiserver without
        # --enable-aggregator-routing) dials the external name and the webhook's port
        # (k8s.io/apiserver/pkg/util/proxy ResolveCluster); a ClusterIP needs kube-proxy.
        spec = {"type": "ExternalName", "externalName": "127.0.0.1"}
        meta = {"name": SERVICE, "namespace": namespace(setup)}
        plane.create({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec})
    for config in chart_webhook_configurations():
        obj = copy.deepcopy(config)
        obj["metadata"] = {"name": namespace(setup)}
        for hook in obj["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if service:
                where = {"namespace": namespace(setup), "name": SERVICE, "path": path, "port": port}
                hook["clientConfig"] = {"service": where, "caBundle": bundle}
            else:
                url = f"https://127.0.0.1:{port}{path}"
                hook["clientConfig"] = {"url": url, "caBundle": bundle}
            hook["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace(setup)}
            }
        plane.create(obj)


def wait_until_called(plane: ControlPlane, setup: str, timeout: float = 30) -> None:
    """Until a dry-run pod in ``setup``'s namespace comes back mutated by this webhook (the
    API server calls a new configuration once its informer has seen it)."""
    from kubernetes import client

    core = client.CoreV1Api(plane.client)
    pod = json.loads(
        pod_body(setup, "0" if DISTINCT else None, DISTINCT or "workload")
    )  # go+patch's patch fits it
    deadline = time.monotonic() + timeout
    while True:
        made = core.create_namespaced_pod(namespace(setup), pod, dry_run="All")
        if any(t.key == "nvidia.com/gpu" for t in made.spec.tolerations or ()):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the API server did not call the {setup} webhook in {timeout} s")
        time.sleep(0.2)


def our_mutate_answer(plane: ControlPlane) -> dict[str, Any]:
    """The fields this webhook's /mutate answer has for the benchmark's pod besides the uid
    and ``allowed`` (the JSON Patch, its type, the audit annotation), worked out in process
    with the bundled example policy the server serves: what ``go+patch`` answers, so that the
    API server does for Go's answer what it does for ours (apply the patch, ...).

    The pod is the one the API server hands the webhooks: defaulted and through the built-in
    admission plugins (a dry-run create where no webhook is registered). A patch worked out on
    the pod as the client sends it would be another patch: ``add /spec/tolerations`` replaces
    the tolerations the DefaultTolerationSeconds plugin added, a change the API server then
    has more work with than with ours (measured: Go answering it added 1.5-2.2x what plain Go
    adds, more than this webhook did).
    """
    from kubernetes import client

    from webhook.admission import handle
    from webhook.server import Settings
    from webhook.server.state import PolicyState

    made = client.CoreV1Api(plane.client).create_namespaced_pod(
        namespace("none"),
        # Of the same form as the pods sent (--distinct app: no toleration of its own), so that
        # the patch Go answers with applies to them.
        json.loads(pod_body("none", "0" if DISTINCT else None, DISTINCT or "workload")),
        dry_run="All",
        _preload_content=False,
    )
    pod = json.loads(made.data)
    pod["metadata"]["namespace"] = namespace(GO_PATCH)
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    request = {
        "uid": "0",
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": pod["metadata"]["name"],
        "namespace": namespace(GO_PATCH),
        "operation": "CREATE",
        "userInfo": {"username": "admin"},
        "object": pod,
        "dryRun": False,
    }
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    snapshot = PolicyState(Settings.from_env()).snapshot
    outcome = handle(
        "mutate",
        json.dumps(doc).encode(),
        policy=snapshot.policy,
        inventory=snapshot.inventory,
        max_bytes=7 << 20,
    )
    response = dict(json.loads(outcome.body)["response"])
    if "patch" not in response:
        raise SystemExit("our /mutate answer to the benchmark's pod has no patch")
    for name in ("uid", "allowed"):
        response.pop(name)
    return response


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


@dataclass
class Pooled:
    """The runs of one setup with one client count, added up over the rounds."""

    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    round_p50_us: list[float] = field(default_factory=list)

    def add(self, run: dict[str, Any]) -> None:
        """Count one run in."""
        self.latencies.extend(run["latencies"])
        self.seconds += run["seconds"]
        for kind, n in run["errors"].items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.round_p50_us.append(percentile(sorted(run["latencies"]), 0.5) * 1e6)

    def summary(self) -> dict[str, Any]:
        """p50 and p99 (us) of the pooled latencies, pods per second of this setup, errors."""
        ordered = sorted(self.latencies)
        return {
            "pods": len(ordered),
            "p50_us": percentile(ordered, 0.50) * 1e6,
            "p99_us": percentile(ordered, 0.99) * 1e6,
            "pods_per_s": len(ordered) / self.seconds if self.seconds else float("nan"),
            "errors": self.errors,
            "round_p50_us": self.round_p50_us,
        }


def report(rows: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """The table per setup, then what each webhook adds and the ratio ours/Go."""
    lines = ["setup  clients    pods   p50 us   p99 us   p50 per round (us)"]
    for c in CONNECTIONS:
        for setup in SETUPS:
            r = rows[setup][c]
            rounds = "/".join(f"{x:.0f}" for x in r["round_p50_us"])
            lines.append(
                f"{setup:<8} {c:>5} {r['pods']:>7,} "
                f"{r['p50_us']:>8,.0f} {r['p99_us']:>8,.0f}   {rounds}"
            )
    lines.append("")
    lines.append("added to `none` (us)    clients  added p50  added p99")
    webhooks = [s for s in SETUPS if s != "none"]
    for c in CONNECTIONS:
        for setup in webhooks:
            lines.append(
                f"{setup:<23} {c:>8} {added(rows, setup, c, 'p50_us'):>10,.0f}"
                f" {added(rows, setup, c, 'p99_us'):>10,.0f}"
            )
    lines.append("")
    baselines = [("go", "Go")] + ([(GO_PATCH, "Go+patch")] if GO_PATCH in SETUPS else [])
    for base, label in baselines:
        for setup in webhooks:
            if setup in ("go", base):
                continue
            for c in CONNECTIONS:
                p50 = added(rows, setup, c, "p50_us") / added(rows, base, c, "p50_us")
                p99 = added(rows, setup, c, "p99_us") / added(rows, base, c, "p99_us")
                lines.append(
                    f"{setup}/{label}, {c} client{'s' if c > 1 else ''}: added p50 {p50:.2f}x,"
                    f" added p99 {p99:.2f}x"
                )
    return lines


def added(rows: dict[str, dict[int, dict[str, Any]]], setup: str, c: int, key: str) -> float:
    """What ``setup``'s webhooks add to the ``none`` setup's figure ``key``."""
    return float(rows[setup][c][key] - rows["none"][c][key])


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def measure(
    plane: ControlPlane, api: Api, args: argparse.Namespace, pooled: dict[tuple[str, int], Pooled]
) -> None:
    """Every run: per round, each client count, the setups interleaved request by request."""
    for r in range(args.rounds):
        for connections in CONNECTIONS:
            run = drive(api, connections, args.warmup, args.seconds)
            for setup in SETUPS:
                pooled[(setup, connections)].add(
                    {
                        "latencies": run["latencies"][setup],
                        "errors": {
                            k: n for k, n in run["errors"].items() if k.startswith(f"{setup}: ")
                        },
                        "seconds": run["seconds"],
                    }
                )
            delete_pods(plane)
        print(f"  round {r + 1}/{args.rounds} done", flush=True)


def make_namespaces(plane: ControlPlane) -> None:
    """One namespace per setup, with its default ServiceAccount."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(plane.client)
    for setup in SETUPS:
        core.create_namespace({"metadata": {"name": namespace(setup)}})
        try:  # the controller-manager may have made it already
            core.create_namespaced_service_account(
                namespace(setup), {"metadata": {"name": "default"}}
            )
        except ApiException as exc:
            if exc.status != 409:
                raise


def shape(text: str) -> argparse.Namespace:
    """``--shape``: ``2x4`` is 2 gunicorn workers of 4 threads each."""
    workers, _, threads = text.partition("x")
    return argparse.Namespace(workers=int(workers), threads=int(threads))


def start_webhooks(
    plane: ControlPlane,
    args: argparse.Namespace,
    binary: Path,
    tmp: Path,
    certs: CertPaths,
    servers: list[Server],
) -> None:
    """Start the webhook servers of ``SETUPS[1:]`` into ``servers``, in that order (each as
    soon as it runs, so that the caller stops those started when a later one fails)."""
    from tests.support.gunicorn import start

    servers.append(start_go(binary, tmp, certs))
    servers.append(
        start(
            tmp,
            certs,
            workers=args.shape.workers,
            threads=args.shape.threads,
            log_level=GUNICORN.log_level,
        )
    )
    if args.before is not None:
        servers.append(start_other(args.before, tmp, certs, args.before_shape))
    for stack in args.stacks:
        from bench.stacks import start_stack

        servers.append(start_stack(stack, tmp, certs, None))
    if args.go_patch:
        answer = our_mutate_answer(plane)
        ops = json.loads(base64.b64decode(answer["patch"]))
        print("go+patch answers /mutate with:", ", ".join(f"{o['op']} {o['path']}" for o in ops))
        servers.append(start_go(binary, tmp, certs, "-mutate-answer", json.dumps(answer)))


def main() -> None:
    """Start the control plane and both webhooks, register them, measure, print."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=6.0, help="measured time per run")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured time before each run")
    p.add_argument("--rounds", type=int, default=5, help="rounds (each client count in each)")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    p.add_argument("--before", type=Path, help="a directory with another version's webhook/")
    p.add_argument("--clients", default="1,8", help="client counts, e.g. 1,8,32")
    p.add_argument(
        "--go-patch",
        action="store_true",
        help="a setup go+patch: the Go webhook answering /mutate with our patch",
    )
    p.add_argument(
        "--shape",
        type=shape,
        default=GUNICORN,
        help="ours: WORKERSxTHREADS (default: the chart's 2x4)",
    )
    p.add_argument("--before-shape", type=shape, default=GUNICORN, help="before: WORKERSxTHREADS")
    p.add_argument(
        "--service",
        action="store_true",
        help="register the webhooks through Services, as the chart does, not by URL",
    )
    p.add_argument(
        "--stacks",
        type=lambda text: [s for s in text.split(",") if s],
        default=[],
        help="a setup per prototype serving stack of bench/stacks.py, e.g. threads,uvloop",
    )
    p.add_argument(
        "--distinct",
        nargs="?",
        const="workload",
        choices=("workload", "spec", "app"),
        help="every pod created a spec (and a workload: generateName) of its own; spec: one"
        " generateName for all; app: no toleration of its own, but a container name and a CPU"
        " request",
    )
    args = p.parse_args()
    global SETUPS, CONNECTIONS, DISTINCT  # noqa: PLW0603 - the client processes are forked after this
    DISTINCT = args.distinct
    if args.before is not None:
        SETUPS = (*SETUPS, "before")
    SETUPS = (*SETUPS, *args.stacks)
    if args.go_patch:
        SETUPS = (*SETUPS, GO_PATCH)
    CONNECTIONS = tuple(int(c) for c in args.clients.split(","))

    from tests.support.controlplane import ControlPlane, assets_dir
    from tests.support.gunicorn import stop
    from webhook.certs.issue import write_certs

    assets = assets_dir()
    if assets is None:
        raise SystemExit(
            "set KUBEBUILDER_ASSETS to a folder with etcd, kube-apiserver, "
            "kube-controller-manager and kube-scheduler (docs/testing-control-plane.md)"
        )
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    binary, go_version = build_go()
    pooled = {(s, c): Pooled() for s in SETUPS for c in CONNECTIONS}
    with tempfile.TemporaryDirectory(prefix="bench-apiserver-") as d:
        tmp = Path(d)
        plane = ControlPlane(assets=assets, workdir=tmp / "controlplane")
        certs = write_certs(tmp / "tls", days=1, extra_sans=map(service_name, SETUPS[1:]))
        servers: list[Server] = []
        try:
            plane.start()
            from kubernetes import client

            version = client.VersionApi(plane.client).get_code().git_version
            make_namespaces(plane)
            start_webhooks(plane, args, binary, tmp, certs, servers)
            ca_pem = certs.ca_cert.read_bytes()
            for setup, server in zip(SETUPS[1:], servers, strict=True):
                register(plane, setup, server.port, ca_pem, service=args.service)
            for setup in SETUPS[2:]:
                wait_until_called(plane, setup)
            measure(plane, api_of(plane, tmp), args, pooled)
        finally:
            for server in servers:
                stop(server)
            plane.stop()

    rows = {s: {c: pooled[(s, c)].summary() for c in CONNECTIONS} for s in SETUPS}
    intro = (
        f"Pod creates through kube-apiserver {version} (etcd, "
        f"controller-manager and scheduler running; the pods name a scheduler that does not "
        f"run), POST of a pod asking for nvidia.com/gpu: 1 over a kept-alive TLS connection per "
        f"client process, the next when the answer is in, the setups in turn. {args.rounds} "
        f"rounds of {args.seconds:g} s per client count (after {args.warmup:g} s of warm-up); "
        f"percentiles of all rounds pooled. "
        + (
            "Every pod a spec of its own ("
            + (
                "a label, a container name and a CPU request"
                if DISTINCT == "app"
                else "a label and a toleration"
            )
            + f" with a counter; --distinct {DISTINCT}). "
            if DISTINCT
            else "Every pod the same spec. "
        )
        + f"go: {go_version}; ours: gunicorn, "
        f"{args.shape.workers} gthread workers x {args.shape.threads} threads"
        + (
            f" (before: {args.before_shape.workers} x {args.before_shape.threads})"
            if args.before is not None
            else ""
        )
        + ", the bundled example "
        "policy; both called twice per pod (the chart's mutating and validating "
        "configurations, "
        + ("through Services" if args.service else "by URL")
        + f"). Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"average before the run {load_before:.2f}, after {os.getloadavg()[0]:.2f}."
    )
    print("\n" + textwrap.fill(intro, 100) + "\n")
    for line in report(rows):
        print(line)
    for setup, by_c in rows.items():
        for c, row in by_c.items():
            if row["errors"]:
                print(f"{setup}, {c} clients: errors {row['errors']}")
    print(f"\ntook {time.monotonic() - started:.0f} s")
    if args.out:
        write_json(
            args.out,
            {
                "kube_apiserver": version,
                "go": go_version,
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_before": load_before,
                "load_after": os.getloadavg()[0],
                "registration": "service" if args.service else "url",
                "distinct": DISTINCT,
                "shape": vars(args.shape),
                "rounds": args.rounds,
                "seconds": args.seconds,
                "warmup": args.warmup,
                "rows": {
                    s: {f"{c}-clients": row for c, row in by_c.items()} for s, by_c in rows.items()
                },
                **{
                    f"{setup}_over_go": {
                        f"{c}-clients": {
                            "added_p50": added(rows, setup, c, "p50_us")
                            / added(rows, "go", c, "p50_us"),
                            "added_p99": added(rows, setup, c, "p99_us")
                            / added(rows, "go", c, "p99_us"),
                        }
                        for c in CONNECTIONS
                    }
                    for setup in SETUPS[2:]
                },
                **(
                    {
                        "over_go_patch": {
                            setup: {
                                f"{c}-clients": added(rows, setup, c, "p50_us")
                                / added(rows, GO_PATCH, c, "p50_us")
                                for c in CONNECTIONS
                            }
                            for setup in SETUPS[2:]
                            if setup != GO_PATCH
                        }
                    }
                    if GO_PATCH in SETUPS
                    else {}
                ),
            },
        )
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
