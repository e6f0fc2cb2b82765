"""``zcache.run``: turn results (tensors, zcache objects, nested containers) into numpy.

``zcache.run(x)`` converts tensors, Variables, Parameters, Data, CachedTensors and
nested lists/tuples/dicts of them to numpy. The mode setters that used to live here
are top-level functions now (``zcache.set_graph_mode`` ...); the old names still work,
with a ``DeprecationWarning``.

Examples
--------
>>> import tensorflow as tf, zcache
>>> zcache.run({"a": tf.constant(1.0), "b": [tf.constant([2, 3])]})
{'a': np.float32(1.0), 'b': [array([2, 3], dtype=int32)]}
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

import numpy as np
import tensorflow as tf

from ._engine import function as _function
from ._engine import mode as _mode
from ._engine import restorer as _restorer
from ._engine.tensorlike import TensorLike
from .exceptions import IllegalInGraphModeError

__all__ = ["numpy"]

# Deprecated aliases (name -> (object, where it lives now)).
_MOVED = {
    "ModeSetter": (_restorer.Restorer, "zcache.types.Restorer"),
    "clear_graph_cache": (_function.clear_graph_cache, "zcache.clear_graph_cache"),
    "executing_eagerly": (_mode.executing_eagerly, "`not tf.inside_function()`"),
    "get_autograd_mode": (_mode.get_autograd_mode, "zcache.get_autograd_mode"),
    "get_graph_mode": (_mode.get_graph_mode, "zcache.get_graph_mode"),
    "set_autograd_mode": (_mode.set_autograd_mode, "zcache.set_autograd_mode"),
    "set_graph_mode": (_mode.set_graph_mode, "zcache.set_graph_mode"),
}


def numpy(x: Any) -> Any:
    """Convert ``x`` (tensors and zcache objects, possibly nested) to numpy; eager only.

    Parameters
    ----------
    x : object
        A tensor, Variable, zcache object, number, array, or a list/tuple/dict of them.

    Returns
    -------
    object
        The same structure with numpy values.

    Raises
    ------
    IllegalInGraphModeError
        Inside a trace (there are no concrete values there).
    """
    if tf.inside_function():
        raise IllegalInGraphModeError(
            "zcache.run(...) converts to numpy and needs concrete values; inside a trace return "
            "the tensors from the traced function and convert the result."
        )
    if isinstance(x, TensorLike):
        return x.value().numpy()
    if isinstance(x, (tf.Tensor, tf.Variable)):
        return x.numpy()
    if isinstance(x, dict):
        return {k: numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        out = [numpy(v) for v in x]
        return type(x)(*out) if hasattr(x, "_fields") else type(x)(out)
    if isinstance(x, np.ndarray) or np.isscalar(x) or x is None:
        return x
    return np.asarray(x)


class _CallableModule(types.ModuleType):
    def __call__(self, x: Any) -> Any:
        return numpy(x)

    def __getattr__(self, name: str) -> Any:
        if name in _MOVED:
            obj, where = _MOVED[name]
            warnings.warn(f"zcache.run.{name} is deprecated; use {where}.", DeprecationWarning, stacklevel=2)
            return obj
        raise AttributeError(f"module 'zcache.run' has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallableModule
