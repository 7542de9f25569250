"""Tests of webhook.kube against the real API server (behind the fault proxy), with the real
client."""
