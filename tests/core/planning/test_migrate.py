"""``gpu-policy migrate plan|check`` on files: the plan a platform engineer reviews.

The cluster is examples/clusters/migrate-three-kinds (time-sliced T4s with renameByDefault, a
mixed-MIG A100, exclusive H100s); what the scheduler does with the plan is in
tests/cluster/kube/test_migrate_controlplane.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.support.paths import REPO
from webhook.files import cluster_from_text, kubernetes_objects, load_policy, read_text
from webhook.planning.migrate import check, make_migration
from webhook.planning.migrate.classes import plan_classes
from webhook.planning.migrate.quota import plan_quota
from webhook.planning.migrate.rewrite import rewrite
from webhook.policy import Inventory
from webhook.policy.supply.assemble import DraObjects, assemble

ROOT = REPO
THREE = ROOT / "examples" / "clusters" / "migrate-three-kinds"
DUAL = ROOT / "examples" / "clusters" / "dual-published"


def _cluster() -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    policy = load_policy(str(THREE / "policy.yaml"))
    nodes = cluster_from_text(read_text(str(THREE / "nodes.yaml")), source="nodes").nodes
    objects = [
        d.value for d in kubernetes_objects(read_text(str(THREE / "workloads.yaml")), source="w")
    ]
    return policy, nodes, objects


def _migration(nodes: list[dict[str, Any]] | None = None) -> Any:
    policy, found, objects = _cluster()
    nodes = found if nodes is None else nodes

    def supply_of(state: Any, extra: Any) -> Any:
        kinds = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
        dra = DraObjects(*([o for o in extra if o["kind"] == k] for k in kinds))
        return assemble(policy, nodes=state, source="plan", dra=dra).supply

    inventory = assemble(policy, nodes=nodes, source="nodes")
    pods = [o for o in objects if o["kind"] == "Pod"]
    quotas = [o for o in objects if o["kind"] == "ResourceQuota"]
    return make_migration(inventory, nodes, pods, quotas, supply_of, {})


def test_classes_serve_todays_names_and_shared_gpus_get_the_drivers_sharing() -> None:
    migration = _migration()
    by_name = {c.name: c for c in migration.classes}
    assert by_name["exclusive-gpu.nvidia.com"].extended == "nvidia.com/gpu"
    assert "startsWith('NVIDIA H100')" in by_name["exclusive-gpu.nvidia.com"].selector
    for profile in ("1g.5gb", "2g.10gb", "3g.20gb"):
        mig = by_name[f"mig-{profile}.nvidia.com"]
        assert mig.extended == f"nvidia.com/mig-{profile}"
        assert f"profile == '{profile}'" in mig.selector
    shared = by_name["time-slicing-gpu.nvidia.com"]
    assert shared.extended is None and shared.serves == ("nvidia.com/gpu.shared",)
    params = shared.object()["spec"]["config"][0]["opaque"]["parameters"]
    assert params["kind"] == "GpuConfig" and params["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert params["sharing"]["strategy"] == "TimeSlicing"


def test_shared_workloads_are_rewritten_to_a_template_the_rest_are_not() -> None:
    migration = _migration()
    rewritten = {w.name for w in migration.workloads}
    assert rewritten == {f"notebook-{i}" for i in range(5)}
    notebook = next(w for w in migration.workloads if w.name == "notebook-0").rewrite
    container = notebook.obj["spec"]["containers"][0]
    assert "nvidia.com/gpu.shared" not in json.dumps(container)
    assert container["resources"]["claims"] == [{"name": "gpu", "request": "main"}]
    assert notebook.obj["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "notebook-0-gpu"}
    ]
    assert "nodeSelector" not in notebook.obj["spec"]  # GFD's -SHARED product label goes
    request = notebook.template["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"] == {"deviceClassName": "time-slicing-gpu.nvidia.com", "count": 1}


def test_rewriting_a_rewritten_workload_changes_nothing() -> None:
    migration = _migration()
    done = migration.workloads[0].rewrite.obj
    again = rewrite(done, None, migration.classes)
    assert again.template is None and again.obj == done


def test_quota_keeps_requests_and_says_what_shared_slots_become() -> None:
    policy, nodes, objects = _cluster()
    classes, _ = plan_classes(assemble(policy, nodes=nodes, source="n"))
    quota = next(o for o in objects if o["kind"] == "ResourceQuota")
    planned = plan_quota(quota, classes)
    assert planned is not None
    hard = planned.obj["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "4"
    assert hard["exclusive-gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "4"
    assert hard["mig-1g.5gb.nvidia.com.deviceclass.resource.k8s.io/devices"] == "2"
    # Eight slots at four per T4 are two T4s; a per-pod share cannot be expressed.
    assert hard["time-slicing-gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "2"
    assert any("cannot be expressed" in n for n in planned.notes)


def test_steps_cut_every_gpu_node_once_and_name_the_pods_that_no_longer_fit() -> None:
    migration = _migration()
    assert sorted(s.node for s in migration.steps) == ["a100-0", "h100-0", "h100-1", "t4-0", "t4-1"]
    # One T4 each: of the five notebooks time-sliced four to a T4, two keep a GPU.
    assert len(migration.lost) == 3
    assert all(p.startswith("ml/notebook-") for p in migration.lost)
    placed = {m.pod: m.to for s in migration.steps for m in s.moves}
    assert placed["ml/train-0"] == "h100-0" and placed["ml/infer-large"] == "a100-0"
    # The node whose pods can all move goes first; the one that loses pods goes last.
    assert migration.steps[-1].node == "t4-0"


def test_a_product_shared_on_some_nodes_and_exclusive_on_others_is_said() -> None:
    policy, nodes, _ = _cluster()
    h100 = next(n for n in nodes if n["metadata"]["name"] == "h100-0")
    t4 = copy.deepcopy(next(n for n in nodes if n["metadata"]["name"] == "t4-0"))
    t4["metadata"]["name"] = "t4-exclusive"
    t4["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "default"
    t4["metadata"]["labels"]["nvidia.com/gpu.product"] = "Tesla-T4"
    t4["status"]["allocatable"] = {"nvidia.com/gpu": "1"}
    inventory = assemble(policy, nodes=[*nodes, t4, h100], source="n")
    _, notes = plan_classes(inventory)
    assert any("'Tesla T4'" in n and "never nodes" in n for n in notes)


def dual_inventory() -> Inventory:
    """The inventory of the dual-published example: its policy, nodes and DRA objects."""
    policy = load_policy(str(DUAL / "policy.yaml"))
    dump = cluster_from_text(read_text(str(DUAL / "nodes.yaml")), source="d")
    kinds = dump.by_kind
    dra = DraObjects(
        kinds["DeviceClass"], kinds["ResourceSlice"], (), kinds["ResourceClaimTemplate"]
    )
    return assemble(policy, nodes=dump.nodes, source="d", dra=dra)


def test_check_names_each_steps_state() -> None:
    inventory = dual_inventory()
    steps = [{"step": 1, "node": "h100-dra"}, {"step": 2, "node": "h100-dual"}]
    result = check(inventory, [], [*steps, {"step": 3, "node": "nowhere"}])
    assert [(s.node, s.state) for s in result.steps] == [
        ("h100-dra", "done"),
        ("h100-dual", "dual"),
        ("nowhere", "missing"),
    ]
    assert result.failed  # a step left a node dual-published


def test_check_names_a_pod_that_runs_where_the_step_did_not_say() -> None:
    inventory = dual_inventory()
    moved = {"pod": "ml/infer", "from": "h100-dra", "to": None, "fitsOn": []}
    step = {"step": 1, "node": "h100-dra", "pods": [moved]}
    pod = {"metadata": {"namespace": "ml", "name": "infer"}, "spec": {"nodeName": "h100-dra"}}
    (state,) = check(inventory, [pod], [step]).steps
    assert state.state == "misplaced" and "where the plan found no room" in state.why
    (state,) = check(inventory, [], [step]).steps
    assert state.state == "done"  # a pod not there is not judged


def _classes_of(example: str) -> tuple[Any, Any]:
    where = ROOT / "examples" / "clusters" / example
    policy = load_policy(str(where / "policy.yaml"))
    nodes = cluster_from_text(read_text(str(where / "nodes.yaml")), source="n").nodes
    return plan_classes(assemble(policy, nodes=nodes, source="n"))


def test_mps_replicas_become_the_drivers_mps_sharing() -> None:
    (mps,), _ = _classes_of("mps-l4")
    assert mps.name == "mps-gpu.nvidia.com" and mps.extended is None
    sharing = mps.object()["spec"]["config"][0]["opaque"]["parameters"]["sharing"]
    assert sharing == {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}}


def test_one_name_for_whole_gpus_and_mig_devices_is_taken_over_once() -> None:
    classes, notes = _classes_of("h100-mig-single")
    serving = [c.name for c in classes if c.extended == "nvidia.com/gpu"]
    assert serving == ["exclusive-gpu.nvidia.com"]
    assert any("mig-1g.10gb.nvidia.com serves claims only" in n for n in notes)
