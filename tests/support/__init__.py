"""What the tests and the benchmarks share, and nothing else imports.

* ``apiserver``: a loopback fake of the Kubernetes API server (list/watch of Nodes, Pods and
  ConfigMaps) that the real ``kubernetes`` client drives; ``objects`` builds what it serves.
* ``dryrun_apiserver``: a loopback fake answering dry-run creates with our webhook as its
  admission chain (``gpu-policy test --kubeconfig``).
* ``controlplane``: a real control plane (etcd, kube-apiserver, controller-manager, scheduler
  from ``KUBEBUILDER_ASSETS``) and its pytest fixtures, loaded by ``tests/conftest.py``.
* ``fake_http``: what the two fakes share (the HTTP server, Status bodies, kubeconfigs).
* ``gunicorn``: the webhook (or a stand-in app) under gunicorn with our config over real TLS.
* ``procs``: stopping those processes, their workers and CPU time from /proc.
* ``waiting``: polling for state that has no event to wait on.

Tests import these as ``tests.support.<module>``; so do the scripts in bench/. Nothing here
imports a test module or bench/.
"""
