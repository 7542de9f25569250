"""The ``gpu-policy`` command line: ``main`` (the parser and the entry points), one module per
command (review, certs, inventory, plan, audit, serve, test), and what they share: ``common``
(exit codes, errors, colour, the kubeconfig), ``render`` (tables, colours, JSON, YAML) and
``pools`` (the pool table of ``inventory`` and ``plan``).
"""
