"""Minimizers: iminuit's MIGRAD/HESSE on zcache losses.

:class:`Minuit` drives ``iminuit.Minuit`` with a zcache loss. Each function call
sets the floating parameters and evaluates the loss in one traced call
(:meth:`zcache.loss.BaseLoss.value_at`); the gradient is zcache's (automatic
through caches, or numerical, following :func:`zcache.set_autograd_mode`) or, with
``use_gradient=False``, Minuit's own finite differences.

Before the fit the loss is :func:`zcache.precompute`-d for its floating
parameters, as RooFit optimizes constant terms by default: constant parts are
cached, parts that change on every call are bypassed. With Minuit's own or
zcache's numerical gradient (one parameter moved per call) the floating parts
stay cached, so each step recomputes only what the moved parameter touches.

Example:
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.minimize import Minuit
    >>> mu = zcache.Parameter("mu_fit", 0.5, lower=-2.0, upper=2.0)
    >>> sigma = zcache.Parameter("sigma_fit", 1.5, lower=0.1, upper=5.0)
    >>> x = np.random.default_rng(1).normal(0.0, 1.0, 2000)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x))
    >>> result = Minuit().minimize(loss)
    >>> result.valid, bool(abs(result.values["mu_fit"] - x.mean()) < 1e-3), round(result.errors["mu_fit"], 2)
    (True, True, 0.02)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import iminuit
import numpy as np

from ._mode import get_autograd_mode
from ._parameter import Parameter, set_values
from ._precompute import PrecomputeReport, ensure_precomputed
from .exceptions import FitError
from .loss import BaseLoss

__all__ = ["Minuit", "FitResult"]


@dataclass
class FitResult:
    """The outcome of a minimization; the parameters already hold ``values``.

    Attributes
    ----------
        values, errors: parameter name -> best value / HESSE error (NaN without HESSE).
        valid: Minuit's verdict (converged, EDM below tolerance, covariance fine).
        fmin: the loss at the minimum (without offset).
        edm: estimated distance to the minimum.
        nfcn, ngrad, nhessian: calls of the loss, of its gradient and of its Hessian.
        covariance: the covariance matrix (None without HESSE).
        params: the fitted parameters, in order.
        time: wall time of the minimization in seconds.
        minuit: the ``iminuit.Minuit`` object, for MINOS, profiles, plots.
    """

    values: dict[str, float]
    errors: dict[str, float]
    valid: bool
    fmin: float
    edm: float
    nfcn: int
    ngrad: int
    nhessian: int
    covariance: np.ndarray | None
    params: list[Parameter]
    time: float
    minuit: Any = field(repr=False, default=None)
    precompute: PrecomputeReport | None = field(repr=False, default=None)

    def __str__(self) -> str:
        width = max(len(p.name) for p in self.params) if self.params else 4
        lines = [f"FitResult: valid={self.valid}  fmin={self.fmin:.6f}  edm={self.edm:.2e}  "
                 f"nfcn={self.nfcn}  ngrad={self.ngrad}  nhessian={self.nhessian}  time={self.time:.3f}s"]
        for p in self.params:
            lines.append(f"  {p.name.ljust(width)}  {self.values[p.name]: .6g} +- {self.errors[p.name]:.3g}")
        return "\n".join(lines)


def _clip(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    # Minuit's internal sine transform can land an ulp outside a limit.
    return np.minimum(np.maximum(x, lower), upper)


class Minuit:
    """Minimize a zcache loss with iminuit (MIGRAD, then HESSE).

    Args:
        tol: Minuit's EDM tolerance (iminuit's ``tol``).
        strategy: Minuit strategy 0, 1 or 2.
        use_gradient: pass zcache's gradient to Minuit (``False``: Minuit's own).
        hesse: errors and covariance from HESSE after a valid MIGRAD (skipped when MIGRAD
            already ended with an accurate covariance, which with strategy >= 1 is HESSE's).
        precompute: apply :func:`zcache.precompute` for the fitted parameters and the kind of
            gradient (once per loss and setting; a manual ``precompute`` with other options
            is replaced: pass ``precompute=False`` to keep yours).
        maxfcn: call budget (iminuit's ``ncall``), ``None`` for Minuit's default.
    """

    def __init__(
        self,
        tol: float = 0.1,
        strategy: int = 1,
        use_gradient: bool = True,
        hesse: bool = True,
        precompute: bool = True,
        maxfcn: int | None = None,
    ):
        if strategy not in (0, 1, 2):
            raise ValueError(f"strategy must be 0, 1 or 2, got {strategy!r}.")
        if not tol > 0:
            raise ValueError(f"tol must be positive, got {tol!r}.")
        self.tol = float(tol)
        self.strategy = strategy
        self.use_gradient = bool(use_gradient)
        self.hesse = bool(hesse)
        self.precompute = bool(precompute)
        self.maxfcn = maxfcn

    def __repr__(self) -> str:
        return f"Minuit(tol={self.tol}, strategy={self.strategy}, use_gradient={self.use_gradient})"

    def minimize(self, loss: BaseLoss, params: Sequence[Parameter] | None = None) -> FitResult:
        """Minimize ``loss`` over ``params`` (default: ``loss.params``), updating them in place.

        Raises
        ------
            FitError: nothing to fit, duplicate parameter names, or a non-finite start.
        """
        if not isinstance(loss, BaseLoss):
            raise TypeError(f"Minuit.minimize takes a zcache loss, got {loss!r}.")
        params = tuple(loss.params if params is None else params)
        if not params:
            raise FitError("No floating parameters to fit: set floating=True on some, or pass params=[...].")
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise FitError(f"Parameter names must be unique for Minuit, got {names}; rename the duplicates.")
        report = None
        if self.precompute:
            numerical = not self.use_gradient or not get_autograd_mode()
            report = ensure_precomputed(loss, params, keep_floating=numerical)
        lower = np.array([-np.inf if p.lower is None else p.lower for p in params])
        upper = np.array([np.inf if p.upper is None else p.upper for p in params])
        x0 = _clip(np.array([p._current() for p in params]), lower, upper)
        # Minuit's sine transform has a zero derivative at a two-sided limit, so a start
        # exactly there yields NaN steps: start a hair inside instead.
        both = np.isfinite(lower) & np.isfinite(upper)
        hair = 1e-6 * np.where(both, upper - lower, 0.0)
        x0 = np.where(both & (x0 <= lower), lower + hair, np.where(both & (x0 >= upper), upper - hair, x0))

        start = time.perf_counter()
        loss.offset = 0.0
        f0 = float(loss.value_at(x0, params))
        if not np.isfinite(f0):
            raise FitError(
                f"The loss is {f0} at the starting values {dict(zip(names, x0, strict=True))}; start where the model is "
                "positive at every event (check widths and limits)."
            )
        loss.offset = f0

        def fcn(x: np.ndarray) -> float:
            return float(loss.value_at(_clip(x, lower, upper), params))

        def grad(x: np.ndarray) -> np.ndarray:
            return loss.value_gradient_at(_clip(x, lower, upper), params)[1].numpy()

        def hess(x: np.ndarray) -> np.ndarray:
            return loss.hessian_at(_clip(x, lower, upper), params).numpy()

        # With zcache's gradient, zcache's Hessian too: Minuit seeds MIGRAD and runs HESSE
        # with one call each instead of O(n^2) function calls.
        analytic = self.use_gradient
        m = iminuit.Minuit(fcn, x0, grad=grad if analytic else False, hessian=hess if analytic else False, name=names)
        m.errordef = loss.errordef
        m.limits = list(zip(lower, upper, strict=True))
        m.tol = self.tol
        m.strategy = self.strategy
        m.migrad(ncall=self.maxfcn)
        # With strategy >= 1 MIGRAD ends with HESSE when its own covariance estimate is not
        # accurate; running it again would cost a Hessian (or O(n^2) calls) for the same numbers.
        if self.hesse and m.valid and not m.fmin.has_accurate_covar:
            m.hesse()
        elapsed = time.perf_counter() - start

        best = _clip(np.array(m.values), lower, upper)
        set_values(params, best)
        has_errors = self.hesse and m.valid and m.covariance is not None
        errors = np.array(m.errors) if has_errors else np.full(len(params), np.nan)
        return FitResult(
            values=dict(zip(names, map(float, best), strict=True)),
            errors=dict(zip(names, map(float, errors), strict=True)),
            valid=bool(m.valid),
            fmin=float(m.fval) + f0,
            edm=float(m.fmin.edm),
            nfcn=int(m.nfcn),
            ngrad=int(m.ngrad),
            nhessian=int(m.nhessian),
            covariance=np.array(m.covariance) if has_errors else None,
            params=list(params),
            time=elapsed,
            minuit=m,
            precompute=report,
        )
