"""``zcache.run``: the mode policy, and a callable that turns results into numpy.

``zcache.run(x)`` converts tensors, Variables, Parameters, Data, CachedTensors and
nested lists/tuples/dicts of them to numpy; the mode setters live here too.

Example:
    >>> import tensorflow as tf, zcache
    >>> zcache.run({"a": tf.constant(1.0), "b": [tf.constant([2, 3])]})
    {'a': np.float32(1.0), 'b': [array([2, 3], dtype=int32)]}
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import tensorflow as tf

from ._mode import (
    ModeSetter,
    clear_graph_cache,
    executing_eagerly,
    get_autograd_mode,
    get_graph_mode,
    set_autograd_mode,
    set_graph_mode,
)
from ._tensorlike import TensorLike
from .exceptions import IllegalInGraphModeError

__all__ = [
    "ModeSetter",
    "clear_graph_cache",
    "executing_eagerly",
    "get_autograd_mode",
    "get_graph_mode",
    "numpy",
    "set_autograd_mode",
    "set_graph_mode",
]


def numpy(x: Any) -> Any:
    """Convert ``x`` (tensors and zcache objects, possibly nested) to numpy; eager only."""
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


sys.modules[__name__].__class__ = _CallableModule
