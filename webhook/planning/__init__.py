"""PURE: replica sizing from measured memory and the rollout it writes (``gpu-policy plan``).

No files, no cluster: the CLI reads the nodes, the policy and the measurements, hands them to
:func:`make_plan`, and writes the texts :mod:`~webhook.planning.rollout` makes of the plan.

- ``measurements``: what is sized from (``--measure``, a Measurements file, the headroom);
- ``sizing``: the rule, and the plan: replicas per pool and resource, config keys, warnings;
- ``plugin_texts``: the device plugin's config texts, as the policy gives them and as written;
- ``rollout``: the ConfigMap, the label script, the matching policy, the inventory after.
"""

from webhook.planning.measurements import (
    Measurement,
    parse_headroom,
    parse_measure_arg,
    parse_measurements,
    parse_memory_mib,
)
from webhook.planning.plan import Plan, PlanWarning
from webhook.planning.plugin_texts import configmap_texts, dump_yaml, existing_configs
from webhook.planning.rollout import (
    CONFIGMAP_FILE,
    configmap_text,
    label_script,
    planned_inventory,
    policy_text,
    pool_changes,
)
from webhook.planning.sizing import (
    DEFAULT_HEADROOM,
    fitting_replicas,
    key_for_model,
    make_plan,
    profile_memory_estimate,
    replicas_for,
)

__all__ = [
    "CONFIGMAP_FILE",
    "DEFAULT_HEADROOM",
    "Measurement",
    "Plan",
    "PlanWarning",
    "configmap_text",
    "configmap_texts",
    "dump_yaml",
    "existing_configs",
    "fitting_replicas",
    "key_for_model",
    "label_script",
    "make_plan",
    "parse_headroom",
    "parse_measure_arg",
    "parse_measurements",
    "parse_memory_mib",
    "planned_inventory",
    "policy_text",
    "pool_changes",
    "profile_memory_estimate",
    "replicas_for",
]
