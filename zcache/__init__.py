"""zcache: cached computation graphs with dependency tracking, on TensorFlow.

An expensive sub-expression is cached in a ``tf.Variable`` with a validity flag;
changing a Parameter or Data invalidates exactly the caches that depend on it.

Example:
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

_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from . import exceptions as exceptions  # noqa: E402
from . import loss as loss  # noqa: E402
from . import minimize as minimize  # noqa: E402
from . import models as models  # noqa: E402
from . import run as run  # noqa: E402
from . import toys as toys  # noqa: E402
from ._cachable import Cachable as Cachable  # noqa: E402
from ._cachable import cached as cached  # noqa: E402
from ._cached_tensor import CachedTensor as CachedTensor  # noqa: E402
from ._depgraph import dependency_graph as dependency_graph  # noqa: E402
from ._depgraph import to_dot as to_dot  # noqa: E402
from ._gradient import gradient as gradient  # noqa: E402
from ._gradient import hessian as hessian  # noqa: E402
from ._gradient import value_and_gradient as value_and_gradient  # noqa: E402
from ._mode import IDENTIFIERS as IDENTIFIERS  # noqa: E402
from ._mode import Function as Function  # noqa: E402
from ._mode import ModeSetter as ModeSetter  # noqa: E402
from ._mode import clear_graph_cache as clear_graph_cache  # noqa: E402
from ._mode import function as function  # noqa: E402
from ._mode import get_autograd_mode as get_autograd_mode  # noqa: E402
from ._mode import get_graph_mode as get_graph_mode  # noqa: E402
from ._mode import set_autograd_mode as set_autograd_mode  # noqa: E402
from ._mode import set_graph_mode as set_graph_mode  # noqa: E402
from ._parameter import Data as Data  # noqa: E402
from ._parameter import Parameter as Parameter  # noqa: E402
from ._parameter import set_values as set_values  # noqa: E402
from ._precompute import PrecomputeReport as PrecomputeReport  # noqa: E402
from ._precompute import precompute as precompute  # noqa: E402
from .exceptions import DependencyCycleError as DependencyCycleError  # noqa: E402
from .exceptions import IllegalInGraphModeError as IllegalInGraphModeError  # noqa: E402
from .exceptions import ZCacheError as ZCacheError  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Cachable",
    "CachedTensor",
    "Data",
    "DependencyCycleError",
    "Function",
    "IDENTIFIERS",
    "IllegalInGraphModeError",
    "ModeSetter",
    "Parameter",
    "PrecomputeReport",
    "ZCacheError",
    "cached",
    "clear_graph_cache",
    "dependency_graph",
    "exceptions",
    "function",
    "get_autograd_mode",
    "get_graph_mode",
    "gradient",
    "hessian",
    "loss",
    "minimize",
    "models",
    "precompute",
    "run",
    "set_autograd_mode",
    "set_graph_mode",
    "set_values",
    "to_dot",
    "toys",
    "value_and_gradient",
]
