"""Benchmarks: each module prints its figures with a baseline measured in the same run.

Run one from the repository's root as a module, ``.venv/bin/python -m bench.engine``: the
repository is then first on the import path, so ``bench.``, ``tests.`` and ``webhook`` imports
resolve without any path set-up, and no file here can shadow a standard-library module.
"""
