"""``zcache.run``: turn results (tensors, zcache objects, nested containers) into numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from ..exceptions import IllegalInGraphModeError
from .tensorlike import TensorLike

__all__ = ["run"]


def run(x: Any) -> Any:
    """Convert ``x`` (tensors and zcache objects, possibly nested) to numpy; eager only.

    Tensors, Variables, Parameters, Data and CachedTensors become numpy values; lists,
    tuples (named ones too) and dicts of them keep their structure.

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

    Examples
    --------
    >>> import tensorflow as tf, zcache
    >>> zcache.run({"a": tf.constant(1.0), "b": [tf.constant([2, 3])]})
    {'a': np.float32(1.0), 'b': [array([2, 3], dtype=int32)]}
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
        return {k: run(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        out = [run(v) for v in x]
        return type(x)(*out) if hasattr(x, "_fields") else type(x)(out)
    if isinstance(x, np.ndarray) or np.isscalar(x) or x is None:
        return x
    return np.asarray(x)
