r"""The answers a physicist publishes, from any calculator: significance, upper limit, interval.

Each reads a calculator's p-values (:class:`zcache.inference.PValues`) at the tested POI
values, so the same call gives the asymptotic answer with an
:class:`~zcache.inference.AsymptoticCalculator` and the toys' answer with a toy calculator
(an interval from toys of ``t`` is Feldman and Cousins' construction).

A crossing between two tested values is interpolated linearly in :math:`Z = \Phi^{-1}(1 - p)`
(:math:`\Phi^{-1}(1 - p/2)` for two-sided p-values), where the asymptotic p-values of a
Gaussian estimate are straight lines in the POI: a grid of a dozen values gives the limit of
a counting experiment to a few per mille. Where the p-values carry statistical errors (toys)
the crossing carries the error they propagate to it.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.inference import AsymptoticCalculator, interval
>>> mu = zcache.Parameter("mu_ans", 0.0, lower=-2.0, upper=2.0)
>>> x = np.random.default_rng(8).normal(0.2, 1.0, 400)
>>> calc = AsymptoticCalculator(UnbinnedNLL(Gaussian(Space("x", -8.0, 8.0), mu, 1.0), zcache.Data(x)), mu)
>>> ci = interval(calc, np.linspace(-0.1, 0.5, 7), cl=0.6827)
>>> bool(np.isclose(ci.lower, x.mean() - 0.05, atol=1e-3)), bool(np.isclose(ci.upper, x.mean() + 0.05, atol=1e-3))
(True, True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from ..exceptions import CrossingError, InferenceError
from ._core import Calculator, Discovery, Interval, UpperLimit, free_fit

__all__ = ["discovery", "interval", "upper_limit"]


def _checked_calculator(calculator: Any, who: str) -> Calculator:
    if not isinstance(calculator, Calculator):
        raise InferenceError(f"{who} takes a calculator (zcache.inference.AsymptoticCalculator or a toy calculator), "
                             f"got {type(calculator).__name__}.")
    return calculator


def _checked_cl(cl: Any) -> float:
    try:
        cl = float(cl)
    except (TypeError, ValueError) as err:
        raise InferenceError(f"cl must be a number in (0, 1), got {cl!r}.") from err
    if not 0.0 < cl < 1.0:
        raise InferenceError(f"cl must be in (0, 1) (0.95 for 95 %), got {cl!r}.")
    return cl


def discovery(calculator: Calculator) -> Discovery:
    """The discovery significance of the calculator's observed data (the p-value of the null value).

    Parameters
    ----------
    calculator : Calculator
        An asymptotic or toy calculator (its signal hypothesis sets the expected significance).

    Returns
    -------
    Discovery

    Raises
    ------
    InferenceError
        ``calculator`` is not a calculator.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, SumPdf
    >>> from zcache.shapes import HistogramPdf
    >>> from zcache.binned import BinnedData, ExtendedBinnedNLL
    >>> from zcache.inference import AsymptoticCalculator, discovery
    >>> s = zcache.Parameter("s_disc", 1.0, lower=0.0, upper=100.0)
    >>> flat = [HistogramPdf(Space("x", 0.0, 1.0), [1.0], [0.0, 1.0]) for _ in range(2)]
    >>> loss = ExtendedBinnedNLL(SumPdf(flat, yields=[s, 4.0]), BinnedData([12.0], [0.0, 1.0]))
    >>> z = discovery(AsymptoticCalculator(loss, s)).significance
    >>> bool(np.isclose(z, np.sqrt(2 * (12 * np.log(12 / 4) - 8)), rtol=1e-6))
    True
    """
    return _checked_calculator(calculator, "discovery").discovery()


def _z(p: np.ndarray, two_sided: bool) -> np.ndarray:
    """p-values as the Gaussian quantile they correspond to (finite: p clipped to [1e-300, 1 - 1e-15])."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0 - 1e-15)
    return stats.norm.isf(p / 2.0 if two_sided else p)


def _z_errors(p: np.ndarray, err: np.ndarray, two_sided: bool) -> np.ndarray:
    """The errors of :func:`_z` from those of the p-values: dZ/dp = -1 / phi(Z) (halved: two-sided)."""
    err = np.asarray(err, dtype=np.float64)
    density = stats.norm.pdf(_z(p, two_sided)) * (2.0 if two_sided else 1.0)
    return np.divide(err, density, out=np.zeros_like(err), where=err > 0.0)


def _crossing(x: np.ndarray, z: np.ndarray, ez: np.ndarray, target: float, i: int) -> tuple[float, float]:
    """Where z reaches ``target`` between x[i] and x[i + 1] (linearly), with the error z's errors give it."""
    dz = z[i + 1] - z[i]
    dx = x[i + 1] - x[i]
    if dz == 0.0:
        return float(x[i] + 0.5 * dx), 0.0
    value = float(x[i] + (target - z[i]) / dz * dx)
    # x = x_i + dx (target - z_i) / (z_{i+1} - z_i): its derivatives in z_i and z_{i+1}
    g = np.array([dx * (target - z[i + 1]) / dz**2, -dx * (target - z[i]) / dz**2])
    e = ez[i:i + 2]
    return value, float(math.sqrt(np.sum((g * e) ** 2))) if np.any(e > 0.0) else 0.0


def _first_fall(x: np.ndarray, p: np.ndarray, alpha: float) -> int | None:
    """The first i with p[i] >= alpha > p[i + 1] (None: no such step)."""
    for i in range(len(x) - 1):
        if p[i] >= alpha > p[i + 1]:
            return i
    return None


def upper_limit(calculator: Calculator, values: Any, cl: float = 0.95, statistic: str = "qtilde") -> UpperLimit:
    """The CLs upper limit on the POI, observed and expected (median, ±1σ, ±2σ).

    The limit is the POI where CLs falls through ``1 - cl``, interpolated between the tested
    values (see the module), for the observed CLs and each of the five expected ones.

    Parameters
    ----------
    calculator : Calculator
        An asymptotic or toy calculator.
    values : array_like
        Tested POI values (sorted here) that bracket every crossing: CLs above ``1 - cl`` at the
        smallest, below at the largest (for the expected +2σ band too).
    cl : float
        The confidence level (0.95: CLs = 0.05).
    statistic : {'qtilde', 'q'}
        The test statistic.

    Returns
    -------
    UpperLimit
        With errors where the p-values carry errors (toys), else 0.

    Raises
    ------
    CrossingError
        The tested values do not bracket a crossing (the message says which way to extend them).
    InferenceError
        Not a calculator, ``cl`` not in (0, 1), fewer than two values, or a two-sided statistic.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, SumPdf
    >>> from zcache.shapes import HistogramPdf
    >>> from zcache.binned import BinnedData, ExtendedBinnedNLL
    >>> from zcache.inference import AsymptoticCalculator, upper_limit
    >>> s = zcache.Parameter("s_ul", 1.0, lower=0.0, upper=100.0)
    >>> flat = [HistogramPdf(Space("x", 0.0, 1.0), [1.0], [0.0, 1.0]) for _ in range(2)]
    >>> loss = ExtendedBinnedNLL(SumPdf(flat, yields=[s, 10.0]), BinnedData([10.0], [0.0, 1.0]))
    >>> ul = upper_limit(AsymptoticCalculator(loss, s), np.linspace(0.0, 20.0, 21))
    >>> round(ul.observed, 1), round(float(ul.expected[2]), 1)   # n = b: observed = median expected
    (7.5, 7.5)
    """
    calculator = _checked_calculator(calculator, "upper_limit")
    cl = _checked_cl(cl)
    if statistic not in ("q", "qtilde"):
        raise InferenceError(f"upper_limit takes the one-sided statistic 'qtilde' or 'q', got {statistic!r} "
                             "(a two-sided interval: interval()).")
    x = np.unique(np.asarray(values, dtype=np.float64))
    if x.size < 2:
        raise InferenceError("upper_limit needs at least two distinct tested values to interpolate between.")
    pv = calculator.p_values(x, statistic=statistic)
    alpha = 1.0 - cl
    rows = [("observed", pv.cls, pv.cls_err)] + [
        (f"expected {band:+d} sigma", pv.expected_cls[k], pv.expected_cls_err[k]) for k, band in enumerate(range(-2, 3))]
    found = []
    for what, p, err in rows:
        i = _first_fall(x, p, alpha)
        if i is None:
            if np.all(p >= alpha):
                raise CrossingError(f"the {what} CLs stays above {alpha:g} up to {x[-1]:g} (it is {p[-1]:.3g} there): "
                                    "test larger values of the POI.")
            raise CrossingError(f"the {what} CLs is below {alpha:g} already at {x[0]:g} ({p[0]:.3g}): test smaller "
                                "values of the POI.")
        if p[i + 1] <= 0.0:  # no toy beyond the observed: its Z is unbounded, so the p-values themselves are
            found.append(_crossing(x, p, err, alpha, i))  # interpolated (Z of a clipped 0 puts the crossing at x[i])
        else:
            found.append(_crossing(x, _z(p, False), _z_errors(p, err, False), float(_z(np.array([alpha]), False)[0]), i))
    return UpperLimit(cl=cl, observed=found[0][0], expected=np.array([f[0] for f in found[1:]]),
                      observed_err=found[0][1], expected_err=np.array([f[1] for f in found[1:]]), p_values=pv)


def interval(calculator: Calculator, values: Any, cl: float = 0.68, statistic: str = "t") -> Interval:
    r"""A two-sided confidence interval: the tested values whose p-value is at least ``1 - cl``.

    With the asymptotic calculator and ``t`` this is the profile-likelihood interval
    (:math:`-2\Delta\ln L` up to the :math:`\chi^2_1` quantile, MINOS's for ``cl`` = 68.27 %);
    with toys it is Feldman and Cousins' construction. An end is interpolated between the
    tested values; where the p-value is still above ``1 - cl`` at the POI's limit, that limit
    is the end.

    Parameters
    ----------
    calculator : Calculator
        An asymptotic or toy calculator.
    values : array_like
        Tested POI values (sorted here) around the best fit, reaching beyond both ends (or to
        the POI's limit).
    cl : float
        The confidence level (0.6827 for one Gaussian σ).
    statistic : {'t', 'ttilde'}
        The two-sided statistic (``ttilde`` for a POI bounded at its null value).

    Returns
    -------
    Interval

    Raises
    ------
    CrossingError
        The tested values do not reach an end of the interval (or no value is inside it).
    InferenceError
        Not a calculator, ``cl`` not in (0, 1), fewer than two values, or a one-sided statistic.

    Examples
    --------
    See the module.
    """
    calculator = _checked_calculator(calculator, "interval")
    cl = _checked_cl(cl)
    if statistic not in ("t", "ttilde"):
        raise InferenceError(f"interval takes the two-sided statistic 't' or 'ttilde', got {statistic!r} "
                             "(an upper limit: upper_limit()).")
    x = np.unique(np.asarray(values, dtype=np.float64))
    if x.size < 2:
        raise InferenceError("interval needs at least two distinct tested values to interpolate between.")
    pv = calculator.p_values(x, statistic=statistic)
    alpha = 1.0 - cl
    p, err = pv.clsb, pv.clsb_err
    inside = np.flatnonzero(p >= alpha)
    if inside.size == 0:
        raise CrossingError(f"no tested value has a p-value of at least {alpha:g} (the largest is {p.max():.3g} at "
                            f"{x[np.argmax(p)]:g}): test values around the best fit.")
    poi = calculator.poi
    best = getattr(calculator, "mu_hat", None)
    if best is None:
        best = free_fit(calculator.loss, poi).values[poi.name]
    first, last = int(inside[0]), int(inside[-1])
    # signed: -Z below the best fit, +Z above, so that Z runs straight through the best fit
    z = np.where(x < best, -1.0, 1.0) * _z(p, True)
    ez = _z_errors(p, err, True)
    target = float(_z(np.array([alpha]), True)[0])
    if first == 0:
        if poi.lower is None or x[0] > poi.lower:
            raise CrossingError(f"the p-value is still {p[0]:.3g} >= {alpha:g} at the smallest tested value {x[0]:g}: "
                                "test smaller values (down to the POI's lower limit).")
        lower = float(x[0])
    else:
        lower = (_crossing(x, p, err, alpha, first - 1) if p[first - 1] <= 0.0 else   # as in upper_limit
                 _crossing(x, z, ez, -target, first - 1))[0]
    if last == len(x) - 1:
        if poi.upper is None or x[-1] < poi.upper:
            raise CrossingError(f"the p-value is still {p[-1]:.3g} >= {alpha:g} at the largest tested value {x[-1]:g}: "
                                "test larger values (up to the POI's upper limit).")
        upper = float(x[-1])
    else:
        upper = (_crossing(x, p, err, alpha, last) if p[last + 1] <= 0.0 else _crossing(x, z, ez, target, last))[0]
    name = type(calculator).__name__
    method = ("profile likelihood (asymptotic)" if name == "AsymptoticCalculator"
              else f"Neyman construction with {statistic} ({name})")
    return Interval(cl=cl, best=float(best), lower=lower, upper=upper, method=method, p_values=pv)
