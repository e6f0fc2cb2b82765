"""The outcome of a fit: values, errors, validity, MINOS intervals and profiles.

A :class:`FitResult` keeps the state of the loss at the minimum (every parameter's value,
fixed ones included, and the data; :class:`zcache.loss.LossState`). :meth:`FitResult.minos`,
:meth:`FitResult.profile` and every method of ``result.minuit`` that evaluates the loss (a
:class:`FitMinuit`) put that state back while they run and restore the parameters (and data) as
they found them, even on an error: later fits, ``floating`` toggles or changed fixed parameters
do not change a result's MINOS intervals, and MINOS does not leave the parameters at the last
point it tried.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.minimize import Minuit
>>> mu = zcache.Parameter("mu_res", 0.5, lower=-2.0, upper=2.0)
>>> x = np.random.default_rng(1).normal(0.0, 1.0, 2000)
>>> result = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x)))
>>> lower, upper, valid = result.minos("mu_res")["mu_res"]
>>> valid, round(lower, 3), round(upper, 3)
(True, -0.022, 0.022)
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import iminuit
import numpy as np

from .._engine.parameter import Parameter
from .._engine.precompute import PrecomputeReport
from ..exceptions import FitError
from .objective import LossState

__all__ = ["FitResult", "FitMinuit", "MinosError"]

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
        self._zcache_state: LossState | None = None  # None while the fit itself runs


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
        ``"sumw2"`` (see :class:`iminuit.Minuit`); None for unweighted data or no correction.
    path : str
        How the minimum was found: ``"compiled"`` (the whole fit in one compiled program, see
        :class:`zcache.minimize.Minuit`), ``"migrad"`` (iminuit's MIGRAD, call by call) or
        ``"scipy"``.
    fallback : str or None
        Why a fit that tried the compiled path went on with MIGRAD (it did not converge, ended
        on a limit, a check failed ...); None otherwise.
    made_posdef : bool
        The Hessian at the minimum had a flat direction (parameters that enter the loss only
        together, e.g. two couplings of degenerate amplitudes) and the covariance is that of
        the matrix made positive definite, as Minuit2 does (iminuit's
        ``fmin.has_made_posdef_covar``); the fit is valid, the errors along that direction
        mean nothing: fix one of the parameters.

    Examples
    --------
    >>> import pickle, numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.minimize import Minuit
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
    path: str = "migrad"
    fallback: str | None = None
    made_posdef: bool = False
    _state: LossState | None = field(init=False, repr=False, default=None, compare=False)
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

        From :class:`iminuit.Minuit`, it may be created when first asked for: a MIGRAD from this fit's
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
            ``nfcn``, ``ngrad``, ``nhessian``, ``time``, ``minimizer``, ``weightcorr``, ``path``, ``fallback``,
            ``made_posdef``,
            ``covariance`` (a list
            of rows in the order of ``names``, or None without HESSE) and ``minos`` (name ->
            ``{"lower", "upper", "valid"}`` for the intervals computed so far).

        Examples
        --------
        >>> import json, numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> from zcache.loss import UnbinnedNLL
        >>> from zcache.minimize import Minuit
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
            "path": self.path,
            "fallback": self.fallback,
            "made_posdef": bool(self.made_posdef),
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
        >>> from zcache.minimize import Minuit
        >>> mu = zcache.Parameter("mu_pd", 0.2, lower=-2.0, upper=2.0)
        >>> x = np.random.default_rng(3).normal(0.0, 1.0, 1000)
        >>> df = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))).to_pandas()
        >>> list(df.columns), len(df)
        (['mu_pd', 'mu_pd_err', 'fmin', 'edm', 'valid', 'nfcn', 'time'], 1)
        """
        return _pandas("FitResult.to_pandas").DataFrame([_pandas_row(self)])

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
        >>> from zcache.minimize import Minuit
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
        _check_names(self, names, "FitResult.minos")
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
        >>> from zcache.minimize import Minuit
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
        _check_names(self, [name], "FitResult.profile")
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

    def __str__(self) -> str:
        return _text(self)

    def _repr_html_(self) -> str:
        """An HTML table for Jupyter (as iminuit shows its Minuit objects)."""
        return _html(self)


def _rows(result: FitResult) -> list[tuple[str, str, str, str, str]]:
    """A result's table, per parameter: name, value, error, MINOS lower, MINOS upper (formatted)."""
    minos = result.minos_errors
    rows = []
    for n in result.names:
        e = minos.get(n)
        rows.append((n, f"{result.values[n]:.6g}", f"{result.errors[n]:.3g}",
                     "" if e is None else f"{e.lower:.3g}", "" if e is None else f"{e.upper:+.3g}"))
    return rows


def _text(result: FitResult) -> str:
    """A result as a text table (``str(result)``)."""
    head = (f"FitResult ({result.minimizer}): valid={result.valid}  fmin={result.fmin:.6f}  edm={result.edm:.2e}  "
            f"nfcn={result.nfcn}  ngrad={result.ngrad}  nhessian={result.nhessian}  time={result.time:.3f}s")
    rows = _rows(result)
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


def _html(result: FitResult) -> str:
    """A result as an HTML table (``result._repr_html_()``)."""
    esc = html.escape
    ok = "#c6efce" if result.valid else "#ffc7ce"
    status = (f"<tr><td colspan='5' style='background-color:{ok}; text-align:left'>"
              f"<b>{esc(result.minimizer)}</b>: {'valid' if result.valid else 'INVALID'} minimum, "
              f"FCN = {result.fmin:.6g}, EDM = {result.edm:.3g}, nfcn = {result.nfcn}, "
              f"time = {result.time:.3g} s</td></tr>")
    header = "<tr><th>parameter</th><th>value</th><th>error</th><th>MINOS lower</th><th>MINOS upper</th></tr>"
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in _rows(result))
    return f"<table>{status}{header}{body}</table>"


def _check_names(result: FitResult, names: Sequence[str], what: str) -> None:
    """A FitError naming ``what`` for a name that is not a string or was not fitted."""
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise FitError(f"{what}: parameter names must be strings, got {bad[0]!r}.")
    unknown = [n for n in names if n not in result.values]
    if unknown:
        raise FitError(f"{what}: {unknown} were not fitted; the fitted parameters are {list(result.values)}.")


def _flat_names(names: tuple[Any, ...], call: str) -> tuple[str, ...]:
    """``("a", "b")`` from ``("a", "b")`` or ``(["a", "b"],)``; a FitError naming the call otherwise."""
    flat: list[Any] = []
    for n in names:
        flat.extend([n] if isinstance(n, str) else (list(n) if isinstance(n, (list, tuple)) else [n]))
    bad = [n for n in flat if not isinstance(n, str)]
    if bad:
        raise FitError(f"{call}: parameter names must be strings (given one by one or as one list), got {bad[0]!r}.")
    return tuple(flat)


def _pandas_row(result: FitResult) -> dict[str, Any]:
    """The one row of :meth:`FitResult.to_pandas`."""
    row: dict[str, Any] = {}
    minos = result.minos_errors
    for n in result.names:
        row[n], row[f"{n}_err"] = float(result.values[n]), float(result.errors[n])
        if n in minos:
            row[f"{n}_minos_lower"], row[f"{n}_minos_upper"] = minos[n].lower, minos[n].upper
    row.update(fmin=float(result.fmin), edm=float(result.edm), valid=bool(result.valid), nfcn=int(result.nfcn),
               time=float(result.time))
    return row


def _pandas(what: str) -> Any:
    try:
        import pandas
    except ImportError as err:
        raise ImportError(f"{what} needs pandas, which is not installed: pip install zcache[pandas]") from err
    return pandas
