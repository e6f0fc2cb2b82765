"""Runnable demos, on the public API only.

``python -m zcache.demos.amplitude`` (``make demo``), ``python -m zcache.demos.basics`` and
``python -m zcache.demos.toys`` (``make toys``).
"""
