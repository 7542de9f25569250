"""Why GPU pods are stuck, in GPU terms: each scheduler filter, the holders, the fix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from tests.core.audit.conftest import NOW, Runner
from tests.objects import gfd_node, listed_pod
from tests.support.paths import REPO
from webhook.audit import Collector, Finding, audit
from webhook.audit.stuck import pod_requests
from webhook.files import load_policy

GPU1 = {"nvidia.com/gpu": 1}
TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
# The kubelet's event for a shared request above one (NVIDIA/k8s-device-plugin README.md).
TOO_LARGE = (
    "Allocate failed due to rpc error: code = Unknown desc = request for 'nvidia.com/gpu: 2' "
    "too large: maximum request size for shared resources is 1, which is unexpected"
)
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _holders(n: int, on: str) -> list[dict[str, Any]]:
    # Created a day apart, newest first, so that "oldest first" is a real sort.
    return [
        listed_pod(f"{on}-holder-{i}", gpu=GPU1, node=on, created=f"2025-05-{20 - i:02d}T00:00:00Z")
        for i in range(n)
    ]


def _required(key: str, *values: str) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
                ]
            }
        }
    }


CASES = [
    pytest.param(
        [listed_pod("w", gpu={"nvidia.com/mig-2g.20gb": 1})],
        [gfd_node("gpu-1")],
        "gpu-pod-scheduled",
        ("not-offered",),
        [
            "no node advertises nvidia.com/mig-2g.20gb (MIG 2g.20gb instances)",
            "the cluster offers nvidia.com/gpu: NVIDIA-L20 (1 slot)",
        ],
        ["mig-parted"],
        id="mig-profile-not-offered",
    ),
    pytest.param(
        [listed_pod("w", gpu={"nvidia.com/gpu.shared": 1})],
        [gfd_node("gpu-1")],
        "gpu-pod-scheduled",
        ("not-offered",),
        ["no node advertises nvidia.com/gpu.shared"],
        ["ask for nvidia.com/gpu"],
        id="shared-name-where-nothing-is-renamed",
    ),
    pytest.param(
        [listed_pod("w", gpu={"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 1})],
        [gfd_node("gpu-1"), gfd_node("mig-1", "a100-40", mig_profile="1g.5gb", config_key="mig")],
        "gpu-pod-scheduled",
        ("not-together",),
        ["no node advertises both nvidia.com/gpu and nvidia.com/mig-1g.5gb"],
        ["split the containers"],
        id="two-kinds-no-node-has-both",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"})],
        [gfd_node("gpu-1"), gfd_node("gpu-2")],
        "gpu-pod-scheduled",
        ("selection",),
        [
            "nodeSelector nvidia.com/gpu.product=Tesla-T4 matches none of the 2 nodes",
            "gpu-1: nvidia.com/gpu.product=NVIDIA-L20",
        ],
        ["select what those nodes carry"],
        id="node-selector",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1, affinity=_required("topology.kubernetes.io/zone", "zone-9"))],
        [gfd_node("gpu-1")],
        "gpu-pod-scheduled",
        ("selection",),
        ["required node affinity matches none", "topology.kubernetes.io/zone=zone-"],
        ["remove the selection"],
        id="required-node-affinity",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1)],
        [gfd_node("gpu-1", taints=TAINT)],
        "gpu-pod-scheduled",
        ("taints",),
        [
            "is cordoned or has a taint it does not tolerate (gpu-1: nvidia.com/gpu=present:NoSchedule)"
        ],
        [
            "{key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule}",
            "spec.mutation.tolerations",
        ],
        id="untolerated-taint",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1, tolerations=TOLERATE), *_holders(1, "gpu-1")],
        [gfd_node("gpu-1", taints=TAINT)],
        "gpu-pod-scheduled",
        ("full",),
        ["1 of 1 slot held (gpu-1: 1 of 1)"],
        ["gpu-policy plan"],
        id="tolerated-taint-then-full",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1)],
        [{**gfd_node("gpu-1"), "spec": {"unschedulable": True}}],
        "gpu-pod-scheduled",
        ("taints",),
        ["(gpu-1: cordoned)"],
        ["uncordon gpu-1"],
        id="cordoned",
    ),
    pytest.param(
        [listed_pod("w", gpu={"nvidia.com/gpu": 4})],
        [gfd_node("gpu-1", gpus=2)],
        "gpu-pod-scheduled",
        ("too-large",),
        ["asks for 4 nvidia.com/gpu, but no node that could run it has more than 2"],
        ["ask for at most 2 per pod"],
        id="more-than-any-node-has",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1), *_holders(1, "gpu-1"), *_holders(1, "gpu-2")],
        [gfd_node("gpu-1"), gfd_node("gpu-2", "t4")],
        "gpu-pod-scheduled",
        ("full",),
        [
            "every node that offers nvidia.com/gpu and admits it is full: 2 of 2 slots held "
            "(gpu-1: 1 of 1, gpu-2: 1 of 1)",
            "sharing would help: none of these GPUs is shared",
        ],
        ["gpu-policy plan --measure NVIDIA-L20=MEMORY --measure Tesla-T4=MEMORY"],
        id="full-and-unshared",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1), *_holders(4, "gpu-1")],
        [gfd_node("gpu-1", replicas=4, config_key="shared")],
        "gpu-pod-scheduled",
        ("full",),
        ["4 of 4 slots held", "these GPUs are shared already"],
        ["free a slot"],
        id="full-and-shared-already",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1), *_holders(7, "gpu-1")],
        [gfd_node("gpu-1", gpus=7)],
        "gpu-pod-scheduled",
        ("full",),
        [
            "by ml/gpu-1-holder-6 (1 slot, since 2025-05-14), ml/gpu-1-holder-5",
            "ml/gpu-1-holder-2 (1 slot, since 2025-05-18), and 2 more",
        ],
        [],
        id="holders-oldest-first-capped",
    ),
    pytest.param(
        [listed_pod("w", gpu=GPU1), *_holders(1, "gpu-1")],
        [gfd_node("gpu-1", gpus=2)],
        "gpu-pod-scheduled",
        ("elsewhere",),
        ["GPU slots are free for it (gpu-1: 1 nvidia.com/gpu free)"],
        ["read the scheduler's message"],
        id="free-slots-other-cause",
    ),
    pytest.param(
        [listed_pod("w", gpu={"nvidia.com/gpu": 2})],
        [gfd_node("gpu-1", replicas=4, config_key="shared")],
        "gpu-pod-scheduled",
        ("shared-above-one", "elsewhere"),
        ["asks for 2 nvidia.com/gpu, but every node that could run it shares its GPUs"],
        ["ask for 1"],
        id="shared-above-one-while-pending",
    ),
    pytest.param(
        [
            listed_pod(
                "w",
                gpu={"nvidia.com/gpu": 2},
                node="gpu-1",
                phase="Failed",
                reason="UnexpectedAdmissionError",
                message=TOO_LARGE,
            )
        ],
        [gfd_node("gpu-1", replicas=4, config_key="shared")],
        "gpu-pod-admitted",
        ("shared-above-one",),
        [
            "refused by the kubelet (UnexpectedAdmissionError)",
            "maximum request size for shared resources is 1, which is unexpected",
        ],
        ["ask for 1"],
        id="refused-shared-above-one",
    ),
    pytest.param(
        [
            listed_pod(
                "w",
                gpu=GPU1,
                node="gpu-1",
                phase="Failed",
                reason="UnexpectedAdmissionError",
                message="Allocate failed due to requested number of devices unavailable",
            )
        ],
        [gfd_node("gpu-1")],
        "gpu-pod-admitted",
        ("admission",),
        [
            "the kubelet on gpu-1 could not allocate its GPUs: 'Allocate failed due to requested "
            "number of devices unavailable'"
        ],
        ["restart the device plugin pod there"],
        id="refused-by-the-kubelet",
    ),
]


def _finding(result: Any, rule: str, name: str = "w") -> Finding:
    found = [f for f in result.findings if f.rule == rule and f.subject.name == name]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(("objects", "nodes", "rule", "codes", "says", "fix"), CASES)
def test_stuck_reason(
    run: Runner,
    objects: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    rule: str,
    codes: tuple[str, ...],
    says: list[str],
    fix: list[str],
) -> None:
    finding = _finding(run(objects, nodes), rule)
    assert finding.result == "fail"
    assert finding.reasons == codes
    for text in says:
        assert text in finding.message
    for text in fix:
        assert text in finding.fix
    assert finding.pods == 1 and finding.category == "scheduling"


def test_waiting_time_and_the_schedulers_message(run: Runner) -> None:
    message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    pod = listed_pod("w", gpu=GPU1, created="2025-06-15T02:37:12Z", scheduler=message)
    finding = _finding(run([pod, *_holders(1, "gpu-1")], [gfd_node("gpu-1")]), "gpu-pod-scheduled")
    assert finding.waiting == 29 * 86400 + 5 * 3600 + 41 * 60 + 41
    assert finding.message.startswith("1 pod (w) not bound to a node for 29d 5h: ")
    assert finding.scheduler == message


def test_a_gated_pod_waits_for_its_gate_not_for_gpus(run: Runner) -> None:
    pod = listed_pod("w", gpu=GPU1)
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }
    ]
    finding = _finding(run([pod], [gfd_node("gpu-1")]), "gpu-pod-scheduled")
    assert (finding.result, finding.reasons) == ("warn", ("gated",))


def test_bound_pods_hold_slots_and_finished_ones_do_not(run: Runner) -> None:
    objects = [
        listed_pod("w", gpu=GPU1),
        listed_pod("done", gpu=GPU1, node="gpu-1", phase="Succeeded"),
        listed_pod("starting", gpu=GPU1, node="gpu-2", phase="Pending"),  # bound, pulling its image
    ]
    result = run(objects, [gfd_node("gpu-1"), gfd_node("gpu-2")])
    finding = _finding(result, "gpu-pod-scheduled")
    assert finding.reasons == ("elsewhere",)
    assert "gpu-1: 1 nvidia.com/gpu free" in finding.message
    assert (result.held, result.slots) == (1, 2)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {
                "containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": 1}}},
                    {"resources": {"requests": {"nvidia.com/gpu": "2"}}},
                ]
            },
            {"nvidia.com/gpu": 3},
            id="containers-add-up",
        ),
        pytest.param(
            {
                "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 4}}}],
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
            {"nvidia.com/gpu": 4},
            id="init-runs-alone",
        ),
        pytest.param(
            {
                "initContainers": [
                    {"restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": 1}}},
                    {"resources": {"limits": {"nvidia.com/gpu": 1}}},
                ],
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
            {"nvidia.com/gpu": 2},
            id="native-sidecar-adds-to-both",
        ),
        pytest.param(
            {
                "containers": [
                    {
                        "resources": {
                            "requests": {"nvidia.com/gpu": 1},
                            "limits": {"nvidia.com/gpu": 2},
                        }
                    }
                ]
            },
            {"nvidia.com/gpu": 1},
            id="requests-win-over-limits",
        ),
        pytest.param(
            {"containers": [{"resources": {"limits": {"cpu": "1", "nvidia.com/hostdev": 1}}}]},
            {},
            id="no-gpu",
        ),
    ],
)
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == expected


AUTOSCALED = REPO / "examples" / "clusters" / "autoscaled"


def _autoscaled(
    run: Runner, pod: dict[str, Any], *, extra: Sequence[dict[str, Any]] = (), **kwargs: Any
) -> Finding:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    nodes = [*yaml.safe_load((AUTOSCALED / "nodes.yaml").read_text())["items"], *extra]
    collector = Collector()
    collector.add_all([pod])
    return _finding(audit(collector, nodes, policy=policy, now=NOW, **kwargs), "gpu-pod-scheduled")


def test_a_pod_waiting_for_a_node_the_autoscaler_can_add(run: Runner) -> None:
    finding = _autoscaled(
        run, listed_pod("w", gpu=GPU1, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"})
    )
    assert finding.result == "warn" and finding.reasons == ("scale-up",)
    assert (
        "no node advertises nvidia.com/gpu yet: it waits for the autoscaler to add a node of pool gpu-t4 (declared in"
        in finding.message
    )
    # The selection names the T4 product: the L4 pool would not serve it.
    assert "gpu-l4x4" not in finding.message
    assert "docs/autoscaling.md" in finding.fix


def test_a_pod_no_pool_can_ever_serve(run: Runner) -> None:
    # The renamed name no node group advertises (the T4 key does not rename its shares).
    finding = _autoscaled(run, listed_pod("w", gpu={"nvidia.com/gpu.shared": 1}))
    assert finding.result == "fail" and finding.reasons == ("not-offered",)
    assert (
        "no node advertises nvidia.com/gpu.shared, and no pool an autoscaler can add would"
        in finding.message
    )
    assert "ask for nvidia.com/gpu" in finding.fix


def test_a_selection_no_pool_at_zero_matches_is_not_a_wait(run: Runner) -> None:
    pod = listed_pod(
        "w", gpu=GPU1, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    )
    finding = _autoscaled(run, pod)
    assert finding.reasons == ("not-offered",) and finding.result == "fail"


def test_a_karpenter_nodepool_is_a_pool_the_audit_waits_for(run: Runner) -> None:
    nodepool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu-a10g"},
        "spec": {"template": {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}}}},
    }
    pod = listed_pod("w", gpu=GPU1, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A10G"})
    finding = _autoscaled(run, pod, nodepools=[nodepool])
    assert finding.reasons == ("scale-up",)
    assert "pool gpu-a10g (Karpenter NodePool gpu-a10g, from zero)" in finding.message


def test_full_names_only_the_holders_of_nodes_it_could_run_on(run: Runner) -> None:
    """A pod asking for 2 GPUs waits for the holders of the 2-GPU node, not of a 1-GPU node it
    could never use (before the allocator decided, every node that offered the resource was
    called full and its holders named)."""
    objects = [
        listed_pod("w", gpu={"nvidia.com/gpu": 2}),
        *_holders(1, "big"),
        *_holders(1, "small"),
    ]
    finding = _finding(
        run(objects, [gfd_node("big", gpus=2), gfd_node("small")]), "gpu-pod-scheduled"
    )
    assert finding.reasons == ("full",)
    assert "1 of 2 slots held (big: 1 of 2)" in finding.message
    assert "ml/big-holder-0" in finding.message
    assert "small" not in finding.message


def test_resources_no_node_has_together_are_too_large_not_full(run: Runner) -> None:
    """Two containers asking for one GPU each need two on one node: on nodes of one GPU each,
    the pod never runs (the webhook's answer), whatever is held."""
    pod = listed_pod("w", gpu=GPU1)
    pod["spec"]["containers"].append({**pod["spec"]["containers"][0], "name": "second"})
    finding = _finding(run([pod], [gfd_node("gpu-1"), gfd_node("gpu-2")]), "gpu-pod-scheduled")
    assert finding.reasons == ("too-large",)
    assert "asks for 2 nvidia.com/gpu, but no node that could run it has more than 1" in (
        finding.message
    )


def test_a_pod_larger_than_any_node_a_pool_can_add_never_runs(run: Runner) -> None:
    """The allocator judges the pools at zero as the webhook does: 9 GPUs where a node of
    either pool has 4 is no wait for the autoscaler (it was called scale-up before the
    allocator decided, though no node it adds could run it)."""
    finding = _autoscaled(run, listed_pod("w", gpu={"nvidia.com/gpu": 9}))
    assert finding.result == "fail" and finding.reasons == ("too-large",)
    assert "it asks for 9 nvidia.com/gpu, but no node that could run it has more than 4" in (
        finding.message
    )


def test_a_pool_too_small_for_the_pod_is_no_wait_but_one_that_fits_is(run: Runner) -> None:
    # 3 GPUs: a node of either pool has 4, so it waits for one (the same pod as above, smaller).
    finding = _autoscaled(run, listed_pod("w", gpu={"nvidia.com/gpu": 3}))
    assert finding.result == "warn" and finding.reasons == ("scale-up",)


def test_an_affinity_no_pool_promises_is_no_wait(run: Runner) -> None:
    """A label the pools at zero do not promise: no node the autoscaler adds matches, as the
    webhook judges the same pod (it was called scale-up before the allocator decided)."""
    count_above_4 = {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [count_above_4]}]
            }
        }
    }
    finding = _autoscaled(run, listed_pod("w", gpu=GPU1, affinity=affinity))
    assert finding.result == "fail" and finding.reasons == ("not-offered",)


def test_a_pod_too_large_for_the_nodes_that_exist_waits_for_a_pool_that_fits(run: Runner) -> None:
    """3 GPUs: the one GPU node that exists has 1, a node of either pool at zero has 4. The
    scheduler leaves it Pending until the autoscaler adds such a node: a wait, not a failure
    (the old checks judged the existing nodes alone and called it too-large)."""
    finding = _autoscaled(
        run, listed_pod("w", gpu={"nvidia.com/gpu": 3}), extra=[gfd_node("gpu-1")]
    )
    assert finding.result == "warn" and finding.reasons == ("scale-up",)
    assert "no node can run it yet" in finding.message and "pool gpu-t4" in finding.message
