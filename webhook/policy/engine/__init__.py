"""``review()``: the one entry point the server, the CLI and the harness share.

A review reads the pod (or pod template) once, decides where its GPU requests can run in the
inventory, mutates a copy (renames, node selection, tolerations) and validates the result.
Rules are judged on the object as it will be after mutation, which is what the API server's
validating webhooks see, so a mutated pod always passes its own validation.

The steps, one module each: ``scope`` (what is reviewed at all), ``checks`` (the per-container
rules), ``intent`` (the pod's annotations and node selection), ``placement`` (the offers that
fit, the names, the node selection), ``mutation`` (the mutated copy), ``results`` (one result
per rule) and ``decide`` (``review()`` itself, which strings them together).
"""

from webhook.policy.engine.decide import review

__all__ = ["review"]
