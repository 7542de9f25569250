"""The webhook's own policy file: the device plugin's config plus what only the webhook needs.

```yaml
apiVersion: gpu-policy.io/v1alpha1
kind: SharingPolicy
spec:
  enforcement: enforce | warn | audit
  defaultIntent: any | shared | exclusive
  exemptNamespaces: [...]
  devicePlugin: {configMap | configMapFile | config | configFile, nodeLabel, defaultConfig,
                 configMapRef: {namespace, name}}
  pools: [{name, config, product, nodes, minNodes, maxNodes, gpusPerNode, memoryMiB,
           migDevices, deviceClass}]
  mutation: {rewriteResourceNames, injectNodeSelection: intent | always | when-needed | never,
             tolerations}
  dra: {deviceClassSuffixes, failRequestsGreaterThanOne, adminAccessNamespaces,
        dualPublishedNodes: warn | avoid}
  isolation: {mode: off | warn | enforce, exemptNamespaces: [...]}
  quota: {enabled, migShare: compute | memory, weights: {name | class | profile: weight}}
```

``quota`` is about GPU budgets per namespace (docs/quota.md, ``webhook.policy.quota``).

``dra`` is about claims (ResourceClaims, ResourceClaimTemplates, pods' ``resourceClaims``;
docs/dra-claims.md): ``deviceClassSuffixes`` says which claims are GPU claims (a request whose
DeviceClass is named one of them, or ends in ``.<suffix>``; default ``[nvidia.com]``, the
classes NVIDIA's DRA driver installs); ``failRequestsGreaterThanOne`` (default true), the device
plugin's word for the same rule, refuses a request for more than one device whose config shares
the device (the driver's ``GpuConfig`` / ``MigDeviceConfig`` sharing TimeSlicing or MPS) and a
consumable-capacity ``shares`` request above one; ``adminAccessNamespaces`` (default none) are
the namespaces whose claims may set ``adminAccess: true``; ``dualPublishedNodes`` (default
``warn``) is what a pod with GPU claims meets while some nodes publish the same GPUs through the
device plugin and a ResourceSlice: a warning naming them, or (``avoid``) a required node
affinity that keeps it off them, and a refusal when only they could serve it (docs/migrate.md).

``isolation`` is about the containers that ask for no GPU (docs/isolation.md): ``off`` (the
default) leaves them alone and the webhook never looks at a pod without a GPU request; ``warn``
and ``enforce`` review every pod that can be placed on a GPU node. Under ``enforce`` each of its
containers that asks for no GPU gets ``NVIDIA_VISIBLE_DEVICES=void`` and one that sets the
variable to GPUs itself is refused; ``warn`` says so instead. ``exemptNamespaces`` (the GPU
Operator's own ``gpu-operator`` is the usual one: its pods reach the GPUs on purpose, without a
request) are left alone, as is a pod annotated ``gpu-policy.io/isolation: disabled`` (which is
reported).

``injectNodeSelection`` says when the webhook adds the product node selection: ``intent`` (the
default) whenever the pod states what it wants (a sharing, product or MIG profile annotation)
or the webhook renamed its resource, and whenever the name alone would reach nodes that cannot
serve it; ``when-needed`` only in that last case; ``always`` for every GPU pod; ``never``.
``true`` and ``false`` are aliases of ``intent`` and ``never``. A pod that keeps what it asked
for still lands right when the nodes change, and a cluster autoscaler scaling up for it can pick
the right node group.

A bare device-plugin config file or ConfigMap is also accepted as a policy, with defaults for
everything else: one source of truth for plugin and webhook. This package opens no files: a
shell passes ``read`` to resolve ``configFile`` / ``configMapFile`` references.

``devicePlugin`` is read here only: the parsed configs go into ``Policy.configs``, their texts
as given (for ``gpu-policy plan``, which writes the keys it keeps back verbatim) into
``Policy.plugin_source``.

The package holds the values (``values``: :class:`Policy` and its parts), the reading of each
``spec`` section (``sections``) and of a whole document (``parse``); the names the rest of the
code uses are importable from the package itself.
"""

from webhook.policy.model.parse import parse_policy
from webhook.policy.model.values import (
    NODE_SELECTION_MODES,
    ConfigMapRef,
    DeclaredPool,
    DraPolicy,
    Enforcement,
    Isolation,
    NodeSelection,
    PluginSource,
    Policy,
    configmap_source,
)

__all__ = [
    "NODE_SELECTION_MODES",
    "ConfigMapRef",
    "DeclaredPool",
    "DraPolicy",
    "Enforcement",
    "Isolation",
    "NodeSelection",
    "PluginSource",
    "Policy",
    "configmap_source",
    "parse_policy",
]
