"""zcache: cached computation graphs with dependency tracking, on TensorFlow.

An expensive sub-expression is cached in a ``tf.Variable`` with a validity flag;
changing a Parameter or Data invalidates exactly the caches that depend on it.

Examples
--------
>>> import numpy as np, tensorflow as tf, zcache
>>> x = zcache.Data(np.linspace(-1.0, 1.0, 1000), name="x")
>>> width = zcache.Parameter("width", 0.5, lower=0.01)
>>> shape = zcache.CachedTensor(lambda: tf.exp(-(x.value() / width.value()) ** 2), name="shape")
>>> @zcache.function(wraps="loss")
... def total():
...     return tf.reduce_sum(shape.value())
>>> a = float(total()); b = float(total())     # miss, then hit
>>> shape.stats
{'hits': 1, 'misses': 1}
>>> _ = width.set_value(0.6)                   # invalidates 'shape', no retrace
>>> float(total()) > a, total.trace_count
(True, 1)
"""

from __future__ import annotations

import os as _os
import sys as _sys


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow without its start-up lines on stderr (absl, oneDNN, CPU features).

    TensorFlow's C++ code writes them to file descriptor 2 before any log level applies, so the
    descriptor points to the null device while TensorFlow is imported, and back after. Nothing
    else changes: ``TF_CPP_MIN_LOG_LEVEL`` is not set (TensorFlow's C++ reads it once, during its
    import, and keeps the level for the process: a level set here could not be given back), nor
    TensorFlow's Python log level. ``ZCACHE_TF_LOGS=1`` keeps the lines; nothing changes either if
    TensorFlow was imported before.
    """
    from ._engine.environment import switch  # before TensorFlow: a bad value is refused first

    if "tensorflow" in _sys.modules or switch("ZCACHE_TF_LOGS"):
        return
    try:
        saved = _os.dup(2)
    except OSError:  # no stderr descriptor (an embedded interpreter): nothing to silence
        saved = None
    try:
        if saved is not None:
            _sys.stderr.flush()
            null = _os.open(_os.devnull, _os.O_WRONLY)
            _os.dup2(null, 2)
            _os.close(null)
        import tensorflow  # noqa: F401
    finally:
        if saved is not None:
            _os.dup2(saved, 2)
            _os.close(saved)


_import_tensorflow_quietly()

from typing import TYPE_CHECKING  # noqa: E402

# TensorFlow's import leaves a few hundred thousand objects that live as long as the process. The
# objects zcache's own modules make set off a full pass of Python's collector over all of them
# (one per import, about 0.2 s of CPU), as a trace does: so the same guard as around zcache's traces
# (frozen while zcache's modules are imported, unfrozen after; the collector's state is the user's
# again, see zcache/_engine/collector.py).
from ._engine.collector import collector_out_of_traces as _collector_out_of_traces  # noqa: E402


def _leave_zcache_to_python() -> None:
    """Autograph calls zcache's code as Python (tf_internals item 3): the modules imported so far.

    A module imported later (``zcache.amplitude``, ``zcache.shapes``, ``zcache.toys``, ...) marks itself at its end.
    """
    for name in [m for m in _sys.modules if m == __name__ or m.startswith(__name__ + ".")]:
        _tf_internals.leave_to_python(name)



with _collector_out_of_traces():
    # Before anything runs a TensorFlow op: TensorFlow reads its XLA flags (the compile cache's folder) at its first op.
    from ._engine import compile_cache as _compile_cache  # noqa: E402

    _compile_cache.enable_at_import()

    from . import exceptions as exceptions  # noqa: E402
    from . import loss as loss  # noqa: E402
    from . import minimize as minimize  # noqa: E402
    from . import models as models  # noqa: E402
    from . import types as types  # noqa: E402
    from ._engine import tf_internals as _tf_internals  # noqa: E402,F401  (TensorFlow internals, design/invariants.md)
    from ._engine.budget import cache_budget_info as cache_budget_info  # noqa: E402
    from ._engine.budget import set_cache_budget as set_cache_budget  # noqa: E402
    from ._engine.cachable import Cachable as Cachable  # noqa: E402
    from ._engine.cachable import cached as cached  # noqa: E402
    from ._engine.cached_tensor import CachedTensor as CachedTensor  # noqa: E402
    from ._engine.compile_cache import clear_compile_cache as clear_compile_cache  # noqa: E402
    from ._engine.compile_cache import compile_cache_info as compile_cache_info  # noqa: E402
    from ._engine.data import Data as Data  # noqa: E402
    from ._engine.dependencies import dependency_graph as dependency_graph  # noqa: E402
    from ._engine.dependencies import to_dot as to_dot  # noqa: E402
    from ._engine.function import clear_graph_cache as clear_graph_cache  # noqa: E402
    from ._engine.function import function as function  # noqa: E402
    from ._engine.gradient import gradient as gradient  # noqa: E402
    from ._engine.gradient import hessian as hessian  # noqa: E402
    from ._engine.gradient import value_and_gradient as value_and_gradient  # noqa: E402
    from ._engine.mode import get_autograd_mode as get_autograd_mode  # noqa: E402
    from ._engine.mode import get_graph_mode as get_graph_mode  # noqa: E402
    from ._engine.mode import get_jit_mode as get_jit_mode  # noqa: E402
    from ._engine.mode import set_autograd_mode as set_autograd_mode  # noqa: E402
    from ._engine.mode import set_graph_mode as set_graph_mode  # noqa: E402
    from ._engine.mode import set_jit_mode as set_jit_mode  # noqa: E402
    from ._engine.parameter import Parameter as Parameter  # noqa: E402
    from ._engine.parameter import set_values as set_values  # noqa: E402
    from ._engine.precompute import precompute as precompute  # noqa: E402
    from ._engine.to_numpy import run as run  # noqa: E402
    from .exceptions import ZCacheError as ZCacheError  # noqa: E402

    _leave_zcache_to_python()

# Imported when first used (PEP 562): what a plain fit does not need. `zcache.toys` brings in
# `zcache.scale` (batched, chunked and distributed losses).
_LAZY_MODULES = ("toys",)

if TYPE_CHECKING:  # type checkers and IDEs see the lazy names
    from . import toys as toys


def __getattr__(name: str) -> object:
    """Import a lazy submodule (``zcache.toys``) on first access."""
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")  # binds it on the package: later reads skip this
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The package's names, the lazy submodules among them."""
    return sorted(set(globals()) | set(_LAZY_MODULES))


def _installed_version() -> str:
    """The version of the installed distribution (setup.cfg's, through the package metadata): one source of truth."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zcache")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__version__: str = _installed_version()

__all__ = [
    # inputs and caches
    "Parameter",
    "Data",
    "set_values",
    "CachedTensor",
    "cached",
    "Cachable",
    # the mode policy
    "function",
    "set_graph_mode",
    "get_graph_mode",
    "set_autograd_mode",
    "get_autograd_mode",
    "set_jit_mode",
    "get_jit_mode",
    "clear_graph_cache",
    # compiled programs on disk
    "compile_cache_info",
    "clear_compile_cache",
    # the cache memory budget
    "set_cache_budget",
    "cache_budget_info",
    # gradients, precompute, the dependency graph
    "gradient",
    "value_and_gradient",
    "hessian",
    "precompute",
    "run",
    "dependency_graph",
    "to_dot",
    "ZCacheError",
    # modules
    "exceptions",
    "loss",
    "minimize",
    "models",
    "toys",
    "types",
]
