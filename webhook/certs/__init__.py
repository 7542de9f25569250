"""The webhook's TLS certificates: ``issue`` makes them, ``serving`` serves and reloads them.

``webhook.certs.issue`` (a CA, serving and client certificates, written atomically) is what
``gpu-policy certs``, the tests and the benchmarks use; ``webhook.certs.serving`` (a server SSL
context that follows its files, and the certificate's readiness) is what the gunicorn config
uses. Neither imports flask, gunicorn or kubernetes.
"""
