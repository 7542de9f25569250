"""The structure of a SharingPolicy's ``spec``, declared once as JSON Schema.

:data:`SPEC_SCHEMA` is built from the spec's own types (the choices of ``enforcement``,
``defaultIntent``, ``injectNodeSelection``, ``isolation.mode``, ``dra.dualPublishedNodes`` and
``quota.migShare`` are the values of the ``Literal`` types the code reads) with the builders of
``webhook.policy.schema``. The policy's reading checks every structure problem against it at
once (``webhook.policy.model.parse``); ``scripts/gen_schema.py`` writes it into the chart's
``values.schema.json`` as ``policy.spec``, and a test holds the committed file to it
(docs/diagnostics.md). What a schema cannot say (a config key the device plugin's config must
have, ``minNodes`` above ``maxNodes``, a MIG profile) is checked by the section readers
(``webhook.policy.model.sections``).

The fields are listed in the order they are read, so that problems are reported in that order.
"""

from __future__ import annotations

from webhook.policy import schema
from webhook.policy.model.values import (
    DUAL_PUBLISHED_MODES,
    ISOLATION_MODES,
    NODE_SELECTION_MODES,
    Enforcement,
    SharingIntent,
)
from webhook.policy.quota.settings import QUOTA_SCHEMA

_CONFIG_KEY = "The device-plugin config key (a key of its ConfigMap)."

DEVICE_PLUGIN_SCHEMA = schema.mapping(
    {
        "config": schema.one_of_types(
            ("string", "object"), "One device-plugin config file, inline (its text or mapping)."
        ),
        "configFile": schema.string("A device-plugin config file, relative to the policy file."),
        "configMap": schema.open_mapping("The device plugin's ConfigMap, inline."),
        "configMapFile": schema.string(
            "A file holding the device plugin's ConfigMap, relative to the policy file."
        ),
        "configMapRef": schema.mapping(
            {"namespace": schema.string(), "name": schema.string()},
            "The device plugin's ConfigMap in the cluster, watched live.",
        ),
        "nodeLabel": schema.string("The node label that picks a node's config key."),
        "defaultConfig": schema.string("The config key of nodes without that label."),
    },
    "The device plugin's config: one of config, configFile, configMap, configMapFile, and/or "
    "a configMapRef to watch.",
)

MUTATION_SCHEMA = schema.mapping(
    {
        "tolerations": schema.items(
            schema.open_mapping(), "Tolerations added to GPU pods (Equal or Exists)."
        ),
        "rewriteResourceNames": schema.boolean(
            "Rewrite nvidia.com/gpu <-> .shared <-> mig-* names per the cluster's sharing config."
        ),
        "injectNodeSelection": schema.choice(
            NODE_SELECTION_MODES,
            "When to add the product node selection (true / false: intent / never).",
            aliases=(True, False, None),
        ),
    },
    "What the mutating webhook changes in a GPU pod.",
)

POOL_SCHEMA = schema.mapping(
    {
        "name": schema.string(),
        "config": schema.string(_CONFIG_KEY, nonempty=True, null=False),
        "product": schema.string("GFD's nvidia.com/gpu.product, without -SHARED."),
        "migDevices": schema.open_mapping(
            "MIG instances per node, by profile (mixed strategy).",
            schema.integer(minimum=1, null=False),
        ),
        "minNodes": schema.integer(),
        "maxNodes": schema.integer(),
        "nodes": schema.integer("How many nodes it has when no cluster says."),
        "gpusPerNode": schema.integer(),
        "memoryMiB": schema.integer(),
        "deviceClass": schema.string("The DRA DeviceClass its nodes publish devices of."),
    },
    required=("config",),
)

DRA_SCHEMA = schema.mapping(
    {
        "deviceClassSuffixes": schema.strings(
            "Which DeviceClasses are GPU classes (a name, or one ending in .<suffix>)."
        ),
        "adminAccessNamespaces": schema.names("Where claims may set adminAccess: true."),
        "failRequestsGreaterThanOne": schema.boolean(
            "A request that shares its device asks for one device, one share."
        ),
        "dualPublishedNodes": schema.choice(
            DUAL_PUBLISHED_MODES, "What a pod with GPU claims meets on dual-published nodes."
        ),
    },
    "DRA claims (docs/dra-claims.md).",
)

ISOLATION_SCHEMA = schema.mapping(
    {
        # YAML 1.1 reads a bare `off` as false: the reader takes it for the mode it was meant to be.
        "mode": schema.choice(ISOLATION_MODES, aliases=(False,)),
        "exemptNamespaces": schema.names(),
    },
    "Containers that ask for no GPU (docs/isolation.md).",
)

SPEC_SCHEMA = schema.mapping(
    {
        "devicePlugin": DEVICE_PLUGIN_SCHEMA,
        "mutation": MUTATION_SCHEMA,
        "exemptNamespaces": schema.names("Namespaces the policy does not apply to."),
        "pools": schema.items(
            POOL_SCHEMA,
            "GPU node pools the policy declares; with minNodes or maxNodes, pools an "
            "autoscaler grows from zero (docs/autoscaling.md).",
        ),
        "dra": DRA_SCHEMA,
        "isolation": ISOLATION_SCHEMA,
        "quota": QUOTA_SCHEMA,
        "enforcement": schema.choice(
            Enforcement, "enforce: deny; warn: allow with a warning; audit: record only."
        ),
        "defaultIntent": schema.choice(
            SharingIntent, "What pods that state no intent get: shared, exclusive or any."
        ),
    },
    "The SharingPolicy spec (docs/policy.md), checked by the server at start with this schema.",
)

SPEC_FIELDS = frozenset(SPEC_SCHEMA["properties"])
