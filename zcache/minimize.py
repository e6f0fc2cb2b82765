"""Minimizers: iminuit's MIGRAD/HESSE on zcache losses.

:class:`Minuit` drives ``iminuit.Minuit`` with a zcache loss. Each function call
sets the floating parameters and evaluates the loss in one traced call
(:meth:`zcache.loss.BaseLoss.value_at`); the gradient is zcache's (automatic
through caches, or numerical, following :func:`zcache.set_autograd_mode`) or, with
``use_gradient=False``, Minuit's own finite differences.

Each minimization owns its offset (the loss at the start, subtracted so that Minuit
works on numbers of order one), and its :class:`FitResult` remembers the state of
the loss at the minimum: every parameter's value, fixed ones included, and the
data. :meth:`FitResult.minos`, :meth:`FitResult.profile` and every method of
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

import functools
import html
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import iminuit
import numpy as np
import tensorflow as tf

from ._inputs import backing_variable
from ._mode import get_autograd_mode
from ._parameter import Parameter, set_values
from ._precompute import PrecomputeReport, ensure_precomputed
from ._trace import forbid_in_trace
from .exceptions import FitError
from .loss import BaseLoss

__all__ = ["Minuit", "Scipy", "FitResult", "FitMinuit", "MinosError", "corrected_covariance", "WEIGHT_CORRECTIONS"]

#: The error corrections of weighted fits (``Minuit(weightcorr=...)``).
WEIGHT_CORRECTIONS = ("asymptotic", "sumw2", None)


class MinosError(NamedTuple):
    """One MINOS interval, as distances from the best value.

    Attributes
    ----------
    lower : float
        The lower error (<= 0): the interval starts at ``value + lower``.
    upper : float
        The upper error (>= 0): the interval ends at ``value + upper``.
    valid : bool
        MINOS found both crossings (no limit, call limit or new minimum in the way).
    """

    lower: float
    upper: float
    valid: bool


class _FitState:
    """The state of a loss at the end of a fit: every parameter's value and every dataset.

    ``with state.active():`` puts it back for the duration (so that MINOS or a profile of
    this fit sees the fit's fixed parameters and data, whatever happened since) and then
    restores what was there before, also when the body raises.
    """

    def __init__(self, loss: BaseLoss, params: Sequence[Parameter], offset: float, fval: float) -> None:
        self.loss = loss
        # All of the loss's parameters, fixed ones included: a later fit may have moved a fixed
        # parameter or changed the floating set; plus explicitly fitted ones outside the loss.
        self.params = tuple({id(p): p for p in (*loss.get_params(floating=None), *params)}.values())
        self.values = np.array([float(p) for p in self.params])
        # read_value() holds the buffer (no copy); a later set_data assigns a new one.
        self.data = [(d, d.variable.read_value()) for d in loss.datasets()]
        self.offset = offset  # the minimization's own offset (what its Minuit's fval is relative to)
        self.fval = fval  # Minuit's fval at the minimum (relative to offset)
        self._depth = 0

    @contextmanager
    def active(self) -> Iterator[None]:
        if self._depth:  # nested (draw_mnprofile calls mnprofile): the state is already in place
            yield
            return
        forbid_in_trace("FitResult.minos / profile")
        saved = np.array([float(p) for p in self.params])
        swapped = []
        for data, array in self.data:
            now = data.variable.read_value()
            if now.shape != array.shape or not bool(tf.reduce_all(tf.equal(now, array))):
                swapped.append((data, now))
        self._depth += 1
        try:
            for data, array in self.data:
                if any(data is d for d, _ in swapped):
                    data.set_data(array)
            set_values(self.params, self.values)
            yield
        finally:
            self._depth -= 1
            # set_values writes only what differs, so restoring invalidates only what moved.
            set_values(self.params, saved)
            for data, now in swapped:
                data.set_data(now)


# iminuit methods that call the function (or its gradient / Hessian), directly or not.
_EVALUATING = ("migrad", "hesse", "minos", "mnprofile", "profile", "contour", "mncontour", "mnmatrix", "scan",
               "simplex", "scipy", "draw_profile", "draw_mnprofile", "draw_contour", "draw_mncontour",
               "draw_mnmatrix", "interactive", "visualize")


class FitMinuit(iminuit.Minuit):
    """The ``iminuit.Minuit`` of a zcache fit (``FitResult.minuit``), safe to call after the fit.

    Every method that evaluates the loss (``migrad``, ``hesse``, ``minos``, ``mnprofile``,
    ``profile``, ``contour``, ``mncontour``, ``scan``, ``simplex``, ``scipy`` and the ``draw_*``
    methods) runs with the loss in the state of this fit (all parameter values, fixed ones
    included, and its data) and afterwards restores every parameter of the loss (and the
    data) to what it was before the call, also when the method raises. Results (``values``,
    ``merrors``, ...) stay on the Minuit object; the zcache Parameters never keep the last
    point Minuit tried. (Calling ``minuit.fcn`` by hand is not covered: it sets parameters.)
    """

    __slots__ = ("_zcache_state", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._zcache_state: _FitState | None = None  # None while the fit itself runs


def _restoring(name: str) -> Callable[..., Any]:
    method = getattr(iminuit.Minuit, name)

    @functools.wraps(method)
    def wrapper(self: FitMinuit, *args: Any, **kwargs: Any) -> Any:
        state = getattr(self, "_zcache_state", None)  # unset inside iminuit's __init__
        if state is None:
            return method(self, *args, **kwargs)
        with state.active():
            return method(self, *args, **kwargs)

    return wrapper


for _name in _EVALUATING:
    if hasattr(iminuit.Minuit, _name):  # older iminuit lacks some
        setattr(FitMinuit, _name, _restoring(_name))
del _name


@dataclass
class FitResult:
    """The outcome of a minimization; the parameters already hold ``values``.

    :meth:`minos` and :meth:`profile` evaluate the loss in the state it had at this fit
    (parameters and data) and leave every parameter as it was before the call.

    A result pickles (and copies with ``copy.deepcopy``) as numbers: ``values``, ``errors``,
    ``valid``, ``fmin``, ``edm``, ``nfcn``, ``ngrad``, ``nhessian``, ``covariance``, ``time``,
    :attr:`names` and the MINOS intervals computed so far (:attr:`minos_errors`) survive. The
    live objects do not: after unpickling ``params``, ``minuit`` and ``precompute`` are None,
    and :meth:`minos` and :meth:`profile` raise :class:`~zcache.exceptions.FitError` (fit again
    to get them back). :meth:`to_dict` and :meth:`to_pandas` give the same numbers as plain
    Python objects and as a table.

    Attributes
    ----------
    values : dict of str to float
        Parameter name -> best value.
    errors : dict of str to float
        Parameter name -> HESSE error (NaN without HESSE): ``sqrt(diag(covariance))``, the
        curvature of the loss in the parameters themselves at the minimum. Limits do not enter:
        next to a limit this is the local curvature, not Minuit's error mapped through its bound
        transform (which depends on where MIGRAD stopped); serial fits, batched fits and
        :func:`zcache.toys.run_toys` all report this one. For a parameter at or near a limit use
        MINOS (:meth:`minos`) for an interval that respects it. Only where the Hessian is not
        positive definite (a parameter on a limit the loss keeps falling beyond) are these
        Minuit's HESSE errors through its bound transform. With a weight correction they are the
        corrected covariance's.
    valid : bool
        Minuit's verdict (converged, EDM below tolerance, covariance fine).
    fmin : float
        The loss at the minimum (without offset).
    edm : float
        Estimated distance to the minimum.
    nfcn : int
        Calls of the loss.
    ngrad : int
        Calls of its gradient.
    nhessian : int
        Calls of its Hessian.
    covariance : ndarray or None
        The covariance matrix (None without HESSE): the inverse Hessian in the parameters
        themselves, ``2 errordef H^-1`` (weight-corrected if ``weightcorr``).
    params : list of Parameter or None
        The fitted parameters, in order (None in an unpickled result: see :attr:`names`).
    time : float
        Wall time of the minimization in seconds.
    minuit : FitMinuit or scipy.optimize.OptimizeResult or None
        A :class:`FitMinuit` (an ``iminuit.Minuit`` whose evaluating methods restore the
        parameters), for MINOS, profiles, plots (for :class:`Scipy`: scipy's ``OptimizeResult``;
        None in an unpickled result).
    precompute : zcache.types.PrecomputeReport or None
        The report the fit ran with (None without precompute, and in an unpickled result).
    weightcorr : str or None
        How the errors of a fit to weighted data were corrected: ``"asymptotic"`` or
        ``"sumw2"`` (see :class:`Minuit`); None for unweighted data or no correction.

    Examples
    --------
    >>> import pickle, numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_pickle", 0.2, lower=-2.0, upper=2.0)
    >>> x = np.random.default_rng(3).normal(0.0, 1.0, 1000)
    >>> result = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x)))
    >>> copy = pickle.loads(pickle.dumps(result))
    >>> copy.values == result.values, copy.names, copy.minuit is None
    (True, ['mu_pickle'], True)
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
    precompute: PrecomputeReport | None = field(repr=False, default=None)
    weightcorr: str | None = None
    _state: _FitState | None = field(init=False, repr=False, default=None, compare=False)
    # The minimizer's object (see minuit), set by the minimizer after construction.
    _minuit: Any = field(init=False, repr=False, default=None, compare=False)
    # Builds the FitMinuit for after the fit when first asked for (see Minuit.minimize).
    _make_minuit: Callable[[], Any] | None = field(init=False, repr=False, default=None, compare=False)
    # Set only in an unpickled result: what it was saved with, in place of the live objects.
    _names: list[str] | None = field(init=False, repr=False, default=None, compare=False)
    _minos: dict[str, MinosError] | None = field(init=False, repr=False, default=None, compare=False)
    _minimizer: str | None = field(init=False, repr=False, default=None, compare=False)

    @property
    def minuit(self) -> Any:
        """The minimizer's object: a :class:`FitMinuit` (MINOS, profiles, plots) or scipy's result.

        From :class:`Minuit`, it may be created when first asked for: a MIGRAD from this fit's
        minimum, in this fit's state, without zcache's Hessian (iminuit 2.33's Minuit2 reads a
        user's Hessian at the wrong indices when it fixes a parameter, as MINOS and profiles do).
        """
        if self._make_minuit is not None:
            make, self._make_minuit = self._make_minuit, None
            self._minuit = make()
        return self._minuit

    def _fit_minuit(self, what: str) -> FitMinuit:
        if self._names is not None:
            raise FitError(f"{what} needs the live fit, which a pickled FitResult does not keep (it keeps the "
                           "numbers only); run the fit again.")
        if not isinstance(self.minuit, FitMinuit) or self._state is None:
            raise FitError(f"{what} needs the result of zcache.minimize.Minuit (this one has no Minuit object).")
        return self.minuit

    # -- pickling: numbers only ------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        state.update(params=None, _minuit=None, _make_minuit=None, precompute=None, _state=None, _names=self.names,
                     _minos=self.minos_errors, _minimizer=self.minimizer)
        state["covariance"] = None if self.covariance is None else np.array(self.covariance, dtype=float)
        state["values"], state["errors"] = dict(self.values), dict(self.errors)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def names(self) -> list[str]:
        """The fitted parameters' names, in order (kept by pickling)."""
        if self._names is not None:
            return list(self._names)
        return [p.name for p in self.params] if self.params is not None else list(self.values)

    @property
    def minimizer(self) -> str:
        """``"Minuit"`` or ``"Scipy"``: which minimizer produced the result (kept by pickling)."""
        if self._minimizer is not None:
            return self._minimizer
        return "Minuit" if self._make_minuit is not None or isinstance(self._minuit, iminuit.Minuit) else "Scipy"

    @property
    def minos_errors(self) -> dict[str, MinosError]:
        """The MINOS intervals computed so far (by :meth:`minos` or ``minuit.minos``), by name.

        Kept by pickling; empty when MINOS has not run.
        """
        if self._minos is not None:
            return dict(self._minos)
        if not isinstance(self._minuit, iminuit.Minuit):  # not yet created: no MINOS either
            return {}
        return {str(n): self._interval(n, e) for n, e in self._minuit.merrors.items()}

    def _interval(self, name: str, e: Any) -> MinosError:
        # The interval's ends are points of the loss; Minuit gives them as distances from its own
        # minimum, which for a result.minuit created after the fit is a MIGRAD's from the fit's
        # (within the tolerance): as distances from this result's value, the ends stay the same.
        shift = float(self._minuit.values[name]) - self.values[str(name)] if str(name) in self.values else 0.0
        return MinosError(float(e.lower) + shift, float(e.upper) + shift, bool(e.is_valid))

    def to_dict(self) -> dict[str, Any]:
        """The numbers of the result as plain Python objects (JSON-serializable).

        Returns
        -------
        dict
            ``names``, ``values`` and ``errors`` (name -> float), ``valid``, ``fmin``, ``edm``,
            ``nfcn``, ``ngrad``, ``nhessian``, ``time``, ``minimizer``, ``weightcorr``, ``covariance`` (a list
            of rows in the order of ``names``, or None without HESSE) and ``minos`` (name ->
            ``{"lower", "upper", "valid"}`` for the intervals computed so far).

        Examples
        --------
        >>> import json, numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> from zcache.loss import UnbinnedNLL
        >>> mu = zcache.Parameter("mu_dict", 0.2, lower=-2.0, upper=2.0)
        >>> x = np.random.default_rng(3).normal(0.0, 1.0, 1000)
        >>> d = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))).to_dict()
        >>> d["names"], d["valid"], round(d["errors"]["mu_dict"], 3), len(json.dumps(d)) > 0
        (['mu_dict'], True, 0.032, True)
        """
        return {
            "names": self.names,
            "values": {n: float(v) for n, v in self.values.items()},
            "errors": {n: float(v) for n, v in self.errors.items()},
            "valid": bool(self.valid),
            "fmin": float(self.fmin),
            "edm": float(self.edm),
            "nfcn": int(self.nfcn),
            "ngrad": int(self.ngrad),
            "nhessian": int(self.nhessian),
            "time": float(self.time),
            "minimizer": self.minimizer,
            "weightcorr": self.weightcorr,
            "covariance": None if self.covariance is None else np.asarray(self.covariance, dtype=float).tolist(),
            "minos": {n: {"lower": e.lower, "upper": e.upper, "valid": e.valid} for n, e in self.minos_errors.items()},
        }

    def to_pandas(self) -> Any:
        """The result as a one-row ``pandas.DataFrame`` (needs pandas: ``pip install zcache[pandas]``).

        Returns
        -------
        pandas.DataFrame
            One row; columns ``<name>`` and ``<name>_err`` per parameter (as in
            :class:`zcache.toys.ToyResult`), ``<name>_minos_lower`` / ``<name>_minos_upper`` for
            the MINOS intervals computed so far, then ``fmin``, ``edm``, ``valid``, ``nfcn``,
            ``time``.

        Raises
        ------
        ImportError
            pandas is not installed.

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> from zcache.loss import UnbinnedNLL
        >>> mu = zcache.Parameter("mu_pd", 0.2, lower=-2.0, upper=2.0)
        >>> x = np.random.default_rng(3).normal(0.0, 1.0, 1000)
        >>> df = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))).to_pandas()
        >>> list(df.columns), len(df)
        (['mu_pd', 'mu_pd_err', 'fmin', 'edm', 'valid', 'nfcn', 'time'], 1)
        """
        pd = _pandas("FitResult.to_pandas")
        row: dict[str, Any] = {}
        minos = self.minos_errors
        for n in self.names:
            row[n], row[f"{n}_err"] = float(self.values[n]), float(self.errors[n])
            if n in minos:
                row[f"{n}_minos_lower"], row[f"{n}_minos_upper"] = minos[n].lower, minos[n].upper
        row.update(fmin=float(self.fmin), edm=float(self.edm), valid=bool(self.valid), nfcn=int(self.nfcn),
                   time=float(self.time))
        return pd.DataFrame([row])

    def _check_names(self, names: Sequence[str], what: str) -> None:
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise FitError(f"{what}: parameter names must be strings, got {bad[0]!r}.")
        unknown = [n for n in names if n not in self.values]
        if unknown:
            raise FitError(f"{what}: {unknown} were not fitted; the fitted parameters are {list(self.values)}.")

    def minos(self, *names: str | Sequence[str], cl: float | None = None) -> dict[str, MinosError]:
        """MINOS intervals for ``names`` (default: every fitted parameter).

        Runs ``iminuit.Minuit.minos`` with the loss in the state of this fit (parameter
        values, fixed ones included, and data), whatever was changed or fitted since,
        and restores every parameter (and the data) afterwards, also on error.

        Parameters
        ----------
        *names : str or sequence of str
            Parameter names, given one by one (``minos("a", "b")``) or as one list
            (``minos(["a", "b"])``); none: all fitted parameters.
        cl : float, optional
            Confidence level (``cl >= 1``: number of sigmas); default one sigma.

        Returns
        -------
        dict of str to MinosError
            Name -> ``MinosError(lower, upper, valid)``, the distances of the interval's ends
            from this result's best value (``lower <= 0 <= upper``). Also in
            ``self.minuit.merrors``, as distances from that Minuit's minimum (a MIGRAD from this
            fit's, within its tolerance).

        Raises
        ------
        FitError
            Not a Minuit result, an unknown name, a name that is not a string, or a minimum
            MINOS cannot start from.

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> from zcache.loss import UnbinnedNLL
        >>> mu = zcache.Parameter("mu_minos", 0.2, lower=-2.0, upper=2.0)
        >>> x = np.random.default_rng(3).normal(0.0, 1.0, 1000)
        >>> result = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x)))
        >>> lower, upper, valid = result.minos()["mu_minos"]
        >>> valid, round(-lower, 3), round(upper, 3)          # 1 / sqrt(1000)
        (True, 0.032, 0.032)
        >>> float(mu.value()) == result.values["mu_minos"]   # parameters as before
        True
        """
        m = self._fit_minuit("FitResult.minos")
        names = _flat_names(names, f"FitResult.minos{names!r}")
        self._check_names(names, "FitResult.minos")
        try:
            m.minos(*names, cl=cl)
        except RuntimeError as err:  # iminuit: the minimum is not valid
            raise FitError(f"MINOS could not run from this fit's minimum: {err}") from err
        return {n: self._interval(n, m.merrors[n]) for n in (names or m.parameters)}

    def profile(self, name: str, bins: int = 30, bound: float | tuple[float, float] = 2.0, *,
                minimize: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r"""The likelihood profile (or scan) of the loss along one parameter.

        ``minimize=True``: at each point the other fitted parameters are minimized again
        (``iminuit.Minuit.mnprofile``), the profile likelihood; ``False``: they stay at
        their best values (``iminuit.Minuit.profile``), a scan. Either runs with the loss
        in the state of this fit and restores every parameter (and the data) afterwards.

        Parameters
        ----------
        name : str
            The fitted parameter to profile.
        bins : int
            Number of points.
        bound : float or (float, float)
            A number ``n``: the best value :math:`\pm n` HESSE errors; or ``(low, high)``.
            Clipped into the parameter's limits.
        minimize : bool
            Profile (True) or scan (False).

        Returns
        -------
        x : ndarray
            The ``bins`` values of the parameter.
        delta : ndarray
            The loss minus its value at this fit's minimum (:math:`\Delta\mathrm{NLL}`; one
            sigma is 0.5).
        valid : ndarray of bool
            Whether each minimization converged (all True for a scan).

        Raises
        ------
        FitError
            Not a Minuit result, or ``name`` was not fitted.

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> from zcache.loss import UnbinnedNLL
        >>> mu = zcache.Parameter("mu_prof", 0.2, lower=-2.0, upper=2.0)
        >>> x = np.random.default_rng(3).normal(0.0, 1.0, 1000)
        >>> result = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x)))
        >>> grid, delta, valid = result.profile("mu_prof", bins=3, bound=1.0)
        >>> np.round(delta, 2).tolist(), bool(valid.all())   # a parabola: 1/2 at one sigma
        ([0.5, 0.0, 0.5], True)
        >>> float(mu.value()) == result.values["mu_prof"]
        True
        """
        m = self._fit_minuit("FitResult.profile")
        self._check_names([name], "FitResult.profile")
        if int(bins) < 2:
            raise ValueError(f"bins must be >= 2, got {bins!r}.")
        if np.ndim(bound) == 0:
            best, error = self.values[name], self.errors[name]
            if not np.isfinite(error):
                error = float(m.errors[name])  # no HESSE: Minuit's own estimate
            low, high = best - float(bound) * error, best + float(bound) * error
        else:
            low, high = map(float, bound)
        # The fit clips Minuit's points into the limits, so points beyond them would all be
        # the value at the limit: keep the grid inside.
        p = next(q for q in self._state.params if q.name == name)
        low = low if p.lower is None else max(low, p.lower)
        high = high if p.upper is None else min(high, p.upper)
        if minimize:
            x, y, status = m.mnprofile(name, size=int(bins), bound=(low, high))
            valid = np.asarray(status, dtype=bool)
        else:
            x, y = m.profile(name, size=int(bins), bound=(low, high))
            valid = np.ones(len(x), dtype=bool)
        return np.asarray(x, dtype=float), np.asarray(y, dtype=float) - self._state.fval, valid

    def __copy__(self) -> FitResult:
        # A shallow copy keeps the live objects (pickling and deepcopy keep the numbers only).
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        """Per parameter: name, value, error, MINOS lower, MINOS upper (formatted)."""
        minos = self.minos_errors
        rows = []
        for n in self.names:
            e = minos.get(n)
            rows.append((n, f"{self.values[n]:.6g}", f"{self.errors[n]:.3g}",
                         "" if e is None else f"{e.lower:.3g}", "" if e is None else f"{e.upper:+.3g}"))
        return rows

    def __str__(self) -> str:
        head = (f"FitResult ({self.minimizer}): valid={self.valid}  fmin={self.fmin:.6f}  edm={self.edm:.2e}  "
                f"nfcn={self.nfcn}  ngrad={self.ngrad}  nhessian={self.nhessian}  time={self.time:.3f}s")
        rows = self._rows()
        has_minos = any(r[3] for r in rows)
        header = ("parameter", "value", "error", "minos lower", "minos upper")[:5 if has_minos else 3]
        table = [header] + [r[:len(header)] for r in rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        lines = [head]
        for k, r in enumerate(table):
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
            lines.append("  " + "  ".join(cells).rstrip())
            if k == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """An HTML table for Jupyter (as iminuit shows its Minuit objects)."""
        esc = html.escape
        ok = "#c6efce" if self.valid else "#ffc7ce"
        status = (f"<tr><td colspan='5' style='background-color:{ok}; text-align:left'>"
                  f"<b>{esc(self.minimizer)}</b>: {'valid' if self.valid else 'INVALID'} minimum, "
                  f"FCN = {self.fmin:.6g}, EDM = {self.edm:.3g}, nfcn = {self.nfcn}, "
                  f"time = {self.time:.3g} s</td></tr>")
        header = "<tr><th>parameter</th><th>value</th><th>error</th><th>MINOS lower</th><th>MINOS upper</th></tr>"
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in self._rows())
        return f"<table>{status}{header}{body}</table>"


def corrected_covariance(loss: BaseLoss, params: Sequence[Parameter], best: np.ndarray, covariance: np.ndarray,
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

    def terms_at(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        set_values(params, x)
        pairs = loss.weighted_event_terms()
        return (np.concatenate([t.numpy() for t, _ in pairs]), np.concatenate([w.numpy() for _, w in pairs]))

    try:
        columns = []
        for k in range(n):
            up, down = best.copy(), best.copy()
            up[k] = min(best[k] + steps[k], upper[k])
            down[k] = max(best[k] - steps[k], lower[k])
            t_up, weights = terms_at(up)
            t_down, _ = terms_at(down)
            columns.append((t_up - t_down) / (up[k] - down[k]))
    finally:
        set_values(params, best)
    grads = np.stack(columns, axis=1)  # (N, n)
    d = (grads * (weights**2)[:, None]).T @ grads
    if loss.constraints:
        d = d + _constraint_hessian(loss, params)
    return covariance @ d @ covariance / scale**2  # H^-1 D H^-1, with H^-1 = C / scale


def _has_weights(loss: BaseLoss) -> bool:
    """Whether a dataset of ``loss`` has a weight other than 1 (all 1: plain HESSE is right)."""
    return any(d.is_weighted and not np.all(d.weights_data.numpy() == 1.0) for d in loss.datasets())


def _constraint_hessian(loss: BaseLoss, params: tuple[Parameter, ...]) -> np.ndarray:
    """The Hessian of the loss's constraint terms with respect to ``params`` (exact: they are quadratic)."""
    variables = [backing_variable(p) for p in params]
    with tf.GradientTape() as outer:
        outer.watch(variables)
        with tf.GradientTape() as inner:
            inner.watch(variables)
            total = tf.add_n([c.value() for c in loss.constraints])
        grads = inner.gradient(total, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        grads = tf.stack(grads)
    rows = outer.jacobian(grads, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return tf.stack(rows, axis=1).numpy()


def _flat_names(names: tuple[Any, ...], call: str) -> tuple[str, ...]:
    """``("a", "b")`` from ``("a", "b")`` or ``(["a", "b"],)``; a FitError naming the call otherwise."""
    flat: list[Any] = []
    for n in names:
        flat.extend([n] if isinstance(n, str) else (list(n) if isinstance(n, (list, tuple)) else [n]))
    bad = [n for n in flat if not isinstance(n, str)]
    if bad:
        raise FitError(f"{call}: parameter names must be strings (given one by one or as one list), got {bad[0]!r}.")
    return tuple(flat)


def _pandas(what: str) -> Any:
    try:
        import pandas
    except ImportError as err:
        raise ImportError(f"{what} needs pandas, which is not installed: pip install zcache[pandas]") from err
    return pandas


def _clip(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    # Minuit's internal sine transform can land an ulp outside a limit.
    return np.minimum(np.maximum(x, lower), upper)


_HUGE = 1e30
#: Gradients a Minuit fit keeps, of its most recent function calls.
_KEPT_GRADIENTS = 4
_USES_HESSIAN = {"trust-constr", "trust-exact", "trust-krylov", "trust-ncg", "Newton-CG", "dogleg"}



class _AtLimit(Exception):
    """Raised from Minuit's Hessian callback: a fitted parameter sits on a limit (see :func:`_minuit_hessian`)."""

    def __init__(self, x: np.ndarray) -> None:
        super().__init__("a fitted parameter is at a limit")
        self.x = x


def _limit_curvature(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
def _minuit2_hessian_handling() -> tuple[bool, bool]:
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


def _minuit_hessian(hessian: np.ndarray, gradient: np.ndarray | None, x: np.ndarray, lower: np.ndarray,
                    upper: np.ndarray, fixed: np.ndarray, fitting: bool) -> np.ndarray:
    r"""The matrix to hand Minuit2 so that its internal Hessian is the loss's exact one.

    ``hessian`` and ``gradient`` are the loss's in the parameters themselves at ``x``. Adds
    the bound transforms' :math:`g\,c` term (:func:`_limit_curvature`) where Minuit2 leaves
    it out. A free parameter on a limit has no such correction (:math:`x' = 0`): during the
    fit (``fitting``) :class:`_AtLimit` stops MIGRAD there, to finish without a Hessian;
    afterwards (MINOS, profiles) the uncorrected entry is used. External order (see
    :func:`_minuit2_layout`).
    """
    adds_term = _minuit2_hessian_handling()[0]
    out = np.array(hessian, dtype=float)
    if not adds_term and gradient is not None:
        c, at_limit = _limit_curvature(x, lower, upper)
        if fitting and np.any(at_limit & ~fixed):
            raise _AtLimit(x)
        out[np.diag_indices_from(out)] += np.where(fixed, 0.0, gradient * c)
    return out


def _minuit2_layout(hessian: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """``hessian`` (external order) laid out as the installed Minuit2 reads a user's Hessian."""
    if _minuit2_hessian_handling()[1] or not np.any(fixed):
        return hessian
    free = np.flatnonzero(~fixed)  # read at internal indices: the free block first
    laid = np.zeros_like(hessian)
    laid[: len(free), : len(free)] = hessian[np.ix_(free, free)]
    return laid


def _curvature_covariance(hessian: np.ndarray, errordef: float) -> np.ndarray | None:
    """``2 errordef H^-1`` for a positive definite ``H`` (None otherwise): the HESSE errors' definition."""
    try:
        np.linalg.cholesky(hessian)
    except np.linalg.LinAlgError:
        return None
    covariance = 2.0 * errordef * np.linalg.inv(hessian)
    return 0.5 * (covariance + covariance.T)


class _Run:
    """What every minimizer does before its first step: checks, precompute, start, offset."""

    def __init__(self, loss: BaseLoss, params: Sequence[Parameter] | None, precompute: bool,
                 keep_floating: bool, who: str, evaluate_start: bool = True) -> None:
        if not isinstance(loss, BaseLoss):
            raise TypeError(f"{who}.minimize takes a zcache loss, got {loss!r}.")
        self.params = tuple(loss.params if params is None else params)
        if not self.params:
            raise FitError("No floating parameters to fit: set floating=True on some, or pass params=[...].")
        self.names = [p.name for p in self.params]
        if len(set(self.names)) != len(self.names):
            raise FitError(f"Parameter names must be unique for {who}, got {self.names}; rename the duplicates.")
        self.report = ensure_precomputed(loss, self.params, keep_floating=keep_floating) if precompute else None
        self.lower = np.array([-np.inf if p.lower is None else p.lower for p in self.params])
        self.upper = np.array([np.inf if p.upper is None else p.upper for p in self.params])
        x0 = _clip(np.array([float(p) for p in self.params]), self.lower, self.upper)
        # Minuit's sine transform has a zero derivative at a two-sided limit, so a start
        # exactly there yields NaN steps: start a hair inside instead.
        both = np.isfinite(self.lower) & np.isfinite(self.upper)
        hair = 1e-6 * np.where(both, self.upper - self.lower, 0.0)
        self.x0 = np.where(both & (x0 <= self.lower), self.lower + hair,
                           np.where(both & (x0 >= self.upper), self.upper - hair, x0))
        self.start = time.perf_counter()
        # This minimization's own offset: passed to every call, never stored on the loss, so a
        # later fit cannot change what this one's Minuit (MINOS, profiles) sees. A minimizer
        # that evaluates the start itself sets it from its first call (set_offset).
        self.f0: float | None = None
        if evaluate_start:
            self.set_offset(float(loss.value_at(self.x0, self.params, offset=0.0)))

    def set_offset(self, f0: float) -> None:
        """The loss at the start becomes the offset; a non-finite start is refused (FitError)."""
        if not np.isfinite(f0):
            raise FitError(
                f"The loss is {f0} at the starting values {dict(zip(self.names, self.x0, strict=True))}; start "
                "where the model is positive at every event (check widths and limits)."
            )
        self.f0 = f0


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

        run = _Run(loss, params, self.precompute, keep_floating=not get_autograd_mode(), who="Scipy")
        params, lower, upper, x0 = run.params, run.lower, run.upper, run.x0
        # Work in units of the parameters' approximate errors, 1/sqrt(H_ii) at the start: a
        # quasi-Newton first step of "minus the gradient" is then of order one sigma, not a
        # jump to the limits.
        diag = np.diag(loss.hessian_at(x0, params).numpy())
        scale = np.where(np.isfinite(diag) & (diag > 0), 1.0 / np.sqrt(np.abs(diag)), 1.0)
        # ... and divide the loss by the start's scaled gradient norm: L-BFGS-B's first step is
        # minus the gradient, which then has length one sigma at most.
        f0 = run.f0
        norm = max(1.0, float(np.linalg.norm(loss.value_gradient_at(x0, params, offset=f0)[1].numpy() * scale)))
        ngrad, nhessian = 1, 1

        def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
            nonlocal ngrad
            ngrad += 1
            value, grad = loss.value_gradient_at(_clip(x0 + scale * z, lower, upper), params, offset=f0)
            value, grad = float(value) / norm, grad.numpy() * scale / norm
            if not (np.isfinite(value) and np.isfinite(grad).all()):
                # A trial step into a region where the model vanishes at some event: report a
                # huge finite value, so that the line search backtracks instead of stopping.
                return _HUGE, np.zeros_like(grad)
            return value, grad

        lo_z, hi_z = (lower - x0) / scale, (upper - x0) / scale
        bounds = list(zip(np.where(np.isfinite(lo_z), lo_z, None), np.where(np.isfinite(hi_z), hi_z, None), strict=True))
        def hess(z: np.ndarray) -> np.ndarray:
            nonlocal nhessian
            nhessian += 1
            h = loss.hessian_at(_clip(x0 + scale * z, lower, upper), params).numpy() * np.outer(scale, scale) / norm
            return h if np.isfinite(h).all() else np.eye(len(scale))

        extra = {"hess": hess} if self.method in _USES_HESSIAN else {}
        res = scipy.optimize.minimize(fun, np.zeros_like(x0), jac=True, bounds=bounds, method=self.method, tol=self.tol,
                                      **extra)
        best = _clip(x0 + scale * np.asarray(res.x, dtype=float), lower, upper)
        set_values(params, best)
        covariance, valid = None, bool(res.success)
        if self.hesse:
            hess = loss.hessian_at(best, params).numpy()
            nhessian += 1
            try:
                np.linalg.cholesky(hess)  # positive definite: a minimum with finite errors
                covariance = 2.0 * loss.errordef * np.linalg.inv(hess)
            except np.linalg.LinAlgError:
                valid = False
        grad = loss.value_gradient_at(best, params, offset=f0)[1].numpy()
        edm = float(0.5 * grad @ (covariance / (2.0 * loss.errordef)) @ grad) if covariance is not None else float("nan")
        weightcorr = self.weightcorr if _has_weights(loss) else None
        if covariance is not None and weightcorr is not None:
            covariance = corrected_covariance(loss, params, best, covariance, weightcorr, lower, upper)
        errors = np.sqrt(np.diag(covariance)) if covariance is not None else np.full(len(params), np.nan)
        result = FitResult(
            values=dict(zip(run.names, map(float, best), strict=True)),
            errors=dict(zip(run.names, map(float, errors), strict=True)),
            valid=valid,
            fmin=float(res.fun) * norm + run.f0,
            edm=edm,
            nfcn=int(res.nfev),
            ngrad=ngrad,
            nhessian=nhessian,
            covariance=covariance,
            params=list(params),
            time=time.perf_counter() - run.start,
            precompute=run.report,
            weightcorr=weightcorr,
        )
        result._minuit = res
        return result


class Minuit:
    r"""Minimize a zcache loss with iminuit (MIGRAD, then HESSE).

    Parameters
    ----------
    tol : float
        Minuit's EDM tolerance (iminuit's ``tol``).
    strategy : int
        Minuit strategy 0, 1 or 2.
    use_gradient : bool
        Pass zcache's gradient to Minuit (``False``: Minuit's own).
    hesse : bool
        Errors and covariance after a valid MIGRAD (always: MIGRAD's own covariance, even
        flagged accurate, is its variable-metric estimate, several % off): ``2 errordef H^-1``
        with ``H`` the exact Hessian of the loss in the parameters themselves at the minimum,
        what HESSE gives without limits, also next to a limit (see :attr:`FitResult.errors`).
    precompute : bool
        Apply :func:`zcache.precompute` for the fitted parameters and the kind of gradient
        (once per loss and setting; a manual ``precompute`` with other options is replaced:
        pass ``precompute=False`` to keep yours).
    maxfcn : int, optional
        Call budget (iminuit's ``ncall``), ``None`` for Minuit's default.
    weightcorr : {"asymptotic", "sumw2", None}
        The error correction of a fit to weighted events (``zcache.Data(..., weights=...)``),
        as RooFit's ``AsymptoticError`` / ``SumW2Error`` and zfit's ``weightcorr``:
        ``"asymptotic"`` (default; Langenbruch, EPJC 82 (2022) 393) gives the covariance
        :math:`H^{-1} D H^{-1}`, :math:`D = \sum_i w_i^2 \nabla\ell_i\nabla\ell_i^T`, correct
        for any weights (sWeights included, apart from the uncertainty of the weights
        themselves); ``"sumw2"`` gives :math:`H^{-1} H_{w^2} H^{-1}` with :math:`H_{w^2}` the
        Hessian of the loss with squared weights; None keeps the plain inverse Hessian, which
        is wrong for weights other than 1. ``result.errors`` and ``result.covariance`` hold the
        corrected numbers; ``result.minuit`` (MINOS, profiles) sees the weighted likelihood
        as it is, uncorrected. Ignored for unweighted data, and for weighted data whose
        weights are all 1 (e.g. a toy drawn into a weighted dataset).

    Raises
    ------
    ValueError
        ``strategy`` not 0, 1 or 2, ``tol`` not positive, or an unknown ``weightcorr``.
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
    ):
        if weightcorr not in WEIGHT_CORRECTIONS:
            raise ValueError(f"weightcorr must be one of {WEIGHT_CORRECTIONS}, got {weightcorr!r}.")
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
        self.weightcorr = weightcorr

    def __repr__(self) -> str:
        return f"Minuit(tol={self.tol}, strategy={self.strategy}, use_gradient={self.use_gradient})"

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
            With a :class:`FitMinuit` as ``minuit``, for MINOS and profiles.

        Raises
        ------
        FitError
            Nothing to fit, duplicate parameter names, or a non-finite start.
        """
        numerical = not self.use_gradient or not get_autograd_mode()
        # The start is MIGRAD's first call, which also sets the offset (one call fewer per fit).
        run = _Run(loss, params, self.precompute, keep_floating=numerical, who="Minuit", evaluate_start=False)
        names, lower, upper, x0 = run.names, run.lower, run.upper, run.x0
        params = run.params
        before = [float(p) for p in params]
        # With zcache's gradient, zcache's Hessian too: Minuit seeds MIGRAD and runs HESSE
        # with one call each instead of O(n^2) function calls.
        analytic = self.use_gradient

        # MIGRAD asks for the gradient only at points whose value it has just had (the start,
        # and the point each line search accepts). During MIGRAD and HESSE one call computes
        # both and the gradient is kept for the few most recent points: a gradient request
        # then costs nothing (measured at 50k events: 10 value and 6 gradient calls per fit,
        # every gradient at a point already seen; the same for HESSE's Hessian, which MIGRAD
        # has just computed at the minimum). Off afterwards, so MINOS and profiles,
        # which may run on other data, never read a kept gradient.
        kept: dict[bytes, np.ndarray] = {}
        kept_hessian: dict[bytes, np.ndarray] = {}
        share = {"on": analytic}

        def fcn(x: np.ndarray) -> float:
            x = _clip(x, lower, upper)
            if not np.isfinite(x).all():  # MIGRAD after a NaN loss (e.g. a negative density): no parameter takes it
                return float("nan")
            offset = 0.0 if run.f0 is None else run.f0
            if not share["on"]:
                value = float(loss.value_at(x, params, offset=offset))
            else:
                out, gradient = loss.value_gradient_at(x, params, offset=offset)
                if len(kept) >= _KEPT_GRADIENTS:
                    del kept[next(iter(kept))]
                kept[x.tobytes()] = gradient.numpy()
                value = float(out)
            if run.f0 is None:  # the start
                try:
                    run.set_offset(value)
                except FitError:  # refused: the parameters as they were before the fit
                    set_values(params, before)
                    raise
                return 0.0
            return value

        def grad(x: np.ndarray) -> np.ndarray:
            x = _clip(x, lower, upper)
            if not np.isfinite(x).all():
                return np.full(len(x), np.nan)
            found = kept.get(x.tobytes()) if share["on"] else None
            if found is not None:
                return found.copy()
            return loss.value_gradient_at(x, params, offset=0.0)[1].numpy()

        def loss_hessian(x: np.ndarray) -> np.ndarray:
            # HESSE after MIGRAD asks again for the Hessian MIGRAD computed at its minimum.
            if share["on"] and x.tobytes() in kept_hessian:
                return kept_hessian[x.tobytes()].copy()
            hessian = loss.hessian_at(x, params).numpy()
            if share["on"]:
                kept_hessian.clear()
                kept_hessian[x.tobytes()] = hessian
            return hessian.copy()

        def for_minuit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # The Hessian in the parameters themselves, plus what Minuit2's bound transforms
            # leave out (see _minuit_hessian): laid out in external order here.
            x = _clip(x, lower, upper)
            now = holder[0]() if holder else None
            fixed = np.array(now.fixed) if now is not None else np.zeros(len(params), bool)
            return _minuit_hessian(loss_hessian(x), grad(x), x, lower, upper, fixed, fitting=share["on"]), fixed

        def hess(x: np.ndarray) -> np.ndarray:
            return _minuit2_layout(*for_minuit(x))

        def g2(x: np.ndarray) -> np.ndarray:
            return np.diag(for_minuit(x)[0]).copy()

        def make_minuit(start: np.ndarray, with_hessian: bool) -> FitMinuit:
            # With a Hessian, MIGRAD's seed falls back to g2 (the diagonal) where the Hessian at
            # the start is not positive definite; iminuit 2.33 then calls a g2 of None ("'NoneType'
            # object is not callable", seen with amplitude models started far from the minimum).
            # g2 is the Hessian's diagonal; iminuit warns that the Hessian overrides it, as wanted.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="hessian overrides g2", category=iminuit.util.IMinuitWarning)
                m = FitMinuit(fcn, start, grad=grad if analytic else False, hessian=hess if with_hessian else False,
                              g2=g2 if with_hessian else False, name=names)
            m.errordef = loss.errordef
            m.limits = list(zip(lower, upper, strict=True))
            m.tol = self.tol
            m.strategy = self.strategy
            return m

        # The Hessian callback asks the Minuit which parameters it fixed: through a weak
        # reference, since a Minuit holding its callbacks in C++ (which the garbage collector
        # cannot traverse) would otherwise keep itself, the loss and its graphs alive for good.
        m = make_minuit(x0, analytic)
        holder: list[weakref.ref] = [weakref.ref(m)]
        calls = np.zeros(3, dtype=int)  # nfcn, ngrad, nhessian of a MIGRAD stopped at a limit
        try:
            self._migrad_hesse(m)
        except _AtLimit as stop:
            # A fitted parameter reached a limit, where Minuit2 cannot use the exact Hessian (its
            # bound transform has zero slope there): MIGRAD goes on from that point without it,
            # computing second derivatives itself in its internal coordinates, as iminuit does
            # on a plain function.
            calls += [m.nfcn, m.ngrad, m.nhessian]
            m = make_minuit(stop.x, False)
            holder[0] = weakref.ref(m)
            self._migrad_hesse(m)
        if run.f0 is None:  # MIGRAD made no call (it always does; kept for safety)
            run.set_offset(float(loss.value_at(x0, params, offset=0.0)))
        f0 = run.f0

        best = _clip(np.array(m.values), lower, upper)
        # The errors: the curvature of the loss in the parameters themselves at the minimum,
        # 2 errordef H^-1 (one definition for serial and batched fits, limits or not; see
        # FitResult.errors). Not Minuit's covariance: near a limit it maps the errors through
        # its bound transform, which depends on where MIGRAD stopped (a yield at 0.56 above its
        # limit 0: 12.7 or 11.5 where the curvature gives 5.33).
        covariance = None
        if self.hesse and m.valid:
            covariance = _curvature_covariance(loss_hessian(best), loss.errordef)
            if covariance is None and m.covariance is not None:
                # Not positive definite: possible only with a parameter on a limit the loss
                # falls beyond (sigma of a spike at one event, say); no curvature error exists
                # there, and Minuit's HESSE through its bound transform is what remains.
                covariance = np.array(m.covariance)
        share["on"] = False
        kept.clear()
        kept_hessian.clear()
        elapsed = time.perf_counter() - run.start
        set_values(params, best)
        errors = np.sqrt(np.diag(covariance)) if covariance is not None else np.full(len(params), np.nan)
        weightcorr = self.weightcorr if _has_weights(loss) else None
        if covariance is not None and weightcorr is not None:
            covariance = corrected_covariance(loss, params, best, covariance, weightcorr, lower, upper)
            errors = np.sqrt(np.diag(covariance))
        # From now on every evaluating method of m puts this state back and restores afterwards.
        state = _FitState(loss, params, offset=f0, fval=float(m.fval))
        with_hessian = m.hessian is not None
        if not with_hessian or _minuit2_hessian_handling()[1]:
            m._zcache_state = state
        result = FitResult(
            values=dict(zip(names, map(float, best), strict=True)),
            errors=dict(zip(names, map(float, errors), strict=True)),
            valid=bool(m.valid),
            fmin=float(m.fval) + f0,
            edm=float(m.fmin.edm),
            nfcn=int(m.nfcn + calls[0]),
            ngrad=int(m.ngrad + calls[1]),
            nhessian=int(m.nhessian + calls[2]),
            covariance=covariance,
            params=list(params),
            time=elapsed,
            precompute=run.report,
            weightcorr=weightcorr,
        )
        result._state, result._minuit = state, m
        if m._zcache_state is None:
            # MINOS and profiles fix parameters inside Minuit2, where this Minuit's Hessian would be
            # read at the wrong indices (_minuit2_hessian_handling): the Minuit they use is one
            # without it, created when first asked for by a MIGRAD from this minimum.
            result._make_minuit = functools.partial(self._minuit_after, make_minuit, best, errors, state)
        return result

    def _migrad_hesse(self, m: FitMinuit) -> None:
        m.migrad(ncall=self.maxfcn)
        if self.hesse and m.valid:
            # For result.minuit (MINOS, profiles) and the verdict: with zcache's Hessian it is
            # the one MIGRAD computed at its minimum (no call).
            m.hesse()

    def _minuit_after(self, make_minuit: Callable[..., FitMinuit], best: np.ndarray, errors: np.ndarray,
                      state: _FitState) -> FitMinuit:
        m = make_minuit(best, False)
        if np.all(np.isfinite(errors) & (errors > 0)):
            m.errors = errors  # MIGRAD's first steps: the fit's errors
        # From the fit's minimum, to 1 % of its EDM goal: MINOS measures from this minimum, so
        # it should not be the worse of the two (a few calls more, once per result).
        m.tol = 0.01 * self.tol
        with state.active():
            self._migrad_hesse(m)
        m.tol = self.tol
        state.fval = float(m.fval)  # what profiles are relative to: this Minuit's minimum
        m._zcache_state = state
        return m
