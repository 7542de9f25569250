"""The README's DRA session, on the real control plane with kube-scheduler: the webhook refuses
a template no node can allocate and lets through a pod the scheduler binds, and each command
prints what the page shows (tests/support/dra_demo.py runs it; scripts/readme_dra_demo.py prints
it for the page).

The scheduler is asked first, without the webhook: a pod using the refused template stays
Unschedulable, so the refusal is the scheduler's verdict brought forward, not the webhook's
opinion.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.support import doc_examples, dra_demo
from tests.support.controlplane import ControlPlane, create_namespace, delete_namespace
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _unschedulable(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    pod = core.read_namespaced_pod(name, namespace)
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or ()
    )


def test_the_readme_dra_session_prints_what_it_shows(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    if not (dra_demo.TOOLS / "kubectl").is_file() or not (dra_demo.TOOLS / "helm").is_file():
        pytest.skip("kubectl or helm is not in .cache/tools (run `make tools`)")
    examples = dra_demo.commands()
    assert len(examples) == 7
    core = client.CoreV1Api(control_plane.client)
    apart = create_namespace(control_plane, "dra-demo-truth")
    dra_demo.prepare(control_plane)
    try:
        with dra_demo.serving(control_plane, tmp_path) as webhook:
            printed = dra_demo.session(control_plane, webhook)
        # The truth, with the webhook gone: the refused template, and a pod that uses it.
        template = yaml.safe_load((dra_demo.DEMO / "two-of-a-kind-denied.yaml").read_text())
        template["metadata"]["namespace"] = apart
        control_plane.create(template)
        pod = copy.deepcopy(yaml.safe_load((dra_demo.DEMO / "train.yaml").read_text()))
        pod["metadata"]["namespace"] = apart
        pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "two-of-a-kind"
        control_plane.create(pod)
        assert wait_until(lambda: _unschedulable(core, apart, "train"), 60, 0.5)
    finally:
        delete_namespace(control_plane, apart)
        dra_demo.clean(control_plane)
    wrong = [
        f"{example.source}: `{example.command}` printed:\n{output}"
        for example, output in printed
        if not doc_examples.prints(example.output, output)
    ]
    assert not wrong, "\n".join(wrong)
