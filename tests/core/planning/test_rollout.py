"""What a plan writes: the ConfigMap (existing keys verbatim), the label script, and the config
texts it starts from, read from every place a policy can give the device plugin's config."""

from __future__ import annotations

import copy
import shlex
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.core.planning.plans import SEED003, cluster, plan_for
from webhook.files import load_policy
from webhook.planning import Plan, configmap_text, existing_configs, label_script
from webhook.policy.plugin_config import parse_plugin_configmap, parse_plugin_text

# A device-plugin config as users write them: comments and key order must survive a plan.
CONFIG = """\
# time-sliced 4 ways (kept verbatim)
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def test_configmap_keeps_existing_keys_and_parses() -> None:
    plan = plan_for("seed003-before", SEED003)
    existing = {"any": "version: v1\nflags:\n  migStrategy: single"}
    text = configmap_text(plan, existing, namespace="kube-system", name="time-slicing-config")
    doc = yaml.safe_load(text)
    assert list(doc["data"]) == ["any", "nvidia-l20", "tesla-t4"]
    assert doc["data"]["any"] == existing["any"]
    configs = parse_plugin_configmap(doc, source="written")
    assert configs["nvidia-l20"].resources[0].replicas == 8
    assert configs["tesla-t4"].fail_requests_greater_than_one
    # make_plan had no config texts: migStrategy from the nodes' nvidia.com/mig.strategy label.
    assert configs["tesla-t4"].mig_strategy == "single"


_KEYS = st.from_regex(r"[-._a-zA-Z0-9]{1,30}", fullmatch=True)
_TEXTS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


@given(st.dictionaries(_KEYS, _TEXTS, max_size=5))
def test_configmap_reads_back_to_the_texts_it_was_given(existing: dict[str, str]) -> None:
    # Any text, whitespace-only lines and leading spaces included: only trailing newlines go.
    plan = Plan(Fraction(1, 10), (), None, ())
    doc = yaml.safe_load(configmap_text(plan, existing, namespace="ns", name="cm"))
    assert doc["metadata"] == {"name": "cm", "namespace": "ns"}
    assert (doc["data"] or {}) == {k: v.rstrip("\n") for k, v in existing.items()}


def test_configmap_writes_config_texts_as_literal_blocks() -> None:
    plan = Plan(Fraction(1, 10), (), None, ())
    text = configmap_text(plan, {"any": CONFIG}, namespace="kube-system", name="tsc")
    assert "  any: |-\n    # time-sliced 4 ways (kept verbatim)\n    version: v1\n" in text


@pytest.mark.parametrize(
    "node",
    ["gpu-1", "10.0.2.11", "node with spaces", "it's-quoted", "$(reboot)"],
    ids=["plain", "address", "spaces", "quote", "command"],
)
def test_label_script_names_each_node_as_one_shell_word(node: str) -> None:
    _, nodes = cluster("seed003-before")
    nodes = copy.deepcopy(nodes)
    l20 = next(
        n for n in nodes if n["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-L20"
    )
    l20["metadata"]["name"] = node
    plan = plan_for("seed003-before", SEED003, nodes)
    commands = [
        shlex.split(line)
        for line in label_script(plan, "nvidia.com/device-plugin.config").splitlines()
        if line.startswith("kubectl")
    ]
    assert [node, "nvidia.com/device-plugin.config=nvidia-l20"] in [c[3:5] for c in commands]


# --- the config texts a plan starts from: one reading of the policy's devicePlugin -----------


def _policy(device_plugin: str) -> str:
    """A SharingPolicy whose spec.devicePlugin is the YAML ``device_plugin``."""
    return (
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec:\n  devicePlugin:\n"
        + textwrap.indent(device_plugin, "    ")
    )


def _nested(key: str, value: Any) -> str:
    return f"{key}:\n" + textwrap.indent(yaml.safe_dump(value), "  ")


_CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "tsc", "namespace": "gpu-operator"},
    "data": {"any": CONFIG, "t4": CONFIG.replace("4", "3")},
}
_TEXTS_OF_CONFIGMAP = {"any": CONFIG, "t4": CONFIG.replace("4", "3")}
_INLINE = yaml.safe_load(CONFIG)


@pytest.mark.parametrize(
    ("files", "texts", "place"),
    [
        (
            {"policy.yaml": _policy(_nested("configMap", _CONFIGMAP))},
            _TEXTS_OF_CONFIGMAP,
            ("gpu-operator", "tsc"),
        ),
        (
            {
                "policy.yaml": _policy("configMapFile: cm.yaml"),
                "cm.yaml": yaml.safe_dump(_CONFIGMAP),
            },
            _TEXTS_OF_CONFIGMAP,
            ("gpu-operator", "tsc"),
        ),
        (
            {"policy.yaml": yaml.safe_dump({**_CONFIGMAP, "metadata": {"name": "tsc"}})},
            _TEXTS_OF_CONFIGMAP,
            ("kube-system", "tsc"),
        ),
        (
            {"policy.yaml": _policy("configFile: config.yaml"), "config.yaml": CONFIG},
            {"default": CONFIG},
            None,
        ),
        ({"policy.yaml": CONFIG}, {"default": CONFIG}, None),
        (
            {"policy.yaml": _policy("config: |\n" + textwrap.indent(CONFIG, "  "))},
            {"default": CONFIG},
            None,
        ),
        (
            {"policy.yaml": _policy("configMapRef: {namespace: gpu-operator, name: tsc}")},
            {},
            None,
        ),
    ],
    ids=[
        "configMap",
        "configMapFile",
        "ConfigMap-as-policy-default-namespace",
        "configFile",
        "config-file-as-policy",
        "config-text",
        "configMapRef-only",
    ],
)
def test_existing_configs_are_the_texts_the_policy_gives(
    tmp_path: Path,
    files: dict[str, str],
    texts: dict[str, str],
    place: tuple[str, str] | None,
) -> None:
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    policy = load_policy(tmp_path / "policy.yaml")
    assert existing_configs(policy) == (texts, place)


def test_an_inline_config_mapping_is_written_as_the_plugin_documents_it(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(_policy(_nested("config", _INLINE)))
    texts, place = existing_configs(load_policy(tmp_path / "policy.yaml"))
    assert place is None
    assert yaml.safe_load(texts["default"]) == _INLINE
    assert "    resources:\n      - name: nvidia.com/gpu\n" in texts["default"]  # lists indented


def test_a_live_configmap_edit_drops_the_files_texts(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(CONFIG)
    policy = load_policy(tmp_path / "policy.yaml")
    live: dict[str, Any] = {"any": parse_plugin_text(CONFIG, key="any", source="live")}
    assert existing_configs(policy.with_configs(live)) == ({}, None)
