"""Tests of the one allocator: its port of kube-scheduler's structured allocator, the demand
and supply models it reads (docs/allocator.md)."""
