r"""The asymptotic calculator: p-values from the formulae of Cowan, Cranmer, Gross and Vitells.

For large samples a profile-likelihood statistic is a function of the POI's maximum-likelihood
estimate :math:`\hat\mu`, which is Gaussian about the true value :math:`\mu'` with a width
:math:`\sigma` (Wald). The width is read off the *Asimov data set* of the background-only
hypothesis :math:`\mu' = b` (the ``null_value``): the data whose every estimate is the true
value, so that the statistic on them is :math:`t_{\mu,A} = (\mu - \mu')^2/\sigma^2`
(arXiv:1007.1727, eq. 32). Every p-value, CLs and expected band follows in closed form
(eqs. 52–67 and the bands of sec. 4.2; Read's CLs, Junk's :math:`\mathrm{CL}_b`):

- ``q`` and ``qtilde`` (upper limits) as ``pyhf``'s asymptotic calculator writes them: with
  :math:`\sqrt{q}` observed and :math:`\sqrt{q_A}` on the Asimov data, the statistic
  :math:`x = \sqrt{q} - \sqrt{q_A}` (``qtilde`` above :math:`q_A`: :math:`(q - q_A)/(2\sqrt{q_A})`),
  :math:`\mathrm{CL}_{s+b} = 1 - \Phi(x + \sqrt{q_A})`, :math:`\mathrm{CL}_b = 1 - \Phi(x)`,
  and the expected band at :math:`N\sigma` from :math:`x = -N`;
- ``t`` and ``ttilde`` (two-sided): the probability that :math:`\hat\mu \sim N(\mu, \sigma)`
  (:math:`\mathrm{CL}_{s+b}`, eq. 36 and 45) or :math:`N(\mu', \sigma)` (:math:`\mathrm{CL}_b`)
  gives a statistic at least the observed one; the band at :math:`N\sigma` is the statistic of
  :math:`\hat\mu = \mu' + N\sigma`;
- ``q0`` (discovery): :math:`p_0 = 1 - \Phi(\sqrt{q_0})` (eq. 53), the median significance
  expected for a signal :math:`\mu_1`: :math:`\sqrt{q_{0,A}}` on the Asimov data of
  :math:`\mu_1` (eq. 97).

Asimov data. Each data set is made at the POI's hypothesised value with the nuisance
parameters profiled on the observed data there (:math:`\hat{\hat\theta}(\mu')`, as ``pyhf`` and
RooStats do), for a loss of the same kind on the same model:

- binned losses (:class:`~zcache.binned.ExtendedBinnedNLL`, :class:`~zcache.binned.BinnedNLL`,
  :class:`~zcache.binned.BinnedChi2`): the expected counts, exactly (a chi-square keeps the
  observed variances: they are the measurement's errors);
- unbinned losses of one observable (:class:`~zcache.loss.UnbinnedNLL`,
  :class:`~zcache.loss.ExtendedUnbinnedNLL`): one weighted event at the centre of each of
  ``asimov_bins`` equal bins of the space, weighted by the expected number of events in the bin
  (the yield times the bin's exact probability; a non-extended loss: the observed number of
  events). :math:`-\sum_i w_i \log p(x_i)` is then the midpoint rule of
  :math:`-\nu\int f\log p`, accurate to :math:`O(h^2)` of the bin width;
- :class:`~zcache.loss.GaussianConstraint`: the observed value (the auxiliary measurement) at
  the profiled value of its parameters, same widths;
- :class:`~zcache.loss.SimultaneousLoss`: each part's Asimov data.

Other losses (a template fit, a loss evaluated in parts elsewhere, several observables)
raise :class:`~zcache.exceptions.AsimovError`, as do weighted events (a weighted
likelihood is no likelihood: Wilks' and Wald's theorems, and so these formulae, do not hold
for it; use toys). The Asimov data's own minimum is taken at the values they were made with
(by construction the best fit), so each tested value costs one conditional fit on the observed
and one on the Asimov data; every fit is kept, and a second call at other values reuses them.

The Asimov fits run on one Asimov loss per observed loss (per ``asimov_bins`` and per observed
values of its constraints, which are constants of its programs), kept as long as the observed loss
lives and shared by every calculator of it: the data of the value being fitted are written into it
(``set_data``, ``set_counts``) before each fit, so its fits' programs are traced (and with
``compiled=True`` compiled) once, not once per calculator, while the data it fits are always those
of that value. A thread that finds it in use by another builds a loss of its own.

Examples
--------
A counting experiment: 18 events observed over a known background of 10 (one bin); the POI is
the signal yield:

>>> import numpy as np, zcache
>>> from zcache.models import Space, SumPdf
>>> from zcache.shapes import HistogramPdf
>>> from zcache.binned import BinnedData, ExtendedBinnedNLL
>>> from zcache.inference import AsymptoticCalculator
>>> space = Space("x", 0.0, 1.0)
>>> nsig = zcache.Parameter("nsig_ac", 5.0, lower=0.0, upper=100.0)
>>> flat = [HistogramPdf(space, [1.0], [0.0, 1.0]) for _ in range(2)]
>>> loss = ExtendedBinnedNLL(SumPdf(flat, yields=[nsig, 10.0]), BinnedData([18.0], [0.0, 1.0]))
>>> d = AsymptoticCalculator(loss, "nsig_ac", signal_value=5.0).discovery()   # expected: for s = 5 over b = 10
>>> n, b, s = 18.0, 10.0, 5.0
>>> bool(np.isclose(d.significance, np.sqrt(2 * (n * np.log(n / b) - (n - b))), rtol=1e-6))
True
>>> bool(np.isclose(d.expected_significance, np.sqrt(2 * ((s + b) * np.log(1 + s / b) - s)), rtol=1e-6))
True
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy import stats

from .._engine.data import Data
from .._engine.parameter import Parameter, set_values
from ..binned import BinnedChi2, BinnedData, BinnedNLL, ExtendedBinnedNLL
from ..exceptions import AsimovError, InferenceError
from ..loss import BaseLoss, ExtendedUnbinnedNLL, GaussianConstraint, SimultaneousLoss, UnbinnedNLL
from ..minimize import FitResult, Minuit
from ._core import (
    Discovery,
    PValues,
    checked_values,
    conditional_fit,
    default_null_value,
    kept_parameters,
    resolve_poi,
)
from ._statistics import TEST_STATISTICS, statistic

__all__ = ["AsymptoticCalculator"]

_BINNED = (ExtendedBinnedNLL, BinnedNLL, BinnedChi2)
_UNBINNED = (UnbinnedNLL, ExtendedUnbinnedNLL)
#: the bands of the expected CLs, in standard deviations of the background-only hypothesis
BANDS = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])


def _refusal(loss: BaseLoss) -> str | None:
    """Why no Asimov data can be made for ``loss`` (or the formulae do not apply), None if they can."""
    if type(loss) is SimultaneousLoss:
        if loss.constraints:
            return "a SimultaneousLoss with constraints of its own (give them to its parts)"
        for part in loss.losses:
            why = _refusal(part)
            if why is not None:
                return why
        return None
    kind = type(loss).__name__
    if type(loss) in _UNBINNED:
        if loss.model.space.n_obs != 1:
            return (f"{kind} of {loss.model.space.n_obs} observables (Asimov data are made on a fine binning of "
                    "one observable)")
        weights = loss.data.weights_data
        if weights is not None and loss.data.is_weighted and not np.all(weights.numpy() == 1.0):
            return (f"{kind} of weighted events ('{loss.data.name}'): a weighted likelihood is no likelihood, and "
                    "the asymptotic distributions (Wilks, Wald) do not hold for it")
        return None
    if type(loss) in _BINNED:
        if loss.likelihood and not np.allclose(loss.data.variances, loss.data.counts, rtol=1e-12, atol=0.0):
            return (f"{kind} of a weighted histogram ('{loss.data.name}': variances differ from the counts): the "
                    "likelihood reads Poisson counts, and the asymptotic distributions do not hold for weighted ones")
        return None
    return (f"a {kind} (the calculator makes Asimov data for ExtendedBinnedNLL, BinnedNLL, BinnedChi2, "
            "UnbinnedNLL and ExtendedUnbinnedNLL of one observable, and SimultaneousLoss of these)")


def _constraints_with(constraints: list[GaussianConstraint], observed: tuple[tuple[float, ...], ...]
                      ) -> list[GaussianConstraint]:
    """The constraints with the observed values ``observed`` (one tuple per constraint), same widths."""
    made = []
    for c, values in zip(constraints, observed, strict=True):
        diagonal = np.array_equal(c.cov, np.diag(np.diag(c.cov)))
        made.append(GaussianConstraint(c.params, list(values), sigma=c.sigma) if diagonal
                    else GaussianConstraint(c.params, list(values), cov=c.cov))
    return made


class _Made:
    """The Asimov data of one loss that is not a SimultaneousLoss: its arrays and its constraints' observed values.

    ``first``/``second`` are the counts and variances of a binned loss, the events and weights of an
    unbinned one; ``observed`` the constraints' observed values (their parameters' values).
    """

    __slots__ = ("first", "second", "observed")

    def __init__(self, first: np.ndarray, second: np.ndarray, observed: tuple[tuple[float, ...], ...]) -> None:
        self.first, self.second, self.observed = first, second, observed


def asimov_data(loss: BaseLoss, bins: int) -> Any:
    """The Asimov data of the current parameter values: a ``_Made`` per loss, a list of them per SimultaneousLoss.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        A loss the calculator supports (see the module).
    bins : int
        The bins of an unbinned loss's observable.

    Returns
    -------
    _Made or list
        The arrays and constraint values; :func:`asimov_loss` builds a loss of them.

    Raises
    ------
    AsimovError
        A loss it cannot make Asimov data for.
    """
    why = _refusal(loss)
    if why is not None:
        raise AsimovError(f"no Asimov data for {why}; use a toy calculator.")
    if type(loss) is SimultaneousLoss:
        return [asimov_data(part, bins) for part in loss.losses]
    observed = tuple(tuple(float(p) for p in c.params) for c in loss.constraints)
    if type(loss) in _BINNED:
        counts = np.maximum(loss.expected_counts().numpy(), 0.0)
        variances = loss.data.variances if type(loss) is BinnedChi2 else counts
        return _Made(counts, variances, observed)
    space = loss.model.space
    edges = np.linspace(space.lower[0], space.upper[0], bins + 1)
    probs = loss.model.integrate_bins(tuple(edges)).numpy()
    if loss.extended:
        total = float(loss.model.get_yield())
    else:
        w = loss.data.weights_data
        total = float(np.sum(w.numpy())) if w is not None else float(loss.data.nevents)
    weights = total * probs
    # Bins the model gives (next to) nothing: no event there (0 log 0 would be NaN, and their
    # weight is below the sum's rounding).
    keep = weights > 1e-15 * weights.sum()
    centres = 0.5 * (edges[:-1] + edges[1:])[keep]
    events = centres[:, None] if (loss.data.obs is not None or loss.data.event_shape == (1,)) else centres
    return _Made(events, weights[keep], observed)


def _built(loss: BaseLoss, made: Any) -> BaseLoss:
    """A new loss of the same kind as ``loss`` on the same model, on the Asimov data ``made``."""
    if type(loss) is SimultaneousLoss:
        return SimultaneousLoss([_built(part, m) for part, m in zip(loss.losses, made, strict=True)])
    constraints = _constraints_with(loss.constraints, made.observed)
    if type(loss) in _BINNED:
        data = BinnedData(made.first, loss.data.edges, variances=made.second, name=f"{loss.data.name}:asimov",
                          obs=loss.data.obs)
        return type(loss)(loss.model, data, constraints=constraints)
    obs = loss.data.obs
    data = Data(made.first, name=f"{loss.data.name}:asimov", obs=loss.model.space.obs if obs is not None else None,
                weights=made.second)
    return type(loss)(loss.model, data, constraints=constraints)


def _written(asimov: BaseLoss, made: Any) -> None:
    """Write the Asimov data ``made`` into ``asimov`` (a loss :func:`_built` made of the same loss)."""
    if type(asimov) is SimultaneousLoss:
        for part, m in zip(asimov.losses, made, strict=True):
            _written(part, m)
    elif type(asimov) in _BINNED:
        asimov.data.set_counts(made.first, variances=made.second)
    else:
        asimov.data.set_data(made.first, weights=made.second)


def asimov_loss(loss: BaseLoss, bins: int) -> BaseLoss:
    """A loss of the same kind as ``loss`` on the Asimov data of the current parameter values.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        A loss the calculator supports (see the module).
    bins : int
        The bins of an unbinned loss's observable.

    Returns
    -------
    zcache.loss.BaseLoss
        A new loss on the same model and parameters.

    Raises
    ------
    AsimovError
        A loss it cannot make Asimov data for.
    """
    return _built(loss, asimov_data(loss, bins))


def _structure(loss: BaseLoss) -> tuple:
    """What an Asimov loss of ``loss`` is built of besides its data: the model and data objects of every part."""
    if type(loss) is SimultaneousLoss:
        return tuple(_structure(part) for part in loss.losses)
    return (type(loss), id(loss.model), id(loss.data), len(loss.constraints))


def _observed_values(made: Any) -> tuple:
    """The constraints' observed values of every part of ``made`` (constants of an Asimov loss's graphs)."""
    if isinstance(made, list):
        return tuple(_observed_values(m) for m in made)
    return made.observed


class _Shared:
    """An Asimov loss kept for a loss, its data written before each use (one user at a time)."""

    def __init__(self, loss: BaseLoss) -> None:
        self.loss = loss
        self.lock = threading.Lock()


#: Asimov losses kept per observed loss (weakly: they go with it), keyed by the bins, the structure and
#: the constraints' observed values (constants of their graphs). Their fits' traced and compiled programs
#: are kept with them, so a new calculator of the same loss, at any state, traces nothing again.
_SHARED: weakref.WeakKeyDictionary[BaseLoss, dict[tuple, _Shared]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()
#: Asimov losses kept per observed loss: constraints observed at other values need losses of their own
#: (a limit scan's calculators profile the same nuisances at the null value and meet the same few)
SHARED_PER_LOSS = 4


def shared_asimov_losses(loss: BaseLoss) -> list[BaseLoss]:
    """The Asimov losses kept for ``loss`` (whose data the calculator writes before each fit on them).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        An observed loss.

    Returns
    -------
    list of zcache.loss.BaseLoss
        Possibly empty.
    """
    with _SHARED_LOCK:
        return [entry.loss for entry in _SHARED.get(loss, {}).values()]


@contextlib.contextmanager
def _asimov_in_use(loss: BaseLoss, bins: int, made: Any) -> Iterator[BaseLoss]:
    """The Asimov loss of ``loss`` holding the data ``made``, for one fit or value.

    A kept loss (:data:`_SHARED`) with ``made`` written into it, so that its programs are traced once
    for every calculator of ``loss``; a new one where another thread is using the kept one.
    """
    key = (bins, _structure(loss), _observed_values(made))
    with _SHARED_LOCK:
        kept = _SHARED.setdefault(loss, {})
        entry = kept.get(key)
        if entry is None:
            if len(kept) >= SHARED_PER_LOSS:
                kept.pop(next(iter(kept)))  # the oldest
            entry = kept[key] = _Shared(_built(loss, made))
    if not entry.lock.acquire(blocking=False):
        yield _built(loss, made)
        return
    try:
        # the data of this call, always: another calculator (or value) may have written its own
        _written(entry.loss, made)
        yield entry.loss
    finally:
        entry.lock.release()


class _Fits:
    """The fits of one loss, kept: the conditional minimum per tested value, and the free one."""

    def __init__(self, loss: BaseLoss, poi: Parameter, minimizer: Any, what: str,
                 start: dict[Parameter, float] | None = None, free_nll: float | None = None,
                 free_poi: float | None = None, asimov: tuple[int, Any] | None = None) -> None:
        self.loss, self.poi, self.minimizer, self.what = loss, poi, minimizer, what
        self.start = start  # the parameter values fits start from (default: the user's)
        #: (bins, Asimov data): the fits are of the Asimov loss of ``loss`` on these data
        self.asimov = asimov
        self.conditional: dict[float, FitResult] = {}
        self._free: FitResult | None = None
        self.free_nll = free_nll
        self.free_poi = free_poi

    @contextlib.contextmanager
    def _fitted_loss(self) -> Iterator[BaseLoss]:
        if self.asimov is None:
            yield self.loss
        else:
            with _asimov_in_use(self.loss, *self.asimov) as loss:
                yield loss

    def _fit(self, value: float | None) -> FitResult:
        with self._fitted_loss() as loss, kept_parameters(loss):
            if self.start is not None:
                set_values(list(self.start), list(self.start.values()))
            if value is None:
                result = self.minimizer.minimize(loss)
            else:
                result = conditional_fit(loss, self.poi, value, self.minimizer)
        if not result.valid:
            at = "the POI free" if value is None else f"{self.poi.name} = {value:g}"
            raise InferenceError(
                f"the fit of the {self.what} with {at} did not converge (fmin {result.fmin:.8g}, edm {result.edm:.3g}); "
                "start the parameters nearer their best values, loosen their limits, or pass another minimizer."
            )
        return result

    def free(self) -> tuple[float, float]:
        """The POI and the loss at the free minimum."""
        if self.free_nll is None:
            self._free = self._fit(None)
            self.free_nll = float(self._free.fmin)
            self.free_poi = float(self._free.values[self.poi.name])
        return self.free_poi, self.free_nll

    def at(self, value: float) -> FitResult:
        """The conditional fit at ``value`` (kept)."""
        key = float(value)
        if key not in self.conditional:
            self.conditional[key] = self._fit(key)
        return self.conditional[key]

    def nll_at(self, values: np.ndarray) -> np.ndarray:
        return np.array([self.at(v).fmin for v in values])


def _one_sided(q: np.ndarray, q_asimov: np.ndarray, tilde: bool) -> tuple[np.ndarray, np.ndarray]:
    r"""The observed statistic :math:`x` of ``q``/``qtilde`` and :math:`\sqrt{q_A}`."""
    sq, sa = np.sqrt(q), np.sqrt(q_asimov)
    x = sq - sa
    if tilde:
        with np.errstate(divide="ignore", invalid="ignore"):
            above = (q - q_asimov) / (2.0 * sa)
        x = np.where((sq > sa) & (sa > 0.0), above, x)
    return x, sa


def _one_sided_p(x: np.ndarray, sa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CLs+b and CLb of the one-sided statistics at ``x``."""
    return stats.norm.sf(x + sa), stats.norm.sf(x)


def _two_sided_stat(mu_hat: np.ndarray, mu: np.ndarray, sigma: np.ndarray, bound: float | None) -> np.ndarray:
    """``t`` (bound None) or ``ttilde`` as a function of the estimate (Cowan et al. eqs. 8, 43)."""
    t = ((mu - mu_hat) / sigma) ** 2
    if bound is None:
        return t
    below = (mu - bound) * (mu + bound - 2.0 * mu_hat) / sigma**2
    return np.where(mu_hat < bound, below, t)


def _two_sided_tail(t: np.ndarray, mu: np.ndarray, truth: np.ndarray, sigma: np.ndarray,
                    bound: float | None) -> np.ndarray:
    r"""P(statistic >= ``t``) for :math:`\hat\mu \sim N(\mathrm{truth}, \sigma)`, tested value ``mu``.

    The statistic falls as :math:`\hat\mu` rises to ``mu`` and rises after: the tail is
    :math:`\hat\mu \le a` or :math:`\hat\mu \ge \mu + \sigma\sqrt t`, with :math:`a = \mu - \sigma\sqrt t`
    (``t``), or below the bound the root of the linear branch of ``ttilde``.
    """
    root = np.sqrt(t)
    a = mu - sigma * root
    if bound is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            linear = 0.5 * (mu + bound - t * sigma**2 / (mu - bound))
        a = np.where((a < bound) & (mu > bound), linear, a)
    return stats.norm.cdf((a - truth) / sigma) + stats.norm.sf((mu + sigma * root - truth) / sigma)


class AsymptoticCalculator:
    r"""p-values, CLs and discovery significances from the asymptotic formulae (Cowan et al.).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss of the observed data (see the module for the losses it takes).
    poi : str or Parameter
        The parameter of interest, floating.
    null_value : float, optional
        The POI's background-only value; default :func:`zcache.inference.default_null_value`
        (0, or the lower limit where 0 is outside the limits). ``qtilde`` and ``ttilde`` take it
        as the POI's physical bound.
    minimizer : optional
        Anything with ``minimize(loss)``; default :class:`zcache.minimize.Minuit` (the compiled
        fit). ``Minuit(compiled=False)`` fits with MIGRAD call by call.
    asimov_bins : int
        The bins of an unbinned loss's observable for its Asimov data (>= 10).
    signal_value : float, optional
        The POI of the signal hypothesis behind ``Discovery.expected_significance`` (its Asimov
        data); default the observed best fit :math:`\hat\mu` (the significance expected for a
        signal as large as the one fitted; 0 where that is not above the null value).

    Attributes
    ----------
    loss, poi, null_value
        As given (the POI resolved to its Parameter).

    Raises
    ------
    POIError
        An unknown or fixed POI, or a null value outside its limits.
    AsimovError
        A loss whose Asimov data the calculator cannot make, or weighted events (see the module).
    InferenceError
        ``asimov_bins`` not a whole number >= 10.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.inference import AsymptoticCalculator
    >>> mu = zcache.Parameter("mu_acg", 0.0, lower=-2.0, upper=2.0)
    >>> x = np.random.default_rng(4).normal(0.3, 1.0, 100)
    >>> calc = AsymptoticCalculator(UnbinnedNLL(Gaussian(Space("x", -8.0, 8.0), mu, 1.0), zcache.Data(x)), "mu_acg",
    ...                             null_value=0.0)
    >>> pv = calc.p_values([0.0, 0.5], statistic="t")
    >>> bool(np.allclose(pv.clsb, 2 * stats.norm.sf(10 * np.abs(x.mean() - np.array([0.0, 0.5]))), atol=1e-4))
    True
    """

    def __init__(self, loss: BaseLoss, poi: str | Parameter, *, null_value: float | None = None,
                 minimizer: Any = None, asimov_bins: int = 2000, signal_value: float | None = None) -> None:
        if not isinstance(loss, BaseLoss):
            raise InferenceError(f"AsymptoticCalculator takes a zcache loss, got {type(loss).__name__}.")
        self.poi = resolve_poi(loss, poi)
        self.null_value = (default_null_value(self.poi) if null_value is None
                           else float(checked_values(self.poi, null_value, "null value")[0]))
        self.signal_value = (None if signal_value is None
                             else float(checked_values(self.poi, signal_value, "signal value")[0]))
        if isinstance(asimov_bins, bool) or not isinstance(asimov_bins, (int, np.integer)) or asimov_bins < 10:
            raise InferenceError(f"asimov_bins must be a whole number >= 10, got {asimov_bins!r}.")
        why = _refusal(loss)
        if why is not None:
            raise AsimovError(f"the asymptotic calculator cannot use {why}; use a toy calculator.")
        self.loss = loss
        self.minimizer = Minuit() if minimizer is None else minimizer
        self.asimov_bins = int(asimov_bins)
        self._observed = _Fits(loss, self.poi, self.minimizer, "observed data")
        self._asimov: dict[float, _Fits] = {}
        self._asimov_losses: dict[float, BaseLoss] = {}  # asimov()'s answers, one per value

    def __repr__(self) -> str:
        return (f"<AsymptoticCalculator poi='{self.poi.name}' null_value={self.null_value:g} "
                f"loss={type(self.loss).__name__}>")

    @property
    def mu_hat(self) -> float:
        """The POI at the free minimum of the observed data (fitted once)."""
        return self._observed.free()[0]

    def _asimov_minimizer(self) -> Any:
        # The Asimov fits need minima, not errors: no weight correction of their (weighted) events.
        if getattr(self.minimizer, "weightcorr", None) is None:
            return self.minimizer
        m = copy.copy(self.minimizer)
        m.weightcorr = None
        return m

    def asimov(self, value: float) -> BaseLoss:
        """The loss on the Asimov data of the POI at ``value`` (nuisances profiled on the observed data; kept).

        Parameters
        ----------
        value : float
            The POI value the data are made with.

        Returns
        -------
        zcache.loss.BaseLoss
            A loss of the same kind on the same model, of its own (the calculator fits another one,
            kept for the observed loss, with these data written into it before each fit).

        Raises
        ------
        POIError
            ``value`` outside the POI's limits.
        """
        fits = self._asimov_fits(value)
        key = float(fits.free_poi)
        if key not in self._asimov_losses:
            self._asimov_losses[key] = _built(self.loss, fits.asimov[1])
        return self._asimov_losses[key]

    def _asimov_fits(self, value: float) -> _Fits:
        (value,) = checked_values(self.poi, value, "Asimov value")
        key = float(value)
        if key not in self._asimov:
            profiled = self._observed.at(key)
            params = self.loss.get_params(floating=None)
            start = {p: profiled.values.get(p.name, float(p)) for p in params}
            start[self.poi] = key
            with kept_parameters(self.loss):
                set_values(list(start), list(start.values()))
                made = asimov_data(self.loss, self.asimov_bins)
                # The fits use one Asimov loss per observed loss, kept across calculators, with these
                # data written into it before each (_asimov_in_use): its programs are traced once.
                with _asimov_in_use(self.loss, self.asimov_bins, made) as asimov:
                    # Asimov data are their own best fit: the minimum is at the values they were made with.
                    free_nll = float(asimov.value())
            self._asimov[key] = _Fits(self.loss, self.poi, self._asimov_minimizer(),
                                      f"Asimov data of {self.poi.name} = {key:g}", start=start, free_nll=free_nll,
                                      free_poi=key, asimov=(self.asimov_bins, made))
        return self._asimov[key]

    def _observed_statistic(self, name: str, values: np.ndarray) -> np.ndarray:
        mu_hat, free = self._observed.free()
        at_bound = None
        if name in ("ttilde", "qtilde") and mu_hat < self.null_value:
            at_bound = self._observed.at(self.null_value).fmin
        return statistic(name, values, mu_hat=mu_hat, nll_at_mu=self._observed.nll_at(values), nll_free=free,
                         nll_at_bound=at_bound, bound=self.null_value, errordef=self.loss.errordef)

    def _asimov_t(self, truth: float, values: np.ndarray) -> np.ndarray:
        r""":math:`t_{\mu,A} = (\mu - \mu')^2 / \sigma^2` on the Asimov data of ``truth``."""
        fits = self._asimov_fits(truth)
        _, free = fits.free()
        return np.maximum((fits.nll_at(values) - free) / self.loss.errordef, 0.0)

    def p_values(self, values: Any, statistic: str = "qtilde") -> PValues:
        """The observed and expected p-values and CLs of tested POI values.

        Parameters
        ----------
        values : float or array_like
            Tested POI values, inside its limits.
        statistic : {'qtilde', 'q', 't', 'ttilde'}
            ``q``/``qtilde`` for upper limits (CLs), ``t``/``ttilde`` for two-sided intervals.

        Returns
        -------
        PValues
            Errors all 0.

        Raises
        ------
        POIError
            A value outside the POI's limits.
        InferenceError
            An unknown statistic, ``q0`` (use :meth:`discovery`), or a fit that did not converge.
        """
        if statistic not in TEST_STATISTICS or statistic == "q0":
            raise InferenceError(f"p_values takes the statistic 'q', 'qtilde', 't' or 'ttilde', got {statistic!r}"
                                 + ("; for q0 use discovery()." if statistic == "q0" else "."))
        values = checked_values(self.poi, values)
        observed = self._observed_statistic(statistic, values)
        t_asimov = self._asimov_t(self.null_value, values)
        if statistic in ("q", "qtilde"):
            q_asimov = np.where(values > self.null_value, t_asimov, 0.0)
            x, sa = _one_sided(observed, q_asimov, statistic == "qtilde")
            clsb, clb = _one_sided_p(x, sa)
            expected_sb, expected_b = _one_sided_p(-BANDS[:, None], sa[None, :])
        else:
            clsb, clb, expected_sb, expected_b = self._two_sided(statistic, values, observed, t_asimov)
        with np.errstate(divide="ignore", invalid="ignore"):
            cls = np.where(clb > 0.0, clsb / clb, 1.0)
            expected = np.where(expected_b > 0.0, expected_sb / expected_b, 1.0)
        zeros = np.zeros(len(values))
        return PValues(values=values, statistic=statistic, observed=observed, clsb=clsb, clb=clb,
                       cls=np.minimum(cls, 1.0), expected_cls=np.minimum(expected, 1.0), clsb_err=zeros,
                       clb_err=zeros.copy(), cls_err=zeros.copy(), expected_cls_err=np.zeros((len(BANDS), len(values))))

    def _two_sided(self, name: str, values: np.ndarray, observed: np.ndarray,
                   t_asimov: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        bound = self.null_value if name == "ttilde" else None
        null = self.null_value
        known = t_asimov > 0.0
        # sigma of the estimate from the Asimov data (eq. 32); where the tested value is the null
        # value the Asimov statistic is 0 and says nothing: both hypotheses are one, and t's own
        # formulae (no bound) serve.
        with np.errstate(divide="ignore", invalid="ignore"):
            sigma = np.where(known, np.abs(values - null) / np.sqrt(t_asimov), 1.0)
        mu = np.where(known, values, 0.0)
        truth_b = np.where(known, null, 0.0)
        use_bound = bound if bool(np.all(known)) else None
        if use_bound is None and bound is not None:  # compute per value: the bound only where sigma is known
            return self._two_sided_mixed(values, observed, t_asimov)
        clsb = _two_sided_tail(observed, mu, mu, sigma, use_bound)
        clb = _two_sided_tail(observed, mu, truth_b, sigma, use_bound)
        mu_hat = truth_b[None, :] + BANDS[:, None] * sigma[None, :]
        t_exp = _two_sided_stat(mu_hat, mu[None, :], sigma[None, :], use_bound)
        return (clsb, clb, _two_sided_tail(t_exp, mu, mu, sigma, use_bound),
                _two_sided_tail(t_exp, mu, truth_b, sigma, use_bound))

    def _two_sided_mixed(self, values: np.ndarray, observed: np.ndarray,
                         t_asimov: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        parts = [self._two_sided("ttilde" if t_asimov[i] > 0.0 else "t", values[i:i + 1], observed[i:i + 1],
                                 t_asimov[i:i + 1]) for i in range(len(values))]
        return tuple(np.concatenate([p[k] for p in parts], axis=-1) for k in range(4))  # type: ignore[return-value]

    def discovery(self) -> Discovery:
        r"""The discovery significance: :math:`q_0` against the null value.

        Returns
        -------
        Discovery
            Errors 0; the expected significance at ``signal_value`` (see the class).

        Raises
        ------
        InferenceError
            A fit that did not converge.
        """
        mu_hat, free = self._observed.free()
        null = self.null_value
        q0 = float(statistic("q0", null, mu_hat=mu_hat, nll_at_mu=self._observed.at(null).fmin, nll_free=free,
                             errordef=self.loss.errordef))
        signal = mu_hat if self.signal_value is None else self.signal_value
        expected = 0.0
        if signal > null:
            fits = self._asimov_fits(signal)
            q0_asimov = (fits.at(null).fmin - fits.free()[1]) / self.loss.errordef
            expected = math.sqrt(max(q0_asimov, 0.0))
        return Discovery(p0=float(stats.norm.sf(math.sqrt(q0))), significance=math.sqrt(q0), p0_err=0.0,
                         significance_err=0.0, expected_significance=expected)
