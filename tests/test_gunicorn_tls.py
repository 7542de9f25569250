"""gunicorn with webhook.server.gunicorn_conf, as real processes over real TLS.

The server is ``gunicorn -c python:webhook.server.gunicorn_conf`` serving ``wsgi_app`` below (a
stand-in for the Flask app: it answers with its pid), configured only through the
environment variables of docs/contracts.md. Clients verify the server against the CA and keep
their connections alive, as the API server does.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from bench.procs import terminate
from webhook.certs import issue

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


# --------------------------------------------------------------------------------------------
# The app gunicorn serves (imported by the workers as test_gunicorn_tls:wsgi_app)
# --------------------------------------------------------------------------------------------


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """200 with the worker pid; /slow sleeps 1 s first; /tls reports the served certificate.

    The certificate is what ``webhook.server.wsgi`` hands to ``/readyz``: the serving context
    of the gunicorn config, which gunicorn imported in the master before forking this worker.
    """
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    doc: dict[str, Any] = {"pid": os.getpid()}
    if environ["PATH_INFO"] == "/slow":
        mark_dir = os.environ.get("TEST_MARK_DIR")
        if mark_dir:  # tell the test the request arrived
            Path(mark_dir, f"{os.getpid()}-{threading.get_ident()}").touch()
        time.sleep(1.0)
    elif environ["PATH_INFO"] == "/tls":
        conf = sys.modules.get("webhook.server.gunicorn_conf")
        doc["registered"] = conf is not None
        if conf is not None:
            status = conf.serving_context().status()
            doc.update(valid=status.valid, serial=status.serial, reason=status.reason)
    body = json.dumps(doc).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client_context(
    ca_file: Path,
    *,
    cert: tuple[Path, Path] | None = None,
    max_version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    if max_version is not None:
        ctx.maximum_version = max_version
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def peer_serial(conn: http.client.HTTPSConnection) -> int:
    assert isinstance(conn.sock, ssl.SSLSocket)
    der = conn.sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def get(conn: http.client.HTTPSConnection, path: str = "/") -> dict[str, Any]:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, (resp.status, body)
    return dict(json.loads(body))


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    client_ctx: ssl.SSLContext
    log_file: Path

    def connect(self, context: ssl.SSLContext | None = None) -> http.client.HTTPSConnection:
        ctx = context or self.client_ctx
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=10)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def served_serial(self) -> int:
        conn = self.connect()
        try:
            get(conn)
            return peer_serial(conn)
        finally:
            conn.close()


GUNICORN = [
    sys.executable,
    "-m",
    "gunicorn",
    "-c",
    "python:webhook.server.gunicorn_conf",
    "--pythonpath",
    str(Path(__file__).parent),
    "test_gunicorn_tls:wsgi_app",
]


def gunicorn_env(tmp_path: Path, tls_dir: Path, port: int, **env: str) -> dict[str, str]:
    """The environment of docs/contracts.md for a small test server."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GPU_POLICY_BIND": f"127.0.0.1:{port}",
        "GPU_POLICY_TLS_DIR": str(tls_dir),
        "GPU_POLICY_WORKERS": "2",
        "GPU_POLICY_THREADS": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        **env,
    }


@contextmanager
def gunicorn(
    tmp_path: Path,
    tls_dir: Path,
    ca_file: Path,
    client_cert: tuple[Path, Path] | None = None,
    **env: str,
) -> Iterator[Server]:
    """Start gunicorn with our config; stop it (SIGTERM) at the end.

    Clients trust ``ca_file`` and, by default, present ``client_cert``.
    """
    port = free_port()
    log_file = tmp_path / "gunicorn.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            GUNICORN,
            cwd=REPO,
            env=gunicorn_env(tmp_path, tls_dir, port, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(proc, port, client_context(ca_file, cert=client_cert), log_file)
    try:
        wait_until_serving(server)
        yield server
    finally:
        terminate(proc)


def wait_until_serving(server: Server, timeout: float = 15) -> None:
    """Until both workers answer (a TLS connection to the port gets a response)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"gunicorn exited with {server.proc.returncode}:\n{server.log()}")
        try:
            server.served_serial()
            return
        except (OSError, http.client.HTTPException):
            time.sleep(0.1)
    pytest.fail(f"gunicorn did not serve within {timeout} s:\n{server.log()}")


@pytest.fixture
def certs(tmp_path: Path) -> issue.CertPaths:
    return issue.write_certs(tmp_path / "tls", days=30)


def reissue(paths: issue.CertPaths) -> tuple[bytes, bytes]:
    return issue.make_serving_cert(
        paths.ca_cert.read_bytes(),
        paths.ca_key.read_bytes(),
        service="gpu-policy-webhook",
        namespace="gpu-policy",
        days=30,
    )


# --------------------------------------------------------------------------------------------
# (a) protocol versions and ciphers
# --------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls12_and_tls13_served_old_protocols_and_ciphers_refused(
    tmp_path: Path, certs: issue.CertPaths
) -> None:
    with gunicorn(tmp_path, certs.directory, certs.ca_cert) as server:
        conn = server.connect()
        get(conn)
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.sock.version() == "TLSv1.3"
        conn.close()

        conn = server.connect(
            context=client_context(certs.ca_cert, max_version=ssl.TLSVersion.TLSv1_2)
        )
        get(conn)
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.sock.version() == "TLSv1.2"
        cipher = conn.sock.cipher()
        assert cipher is not None and cipher[0].startswith("ECDHE-ECDSA-")
        assert "GCM" in cipher[0] or "CHACHA20" in cipher[0]
        conn.close()

        # The hostname the API server uses is in the certificate too.
        ctx = client_context(certs.ca_cert)
        conn = http.client.HTTPSConnection(
            "gpu-policy-webhook.gpu-policy.svc", server.port, context=ctx, timeout=10
        )
        conn.sock = ctx.wrap_socket(
            socket.create_connection(("127.0.0.1", server.port), timeout=10),
            server_hostname="gpu-policy-webhook.gpu-policy.svc",
        )
        get(conn)
        conn.close()

        # A TLS 1.1 client. SECLEVEL=0 lets our OpenSSL offer it at all; the refusal
        # ("alert protocol version") comes from the server.
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(str(certs.ca_cert))
        old.set_ciphers("DEFAULT:@SECLEVEL=0")
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError, match="alert protocol version"):
            get(server.connect(context=old))

        # TLS 1.2 with CBC-only suites (no AEAD): the server has no cipher in common.
        cbc = client_context(certs.ca_cert, max_version=ssl.TLSVersion.TLSv1_2)
        cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA384:AES128-SHA")
        with pytest.raises(ssl.SSLError, match="alert handshake failure"):
            get(server.connect(context=cbc))

        # The server is still fine after refusing them.
        server.served_serial()


# --------------------------------------------------------------------------------------------
# (b) rotation under load, (c) broken files
# --------------------------------------------------------------------------------------------


@dataclass
class Load:
    """Two client threads: connections kept alive for 5 requests each, then a new one."""

    server: Server
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    requests: int = 0
    serials: list[tuple[float, int]] = field(default_factory=list)  # (connect time, serial)
    reused: int = 0  # requests sent on the connection's first socket (kept alive)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        while not self.stop.is_set():
            conn = self.server.connect()
            try:
                started = time.monotonic()  # before the handshake, which picks the cert
                conn.connect()
                with self.lock:
                    self.serials.append((started, peer_serial(conn)))
                first_sock = conn.sock
                for _ in range(5):
                    get(conn)
                    with self.lock:
                        self.requests += 1
                        self.reused += conn.sock is first_sock
            except Exception as e:  # any failure at all is what the test is about
                with self.lock:
                    self.errors.append(f"{type(e).__name__}: {e}")
            finally:
                conn.close()

    def __enter__(self) -> Load:
        self.threads = [threading.Thread(target=self.run) for _ in range(2)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def make_secret_volume(root: Path, paths: issue.CertPaths) -> Callable[[bytes, bytes], None]:
    """Lay out ``root`` as the kubelet does for a Secret volume; return the swap function.

    tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>; an update writes a new timestamped
    directory and renames a new ``..data`` symlink over the old one (AtomicWriter).
    """
    root.mkdir()
    generation = [0]

    def publish(cert: bytes, key: bytes) -> None:
        generation[0] += 1
        name = f"..2026_01_01_00_00_0{generation[0]}.{generation[0]}"
        (root / name).mkdir()
        (root / name / "tls.crt").write_bytes(cert)
        (root / name / "tls.key").write_bytes(key)
        (root / "..data_tmp").symlink_to(name)
        os.replace(root / "..data_tmp", root / "..data")

    publish(paths.cert.read_bytes(), paths.key.read_bytes())
    for f in ("tls.crt", "tls.key"):
        (root / f).symlink_to(f"..data/{f}")
    return publish


def replace_files(tls_dir: Path) -> Callable[[bytes, bytes], None]:
    """Rotation the way write_certs does it: each file replaced atomically, key first."""

    def publish(cert: bytes, key: bytes) -> None:
        issue.write_atomic(tls_dir / "tls.key", key, mode=0o600)
        issue.write_atomic(tls_dir / "tls.crt", cert)

    return publish


@pytest.mark.parametrize("layout", ["secret-volume", "replaced-files"])
def test_rotation_under_load_fails_no_request(
    tmp_path: Path, certs: issue.CertPaths, layout: str
) -> None:
    if layout == "secret-volume":
        tls_dir = tmp_path / "secret"
        publish = make_secret_volume(tls_dir, certs)
    else:
        tls_dir = certs.directory
        publish = replace_files(tls_dir)
    old_serial = x509.load_pem_x509_certificate(certs.cert.read_bytes()).serial_number

    with gunicorn(tmp_path, tls_dir, certs.ca_cert) as server, Load(server) as load:
        time.sleep(1.0)
        new_cert, new_key = reissue(certs)
        new_serial = x509.load_pem_x509_certificate(new_cert).serial_number
        rotated_at = time.monotonic()
        publish(new_cert, new_key)

        # The first new connection showing the new certificate.
        seen_at = None
        while time.monotonic() - rotated_at < 3.0:
            if server.served_serial() == new_serial:
                seen_at = time.monotonic()
                break
            time.sleep(0.05)
        assert seen_at is not None, "new certificate not served within 3 s"
        assert seen_at - rotated_at < 2.0
        # Once a check interval (1 s) has passed everywhere, every new connection, whichever
        # worker takes it, gets the new certificate.
        time.sleep(max(0.0, rotated_at + 1.2 - time.monotonic()))
        assert {server.served_serial() for _ in range(10)} == {new_serial}
        # ... and each worker says so to its /tls (what /readyz will use).
        reports = []
        for _ in range(6):
            conn = server.connect()
            reports.append(get(conn, "/tls"))
            conn.close()
        time.sleep(0.5)

    assert not load.errors, load.errors
    assert load.requests > 50
    assert load.reused == load.requests  # no connection was closed by the server
    assert {s for _, s in load.serials} == {old_serial, new_serial}
    late = {s for t, s in load.serials if t > rotated_at + 1.1}
    assert late == {new_serial}
    assert all(r["registered"] and r["valid"] and r["serial"] == new_serial for r in reports)


def test_broken_files_keep_the_old_certificate(tmp_path: Path, certs: issue.CertPaths) -> None:
    old_serial = x509.load_pem_x509_certificate(certs.cert.read_bytes()).serial_number
    with gunicorn(tmp_path, certs.directory, certs.ca_cert) as server, Load(server) as load:
        time.sleep(0.3)
        issue.write_atomic(certs.cert, b"-----BEGIN CERTIFICATE-----\ngarbage\n")
        time.sleep(1.5)
        assert {server.served_serial() for _ in range(6)} == {old_serial}

        # a cert with a key that is not its own: same
        other_cert, _ = reissue(certs)
        issue.write_atomic(certs.cert, other_cert)
        time.sleep(1.5)
        assert {server.served_serial() for _ in range(6)} == {old_serial}

        # and a good pair again is picked up
        new_cert, new_key = reissue(certs)
        replace_files(certs.directory)(new_cert, new_key)
        time.sleep(1.5)
        new_serial = x509.load_pem_x509_certificate(new_cert).serial_number
        assert {server.served_serial() for _ in range(6)} == {new_serial}
        log = server.log()

    assert not load.errors, load.errors
    assert "cannot be used" in log and "does not match" in log


# --------------------------------------------------------------------------------------------
# (d) optional mutual TLS
# --------------------------------------------------------------------------------------------


def test_client_certificates_required_with_client_ca(
    tmp_path: Path, certs: issue.CertPaths
) -> None:
    client_ca = issue.make_ca("apiserver-clients", 30)
    client_ca_file = tmp_path / "client-ca.crt"
    client_ca_file.write_bytes(client_ca[0])

    def client_files(name: str, ca: tuple[bytes, bytes]) -> tuple[Path, Path]:
        cert, key = issue.make_client_cert(*ca, common_name=name)
        (tmp_path / f"{name}.crt").write_bytes(cert)
        (tmp_path / f"{name}.key").write_bytes(key)
        return tmp_path / f"{name}.crt", tmp_path / f"{name}.key"

    good = client_files("apiserver", client_ca)
    stranger = client_files("stranger", issue.make_ca("someone-else", 30))

    with gunicorn(
        tmp_path,
        certs.directory,
        certs.ca_cert,
        client_cert=good,
        GPU_POLICY_CLIENT_CA=str(client_ca_file),
    ) as server:
        for _ in range(3):
            conn = server.connect()
            get(conn)
            get(conn)
            conn.close()

        for ctx in (client_context(certs.ca_cert), client_context(certs.ca_cert, cert=stranger)):
            for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
                ctx.maximum_version = version
                conn = server.connect(context=ctx)
                with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
                    get(conn)
                conn.close()

        # still serving the good client afterwards
        server.served_serial()


# --------------------------------------------------------------------------------------------
# (e) SIGTERM with requests in flight
# --------------------------------------------------------------------------------------------


def test_sigterm_lets_requests_in_flight_finish(tmp_path: Path, certs: issue.CertPaths) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    with gunicorn(
        tmp_path,
        certs.directory,
        certs.ca_cert,
        GPU_POLICY_THREADS="4",
        TEST_MARK_DIR=str(marks),
    ) as server:

        def slow(_: int) -> tuple[int, float]:
            conn = server.connect()
            try:
                conn.request("GET", "/slow")
                resp = conn.getresponse()
                resp.read()
                return resp.status, time.monotonic()
            finally:
                conn.close()

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(slow, i) for i in range(4)]
            deadline = time.monotonic() + 5
            while len(list(marks.iterdir())) < 4 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(list(marks.iterdir())) == 4, "the 4 requests did not all arrive"
            term_at = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            results = [f.result(timeout=15) for f in futures]

        assert [status for status, _ in results] == [200] * 4
        assert all(done > term_at for _, done in results)  # they really were in flight
        assert server.proc.wait(15) == 0, server.log()


# --------------------------------------------------------------------------------------------
# fail fast at start
# --------------------------------------------------------------------------------------------


def test_unusable_certificate_stops_the_server_at_start(
    tmp_path: Path, certs: issue.CertPaths
) -> None:
    certs.key.write_bytes(issue.make_ca("not-the-key", 1)[1])
    result = subprocess.run(
        GUNICORN,
        cwd=REPO,
        env=gunicorn_env(tmp_path, certs.directory, free_port()),
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "Error: TLS:" in result.stderr and "does not match" in result.stderr
