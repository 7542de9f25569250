"""One allocator: does a demand fit a node group, exactly as kube-scheduler would judge it.

A port of kube-scheduler v1.36.2's filters for devices: NodeAffinity and TaintToleration
(through ``webhook.policy.nodes``), NodeResourcesFit's extended-resource check, and the
DynamicResources plugin's structured allocator (``k8s.io/dynamic-resource-allocation/
structured``, the "incubating" implementation the default feature gates select), judged on an
empty cluster. docs/allocator.md says what each part ports.

Public entry points: :func:`fit` (one group) and :func:`fit_anywhere` (every group).
"""

from webhook.policy.allocator.fit import fit, fit_anywhere
from webhook.policy.allocator.result import DOES_NOT_FIT, FITS, UNKNOWN, Fit, Verdict
from webhook.policy.allocator.shapes import Reads, reads_of

__all__ = [
    "DOES_NOT_FIT",
    "FITS",
    "UNKNOWN",
    "Fit",
    "Reads",
    "Verdict",
    "fit",
    "fit_anywhere",
    "reads_of",
]
