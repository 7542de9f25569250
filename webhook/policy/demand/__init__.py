"""What a pod, a workload's pod template or a ResourceClaim asks of one node.

:class:`Demand` is every way a pod asks for devices, read once: its extended resources added
up as the scheduler adds them (:func:`pod_requests`), its claims (ResourceClaims, templates,
and the claim the scheduler builds for extended resources a DeviceClass serves:
:func:`extended_resource_claim`), and where it may run (nodeSelector, required node affinity,
tolerations). The allocator (``webhook.policy.allocator``) judges it (docs/allocator.md); its
search reads the parts of a claim (requests, constraints, tolerations) from ``demand.model``.
"""

from webhook.policy.demand.extended import extended_resource_claim, is_dra_extended_resource_name
from webhook.policy.demand.model import Claim, Demand
from webhook.policy.demand.read import claim_demand, pod_demand, read_claim_spec
from webhook.policy.demand.requests import pod_requests

__all__ = [
    "Claim",
    "Demand",
    "claim_demand",
    "extended_resource_claim",
    "is_dra_extended_resource_name",
    "pod_demand",
    "pod_requests",
    "read_claim_spec",
]
