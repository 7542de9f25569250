#!/usr/bin/env python3
"""Build the container image from the Dockerfile, run it as the Helm chart runs it, check it.

No container registry is needed. The base image the Dockerfile names
(``python:3.11-slim-bookworm``, build argument ``PYTHON_IMAGE``) is replaced by a stand-in
made here from Debian packages: a minimal bookworm root filesystem with Python 3.11 and pip
(``mmdebstrap``), imported under a local name. The Dockerfile is then built as it is
(``buildah bud``) and the image runs the way the chart's Deployment runs it: user
65532:65532, read-only root filesystem, ``/tmp`` and ``/tmp/gpu-policy-metrics`` as the only
writable places (the chart's emptyDirs), no capabilities, the serving certificate mounted at
``/etc/gpu-policy/tls`` with the Secret volume's mode (0440, group 65532). The checks then
talk TLS to it, verified against the CA ``gpu-policy certs`` made (see ``CHECKS``).

Everything lives under ``.cache/image/`` (git-ignored): the container storage (the overlay
driver where this host can mount overlays, else vfs, which needs no mounts but copies every
layer; ``GPU_POLICY_IMAGE_STORAGE`` picks one), the generated ``containers.conf`` and
``storage.conf``, and the stand-in base image, tagged with a hash of its recipe so that later
runs reuse it. The build and run need root (rootful buildah and podman, chroot isolation, the
runc runtime).

Tools: ``buildah``, ``podman``, ``runc``, ``mmdebstrap``. When some are missing, this script
installs them with apt-get only if it runs as root and ``CI`` is true or
``GPU_POLICY_IMAGE_INSTALL=1``; otherwise it stops with a message naming what is missing (the
pytest test turns that into a skip). ``GPU_POLICY_IMAGE_CHECK=0`` turns the check off, with
the same kind of message. ``GPU_POLICY_IMAGE_MIRROR`` picks the Debian mirror.

Usage::

    sudo .venv/bin/python scripts/image_check.py [--report bench/results/image.txt] [--keep]

It prints the image size, the time and CPU each phase took and the load average (also
written to the report file), one line per check, and exits 0 when every check passed, 1 when
one failed, 2 when the check could not run (tools missing and not installable) and 3 when a
step failed (build, start).
To look at the image afterwards, export the two variables it prints and use podman.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "image"
REPORT = ROOT / "bench" / "results" / "image.txt"
EXAMPLE_REVIEW = ROOT / "examples" / "admissionreview-gpu-pod.json"

# The Debian packages that provide them have the same names.
TOOLS = ("buildah", "podman", "runc", "mmdebstrap")
INSTALL_ENV = "GPU_POLICY_IMAGE_INSTALL"
ENABLE_ENV = "GPU_POLICY_IMAGE_CHECK"
MIRROR_ENV = "GPU_POLICY_IMAGE_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

IMAGE = "localhost/gpu-policy-webhook:check"
BASE_REPOSITORY = "localhost/gpu-policy-base"
CONTAINER_PREFIX = "gpu-policy-image-check-"
USER = "65532:65532"
TLS_MOUNT = "/etc/gpu-policy/tls"
# The chart's emptyDirs (64Mi each); emptyDirs are world-writable, hence mode 1777.
TMPFS = ("/tmp", "/tmp/gpu-policy-metrics")  # noqa: S108 - paths inside the container
READY_TIMEOUT = 90.0

# The stand-in for python:3.11-slim-bookworm. What makes it behave like the official image:
# - python-is-python3: the Dockerfile runs `python -m pip`; Debian names the interpreter
#   python3 only, the official image has both names.
# - pip, setuptools and wheel from PyPI in /usr/local, installed without byte-compiling, as
#   the official image has them (docker-library/python, 3.11/slim-bookworm/Dockerfile: pip
#   from CPython's ensurepip, setuptools==79.0.1, wheel<0.46, --no-compile), not Debian's
#   python3-pip. Debian's pip 23.0.1 took twice the CPU of pip 26.3 to resolve the build
#   stage's dependencies (11.4 s of user CPU against 5.8 s; a profile put 40% of it in
#   matching each file of each index page against the supported wheel tags; pip 24.0 took
#   10 s), and it pulls in five more packages to unpack and byte-compile. The Dockerfile
#   names no pip version (docs/chart.md, "What the check costs").
# - EXTERNALLY-MANAGED removed: Debian's Python refuses pip installs into the system Python
#   (PEP 668); the official image's Python is not the distribution's, so pip installs there.
# - no Recommends, no manual pages, documentation or translations, and merged /usr without
#   the usrmerge package (which pulls in perl): about what debian:bookworm-slim keeps.
# - PATH and LANG set and CMD python3, as in the official image's configuration.
BASE_PACKAGES = ("python3", "python-is-python3", "ca-certificates")
BASE_PYTHON_PACKAGES = ("pip==26.3", "setuptools==79.0.1", "wheel==0.45.1")
# What dpkg leaves out (dpkg.cfg.d, as debian:bookworm-slim has it). They are written after
# mmdebstrap extracts the essential packages, not given as --dpkgopt: with --dpkgopt it
# filters that extraction through mmtarfilter, a Python process per package, which took a
# quarter of mmdebstrap's time. What the extraction brings of these paths is removed at the
# end (BASE_STRIP).
BASE_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
BASE_STRIP = (
    'rm -rf "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/*'
    ' && find "$1"/usr/share/doc -mindepth 1 -not -type d -not -name copyright -delete'
    ' && find "$1"/usr/share/doc -mindepth 1 -type d -empty -delete'
)
BASE_MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    '--aptopt=Apt::Install-Recommends "false"',
    "--extract-hook=printf '%s\\n' "
    + " ".join(f"'{line}'" for line in BASE_DPKG_EXCLUDES)
    + ' > "$1"/etc/dpkg/dpkg.cfg.d/slim',
    f"--customize-hook={BASE_STRIP}",
    '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
)
BASE_SUITE = "bookworm"
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)

# podman and buildah read these files through CONTAINERS_CONF and CONTAINERS_STORAGE_CONF.
# default_ulimits = []: podman otherwise raises the container's open-files limit, which some
# hosts (sandboxes, CI runners in containers) refuse: "runc create failed: ... error setting
# rlimit type 7: operation not permitted". runc: crun fails on hybrid cgroup v1/v2 layouts.
# cgroupfs: there may be no systemd to ask for cgroups.
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
STORAGE_CONF = """\
[storage]
driver = "{driver}"
graphroot = "{graphroot}"
runroot = "{runroot}"
"""
# overlay when this kernel and filesystem allow it: a container or a layer is then a mount on
# the layers below it. vfs works everywhere but copies every layer in full, for each build
# step's container, each commit and the running container: with a 150 MB base and a 220 MB
# layer on it that was about a third of the build's CPU. GPU_POLICY_IMAGE_STORAGE picks one.
STORAGE_ENV = "GPU_POLICY_IMAGE_STORAGE"
STORAGE_DRIVERS = ("overlay", "vfs")


class Unavailable(Exception):
    """The check cannot run here; the message names what is missing and how to get it."""


class StepFailed(Exception):
    """A step (install, base, build, start) failed; the message says which and why."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def missing_tools() -> list[str]:
    """The tools of ``TOOLS`` not found on PATH."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def refusal(
    env: Mapping[str, str], euid: int, missing: Sequence[str], apt_get: str | None
) -> str | None:
    """Why the check cannot run (a one-line message), or None when it can.

    ``missing`` tools are no reason when this process may install them: root, ``apt_get``
    (its path, None when there is none), and ``CI`` true or ``GPU_POLICY_IMAGE_INSTALL=1``.
    """
    if env.get(ENABLE_ENV, "").strip() == "0":
        return f"the container image check is turned off ({ENABLE_ENV}=0)"
    if not sys.platform.startswith("linux"):
        return f"the container image check needs Linux (this is {sys.platform})"
    packages = " ".join(missing)
    if euid != 0:
        also = f"; also missing: {packages} (apt-get install -y {packages})" if missing else ""
        return (
            "the container image check needs root (rootful buildah and podman, chroot "
            f"isolation): run `sudo .venv/bin/python scripts/image_check.py`{also}"
        )
    if not missing:
        return None
    if apt_get is None:
        return f"missing {', '.join(missing)}, and no apt-get to install them"
    if not (_truthy(env.get("CI")) or env.get(INSTALL_ENV, "").strip() == "1"):
        return (
            f"missing {', '.join(missing)}: install them with `apt-get install -y {packages}`, "
            f"or set {INSTALL_ENV}=1 (CI=true does the same) to let the check install them"
        )
    return None


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    what: str,
    log: Path | None = None,
    cwd: Path | None = None,
) -> str:
    """Run ``argv``, return its stdout; StepFailed names ``what`` and shows the output's end.

    With ``log``, stdout and stderr go to that file (kept for reading after a failure).
    """
    try:
        proc = subprocess.run(
            list(argv),
            env=None if env is None else dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,  # mmdebstrap reads a mirror list from a stdin that is no tty
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StepFailed(f"{what}: no answer after {timeout:.0f} s: {' '.join(argv)}") from exc
    except OSError as exc:
        raise StepFailed(f"{what}: could not run {argv[0]}: {exc}") from exc
    if log is not None:
        log.write_text(f"$ {' '.join(argv)}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode != 0:
        where = f" (whole output: {log})" if log is not None else ""
        raise StepFailed(
            f"{what} failed (exit {proc.returncode}){where}: {' '.join(argv)}\n"
            + _tail(proc.stdout + "\n" + proc.stderr)
        )
    return proc.stdout


def install_tools(missing: Sequence[str]) -> None:
    """apt-get update, then apt-get install the packages of the ``missing`` tools."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another job may be installing packages at the same time: wait for the dpkg lock.
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    run(["apt-get", *lock, "update", "-q"], env=env, what="apt-get update")
    run(["apt-get", *lock, "install", "-y", "-q", *missing], env=env, what="apt-get install")
    still = missing_tools()
    if still:
        raise StepFailed(f"apt-get installed {' '.join(missing)}, yet {', '.join(still)} missing")


def cpu_seconds() -> float:
    """CPU used so far by this process and by the children it has waited for (user + system).

    A child's CPU counts once it has been waited for, with that of every process it waited
    for in turn: buildah's RUN steps, mmdebstrap's dpkg. The container's processes do not
    count (conmon runs them, not this process).
    """
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Timings:
    """How long each phase took and the CPU it used, in order, with a note (cached, ...)."""

    phases: list[tuple[str, float, float, str]] = field(default_factory=list)

    @contextlib.contextmanager
    def phase(self, name: str, note: str = "") -> Iterator[list[str]]:
        """Time the block; it may append a note to the list it is given."""
        notes = [note] if note else []
        start, cpu = time.perf_counter(), cpu_seconds()
        try:
            yield notes
        finally:
            took = time.perf_counter() - start
            self.phases.append((name, took, cpu_seconds() - cpu, ", ".join(notes)))

    def line(self) -> str:
        """One line: each phase with its seconds, CPU seconds and note, then the totals."""
        parts = [
            f"{name} {took:.1f} s (cpu {cpu:.1f} s" + (f", {note})" if note else ")")
            for name, took, cpu, note in self.phases
        ]
        took = sum(phase[1] for phase in self.phases)
        cpu = sum(phase[2] for phase in self.phases)
        return f"phases: {', '.join(parts)}; total {took:.1f} s, cpu {cpu:.1f} s"


def overlay_mounts(directory: Path) -> bool:
    """Whether an overlay filesystem can be mounted on ``directory``'s filesystem here.

    Some hosts refuse it (a container without the privilege, a filesystem overlay cannot
    use as its upper layer); the mount is tried and undone at once.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix="overlay-probe-") as tmp:
        lower, upper, work, merged = (Path(tmp, name) for name in ("l", "u", "w", "m"))
        for path in (lower, upper, work, merged):
            path.mkdir()
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        try:
            mounted = subprocess.run(
                ["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
                capture_output=True,
                timeout=30,
                check=False,
            )
        except OSError:
            return False
        if mounted.returncode != 0:
            return False
        run(["umount", str(merged)], what="unmounting the overlay probe", timeout=30)
        return True


def storage_driver(env: Mapping[str, str], cache: Path) -> str:
    """The storage driver: ``GPU_POLICY_IMAGE_STORAGE`` if set, else overlay where it works."""
    chosen = env.get(STORAGE_ENV, "").strip()
    if chosen:
        if chosen not in STORAGE_DRIVERS:
            raise StepFailed(f"{STORAGE_ENV}={chosen}: use one of {', '.join(STORAGE_DRIVERS)}")
        return chosen
    return "overlay" if overlay_mounts(cache) else "vfs"


class Engine:
    """buildah and podman on this check's own storage (under ``cache``), rootful."""

    def __init__(self, cache: Path, driver: str = "vfs") -> None:
        self.cache = cache
        self.driver = driver
        cache.mkdir(parents=True, exist_ok=True)
        self.containers_conf = cache / "containers.conf"
        self.storage_conf = cache / "storage.conf"
        self.containers_conf.write_text(CONTAINERS_CONF)
        # One storage per driver: a storage made by one driver cannot be opened by the other.
        self.storage_conf.write_text(
            STORAGE_CONF.format(
                driver=driver,
                graphroot=cache / f"storage-{driver}",
                runroot=cache / f"run-{driver}",
            )
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }

    def exports(self) -> str:
        """The shell line that points podman and buildah at this storage."""
        return (
            f"export CONTAINERS_CONF={self.containers_conf} "
            f"CONTAINERS_STORAGE_CONF={self.storage_conf}"
        )

    def podman(self, *args: str, what: str, timeout: float = 600, log: Path | None = None) -> str:
        """Run ``podman ARGS`` on this storage; StepFailed on a non-zero exit."""
        return run(["podman", *args], env=self.env, what=what, timeout=timeout, log=log)

    def buildah(self, *args: str, what: str, timeout: float = 1200, log: Path | None = None) -> str:
        """Run ``buildah ARGS`` on this storage; StepFailed on a non-zero exit."""
        return run(["buildah", *args], env=self.env, what=what, timeout=timeout, log=log)

    def image_size(self, ref: str) -> int:
        """The image's size in bytes, as podman counts it (uncompressed layers)."""
        out = self.podman("image", "inspect", "--format", "{{.Size}}", ref, what="image size")
        return int(out.strip())

    def has_image(self, ref: str) -> bool:
        """Whether ``ref`` is in this storage."""
        proc = subprocess.run(
            ["podman", "image", "exists", ref],
            env=self.env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        return proc.returncode == 0

    def image_refs(self, repository: str) -> list[str]:
        """The ``repository:tag`` names in this storage for ``repository``."""
        out = self.podman(
            "images", "--format", "{{.Repository}}:{{.Tag}}", repository, what="list images"
        )
        return [line for line in out.split() if line.startswith(repository + ":")]


def base_recipe() -> dict[str, Any]:
    """What the stand-in base is made from: its cache key is the hash of this."""
    return {
        "suite": BASE_SUITE,
        "packages": list(BASE_PACKAGES),
        "python_packages": list(BASE_PYTHON_PACKAGES),
        "options": list(BASE_MMDEBSTRAP_OPTIONS),
        "changes": list(BASE_CHANGES),
    }


def base_ref() -> str:
    """The local name of the stand-in base: the repository, tagged with the recipe's hash."""
    digest = hashlib.sha256(json.dumps(base_recipe(), sort_keys=True).encode()).hexdigest()
    return f"{BASE_REPOSITORY}:{BASE_SUITE}-{digest[:12]}"


def ensure_base(engine: Engine, mirror: str, notes: list[str]) -> str:
    """Make the stand-in base image unless this storage has it already; return its name.

    Base images of older recipes are removed (each takes about 140 MB).
    """
    ref = base_ref()
    if engine.has_image(ref):
        notes.append("cached")
        return ref
    wheels = engine.cache / "base-wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    # This environment's pip fetches them (its index, its CA bundle): the stand-in's Python
    # gets pip from a wheel of pip itself, with no network inside the root filesystem.
    run(
        [
            *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
            *("--only-binary=:all:", "--dest", str(wheels), *BASE_PYTHON_PACKAGES),
        ],
        what="pip download of the base's pip, setuptools and wheel",
        timeout=300,
    )
    (pip_wheel,) = wheels.glob("pip-*.whl")
    inside = "/tmp/base-wheels"  # noqa: S108 - a path inside the root filesystem being made
    install = (
        f'chroot "$1" python3 {inside}/{pip_wheel.name}/pip install --quiet --no-index'
        f" --no-compile --no-cache-dir --disable-pip-version-check --root-user-action=ignore"
        f" --find-links {inside} {' '.join(BASE_PYTHON_PACKAGES)}"
    )
    tarball = engine.cache / "base.tar"
    run(
        [
            "mmdebstrap",
            *BASE_MMDEBSTRAP_OPTIONS,
            f"--customize-hook=copy-in {wheels} /tmp",
            f"--customize-hook={install}",
            f'--customize-hook=rm -rf "$1"{inside}',
            f"--include={','.join(BASE_PACKAGES)}",
            "--format=tar",
            BASE_SUITE,
            str(tarball),
            mirror,
        ],
        what=f"mmdebstrap (Debian {BASE_SUITE} from {mirror})",
        log=engine.cache / "mmdebstrap.log",
        timeout=900,
    )
    try:
        changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
        engine.podman("import", *changes, str(tarball), ref, what="podman import of the base")
    finally:
        tarball.unlink(missing_ok=True)
        shutil.rmtree(wheels, ignore_errors=True)
    for old in engine.image_refs(BASE_REPOSITORY):
        if old != ref:
            engine.podman("rmi", old, what=f"removing the old base {old}")
    notes.append("made with mmdebstrap")
    return ref


def host_ca_bundle(env: Mapping[str, str]) -> Path | None:
    """The CA bundle this machine trusts (SSL_CERT_FILE, PIP_CERT, or OpenSSL's default)."""
    candidates = [
        env.get("SSL_CERT_FILE"),
        env.get("PIP_CERT"),
        ssl.get_default_verify_paths().cafile,
    ]
    candidates.append("/etc/ssl/certs/ca-certificates.crt")
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def build(engine: Engine, base: str, context: Path) -> None:
    """``buildah bud`` the Dockerfile as it is, on the stand-in base, tagged ``IMAGE``."""
    args = ["bud", "--isolation", "chroot", "--build-arg", f"PYTHON_IMAGE={base}"]
    bundle = host_ca_bundle(os.environ)
    if bundle is not None:
        # The build stage's pip fetches the dependencies from PyPI; through a TLS-inspecting
        # proxy it must trust the proxy's CA, which the host's bundle has and Debian's does
        # not. The bundle is mounted for the RUN steps only: nothing of it goes in the image.
        args += ["--volume", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro"]
    args += ["--tag", IMAGE, "--file", str(context / "Dockerfile"), str(context)]
    engine.buildah(*args, what="buildah bud of the Dockerfile", log=engine.cache / "build.log")
    # The previous build's image lost its tag: drop it (with vfs, a full copy of every layer).
    engine.podman("image", "prune", "--force", what="podman image prune")


def make_tls(directory: Path) -> tuple[Path, Path]:
    """Certificates from ``gpu-policy certs``: return (the CA file, the directory to mount).

    The mounted directory holds tls.crt and tls.key only, owned by root, group 65532, mode
    0440: what the chart's Secret volume gives the pod (defaultMode 0440, fsGroup 65532).
    """
    certs = directory / "certs"
    run(
        [sys.executable, "-m", "webhook.cli", "certs", "--out", str(certs)],
        what="gpu-policy certs",
        cwd=ROOT,
    )
    mount = directory / "tls"
    mount.mkdir()
    mount.chmod(0o755)
    gid = int(USER.split(":")[1])
    for name in ("tls.crt", "tls.key"):
        target = mount / name
        shutil.copyfile(certs / name, target)
        os.chown(target, 0, gid)
        target.chmod(0o440)
    return certs / "ca.crt", mount


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Response:
    """An HTTP answer: status and body."""

    status: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass
class Container:
    """The running image: its name, the port it serves on, and the CA to verify it with."""

    engine: Engine
    name: str
    port: int
    ca: Path

    def request(self, method: str, path: str, body: bytes | None = None) -> Response:
        """One HTTPS request, the server's certificate verified against ``ca``."""
        context = ssl.create_default_context(cafile=str(self.ca))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            return Response(answer.status, answer.read())
        finally:
            conn.close()

    def state(self) -> str:
        """podman's status of the container (running, exited, ...)."""
        return self.engine.podman(
            "inspect", "--format", "{{.State.Status}}", self.name, what="container state"
        ).strip()

    def logs(self) -> str:
        """The container's output so far."""
        proc = subprocess.run(
            ["podman", "logs", self.name],
            env=self.engine.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return proc.stdout + proc.stderr

    def exec(self, *argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the container (as ``user``, default the image's) and return it."""
        cmd = ["podman", "exec", *(["--user", user] if user else []), self.name, *argv]
        return subprocess.run(
            cmd, env=self.engine.env, capture_output=True, text=True, timeout=60, check=False
        )

    def host_pids(self) -> list[int]:
        """The container's main process and its descendants, as host process ids."""
        main = int(
            self.engine.podman(
                "inspect", "--format", "{{.State.Pid}}", self.name, what="container pid"
            ).strip()
        )
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                # The command name (in parentheses) may hold spaces: split after it.
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        pids, frontier = [main], [main]
        while frontier:
            frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
            pids += frontier
        return pids

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until /healthz answers 200; StepFailed with the logs if it stops or times out."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                answer = self.request("GET", "/healthz")
                if answer.status == 200:
                    return
                last = f"HTTP {answer.status}"
            except (OSError, http.client.HTTPException) as exc:
                last = str(exc)
            state = self.state()
            if state != "running":
                raise StepFailed(f"the container stopped ({state}):\n{_tail(self.logs())}")
            time.sleep(0.2)
        raise StepFailed(
            f"no 200 from /healthz within {timeout:.0f} s (last: {last}):\n{_tail(self.logs())}"
        )

    def remove(self) -> None:
        """Stop and remove the container (gunicorn gets SIGTERM, 5 s to stop)."""
        self.engine.podman("rm", "--force", "--time", "5", self.name, what="podman rm")


def remove_leftovers(engine: Engine) -> None:
    """Remove containers an interrupted earlier run of this check left in its storage."""
    out = engine.podman("ps", "--all", "--format", "{{.Names}}", what="list containers", timeout=60)
    for name in out.split():
        if name.startswith(CONTAINER_PREFIX):
            engine.podman("rm", "--force", "--time", "0", name, what=f"removing {name}")
    # An interrupted build leaves buildah's working containers, mounted with overlay. The
    # storage is this check's alone (and locked), so all of them go.
    engine.buildah("rm", "--all", what="removing the build's leftover containers", timeout=120)


def start(engine: Engine, ca: Path, tls: Path) -> Container:
    """Run ``IMAGE`` as the chart's Deployment runs it, on a free port of the host network."""
    port = free_port()
    name = f"{CONTAINER_PREFIX}{os.getpid()}"
    tmpfs = [arg for path in TMPFS for arg in ("--tmpfs", f"{path}:rw,size=64m,mode=1777")]
    engine.podman(
        "run",
        "--detach",
        "--name",
        name,
        "--user",
        USER,
        "--read-only",
        # podman's --read-only otherwise adds tmpfs on /run, /tmp and /var/tmp; the chart
        # gives exactly the emptyDirs below.
        "--read-only-tmpfs=false",
        *tmpfs,
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--network",
        "host",
        # On the host network, port 8443 may be taken: the contract's variable moves it.
        "--env",
        f"GPU_POLICY_BIND=127.0.0.1:{port}",
        "--volume",
        f"{tls}:{TLS_MOUNT}:ro",
        IMAGE,
        what="podman run",
    )
    container = Container(engine, name, port, ca)
    try:
        container.wait_ready()
    except BaseException:
        container.remove()
        raise
    return container


# --------------------------------------------------------------------------------------------
# The checks: each returns None when the container behaves, else what is wrong (one message).
# --------------------------------------------------------------------------------------------


def _expect_200(container: Container, path: str) -> str | None:
    answer = container.request("GET", path)
    if answer.status != 200:
        return f"GET {path}: HTTP {answer.status}: {answer.body[:300]!r}"
    return None


def check_healthz(container: Container) -> str | None:
    """GET /healthz answers 200 over TLS verified against the generated CA."""
    return _expect_200(container, "/healthz")


def check_readyz(container: Container) -> str | None:
    """GET /readyz answers 200: policy loaded, certificate valid."""
    return _expect_200(container, "/readyz")


def check_mutate(container: Container) -> str | None:
    """POST /mutate with the example GPU pod: allowed, the uid echoed, a JSON Patch that applies.

    The bundled example policy adds the ``nvidia.com/gpu`` toleration: the patched pod has it.
    """
    import jsonpatch  # a dependency of the project, so in the environment running the checks

    review = json.loads(EXAMPLE_REVIEW.read_text())
    answer = container.request("POST", "/mutate", EXAMPLE_REVIEW.read_bytes())
    if answer.status != 200:
        return f"POST /mutate: HTTP {answer.status}: {answer.body[:300]!r}"
    response = answer.json().get("response", {})
    uid = review["request"]["uid"]
    problems = []
    if response.get("uid") != uid:
        problems.append(f"uid {response.get('uid')!r}, sent {uid!r}")
    if response.get("allowed") is not True:
        problems.append(f"allowed is {response.get('allowed')!r}")
    if response.get("patchType") != "JSONPatch" or not response.get("patch"):
        problems.append(f"no JSON Patch (patchType {response.get('patchType')!r})")
    else:
        patch = json.loads(base64.b64decode(response["patch"]))
        pod = jsonpatch.apply_patch(review["request"]["object"], patch)
        keys = [t.get("key") for t in pod["spec"].get("tolerations", [])]
        if "nvidia.com/gpu" not in keys:
            problems.append(f"the patched pod has no nvidia.com/gpu toleration: {keys}")
    return "; ".join(problems) or None


def check_metrics(container: Container) -> str | None:
    """GET /metrics counts the review: prometheus_client writes its files on the /tmp emptyDir.

    Each worker adds its reviews once a second: wait up to 5 s for the count.
    """
    deadline = time.monotonic() + 5
    while True:
        answer = container.request("GET", "/metrics")
        if answer.status != 200:
            return f"GET /metrics: HTTP {answer.status}: {answer.body[:300]!r}"
        samples = [
            line
            for line in answer.body.decode().splitlines()
            if line.startswith("gpu_policy_reviews_total{") and 'endpoint="mutate"' in line
        ]
        if any(float(line.rsplit(" ", 1)[1]) >= 1 for line in samples):
            return None
        if time.monotonic() > deadline:
            return f"no gpu_policy_reviews_total for mutate after a review: {samples}"
        time.sleep(0.5)


def check_user(container: Container) -> str | None:
    """The server's processes (gunicorn and its workers) run as uid and gid 65532."""
    want = USER.split(":")
    wrong = []
    pids = container.host_pids()
    for pid in pids:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        ids = {line[:3]: line.split()[1:] for line in status if line[:4] in ("Uid:", "Gid:")}
        if set(ids["Uid"]) != {want[0]} or set(ids["Gid"]) != {want[1]}:
            wrong.append(f"pid {pid}: uid {ids['Uid']}, gid {ids['Gid']}")
    if len(pids) < 2:
        wrong.append(f"only {len(pids)} process: gunicorn should have started its workers")
    return "; ".join(wrong) or None


def check_read_only_root(container: Container) -> str | None:
    """Even root inside the container cannot write to / (the root filesystem is read-only)."""
    proc = container.exec("touch", "/gpu-policy-write-test", user="0")
    if proc.returncode == 0:
        return "root wrote /gpu-policy-write-test: the root filesystem is writable"
    if "Read-only file system" not in proc.stderr:
        return f"touch / failed for another reason than a read-only root: {proc.stderr.strip()}"
    return None


def check_tmp_writable(container: Container) -> str | None:
    """User 65532 can write to /tmp, the chart's emptyDir."""
    proc = container.exec("touch", "/tmp/gpu-policy-write-test")  # noqa: S108 - in the container
    if proc.returncode != 0:
        return f"touch /tmp/gpu-policy-write-test as {USER}: {proc.stderr.strip()}"
    return None


CHECKS: tuple[tuple[str, Callable[[Container], str | None]], ...] = (
    ("healthz", check_healthz),
    ("readyz", check_readyz),
    ("mutate", check_mutate),
    ("metrics", check_metrics),
    ("user-65532", check_user),
    ("read-only-root", check_read_only_root),
    ("tmp-writable", check_tmp_writable),
)


# --------------------------------------------------------------------------------------------
# The session: tools, base, build, start; then the report.
# --------------------------------------------------------------------------------------------


@dataclass
class Session:
    """One image check: the running container, the sizes, and the timings so far."""

    engine: Engine
    container: Container
    base: str
    image_bytes: int
    base_bytes: int
    timings: Timings
    workdir: Path
    lock: Any

    def report(self) -> list[str]:
        """The summary lines: image size (and the base's), the phases' durations."""
        mb = 1e6
        return [
            f"image {IMAGE}: {self.image_bytes / mb:.1f} MB (base {self.base}: "
            f"{self.base_bytes / mb:.1f} MB; the project and its dependencies add "
            f"{(self.image_bytes - self.base_bytes) / mb:.1f} MB; storage driver "
            f"{self.engine.driver})",
            self.timings.line(),
            # The machine may be shared: the times mean little without the load beside them.
            "load average at the end (1, 5, 15 min): "
            + " ".join(f"{load:.2f}" for load in os.getloadavg()),
        ]

    def close(self, keep: bool = False) -> None:
        """Remove the container and its certificates (unless ``keep``); timed as 'cleanup'."""
        with self.timings.phase("cleanup"):
            try:
                if not keep:
                    self.container.remove()
            finally:
                if not keep:
                    shutil.rmtree(self.workdir, ignore_errors=True)
                self.lock.close()


def prepare(timings: Timings, env: Mapping[str, str] | None = None) -> Session:
    """Get the tools, the base and the image, and start the container.

    Unavailable when the check cannot run here; StepFailed when a step fails.
    """
    env = os.environ if env is None else env
    missing = missing_tools()
    reason = refusal(env, os.geteuid(), missing, shutil.which("apt-get"))
    if reason is not None:
        raise Unavailable(reason)
    with timings.phase("tools") as notes:
        if missing:
            install_tools(missing)
            notes.append(f"installed {' '.join(missing)}")
        else:
            notes.append("present")
    engine = Engine(CACHE, storage_driver(env, CACHE))
    # One check at a time per checkout: they share the storage and the image's name.
    lock = (CACHE / "lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-policy-image-"))
    try:
        remove_leftovers(engine)
        with timings.phase("base") as notes:
            base = ensure_base(engine, env.get(MIRROR_ENV, "").strip() or DEFAULT_MIRROR, notes)
        with timings.phase("build"):
            build(engine, base, ROOT)
        image_bytes, base_bytes = engine.image_size(IMAGE), engine.image_size(base)
        with timings.phase("start"):
            ca, tls = make_tls(workdir)
            container = start(engine, ca, tls)
        return Session(
            engine=engine,
            container=container,
            base=base,
            image_bytes=image_bytes,
            base_bytes=base_bytes,
            timings=timings,
            workdir=workdir,
            lock=lock,
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        lock.close()
        raise


def write_report(lines: Sequence[str], path: Path = REPORT) -> None:
    """Write the summary lines to ``path`` (git-ignored bench/results), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the whole check from the command line; the exit status is in the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, default=REPORT, help="summary file")
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    args = parser.parse_args(argv)
    timings = Timings()
    try:
        session = prepare(timings)
    except Unavailable as exc:
        print(f"image check not run: {exc}", file=sys.stderr)
        return 2
    except StepFailed as exc:
        print(f"image check: {exc}", file=sys.stderr)
        return 3
    failures = 0
    try:
        with timings.phase("checks"):
            for name, check in CHECKS:
                try:
                    problem = check(session.container)
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                failures += problem is not None
                print(f"FAIL {name}: {problem}" if problem else f"PASS {name}")
    finally:
        session.close(keep=args.keep)
    lines = session.report()
    if args.keep:
        lines.append(
            f"container {session.container.name} left running on "
            f"https://127.0.0.1:{session.container.port}, CA {session.container.ca}; "
            f"remove it with: podman rm --force {session.container.name}"
        )
    lines.append(f"podman and buildah on this storage: {session.engine.exports()}")
    write_report(lines, args.report)
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
