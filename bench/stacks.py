"""CPU per review call after a pause: Python serving stacks against Go and this server, in one run.

Through a cluster's API server every call to the webhook comes after a pause (docs/performance.md,
"Fifth round"): its two calls per pod travel on two kept-alive TLS connections, ~20-40 ms apart
from the calls before them, so each one runs from cold caches. There this server's worker costs
~1.4-1.9 ms of CPU per call against Go's ~0.5 ms. This measures whether another way of serving
Python costs less per such call, answering the real reviews (docs/performance.md, "Sixth round",
has the figures; ``bench/apiserver.py --stacks`` serves the same prototypes to a real API
server):

* ``go``: ``bench/go`` (as in bench/latency.py);
* ``worker``: this server as deployed (gunicorn, ``webhook.server.worker.ReviewWorker``,
  2 workers x 4 threads);
* ``threads``: one thread per kept-alive connection blocking in ``ssl``'s ``recv`` (one wake-up
  per request: no poller, no pool hand-off), the head read by ``webhook.server.direct``;
* ``epoll``: one thread, non-blocking TLS sockets on ``select.epoll``, the same reading;
* ``uvloop``: asyncio on uvloop, ``httptools`` as the parser, the TLS of uvloop's SSL protocol;
* ``granian``: granian (HTTP and TLS in Rust, rustls), a WSGI callable of a few lines.

Each Python stack answers ``POST /mutate`` and ``/validate`` with the same code the worker's direct
path calls (``DirectReviews.answer``: the engine's review with orjson, metrics, one log line per
review) and sends ``webhook.server.response.answer_bytes``. ``--variants`` adds rows per stack
answering otherwise (``VARIANTS``): without the review's log line, without its log line and its
metrics, or ``bare``, the uid echoed (bench/http_load.py's ``allow_review``), to tell the stack
from the review; for the worker, ``bare`` is bench/latency.py's bare WSGI callable, which goes
through gunicorn's parser and WSGI rather than the direct path.

The client is bench/http_load.py's (one ``http.client`` HTTPS connection, kept alive), paced at
``--rate`` requests a second (default 25: ~40 ms between the calls of the one connection). Each
server's CPU (utime + stime of it and its child processes, from /proc) over the measured time,
divided by the calls, is the "CPU per call" (read in 10 ms ticks: keep 400 calls or more a
row); it holds the server's background work too (timers, gunicorn's heartbeat, the metrics
flush), which ``idle CPU`` shows per second, measured before the runs with no client. The rounds
go round the rows in an order that rotates each round; the table gives each row as a multiple
of Go's.

    .venv/bin/python -m bench.stacks --bare                 # 3 rounds of 6 s per row, ~8 min
    .venv/bin/python -m bench.stacks --stacks go,worker,threads,uvloop \
        --variants "no log;no log, metrics;bare"
    .venv/bin/python -m bench.stacks --rate 0               # back to back instead

These are prototypes for measurement: they keep none of the worker's guards (deadlines for slow
clients, certificate reload, graceful stop, limits on connections), which cost CPU of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import select
import socket
import ssl
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.gunicorn import Server
    from webhook.certs.issue import CertPaths

# --------------------------------------------------------------------------------------------
# What every prototype answers with (imported in the server processes)
# --------------------------------------------------------------------------------------------

# (path, content type, body) -> the whole answer's bytes
Answerer = Callable[[str, str, bytes], bytes]
# What a server answers with: the review, the review without its log line, without its log line
# and its metrics, or no review (the uid echoed).
REVIEW, NO_LOG, NO_LOG_METRICS, BARE = "review", "no log", "no log, metrics", "bare"
VARIANTS = (REVIEW, NO_LOG, NO_LOG_METRICS, BARE)
_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
# What the launcher's GET /healthz gets (it waits for a 200 before the runs).
_OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"


def _not_a_review(request: bytes) -> bytes:
    """The answer to a request that is no review: 200 to the launcher's GET, else 400."""
    return _OK if request.startswith(b"GET /healthz ") else _BAD


def make_answerer() -> tuple[Answerer, Callable[[bytes], tuple[str, str, bytes] | None]]:
    """(answer, read): ``read`` turns a whole request into (path, content type, body) or None;
    ``answer`` reviews it as the worker's direct path does, or as the variant the environment
    names (``BENCH_STACK_VARIANT``, one of ``VARIANTS``) does."""
    from webhook.server.app import create_app, direct_reviews
    from webhook.server.direct import read_review_head
    from webhook.server.logs import configure_logging
    from webhook.server.response import answer_bytes
    from webhook.server.settings import Settings

    settings = Settings.from_env()
    configure_logging(settings.log_level)
    variant = os.environ.get("BENCH_STACK_VARIANT", REVIEW)
    if variant in (NO_LOG, NO_LOG_METRICS):
        from webhook.server.logs import ReviewLog

        ReviewLog.write = lambda self, outcome, seconds: None  # type: ignore[method-assign]
    if variant == NO_LOG_METRICS:
        from webhook.server import metrics

        metrics.record_review = lambda outcome, seconds: None
    direct = direct_reviews(create_app(settings))
    assert direct is not None
    paths, max_body = direct.paths, settings.max_body_bytes

    def read(data: bytes) -> tuple[str, str, bytes] | None:
        head = read_review_head(data, paths, max_body)
        return None if head is None else (head.path, head.content_type, head.body)

    if variant == BARE:
        from bench.http_load import allow_review

        def answer(path: str, content_type: str, body: bytes) -> bytes:
            allowed = allow_review(body)
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(allowed)))]
            return answer_bytes("200 OK", False, headers, allowed)

    else:

        def answer(path: str, content_type: str, body: bytes) -> bytes:
            status, headers, answer = direct.answer(path, content_type, body)
            return answer_bytes(status, False, headers, answer)

    return answer, read


def _whole(buffer: bytearray) -> int:
    """The length of the whole first request in ``buffer``, 0 while it is not all here."""
    end = buffer.find(_HEAD_END)
    if end < 0:
        return 0
    found = _CONTENT_LENGTH.search(buffer, 0, end)
    total = end + 4 + (int(found.group(1)) if found else 0)
    return total if len(buffer) >= total else 0


def _server_context() -> ssl.SSLContext:
    from webhook.certs.serving import build_server_context
    from webhook.server.settings import Settings

    settings = Settings.from_env()
    return build_server_context(settings.cert_file, settings.key_file)


def _listener(port: int) -> socket.socket:
    sock = socket.create_server(("127.0.0.1", port), backlog=128)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# --- one thread per connection ---------------------------------------------------------------


def serve_threads(port: int) -> None:
    """Accept, and give each connection a thread that blocks in ``recv``."""
    answer, read = make_answerer()
    context = _server_context()
    listener = _listener(port)
    while True:
        raw, _ = listener.accept()
        threading.Thread(target=_connection, args=(raw, context, answer, read), daemon=True).start()


def _connection(raw: socket.socket, context: ssl.SSLContext, answer: Answerer, read: Any) -> None:
    try:
        raw.settimeout(10)
        conn = context.wrap_socket(raw, server_side=True)
        conn.settimeout(None)  # blocking: one recv call per record, no poll before it
        buffer = bytearray()
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buffer += chunk
            total = _whole(buffer)
            if not total:
                continue
            whole = bytes(buffer[:total])
            del buffer[:total]
            request = read(whole)
            if request is None:
                conn.sendall(_not_a_review(whole))
                return
            conn.sendall(answer(*request))
    except OSError:
        return
    finally:
        raw.close()


# --- one thread, epoll -----------------------------------------------------------------------


def serve_epoll(port: int) -> None:
    """One thread: epoll on the listener and on non-blocking TLS connections."""
    answer, read = make_answerer()
    context = _server_context()
    listener = _listener(port)
    listener.setblocking(False)
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    conns: dict[int, tuple[ssl.SSLSocket, bytearray, list[bool]]] = {}
    while True:
        for fd, _ in poller.poll():
            if fd == listener.fileno():
                try:
                    raw, _ = listener.accept()
                except BlockingIOError:
                    continue
                raw.setblocking(False)
                tls = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
                conns[tls.fileno()] = (tls, bytearray(), [False])
                poller.register(tls.fileno(), select.EPOLLIN)
                continue
            tls, buffer, shaken = conns[fd]
            try:
                if not shaken[0]:
                    tls.do_handshake()
                    shaken[0] = True
                while True:
                    chunk = tls.recv(65536)
                    if not chunk:
                        raise ConnectionResetError
                    buffer += chunk
                    total = _whole(buffer)
                    if total:
                        whole = bytes(buffer[:total])
                        del buffer[:total]
                        request = read(whole)
                        # a prototype: the answer of a few KB leaves in one non-blocking write
                        tls.sendall(_not_a_review(whole) if request is None else answer(*request))
            except (ssl.SSLWantReadError, BlockingIOError):
                continue
            except OSError:
                poller.unregister(fd)
                del conns[fd]
                tls.close()


# --- asyncio on uvloop, httptools ------------------------------------------------------------


class _HttpProtocol(asyncio.Protocol):
    """One connection: httptools parses, the review is answered inline on the loop."""

    answer: Answerer

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.content_type = b""
        self.name = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:
            self.transport.write(_BAD)
            self.transport.close()

    # httptools' callbacks
    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 12 and name.lower() == b"content-type":
            self.content_type = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        self.body = []
        path = self.url.split(b"?", 1)[0].decode("ascii")
        if self.parser.get_method() != b"POST":
            self.transport.write(_not_a_review(b"GET " + self.url + b" "))
            return
        self.transport.write(self.answer(path, self.content_type.decode("latin-1"), body))


def serve_uvloop(port: int, loop_kind: str = "uvloop") -> None:
    """asyncio (on uvloop unless ``loop_kind`` is ``asyncio``) with httptools."""
    answer, _ = make_answerer()
    context = _server_context()
    if loop_kind == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    _HttpProtocol.answer = staticmethod(answer)  # type: ignore[assignment]
    listener = _listener(port)
    server = loop.run_until_complete(loop.create_server(_HttpProtocol, sock=listener, ssl=context))
    loop.run_until_complete(server.serve_forever())


# --- granian ---------------------------------------------------------------------------------

_granian_answer: Answerer | None = None


def granian_wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The WSGI callable granian serves: the review, or ``ok`` for the launcher's /healthz."""
    global _granian_answer
    if _granian_answer is None:
        _granian_answer, _ = make_answerer()
    if environ["REQUEST_METHOD"] != "POST":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
        return [b"ok\n"]
    body = environ["wsgi.input"].read()
    raw = _granian_answer(environ["PATH_INFO"], environ.get("CONTENT_TYPE", ""), body)
    # answer_bytes made the whole answer; granian writes its own head, so split it
    head, _, payload = raw.partition(_HEAD_END)
    lines = head.decode("latin-1").split("\r\n")
    headers = [
        tuple(line.split(": ", 1))
        for line in lines[1:]
        if not line.lower().startswith(("content-length", "date", "server", "connection"))
    ]
    start_response(lines[0].split(" ", 1)[1], [*headers, ("Content-Length", str(len(payload)))])
    return [payload]


# --------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------

PYTHON_STACKS = ("threads", "epoll", "uvloop", "asyncio", "granian")
STACKS = ("go", "worker", *PYTHON_STACKS)
DEFAULT_STACKS = ("go", "worker", "threads", "epoll", "uvloop", "granian")


def start_stack(
    stack: str, tmp: Path, certs: CertPaths, go_binary: Path | None, variant: str = REVIEW
) -> Server:
    """Start one server answering with ``variant`` and wait until it answers ``/healthz``."""
    from bench.http_load import start_server
    from bench.latency import APPS, GUNICORN, launched, start_go
    from tests.support.gunicorn import free_port, server_env

    if stack == "go":
        assert go_binary is not None
        return start_go(go_binary, tmp, certs)
    tag = f"{stack}-{VARIANTS.index(variant)}"
    if stack == "worker":
        # the bare row: a bare WSGI callable (gunicorn's parser and WSGI, not the direct path)
        app = "bench.latency:wsgi_app" if variant == BARE else APPS["webhook"]
        if variant not in (REVIEW, BARE):
            raise SystemExit(f"the worker has no variant {variant!r}")
        return start_server(tag, tmp, certs, GUNICORN, app=app)
    port = free_port()
    env = server_env(
        tmp,
        port,
        certs.directory,
        log_level=GUNICORN.log_level,
        PROMETHEUS_MULTIPROC_DIR=str(tmp / f"metrics-{tag}"),
        BENCH_STACK_VARIANT=variant,
    )
    Path(env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(exist_ok=True)
    if stack == "granian":
        command = [
            str(Path(sys.executable).with_name("granian")),
            *("--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port)),
            *("--workers", "1", "--blocking-threads", "1", "--runtime-threads", "1"),
            *("--http", "1", "--no-ws", "--log-level", "warning"),
            *("--ssl-certificate", str(certs.cert), "--ssl-keyfile", str(_pkcs8_key(certs, tmp))),
            "bench.stacks:granian_wsgi",
        ]
    else:
        command = [sys.executable, "-m", "bench.stacks", "serve", stack, str(port)]
    return launched(command, tmp, env, certs, port, stack)


def _pkcs8_key(certs: CertPaths, tmp: Path) -> Path:
    """The serving key as PKCS#8 (granian reads no other form)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.key.read_bytes(), password=None)
    out = tmp / "tls-pkcs8.key"
    out.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return out


def _serve(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="bench.stacks serve")
    p.add_argument("stack", choices=("threads", "epoll", "uvloop", "asyncio"))
    p.add_argument("port", type=int)
    args = p.parse_args(argv)
    if args.stack == "threads":
        serve_threads(args.port)
    elif args.stack == "epoll":
        serve_epoll(args.port)
    else:
        serve_uvloop(args.port, args.stack)


@dataclass(frozen=True)
class Row:
    """One row of the table: a server (a stack answering with a variant) and a path."""

    stack: str
    variant: str
    path: str

    @property
    def server(self) -> tuple[str, str]:
        return self.stack, self.variant

    @property
    def name(self) -> str:
        if self.variant != REVIEW:
            return f"{self.stack}, {self.variant}"
        return f"{self.stack} {self.path.split('?')[0]}"


@dataclass
class Figures:
    """What the runs of one row measured, pooled over the rounds."""

    latencies: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    round_p50_us: list[float] = field(default_factory=list)
    errors: int = 0


def rows_of(stacks: list[str], variants: list[str]) -> list[Row]:
    """The rows: each stack with the review on both paths, then each other variant on /mutate
    (Go answers as it does, once)."""
    from bench.http_load import MUTATE_PATH
    from bench.latency import VALIDATE_PATH

    rows = []
    for stack in stacks:
        paths = (MUTATE_PATH,) if stack == "go" else (MUTATE_PATH, VALIDATE_PATH)
        rows += [Row(stack, REVIEW, path) for path in paths]
    for variant in variants:
        for stack in stacks:
            if stack == "go" or (stack == "worker" and variant != BARE):
                continue
            rows.append(Row(stack, variant, MUTATE_PATH))
    return rows


def main() -> None:
    """Parse the options, start every server, measure in rotating rounds, print the table."""
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        _serve(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--stacks", default=",".join(DEFAULT_STACKS), help=f"of {', '.join(STACKS)}")
    p.add_argument(
        "--variants",
        default="",
        help=f"more rows per stack, of: {', '.join(repr(v) for v in VARIANTS[1:])} (comma: ';')",
    )
    p.add_argument("--bare", action="store_true", help="short for --variants bare")
    p.add_argument("--rate", type=float, default=25.0, help="requests/s; 0: back to back")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=6.0, help="measured time per row and round")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU per server")
    args = p.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    if args.bare and BARE not in variants:
        variants.append(BARE)
    unknown = (set(stacks) - set(STACKS)) | (set(variants) - set(VARIANTS[1:]))
    if unknown:
        raise SystemExit(f"unknown stacks or variants: {', '.join(sorted(unknown))}")
    figures = measure(stacks, variants, args)
    print_table(figures, args)


def measure(stacks: list[str], variants: list[str], args: argparse.Namespace) -> dict[Row, Any]:
    """Start the servers, take their idle CPU, run the rounds; the figures by row (and
    ``idle``: CPU seconds a second by server; ``load``: the load averages at the start and end)."""
    from bench.http_load import MUTATE_PATH, check_answer, drive, review_body, stop_server
    from bench.latency import build_go
    from webhook.certs.issue import write_certs

    load_start = os.getloadavg()
    go_binary = build_go()[0] if "go" in stacks else None
    body = review_body()
    rows = rows_of(stacks, variants)
    figures: dict[Any, Any] = {row: Figures() for row in rows}
    servers: dict[tuple[str, str], Server] = {}
    with tempfile.TemporaryDirectory(prefix="bench-stacks-") as d:
        tmp = Path(d)
        certs = write_certs(tmp / "tls", days=1)
        try:
            for row in rows:
                if row.server not in servers:
                    servers[row.server] = start_stack(row.stack, tmp, certs, go_binary, row.variant)
            for row in rows:
                patch = row.stack != "go" and row.variant != BARE and row.path == MUTATE_PATH
                port = servers[row.server].port
                check_answer(row.name, row.path, port, certs.ca_cert, body, patch=patch)
            time.sleep(1.0)
            cpu0 = {key: _tree_cpu(server) for key, server in servers.items()}
            time.sleep(args.idle)
            figures["idle"] = {
                key: (_tree_cpu(server) - cpu0[key]) / args.idle for key, server in servers.items()
            }
            load = argparse.Namespace(connections=1, warmup=args.warmup, seconds=args.seconds)
            for r in range(args.rounds):
                for row in rows[r % len(rows) :] + rows[: r % len(rows)]:
                    run = drive(
                        row.name,
                        servers[row.server],
                        body,
                        certs.ca_cert,
                        load,
                        args.rate,
                        path=row.path,
                        keep_latencies=True,
                    )
                    f = figures[row]
                    f.latencies += run["latencies_s"]
                    f.cpu_s += run["server_cpu_s"]
                    f.round_p50_us.append(run["p50_ms"] * 1000)
                    f.errors += run["errors"]
                print(f"  round {r + 1}/{args.rounds}, load {os.getloadavg()[0]:.2f}", flush=True)
        finally:
            for server in servers.values():
                stop_server(server)
    figures["load"] = (load_start, os.getloadavg())
    figures["body"] = len(body)
    return figures


def _tree_cpu(server: Server) -> float:
    from tests.support.procs import cpu_seconds

    return sum(cpu_seconds([server.proc.pid, *server.workers()]).values())


def print_table(figures: dict[Any, Any], args: argparse.Namespace) -> None:
    """The table, with each row as a multiple of Go's (the first Go row) when Go ran."""
    from bench.figures import percentile

    (start, end), idle = figures["load"], figures["idle"]
    pace = f"{args.rate:g} requests/s, one every {1000 / args.rate:.0f} ms" if args.rate else ""
    intro = (
        f"One kept-alive TLS connection, POST of a {figures['body']:,}-byte AdmissionReview,"
        f" {pace or 'back to back'}; {args.rounds} rounds of {args.seconds:g} s per row in a"
        " rotating order. CPU per call: utime+stime of the server's processes over the measured"
        " time / calls (its background work included: idle CPU alone, before the runs, in its"
        f" column). Load average (1 / 5 min) {start[0]:.2f} / {start[1]:.2f} at the start,"
        f" {end[0]:.2f} / {end[1]:.2f} at the end."
    )
    print("\n" + textwrap.fill(intro, 100) + "\n")
    print("| server | calls | p50 us | p90 us | CPU/call us | idle CPU ms/s | x Go: p50, CPU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    go: tuple[float, float] | None = None
    per_round = []
    for row, f in figures.items():
        if not isinstance(row, Row):
            continue
        ordered = sorted(f.latencies)
        n = len(ordered)
        p50 = percentile(ordered, 0.5) * 1e6
        cpu = f.cpu_s / n * 1e6 if n else float("nan")
        go = go or ((p50, cpu) if row.stack == "go" else None)
        ratio = f"{p50 / go[0]:.2f}, {cpu / go[1]:.2f}" if go else ""
        print(
            f"| {row.name} | {n} | {p50:,.0f} | {percentile(ordered, 0.9) * 1e6:,.0f}"
            f" | {cpu:,.0f} | {idle[row.server] * 1e3:.1f} | {ratio} |"
        )
        per_round.append(f"{row.name} {'/'.join(f'{x:.0f}' for x in f.round_p50_us)}")
        if f.errors:
            print(f"{row.name}: {f.errors} errors")
    print("\np50 per round (us): " + "; ".join(per_round))


if __name__ == "__main__":
    main()
