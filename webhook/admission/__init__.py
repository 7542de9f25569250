"""PURE: AdmissionReview v1 in, AdmissionReview v1 out (uid, verdict, patch, warnings).

No flask, kubernetes, gunicorn or prometheus_client here (an import-linter contract checks
it): the web layer hands this package the request body and sends back ``Outcome.body``::

    from webhook.admission import RequestError, handle

    try:
        outcome = handle("validate", body, policy=policy, inventory=inventory)
    except RequestError as e:
        ...  # HTTP e.status (400 or 413) with str(e)
    ...  # HTTP outcome.http_status with outcome.body

The server calls ``reply`` instead, whose answer may come before its Outcome (an answer kept
for a repeated pod is sent before the request is decoded: ``memo``).

``request`` reads the AdmissionReview, ``handler`` answers it for each endpoint, and
``response`` builds the four answers (allowed, denied, patched, errored). Which requests reach
the engine at all is decided in ``webhook.policy.engine.scope``, beside ``review()``'s own rules.
"""

from webhook.admission.handler import (
    ENDPOINTS,
    Endpoint,
    Outcome,
    Reply,
    Verdict,
    handle,
    mutate,
    reply,
    respond,
    validate,
)
from webhook.admission.request import (
    MAX_BODY_BYTES,
    AdmissionRequest,
    RequestError,
    decode,
    parse_review,
)
from webhook.admission.response import clean_warnings
from webhook.policy.engine.scope import VALIDATED_KINDS

__all__ = [
    "ENDPOINTS",
    "MAX_BODY_BYTES",
    "VALIDATED_KINDS",
    "AdmissionRequest",
    "Endpoint",
    "Outcome",
    "Reply",
    "RequestError",
    "Verdict",
    "clean_warnings",
    "decode",
    "handle",
    "mutate",
    "parse_review",
    "reply",
    "respond",
    "validate",
]
