"""The webhook's TLS certificates: ``issue`` makes them, ``serving`` serves and reloads them,
``rotation`` and ``manager`` run the self-managed mode (``certificates.mode: selfManaged``).

``webhook.certs.issue`` (a CA, serving and client certificates, written atomically) is what
``gpu-policy certs``, the tests and the benchmarks use; ``webhook.certs.serving`` (a server SSL
context that follows its files, and the certificate's readiness) is what the gunicorn config
uses. ``webhook.certs.rotation`` decides, from a Secret's content and the clock, what the
self-managed mode's Secret and caBundles should hold; ``webhook.certs.manager`` applies that
through a store the server gives it (``webhook.kube.certs``). None of them imports flask,
gunicorn or kubernetes.
"""
