r"""The toy calculator: p-values, CLs and discovery from toys fitted in batches.

:class:`ToyCalculator` implements :class:`zcache.inference.Calculator` with the toys of
:mod:`zcache.inference._toys` (thrown at the profiled point of each hypothesis, fitted with the
POI pinned and free in one compiled program, on Dask workers if asked). The p-value of a tested
value is the fraction of its toys whose statistic is at least the observed one; CLs divides it
by the same fraction among the background-only toys (Read, J. Phys. G 28 (2002) 2693). The
expected CLs band is the CLs the background-only toys would have observed, at their
−2 … +2 σ quantiles. With ``statistic="t"`` and a POI bounded at its physical limit the
p-values are the Feldman–Cousins construction (Phys. Rev. D 57 (1998) 3873): the ordering by
the likelihood ratio, with the best fit inside the physical region, and a Neyman belt from toys
at each tested value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

from .._engine.parameter import Parameter
from ..exceptions import InferenceError, ZCacheWarning
from ..loss import BaseLoss
from ..minimize import Minuit
from ._core import (
    Discovery,
    PValues,
    checked_values,
    conditional_fit,
    default_null_value,
    free_fit,
    kept_parameters,
    resolve_poi,
)
from ._statistics import statistic as _statistic
from ._toys import ALT, NULL, TOY_FIELDS, ToyFits, run_hypothesis_toys, toy_loss_parts

__all__ = ["ToyCalculator"]

#: The background-only quantiles of the expected band: −2, −1, 0, +1, +2 σ.
_BAND = stats.norm.cdf(np.arange(-2, 3))


def _fraction(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A binomial fraction and its standard error."""
    p = np.asarray(k, dtype=float) / n
    return p, np.sqrt(p * (1.0 - p) / n)


class ToyCalculator:
    r"""p-values, CLs and significances from toys, fitted many at once.

    For a tested value :math:`\mu`, toys are generated at :math:`(\mu, \hat{\hat\theta}(\mu))`
    (the nuisance values of the conditional fit to the observed data), background-only toys at
    :math:`(\mu_0, \hat{\hat\theta}(\mu_0))`; constraints' global observables are drawn per
    toy; every toy is fitted with the POI at :math:`\mu` and free (see the notes of
    the module ``zcache.inference._toys``). Toys are made
    when first needed and kept: a second question about the same values fits nothing. Every
    parameter's value and ``floating`` flag are as before after each call.

    Parameters
    ----------
    loss : zcache.loss.UnbinnedNLL
        The loss on the observed data (unbinned, extended or not).
    poi : str or Parameter
        The parameter of interest (floating); the loss's other floating parameters are the
        nuisance parameters.
    n_toys : int
        Toys per hypothesis: per tested value, and for the background-only hypothesis.
    null_value : float, optional
        The POI's background-only value (default :func:`zcache.inference.default_null_value`).
    seed : int, optional
        Seeds the toys (default: drawn at random, then kept in ``seed``); a toy depends only
        on the seed, its hypothesis and its number, not on the batch size or the chunking.
    batch : int or None
        Toys per compiled fit (:class:`zcache.scale.BatchedLoss`); ``None``: one by one with
        ``minimizer``. Every toy of a batch takes BFGS steps until the slowest one has
        converged, so a moderate batch (the default) beats a huge one (benchmarks/RESULTS.md).
    client : dask.distributed.Client, optional
        Fit the toys in chunks on the cluster's workers; needs ``factory``.
    factory : callable, optional
        With ``client``: a picklable callable, run once per worker, that builds the same loss
        (returning it, or ``(model, loss)``).
    toys : ToyFits, optional
        Toys fitted earlier (:meth:`ToyFits.from_npz`) with the same seed: used where they cover
        a question, so only what is missing is fitted.
    signal_value : float, optional
        The signal hypothesis of :meth:`discovery`'s expected significance (default: the
        observed best fit).
    minimizer : zcache.minimize.Minuit, optional
        Fits the observed data and refits toys the batched fit did not converge on.

    Raises
    ------
    InferenceError
        A loss the toys do not support (binned, simultaneous), ``n_toys`` < 1, ``client``
        without ``factory``, toys of another POI or seed.
    POIError
        An unknown or fixed POI.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Exponential, Gaussian, SumPdf
    >>> from zcache.loss import ExtendedUnbinnedNLL
    >>> from zcache.inference import ToyCalculator
    >>> space = Space("x", 0.0, 1.0)
    >>> s = zcache.Parameter("s_tc", 5.0, lower=0.0, upper=100.0)
    >>> model = SumPdf([Gaussian(space, 0.5, 0.05), Exponential(space, -1.0)], yields=[s, 50.0])
    >>> zcache.models.set_seed(2)
    >>> loss = ExtendedUnbinnedNLL(model, model.sample(52))
    >>> calc = ToyCalculator(loss, "s_tc", n_toys=64, seed=1, batch=64)
    >>> pv = calc.p_values([20.0])
    >>> bool(pv.cls[0] < 0.05), float(s)        # 20 signal events are excluded; s is untouched
    (True, 5.0)
    """

    def __init__(self, loss: BaseLoss, poi: str | Parameter, *, n_toys: int, null_value: float | None = None,
                 seed: int | None = None, batch: int | None = 128, client: Any = None,
                 factory: Callable[[], Any] | None = None, toys: ToyFits | None = None,
                 signal_value: float | None = None, minimizer: Minuit | None = None) -> None:
        toy_loss_parts(loss)  # refuses what toys cannot do (binned, simultaneous) now, not at the first question
        self.loss = loss
        self.poi = resolve_poi(loss, poi)
        if isinstance(n_toys, bool) or not float(n_toys).is_integer() or int(n_toys) < 1:
            raise InferenceError(f"n_toys must be a whole number >= 1, got {n_toys!r}.")
        self.n_toys = int(n_toys)
        if batch is not None and (isinstance(batch, bool) or not float(batch).is_integer() or int(batch) < 1):
            raise InferenceError(f"batch must be a whole number >= 1 (or None: one toy at a time), got {batch!r}.")
        self.batch = None if batch is None else int(batch)
        if client is not None and factory is None:
            raise InferenceError("ToyCalculator(client=...) needs factory=: a picklable function that builds the "
                                 "same loss on each worker.")
        self.null_value = default_null_value(self.poi) if null_value is None else \
            float(checked_values(self.poi, null_value, "null value")[0])
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % (2**63)) if toys is None else toys.seed
        self.seed = int(seed)
        if toys is not None and (toys.poi != self.poi.name or toys.seed != self.seed):
            raise InferenceError(f"the toys given are of POI {toys.poi!r} with seed {toys.seed}; this calculator's "
                                 f"are {self.poi.name!r} and {self.seed}: give the same seed (or no toys).")
        self.signal_value = None if signal_value is None else \
            float(checked_values(self.poi, signal_value, "signal value")[0])
        self.client, self.factory = client, factory
        self.minimizer = minimizer or Minuit()
        #: Every toy fitted so far (and those given): save them with ``calc.toys.to_npz(path)``.
        self.toys = toys if toys is not None else ToyFits(np.zeros(0, dtype=TOY_FIELDS), self.poi.name, self.seed,
                                                          float(loss.errordef))
        lower = -math.inf if self.poi.lower is None else self.poi.lower
        upper = math.inf if self.poi.upper is None else self.poi.upper
        #: ttilde / qtilde compare against 0 when the free fit goes below it (a POI bounded at 0 never does)
        self.bound = 0.0 if lower < 0.0 <= upper else None
        self._observed: dict[float, float] = {}
        self._free: tuple[float, float] | None = None

    # -- the observed data ---------------------------------------------------------------------
    def _free_fit(self) -> tuple[float, float]:
        if self._free is None:
            result = free_fit(self.loss, self.poi, self.minimizer)
            self._free = (float(result.values[self.poi.name]), float(result.fmin))
        return self._free

    @property
    def mu_hat(self) -> float:
        """The POI at the free minimum of the observed data (parameters put back)."""
        with kept_parameters(self.loss):
            return self._free_fit()[0]

    def _at(self, mu: float) -> float:
        if mu not in self._observed:
            self._observed[mu] = float(conditional_fit(self.loss, self.poi, mu, self.minimizer).fmin)
        return self._observed[mu]

    def observed_statistic(self, values: Any, statistic: str = "qtilde") -> np.ndarray:
        """The test statistic on the observed data at each tested value.

        Parameters
        ----------
        values : float or array_like
            Tested POI values, inside its limits.
        statistic : {'t', 'ttilde', 'q', 'qtilde', 'q0'}
            The test statistic.

        Returns
        -------
        ndarray
            One value per tested value.

        Raises
        ------
        POIError
            A value outside the POI's limits.
        InferenceError
            An unknown statistic.
        """
        values = checked_values(self.poi, values)
        self._check_statistic(statistic, allow_q0=True)
        with kept_parameters(self.loss):
            mu_hat, free = self._free_fit()
            at_bound = self._at(self.bound) if (self.bound is not None and mu_hat < self.bound
                                                and statistic in ("ttilde", "qtilde")) else None
            return np.array([float(_statistic(statistic, mu, mu_hat=mu_hat, nll_at_mu=self._at(float(mu)),
                                              nll_free=free, nll_at_bound=at_bound, bound=self.bound or 0.0,
                                              errordef=self.loss.errordef)) for mu in values])

    # -- toys ------------------------------------------------------------------------------------
    def _missing(self, values: np.ndarray, kind: int, generated: float | None = None) -> list[float]:
        return [float(v) for v in values if len(self.toys.rows(kind, v, generated)) < self.n_toys]

    def _throw(self, values: list[float], *, alt: bool, null: bool, alt_tested: float | None = None) -> None:
        if not values:
            return
        fits = run_hypothesis_toys(self.loss, self.poi, values, n_toys=self.n_toys, null_value=self.null_value,
                                   seed=self.seed, alt=alt, null=null, alt_tested=alt_tested, batch=self.batch,
                                   bound=self.bound, minimizer=self.minimizer, client=self.client,
                                   factory=self.factory)
        self.toys = self.toys + fits

    def _statistics(self, rows: np.ndarray, name: str, tested: float) -> np.ndarray:
        """The statistic of each valid toy (an invalid one is left out, with a warning that counts them)."""
        rows = rows[: self.n_toys]
        ok = rows["valid"] & np.isfinite(rows["nll_at_mu"]) & np.isfinite(rows["nll_free"])
        if name in ("ttilde", "qtilde"):
            ok &= ~((rows["mu_hat"] < (self.bound or 0.0)) & ~np.isfinite(rows["nll_at_bound"])) \
                | (self.bound is None)
        if not ok.all():
            warnings.warn(f"ToyCalculator: {int((~ok).sum())} of {len(ok)} toys at {self.poi.name} = {tested:g} did "
                          "not converge (not even refitted with Minuit) and are left out.", ZCacheWarning,
                          stacklevel=3)
        rows = rows[ok]
        at_bound = np.where(np.isfinite(rows["nll_at_bound"]), rows["nll_at_bound"], rows["nll_free"])
        return _statistic(name, tested, mu_hat=rows["mu_hat"], nll_at_mu=rows["nll_at_mu"],
                          nll_free=rows["nll_free"], nll_at_bound=at_bound, bound=self.bound or 0.0,
                          errordef=self.loss.errordef)

    def _check_statistic(self, name: str, allow_q0: bool = False) -> None:
        allowed = ("t", "ttilde", "q", "qtilde") + (("q0",) if allow_q0 else ())
        if name not in allowed:
            raise InferenceError(f"unknown test statistic {name!r} for p-values; use one of {', '.join(allowed)} "
                                 "(discovery() uses q0).")

    def toy_statistics(self, value: float, statistic: str = "qtilde") -> tuple[np.ndarray, np.ndarray]:
        """The statistic of the toys of a tested value and of the background-only toys (throwing them if needed).

        Parameters
        ----------
        value : float
            A tested POI value.
        statistic : {'t', 'ttilde', 'q', 'qtilde'}
            The test statistic.

        Returns
        -------
        alt, null : ndarray
            The statistic of each valid toy generated at ``value`` and at the null value.
        """
        self._check_statistic(statistic)
        (value,) = checked_values(self.poi, value)
        self._ensure(np.array([value]))
        return (self._statistics(self.toys.rows(ALT, value), statistic, value),
                self._statistics(self.toys.rows(NULL, value), statistic, value))

    def _ensure(self, values: np.ndarray) -> None:
        alt, null = self._missing(values, ALT), self._missing(values, NULL)
        both = sorted(set(alt) & set(null))
        self._throw(both, alt=True, null=True)
        self._throw(sorted(set(alt) - set(both)), alt=True, null=False)
        self._throw(sorted(set(null) - set(both)), alt=False, null=True)

    # -- the Calculator protocol -----------------------------------------------------------------
    def p_values(self, values: Any, statistic: str = "qtilde") -> PValues:
        """The p-values, CLs and expected CLs of tested POI values, from toys.

        ``clsb`` is the fraction of the tested value's toys with a statistic at least the
        observed one, ``clb`` the same fraction among the background-only toys, ``cls`` their
        ratio (binomial errors, propagated). ``expected_cls[k]`` is the CLs a background-only
        toy at the −2 … +2 σ quantile of their statistic would have observed.

        Parameters
        ----------
        values : float or array_like
            Tested POI values, inside its limits.
        statistic : {'qtilde', 'q', 't', 'ttilde'}
            ``qtilde`` / ``q`` for upper limits, ``t`` / ``ttilde`` for two-sided intervals
            (``t`` with a POI bounded at its physical limit: Feldman–Cousins).

        Returns
        -------
        zcache.inference.PValues

        Raises
        ------
        POIError
            A value outside the POI's limits (nothing is fitted).
        InferenceError
            An unknown statistic.

        Examples
        --------
        See :class:`ToyCalculator`.
        """
        self._check_statistic(statistic)
        values = checked_values(self.poi, values)
        observed = self.observed_statistic(values, statistic)
        self._ensure(values)
        n = len(values)
        clsb, clb, clsb_err, clb_err = (np.zeros(n) for _ in range(4))
        expected, expected_err = np.zeros((5, n)), np.zeros((5, n))
        for j, mu in enumerate(values):
            alt = np.sort(self._statistics(self.toys.rows(ALT, mu), statistic, mu))
            null = np.sort(self._statistics(self.toys.rows(NULL, mu), statistic, mu))
            if not len(alt) or not len(null):
                raise InferenceError(f"no toy at {self.poi.name} = {mu:g} converged: the model cannot be fitted to "
                                     "its own toys here; check the fit of the observed data.")

            def tail(dist: np.ndarray, q: np.ndarray) -> np.ndarray:
                # how many of the sorted toys have a statistic >= q; a hair below q so that toys
                # equal to it (q = 0, the mass at the boundary) count as at least as extreme
                return len(dist) - np.searchsorted(dist, np.asarray(q) - 1e-9 * (1.0 + np.abs(q)), side="left")

            clsb[j], clsb_err[j] = _fraction(tail(alt, observed[j]), len(alt))
            clb[j], clb_err[j] = _fraction(tail(null, observed[j]), len(null))
            # expected: the CLs each background-only toy would have observed, at the band's quantiles
            q_band = np.quantile(null, 1.0 - _BAND)  # a larger statistic is more background-like: -2 sigma first
            p_sb, e_sb = _fraction(tail(alt, q_band), len(alt))
            p_b, e_b = _fraction(tail(null, q_band), len(null))
            expected[:, j], expected_err[:, j] = _ratio(p_sb, e_sb, p_b, e_b)
        cls, cls_err = _ratio(clsb, clsb_err, clb, clb_err)
        return PValues(values=values, statistic=statistic, observed=observed, clsb=clsb, clb=clb, cls=cls,
                       expected_cls=expected, clsb_err=clsb_err, clb_err=clb_err, cls_err=cls_err,
                       expected_cls_err=expected_err)

    def discovery(self) -> Discovery:
        r"""The significance of the excess: :math:`p_0` from the :math:`q_0` of background-only toys.

        :math:`p_0` is the fraction of background-only toys with :math:`q_0` at least the
        observed one. If none is (the excess is beyond what ``n_toys`` can tell), ``p0`` is 0,
        ``p0_err`` is its 95 % upper bound :math:`-\ln(0.05)/n` and ``significance`` is
        infinite, with a :class:`~zcache.exceptions.ZCacheWarning` saying so (also when fewer
        than 10 toys are beyond it). The expected significance is the median one of toys
        generated at ``signal_value`` (default: the observed best fit).

        Returns
        -------
        zcache.inference.Discovery

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space, Exponential, Gaussian, SumPdf
        >>> from zcache.loss import ExtendedUnbinnedNLL
        >>> from zcache.inference import ToyCalculator
        >>> space = Space("x", 0.0, 1.0)
        >>> s = zcache.Parameter("s_td", 0.0, lower=0.0, upper=100.0)
        >>> model = SumPdf([Gaussian(space, 0.5, 0.05), Exponential(space, -1.0)], yields=[s, 50.0])
        >>> zcache.models.set_seed(3)
        >>> loss = ExtendedUnbinnedNLL(model, model.sample(50))
        >>> d = ToyCalculator(loss, "s_td", n_toys=64, seed=1, batch=64).discovery()
        >>> bool(0.0 < d.p0 <= 1.0), bool(d.p0_err > 0)
        (True, True)
        """
        mu0 = self.null_value
        q_obs = float(self.observed_statistic([mu0], "q0")[0])
        with kept_parameters(self.loss):
            mu_hat = self._free_fit()[0]
        signal = self.signal_value if self.signal_value is not None else mu_hat
        if not len(self.toys.rows(NULL, mu0)) >= self.n_toys:
            self._throw([mu0], alt=False, null=True)
        null = self._statistics(self.toys.rows(NULL, mu0), "q0", mu0)
        n = len(null)
        beyond = int(np.sum(null >= q_obs - 1e-9 * (1.0 + abs(q_obs))))
        if beyond == 0:
            p0, p0_err, z, z_err = 0.0, -math.log(0.05) / n, math.inf, math.nan
            warnings.warn(f"ToyCalculator.discovery: none of {n} background-only toys has q0 >= the observed "
                          f"{q_obs:.3g}: p0 < {p0_err:.2g} at 95 % CL (Z > {stats.norm.isf(p0_err):.2f}); throw more "
                          "toys (n_toys) for a value.", ZCacheWarning, stacklevel=2)
        else:
            p0, p0_err = (float(v) for v in _fraction(beyond, n))
            z = float(stats.norm.isf(p0))
            z_err = float(p0_err / stats.norm.pdf(z)) if math.isfinite(z) else math.nan
            if beyond < 10:
                warnings.warn(f"ToyCalculator.discovery: only {beyond} of {n} background-only toys have q0 >= the "
                              f"observed {q_obs:.3g}: p0 = {p0:.2g} +- {p0_err:.1g} is rough; throw more toys.",
                              ZCacheWarning, stacklevel=2)
        expected = math.nan
        if signal != mu0:
            if not len(self.toys.rows(ALT, mu0, generated=signal)) >= self.n_toys:
                self._throw([signal], alt=True, null=False, alt_tested=mu0)
            alt = self._statistics(self.toys.rows(ALT, mu0, generated=signal), "q0", mu0)
            q_med = float(np.median(alt))
            p_med = float(np.mean(null >= q_med - 1e-9 * (1.0 + abs(q_med))))
            # beyond every background toy: the asymptotic sqrt(q0) (Cowan et al. eq. 53)
            expected = float(stats.norm.isf(p_med)) if p_med > 0 else math.sqrt(max(q_med, 0.0))
        return Discovery(p0=float(p0), significance=float(z), p0_err=float(p0_err), significance_err=float(z_err),
                         expected_significance=expected)


def _ratio(a: np.ndarray, ea: np.ndarray, b: np.ndarray, eb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ratio a / b and its error (independent errors; 0 / 0 is 1: neither hypothesis is disfavoured)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(b > 0, a / np.where(b > 0, b, 1.0), np.where(a > 0, np.inf, 1.0))
        rel = np.sqrt(np.where(a > 0, (ea / np.where(a > 0, a, 1.0)) ** 2, 0.0)
                      + np.where(b > 0, (eb / np.where(b > 0, b, 1.0)) ** 2, 0.0))
    return r, np.where(b > 0, r * rel, np.nan)
