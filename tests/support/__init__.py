"""What the tests and the benchmarks share, and nothing else imports.

* ``controlplane``: a real control plane (etcd, kube-apiserver, controller-manager, scheduler
  from ``KUBEBUILDER_ASSETS``) and its pytest fixtures, loaded by ``tests/conftest.py``.
* ``cluster``: that control plane as a test drives it (objects in, RBAC, a restart, cleanup),
  through ``faultproxy`` (requests counted; 503s, delays, cut watches, bookmarks on demand).
* ``page_server``: paged lists of a generated 100,000-pod cluster, for the audit's benchmark.
* ``fake_http``: what the loopback servers share (the HTTP server, Status bodies, kubeconfigs).
* ``gunicorn``: the webhook (or a stand-in app) under gunicorn with our config over real TLS.
* ``procs``: stopping those processes, their workers and CPU time from /proc.
* ``waiting``: polling for state that has no event to wait on.

Tests import these as ``tests.support.<module>``; so do the scripts in bench/. Nothing here
imports a test module or bench/; objects are built with ``tests.objects``.
"""
