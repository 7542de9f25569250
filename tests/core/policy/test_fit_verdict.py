"""review() asks the allocator whether the pod as a whole fits some node group (engine/fit.py).

The cases of the one-allocator issue that the per-container and per-claim checks got wrong,
each with what kube-scheduler does (docs/rules.md, "Whether it fits"): a pod is refused only
when no node group could run it, in the scheduler's terms, and a search cut short allows it
with a warning.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import objects as o
from tests.support.paths import REPO
from webhook.files import load_inventory, load_policy
from webhook.policy import Inventory, Policy, review
from webhook.policy.engine import fit
from webhook.policy.nodes import Taint
from webhook.policy.supply.assemble import DraObjects, assemble

ROOT = REPO
CLUSTERS = ROOT / "examples" / "clusters"


def node(name: str) -> dict[str, Any]:
    """A node with no device plugin: its GPUs come from its ResourceSlice."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi"}},
    }


@pytest.fixture(scope="module")
def dra_policy() -> Policy:
    return load_policy(CLUSTERS / "dra-a100" / "policy.yaml")


def dra_cluster(policy: Policy, *devices: dict[str, Any], templates: Any = ()) -> Inventory:
    """One DRA node with ``devices``; gpu.nvidia.com serves nvidia.com/gpu too."""
    klass = o.device_class("gpu.nvidia.com", o.GPU_CLASS_CEL)
    klass["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return assemble(
        policy,
        nodes=[node("dra-1")],
        source="test",
        dra=DraObjects(
            [klass], [o.resource_slice("dra-1", *devices)], resource_claim_templates=list(templates)
        ),
        fit_budget_s=5.0,
    )


def test_containers_are_added_up_as_the_scheduler_does() -> None:
    """Seed 003 again: every node has one GPU, two containers ask for one each."""
    policy = load_policy(CLUSTERS / "seed003-before" / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / "seed003-before" / "nodes.yaml")
    two = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}), o.ctr("b", limits={"nvidia.com/gpu": 1}))
    refused = review(two, policy=policy, inventory=inventory)
    assert refused.failed == ("gpu-resource-offered",)
    assert "nvidia.com/gpu: 2 in all" in refused.denial
    assert "Insufficient nvidia.com/gpu" in refused.denial
    assert "has 1" in refused.denial
    # An init container's GPU is released before the containers start: one GPU is enough.
    init = o.pod(o.ctr("b", limits={"nvidia.com/gpu": 1}))
    init["spec"]["initContainers"] = [o.ctr("a", limits={"nvidia.com/gpu": 1})]
    assert review(init, policy=policy, inventory=inventory).allowed


def test_an_extended_resource_and_a_claim_share_one_node(dra_policy: Policy) -> None:
    """nvidia.com/gpu: 2 served by DRA and a claim for one more, where the node has two."""
    template = o.claim_template("one", o.exactly(), namespace="ml")
    inventory = dra_cluster(dra_policy, o.dra_gpu(0), o.dra_gpu(1), templates=[template])
    both = o.pod(
        o.ctr(limits={"nvidia.com/gpu": 2}),
        namespace="ml",
        resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one"}],
    )
    refused = review(both, policy=dra_policy, inventory=inventory)
    assert not refused.allowed
    assert "cannot allocate all claims" in refused.denial
    alone = o.pod(o.ctr(limits={"nvidia.com/gpu": 2}), namespace="ml")
    assert review(alone, policy=dra_policy, inventory=inventory).allowed


def test_a_device_class_name_is_judged(dra_policy: Policy) -> None:
    """deviceclass.resource.kubernetes.io/<class>: 3 where the node has two."""
    inventory = dra_cluster(dra_policy, o.dra_gpu(0), o.dra_gpu(1))
    name = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    refused = review(o.pod(o.ctr(limits={name: 3})), policy=dra_policy, inventory=inventory)
    assert refused.failed == ("gpu-resource-offered",)
    assert f'container "main" ({name}: 3) asks for 3 devices of class gpu.nvidia.com' in (
        refused.denial
    )
    assert "no node has more than 2 matching devices" in refused.denial
    assert refused.denial.endswith("Ask for at most 2")
    assert review(o.pod(o.ctr(limits={name: 2})), policy=dra_policy, inventory=inventory).allowed
    # Another vendor's extended resource is not the webhook's to judge.
    other = review(
        o.pod(o.ctr(limits={"example.com/fpga": 9})), policy=dra_policy, inventory=inventory
    )
    assert other.allowed and other.results[0].status == "skip"


def test_the_search_backtracks_where_the_greedy_check_refused(dra_policy: Policy) -> None:
    """One H100 and one A100; "any GPU" and "an 80 GB GPU": taking the H100 for the first
    request leaves nothing for the second, the scheduler tries the other way round."""
    inventory = dra_cluster(
        dra_policy,
        o.dra_gpu(0, product="NVIDIA H100 80GB HBM3", memory="80Gi"),
        o.dra_gpu(1),
    )
    big = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"
    template = o.claim_template(
        "two", o.exactly(name="any"), o.exactly(name="big", selectors=[big]), namespace="ml"
    )
    decision = review(template, policy=dra_policy, inventory=inventory)
    assert decision.allowed, decision.denial
    three = o.claim_template(
        "three",
        o.exactly(name="any", count=2),
        o.exactly(name="big", selectors=[big]),
        namespace="ml",
    )
    assert not review(three, policy=dra_policy, inventory=inventory).allowed


def test_a_search_out_of_time_allows_with_a_warning(dra_policy: Policy) -> None:
    inventory = dra_cluster(dra_policy, o.dra_gpu(0), o.dra_gpu(1))
    # Two requests that fit each alone, not together: only the search could tell.
    apart = o.claim_template(
        "t", o.exactly(name="a", count=2), o.exactly(name="b", count=1), namespace="ml"
    )
    refused = review(apart, policy=dra_policy, inventory=inventory)
    assert refused.failed == ("gpu-claim-devices-available",)
    assert "its requests together need more devices than node" in refused.denial
    out_of_time = replace(inventory, fit_budget_s=0.0)
    decision = review(apart, policy=dra_policy, inventory=out_of_time)
    assert decision.allowed
    (warning,) = decision.warnings
    assert warning.startswith("[gpu-claim-devices-available]")
    assert "could not be proven" in warning


def test_nodes_alike_but_for_their_names_are_judged_once() -> None:
    """Three one-GPU nodes differing only in their hostname label: one group for a pod that
    does not read it (the message says how many are alike), each node for one that does."""
    policy = load_policy(CLUSTERS / "seed003-before" / "policy.yaml")

    def gpu_node(name: str) -> dict[str, Any]:
        found = node(name)
        found["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        return found

    inventory = assemble(
        policy, nodes=[gpu_node(n) for n in ("n1", "n2", "n3")], source="test", fit_budget_s=5
    )
    two = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}), o.ctr("b", limits={"nvidia.com/gpu": 1}))
    refused = review(two, policy=policy, inventory=inventory)
    assert "; node n1 (and 2 more like it) has 1" in refused.denial
    pinned = o.pod(
        o.ctr(limits={"nvidia.com/gpu": 1}), nodeSelector={"kubernetes.io/hostname": "n3"}
    )
    assert review(pinned, policy=policy, inventory=inventory).allowed
    nowhere = o.pod(
        o.ctr(limits={"nvidia.com/gpu": 1}), nodeSelector={"kubernetes.io/hostname": "n9"}
    )
    assert not review(nowhere, policy=policy, inventory=inventory).allowed


def test_reviews_on_one_snapshot_do_not_leak_into_each_other() -> None:
    """Pods that read different node labels share one inventory (the server's snapshot): each
    is judged on its own groups, whatever was judged before."""
    where = CLUSTERS / "autoscaled"
    policy = load_policy(where / "policy.yaml")
    inventory = load_inventory(policy, where / "nodes.yaml")
    three = o.pod(o.ctr(limits={"nvidia.com/gpu": 3}))
    shared = o.pod(
        o.ctr(limits={"nvidia.com/gpu": 1}), annotations={"gpu-policy.io/sharing": "shared"}
    )
    for obj in (o.pod(o.ctr(limits={"nvidia.com/gpu": 1})), shared):
        assert review(obj, policy=policy, inventory=inventory).allowed
    # Only the L4 pool can give three GPUs (the T4 shares fail requests above one).
    assert review(three, policy=policy, inventory=inventory).allowed


def test_pods_judged_one_after_another_get_each_its_own_verdict() -> None:
    """The verdict on a pod spec is kept per snapshot (the pods of one workload are judged
    once): pods that differ only in what the scheduler reads of them still get their own
    verdicts, in either order, and a refusal names the pod it is about."""
    policy = load_policy(CLUSTERS / "seed003-before" / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / "seed003-before" / "nodes.yaml")
    one = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}), o.ctr("b"), name="one")
    two = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}), o.ctr("b", limits={"nvidia.com/gpu": 1}))
    # A sidecar (an init container that keeps running) holds its GPU beside the containers'.
    sidecar = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}))
    sidecar["spec"]["initContainers"] = [
        o.ctr("s", limits={"nvidia.com/gpu": 1}, restartPolicy="Always")
    ]
    init = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}))
    init["spec"]["initContainers"] = [o.ctr("s", limits={"nvidia.com/gpu": 1})]
    pinned = o.pod(o.ctr("a", limits={"nvidia.com/gpu": 1}), nodeSelector={"no-such": "label"})
    for _ in range(2):
        assert review(one, policy=policy, inventory=inventory).allowed
        assert review(init, policy=policy, inventory=inventory).allowed
        for refused in (two, sidecar, pinned):
            assert not review(refused, policy=policy, inventory=inventory).allowed
    named = review(
        o.pod(*two["spec"]["containers"], name="other"), policy=policy, inventory=inventory
    )
    assert "Pod other fits no node" in named.denial
    assert "Pod p " not in named.denial


def test_pods_asking_alike_share_a_verdict_but_a_class_served_refusal_names_its_container(
    dra_policy: Policy,
) -> None:
    """The verdict is kept by what the pod asks of a node, not by the pod: pods of other
    workloads asking the same are judged once. But when a DeviceClass serves the extended
    resource, the refusal names the container that asks: each pod's names its own."""
    inventory = dra_cluster(dra_policy, o.dra_gpu(0))
    for name in ("alpha", "beta", "alpha"):
        refused = review(
            o.pod(o.ctr(name, limits={"nvidia.com/gpu": 2})), policy=dra_policy, inventory=inventory
        )
        assert not refused.allowed
        assert f'container "{name}" (nvidia.com/gpu: 2)' in refused.denial
    for name in ("alpha", "beta"):
        assert review(
            o.pod(o.ctr(name, limits={"nvidia.com/gpu": 1})), policy=dra_policy, inventory=inventory
        ).allowed


def test_a_lone_claim_is_not_refused_for_taints_its_pods_may_tolerate(dra_policy: Policy) -> None:
    """The node of the only GPUs is tainted: the claim fits, its pod must tolerate the taint
    (found by the differential test: the scheduler binds such a pod with the toleration)."""
    template = o.claim_template("one", o.exactly(), namespace="ml")
    inventory = dra_cluster(dra_policy, o.dra_gpu(0), templates=[template])
    taint = Taint("nvidia.com/gpu", "present", "NoSchedule")
    groups = tuple(replace(g, taints=(taint,)) for g in inventory.supply.groups)
    inventory = replace(inventory, supply=replace(inventory.supply, groups=groups))
    assert review(template, policy=dra_policy, inventory=inventory).allowed
    claims = [{"name": "g", "resourceClaimTemplateName": "one"}]
    refused = review(
        o.pod(o.ctr(), namespace="ml", resourceClaims=claims),
        policy=dra_policy,
        inventory=inventory,
    )
    assert not refused.allowed
    assert "untolerated taint" in refused.denial


def test_nodes_alike_but_for_the_label_a_network_slice_selects_stay_apart(
    dra_policy: Policy,
) -> None:
    """Two GPU-less nodes of one shape; network-attached GPUs reach only the node of rack b:
    a pod asking for one through its class fits there (found by the differential test, where
    the look-alike nodes were made one group with the first node's answer)."""
    klass = o.device_class("gpu.nvidia.com", o.GPU_CLASS_CEL)
    network = o.resource_slice("rack-b", o.dra_gpu(0))
    del network["spec"]["nodeName"]
    network["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["b"]}]}
        ]
    }
    nodes = [node("n0"), node("n1")]
    nodes[0]["metadata"]["labels"]["rack"] = "a"
    nodes[1]["metadata"]["labels"]["rack"] = "b"
    inventory = assemble(
        dra_policy,
        nodes=nodes,
        source="test",
        dra=DraObjects([klass], [network]),
        fit_budget_s=5.0,
    )
    name = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    decision = review(o.pod(o.ctr(limits={name: 1})), policy=dra_policy, inventory=inventory)
    assert decision.allowed, decision.denial
    assert not review(
        o.pod(o.ctr(limits={name: 2})), policy=dra_policy, inventory=inventory
    ).allowed


def _tainted(device: dict[str, Any]) -> dict[str, Any]:
    device["taints"] = [{"key": "example.com/broken", "value": "ecc", "effect": "NoSchedule"}]
    return device


@pytest.mark.parametrize(
    ("devices", "exactly", "constraints", "words"),
    [
        (
            # Two GPUs of two models: two of one model are nowhere.
            [o.dra_gpu(0, product="NVIDIA H100 80GB HBM3"), o.dra_gpu(1)],
            {"count": 2},
            [{"matchAttribute": "gpu.nvidia.com/productName"}],
            [
                "ResourceClaimTemplate t fits no node, existing or able to appear: no devices of "
                "node dra-1 meet its constraint matchAttribute gpu.nvidia.com/productName",
                "Drop the constraint, or ask for fewer devices: node dra-1 does not have that "
                "many with one gpu.nvidia.com/productName",
            ],
        ),
        (
            # One of the two GPUs is tainted: one can be given, not two.
            [o.dra_gpu(0), _tainted(o.dra_gpu(1))],
            {"count": 2},
            [],
            [
                'request "gpu" asks for 2 devices of class gpu.nvidia.com, but no node has more '
                "than 1 matching device (1 on node dra-1 (NVIDIA A100-SXM4-40GB), besides 1 "
                "with a taint it does not tolerate)",
                'Ask for at most 1 in request "gpu"',
            ],
        ),
        (
            # All devices, one of them tainted: All takes every one.
            [o.dra_gpu(0), _tainted(o.dra_gpu(1))],
            {"allocationMode": "All"},
            [],
            [
                "and 1 of the 2 matching devices of node dra-1 have a taint it does not tolerate",
                "Tolerate the taint in the request (tolerations)",
            ],
        ),
    ],
    ids=["constraint", "taint", "all-with-a-taint"],
)
def test_a_refusal_names_what_stops_the_claim(
    dra_policy: Policy,
    devices: list[dict[str, Any]],
    exactly: dict[str, Any],
    constraints: list[dict[str, Any]],
    words: list[str],
) -> None:
    """The allocator's explanation, in words: the constraint, the device taint."""
    inventory = dra_cluster(dra_policy, *devices)
    template = o.claim_template("t", o.exactly(**exactly), namespace="ml")
    if constraints:
        template["spec"]["spec"]["devices"]["constraints"] = constraints
    refused = review(template, policy=dra_policy, inventory=inventory)
    assert refused.failed == ("gpu-claim-devices-available",)
    for word in words:
        assert word in refused.denial


def test_pods_asking_the_same_devices_with_other_cpu_share_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first pods of other workloads that ask for the same GPUs but other CPU and memory
    are judged once (the allocator reads no native resource); one that asks for more GPUs,
    or for another extended resource, is judged on its own, and each gets its own answer."""
    policy = load_policy(CLUSTERS / "seed003-before" / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / "seed003-before" / "nodes.yaml")
    walks: list[object] = []
    real = fit.fit_anywhere
    monkeypatch.setattr(fit, "fit_anywhere", lambda *a, **k: walks.append(a) or real(*a, **k))

    def asking(gpus: int, cpu: str, memory: str, **more: Any) -> dict[str, Any]:
        wanted = {"nvidia.com/gpu": gpus, "cpu": cpu, "memory": memory, **more}
        return o.pod(o.ctr("app", limits=wanted, requests=wanted))

    for cpu, memory in (("1", "1Gi"), ("4", "16Gi"), ("500m", "2Gi")):
        assert review(asking(1, cpu, memory), policy=policy, inventory=inventory).allowed
    assert len(walks) == 1
    refused = review(asking(2, "1", "1Gi"), policy=policy, inventory=inventory)
    assert not refused.allowed and "no node has that many" in refused.denial
    assert len(walks) == 2
    review(asking(1, "1", "1Gi", **{"example.com/nic": 1}), policy=policy, inventory=inventory)
    assert len(walks) == 3
