"""The traced programs of a loss: what :class:`zcache.loss.BaseLoss` evaluates, kept per set of parameters.

A loss owns one :class:`LossPrograms` (composition: the loss is the numbers, this is how they are
traced and kept). It builds, once per loss and tuple of parameters,

- the checked value (a :class:`zcache.types.Function` that raises a ``FitError`` on a NaN or
  infinite loss) and the value and gradient by the current parameters;
- the minimizer's entry points: value, value + gradient and Hessian *at* a vector ``x``, which
  set the parameters inside the traced call (the offset a tensor argument, so each
  minimization owns its own and nothing retraces from one offset to the next);
- the Hessian: the loss's structured Hessian where it offers one, else exact second-order
  autodiff where precompute bypassed every cache on the parameters' path, else central
  differences of exact gradients (no new graph).

``loss`` is a :class:`zcache.loss.BaseLoss`, not imported: the loss module builds on this one.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> mu = zcache.Parameter("mu_lp", 0.0)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.array([-0.5, 0.5, 1.0])))
>>> programs = LossPrograms(loss)
>>> [f.__name__ for f in programs.at((mu,))]
['value_at', 'value_gradient_at', 'hessian_at']
>>> differenced = programs.hessian_at(np.array([0.2]), (mu,), exact=False).numpy()
>>> exact = programs.hessian_at(np.array([0.2]), (mu,), exact=True).numpy()   # second-order autodiff
>>> bool(np.allclose(differenced, exact, rtol=1e-7)), round(float(exact[0, 0]), 4)   # ~ n / sigma^2, truncated
(True, 2.9999)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.dependencies import GRAPH
from .._engine.finite_differences import central_differences, default_step
from .._engine.function import Function, function
from .._engine.gradient import value_and_gradient
from .._engine.parameter import Parameter, set_values, set_vector_in_graph
from .._engine.precompute import precomputed
from .._engine.tf_internals import zcache_graphs
from .._engine.traced_checks import require
from ..exceptions import FitError

__all__ = ["LossPrograms", "EAGER_LOOKS"]

#: Calls of ``value()`` / ``value_gradient()`` that run eagerly before they are traced: a look
#: before and after a fit (15-40 ms each eagerly for the bridged amplitude models, against a
#: 0.25-1.4 s trace) never pays a trace the fit's own compiled program would not use.
EAGER_LOOKS = 2


def _set(params: tuple[Parameter, ...], x: tf.Tensor) -> None:
    if tf.inside_function():
        set_vector_in_graph(params, x)
    else:
        set_values(params, x.numpy())


class LossPrograms:
    """The traced functions of one loss (see the module's documentation).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss (held strongly: it owns this object).

    Attributes
    ----------
    value_fn : zcache.types.Function
        The checked value at the current parameters.
    gradient_fns : dict
        Parameter tuple -> value and gradient at the current parameters.
    at_fns : dict
        Parameter tuple -> (value_at, value_gradient_at, hessian_at).
    """

    def __init__(self, loss: Any) -> None:
        self.loss = loss
        self.value_fn = Function(self._checked_value, wraps="loss", eager_calls=EAGER_LOOKS)
        self.gradient_fns: dict[tuple[Parameter, ...], Function] = {}
        self.at_fns: dict[tuple[Parameter, ...], tuple[Function, Function, Function]] = {}

    def _checked_value(self) -> tf.Tensor:
        value = self.loss._total()
        checks = require(
            tf.math.is_finite(value), FitError,
            f"the loss of '{type(self.loss).__name__}' is NaN or infinite at the current parameter values: a "
            "width may be <= 0 or the model zero at an event. Check the parameters and their limits.",
        )
        if checks:
            with tf.control_dependencies(checks):
                return tf.identity(value)
        return value

    def value_gradient(self, params: tuple[Parameter, ...]) -> Function:
        """The traced value and gradient by ``params`` at the current parameter values.

        Parameters
        ----------
        params : tuple of Parameter

        Returns
        -------
        zcache.types.Function
        """
        fn = self.gradient_fns.get(params)
        if fn is None:
            fn = self.gradient_fns[params] = Function(
                lambda: value_and_gradient(self.loss._total, params), wraps="loss", eager_calls=EAGER_LOOKS
            )
        return fn

    def at(self, params: tuple[Parameter, ...]) -> tuple[Function, Function, Function]:
        """The traced value, value + gradient and Hessian at a vector ``x`` of ``params``.

        Parameters
        ----------
        params : tuple of Parameter

        Returns
        -------
        tuple of zcache.types.Function
            ``value_at(x, offset)``, ``value_gradient_at(x, offset)``, ``hessian_at(x)``.
        """
        fns = self.at_fns.get(params)
        if fns is None:
            loss = self.loss

            # The offset is an argument, not loss state: each minimization owns its offset, and
            # as a tensor it changes without a retrace.
            def value_at(x: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
                _set(params, x)
                return loss._total() - offset

            def value_gradient_at(x: tf.Tensor, offset: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                _set(params, x)
                value, grad = value_and_gradient(loss._total, params)
                return value - offset, grad

            def hessian_at(x: tf.Tensor) -> tf.Tensor:
                _set(params, x)
                return self.hessian(params)

            fns = self.at_fns[params] = (
                function(value_at, wraps="loss"),
                function(value_gradient_at, wraps="loss"),
                function(hessian_at, wraps="loss"),
            )
        return fns

    def call_at(self, which: int, x: Any, params: tuple[Parameter, ...], offset: float | None) -> Any:
        """Call ``value_at`` (``which=0``) or ``value_gradient_at`` (1) of :meth:`at` at ``x``.

        Parameters
        ----------
        which : int
            0 or 1.
        x : array_like
            One value per parameter.
        params : tuple of Parameter
        offset : float or None
            Subtracted from the loss; None: the loss's default :attr:`zcache.loss.BaseLoss.offset`.

        Returns
        -------
        tf.Tensor or (tf.Tensor, tf.Tensor)
        """
        offset = tf.constant(self.loss.offset if offset is None else float(offset), tf.float64)
        return self.at(params)[which](tf.constant(x, tf.float64), offset)

    def hessian(self, params: tuple[Parameter, ...]) -> tf.Tensor:
        """The Hessian at the current values, as a tensor (inside a trace): structured, else exact autodiff.

        Parameters
        ----------
        params : tuple of Parameter

        Returns
        -------
        tf.Tensor
            float64 (n, n), symmetric.
        """
        if self.loss.supports_structured_hessian(params):
            return self.loss.structured_hessian(params)
        # Exact second derivatives, vectorized over the parameters (pfor): through bypassed
        # caches, or valid ones, whose backward pass then recomputes inside the vectorized loop
        # at its forward values (cache_gradient).
        variables = [p.variable for p in params]
        with zcache_graphs():  # zcache's gradients (tf_internals items 10, 17) in both passes
            with tf.GradientTape(watch_accessed_variables=False) as outer:
                outer.watch(variables)
                _, grad = value_and_gradient(self.loss._total, params, numerical=False)
            rows = outer.jacobian(grad, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        hess = tf.stack([tf.cast(r, tf.float64) for r in rows], axis=1)
        return 0.5 * (hess + tf.transpose(hess))

    def exact_hessian_ok(self, params: tuple[Parameter, ...]) -> bool:
        """Whether precompute bypassed every cache on the path of ``params`` (exact autodiff is then safe).

        Parameters
        ----------
        params : tuple of Parameter

        Returns
        -------
        bool
        """
        report = precomputed(self.loss)
        if report is None:  # caches not yet created or classified: play safe
            return False
        ids = {p.node_id for p in params}
        # The caches this loss reads (those precompute classified); others, e.g. a sampler's
        # envelope, do not enter the loss.
        for cache in report.caches:
            if not cache.always_dirty and ids.intersection(GRAPH.ancestor_parameters(cache.node_id)):
                return False
        return True

    def hessian_at(self, x: Any, params: tuple[Parameter, ...], exact: bool | None) -> tf.Tensor:
        """The Hessian at ``x`` (:meth:`zcache.loss.BaseLoss.hessian_at`); the parameters are left at ``x``.

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : tuple of Parameter
        exact : bool or None
            As for :meth:`zcache.loss.BaseLoss.hessian_at`.

        Returns
        -------
        tf.Tensor
            float64 (n, n), symmetric.
        """
        structured = exact is not False and self.loss.supports_structured_hessian(params)
        if structured or (self.exact_hessian_ok(params) if exact is None else exact):
            return self.at(params)[2](tf.constant(x, tf.float64))
        x = np.array(x, dtype=np.float64).reshape(-1)
        at, zero = self.at(params)[1], tf.constant(0.0, tf.float64)

        def gradient_at(k: int, v: float) -> np.ndarray:
            point = x.copy()
            point[k] = v
            return at(tf.constant(point), zero)[1].numpy()

        lower = [-np.inf if p.lower is None else p.lower for p in params]
        upper = [np.inf if p.upper is None else p.upper for p in params]
        rows = central_differences(gradient_at, x, default_step(x), lower, upper)
        at(tf.constant(x), zero)  # leave the parameters at x, as the exact path does
        hess = np.array(rows).reshape(len(params), len(params))
        return tf.constant(0.5 * (hess + hess.T))

    def functions(self) -> list[Function]:
        """Every traced function made so far.

        Returns
        -------
        list of zcache.types.Function
        """
        return [self.value_fn, *self.gradient_fns.values(), *(f for fns in self.at_fns.values() for f in fns)]
