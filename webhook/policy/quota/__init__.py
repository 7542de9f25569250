"""GPU budgets per namespace in GPU-equivalents (docs/quota.md).

``settings``: ``spec.quota`` of the policy; ``weights``: what a pod costs; ``charge``: the
request the mutating webhook adds; ``budgets``: per-namespace budget, use and what runs
uncounted, for ``gpu-policy inventory`` and ``audit``.
"""
