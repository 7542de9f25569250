#!/usr/bin/env python3
"""Run the README's DRA session on a real control plane and print it, for the page.

Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler v1.36.2 from
``KUBEBUILDER_ASSETS`` (docs/testing-control-plane.md), creates the Node of
``examples/dra-demo/node.yaml`` as its kubelet would, runs ``gpu-policy serve`` watching the
cluster and registers the chart's webhook configurations pointed at it by URL
(``tests/support/dra_demo.py``), then runs each command of the README's DRA session with the real
kubectl (``.cache/tools``, ``make tools``) and prints it as a console block. Everything it
started is stopped at the end.

Usage::

    export KUBEBUILDER_ASSETS=...   # kube-apiserver, kube-controller-manager, kube-scheduler, etcd
    .venv/bin/python -m scripts.readme_dra_demo

``tests/cluster/kube/test_readme_dra_demo.py`` runs the same session and fails when the page shows
something else.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.support import dra_demo
from tests.support.controlplane import ControlPlane, assets_dir


def main() -> int:
    """Run the session; 0 when every command ran, 2 when the binaries are missing."""
    assets = assets_dir()
    if assets is None:
        print("readme_dra_demo: set KUBEBUILDER_ASSETS (docs/testing-control-plane.md)")
        return 2
    if not (dra_demo.TOOLS / "kubectl").is_file():
        print("readme_dra_demo: no kubectl in .cache/tools (run `make tools`)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="readme-dra-demo-"))
    plane = ControlPlane(assets=assets, workdir=work / "plane")
    plane.start()
    try:
        dra_demo.prepare(plane)
        with dra_demo.serving(plane, work) as webhook:
            printed = dra_demo.session(plane, webhook)
        print("```console")
        for example, output in printed:
            command = example.command.replace(" --", " \\\n    --", 0)
            print(f"$ {command}")
            print(output, end="" if output.endswith("\n") or not output else "\n")
        print("```")
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
