"""``review()``: the one entry point the server, the CLI and the harness share.

A review reads the pod (or pod template) once, decides where its GPU requests can run in the
inventory, mutates a copy (renames, node selection, tolerations) and validates the result.
Rules are judged on the object as it will be after mutation, which is what the API server's
validating webhooks see, so a mutated pod always passes its own validation.

``subjects`` reads the object once into a pod, a pod template or a claim (its scope decided,
its claims resolved); ``reviewers`` has one reviewer per kind (pods and templates share
``pod_spec``); the steps, one module each: ``scope`` (what is reviewed at all), ``checks``
(the per-container rules), ``intent`` (the pod's annotations and node selection), ``placement``
(the offers that fit, the names, the node selection), ``mutation`` (the mutated copy), ``fit``
(the allocator's verdict), ``claims`` (the claim rules), ``dual`` (dual-published nodes),
``isolation`` (containers without a GPU); ``results`` (the runner: one result per rule, from
the declarations of ``webhook/policy/rules.py``) and ``decide`` (``review()`` itself).
"""

from webhook.policy.engine.decide import review

__all__ = ["review"]
