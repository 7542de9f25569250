"""The pure sizing: the example clusters' numbers from first principles, MIG pools, warnings."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest
import yaml

from tests.core.planning.plans import ROOT, SEED003, cluster, plan_for
from webhook.planning import (
    Measurement,
    fitting_replicas,
    key_for_model,
    parse_headroom,
    parse_measure_arg,
    parse_measurements,
    parse_memory_mib,
    planned_inventory,
    profile_memory_estimate,
    replicas_for,
)
from webhook.policy import PolicyError
from webhook.policy.products import mig_instances


def codes(plan: Any) -> list[str]:
    return [w.code for w in plan.warnings]


# --- the rule -------------------------------------------------------------------------------


def test_seed_003_replicas_from_first_principles() -> None:
    h = Fraction(1, 10)
    assert fitting_replicas(46068, 4621, h) == 8  # 46068 x 0.9 / 4621 = 8.97
    assert fitting_replicas(15360, 4401, h) == 3  # 15360 x 0.9 / 4401 = 3.14
    # Headroom per process instead (memory / (measured x 1.1)) would give 9 on the L20.
    assert int(Fraction(46068) / (Fraction(4621) * Fraction(11, 10))) == 9


def test_headroom_range_that_gives_8_and_3() -> None:
    for pct in (10, 12, 14):
        h = Fraction(pct, 100)
        assert (fitting_replicas(46068, 4621, h), fitting_replicas(15360, 4401, h)) == (8, 3)
    assert fitting_replicas(46068, 4621, Fraction(9, 100)) == 9
    assert fitting_replicas(15360, 4401, Fraction(15, 100)) == 2


def test_plugin_rule_bounds_replicas() -> None:
    assert replicas_for(15360, 9000, Fraction(1, 10)) == 1  # does not fit twice: unshared
    assert replicas_for(15360, 20000, Fraction(1, 10)) == 1  # larger than the GPU
    assert replicas_for(15360, 6912, Fraction(1, 10)) == 2  # exactly twice: 13824 / 6912


@pytest.mark.parametrize(
    ("text", "mib"),
    [("4621Mi", 4621), ("4621MiB", 4621), ("4621", 4621), (4621, 4621), ("4.5Gi", 4608),
     ("5G", 4769), ("1024Ki", 1), ("1Ki", 1)],
)  # fmt: skip
def test_memory_quantities(text: object, mib: int) -> None:
    assert parse_memory_mib(text) == mib


@pytest.mark.parametrize("bad", ["", "4621 apples", "-1Mi", True, "0"])
def test_bad_memory_quantities(bad: object) -> None:
    with pytest.raises(PolicyError):
        parse_memory_mib(bad)


def test_headroom_forms() -> None:
    assert (
        parse_headroom("10%") == parse_headroom("10 %") == parse_headroom("0.1") == Fraction(1, 10)
    )
    assert parse_headroom("0") == 0
    for bad in ("95%", "-1%", "ten", "1.5"):
        with pytest.raises(PolicyError):
            parse_headroom(bad)


def test_measure_argument_and_document() -> None:
    assert parse_measure_arg("NVIDIA-L20=4621Mi") == Measurement(4621, "NVIDIA-L20")
    assert parse_measure_arg("4Gi") == Measurement(4096, None)
    with pytest.raises(PolicyError):
        parse_measure_arg("=4621Mi")
    doc = yaml.safe_load((ROOT / "examples" / "plan" / "measurements.yaml").read_text())
    found, headroom = parse_measurements(doc, source="m.yaml")
    assert headroom == Fraction(1, 10)
    assert found == (
        Measurement(4621, "NVIDIA-L20", "nlp-inference"),
        Measurement(4401, "Tesla-T4", "nlp-inference"),
    )
    found, _ = parse_measurements({"products": {"Tesla-T4": "4401Mi"}}, source="m")
    assert found == (Measurement(4401, "Tesla-T4"),)
    for bad in ({}, {"kind": "Pod"}, {"workloads": [{"name": "x"}]}, {"workloads": {}}, []):
        with pytest.raises(PolicyError):
            parse_measurements(bad, source="m")


def test_key_names_from_products() -> None:
    assert key_for_model("NVIDIA-L20") == "nvidia-l20"
    assert key_for_model("Tesla-T4") == "tesla-t4"
    assert key_for_model("NVIDIA-A100-SXM4-40GB") == "nvidia-a100-sxm4-40gb"


def test_mig_tables() -> None:
    assert profile_memory_estimate("1g.5gb") == 4864
    assert mig_instances("NVIDIA-A100-SXM4-40GB", "1g.5gb") == 7
    assert mig_instances("NVIDIA-A100-SXM4-40GB", "3g.20gb") == 2
    assert mig_instances("NVIDIA-H100-80GB-HBM3", "1g.20gb") == 4
    assert mig_instances("NVIDIA-L20", "1g.5gb") is None


# --- examples/clusters/seed003-* -------------------------------------------------------------


def test_seed_003_plan() -> None:
    plan = plan_for("seed003-before", SEED003)
    assert plan.slots() == (2, 11)
    sized = {p.model: p for p in plan.pools}
    l20, t4 = sized["NVIDIA-L20"].offers[0], sized["Tesla-T4"].offers[0]
    assert (l20.replicas_after, t4.replicas_after) == (8, 3)
    assert (l20.memory_per_slot, t4.memory_per_slot) == (5758, 5120)
    assert (l20.headroom_per_slot, t4.headroom_per_slot) == (1137, 719)
    assert round(l20.use_at_full_slots or 0, 3) == 0.802
    assert round(t4.use_at_full_slots or 0, 3) == 0.860
    assert (sized["NVIDIA-L20"].key_after, sized["Tesla-T4"].key_after) == (
        "nvidia-l20",
        "tesla-t4",
    )
    assert plan.labels == (("10.0.2.11", "nvidia-l20"), ("10.0.2.12", "tesla-t4"))
    assert plan.warnings == ()
    after = planned_inventory(plan)
    products = sorted(o.product or "" for _, o in after.pairs)
    assert products == ["NVIDIA-L20-SHARED", "Tesla-T4-SHARED"]
    assert sorted(o.slots or 0 for _, o in after.pairs) == [3, 8]


def test_layout_already_planned_changes_nothing() -> None:
    plan = plan_for("seed003-l20-t4", SEED003)
    assert plan.configs == {}
    assert [p.key_after for p in plan.pools] == ["l20", "t4"]
    assert not any(p.changed for p in plan.pools)


def test_explicit_key_used_by_one_pool_is_rewritten_in_place() -> None:
    plan = plan_for("seed003-l20-t4", (Measurement(3000, "NVIDIA-L20"), SEED003[1]))
    l20 = next(p for p in plan.pools if p.model == "NVIDIA-L20")
    assert (l20.key_after, l20.offers[0].replicas_after) == ("l20", 13)
    assert set(plan.configs) == {"l20"}


def test_rename_by_default_as_chosen() -> None:
    plan = plan_for("seed003-before", SEED003, rename_by_default=True)
    assert "renameByDefault: true" in plan.configs["nvidia-l20"]
    names = sorted(o.form.name for _, o in planned_inventory(plan).pairs)
    assert names == ["nvidia.com/gpu.shared", "nvidia.com/gpu.shared"]
    products = sorted(o.product or "" for _, o in planned_inventory(plan).pairs)
    assert products == ["NVIDIA-L20", "Tesla-T4"]  # no -SHARED when renamed


# --- warnings --------------------------------------------------------------------------------


def test_warning_labels_lack_memory() -> None:
    _, nodes = cluster("seed003-before")
    nodes = copy.deepcopy(nodes)
    for node in nodes:
        node["metadata"]["labels"].pop("nvidia.com/gpu.memory", None)
    plan = plan_for("seed003-before", SEED003, nodes)
    assert codes(plan) == ["no-memory", "no-memory"]
    assert plan.slots() == (2, 2)
    assert plan.configs == {}


def test_warning_process_larger_than_todays_slot() -> None:
    # examples/clusters/seed001-a100-t4's T4 runs 4 replicas: 3840 MiB slots for 4401 MiB.
    plan = plan_for("seed001-a100-t4", (Measurement(4401, "Tesla-T4"),))
    warning = next(w for w in plan.warnings if w.code == "process-larger-than-slot")
    assert warning.subject == "Tesla-T4"
    assert "3840 MiB" in warning.message
    t4 = next(p for p in plan.pools if p.model == "Tesla-T4")
    assert t4.offers[0].replicas_after == 3


def test_warning_process_larger_than_the_gpu() -> None:
    plan = plan_for("seed003-before", (Measurement(16000, "Tesla-T4"),))
    warning = next(w for w in plan.warnings if w.code == "process-larger-than-slot")
    assert "larger than the whole device (15360 MiB)" in warning.message


def test_warning_sharing_buys_nothing() -> None:
    plan = plan_for("seed003-before", (Measurement(9000, "Tesla-T4"), SEED003[0]))
    assert "sharing-buys-nothing" in codes(plan)
    t4 = next(p for p in plan.pools if p.model == "Tesla-T4")
    assert t4.offers[0].replicas_after == 1
    assert t4.key_after == "any"  # unshared already: it stays where it is
    assert set(plan.configs) == {"nvidia-l20"}


def test_warnings_for_unmeasured_pools_and_unused_measurements() -> None:
    plan = plan_for("seed003-before", (SEED003[0], Measurement(1000, "NVIDIA-H100-80GB-HBM3")))
    assert sorted(codes(plan)) == ["no-measurement", "unused-measurement"]


# --- MIG --------------------------------------------------------------------------------------


def test_mixed_mig_pool_is_sized_per_profile() -> None:
    plan = plan_for("seed001-a100-t4", (Measurement(4000, "NVIDIA-A100-SXM4-40GB"), SEED003[1]))
    a100 = next(p for p in plan.pools if p.model == "NVIDIA-A100-SXM4-40GB")
    sized = {o.offer.profile: (o.offer.memory_mib, o.replicas_after) for o in a100.offers}
    # mig-<p>.memory labels: 4864, 9984, 20096 MiB; x 0.9 / 4000.
    assert sized == {"1g.5gb": (4864, 1), "2g.10gb": (9984, 2), "3g.20gb": (20096, 4)}
    assert a100.key_after == "nvidia-a100-sxm4-40gb"  # a100-40gb is the default key
    config = yaml.safe_load(plan.configs["nvidia-a100-sxm4-40gb"])
    assert config["flags"]["migStrategy"] == "mixed"
    assert config["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/mig-2g.10gb", "replicas": 2},
        {"name": "nvidia.com/mig-3g.20gb", "replicas": 4},
    ]
    warnings = [w for w in plan.warnings if w.code == "mig-profile-fits"]
    assert {w.subject for w in warnings} == {
        "NVIDIA-A100-SXM4-40GB-MIG-2g.10gb",
        "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
    }
    assert all("MIG profile 1g.5gb" in w.message for w in warnings)
    assert "sharing-buys-nothing" in codes(plan)  # 1g.5gb does not hold it twice


def test_measurement_per_mig_profile_wins_over_the_model() -> None:
    plan = plan_for(
        "seed001-a100-t4",
        (
            Measurement(4000, "NVIDIA-A100-SXM4-40GB"),
            Measurement(2000, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
        ),
    )
    a100 = next(p for p in plan.pools if p.model == "NVIDIA-A100-SXM4-40GB")
    sized = {o.offer.profile: o.replicas_after for o in a100.offers}
    assert sized == {"1g.5gb": 2, "2g.10gb": 2, "3g.20gb": 4}


def test_full_mig_capable_gpu_time_sliced_names_a_profile() -> None:
    _, nodes = cluster("seed003-before")
    nodes = copy.deepcopy(nodes)
    l20 = next(
        n for n in nodes if n["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-L20"
    )
    l20["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB"
    l20["metadata"]["labels"]["nvidia.com/gpu.memory"] = "40960"
    plan = plan_for("seed003-before", (Measurement(4621, "NVIDIA-A100-SXM4-40GB"),), nodes)
    warning = next(w for w in plan.warnings if w.code == "mig-profile-fits")
    # 1g.5gb (about 4864 MiB) x 0.9 < 4621: the smallest that holds it is 1g.10gb, 4 per GPU.
    assert "MIG profile 1g.10gb (up to 4 per GPU" in warning.message
    assert "whole GPU 7 ways" in warning.message


def test_no_mig_warning_for_gpus_without_mig() -> None:
    plan = plan_for("seed003-before", SEED003)
    assert "mig-profile-fits" not in codes(plan)


@pytest.mark.parametrize(
    "product",
    ["NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me-SHARED", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"],
    ids=["label-value", "without-shared"],
)
def test_measurement_copied_from_a_me_product_label_sizes_the_me_pool(product: str) -> None:
    # GFD writes the +me profile with a dot; the measurement must reach the 1g.10gb+me pool.
    plan = plan_for("h100-mig-single", (Measurement(2000, product),))
    subjects = {w.subject for w in plan.warnings}
    assert "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me" not in subjects  # measured
    assert "unused-measurement" not in codes(plan)
