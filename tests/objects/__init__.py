"""The one vocabulary of Kubernetes objects the tests and the benchmarks build.

One module per kind of thing, each builder once:

* ``pods``: a pod spec's containers (:func:`ctr`, :func:`gpu`), a :func:`pod` as a user writes
  it (:func:`claim_pod`: one that uses a claim from a template), a :func:`replica` of a
  workload as the API server hands it to the webhooks (its token volume, :func:`token_mount`),
  and a :func:`listed_pod` as the API server lists it (status, owner, a sidecar);
* ``nodes``: a realistic :func:`gpu_node` as gpu-feature-discovery and the device plugin leave
  it (about 8 KB, :func:`gfd_node` without the bulk), :func:`cluster` of many, a plain
  :func:`node_object` as the kubelet leaves it, :func:`cpu_node`;
* ``workloads``: Deployments, Jobs and the other pod-template kinds (:func:`workload`), owner
  references (:func:`owner`, :func:`uid`);
* ``dra``: DeviceClasses, ResourceSlices, claims and templates as NVIDIA's DRA driver uses them,
  and devices of any driver (:func:`device`, :func:`partitionable` GPUs);
* ``config``: the device-plugin ConfigMap and configs, the example cluster, policies that read
  a ConfigMap;
* ``reviews``: AdmissionReview requests, captured from real API servers or built.

``from tests.objects import pod, gpu_node`` reaches every name.
"""

from tests.objects.config import (
    EXAMPLE_CLUSTER,
    IGNORED_STRATEGY,
    PLUGIN_CONFIGMAP,
    TIME_SLICING_CONFIG,
    configmap,
    configmap_ref_policy,
    example_cluster,
    load_example_cluster,
    time_slicing_config,
)
from tests.objects.dra import (
    GPU_CLASS_CEL,
    MIG_CLASS_CEL,
    allocated_claim,
    claim_template,
    device,
    device_class,
    dra_gpu,
    dra_mig,
    exactly,
    nvidia_classes,
    partitionable,
    resource_claim,
    resource_slice,
    sharing_config,
)
from tests.objects.nodes import PRODUCTS, cluster, cpu_node, gfd_node, gpu_node, node_object
from tests.objects.pods import (
    NOW,
    claim_pod,
    ctr,
    gpu,
    listed_pod,
    pod,
    replica,
    token_mount,
    token_volume,
)
from tests.objects.reviews import (
    CASES,
    FIXTURES,
    VERSIONS,
    as_sent,
    fixture_ids,
    load,
    new_uid,
    pod_spec,
    review,
    with_gpu,
)
from tests.objects.workloads import API_VERSIONS, TEMPLATE_KINDS, owner, uid, workload

__all__ = [
    "API_VERSIONS",
    "CASES",
    "EXAMPLE_CLUSTER",
    "FIXTURES",
    "GPU_CLASS_CEL",
    "IGNORED_STRATEGY",
    "MIG_CLASS_CEL",
    "NOW",
    "PLUGIN_CONFIGMAP",
    "PRODUCTS",
    "TEMPLATE_KINDS",
    "TIME_SLICING_CONFIG",
    "VERSIONS",
    "allocated_claim",
    "as_sent",
    "claim_pod",
    "claim_template",
    "cluster",
    "configmap",
    "configmap_ref_policy",
    "cpu_node",
    "ctr",
    "device",
    "device_class",
    "dra_gpu",
    "dra_mig",
    "exactly",
    "example_cluster",
    "fixture_ids",
    "gfd_node",
    "gpu",
    "gpu_node",
    "listed_pod",
    "load",
    "load_example_cluster",
    "new_uid",
    "node_object",
    "nvidia_classes",
    "owner",
    "partitionable",
    "pod",
    "pod_spec",
    "replica",
    "resource_claim",
    "resource_slice",
    "review",
    "sharing_config",
    "time_slicing_config",
    "token_mount",
    "token_volume",
    "uid",
    "with_gpu",
    "workload",
]
