"""The ``gpu-policy`` command line: ``main`` (parser, exit codes, colour, errors), one module
per command (review, certs, inventory, plan, audit, migrate, serve, test) and ``render``
(tables, JSON, YAML).
"""
