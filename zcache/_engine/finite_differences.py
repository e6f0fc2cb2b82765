r"""Finite differences: the one place that picks the steps and forms the difference quotients.

Every numerical derivative in zcache comes from here: numerical gradients
(``set_autograd_mode(False)``), :func:`zcache.hessian`, a loss's Hessian where no exact one
exists, the batched fit's HESSE and the per-event gradients of the weight correction.

The rules, written once:

- **step.** :math:`h = \epsilon^{1/3} \max(|x|, 1)` (:func:`default_step`; the step that balances
  truncation and rounding for a central difference), or a caller's step (e.g. a fraction of an
  error).
- **limits.** Both points are clipped into ``[lower, upper]``, so no parameter is ever set
  outside its limits: at a limit the difference is one-sided, and the quotient divides by the
  distance actually stepped (:func:`central_points`, :func:`forward_point`).

The helpers work on numpy values and on TensorFlow tensors alike (eagerly and inside a trace),
so the engine's tensor code and the fitting layer's numpy code share them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["REL_STEP", "default_step", "central_points", "forward_point", "central_differences"]

REL_STEP = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)


def _ops(x: Any) -> Any:
    return tf.math if tf.is_tensor(x) else np


def default_step(x: Any) -> Any:
    r""":math:`\epsilon^{1/3} \max(|x|, 1)`, elementwise (numpy or TensorFlow)."""
    ops = _ops(x)
    return REL_STEP * ops.maximum(ops.abs(x), 1.0)


def central_points(x: Any, h: Any, lower: Any = -np.inf, upper: Any = np.inf) -> tuple[Any, Any]:
    """``(x + h, x - h)`` clipped into ``[lower, upper]``: one-sided at a limit.

    Parameters
    ----------
    x, h : float, ndarray or tf.Tensor
        The point and the step (elementwise).
    lower, upper : float or ndarray
        The limits (``-inf`` / ``inf`` for none).

    Returns
    -------
    tuple
        The upper and the lower point.
    """
    ops = _ops(x)
    return ops.minimum(x + h, upper), ops.maximum(x - h, lower)


def forward_point(x: Any, h: Any, lower: Any, upper: Any, axis: int = -1) -> Any:
    """``x + h``, clipped below ``upper``; ``x - h`` (clipped above ``lower``) where that leaves under half the step.

    For one-sided (forward) differences of a batch of points, ``h`` non-zero in one
    coordinate per row: the sums along ``axis`` decide, row by row, whether there is room
    to step up.
    """
    ops = _ops(x)
    up = ops.minimum(x + h, upper)
    if ops is np:
        room = np.sum(up - x, axis=axis, keepdims=True) >= 0.5 * np.sum(h, axis=axis, keepdims=True)
        return np.where(room, up, np.maximum(x - h, lower))
    room = tf.reduce_sum(up - x, axis=axis, keepdims=True) >= 0.5 * tf.reduce_sum(h, axis=axis, keepdims=True)
    return tf.where(room, up, tf.maximum(x - h, lower))


def central_differences(f: Callable[[int, Any], Any], x: Any, h: Any, lower: Any, upper: Any) -> list[Any]:
    r"""Central differences of ``f`` along each coordinate, steps clipped into the limits.

    Column ``k`` is :math:`(f_k(u_k) - f_k(d_k)) / (u_k - d_k)` with
    ``(u_k, d_k) = central_points(x[k], h[k], lower[k], upper[k])``, where ``f(k, v)`` evaluates
    the function with coordinate ``k`` at ``v`` and the others at ``x``. The caller owns the
    state ``f`` changes and puts it back.

    Parameters
    ----------
    f : callable
        ``f(k, v)``: the function (an array or tensor of any shape) with coordinate ``k`` at ``v``.
    x, h, lower, upper : sequence
        Per coordinate: the point, the step and the limits (``-inf`` / ``inf`` for none).

    Returns
    -------
    list
        One difference quotient per coordinate (stack them as needed).

    Examples
    --------
    >>> import numpy as np
    >>> from zcache._engine.finite_differences import central_differences
    >>> x = np.array([1.0, 2.0])
    >>> def f(k, v):
    ...     y = x.copy(); y[k] = v
    ...     return y[0] ** 2 * y[1]
    >>> [round(float(c), 6) for c in central_differences(f, x, [1e-4, 1e-4], [-np.inf, -np.inf], [np.inf, 2.0])]
    [4.0, 1.0]
    """
    columns = []
    for k in range(len(x)):
        up, down = central_points(x[k], h[k], lower[k], upper[k])
        columns.append((f(k, up) - f(k, down)) / (up - down))
    return columns
