"""Deciding fit as kube-scheduler does: its structured allocator and the CEL of device selectors.

``cel`` is the CEL environment of ``k8s.io/dynamic-resource-allocation/cel`` (docs/cel.md).
"""
