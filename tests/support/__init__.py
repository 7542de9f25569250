"""What the tests and the benchmarks share, and nothing else imports.

* ``controlplane``: a real control plane (etcd, kube-apiserver, controller-manager, scheduler
  from ``KUBEBUILDER_ASSETS``) and its pytest fixtures, loaded by ``tests/conftest.py``.
* ``cluster``: that control plane as a test drives it (objects in, RBAC, a restart, cleanup),
  through ``faultproxy`` (requests counted; 503s, delays, cut watches, bookmarks on demand).
* ``apiserver``: a loopback fake of the Kubernetes API server (list/watch of Nodes, Pods and
  ConfigMaps), for the scale benchmarks and the tests not yet on the real one; ``objects``
  builds realistic objects for both.
* ``fake_http``: what the fakes share (the HTTP server, Status bodies, kubeconfigs).
* ``gunicorn``: the webhook (or a stand-in app) under gunicorn with our config over real TLS.
* ``procs``: stopping those processes, their workers and CPU time from /proc.
* ``waiting``: polling for state that has no event to wait on.

Tests import these as ``tests.support.<module>``; so do the scripts in bench/. Nothing here
imports a test module or bench/.
"""
