"""What a failed call to the API server says: for a log line, a message, a retry.

One home for reading the client's exceptions, used by the watcher (``watcher.py``), the
audit's listing (``lister.py``), its reports (``reports.py``) and the certificate store
(``certs.py``).
"""

from __future__ import annotations

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

__all__ = ["describe_failure", "retry_after", "status_message", "unreachable"]


def describe_failure(exc: BaseException) -> str:
    """The failure in a few words: ``HTTP 403 Forbidden``, or the connection error."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason or ''}".strip()
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return f"{type(exc.reason).__name__}: {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def status_message(exc: ApiException) -> str:
    """The API server's Status message (``... is forbidden: ...``), after a colon."""
    try:
        message = orjson.loads(exc.body or b"{}").get("message")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    return f": {message}" if message else ""


def unreachable(exc: BaseException) -> bool:
    """Whether a failure says the API server cannot be reached (vs. it said no)."""
    if isinstance(exc, ApiException):
        # 0: the client never got an HTTP status; 5xx: the server (or a proxy) is in trouble.
        return exc.status is None or exc.status == 0 or exc.status >= 500
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


def retry_after(exc: BaseException) -> float:
    """The seconds a ``Retry-After`` header asks to wait (0 without one)."""
    headers = getattr(exc, "headers", None)
    try:
        return float(headers.get("Retry-After", 0)) if headers else 0.0
    except (TypeError, ValueError):
        return 0.0
