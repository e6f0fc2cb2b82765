"""Minimizers: iminuit's MIGRAD/HESSE on zcache losses.

:class:`Minuit` drives ``iminuit.Minuit`` with a zcache loss. Each function call
sets the floating parameters and evaluates the loss in one traced call
(:meth:`zcache.loss.BaseLoss.value_at`); the gradient is zcache's (automatic
through caches, or numerical, following :func:`zcache.set_autograd_mode`) or, with
``use_gradient=False``, Minuit's own finite differences.

Each minimization owns its offset (the loss at the start, subtracted so that Minuit
works on numbers of order one), and its :class:`FitResult` remembers the state of
the loss at the minimum: every parameter's value, fixed ones included, and the
data. :meth:`FitResult.minos` (a :class:`MinosError` per parameter), :meth:`FitResult.profile` and every method of
``result.minuit`` that evaluates the loss (a :class:`FitMinuit`) put that state
back while they run and restore the parameters (and data) as they found them, even
on an error: later fits, ``floating`` toggles or changed fixed parameters do not
change a result's MINOS intervals, and MINOS does not leave the parameters at the
last point it tried.

Before the fit the loss is :func:`zcache.precompute`-d for its floating
parameters, as RooFit optimizes constant terms by default: constant parts are
cached, parts that change on every call are bypassed. With Minuit's own or
zcache's numerical gradient (one parameter moved per call) the floating parts
stay cached, so each step recomputes only what the moved parameter touches.

Examples
--------
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

import contextlib
import functools
import time
import warnings
import weakref
from collections.abc import Sequence

import iminuit
import numpy as np

from ._engine.mode import compiles, get_autograd_mode, traces
from ._engine.parameter import Parameter
from ._fitting import minuit2, tiers
from ._fitting.compiled_fit import CompiledFit, CompiledOutcome
from ._fitting.corrections import WEIGHT_CORRECTIONS, corrected_covariance
from ._fitting.objective import LossState, Objective
from ._fitting.results import FitMinuit, FitResult, MinosError
from ._fitting.tiers import many_fits, wait_for_builds
from .loss import BaseLoss

__all__ = ["Minuit", "Scipy", "corrected_covariance", "many_fits", "wait_for_builds", "WEIGHT_CORRECTIONS", "FitResult",
           "FitMinuit", "MinosError"]

_HUGE = 1e30
_USES_HESSIAN = {"trust-constr", "trust-exact", "trust-krylov", "trust-ncg", "Newton-CG", "dogleg"}



def _objective(loss: BaseLoss, params: Sequence[Parameter] | None, precompute: bool, keep_floating: bool,
               who: str) -> Objective:
    if not isinstance(loss, BaseLoss):
        raise TypeError(f"{who}.minimize takes a zcache loss, got {loss!r}.")
    return loss.objective(params, precompute=precompute, keep_floating=keep_floating, who=who)


def _result(obj: Objective, best: np.ndarray, covariance: np.ndarray | None, weightcorr: str | None, *, valid: bool,
            fmin: float, edm: float, calls: tuple[int, int, int], start: float) -> FitResult:
    """The FitResult of a minimization of ``obj`` that ended at ``best`` (fmin relative to the offset)."""
    offset = obj.settled_offset(best)
    covariance, weightcorr = obj.corrected(best, covariance, weightcorr)  # what the loss's weights ask for
    errors = np.sqrt(np.diag(covariance)) if covariance is not None else np.full(len(best), np.nan)
    return FitResult(
        values=dict(zip(obj.names, map(float, best), strict=True)),
        errors=dict(zip(obj.names, map(float, errors), strict=True)),
        valid=valid,
        fmin=fmin + offset,
        edm=edm,
        nfcn=calls[0],
        ngrad=calls[1],
        nhessian=calls[2],
        covariance=covariance,
        params=list(obj.params),
        time=time.perf_counter() - start,
        precompute=obj.report,
        weightcorr=weightcorr,
    )


class _MinuitFunction:
    """What a :class:`zcache.minimize.FitMinuit` calls: the objective's value, gradient and Hessian, in Minuit2's terms.

    The Hessian is the loss's exact one plus what Minuit2's bound transforms leave out, laid
    out as the installed Minuit2 reads it (:mod:`zcache._fitting.minuit2`); for that it asks the Minuit
    now calling which parameters it fixed, through a weak reference: a Minuit holding its
    callbacks in C++ (which the garbage collector cannot traverse) would otherwise keep itself,
    the loss and its graphs alive for good.
    """

    def __init__(self, obj: Objective, minimizer: Minuit, with_gradient: bool) -> None:
        self.obj = obj
        self.minimizer = minimizer
        self.with_gradient = with_gradient
        self.fitting = True  # a parameter on a limit stops MIGRAD (AtLimit) only during the fit
        self._caller: weakref.ref | None = None

    def _for_minuit(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = self.obj.clip(x)
        now = self._caller() if self._caller is not None else None
        fixed = np.array(now.fixed) if now is not None else np.zeros(len(x), bool)
        hessian = minuit2.minuit_hessian(self.obj.hessian(x), self.obj.gradient(x), x, self.obj.lower, self.obj.upper,
                                          fixed, fitting=self.fitting)
        return hessian, fixed

    def hessian(self, x: np.ndarray) -> np.ndarray:
        return minuit2.layout(*self._for_minuit(x))

    def g2(self, x: np.ndarray) -> np.ndarray:
        return np.diag(self._for_minuit(x)[0]).copy()

    def make(self, start: np.ndarray, with_hessian: bool) -> FitMinuit:
        """A FitMinuit on these callbacks, from ``start``, with the minimizer's settings."""
        # With a Hessian, MIGRAD's seed falls back to g2 (the diagonal) where the Hessian at
        # the start is not positive definite; iminuit 2.33 then calls a g2 of None ("'NoneType'
        # object is not callable", seen with amplitude models started far from the minimum).
        # g2 is the Hessian's diagonal; iminuit warns that the Hessian overrides it, as wanted.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="hessian overrides g2", category=iminuit.util.IMinuitWarning)
            # The objective's own methods: no extra Python frame on Minuit's hot path.
            m = FitMinuit(self.obj.value, start, grad=self.obj.gradient if self.with_gradient else False,
                          hessian=self.hessian if with_hessian else False, g2=self.g2 if with_hessian else False,
                          name=self.obj.names)
        m.errordef = self.obj.errordef
        m.limits = list(zip(self.obj.lower, self.obj.upper, strict=True))
        m.tol = self.minimizer.tol
        m.strategy = self.minimizer.strategy
        self._caller = weakref.ref(m)
        return m


class Scipy:
    r"""Minimize a zcache loss with ``scipy.optimize.minimize``, within the parameters' limits.

    The default, ``trust-constr``, is a bounded trust-region method fed with zcache's exact
    gradient and Hessian (one traced call each per step); a trial step into a region where
    the loss is not finite is rejected and the region shrunk. Parameters are scaled to
    their approximate errors at the start. Errors and covariance come from zcache's
    Hessian at the minimum, :math:`C = 2\,\mathrm{errordef}\,H^{-1}`.

    Parameters
    ----------
    method : str
        A scipy method that accepts bounds and a gradient (trust-constr, L-BFGS-B, TNC, SLSQP).
    tol : float, optional
        scipy's ``tol``.
    hesse : bool
        Compute errors and covariance from the Hessian.
    precompute : bool
        As for :class:`Minuit`.
    weightcorr : {"asymptotic", "sumw2", None}
        As for :class:`Minuit`: the error correction of a fit to weighted events.

    Raises
    ------
    ValueError
        An unknown ``weightcorr``.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.minimize import Scipy
    >>> mu = zcache.Parameter("mu_sp", 0.5, lower=-2.0, upper=2.0)
    >>> x = np.random.default_rng(2).normal(0.0, 1.0, 1000)
    >>> result = Scipy().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x)))
    >>> result.valid, bool(abs(result.values["mu_sp"] - x.mean()) < 1e-4), round(result.errors["mu_sp"], 3)
    (True, True, 0.032)
    """

    def __init__(self, method: str = "trust-constr", tol: float | None = 1e-8, hesse: bool = True, precompute: bool = True,
                 weightcorr: str | None = "asymptotic"):
        if weightcorr not in WEIGHT_CORRECTIONS:
            raise ValueError(f"weightcorr must be one of {WEIGHT_CORRECTIONS}, got {weightcorr!r}.")
        self.weightcorr = weightcorr
        self.method = method
        self.tol = tol
        self.hesse = bool(hesse)
        self.precompute = bool(precompute)

    def __repr__(self) -> str:
        return f"Scipy(method={self.method!r}, tol={self.tol})"

    def minimize(self, loss: BaseLoss, params: Sequence[Parameter] | None = None) -> FitResult:
        """Minimize ``loss`` over ``params``, updating them in place.

        Parameters
        ----------
        loss : zcache.loss.BaseLoss
            The loss.
        params : sequence of Parameter, optional
            The parameters to fit; default ``loss.params`` (the floating ones now).

        Returns
        -------
        FitResult
            ``minuit`` is scipy's ``OptimizeResult``.

        Raises
        ------
        FitError
            Nothing to fit, duplicate parameter names, or a non-finite start.
        """
        import scipy.optimize

        start = time.perf_counter()
        obj = _objective(loss, params, self.precompute, keep_floating=not get_autograd_mode(), who="Scipy")
        x0 = obj.start
        obj.value(x0)  # the offset
        # Work in units of the parameters' approximate errors, 1/sqrt(H_ii) at the start: a
        # quasi-Newton first step of "minus the gradient" is then of order one sigma, not a
        # jump to the limits.
        diag = np.diag(obj.hessian(x0))
        scale = np.where(np.isfinite(diag) & (diag > 0), 1.0 / np.sqrt(np.abs(diag)), 1.0)
        # ... and divide the loss by the start's scaled gradient norm: L-BFGS-B's first step is
        # minus the gradient, which then has length one sigma at most.
        norm = max(1.0, float(np.linalg.norm(obj.gradient(x0) * scale)))
        ngrad, nhessian = 1, 1

        def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
            nonlocal ngrad
            ngrad += 1
            value, grad = obj.value_gradient(x0 + scale * z)
            value, grad = value / norm, grad * scale / norm
            if not (np.isfinite(value) and np.isfinite(grad).all()):
                # A trial step into a region where the model vanishes at some event: report a
                # huge finite value, so that the line search backtracks instead of stopping.
                return _HUGE, np.zeros_like(grad)
            return value, grad

        def hess(z: np.ndarray) -> np.ndarray:
            nonlocal nhessian
            nhessian += 1
            h = obj.hessian(x0 + scale * z) * np.outer(scale, scale) / norm
            return h if np.isfinite(h).all() else np.eye(len(scale))

        lo_z, hi_z = (obj.lower - x0) / scale, (obj.upper - x0) / scale
        bounds = list(zip(np.where(np.isfinite(lo_z), lo_z, None), np.where(np.isfinite(hi_z), hi_z, None), strict=True))
        extra = {"hess": hess} if self.method in _USES_HESSIAN else {}
        res = scipy.optimize.minimize(fun, np.zeros_like(x0), jac=True, bounds=bounds, method=self.method, tol=self.tol,
                                      **extra)
        best = obj.clip(x0 + scale * np.asarray(res.x, dtype=float))
        obj.finish(best)
        covariance, valid = None, bool(res.success)
        if self.hesse:
            nhessian += 1
            covariance = obj.covariance_at(best)
            valid = valid and covariance is not None  # not positive definite: no minimum with finite errors
        grad = obj.gradient(best)
        edm = float(0.5 * grad @ (covariance / (2.0 * obj.errordef)) @ grad) if covariance is not None else float("nan")
        result = _result(obj, best, covariance, self.weightcorr, valid=valid, fmin=float(res.fun) * norm, edm=edm,
                         calls=(int(res.nfev), ngrad, nhessian), start=start)
        result._minuit = res
        result.path = "scipy"
        return result


class Minuit:
    r"""Minimize a zcache loss with iminuit (MIGRAD, then HESSE), by default in one compiled program first.

    Parameters
    ----------
    tol : float
        Minuit's EDM tolerance (iminuit's ``tol``).
    strategy : int
        Minuit strategy 0, 1 or 2.
    use_gradient : bool
        Pass zcache's gradient to Minuit (``False``: Minuit's own).
    hesse : bool
        Errors and covariance after a valid fit: ``2 errordef H^-1``, ``H`` the exact Hessian in the
        parameters themselves at the minimum, also next to a limit (MIGRAD's own covariance is a
        variable-metric estimate; see ``FitResult.errors``).
    precompute : bool
        Apply :func:`zcache.precompute` for the fitted parameters (once per loss and setting; ``False``
        keeps a manual ``precompute`` of yours).
    maxfcn : int, optional
        The most loss calls of one fit, counted as iminuit's ``ncall`` (MIGRAD may end a few past it;
        the compiled fit never does; a fallback or restart takes what is left). A fit that reaches it
        is not valid. ``None``: Minuit's default (up to 500 BFGS steps compiled).
    weightcorr : {"asymptotic", "sumw2", None}
        The error correction of a fit to weighted events, as RooFit's ``AsymptoticError`` /
        ``SumW2Error``: ``"asymptotic"`` (default; Langenbruch, EPJC 82 (2022) 393),
        :math:`H^{-1} D H^{-1}` with :math:`D = \sum_i w_i^2 \nabla\ell_i\nabla\ell_i^T`; ``"sumw2"``,
        :math:`H^{-1} H_{w^2} H^{-1}`; None, the plain inverse Hessian (wrong for weights other than
        1). Ignored for unweighted data or weights all 1; ``result.minuit`` stays uncorrected.
    compiled : bool
        Run the whole fit in one compiled program first (default) where zcache's gradient is in use
        and the loss is traced in this process (not a loss with ``evaluates_in_parts``): BFGS with
        limits to MIGRAD's EDM bound, HESSE's Hessian by forward differences of exact gradients and a
        last Newton step (``zcache._fitting.compiled_fit``), traced once per loss and fitted set. A fit
        it cannot take to a valid minimum goes on with MIGRAD from the start (``FitResult.path``,
        ``FitResult.fallback``). ``False``: MIGRAD + HESSE only.
    structured_hessian : bool or "auto"
        How the compiled fit's Hessians are made. ``"auto"`` (default): the exact block the loss offers
        for some fitted parameters (:meth:`zcache.loss.BaseLoss.structured_hessian_block`: a bridged
        amplitude model's couplings with line shapes floating) and differences along the others;
        ``True``: the loss's whole structured Hessian where offered
        (:meth:`zcache.loss.BaseLoss.structured_hessian`), whose first fit costs more and later fits
        less (it pays in toy studies and scans: ``design/decisions/0003-compiled-fit.md``);
        ``False``: differences along every parameter.
    tiered : bool
        The tiered start of the compiled fit (the default): the first two fits of a loss and fitted set
        are MIGRAD + HESSE on traced value + gradient (Hessians by differences of exact gradients,
        ``FitResult.path == "migrad"``); the second has another thread build the compiled program meanwhile,
        and every later fit of that loss and set is compiled (waiting for a build still running). A script
        that fits a loss once builds no program. Which tier serves a fit depends on the fits before it, never
        on timing; the tiers agree within the fit's tolerance, not to the last bit (``zcache._fitting.tiers``,
        :func:`wait_for_builds`; inside :func:`many_fits`, as in zcache's toy studies and scans, every fit
        is compiled). ``False``: every fit compiled, the first tracing in the foreground. No
        effect with ``compiled=False`` or where XLA compiles the loss (:func:`zcache.set_jit_mode`): there
        every fit is compiled.

    Raises
    ------
    ValueError
        ``strategy`` not 0, 1 or 2, ``tol`` not positive, an unknown ``weightcorr``,
        ``structured_hessian`` not True, False or "auto", or ``maxfcn`` not a whole number >= 1.
    """

    def __init__(
        self,
        tol: float = 0.1,
        strategy: int = 1,
        use_gradient: bool = True,
        hesse: bool = True,
        precompute: bool = True,
        maxfcn: int | None = None,
        weightcorr: str | None = "asymptotic",
        compiled: bool = True,
        structured_hessian: bool | str = "auto",
        tiered: bool = True,
    ):
        if weightcorr not in WEIGHT_CORRECTIONS:
            raise ValueError(f"weightcorr must be one of {WEIGHT_CORRECTIONS}, got {weightcorr!r}.")
        if strategy not in (0, 1, 2):
            raise ValueError(f"strategy must be 0, 1 or 2, got {strategy!r}.")
        if not tol > 0:
            raise ValueError(f"tol must be positive, got {tol!r}.")
        if structured_hessian not in (True, False, "auto"):
            raise ValueError(f"structured_hessian must be True, False or 'auto', got {structured_hessian!r}.")
        if maxfcn is not None and (isinstance(maxfcn, bool) or not isinstance(maxfcn, (int, np.integer, float))
                                   or maxfcn != int(maxfcn) or maxfcn < 1):
            raise ValueError(f"maxfcn must be a whole number of calls >= 1 (or None: Minuit's default), got {maxfcn!r}.")
        self.tol = float(tol)
        self.strategy = strategy
        self.use_gradient = bool(use_gradient)
        self.hesse = bool(hesse)
        self.precompute = bool(precompute)
        self.maxfcn = None if maxfcn is None else int(maxfcn)
        self.weightcorr = weightcorr
        self.compiled = bool(compiled)
        self.structured_hessian = structured_hessian if structured_hessian == "auto" else bool(structured_hessian)
        self.tiered = bool(tiered)

    def __repr__(self) -> str:
        return (f"Minuit(tol={self.tol}, strategy={self.strategy}, use_gradient={self.use_gradient}, "
                f"compiled={self.compiled}, tiered={self.tiered})")

    def minimize(self, loss: BaseLoss, params: Sequence[Parameter] | None = None) -> FitResult:
        """Minimize ``loss`` over ``params``, updating them in place.

        Parameters
        ----------
        loss : zcache.loss.BaseLoss
            The loss.
        params : sequence of Parameter, optional
            The parameters to fit; default ``loss.params`` (the floating ones now).

        Returns
        -------
        FitResult
            With a :class:`zcache.minimize.FitMinuit` as ``minuit``, for MINOS and profiles.

        Raises
        ------
        FitError
            Nothing to fit, duplicate parameter names, or a non-finite start.
        """
        start = time.perf_counter()
        numerical = not self.use_gradient or not get_autograd_mode()
        # MIGRAD's first call is at the start and sets the objective's offset (one call fewer per fit).
        obj = _objective(loss, params, self.precompute, keep_floating=numerical, who="Minuit")
        fallback, spent = None, 0
        if self.compiled and not numerical and traces("loss") and obj.traces_whole:
            fit = CompiledFit.of(obj.loss, obj.params)  # the loss's own program, kept per loss and parameters
            setting = (compiles("loss"), self.structured_hessian)
            chosen = self._tier(fit, setting)
            if chosen != "compiled":
                # the cheap tier: no program but value + gradient's (the Hessians by its differences); the
                # second such fit has the compiled program built on another thread meanwhile, for the next
                obj.exact_hessian = False
                if chosen == "cheap+build":
                    tiers.start_build(fit, setting, functools.partial(fit.builder, obj.start, jit=setting[0],
                                                                      structured_hessian=setting[1]))
                return self._migrad_result(obj, start, None, 0)
            result, fallback, spent = self._try_compiled(obj, fit, start)
            if result is not None:
                return result
        return self._migrad_result(obj, start, fallback, spent)

    def _tier(self, fit: CompiledFit, setting: tuple[bool, bool | str]) -> str:
        """The tier that serves this fit: ``"cheap"``, ``"cheap+build"`` or ``"compiled"`` (``zcache._fitting.tiers``)."""
        if fit.refused is not None:
            return "compiled"  # which falls back to MIGRAD, saying why
        if self.maxfcn is not None and self.maxfcn - fit.fixed_calls(self.structured_hessian) < 1:
            return "compiled"  # no BFGS step left: MIGRAD fits it, nothing to build
        # a program traced already serves a tiered fit too; a build in flight is waited for. Under XLA the
        # cheap tier would compile value + gradient as well as the program's (not measured yet): every fit
        # stays compiled there.
        tiered = self.tiered and not tiers.in_many_fits() and not setting[0] and not fit.traced(*setting)
        return tiers.tier(fit, setting, tiered=tiered)

    def _try_compiled(self, obj: Objective, fit: CompiledFit, start: float) -> tuple[FitResult | None, str | None, int]:
        """The compiled fit's result, or None with why it falls back and the calls it spent."""
        outcome = self._compiled(obj, fit)
        if outcome is not None and outcome.reason is None:
            return self._compiled_result(obj, outcome, start), None, 0
        if outcome is not None and self.maxfcn is not None and outcome.nfcn >= self.maxfcn - 1:
            # BFGS used every step the budget left it (fixed_calls reserves one for a flat direction's
            # check): the compiled fit's last point, not valid, as a MIGRAD at its call limit
            result = self._compiled_result(obj, outcome, start, valid=False)
            result.fallback = f"compiled fit: {outcome.reason}; the call limit maxfcn={self.maxfcn} is reached"
            return result, None, 0
        why = outcome.reason if outcome is not None else (
            f"refused ({fit.refused})" if fit.refused is not None else f"maxfcn={self.maxfcn} leaves it no BFGS step")
        return None, f"compiled fit: {why}", 0 if outcome is None else outcome.nfcn

    def _migrad_result(self, obj: Objective, start: float, fallback: str | None, spent: int) -> FitResult:
        """MIGRAD + HESSE from the start, after ``spent`` calls of a compiled attempt (``fallback`` says why)."""
        # With zcache's gradient, zcache's Hessian too: Minuit seeds MIGRAD and runs HESSE
        # with one call each instead of O(n^2) function calls.
        fcn = _MinuitFunction(obj, self, with_gradient=self.use_gradient)
        # nfcn, ngrad, nhessian of a compiled attempt (value + gradient each) and a MIGRAD stopped at a limit
        calls = np.array([spent, spent, 0], dtype=int)
        # MIGRAD asks for the gradient only at points whose value it has just had (the start, and
        # the point each line search accepts), and HESSE for the Hessian MIGRAD has just computed
        # at the minimum: the objective's memo serves them (measured at 50k events: 10 value and 6
        # gradient calls per fit, every gradient at a point already seen). Only during the fit:
        # MINOS and profiles, which may run on other data, never read a kept number.
        with obj.remembering() if self.use_gradient else contextlib.nullcontext():
            m = fcn.make(obj.start, with_hessian=self.use_gradient)
            try:
                self._migrad_hesse(m, self._left(int(calls[0])))
            except minuit2.AtLimit as stop:
                # A fitted parameter reached a limit, where Minuit2 cannot use the exact Hessian (its
                # bound transform has zero slope there): MIGRAD goes on from that point without it,
                # computing second derivatives itself in its internal coordinates, as iminuit does
                # on a plain function.
                calls += [m.nfcn, m.ngrad, m.nhessian]
                m = fcn.make(stop.x, with_hessian=False)
                self._migrad_hesse(m, self._left(int(calls[0])))
            best = obj.clip(np.array(m.values))
            # The errors: the curvature of the loss in the parameters themselves at the minimum,
            # 2 errordef H^-1 (one definition for serial and batched fits, limits or not; see
            # FitResult.errors). Not Minuit's covariance: near a limit it maps the errors through
            # its bound transform, which depends on where MIGRAD stopped (a yield at 0.56 above its
            # limit 0: 12.7 or 11.5 where the curvature gives 5.33).
            covariance = None
            if self.hesse and m.valid:
                covariance = obj.covariance_at(best)
                if covariance is None and m.covariance is not None:
                    # Not positive definite: possible only with a parameter on a limit the loss
                    # falls beyond (sigma of a spike at one event, say); no curvature error exists
                    # there, and Minuit's HESSE through its bound transform is what remains.
                    covariance = np.array(m.covariance)
        obj.finish(best)
        fcn.fitting = False
        result = _result(obj, best, covariance, self.weightcorr, valid=bool(m.valid), fmin=float(m.fval),
                         edm=float(m.fmin.edm), calls=tuple(int(c) for c in calls + [m.nfcn, m.ngrad, m.nhessian]),
                         start=start)
        result.fallback = fallback
        result.made_posdef = bool(m.fmin is not None and m.fmin.has_made_posdef_covar)
        # From now on every evaluating method of m puts this state back and restores afterwards.
        state = obj.snapshot(float(m.fval))
        result._state, result._minuit = state, m
        if m.hessian is None or minuit2.hessian_handling()[1]:
            m._zcache_state = state
        else:
            # MINOS and profiles fix parameters inside Minuit2, where this Minuit's Hessian would be
            # read at the wrong indices (minuit2.hessian_handling): the Minuit they use is one
            # without it, created when first asked for by a MIGRAD from this minimum.
            errors = np.array([result.errors[name] for name in obj.names])
            result._make_minuit = functools.partial(self._minuit_after, fcn, best, errors, state)
        return result

    def _compiled(self, obj: Objective, fit: CompiledFit) -> CompiledOutcome | None:
        """The compiled fit ``fit`` of ``obj`` (None where the loss cannot be traced that way: refused once)."""
        if fit.refused is not None:
            return None
        maxiter = 500
        if self.maxfcn is not None:  # the calls outside BFGS's steps come out of the same budget
            maxiter = self.maxfcn - fit.fixed_calls(self.structured_hessian)
            if maxiter < 1:  # not even one step: MIGRAD gets the whole budget
                return None
        try:
            # MIGRAD's stopping rule: EDM < 0.002 tol errordef.
            outcome = fit.run(obj.start, edm_max=0.002 * self.tol * obj.errordef, maxiter=maxiter,
                              jit=compiles("loss"), structured_hessian=self.structured_hessian)
        except tiers.REFUSING as err:
            # Not every loss traces with its parameters replaced by a vector (a model reading a
            # Variable behind zcache's back, say): MIGRAD fits it, and this loss is not tried again.
            fit.refused = tiers.refusal(err)
            return None
        # The loss at the start is this minimization's offset, as MIGRAD's first call would set it.
        obj.offset = outcome.fstart
        return outcome

    def _compiled_result(self, obj: Objective, outcome: CompiledOutcome, start: float, valid: bool = True) -> FitResult:
        """The FitResult of a compiled fit (``result.minuit`` made when asked for): converged, or at the call limit."""
        best = obj.clip(outcome.x)
        obj.finish(best)
        covariance = obj.covariance(outcome.hessian) if self.hesse else None
        fval = outcome.fmin - obj.offset
        result = _result(obj, best, covariance, self.weightcorr, valid=valid, fmin=fval, edm=outcome.edm,
                         calls=(outcome.nfcn, outcome.nfcn, 2), start=start)
        result.path = "compiled"
        result.made_posdef = outcome.made_posdef
        state = obj.snapshot(fval)
        result._state = state
        fcn = _MinuitFunction(obj, self, with_gradient=self.use_gradient)
        fcn.fitting = False
        errors = np.sqrt(np.diag(covariance)) if covariance is not None else np.full(len(best), np.nan)
        result._make_minuit = functools.partial(self._minuit_after, fcn, best, errors, state)
        return result

    def _left(self, spent: int) -> int | None:
        """MIGRAD's ``ncall``: what is left of ``maxfcn`` after ``spent`` calls (at least 1), None without a limit."""
        return None if self.maxfcn is None else max(1, self.maxfcn - spent)

    def _migrad_hesse(self, m: FitMinuit, ncall: int | None = None) -> None:
        m.migrad(ncall=ncall)
        if self.hesse and m.valid:
            # For result.minuit (MINOS, profiles) and the verdict: with zcache's Hessian it is
            # the one MIGRAD computed at its minimum (no call).
            m.hesse()

    def _minuit_after(self, fcn: _MinuitFunction, best: np.ndarray, errors: np.ndarray,
                      state: LossState) -> FitMinuit:
        m = fcn.make(best, with_hessian=False)
        if np.all(np.isfinite(errors) & (errors > 0)):
            m.errors = errors  # MIGRAD's first steps: the fit's errors
        # From the fit's minimum, to 1 % of its EDM goal: MINOS measures from this minimum, so
        # it should not be the worse of the two (a few calls more, once per result).
        m.tol = 0.01 * self.tol
        with state.active():
            self._migrad_hesse(m, self.maxfcn)
        m.tol = self.tol
        state.fval = float(m.fval)  # what profiles are relative to: this Minuit's minimum
        m._zcache_state = state
        return m
