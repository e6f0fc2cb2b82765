r"""What every calculator shares: the POI, the fits on the observed data, the answers' types.

A *calculator* (:class:`Calculator`) turns a loss and its parameter of interest (POI) into
p-values of tested POI values (:class:`PValues`) and a discovery answer (:class:`Discovery`);
:func:`zcache.inference.upper_limit` and :func:`zcache.inference.interval` read limits and
intervals off its p-values (:class:`UpperLimit`, :class:`Interval`), whatever the calculator
(asymptotic formulae or toys).

Every fit here leaves the user's parameters as it found them: values *and* ``floating`` flags
are put back afterwards, on success and on error, so a calculator never moves a model.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.inference import resolve_poi, conditional_fit, free_fit
>>> mu = zcache.Parameter("mu_core", 0.3, lower=-2.0, upper=2.0)
>>> x = np.random.default_rng(3).normal(0.1, 1.0, 500)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))
>>> poi = resolve_poi(loss, "mu_core")
>>> free = free_fit(loss, poi)
>>> at_zero = conditional_fit(loss, poi, 0.0)
>>> bool(abs(free.values["mu_core"] - x.mean()) < 1e-3), float(mu), mu.floating
(True, 0.3, True)
>>> bool(abs(2 * (at_zero.fmin - free.fmin) - 500 * x.mean() ** 2) < 1e-3)   # -2 ln lambda of a Gaussian mean
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._engine.parameter import Parameter, set_values
from ..exceptions import InferenceError, POIError
from ..loss import BaseLoss
from ..minimize import FitResult, Minuit

__all__ = [
    "Calculator",
    "Discovery",
    "Interval",
    "PValues",
    "UpperLimit",
    "checked_values",
    "conditional_fit",
    "default_null_value",
    "free_fit",
    "kept_parameters",
    "resolve_poi",
]


def _checked_loss(loss: Any, who: str) -> BaseLoss:
    if not isinstance(loss, BaseLoss):
        raise InferenceError(f"{who} takes a zcache loss (zcache.loss / zcache.binned), got {type(loss).__name__}.")
    return loss


def resolve_poi(loss: BaseLoss, name: str | Parameter) -> Parameter:
    """The loss's parameter of interest, by name (or the Parameter itself), checked.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss.
    name : str or Parameter
        The POI's name, or the Parameter.

    Returns
    -------
    Parameter
        The POI, a floating parameter of ``loss``.

    Raises
    ------
    InferenceError
        ``loss`` is not a zcache loss.
    POIError
        No parameter of the loss has that name (the message lists them), two have it, or the
        POI is not floating.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_rp", 0.0)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.array([0.1, 0.2])))
    >>> resolve_poi(loss, "mu_rp") is mu
    True
    >>> resolve_poi(loss, "nu")
    Traceback (most recent call last):
    ...
    zcache.exceptions.POIError: the loss has no parameter 'nu'; its parameters are: 'mu_rp', 'Gaussian_sigma' (fixed).
    """
    loss = _checked_loss(loss, "resolve_poi")
    every = loss.get_params(floating=None)
    if isinstance(name, Parameter):
        if not any(p is name for p in every):
            listed = ", ".join(repr(p.name) for p in every)
            raise POIError(f"the parameter {name.name!r} is not a parameter of this loss; its parameters are: {listed}.")
        poi = name
    elif isinstance(name, str):
        matches = [p for p in every if p.name == name]
        if not matches:
            listed = ", ".join(repr(p.name) + ("" if p.floating else " (fixed)") for p in every)
            raise POIError(f"the loss has no parameter {name!r}; its parameters are: {listed}.")
        if len(matches) > 1:
            raise POIError(f"the loss has {len(matches)} parameters named {name!r}; pass the Parameter object itself.")
        poi = matches[0]
    else:
        raise POIError(f"the parameter of interest is a name (str) or a zcache.Parameter, got {type(name).__name__}.")
    if not poi.floating:
        raise POIError(f"the parameter of interest {poi.name!r} is fixed (floating=False); set "
                       f"{poi.name}.floating = True: a calculator fits it freely and pins it itself.")
    return poi


def default_null_value(poi: Parameter) -> float:
    """The background-only value of a POI: 0 where its limits allow it, else its lower limit.

    Parameters
    ----------
    poi : Parameter
        The parameter of interest.

    Returns
    -------
    float
        0 if ``lower <= 0 <= upper`` (a signal strength or a yield); else the finite lower limit
        (a POI bounded above 0: its smallest value).

    Raises
    ------
    POIError
        0 is outside the limits and the lower limit is not finite: give ``null_value``.

    Examples
    --------
    >>> import zcache
    >>> default_null_value(zcache.Parameter("n_dn", 5.0, lower=0.0, upper=100.0))
    0.0
    >>> default_null_value(zcache.Parameter("m_dn", 5.0, lower=1.0, upper=100.0))
    1.0
    """
    lower = -math.inf if poi.lower is None else poi.lower
    upper = math.inf if poi.upper is None else poi.upper
    if lower <= 0.0 <= upper:
        return 0.0
    if math.isfinite(lower):
        return float(lower)
    raise POIError(f"the POI {poi.name!r} cannot be 0 (limits [{lower}, {upper}]) and has no finite lower limit; "
                   "give the background-only value as null_value=.")


def checked_values(poi: Parameter, values: Any, what: str = "tested value") -> np.ndarray:
    """Tested POI values as a 1-D float array, each finite and inside the POI's limits.

    Parameters
    ----------
    poi : Parameter
        The parameter of interest.
    values : float or array_like
        One or more values.
    what : str
        How the message names them.

    Returns
    -------
    ndarray
        float64, shape (n,), n >= 1.

    Raises
    ------
    POIError
        No value, a value that is not finite, or one outside the POI's limits.

    Examples
    --------
    >>> import zcache
    >>> checked_values(zcache.Parameter("s_cv", 1.0, lower=0.0, upper=10.0), [0.5, 2.0]).tolist()
    [0.5, 2.0]
    """
    try:
        arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    except (TypeError, ValueError) as err:
        raise POIError(f"the {what}s must be numbers, got {values!r}.") from err
    if arr.ndim != 1 or arr.size == 0:
        raise POIError(f"give the {what}s as one number or a 1-D sequence of numbers, got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        raise POIError(f"every {what} must be finite, got {arr.tolist()}.")
    lower = -math.inf if poi.lower is None else poi.lower
    upper = math.inf if poi.upper is None else poi.upper
    outside = arr[(arr < lower) | (arr > upper)]
    if outside.size:
        raise POIError(f"the {what} {outside[0]:g} of {poi.name!r} is outside its limits [{lower:g}, {upper:g}]; "
                       "test values inside them, or widen the limits.")
    return arr


@contextlib.contextmanager
def kept_parameters(loss: BaseLoss) -> Iterator[None]:
    """Put every parameter of ``loss`` back as it was (value and ``floating``) on leaving, error or not.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss whose parameters (fixed ones and constraints' included) are kept.

    Yields
    ------
    None

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_kp", 0.0)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.array([0.1])))
    >>> with kept_parameters(loss):
    ...     _ = mu.set_value(2.0)
    ...     mu.floating = False
    >>> float(mu), mu.floating
    (0.0, True)
    """
    params = loss.get_params(floating=None)
    values = [float(p) for p in params]
    floating = [p.floating for p in params]
    try:
        yield
    finally:
        for p, f in zip(params, floating, strict=True):
            p.floating = f
        set_values(params, values)


def free_fit(loss: BaseLoss, poi: Parameter, minimizer: Any = None) -> FitResult:
    """The minimum of ``loss`` with the POI (and every floating parameter) free.

    The parameters are put back afterwards (values and ``floating``); the result holds the
    minimum (``result.values``, ``result.fmin``).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss.
    poi : Parameter
        The parameter of interest (:func:`resolve_poi`).
    minimizer : optional
        Anything with ``minimize(loss)``; default :class:`zcache.minimize.Minuit` (compiled fit).

    Returns
    -------
    zcache.minimize.FitResult

    Raises
    ------
    POIError
        ``poi`` is not a floating parameter of ``loss``.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_ff", 1.0, lower=-3.0, upper=3.0)
    >>> x = np.array([-0.2, 0.1, 0.4])
    >>> r = free_fit(UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(x)), mu)
    >>> round(r.values["mu_ff"], 4), float(mu)
    (0.1, 1.0)
    """
    loss = _checked_loss(loss, "free_fit")
    poi = resolve_poi(loss, poi)
    minimizer = Minuit() if minimizer is None else minimizer
    with kept_parameters(loss):
        return minimizer.minimize(loss)


def conditional_fit(loss: BaseLoss, poi: Parameter, value: float, minimizer: Any = None) -> FitResult:
    r"""The minimum of ``loss`` with the POI fixed at ``value``: the profiled nuisance parameters :math:`\hat{\hat\theta}`.

    The POI is pinned by fixing it (``floating = False`` at ``value``); its value and flag, and
    every other parameter, are put back afterwards, whatever happens. With no other floating
    parameter nothing is fitted and the result is the loss at ``value`` (``nfcn`` 1).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss.
    poi : Parameter
        The parameter of interest (:func:`resolve_poi`).
    value : float
        The tested value, inside the POI's limits.
    minimizer : optional
        Anything with ``minimize(loss)``; default :class:`zcache.minimize.Minuit`.

    Returns
    -------
    zcache.minimize.FitResult
        ``values`` holds the fitted nuisance parameters (the POI is not among them).

    Raises
    ------
    POIError
        ``poi`` is not a floating parameter of ``loss``, or ``value`` is outside its limits.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_cf", 1.0, lower=-3.0, upper=3.0)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.array([-0.2, 0.1, 0.4])))
    >>> r = conditional_fit(loss, mu, 0.0)
    >>> round(r.fmin - free_fit(loss, mu).fmin, 6), float(mu), mu.floating   # 3 * 0.1**2 / 2
    (0.015, 1.0, True)
    """
    loss = _checked_loss(loss, "conditional_fit")
    poi = resolve_poi(loss, poi)
    (value,) = checked_values(poi, value)
    minimizer = Minuit() if minimizer is None else minimizer
    with kept_parameters(loss):
        poi.set_value(value)
        poi.floating = False
        if not loss.params:  # nothing left to profile: the loss at the tested value is the minimum
            return _unfitted(loss, float(loss.value()))
        return minimizer.minimize(loss)


def _unfitted(loss: BaseLoss, fmin: float) -> FitResult:
    """A FitResult for a loss with nothing to fit (every parameter fixed)."""
    return FitResult(values={}, errors={}, valid=True, fmin=fmin, edm=0.0, nfcn=1, ngrad=0, nhessian=0,
                     covariance=None, params=[], time=0.0, precompute=None)


@dataclasses.dataclass(frozen=True, eq=False)
class PValues:
    r"""p-values of tested POI values, from a calculator.

    Arrays run over the tested ``values``. With :math:`p_\mu` the p-value of the tested
    hypothesis and :math:`p_b` the one of the background-only hypothesis (Cowan et al.,
    arXiv:1007.1727; Read's CLs): ``clsb`` = :math:`p_\mu`, ``clb`` = :math:`1 - p_b`,
    ``cls`` = ``clsb / clb`` (at most 1).

    Attributes
    ----------
    values : ndarray
        The tested POI values, shape (n,).
    statistic : str
        The test statistic (``"q"``, ``"qtilde"``, ``"t"``, ``"ttilde"``).
    observed : ndarray
        The statistic on the observed data at each value.
    clsb : ndarray
        :math:`p_\mu`, the p-value of the tested hypothesis (for ``t``/``ttilde`` a two-sided
        test's).
    clb : ndarray
        :math:`1 - p_b`, the probability under the background-only hypothesis of a statistic
        at least as large as the observed one (the CLs denominator).
    cls : ndarray
        ``clsb / clb``, at most 1 (a two-sided statistic's ratio can exceed it).
    expected_cls : ndarray
        Shape (5, n): the CLs expected if the background-only hypothesis is true, at its
        −2, −1, 0, +1, +2 σ quantiles (row 2 the median).
    clsb_err, clb_err, cls_err : ndarray
        Statistical errors of ``clsb``, ``clb``, ``cls`` (zeros for asymptotic answers).
    expected_cls_err : ndarray
        Shape (5, n), the errors of ``expected_cls``.

    Examples
    --------
    >>> import numpy as np
    >>> z = np.zeros(1)
    >>> pv = PValues(values=np.array([1.0]), statistic="qtilde", observed=np.array([2.0]), clsb=np.array([0.04]),
    ...              clb=np.array([0.8]), cls=np.array([0.05]), expected_cls=np.full((5, 1), 0.1), clsb_err=z,
    ...              clb_err=z, cls_err=z, expected_cls_err=np.zeros((5, 1)))
    >>> pv.cls.tolist(), pv.expected_cls.shape
    ([0.05], (5, 1))
    """

    values: np.ndarray
    statistic: str
    observed: np.ndarray
    clsb: np.ndarray
    clb: np.ndarray
    cls: np.ndarray
    expected_cls: np.ndarray
    clsb_err: np.ndarray
    clb_err: np.ndarray
    cls_err: np.ndarray
    expected_cls_err: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Discovery:
    r"""The significance of an excess: the p-value of the background-only hypothesis.

    Attributes
    ----------
    p0 : float
        :math:`p_0`, from :math:`q_0` on the observed data.
    significance : float
        :math:`Z = \Phi^{-1}(1 - p_0)`.
    p0_err, significance_err : float
        Statistical errors (0 for asymptotic answers).
    expected_significance : float
        The median significance expected if the signal is there (at the calculator's signal
        hypothesis; see the calculator).

    Examples
    --------
    >>> Discovery(p0=0.00135, significance=3.0, p0_err=0.0, significance_err=0.0, expected_significance=2.5).significance
    3.0
    """

    p0: float
    significance: float
    p0_err: float
    significance_err: float
    expected_significance: float


@dataclasses.dataclass(frozen=True, eq=False)
class UpperLimit:
    """A CLs upper limit on the POI, observed and expected.

    Attributes
    ----------
    cl : float
        The confidence level (0.95: CLs = 0.05 at the limit).
    observed : float
        The observed limit.
    expected : ndarray
        Shape (5,): the limits expected under the background-only hypothesis at −2, −1, 0,
        +1, +2 σ (index 2 the median).
    observed_err : float
        Its statistical error (from the p-values' errors; 0 for asymptotic answers).
    expected_err : ndarray
        Shape (5,), the errors of ``expected``.
    p_values : PValues
        The p-values the limit was read from.

    Examples
    --------
    >>> import numpy as np
    >>> ul = UpperLimit(cl=0.95, observed=3.1, expected=np.array([1.5, 2.0, 2.8, 3.9, 5.2]), observed_err=0.0,
    ...                 expected_err=np.zeros(5), p_values=None)
    >>> float(ul.expected[2])
    2.8
    """

    cl: float
    observed: float
    expected: np.ndarray
    observed_err: float
    expected_err: np.ndarray
    p_values: PValues


@dataclasses.dataclass(frozen=True, eq=False)
class Interval:
    """A confidence interval on the POI.

    Attributes
    ----------
    cl : float
        The confidence level.
    best : float
        The best-fit value (the free fit's POI).
    lower, upper : float
        The interval's ends (a POI limit where the p-value stays above ``1 - cl`` there).
    method : str
        How it was made: ``"profile likelihood (asymptotic)"``, ``"Feldman-Cousins (toys)"``, ...
    p_values : PValues
        The p-values the interval was read from.

    Examples
    --------
    >>> Interval(cl=0.68, best=1.0, lower=0.5, upper=1.5, method="profile likelihood", p_values=None).upper
    1.5
    """

    cl: float
    best: float
    lower: float
    upper: float
    method: str
    p_values: PValues


@runtime_checkable
class Calculator(Protocol):
    """What the answers (discovery, upper limit, interval) need from a calculator, asymptotic or toys.

    A calculator is made on one loss and POI; it fits the observed data itself (with
    :func:`free_fit` and :func:`conditional_fit`) and leaves every parameter as it found it.

    Attributes
    ----------
    loss : zcache.loss.BaseLoss
        The loss of the observed data.
    poi : Parameter
        The parameter of interest.
    null_value : float
        The POI's background-only value (default :func:`default_null_value`).
    """

    loss: BaseLoss
    poi: Parameter
    null_value: float

    def p_values(self, values: Any, statistic: str = "qtilde") -> PValues:
        """The p-values of the tested POI ``values`` with ``statistic``.

        Parameters
        ----------
        values : array_like
            The tested POI values.
        statistic : str
            One of ``zcache.inference.TEST_STATISTICS``.

        Returns
        -------
        PValues
        """
        ...

    def discovery(self) -> Discovery:
        """The significance of the background-only hypothesis's rejection."""
        ...
