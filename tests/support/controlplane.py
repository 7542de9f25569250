"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, controller-manager, scheduler.

The binaries come from the folder ``KUBEBUILDER_ASSETS`` names (the variable
controller-runtime's envtest reads: ``scripts/control_plane.py 1.36.2 DIR`` fills and prints such
a folder).
Without it every test that asks for :func:`control_plane` is skipped with one reason.

One control plane serves the whole pytest session (under pytest-xdist, each worker's session has
its own: nothing here is shared between processes). It starts lazily, the first time a test
asks for it (about 10 s, longer on a loaded machine), on free loopback ports, with
certificates made at start in a temporary folder of its own, and stops (each component by its process
group) when the session ends. Its logs stay in that folder, whose path is printed, when a test
that used it failed or it did not start; otherwise the folder is removed.

Fixtures (this module is a pytest plugin, loaded by ``tests/conftest.py``):

* ``control_plane`` (session): the :class:`ControlPlane`; ``.kubeconfig`` is an admin
  kubeconfig file, ``.client`` a ``kubernetes.client.ApiClient`` on it, ``.url`` the API
  server's address and ``.ca_pem`` the CA that signed its certificate.
* ``kube_namespace``: a fresh namespace (name returned), with its ``default`` ServiceAccount,
  deleted after the test.
* ``make_gpu_node``: a function creating a Node with labels, taints, capacity/allocatable and
  a ``Ready`` condition (set through the ``status`` subresource, as the kubelet and the device
  plugin do); the Nodes are deleted after the test.
* ``register_webhooks``: a function registering mutating/validating webhook configurations
  that the API server calls by URL (a local server), removed after the test.

How the control plane runs without kubelets (the flags below) is in
``docs/testing-control-plane.md``.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime as dt
import itertools
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.objects import node_object
from tests.support.gunicorn import free_port
from tests.support.namespaces import NOW, holds, namespaced_collections, request
from tests.support.waiting import wait_until
from tests.support.workers import add_lines
from webhook.certs.issue import make_ca, make_serving_cert

# helm and kubectl, as `make tools` unpacks them (scripts/fetch_tools.py).
_TOOLS = Path(__file__).resolve().parents[2] / ".cache" / "tools"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

SKIP_REASON = (
    "needs a real control plane: set KUBEBUILDER_ASSETS to a folder holding etcd, "
    "kube-apiserver, kube-controller-manager and kube-scheduler "
    "(python3 scripts/control_plane.py 1.36.2 DIR prints one; docs/testing-control-plane.md)"
)

# Generous: several test runs may share two cores, and the API server alone needs about 4 s
# of CPU to become ready on an idle machine.
READY_TIMEOUT = float(os.environ.get("CONTROL_PLANE_READY_TIMEOUT", "240"))

SERVICE_CIDR = "10.0.0.0/24"

#: The components that act on objects (tests may stop them; see ControlPlane.stop_controllers).
CONTROLLERS = ("kube-controller-manager", "kube-scheduler")


def assets_dir() -> Path | None:
    """The folder ``KUBEBUILDER_ASSETS`` names when it holds the four binaries, else None."""
    value = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not value:
        return None
    folder = Path(value)
    if all(os.access(folder / b, os.X_OK) for b in BINARIES):
        return folder
    return None


# --------------------------------------------------------------------------------------------
# Certificates and kubeconfigs
# --------------------------------------------------------------------------------------------


def _client_cert(
    ca_cert_pem: bytes, ca_key_pem: bytes, common_name: str, groups: Sequence[str] = ()
) -> tuple[bytes, bytes]:
    """A client certificate: the API server reads the user from CN and groups from O."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_text(
    url: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, *, namespace: str | None = None
) -> str:
    """A self-contained kubeconfig (credentials embedded) for a client certificate user."""
    context: dict[str, str] = {"cluster": "envtest", "user": "user"}
    if namespace:
        context["namespace"] = namespace
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": url, "certificate-authority-data": _b64(ca_pem)},
                }
            ],
            "users": [
                {
                    "name": "user",
                    "user": {
                        "client-certificate-data": _b64(cert_pem),
                        "client-key-data": _b64(key_pem),
                    },
                }
            ],
            "contexts": [{"name": "envtest", "context": context}],
            "current-context": "envtest",
        },
        indent=1,
    )


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def _die_with_parent() -> list[str]:
    """A command prefix that makes the kernel kill the component if pytest dies outright (no
    finalizer runs then): util-linux's ``setpriv --pdeathsig``, which then execs the component
    (same pid). Empty where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@dataclass
class _Component:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the component's process group (nothing once it has exited)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the process group, wait, SIGKILL it if it hangs."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
                # A paused component (ControlPlane.pause_controllers) acts on SIGTERM once
                # it runs again.
                os.killpg(self.proc.pid, signal.SIGCONT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Anything the component left in its group (none of these fork, but be sure).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class ControlPlaneError(RuntimeError):
    """A component did not start (its log's last lines are in the message)."""


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback.

    ``start()`` returns when the API server is ready and the controller-manager has made the
    ``default`` ServiceAccount; ``stop()`` stops everything. ``workdir`` holds the
    certificates, the kubeconfigs, etcd's data and each component's log (``<name>.log``).
    """

    assets: Path
    workdir: Path
    url: str = ""
    etcd_url: str = ""
    kubeconfig: Path = field(default_factory=Path)
    ca_pem: bytes = b""
    components: list[_Component] = field(default_factory=list)
    #: More kube-apiserver flags, e.g. ``--runtime-config=resource.k8s.io/v1=false`` for a
    #: server that looks like one from before DRA.
    apiserver_args: tuple[str, ...] = ()
    _client: Any = None
    _dynamic: Any = None
    _args: dict[str, list[str]] = field(default_factory=dict)
    _paused: bool = False

    # --- start ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the four components and wait until they serve (raise ControlPlaneError)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        w = self.workdir
        pki = w / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca_pem, ca_key = make_ca("envtest-ca", days=2)
        self.ca_pem = ca_pem
        srv_cert, srv_key = make_serving_cert(
            ca_pem,
            ca_key,
            service="kubernetes",
            namespace="default",
            days=2,
            extra_sans=["kubernetes.default.svc.cluster.local", "10.0.0.1"],
        )
        # The service-account key: the API server reads public keys from PKIX PEM and private
        # ones from SEC1 ("EC PRIVATE KEY") PEM, not from PKCS#8.
        sa = ec.generate_private_key(ec.SECP256R1())
        sa_key = sa.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        sa_pub = sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        files = {
            "ca.crt": ca_pem,
            "ca.key": ca_key,
            "apiserver.crt": srv_cert,
            "apiserver.key": srv_key,
            "sa.key": sa_key,
            "sa.pub": sa_pub,
        }
        for name, data in files.items():
            (pki / name).write_bytes(data)
            (pki / name).chmod(0o600)

        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.url = f"https://127.0.0.1:{api_port}"

        users = {
            "admin": ("envtest-admin", ["system:masters"]),
            "controller-manager": ("system:kube-controller-manager", []),
            "scheduler": ("system:kube-scheduler", []),
        }
        for user, (cn, groups) in users.items():
            cert, key = _client_cert(ca_pem, ca_key, cn, groups)
            path = w / f"{user}.kubeconfig"
            path.write_text(kubeconfig_text(self.url, ca_pem, cert, key))
            path.chmod(0o600)
        self.kubeconfig = w / "admin.kubeconfig"

        self._spawn(
            "etcd",
            [
                "--name=envtest",
                f"--data-dir={w / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=envtest=http://127.0.0.1:{peer_port}",
                # Test data: losing it on a power cut costs nothing, waiting for disks costs time.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: self._get(self.etcd_url + "/health").find('"true"') >= 0)

        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                # No kube-proxy and no Endpoints for a loopback address.
                "--endpoint-reconciler-type=none",
                # No kubelet sets Nodes Ready: without this every Node is tainted not-ready.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--allow-privileged=true",
                "--profiling=false",
                *self.apiserver_args,
            ],
        )
        self._wait("kube-apiserver", lambda: self._get(self.url + "/readyz") == "ok")

        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={w / 'controller-manager.kubeconfig'}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                # Nothing reports Node heartbeats: the node-lifecycle controller would taint
                # and evict everything.
                "--controllers=*,-node-lifecycle-controller",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={w / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={w / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={w / 'scheduler.kubeconfig'}",
                "--secure-port=0",
                "--leader-elect=false",
            ],
        )
        # The controller-manager works once its ServiceAccount controller made this one.
        self._wait(
            "kube-controller-manager",
            lambda: (
                self._get(self.url + "/api/v1/namespaces/default/serviceaccounts/default")
                .lstrip()
                .startswith("{")
            ),
        )

    @property
    def controllers_running(self) -> bool:
        """Whether kube-controller-manager and kube-scheduler run (they do after start)."""
        return not self._paused and any(
            c.name in CONTROLLERS and c.alive() for c in self.components
        )

    def stop_controllers(self) -> None:
        """Stop kube-controller-manager and kube-scheduler: the API server alone, where nothing
        reconciles the objects a test puts there (a dump's ReplicaSets and Pods stay as they
        were, as in a cluster whose controllers are down)."""
        for comp in [c for c in self.components if c.name in CONTROLLERS]:
            comp.stop()
            self.components.remove(comp)
        self._paused = False

    def pause_controllers(self) -> None:
        """Freeze kube-controller-manager and kube-scheduler (SIGSTOP): to the API server they
        are clients that send nothing, so nothing reconciles what a test puts there, as with
        :meth:`stop_controllers`; :meth:`start_controllers` lets them go on (SIGCONT) where a
        restart would list everything again and take a second or two to act.

        Their watches stay open but unread: the API server ends one whose buffer fills
        (``cacheWatcher.add`` in ``staging/src/k8s.io/apiserver/pkg/storage/cacher/
        cache_watcher.go``) and the component lists again when it runs."""
        for comp in self.components:
            if comp.name in CONTROLLERS:
                comp.signal(signal.SIGSTOP)
        self._paused = True

    def start_controllers(self) -> None:
        """Start kube-controller-manager and kube-scheduler again, or let them go on after
        :meth:`pause_controllers` (no-op when they run)."""
        if self._paused:
            for comp in self.components:
                if comp.name in CONTROLLERS:
                    comp.signal(signal.SIGCONT)
            self._paused = False
        for name in CONTROLLERS:
            if not any(c.name == name for c in self.components):
                self._spawn(name, self._args[name])

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port, as a control-plane upgrade
        does; returns once it is ready. Its watch cache starts afresh from etcd: a watch that
        resumes from an older resourceVersion is answered ``410 Gone``."""
        comp = next(c for c in self.components if c.name == "kube-apiserver")
        comp.stop()
        self.components.remove(comp)
        self._spawn("kube-apiserver", self._args["kube-apiserver"])
        self._wait("kube-apiserver", lambda: self._get(self.url + "/readyz") == "ok")

    def _spawn(self, name: str, args: list[str]) -> None:
        self._args[name] = args
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*_die_with_parent(), str(self.assets / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # its own process group, stopped as one
            )
        self.components.append(_Component(name, proc, log))

    def ssl_context(self, user: str, groups: Sequence[str] = ()) -> ssl.SSLContext:
        """A TLS client context trusting the API server, authenticating as ``user`` in
        ``groups`` (what RBAC then grants that user, and nothing more)."""
        cert, key = _client_cert(
            self.ca_pem, (self.workdir / "pki" / "ca.key").read_bytes(), user, list(groups)
        )
        path = self.workdir / "pki" / f"user-{uuid.uuid4().hex[:8]}.pem"
        path.write_bytes(cert + key)
        path.chmod(0o600)
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        ctx.load_cert_chain(path)
        path.unlink()
        return ctx

    def anonymous_ssl_context(self) -> ssl.SSLContext:
        """A TLS client context trusting the API server, with no client certificate (for a
        bearer token, which a client certificate would otherwise outrank)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for ServiceAccount ``namespace/name`` (the TokenRequest API, as the kubelet
        gets a pod's), valid for an hour."""
        from kubernetes import client

        core = client.CoreV1Api(self.client)
        answer = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}
        )
        return str(answer.status.token)

    def admin_ssl_context(self) -> ssl.SSLContext:
        """A TLS client context trusting the API server and presenting the admin certificate."""
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        cert = self.workdir / "pki" / "admin.pem"
        if not cert.exists():
            cfg = json.loads(self.kubeconfig.read_text())["users"][0]["user"]
            cert.write_bytes(
                base64.b64decode(cfg["client-certificate-data"])
                + base64.b64decode(cfg["client-key-data"])
            )
            cert.chmod(0o600)
        ctx.load_cert_chain(cert)
        return ctx

    def _get(self, url: str) -> str:
        """GET ``url`` (admin); the body, or "" on any error (not ready yet)."""
        ctx = self.admin_ssl_context() if url.startswith("https") else None
        try:
            with urllib.request.urlopen(url, timeout=10, context=ctx) as r:
                return str(r.read().decode())
        except (OSError, urllib.error.URLError):
            return ""

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            for c in self.components:
                if not c.alive():
                    raise ControlPlaneError(
                        f"{c.name} exited with {c.proc.returncode}; "
                        f"last lines of {c.log}:\n{c.tail()}"
                    )
            if ready():
                return
            if time.monotonic() > deadline:
                comp = next(c for c in self.components if c.name == name)
                raise ControlPlaneError(
                    f"{name} not ready after {READY_TIMEOUT:.0f} s; "
                    f"last lines of {comp.log}:\n{comp.tail()}"
                )
            time.sleep(0.2)

    # --- use -----------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` with the admin credentials (one, reused)."""
        if self._client is None:
            from kubernetes import config

            self._client = config.new_client_from_config(
                config_file=str(self.kubeconfig), persist_config=False
            )
        return self._client

    @property
    def dynamic(self) -> Any:
        """A ``kubernetes.dynamic.DynamicClient`` (any kind, CRDs included; one, reused)."""
        if self._dynamic is None:
            from kubernetes import dynamic

            self._dynamic = dynamic.DynamicClient(self.client)
        return self._dynamic

    def create(self, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create ``obj`` (any kind; in ``namespace`` or its own) and return it as stored."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = namespace or obj.get("metadata", {}).get("namespace")
        created = resource.create(body=dict(obj), namespace=ns if resource.namespaced else None)
        return created.to_dict()  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def created(self, *objs: Mapping[str, Any]) -> Iterator[list[dict[str, Any]]]:
        """Create ``objs`` in order (each in its own namespace or none) and yield them as
        stored; delete them again, last first, when the block ends while the plane runs."""
        from kubernetes.client.exceptions import ApiException

        stored: list[dict[str, Any]] = []
        try:
            for obj in objs:
                stored.append(self.create(obj))
            yield stored
        finally:
            if self.alive():
                for obj in reversed(objs[: len(stored)]):
                    resource = self.dynamic.resources.get(
                        api_version=obj["apiVersion"], kind=obj["kind"]
                    )
                    meta = obj["metadata"]
                    with contextlib.suppress(ApiException):
                        resource.delete(name=meta["name"], namespace=meta.get("namespace"))

    def apply(
        self, obj: Mapping[str, Any], namespace: str | None = None, manager: str = "tests"
    ) -> dict[str, Any]:
        """Server-side apply ``obj`` (as ``kubectl apply --server-side``); the stored object."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = namespace or obj.get("metadata", {}).get("namespace")
        applied = resource.server_side_apply(
            body=dict(obj),
            name=obj["metadata"]["name"],
            namespace=ns if resource.namespaced else None,
            field_manager=manager,
            force_conflicts=True,
        )
        return applied.to_dict()  # type: ignore[no-any-return]

    def write_kubeconfig(
        self,
        path: Path,
        *,
        user: str = "envtest-admin",
        groups: Sequence[str] = ("system:masters",),
        namespace: str | None = None,
    ) -> Path:
        """Write a kubeconfig for ``user`` in ``groups`` (default: an admin) to ``path``.

        A user outside ``system:masters`` has only what RBAC grants it: tests of permissions
        bind a Role to that user name.
        """
        pki = self.workdir / "pki"
        cert, key = _client_cert(self.ca_pem, (pki / "ca.key").read_bytes(), user, list(groups))
        path.write_text(kubeconfig_text(self.url, self.ca_pem, cert, key, namespace=namespace))
        path.chmod(0o600)
        return path

    def alive(self) -> bool:
        """True while every component runs."""
        return bool(self.components) and all(c.alive() for c in self.components)

    def shell(self, command: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``command`` (a shell line, e.g. one of the docs' ``kubectl`` lines) against this
        control plane, from the repository's root with ``.cache/tools`` first on PATH; stdout
        and stderr in one stream, as a terminal shows them."""
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        env["PATH"] = os.pathsep.join([str(_TOOLS), env.get("PATH", "")])
        return subprocess.run(
            ["bash", "-c", command],
            cwd=_TOOLS.parents[1],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )

    def delete_webhook_configurations(self, made: Sequence[tuple[str, str]]) -> None:
        """Delete the (kind, name) webhook configurations ``made`` (before their server stops:
        with failurePolicy Fail, a webhook that does not answer refuses every pod)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.AdmissionregistrationV1Api(self.client)
        for kind, name in made:
            with contextlib.suppress(ApiException):
                if kind == "MutatingWebhookConfiguration":
                    api.delete_mutating_webhook_configuration(name)
                else:
                    api.delete_validating_webhook_configuration(name)

    def stop(self) -> None:
        """Stop the components, newest first (the API server before etcd)."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
            self._dynamic = None
        for c in reversed(self.components):
            c.stop()

    def logs(self) -> list[Path]:
        """Each component's log file."""
        return [c.log for c in self.components]


# --------------------------------------------------------------------------------------------
# pytest fixtures
# --------------------------------------------------------------------------------------------

_state: dict[str, Any] = {"failed": False, "workdir": None, "error": None}


def _uses_control_plane(item: pytest.Item) -> bool:
    return "control_plane" in getattr(item, "fixturenames", ())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Remember whether a test that used the control plane failed (its logs are then kept)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _uses_control_plane(item):
        _state["failed"] = True
    if (
        report.skipped
        and isinstance(report.longrepr, tuple)
        and report.longrepr[2].endswith(SKIP_REASON)
    ):
        # pytest -rs folds skips by place and reason: one line with a count for all of them,
        # the place being this module, instead of one line per test.
        report.longrepr = (__file__.removeprefix(os.getcwd() + os.sep), 1, report.longrepr[2])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Say where the control plane's logs are when they were kept (in the run's summary, also
    from a pytest-xdist worker, each of which has a control plane of its own)."""
    workdir = _state["workdir"]
    if workdir is not None and Path(workdir).exists():
        logs = ", ".join(sorted(p.name for p in Path(workdir).glob("*.log")))
        add_lines(session.config, "control plane", [f"logs kept in {workdir}: {logs}"])


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """The session's control plane, started the first time a test asks for it.

    Skips (one reason for all) without ``KUBEBUILDER_ASSETS``.
    """
    assets = assets_dir()
    if assets is None:
        pytest.skip(SKIP_REASON)
    # Under the repository's git-ignored .cache, not /tmp: nothing else cleans it up under us.
    cache = Path(__file__).resolve().parents[2] / ".cache" / "controlplane"
    cache.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=cache))
    _state["workdir"] = workdir
    plane = ControlPlane(assets=assets, workdir=workdir)
    try:
        plane.start()
    except BaseException:
        _state["failed"] = True
        raise
    try:
        yield plane
    finally:
        plane.stop()
        if not _state["failed"]:
            shutil.rmtree(workdir, ignore_errors=True)
            _state["workdir"] = None


def _needs_whole_plane(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "control_plane" in names and "live_cluster" not in names


@pytest.fixture(scope="module", autouse=True)
def _whole_control_plane_for_module(request: pytest.FixtureRequest) -> None:
    """As below, before a module's own fixtures (a module-scoped install needs the
    controller-manager too); the control plane is not started for a module that needs none."""
    if assets_dir() is None:
        return  # each test that needs the control plane skips on its own
    items = [i for i in request.session.items if getattr(i, "module", None) is request.module]
    if any(_needs_whole_plane(i) for i in items):
        plane = request.getfixturevalue("control_plane")
        plane.start_controllers()


@pytest.fixture(autouse=True)
def _whole_control_plane(request: pytest.FixtureRequest) -> None:
    """A test on the control plane finds its controller-manager and scheduler running, unless
    it uses ``live_cluster`` (tests/support/cluster.py), which stops them for its readers."""
    names = request.fixturenames
    if "control_plane" in names and "live_cluster" not in names:
        plane = request.getfixturevalue("control_plane")
        plane.start_controllers()


_counter = itertools.count(1)


def _dns_label(text: str, limit: int) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out[:limit].strip("-") or "t"


def create_namespace(plane: ControlPlane, prefix: str = "t") -> str:
    """Create a namespace named after ``prefix`` (unique) with its ``default`` ServiceAccount.

    The controller-manager would make the ServiceAccount a moment later; making it here lets
    a test create pods at once (the ServiceAccount admission plugin refuses them before).
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(plane.client)
    name = f"{_dns_label(prefix, 40)}-{next(_counter)}-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    except ApiException as e:
        if e.status != 409:
            raise
    return name


def delete_namespace(plane: ControlPlane, name: str) -> None:
    """Delete a namespace and everything in it; return once it is gone.

    As the namespace controller does, without its 5 s wait: the namespace is deleted first (the
    API server then refuses new objects in it, a ReplicaSet's next pod among them), then every
    namespaced kind as a collection, pods at once (no kubelet would ever finish them), again
    while objects are left (one with a finalizer goes when its controller releases it), and only
    then is the namespace finalized. Gone before the next test: a cluster-wide reader must not
    meet a namespace being terminated, nor what it held.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(plane.client)
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)
    deadline = time.monotonic() + 180
    left = [path.format(ns=name) for path in namespaced_collections(plane)]
    while left and time.monotonic() < deadline:
        # An empty answer: nothing was there. Otherwise look again: what had a finalizer stays.
        answered = {path: request(plane, "DELETE", path + NOW) for path in left}
        left = [
            path
            for path, answer in answered.items()
            if (answer is None or answer.get("items")) and holds(plane, path)
        ]
        if left:
            time.sleep(0.2)
    if not left:
        with contextlib.suppress(ApiException):
            core.replace_namespace_finalize(
                name, {"metadata": {"name": name}, "spec": {"finalizers": []}}
            )
    # Otherwise (something is still held after 180 s) the namespace controller finishes.

    def gone() -> bool:
        if namespace_gone(core, name):
            return True
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        return False

    wait_until(gone, timeout=180, poll=0.2)


def namespace_gone(core: Any, name: str) -> bool:
    """Whether the namespace ``name`` is gone: reading it answers 404 (``core``: a
    ``CoreV1Api``)."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespace(name)
    except ApiException as e:
        return bool(e.status == 404)
    return False


@pytest.fixture
def kube_namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own (its name), deleted after it, in a whole control plane
    (the controller-manager and the scheduler run: Deployments get pods, pods get nodes)."""
    control_plane.start_controllers()
    name = create_namespace(control_plane, request.node.name)
    try:
        yield name
    finally:
        if control_plane.alive():
            delete_namespace(control_plane, name)


def create_node(plane: ControlPlane, node: Mapping[str, Any]) -> dict[str, Any]:
    """Create ``node`` (a dict; read-only metadata dropped), then set its ``status`` with a
    PATCH of the status subresource, as the kubelet does. Returns the stored Node."""
    from kubernetes import client

    core = client.CoreV1Api(plane.client)
    body = copy.deepcopy(dict(node))
    status = body.pop("status", None)
    meta = body.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    core.create_node(body)
    if status:
        set_node_status(plane, meta["name"], status)
    return plane.client.sanitize_for_serialization(core.read_node(meta["name"]))  # type: ignore[no-any-return]


def set_node_status(plane: ControlPlane, name: str, status: Mapping[str, Any]) -> None:
    """Merge ``status`` into the Node's status (a strategic merge PATCH of ``/status``).

    What a restarted device plugin does to ``allocatable``, or the kubelet to ``conditions``.
    """
    from kubernetes import client

    client.CoreV1Api(plane.client).patch_node_status(name, {"status": dict(status)})


@pytest.fixture
def make_gpu_node(
    control_plane: ControlPlane, request: pytest.FixtureRequest
) -> Iterator[Callable[..., dict[str, Any]]]:
    """``make_gpu_node(name=None, *, labels, taints, gpus=1, resource, capacity, allocatable,
    ready=True, node=None)``: create a Node (see :func:`node_object`; or pass a whole ``node``
    dict, e.g. from ``tests.objects.gpu_node``) and return it as stored. The Nodes
    are deleted after the test."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    made: list[str] = []
    prefix = _dns_label(request.node.name, 30)

    def make(
        name: str | None = None, *, node: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        if node is None:
            node = node_object(name or f"{prefix}-{next(_counter)}", **kwargs)
        stored = create_node(control_plane, node)
        made.append(stored["metadata"]["name"])
        return stored

    try:
        yield make
    finally:
        if control_plane.alive():
            core = client.CoreV1Api(control_plane.client)
            for name in made:
                with contextlib.suppress(ApiException):
                    core.delete_node(name)


def webhook_configurations(
    url: str,
    ca_bundle: bytes,
    *,
    name: str,
    namespace: str | None = None,
    objects: Sequence[Mapping[str, Any]] = (),
    failure_policy: str = "Fail",
    timeout_seconds: int = 10,
) -> list[dict[str, Any]]:
    """Webhook configurations whose every webhook the API server calls at ``url`` + path.

    With ``objects`` (Mutating/ValidatingWebhookConfigurations, e.g. the chart's), each
    webhook's ``clientConfig`` becomes ``{"url": url + its service path, "caBundle": ...}``
    and the objects are renamed ``name``-<n>. Without, one mutating webhook (``/mutate``,
    pods CREATE) and one validating (``/validate``, pods CREATE and UPDATE). ``namespace``
    limits every webhook to that namespace (so parallel tests' webhooks never meet).
    """
    bundle = _b64(ca_bundle)
    base = url.rstrip("/")
    if not objects:
        objects = [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": f"{op}.gpu-policy.test",
                        "clientConfig": {"service": {"path": f"/{op}"}},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods"],
                                "operations": ops,
                                "scope": "Namespaced",
                            }
                        ],
                        "failurePolicy": failure_policy,
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": timeout_seconds,
                    }
                ],
            }
            for kind, op, ops in (
                ("MutatingWebhookConfiguration", "mutate", ["CREATE"]),
                ("ValidatingWebhookConfiguration", "validate", ["CREATE", "UPDATE"]),
            )
        ]
    out = []
    for i, obj in enumerate(objects):
        o = copy.deepcopy(dict(obj))
        o["metadata"] = {
            "name": f"{name}-{i}",
            "labels": dict(o.get("metadata", {}).get("labels") or {}),
        }
        for hook in o.get("webhooks", []):
            cc = hook.get("clientConfig", {})
            path = (
                cc.get("service", {}).get("path") or urllib.parse.urlsplit(cc.get("url", "")).path
            )
            hook["clientConfig"] = {"url": base + (path or "/"), "caBundle": bundle}
            if namespace is not None:
                hook["namespaceSelector"] = {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace}
                }
        out.append(o)
    return out


@pytest.fixture
def register_webhooks(
    control_plane: ControlPlane, request: pytest.FixtureRequest
) -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """``register_webhooks(url, ca_bundle, *, namespace=None, objects=(), failure_policy,
    timeout_seconds)``: create the configurations :func:`webhook_configurations` makes and
    return them as stored; they are deleted after the test.

    The API server starts calling a new configuration once its informer has seen it
    (usually well under a second): a test polls for the first call before asserting.
    """
    from kubernetes import client

    api = client.AdmissionregistrationV1Api(control_plane.client)
    made: list[tuple[str, str]] = []
    prefix = _dns_label(request.node.name, 40)

    def register(url: str, ca_bundle: bytes, **kwargs: Any) -> list[dict[str, Any]]:
        stored = []
        name = f"{prefix}-{next(_counter)}"
        for obj in webhook_configurations(url, ca_bundle, name=name, **kwargs):
            if obj["kind"] == "MutatingWebhookConfiguration":
                res = api.create_mutating_webhook_configuration(obj)
            else:
                res = api.create_validating_webhook_configuration(obj)
            made.append((obj["kind"], obj["metadata"]["name"]))
            stored.append(control_plane.client.sanitize_for_serialization(res))
        return stored

    try:
        yield register
    finally:
        if control_plane.alive():
            control_plane.delete_webhook_configurations(made)
