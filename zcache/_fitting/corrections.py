r"""What a fit's errors need from the loss besides its Hessian: the weights' correction and the constraints.

An :class:`zcache.loss.Objective` corrects the covariance of a fit to weighted events
with these (``Objective.corrected``, asked by the minimizer once, at the minimum): the loss's
per-event terms and weights (:meth:`zcache.loss.BaseLoss.weighted_event_terms`), its Hessian with
squared weights, and the Hessian of its constraint terms. They read the loss through those
methods only (``loss`` is a :class:`zcache.loss.BaseLoss`, not imported: the loss module sits
above), so that no minimizer reaches into a loss's datasets or constraints.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL, GaussianConstraint
>>> mu = zcache.Parameter("mu_corr", 0.0)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.array([0.5]), weights=[2.0]),
...                    constraints=[GaussianConstraint([mu], [0.0], [0.5])])
>>> has_weights(loss), constraint_hessian(loss, [mu]).tolist()       # 1 / 0.5^2
(True, [[4.0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.finite_differences import central_differences
from .._engine.inputs import backing_variable
from .._engine.parameter import Parameter, set_values
from .._engine.tf_internals import zcache_graphs

__all__ = ["WEIGHT_CORRECTIONS", "corrected_covariance", "has_weights", "constraint_hessian"]

#: The error corrections of weighted fits (``Minuit(weightcorr=...)``).
WEIGHT_CORRECTIONS = ("asymptotic", "sumw2", None)


def corrected_covariance(loss: Any, params: Sequence[Parameter], best: np.ndarray, covariance: np.ndarray,
                         method: str, lower: np.ndarray | None = None, upper: np.ndarray | None = None) -> np.ndarray:
    r"""The covariance of a fit to weighted events, corrected for the weights.

    With :math:`C` the inverse Hessian of the weighted loss at the minimum (what HESSE gives):

    - ``"asymptotic"``: :math:`C D C`, :math:`D = \sum_i w_i^2 \nabla\ell_i \nabla\ell_i^T + H_c`
      (:math:`\ell_i` from :meth:`zcache.loss.BaseLoss.weighted_event_terms`, :math:`H_c` the
      Hessian of the constraints). The per-event gradients are central differences with
      steps of 1e-3 of each parameter's uncorrected error (the error of such a difference is
      ~1e-7 relative, far below what an error needs); a step that would cross a limit is
      one-sided.
    - ``"sumw2"``: :math:`C H_{w^2} C`, :math:`H_{w^2}` the Hessian of the loss with every
      weight squared (the weights are put back afterwards).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The fitted loss.
    params : sequence of Parameter
        The fitted parameters, at ``best``.
    best : ndarray
        Their values at the minimum.
    covariance : ndarray
        The uncorrected covariance, :math:`2\,\mathrm{errordef}\,H^{-1}`.
    method : {"asymptotic", "sumw2"}
        The correction.
    lower, upper : ndarray, optional
        The parameters' limits (default: none).

    Returns
    -------
    ndarray
        The corrected covariance.

    Raises
    ------
    ValueError
        An unknown ``method``.
    """
    params = tuple(params)
    scale = 2.0 * loss.errordef  # covariance = scale * H^-1, with H the Hessian of the loss
    if method == "sumw2":
        restorers = [d.set_data(d.numpy(), weights=d.weights_data.numpy() ** 2) for d in loss.datasets() if d.is_weighted]
        try:
            h2 = loss.hessian_at(best, params).numpy()
        finally:
            for r in reversed(restorers):
                r.restore()
        return covariance @ h2 @ covariance / scale**2  # H^-1 H_w2 H^-1, with H^-1 = C / scale
    if method != "asymptotic":
        raise ValueError(f"method must be 'asymptotic' or 'sumw2', got {method!r}.")
    n = len(params)
    lower = np.full(n, -np.inf) if lower is None else np.asarray(lower, float)
    upper = np.full(n, np.inf) if upper is None else np.asarray(upper, float)
    errors = np.sqrt(np.abs(np.diag(covariance)))
    steps = 1e-3 * np.where(errors > 0, errors, np.maximum(np.abs(best), 1.0) * 1e-3)

    weights: list[np.ndarray] = []  # the events' weights, read with the terms (they do not depend on x)

    def terms_at(k: int, v: float) -> np.ndarray:
        set_values(params, np.where(np.arange(n) == k, v, best))
        pairs = loss.weighted_event_terms()
        weights[:] = [np.concatenate([w.numpy() for _, w in pairs])]
        return np.concatenate([t.numpy() for t, _ in pairs])

    try:
        columns = central_differences(terms_at, best, steps, lower, upper)
    finally:
        set_values(params, best)
    grads = np.stack(columns, axis=1)  # (N, n)
    d = (grads * (weights[0] ** 2)[:, None]).T @ grads
    if loss.constraints:
        d = d + constraint_hessian(loss, params)
    return covariance @ d @ covariance / scale**2  # H^-1 D H^-1, with H^-1 = C / scale


def has_weights(loss: Any) -> bool:
    """Whether a dataset of ``loss`` has a weight other than 1 (all 1: plain HESSE is right).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss.

    Returns
    -------
    bool
    """
    return any(d.is_weighted and not np.all(d.weights_data.numpy() == 1.0) for d in loss.datasets())


def constraint_hessian(loss: Any, params: Sequence[Parameter]) -> np.ndarray:
    """The Hessian of the loss's constraint terms with respect to ``params`` (exact: they are quadratic).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        A loss with at least one constraint (``loss.constraints``).
    params : sequence of Parameter
        The parameters, in the Hessian's order.

    Returns
    -------
    ndarray
        (n, n).
    """
    variables = [backing_variable(p) for p in params]
    with zcache_graphs(), tf.GradientTape() as outer:
        outer.watch(variables)
        with tf.GradientTape() as inner:
            inner.watch(variables)
            total = tf.add_n([c.value() for c in loss.constraints])
        grads = inner.gradient(total, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        grads = tf.stack(grads)
    with zcache_graphs():
        rows = outer.jacobian(grads, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return tf.stack(rows, axis=1).numpy()
