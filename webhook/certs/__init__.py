"""Certificates the server manages itself at run time (``certificates.mode: selfManaged``)."""
