"""Developer scripts. Those that import the tests' helpers run as modules from the
repository's root (``.venv/bin/python -m scripts.readme_dra_demo``); the others are plain scripts.
"""
