r"""What zcache knows of iminuit's Minuit2 and works around: how it takes a user's Hessian.

iminuit 2.33's Minuit2 maps a user's Hessian onto its internal (bounded) parameters leaving out
a term, and reads it at internal indices when parameters are fixed. Both facts are probed once
per process (:func:`hessian_handling`), not assumed from a version, so a fixed release is used
as it is; everything that depends on them is in this module, as ``_tf_internals`` is for
TensorFlow.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import iminuit
import numpy as np

__all__ = ["AtLimit", "limit_curvature", "hessian_handling", "minuit_hessian", "layout"]

class AtLimit(Exception):
    """Raised from Minuit's Hessian callback: a fitted parameter sits on a limit (see :func:`minuit_hessian`)."""

    def __init__(self, x: np.ndarray) -> None:
        super().__init__("a fitted parameter is at a limit")
        self.x = x


def limit_curvature(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Minuit2's bound transforms at ``x``: :math:`x''(z)/x'(z)^2` per parameter, and where it is at a limit.

    Minuit fits a limited parameter :math:`x` through an internal :math:`z` (two limits:
    :math:`x = a + \tfrac{b-a}{2}(\sin z + 1)`; one: :math:`x = a - 1 + \sqrt{z^2+1}` or
    :math:`x = b + 1 - \sqrt{z^2+1}`). The loss's second derivative in :math:`z` is
    :math:`x'^2 H + g\,x''`: in terms of :math:`x` the second term is :math:`x'^2\,g\,c` with
    :math:`c = x''/x'^2`, which is what this returns (0 without limits). At a limit
    :math:`x' = 0` and :math:`c` is not defined: ``at_limit`` marks a distance to it below
    1e-8 of the limits' scale, where ``x`` (rounded from Minuit's internal value) no longer
    gives :math:`x'` to better than 1e-8.
    """
    lo, up = np.isfinite(lower), np.isfinite(upper)
    both, only_lo, only_up = lo & up, lo & ~up, up & ~lo
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d_lo = np.where(lo, x - lower, np.inf)
        d_up = np.where(up, upper - x, np.inf)
        bounds = np.maximum(np.where(lo, np.abs(lower), 0.0), np.where(up, np.abs(upper), 0.0))
        scale = np.maximum(np.where(both, upper - lower, 1.0), bounds)
        at_limit = (lo | up) & (np.minimum(d_lo, d_up) <= 1e-8 * scale)
        u_lo, u_up = d_lo + 1.0, d_up + 1.0
        c = np.where(both, -(x - 0.5 * (lower + upper)) / (d_lo * d_up),
                     np.where(only_lo, 1.0 / (u_lo * (u_lo * u_lo - 1.0)),
                              np.where(only_up, -1.0 / (u_up * (u_up * u_up - 1.0)), 0.0)))
    return np.where(at_limit, 0.0, c), at_limit


@functools.cache
def hessian_handling() -> tuple[bool, bool]:
    r"""How the installed iminuit maps a user's Hessian onto Minuit2's internal parameters.

    Two facts of iminuit 2.33's Minuit2, probed (not assumed from a version) so that a fixed
    release is used as it is: ``(adds_transform_term, indexes_by_external)``.

    - Whether the internal Hessian of a limited parameter includes :math:`g\,x''(z)` (iminuit
      2.33: no, only :math:`x'^2 H`; MIGRAD's EDM and HESSE are then wrong wherever the
      gradient is not zero, most of all at a limit, where :math:`x' = 0`: a yield fitted at 0
      came out "ABOVE EDM threshold" with NaN errors).
    - Whether the user's matrix is read at the external indices of the free parameters
      (iminuit 2.33: no, at the internal ones, so with a fixed parameter, as in MINOS and
      profiles, the free parameters got another parameter's second derivatives).
    """
    def make(fcn: Any, grad: Any, hessian: Any, start: Sequence[float]) -> iminuit.Minuit:
        m = iminuit.Minuit(fcn, start, grad=grad, hessian=hessian)
        m.errordef = 0.5
        return m
    # f = x^2 + 4x on [0, 10] at x = 1: g = 6, H = 2, x' ^2 = 9, x'' = 4: the internal
    # curvature is 9 * 2 + 6 * 4 = 42 with the term and 18 without; the variance 9 / H_int.
    m = make(lambda p: p[0] ** 2 + 4 * p[0], lambda p: np.array([2 * p[0] + 4]),
              lambda p: np.array([[2.0]]), [1.0])
    m.limits = [(0.0, 10.0)]
    m.hesse()
    adds_term = abs(float(m.covariance[0, 0]) - 9.0 / 42.0) < 1e-6
    # f = x^2 + 10 y^2 with x fixed: y's variance is 1 / 20 at external index 1, 1 / 2 at index 0.
    m = make(lambda p: p[0] ** 2 + 10 * p[1] ** 2, lambda p: np.array([2 * p[0], 20 * p[1]]),
              lambda p: np.diag([2.0, 20.0]), [1.0, 1.0])
    m.fixed[0] = True
    m.hesse()
    by_external = abs(float(m.covariance[1, 1]) - 1.0 / 20.0) < 1e-6
    return adds_term, by_external


def minuit_hessian(hessian: np.ndarray, gradient: np.ndarray | None, x: np.ndarray, lower: np.ndarray,
                    upper: np.ndarray, fixed: np.ndarray, fitting: bool) -> np.ndarray:
    r"""The matrix to hand Minuit2 so that its internal Hessian is the loss's exact one.

    ``hessian`` and ``gradient`` are the loss's in the parameters themselves at ``x``. Adds
    the bound transforms' :math:`g\,c` term (:func:`limit_curvature`) where Minuit2 leaves
    it out. A free parameter on a limit has no such correction (:math:`x' = 0`): during the
    fit (``fitting``) :class:`AtLimit` stops MIGRAD there, to finish without a Hessian;
    afterwards (MINOS, profiles) the uncorrected entry is used. External order (see
    :func:`layout`).
    """
    adds_term = hessian_handling()[0]
    out = np.array(hessian, dtype=float)
    if not adds_term and gradient is not None:
        c, at_limit = limit_curvature(x, lower, upper)
        if fitting and np.any(at_limit & ~fixed):
            raise AtLimit(x)
        out[np.diag_indices_from(out)] += np.where(fixed, 0.0, gradient * c)
    return out


def layout(hessian: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """``hessian`` (external order) laid out as the installed Minuit2 reads a user's Hessian."""
    if hessian_handling()[1] or not np.any(fixed):
        return hessian
    free = np.flatnonzero(~fixed)  # read at internal indices: the free block first
    laid = np.zeros_like(hessian)
    laid[: len(free), : len(free)] = hessian[np.ix_(free, free)]
    return laid
