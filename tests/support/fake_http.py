"""What the loopback HTTP servers of the tests share: the HTTP server, JSON answers, Status,
kubeconfig (the page server of the audit's benchmark, the release site of the control-plane
script's tests).

:class:`LoopbackServer` runs a ``ThreadingHTTPServer`` on 127.0.0.1 (port chosen by the
kernel, kept across restarts) in a daemon thread, plain HTTP or, given an ``ssl.SSLContext``,
HTTPS; its request handler class, a subclass of
:class:`JsonHandler`, reaches the fake as ``self.fake``. Standard library only.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Self


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status as the API server sends it with an error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def kubeconfig(
    url: str, users: Mapping[str, dict[str, Any]], contexts: Mapping[str, dict[str, Any]]
) -> str:
    """A kubeconfig (JSON, which kubeconfig loaders read as YAML) for one cluster at ``url``.

    ``users`` maps a user name to its credentials, ``contexts`` a context name to its
    ``user`` (and ``namespace``); the first context is the current one.
    """
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": name, "user": user} for name, user in users.items()],
            "contexts": [
                {"name": name, "context": {"cluster": "fake", **context}}
                for name, context in contexts.items()
            ],
            "current-context": next(iter(contexts)),
        }
    )


class JsonHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, chunked answers, as the real server), quiet, JSON answers."""

    fake: Any  # the LoopbackServer, set on the subclass made in LoopbackServer.listen
    protocol_version = "HTTP/1.1"

    def handle(self) -> None:
        """Serve the connection; a TLS handshake the client breaks off ends it quietly."""
        try:
            super().handle()
        except ssl.SSLError:
            # A client that does not trust the certificate: what a test may want to see.
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test run would otherwise print a line per request."""

    def send_json(self, code: int, body: bytes, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Answer ``code`` with the JSON ``body`` (and extra ``headers``)."""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class LoopbackServer:
    """An HTTP server on 127.0.0.1 in a daemon thread, serving ``handler``'s requests."""

    handler: ClassVar[type[JsonHandler]]

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: serve HTTPS with it instead of plain HTTP."""
        self.ssl_context = ssl_context
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL: what a kubeconfig's ``server`` or a client's host is."""
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.listen()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig for this server (no credentials) in ``directory``; its path."""
        path = directory / "kubeconfig"
        path.write_text(kubeconfig(self.url, {"me": {}}, {"fake": {"user": "me"}}))
        return path

    def listen(self) -> None:
        """Listen (port 0 the first time, the same port again after :meth:`close`)."""
        handler = type("Handler", (self.handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._httpd.daemon_threads = True
        if self.ssl_context is not None:
            # The handshake runs in the handler's thread (on its first read), not in accept.
            self._httpd.socket = self.ssl_context.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop listening (connections already open are the caller's to cut)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
