"""The webhook as a real server for the robustness tests: start, talk to, check, stop.

``start_server`` runs the webhook under gunicorn with our config (``tests.support.gunicorn``)
on a free loopback port, with certificates from ``webhook.certs.issue`` and only the
environment variables of docs/contracts.md, and waits until it answers and every worker is
up. Clients verify the server against the CA and keep their connections alive, as the API
server does.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonpatch

from tests.support.gunicorn import REPO, Server, start, stop
from webhook.certs import issue

__all__ = [
    "FUZZ_TALLY",
    "REPO",
    "Server",
    "check_answer",
    "post",
    "start_server",
    "stop_server",
]

JSON = {"Content-Type": "application/json"}
#: status (or "connection error") -> how many fuzz inputs got it, for the run summary.
FUZZ_TALLY: Counter[str] = Counter()


def start_server(tmp: Path, *, workers: int = 2, threads: int = 2, **extra: str) -> Server:
    """gunicorn on a free port with certificates in ``tmp/tls``; ``extra``: more env vars."""
    return start(tmp, issue.write_certs(tmp / "tls"), workers=workers, threads=threads, **extra)


def stop_server(server: Server) -> None:
    """Stop the server started by ``start_server``."""
    stop(server, 30)


def post(conn: http.client.HTTPSConnection, path: str, body: bytes) -> tuple[int, str, bytes]:
    """POST ``body``; (status, Content-Type, body). Connection errors propagate."""
    conn.request("POST", path, body=body, headers=JSON)
    resp = conn.getresponse()
    return resp.status, resp.getheader("Content-Type", ""), resp.read()


def check_answer(sent: Any, status: int, content_type: str, data: bytes) -> dict[str, Any] | None:
    """What holds for every answer to client input; returns the AdmissionReview response.

    ``sent`` is the decoded document that was sent (None when the body was not JSON). No
    status is 5xx (the engine-error 500 included: no input may trigger it); a 200 is a valid
    AdmissionReview v1 for the sent uid whose patch, if any, applies to the sent object; every
    other answer is a 4xx with one line of text.
    """
    assert status < 500, (status, data[:500])
    if status != 200:
        assert 400 <= status < 500, (status, data[:300])
        assert content_type.startswith("text/plain"), content_type
        text = data.decode()
        assert text.endswith("\n") and text.count("\n") == 1, text[:300]
        assert "Traceback" not in text
        return None
    assert content_type.startswith("application/json"), content_type
    review = json.loads(data)
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert isinstance(response["allowed"], bool)
    assert isinstance(sent, dict)
    assert response["uid"] == sent["request"]["uid"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        assert isinstance(ops, list) and ops
        jsonpatch.apply_patch(sent["request"]["object"], ops)  # raises if it does not apply
    if not response["allowed"]:
        assert 400 <= response["status"]["code"] < 500
    return dict(response)
