"""What the shapes share: limits as tensors and differences of error functions, without cancellation."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.special
import tensorflow as tf

from .._engine.tf_internals import leave_to_python


def limit_tensors(lower: Any, upper: Any) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.convert_to_tensor(lower, tf.float64), tf.convert_to_tensor(upper, tf.float64)



def erf_difference(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """``erf(b) - erf(a)`` for ``a <= b``, with erfc on the side away from 0 (no cancellation in a tail)."""
    return tf.where(a >= 0.0, tf.math.erfc(a) - tf.math.erfc(b),
                    tf.where(b <= 0.0, tf.math.erfc(-b) - tf.math.erfc(-a), tf.math.erf(b) - tf.math.erf(a)))


def np_erf_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The numpy twin of :func:`erf_difference`."""
    erf, erfc = scipy.special.erf, scipy.special.erfc
    return np.where(a >= 0.0, erfc(a) - erfc(b), np.where(b <= 0.0, erfc(-b) - erfc(-a), erf(b) - erf(a)))


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
