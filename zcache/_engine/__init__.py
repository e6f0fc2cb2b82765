"""The caching engine: inputs, caches, the dependency graph, traced functions, gradients.

Private: the public API is re-exported flat by :mod:`zcache` (``zcache.Parameter``,
``zcache.CachedTensor``, ``zcache.function``, ...) and :mod:`zcache.types`. Nothing in here imports
the fitting layer (the public modules beside this package) except :mod:`zcache.exceptions`;
``tests/test_imports.py`` and the import-linter contract in ``setup.cfg`` check it. The modules,
bottom to top, are listed in ``design/overview.md``.
"""
