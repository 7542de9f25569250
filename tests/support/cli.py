"""The one way tests run ``gpu-policy`` as a user does: exit code, stdout, stderr.

``run_cli(ARGS)`` runs the command inside the pytest process by default: the CLI's own
``main(argv)`` with stdin, stdout and stderr, the working directory, the environment, the
root logger's handlers and the warning filters set up for the call as a fresh
``python -m webhook.cli ARGS`` would have them, and put back afterwards. It answers the same
``CompletedProcess[str]`` a process does (returncode, stdout, stderr), so an assertion reads the
same either way. A process pays Python's start and the CLI's imports, about 0.6 s of CPU per
command (docs/testing-control-plane.md, "Where the CPU goes"); in process a pytest worker pays
them once.

What the call sets up, and why each is needed for a second call to see what a fresh process
sees:

- ``sys.argv``, ``sys.stdin`` (the text given, else empty, as /dev/null) and ``sys.stdout`` /
  ``sys.stderr`` (and ``sys.__stdout__`` and the like, which argparse asks for the terminal's
  width): text buffers that are not terminals (``--colour auto`` paints nothing, help is 80
  columns wide, as on a pipe), newlines translated as ``subprocess``'s text mode does. They
  take what the calling thread and the threads it starts write; a thread that was running
  before the call (a test's fault proxy, a server's log follower) still writes where it did.
- ``os.environ``: ``env`` (else a copy of this process's environment) replaces the mapping for
  the call, so what the command reads or sets stays in the call. The C-level environment is
  not touched (no ``setenv`` under threads that may read it), so a process the command started
  would not see ``env``: the commands start none but ``serve``, which stays a process.
- The working directory: ``os.chdir(cwd)`` and back. It is the whole process's, so a
  background thread must not open relative paths during the call (none does).
- Logging: ``main`` calls ``logging.basicConfig``, which only adds a handler when the root
  logger has none, and pytest's log capture keeps one there. The root logger's handlers are
  taken away for the call, so the command's own handler is installed and writes to the call's
  stderr, then that handler is closed and the root logger's handlers and level put back.
- Warnings: Python's default filters (not pytest's) and a ``showwarning`` that writes to
  stderr, as a fresh interpreter prints them, inside ``warnings.catch_warnings``.
- Exit: ``main``'s return value, or ``SystemExit``'s code (argparse's ``--help`` and usage
  errors) as the interpreter turns it into a status; an uncaught exception gives 1 and its
  traceback on stderr. ``BaseException`` that is not ``SystemExit`` (pytest's timeout,
  Ctrl-C) is not a command's answer and goes up to pytest.

State the CLI keeps between calls is the import of its modules and of what they load on first
use (flask, kubernetes, cel), caches of pure functions in ``webhook.policy``, and the
``kubernetes`` package's temporary files of certificate data from a kubeconfig (kept by
content; pytest's own clients share them, so they stay until the process exits). None changes
what a command prints or returns. No command installs a signal handler. Of the environment
read at import, only ``kubernetes.config``'s default ``$KUBECONFIG`` is on a command's path,
and it goes unused: the commands always name the file (``default_kubeconfig`` in
``webhook/cli/common.py`` reads the variable when the command runs).

``run_cli(ARGS, process=True)`` starts a real process: ``python -m webhook.cli ARGS``. The
tests that keep a process are those where the process is what they prove:

- the entry points: ``tests/system/cli/test_cli_main.py`` (``gpu-policy review`` loads neither
  flask, gunicorn, kubernetes nor cel: a fresh interpreter's ``sys.modules``; ``kubectl
  gpu-policy`` runs the installed plugin), and in ``tests/cluster/kube`` the installed
  ``gpu-policy`` and ``kubectl-gpu_policy`` scripts reading ``$KUBECONFIG`` or a pod's
  environment (test_lister.py, test_audit_live.py);
- ``serve``, which replaces its process with gunicorn and runs until stopped
  (``tests/system/server/test_gunicorn.py``, ``tests/system/certs``, ``dra_demo.py``): a
  process of its own, stopped by a signal, its exit code read from the process;
- the chart's plain-manifest path and the end-to-end run (``tests/system/chart``,
  ``tests/system/e2e``), which run the installed command as an operator does, beside kubectl
  and helm;
- one smoke test per command family with ``process=True``: review (stdin from a pipe),
  inventory, audit, plan, migrate plan and test, so each still runs once as
  ``python -m webhook.cli`` from start to exit status.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TextIO

ROOT = Path(__file__).resolve().parents[2]

#: What ``python -m webhook.cli`` runs; the args of every answer, in process or not.
COMMAND = (sys.executable, "-m", "webhook.cli")

# Python's own warning filters when started with no -W and no -X dev (the Python docs,
# "Default Warning Filter"), in the order ``warnings.filters`` lists them.
_DEFAULT_FILTERS: tuple[tuple[Literal["default", "ignore"], type[Warning], str], ...] = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
)

# The streams a process starts with, under the names of sys that keep them.
_ORIGINAL_STREAMS = ("__stdin__", "__stdout__", "__stderr__")

# One call at a time: the redirections are the process's.
_ONE_CALL = threading.Lock()


def run_cli(
    *args: str,
    stdin: str | None = None,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    process: bool = False,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """``gpu-policy ARGS`` run from ``cwd`` with the environment ``env`` (default: this
    process's), in this process unless ``process`` (see the module's docstring).

    ``timeout`` only catches a process that hangs (under the run-wide 300 s, so the failure
    names the command): a command against the control plane took over 60 s under load. In
    process, the run-wide timeout stops a hang, its traceback through this call."""
    if process:
        return subprocess.run(
            [*COMMAND, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=cwd,
            env=None if env is None else dict(env),
            timeout=timeout,
            check=False,
        )
    from webhook.cli.main import main  # the CLI's import, once per pytest process

    with _ONE_CALL:
        others = frozenset(threading.enumerate()) - {threading.current_thread()}
        stdout, stderr = _CallStream(sys.stdout, others), _CallStream(sys.stderr, others)
        with _as_a_fresh_process(args, stdin, stdout, stderr, cwd, env):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = _exit_status(exc.code)
            except Exception as exc:  # what the interpreter does with an uncaught exception
                traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
                code = 1
    return subprocess.CompletedProcess(
        [*COMMAND, *args], code % 256, stdout.getvalue(), stderr.getvalue()
    )


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives a process: None 0, an int itself, else 1 with the
    code printed on stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _CallStream(io.StringIO):
    """The call's stdout or stderr: what the calling thread and the threads it starts write
    (the command's cluster watchers log from threads of their own). A thread that was already
    running when the call began (a test's fault proxy, a server's log follower) writes on to
    the stream it wrote to before. Not a terminal; newlines as a text pipe reads them."""

    def __init__(self, before: TextIO, others: frozenset[threading.Thread]) -> None:
        super().__init__(newline=None)
        self._before = before
        self._others = others

    def write(self, text: str) -> int:
        """Keep the call's text; pass on a background thread's."""
        if threading.current_thread() in self._others:
            return self._before.write(text)
        return super().write(text)


def _show_on_stderr(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # The interpreter's default: the formatted warning on the stderr of the moment.
    (sys.stderr if file is None else file).write(
        warnings.formatwarning(message, category, filename, lineno, line)
    )


@contextlib.contextmanager
def _as_a_fresh_process(
    args: tuple[str, ...],
    stdin: str | None,
    stdout: TextIO,
    stderr: TextIO,
    cwd: Path,
    env: Mapping[str, str] | None,
) -> Iterator[None]:
    """The process-wide state a fresh ``python -m webhook.cli`` starts with, for the call."""
    saved_streams = sys.argv, sys.stdin, sys.stdout, sys.stderr
    saved_originals = {name: getattr(sys, name) for name in _ORIGINAL_STREAMS}
    saved_environ, saved_cwd = os.environ, os.getcwd()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    sys.argv = [str(ROOT / "webhook" / "cli" / "__main__.py"), *args]
    sys.stdin = io.StringIO(stdin or "", newline=None)
    sys.stdout, sys.stderr = stdout, stderr
    # The process's own streams too: argparse sizes its help by sys.__stdout__'s terminal,
    # which for a process with a pipe (and for pytest's captured one) is none: 80 columns.
    for name, stream in zip(_ORIGINAL_STREAMS, (sys.stdin, stdout, stderr), strict=True):
        setattr(sys, name, stream)
    # A plain dict, and the C environment left alone on purpose (ruff's B003): what the command
    # reads and sets stays in the call, and no setenv runs beside other threads.
    call_environ: Any = dict(os.environ if env is None else env)
    os.environ = call_environ  # noqa: B003
    root.handlers, root.level = [], logging.WARNING
    try:
        os.chdir(cwd)
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_DEFAULT_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = _show_on_stderr
            yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = saved_handlers, saved_level
        os.chdir(saved_cwd)
        os.environ = saved_environ  # noqa: B003
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved_streams
        for name, stream in saved_originals.items():
            setattr(sys, name, stream)
