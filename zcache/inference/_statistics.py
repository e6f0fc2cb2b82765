r"""Profile-likelihood test statistics (Cowan, Cranmer, Gross, Vitells, arXiv:1007.1727).

Every statistic is :math:`-2\ln\lambda` of a likelihood ratio, computed from the minimum of the
loss with the parameter of interest (POI) held at the tested value :math:`\mu` (the *conditional*
fit, :math:`\hat{\hat\theta}(\mu)`) and from the minimum with the POI free (:math:`\hat\mu`).
A zcache loss is :math:`-\ln L` up to a constant when its ``errordef`` is 0.5, and
:math:`-2\ln L` when it is 1, so :math:`-2\ln\lambda = \Delta\,\mathrm{loss} / \mathrm{errordef}`.

The five statistics differ in which fitted values count as evidence against :math:`\mu`:

==========  ===============================================================  ===========================
name        value                                                            use
==========  ===============================================================  ===========================
``t``       :math:`-2\ln\lambda(\mu)`                                        two-sided intervals
``ttilde``  as ``t``, with :math:`\lambda(\mu)` against :math:`\mu=b` when   two-sided, POI :math:`\ge b`
            :math:`\hat\mu < b` (eq. 10)
``q0``      :math:`-2\ln\lambda(0)` if :math:`\hat\mu \ge 0`, else 0          discovery (eq. 12)
``q``       :math:`-2\ln\lambda(\mu)` if :math:`\hat\mu \le \mu`, else 0      upper limits (eq. 14)
``qtilde``  as ``q``, with :math:`\lambda` against :math:`\mu=b` when         upper limits, POI
            :math:`\hat\mu < b` (eq. 16)                                     :math:`\ge b`
==========  ===============================================================  ===========================

:math:`b` is the POI's physical lower bound (0 for a signal strength or a yield). A free fit
whose POI is bounded below by :math:`b` (a parameter with ``lower=b``) already gives
:math:`\hat\mu \ge b`, which makes ``ttilde`` and ``qtilde`` equal to ``t`` and ``q``
computed from that bounded fit; the ``*_at_bound`` argument serves fits that let the POI go
below :math:`b`.

Examples
--------
>>> from zcache.inference import statistic
>>> # a fit with mu_hat = 1.5: evidence against mu = 0 (discovery), none against mu = 1 as an upper limit
>>> float(statistic("q0", 0.0, mu_hat=1.5, nll_at_mu=10.0, nll_free=8.0))
4.0
>>> float(statistic("q", 1.0, mu_hat=1.5, nll_at_mu=8.5, nll_free=8.0))
0.0
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..exceptions import InferenceError

__all__ = ["TEST_STATISTICS", "TestStatisticName", "statistic"]

TestStatisticName = Literal["t", "ttilde", "q0", "q", "qtilde"]

#: The names :func:`statistic` accepts.
TEST_STATISTICS: tuple[str, ...] = ("t", "ttilde", "q0", "q", "qtilde")


def statistic(
    name: str,
    mu: float | np.ndarray,
    *,
    mu_hat: float | np.ndarray,
    nll_at_mu: float | np.ndarray,
    nll_free: float | np.ndarray,
    nll_at_bound: float | np.ndarray | None = None,
    bound: float = 0.0,
    errordef: float = 0.5,
) -> np.ndarray:
    r"""A test statistic from the conditional and the free minimum of a loss.

    Arrays broadcast against each other (one entry per toy, per tested value, or both).

    Parameters
    ----------
    name : {'t', 'ttilde', 'q0', 'q', 'qtilde'}
        Which statistic (see the module's table).
    mu : float or ndarray
        The tested POI value (``q0``: the background-only value, usually 0).
    mu_hat : float or ndarray
        The POI at the free minimum.
    nll_at_mu : float or ndarray
        The loss's minimum with the POI fixed at ``mu``.
    nll_free : float or ndarray
        The loss's minimum with the POI free.
    nll_at_bound : float or ndarray, optional
        The loss's minimum with the POI fixed at ``bound``: needed by ``ttilde`` and ``qtilde``
        where ``mu_hat < bound`` (a free fit that let the POI below its physical bound).
    bound : float
        The POI's physical lower bound :math:`b` of ``ttilde`` and ``qtilde``.
    errordef : float
        The loss's ``errordef`` (0.5 for :math:`-\ln L`, 1 for :math:`-2\ln L`).

    Returns
    -------
    ndarray
        The statistic, :math:`\ge 0` (a conditional minimum found a little below the free one,
        by the fits' tolerance, counts as 0).

    Raises
    ------
    InferenceError
        An unknown name; ``nll_at_bound`` missing where ``mu_hat < bound`` needs it; a
        non-positive ``errordef``.
    """
    if name not in TEST_STATISTICS:
        raise InferenceError(f"unknown test statistic {name!r}; use one of {', '.join(TEST_STATISTICS)}.")
    if not errordef > 0:
        raise InferenceError(f"errordef must be positive, got {errordef!r}.")
    mu = np.asarray(mu, dtype=np.float64)
    mu_hat = np.asarray(mu_hat, dtype=np.float64)
    at_mu = np.asarray(nll_at_mu, dtype=np.float64)
    free = np.asarray(nll_free, dtype=np.float64)
    if name in ("ttilde", "qtilde"):
        below = mu_hat < bound
        if np.any(below):
            if nll_at_bound is None:
                raise InferenceError(
                    f"{name}: the free fit put the POI below its bound {bound} (mu_hat = {np.min(mu_hat):.6g}); "
                    "give nll_at_bound (the minimum with the POI fixed at the bound), or bound the POI below."
                )
            # eq. 10 / 16: the ratio's denominator is the best fit within the physical region
            free = np.where(below, np.asarray(nll_at_bound, dtype=np.float64), free)
        mu_hat = np.maximum(mu_hat, bound)
    value = np.maximum((at_mu - free) / errordef, 0.0)
    if name == "q0":
        return np.where(mu_hat >= mu, value, 0.0)
    if name in ("q", "qtilde"):
        return np.where(mu_hat <= mu, value, 0.0)
    return value
