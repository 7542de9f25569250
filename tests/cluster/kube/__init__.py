"""Tests of webhook.kube against a loopback fake API server, with the real client."""
