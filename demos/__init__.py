"""Runnable demos, on the public API only; from the repository root (not installed with zcache).

``python -m demos.amplitude`` (``make demo``), ``python -m demos.basics`` and
``python -m demos.toys`` (``make toys``).

They live outside the package: they are programs (command-line options, timings, files written to
``demo_output/``) that take minutes, not library code; the gallery (``docs/examples/``) holds the
short examples the documentation runs. ``demos.toys.build_study`` is a module-level builder that
Dask workers can import (the repository root on their path, as ``make toys`` has it).
"""
