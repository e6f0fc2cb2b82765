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

    TensorFlow's C++ code writes them to file descriptor 2 before any log level applies, so
    the descriptor points to the null device for the import. Set ``ZCACHE_TF_LOGS=1`` to
    keep TensorFlow's C++ and Python logs as TensorFlow sets them; an explicit
    ``TF_CPP_MIN_LOG_LEVEL`` is respected. Nothing changes if TensorFlow was imported before.
    The level is 3 (C++ errors too): TensorFlow logs an error line for every program it loads
    from the compile cache (it first tries the file as text); its real errors are raised anyway.
    """
    if "tensorflow" in _sys.modules or _os.environ.get("ZCACHE_TF_LOGS"):
        return
    _os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
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
        import tensorflow
    finally:
        if saved is not None:
            _os.dup2(saved, 2)
            _os.close(saved)
    tensorflow.get_logger().setLevel("ERROR")  # TensorFlow's Python warnings: ZCACHE_TF_LOGS=1 keeps them


_import_tensorflow_quietly()

# Before anything runs a TensorFlow op: TensorFlow reads its XLA flags (the compile cache's folder) at its first op.
from ._engine import compile_cache as _compile_cache  # noqa: E402

_compile_cache.enable_at_import()

from . import exceptions as exceptions  # noqa: E402
from . import loss as loss  # noqa: E402
from . import minimize as minimize  # noqa: E402
from . import models as models  # noqa: E402
from . import run as run  # noqa: E402
from . import toys as toys  # noqa: E402
from . import types as types  # noqa: E402
from ._engine import tf_internals as _tf_internals  # noqa: E402,F401  (TensorFlow hooks, set once at import)
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
from .exceptions import ZCacheError as ZCacheError  # noqa: E402


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
    "dependency_graph",
    "to_dot",
    "ZCacheError",
    # modules
    "exceptions",
    "loss",
    "minimize",
    "models",
    "run",
    "toys",
    "types",
]

# Names that moved (name -> where it lives now); the old top-level names still work, with a
# DeprecationWarning, until zcache 0.3.
_MOVED = {
    "IDENTIFIERS": (types, "IDENTIFIERS"),
    "Function": (types, "Function"),
    "ModeSetter": (types, "Restorer"),
    "PrecomputeReport": (types, "PrecomputeReport"),
    "DependencyCycleError": (exceptions, "DependencyCycleError"),
    "IllegalInGraphModeError": (exceptions, "IllegalInGraphModeError"),
}


def __getattr__(name: str) -> object:
    if name in _MOVED:
        import warnings

        module, new = _MOVED[name]
        warnings.warn(
            f"zcache.{name} is deprecated; use {module.__name__}.{new}.", DeprecationWarning, stacklevel=2
        )
        return getattr(module, new)
    raise AttributeError(f"module 'zcache' has no attribute {name!r}")


def _freeze_what_import_made() -> None:
    """Take the objects alive now out of the cyclic garbage collector's full passes (``gc.freeze``).

    They are TensorFlow's, numpy's and zcache's modules, about 430,000 objects that live as long
    as the process. Every full pass of the collector scanned them again: 0.23-0.33 s each,
    and TensorFlow's traces allocate enough to set one off now and then (one fell inside the
    trace of a compiled fit's program, a third of a small fit's first call). Frozen, a full pass
    costs what the objects made since take. Nothing is lost: freezing moves objects, and an
    object frozen here is still freed when its last reference goes; only a reference cycle
    among them would stay (36 objects at import). ``ZCACHE_GC_FREEZE=0`` leaves the collector
    alone.
    """
    if _os.environ.get("ZCACHE_GC_FREEZE", "1") != "0":
        import gc

        gc.freeze()


_freeze_what_import_made()
