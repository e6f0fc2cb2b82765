r"""Gradients of functions of Parameters, automatic or numerical.

With ``set_autograd_mode(True)`` (default), :func:`gradient` uses a
``tf.GradientTape``; gradients through caches are exact on hits and misses.

With ``set_autograd_mode(False)`` it uses central differences,

.. math:: \partial_i f \approx \frac{f(p + h_i e_i) - f(p - h_i e_i)}{2 h_i},
          \qquad h_i = \epsilon^{1/3} \max(|p_i|, 1),

moving one parameter at a time with ``set_value``, so each step recomputes only
the caches that depend on the moved parameter. The two points are clipped into
the parameter's limits (one-sided difference at a limit). Both modes work eagerly
and inside a trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .context import differentiating
from .finite_differences import central_differences, default_step
from .inputs import backing_variable
from .mode import get_autograd_mode
from .parameter import Parameter, set_values
from .tf_internals import zcache_graphs

__all__ = ["gradient", "value_and_gradient", "hessian"]


def _check_params(params: Sequence[Parameter]) -> list[Parameter]:
    params = list(params)
    for p in params:
        if not isinstance(p, Parameter):
            raise TypeError(f"gradient() takes zcache.Parameter objects, got {p!r}.")
    return params


def _scalar(y: Any) -> tf.Tensor:
    y = tf.convert_to_tensor(y)
    return tf.reduce_sum(y) if y.shape.rank != 0 else y


def value_and_gradient(
    func: Callable[[], Any], params: Sequence[Parameter], numerical: bool | None = None
) -> tuple[tf.Tensor, tf.Tensor]:
    """Value of ``sum(func())`` and its gradient w.r.t. ``params`` (float64 vector).

    Parameters
    ----------
    func : callable
        Zero-argument callable reading the parameters; its result is summed to a scalar.
    params : sequence of Parameter
        The parameters to differentiate by.
    numerical : bool, optional
        Force numerical (``True``) or automatic (``False``) gradients; ``None`` follows
        :func:`zcache.get_autograd_mode`.

    Returns
    -------
    value : tf.Tensor
        The scalar ``sum(func())``.
    gradient : tf.Tensor
        Its gradient, a float64 vector with one entry per parameter.

    Raises
    ------
    TypeError
        If an entry of ``params`` is not a :class:`Parameter`.

    Examples
    --------
    >>> import zcache
    >>> a = zcache.Parameter("a_g", 3.0)
    >>> v, g = zcache.value_and_gradient(lambda: a.value() ** 2, [a])
    >>> float(v), g.numpy().tolist()
    (9.0, [6.0])
    """
    params = _check_params(params)
    use_numerical = (not get_autograd_mode()) if numerical is None else numerical
    if use_numerical:
        return _numerical(func, params)
    variables = [backing_variable(p) for p in params]
    # zcache_graphs: zcache's gradients (tf_internals items 10, 17) in the backward passes built here
    with differentiating(params), zcache_graphs():  # caches attach gradients for these parameters only
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            y = _scalar(func())
        grads = tape.gradient(y, variables)
    grads = [tf.zeros((), tf.float64) if g is None else tf.cast(g, tf.float64) for g in grads]
    return y, tf.stack(grads) if grads else tf.zeros([0], tf.float64)


def gradient(func: Callable[[], Any], params: Sequence[Parameter], numerical: bool | None = None) -> tf.Tensor:
    """Gradient of ``sum(func())`` w.r.t. ``params``, honouring the autograd mode.

    Parameters
    ----------
    func : callable
        Zero-argument callable reading the parameters; its result is summed to a scalar.
    params : sequence of Parameter
        The parameters to differentiate by.
    numerical : bool, optional
        Force numerical (``True``) or automatic (``False``) gradients; ``None`` follows
        :func:`zcache.get_autograd_mode`.

    Returns
    -------
    tf.Tensor
        A float64 vector with one entry per parameter.

    Raises
    ------
    TypeError
        If an entry of ``params`` is not a :class:`Parameter`.

    Examples
    --------
    >>> import zcache
    >>> a = zcache.Parameter("a_n", 2.0)
    >>> with zcache.set_autograd_mode(False):
    ...     round(float(zcache.gradient(lambda: a.value() ** 3, [a])[0]), 6)
    12.0
    """
    return value_and_gradient(func, params, numerical)[1]


def _limits(params: list[Parameter]) -> tuple[list[float], list[float]]:
    return ([-np.inf if p.lower is None else p.lower for p in params],
            [np.inf if p.upper is None else p.upper for p in params])


def _differences(params: list[Parameter], start: list[tf.Tensor], func: Callable[[], Any]) -> list[tf.Tensor]:
    """Central differences of ``func()``, moving one parameter at a time with ``set_value``.

    Each parameter is put back at its start before the next one moves (and the last at the
    end, also inside a trace, where :func:`_restoring` cannot), so each step recomputes only
    the caches that depend on the moved parameter.
    """
    moved: list[int] = []

    def f(k: int, v: Any) -> Any:
        if moved and moved[0] != k:
            params[moved[0]].set_value(start[moved[0]])
        moved[:] = [k]
        params[k].set_value(v)
        return func()

    columns = central_differences(f, start, [default_step(x) for x in start], *_limits(params))
    if moved:
        params[moved[0]].set_value(start[moved[0]])
    return columns


@contextlib.contextmanager
def _restoring(params: list[Parameter]) -> Iterator[list[tf.Tensor]]:
    """Yield the current values of ``params``; put them back afterwards, also when ``func`` raises.

    Inside a trace nothing can run after a failure: the zcache.function whose call fails
    puts back what its graph wrote instead.
    """
    x0 = [backing_variable(p).read_value() for p in params]
    try:
        yield x0
    finally:
        if not tf.inside_function():
            set_values(params, [float(x) for x in x0])


def _numerical(func: Callable[[], Any], params: list[Parameter]) -> tuple[tf.Tensor, tf.Tensor]:
    f0 = tf.cast(_scalar(func()), tf.float64)
    with _restoring(params) as start:
        grads = _differences(params, start, lambda: tf.cast(_scalar(func()), tf.float64))
    return f0, tf.stack(grads) if grads else tf.zeros([0], tf.float64)


def hessian(func: Callable[[], Any], params: Sequence[Parameter]) -> tf.Tensor:
    r"""Hessian of ``sum(func())``: central differences of exact (autodiff) gradients.

    .. math:: H_{ij} \approx \tfrac12\left[\frac{g_i(p + h_j e_j) - g_i(p - h_j e_j)}{2h_j}
              + (i \leftrightarrow j)\right]

    Works through caches in eager and traced code (so do nested tapes, which give
    exact second derivatives; this helper needs only first-order gradients).

    Parameters
    ----------
    func : callable
        Zero-argument callable reading the parameters; its result is summed to a scalar.
    params : sequence of Parameter
        The parameters to differentiate by.

    Returns
    -------
    tf.Tensor
        The symmetric float64 matrix, one row and column per parameter.

    Raises
    ------
    TypeError
        If an entry of ``params`` is not a :class:`Parameter`.

    Examples
    --------
    >>> import zcache
    >>> a, b = zcache.Parameter("a_h", 1.0), zcache.Parameter("b_h", 2.0)
    >>> h = zcache.hessian(lambda: a.value() ** 2 * b.value(), [a, b]).numpy()
    >>> [[round(float(v), 5) for v in row] for row in h]
    [[4.0, 2.0], [2.0, 0.0]]
    """
    params = _check_params(params)
    with _restoring(params) as start:
        # Steps clipped into the limits, by the rule every finite difference in zcache follows.
        rows = _differences(params, start, lambda: gradient(func, params, numerical=False))
    if not rows:
        return tf.zeros([0, 0], tf.float64)
    hess = tf.stack(rows)
    return 0.5 * (hess + tf.transpose(hess))
