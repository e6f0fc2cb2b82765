r"""Profile-likelihood scans and contours, their conditional fits batched.

A *profile scan* of a parameter :math:`\mu` is :math:`-2\Delta\ln L(\mu) = \Delta\mathrm{loss}
/ \mathrm{errordef}` with every other floating parameter (the nuisances) fitted again at each
tested value; a *contour* of two parameters is the closed curve where that profile, with both
held, reaches a level (2.30 and 5.99 for 68 % and 95 % in two dimensions).

How the conditional fits run:

- **batched** (an :class:`~zcache.loss.UnbinnedNLL` or :class:`~zcache.loss.ExtendedUnbinnedNLL`):
  every point in one compiled program, :meth:`zcache.scale.BatchedLoss.scan_fits` with the
  tested values *pinned* per row and the dataset shared by all, each row starting from the best
  fit's linear response (a contour: from the row's previous step), one start inverse Hessian for
  the whole scan. A scan or grid axis with 8 values or more is fitted in passes of that program:
  every 4th value first, then every other point from the first pass's nuisances splined to it,
  where most points are at their minimum already (one evaluation, no BFGS step), then BFGS for
  the points that are not. A point needs its minimum,
  not its errors: the fits run without HESSE (``hesse=False``) and converge as MIGRAD judges,
  BFGS's own EDM below ``0.002 tol errordef``. A row that does not converge is fitted again on
  its own with the minimizer and flagged (``refit``).
- **serial** (every other loss: binned, simultaneous, chunked, distributed; or ``batched=False``):
  one fit per point with the minimizer, the tested parameters held; a scan goes outwards from
  the best fit, each point's nuisances starting from its neighbour's.

A contour is found along rays from the minimum (as MINUIT's ``MNCONTOUR`` finds its points one
by one), all rays at once: the rays are spread evenly in the frame where the HESSE covariance
of the two parameters is the unit circle, and along each the distance to the level is found by
the secant method on :math:`\sqrt{\Delta}`, which is linear in the distance for a Gaussian
likelihood (exact there in one step, a few steps otherwise); each step is one batched fit of
every ray and level. A grid of fits would spend most of its points far from the curve and
still need interpolation between them; the rays put every fit on the curve's neighbourhood
and the points come out on the curve to the requested tolerance.

Every call leaves each parameter of the loss (value and ``floating`` flag) as it found it,
also on an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.interpolate
import scipy.stats

from .._engine.parameter import Parameter, set_values
from ..exceptions import BatchingError, InferenceError
from ..loss import BaseLoss, UnbinnedNLL
from ..minimize import Minuit, many_fits
from ..scale import BatchedLoss
from ._core import kept_parameters

__all__ = ["Contour", "ProfileGrid", "ProfileScan", "contour", "profile_grid", "profile_scan"]

#: The most event values one chunk of rows holds (rows x events): bigger scans run in equal chunks.
#: Larger chunks spill the CPU's caches and each fit step gets slower per row, and a chunk waits for
#: its slowest row; every chunk runs inside one compiled call (``BatchedLoss.scan_fits``), so small
#: ones cost no Python between them (measured in benchmarks/RESULTS.md, "Profile scans").
_MAX_BATCH_ELEMENTS = 2**16
#: A scan or grid axis of at least _COARSE_MIN values is fitted first at every _COARSE_STEP-th value
#: (and the last), its other points starting from the coarse points' nuisances splined to them.
_COARSE_STEP = 4
_COARSE_MIN = 8


# -- results -------------------------------------------------------------------------------------
@dataclass
class ProfileScan:
    r"""A profile-likelihood scan of one parameter (:func:`profile_scan`).

    Attributes
    ----------
    name : str
        The scanned parameter.
    values : ndarray
        (K,) the tested values, in the order given (default: increasing).
    delta : ndarray
        (K,) :math:`-2\Delta\ln L = (\mathrm{loss} - \mathrm{loss}_\mathrm{min}) / \mathrm{errordef}`
        with the nuisances profiled (1 at one standard deviation, 4 at two).
    nuisances : dict of str to ndarray
        Each profiled parameter's fitted value at each point, (K,) each.
    converged : ndarray
        (K,) bool: the conditional fit of the point converged.
    refit : ndarray
        (K,) bool: the batched fit of the point did not converge and it was fitted again on its
        own (``converged`` says whether that worked).
    best : dict of str to float
        The free fit's values of every floating parameter.
    error : float
        The free fit's HESSE error of ``name``.
    fmin : float
        The loss at the free minimum.
    errordef : float
        The loss's ``errordef``.
    path : str
        ``"batched"`` or ``"serial"``: how the conditional fits ran.
    """

    name: str
    values: np.ndarray
    delta: np.ndarray
    nuisances: dict[str, np.ndarray]
    converged: np.ndarray
    refit: np.ndarray
    best: dict[str, float]
    error: float
    fmin: float
    errordef: float
    path: str

    @property
    def minimum(self) -> float:
        """The free fit's value of the scanned parameter."""
        return self.best[self.name]

    def interval(self, level: float = 1.0) -> tuple[float, float]:
        r"""Where the profile crosses ``level``, on either side of the minimum.

        The signed root :math:`r = \mathrm{sign}(x - \hat x)\sqrt{\Delta}` is interpolated (a
        cubic spline through the scan points and the minimum, :math:`r = 0`): it is a straight
        line for a Gaussian likelihood and smooth otherwise, so the crossings are those of MINOS
        to well below the fits' precision when the points are about a fifth of an error apart or
        closer.

        Parameters
        ----------
        level : float
            The level of :math:`-2\Delta\ln L`: 1 for one standard deviation, 4 for two,
            ``scipy.stats.chi2.ppf(cl, 1)`` for a confidence level ``cl``.

        Returns
        -------
        (float, float)
            The lower and the upper end (positions, not distances). NaN on a side where the scan
            does not reach ``level`` (widen ``bound``, or the parameter's limit comes first).

        Raises
        ------
        InferenceError
            ``level`` not positive and finite.

        Examples
        --------
        >>> import numpy as np
        >>> from zcache.inference import ProfileScan
        >>> x = np.linspace(-2.0, 2.0, 9)
        >>> scan = ProfileScan("mu", x, x**2, {}, np.ones(9, bool), np.zeros(9, bool), {"mu": 0.0},
        ...                    1.0, 0.0, 0.5, "serial")
        >>> [round(e, 6) for e in scan.interval(1.0)], [round(e, 6) for e in scan.interval(2.25)]
        ([-1.0, 1.0], [-1.5, 1.5])
        """
        level = _level(level, "ProfileScan.interval")
        x0 = self.minimum
        ok = np.isfinite(self.delta)
        x, d = self.values[ok], self.delta[ok]
        ends = []
        for side in (-1.0, 1.0):
            here = side * (x - x0) > 0
            if not here.any():
                ends.append(float("nan"))
                continue
            order = np.argsort(side * (x[here] - x0))
            xs = np.concatenate([[x0], x[here][order]])
            rs = np.concatenate([[0.0], np.sqrt(np.maximum(d[here][order], 0.0))])
            target = np.sqrt(level)
            beyond = np.flatnonzero(rs >= target)
            if beyond.size == 0:
                ends.append(float("nan"))
                continue
            k = int(beyond[0])  # the first point past the level, going outwards
            # the monotonic run of r up to one point past the crossing: spline it, x as a function of r
            stop = min(k + 2, len(rs))
            while stop > k + 1 and not np.all(np.diff(rs[:stop]) > 0):
                stop -= 1
            if stop >= 3 and np.all(np.diff(rs[:stop]) > 0):
                ends.append(float(scipy.interpolate.CubicSpline(rs[:stop], xs[:stop])(target)))
            else:  # a profile that is not monotonic here: straight between the two points around it
                ends.append(float(np.interp(target, rs[k - 1: k + 1], xs[k - 1: k + 1])))
        return ends[0], ends[1]


@dataclass
class Contour:
    r"""The contours of a profile likelihood in two parameters (:func:`contour`).

    Attributes
    ----------
    names : (str, str)
        The two parameters (x, y).
    levels : tuple of float
        The levels of :math:`-2\Delta\ln L`.
    curves : dict of float to ndarray
        Per level, the (P, 2) points of the closed curve, in order around the minimum
        (counter-clockwise in the frame of the HESSE ellipse; the first point is not repeated
        at the end).
    delta : dict of float to ndarray
        Per level, (P,) :math:`-2\Delta\ln L` at each point (the level, to ``tol``).
    converged : dict of float to ndarray
        Per level, (P,) bool: the point's conditional fits converged and its :math:`\Delta`
        is the level within ``tol``.
    at_limit : dict of float to ndarray
        Per level, (P,) bool: the ray reached a parameter's limit before the level; the point
        is on that limit (an open contour).
    best : dict of str to float
        The free fit's values of every floating parameter.
    errordef : float
        The loss's ``errordef``.
    path : str
        ``"batched"`` or ``"serial"``.
    steps : int
        How many rounds of conditional fits ran.
    """

    names: tuple[str, str]
    levels: tuple[float, ...]
    curves: dict[float, np.ndarray]
    delta: dict[float, np.ndarray]
    converged: dict[float, np.ndarray]
    at_limit: dict[float, np.ndarray]
    best: dict[str, float]
    errordef: float
    path: str
    steps: int = field(default=0)

    @property
    def minimum(self) -> tuple[float, float]:
        """The free fit's values of the two parameters."""
        return self.best[self.names[0]], self.best[self.names[1]]


@dataclass
class ProfileGrid:
    r"""The profile likelihood of two parameters on a grid (:func:`profile_grid`).

    Attributes
    ----------
    names : (str, str)
        The two parameters (x, y).
    x, y : ndarray
        (nx,) and (ny,) the tested values.
    delta : ndarray
        (nx, ny) :math:`-2\Delta\ln L` with the other floating parameters fitted
        (``delta[i, j]`` at ``x[i]``, ``y[j]``; ``matplotlib``'s ``contour(x, y, delta.T, levels)``
        draws its contours).
    nuisances : dict of str to ndarray
        Each fitted parameter's value at each point, (nx, ny) each.
    converged, refit : ndarray
        (nx, ny) bool, as in :class:`ProfileScan`.
    best : dict of str to float
        The free fit's values of every floating parameter.
    fmin, errordef : float
        The loss at the free minimum; the loss's ``errordef``.
    path : str
        ``"batched"`` or ``"serial"``.
    """

    names: tuple[str, str]
    x: np.ndarray
    y: np.ndarray
    delta: np.ndarray
    nuisances: dict[str, np.ndarray]
    converged: np.ndarray
    refit: np.ndarray
    best: dict[str, float]
    fmin: float
    errordef: float
    path: str


# -- checks ----------------------------------------------------------------------------------------
def _level(level: Any, who: str) -> float:
    try:
        value = float(level)
    except (TypeError, ValueError) as err:
        raise InferenceError(f"{who}: a level must be a positive number, got {level!r}.") from err
    if not (np.isfinite(value) and value > 0):
        raise InferenceError(f"{who}: a level of -2 Delta ln L must be positive and finite, got {level!r} "
                             "(1 and 4 are one and two standard deviations of one parameter).")
    return value


def _loss(loss: Any, who: str) -> BaseLoss:
    if not isinstance(loss, BaseLoss):
        raise InferenceError(f"{who}: needs a zcache loss (zcache.loss.UnbinnedNLL, a binned loss, ...), "
                             f"got {type(loss).__name__}.")
    return loss


def _parameter(loss: BaseLoss, name: Any, who: str) -> Parameter:
    floating = [p.name for p in loss.get_params(True)]
    if not isinstance(name, str):
        raise InferenceError(f"{who}: parameters are given by name (a str), got {name!r}; "
                             f"the floating ones are {floating}.")
    found = [p for p in loss.get_params(None) if p.name == name]
    if not found:
        raise InferenceError(f"{who}: the loss has no parameter {name!r}; its floating ones are {floating}.")
    if not found[0].floating:
        raise InferenceError(f"{who}: {name!r} is fixed (floating=False); set it floating to scan it, or "
                             f"scan one of the floating ones: {floating}.")
    return found[0]


def _limits(p: Parameter) -> tuple[float, float]:
    return (-np.inf if p.lower is None else float(p.lower)), (np.inf if p.upper is None else float(p.upper))


def _inside(p: Parameter, values: np.ndarray, who: str) -> None:
    low, high = _limits(p)
    bad = ~(np.isfinite(values) & (values >= low) & (values <= high))
    if bad.any():
        raise InferenceError(f"{who}: {p.name} = {values[bad][:3].tolist()} is outside its limits [{low}, {high}] "
                             "(or not finite); test values within them, or widen the limits.")


def _minimizer(minimizer: Any) -> Any:
    return Minuit() if minimizer is None else minimizer


def _use_batched(loss: BaseLoss, batched: bool | None, who: str) -> bool:
    fits = isinstance(loss, UnbinnedNLL) and not getattr(loss, "evaluates_in_parts", False)
    if batched and not fits:
        raise InferenceError(f"{who}: batched=True needs an UnbinnedNLL or ExtendedUnbinnedNLL (what "
                             f"zcache.scale.BatchedLoss fits), got {type(loss).__name__}; use batched=None or False.")
    return fits if batched is None else bool(batched)


# -- the fits ------------------------------------------------------------------------------------
@dataclass
class _Fits:
    fmin: np.ndarray       # (B,) the loss at each conditional minimum
    values: np.ndarray     # (B, n) the nuisances there
    converged: np.ndarray  # (B,) bool
    refit: np.ndarray      # (B,) bool


class _Conditional:
    """Conditional fits of a loss: ``held`` parameters at given values per row, ``nuisances`` fitted."""

    def __init__(self, loss: BaseLoss, held: list[Parameter], nuisances: list[Parameter], minimizer: Any,
                 batched: bool, who: str) -> None:
        self.loss, self.held, self.nuisances, self.minimizer = loss, held, nuisances, minimizer
        self.batched = batched and bool(nuisances)
        self.path = "batched" if batched else "serial"
        self.who = who
        self._hinv: np.ndarray | None = None  # the batched fits' start inverse Hessian, once per scan
        self._shape: tuple[int, int] | None = None  # the batched program's (rows per chunk, rows), once per scan

    def value(self, held: np.ndarray, nuisances: np.ndarray) -> float:
        """The loss (no offset) with ``held`` and ``nuisances`` set (they stay set)."""
        return float(self.loss.value_at(np.concatenate([held, nuisances]), self.held + self.nuisances, offset=0.0))

    def _serial(self, held: np.ndarray, start: np.ndarray) -> tuple[float, np.ndarray, bool]:
        set_values(self.held, held)
        if not self.nuisances:
            return self.value(held, start), start.copy(), True
        set_values(self.nuisances, start)
        with many_fits():  # a scan's points: compiled from the first (zcache.minimize.many_fits)
            result = self.minimizer.minimize(self.loss, self.nuisances)
        x = np.array([result.values[p.name] for p in self.nuisances])
        return self.value(held, x), x, bool(result.valid)

    def fit(self, held: np.ndarray, start: np.ndarray, chains: list[list[int]] | None = None) -> _Fits:
        """Fit every row: ``held`` (B, k), ``start`` (B, n); serially along ``chains`` (each row from the previous)."""
        rows = len(held)
        out = _Fits(np.full(rows, np.nan), np.array(start, dtype=float, copy=True), np.zeros(rows, bool),
                    np.zeros(rows, bool))
        if self.batched:
            try:
                self._batched(held, start, out)
            except BatchingError:
                self.batched, self.path = False, "serial"  # a model TensorFlow cannot vectorize: one by one
            else:
                for b in np.flatnonzero(~out.converged):  # refitted on their own, from the same start, and flagged
                    out.fmin[b], out.values[b], out.converged[b] = self._serial(held[b], start[b])
                    out.refit[b] = True
                return out
        for chain in chains or [[b] for b in range(rows)]:
            x = None
            for b in chain:
                out.fmin[b], out.values[b], out.converged[b] = self._serial(held[b], start[b] if x is None else x)
                x = out.values[b]
        return out

    def _batched(self, held: np.ndarray, start: np.ndarray, out: _Fits, maxiter: int = 200) -> None:
        loss = self.loss
        assert isinstance(loss, UnbinnedNLL)
        fitter = BatchedLoss.of(loss, self.nuisances)
        data = loss.data
        events = data.numpy()
        weights = data.weights_data.numpy() if data.is_weighted else np.ones(len(events))
        rows = len(held)
        if self._shape is None or rows > self._shape[1]:
            # rows per chunk: at most _MAX_BATCH_ELEMENTS event values; equal chunks (the least padding)
            most = max(1, min(rows, _MAX_BATCH_ELEMENTS // max(1, events.size)))
            chunk = -(-rows // -(-rows // most))
            self._shape = (chunk, -(-rows // chunk) * chunk)
        chunk, capacity = self._shape
        tol = getattr(self.minimizer, "tol", 0.1)
        edm_max = 0.002 * float(tol) * float(loss.errordef)  # MIGRAD's rule, as the minimizer's serial fits
        if self._hinv is None:
            # One start for every row (and every pass or round of the scan): the loss's Hessian at the
            # first row, as minimize() would compute it for each chunk's first row.
            with set_values(self.held, held[0]):
                self._hinv = fitter.start_hinv(start[0], events, weights)
        # hesse=False: a point needs its minimum, not its errors; converged as MIGRAD judges it (BFGS's
        # own EDM below the bound), as the serial fits and iminuit's mnprofile. Every pass and round of
        # a scan runs one compiled program (its shape fixed by the scan's first, largest, call).
        fit = fitter.scan_fits(start, events, weights, {p: held[:, j] for j, p in enumerate(self.held)},
                               hinv=self._hinv, edm_max=edm_max, chunk=chunk, capacity=capacity, maxiter=maxiter)
        out.fmin[:], out.values[:], out.converged[:] = fit.fmin, fit.values, fit.converged

    def fit_smooth(self, held: np.ndarray, start: np.ndarray, axes: list[np.ndarray],
                   chains: list[list[int]]) -> _Fits:
        """:meth:`fit` of the points of a grid (``held`` rows on the grid of ``axes``), coarse points first.

        Batched, the fits run in three passes of one program: every ``_COARSE_STEP``-th value of each
        axis with enough values (with the last) from ``start``; every other point from the coarse
        points' nuisances splined to it (the profile's nuisances are smooth in the held values, so
        most points are then at their minimum within MIGRAD's bound: one evaluation each, no BFGS
        step); the points that are not, from there with BFGS. A grid too small, or serial fits:
        :meth:`fit` as it is.
        """
        coarse_axes = [_coarse_values(a) for a in axes]
        first = np.all([np.isin(held[:, j], c) for j, c in enumerate(coarse_axes)], axis=0)
        if not self.batched or first.all():
            return self.fit(held, start, chains)
        rest = np.flatnonzero(~first)
        out = _Fits(np.full(len(held), np.nan), np.array(start, dtype=float, copy=True),
                    np.zeros(len(held), bool), np.zeros(len(held), bool))
        # the program's shape from all the rows: every pass runs the same compiled program
        self._reserve(len(held))
        coarse = self.fit(held[first], start[first])
        for name in ("fmin", "values", "converged", "refit"):
            getattr(out, name)[first] = getattr(coarse, name)
        smooth = _splined(held[first], coarse.values, coarse.converged, coarse_axes, held[rest])
        begin = np.where(np.isfinite(smooth), smooth, start[rest])
        low, high = np.array([_limits(p) for p in self.nuisances]).T
        begin = np.clip(begin, low, high)
        if self.batched:
            at_start = _Fits(np.full(len(rest), np.nan), begin.copy(), np.zeros(len(rest), bool),
                             np.zeros(len(rest), bool))
            self._batched(held[rest], begin, at_start, maxiter=0)   # one evaluation per point
            for name in ("fmin", "values", "converged"):
                getattr(out, name)[rest] = getattr(at_start, name)
            rest = rest[~at_start.converged]
            begin = begin[~at_start.converged]
        if len(rest):
            index = {int(b): k for k, b in enumerate(rest)}
            left = [[index[b] for b in chain if b in index] for chain in chains]
            more = self.fit(held[rest], begin, [c for c in left if c])
            for name in ("fmin", "values", "converged", "refit"):
                getattr(out, name)[rest] = getattr(more, name)
        return out

    def _reserve(self, rows: int) -> None:
        """Size the batched program for ``rows`` rows (before a first, smaller pass)."""
        if self.batched and (self._shape is None or rows > self._shape[1]):
            events = self.loss.data.numpy()
            most = max(1, min(rows, _MAX_BATCH_ELEMENTS // max(1, events.size)))
            chunk = -(-rows // -(-rows // most))
            self._shape = (chunk, -(-rows // chunk) * chunk)


def _coarse_values(values: np.ndarray) -> np.ndarray:
    """The distinct values of an axis a first pass fits: every ``_COARSE_STEP``-th and the last (all when few)."""
    u = np.unique(values)
    if len(u) < _COARSE_MIN:
        return u
    return u[np.unique(np.r_[np.arange(0, len(u), _COARSE_STEP), len(u) - 1])]


def _splined(points: np.ndarray, values: np.ndarray, ok: np.ndarray, axes: list[np.ndarray],
             at: np.ndarray) -> np.ndarray:
    """The coarse grid's ``values`` (at ``points``, rows on the grid of ``axes``) splined to ``at``.

    A tensor-product interpolating spline (cubic where an axis has four values or more); NaN
    everywhere when a coarse point did not converge (its nuisances are no guide).
    """
    if not np.all(ok) or not np.all(np.isfinite(values)):
        return np.full((len(at), values.shape[1]), np.nan)
    shape = tuple(len(a) for a in axes)
    grid = np.full((*shape, values.shape[1]), np.nan)
    grid[tuple(np.searchsorted(a, points[:, j]) for j, a in enumerate(axes))] = values
    if not np.all(np.isfinite(grid)):
        return np.full((len(at), values.shape[1]), np.nan)
    # along each axis in turn, evaluated at the needed values of that axis
    for j, a in enumerate(axes):
        need = np.unique(at[:, j])
        if len(a) > 1:
            spline = scipy.interpolate.make_interp_spline(a, grid, k=min(3, len(a) - 1), axis=j)
            grid = spline(need)
        else:
            grid = np.repeat(grid, len(need), axis=j)
        axes = [*axes[:j], need, *axes[j + 1:]]
    return grid[tuple(np.searchsorted(a, at[:, j]) for j, a in enumerate(axes))]


def _best_fit(loss: BaseLoss, minimizer: Any, who: str) -> tuple[dict[str, float], dict[str, float], Any, float]:
    floating = loss.get_params(True)
    with many_fits():  # the points' reference: on the path their fits take (a first fit would be MIGRAD's)
        result = minimizer.minimize(loss, floating)
    best = {p.name: float(result.values[p.name]) for p in floating}
    x = np.array([best[p.name] for p in floating])
    fmin = float(loss.value_at(x, floating, offset=0.0))
    if not np.isfinite(fmin):
        raise InferenceError(f"{who}: the loss is not finite at its minimum; nothing to scan.")
    return best, {p.name: float(result.errors[p.name]) for p in floating}, result, fmin


# -- public --------------------------------------------------------------------------------------
def profile_scan(loss: BaseLoss, name: str, values: Any = None, *, bins: int = 21,
                 bound: float | tuple[float, float] = 2.0, minimizer: Any = None,
                 batched: bool | None = None) -> ProfileScan:
    r"""Scan the profile likelihood of one parameter, the other floating ones fitted at each point.

    The loss is first minimized over its floating parameters (the best fit); then, at each
    tested value of ``name``, over the others (its nuisances), all points at once where the
    loss is unbinned (see the module's description). The counterpart of iminuit's
    ``mnprofile`` and RooFit's ``RooProfileLL``; :meth:`zcache.minimize.FitResult.profile`
    gives the same numbers one MIGRAD per point.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss; its floating parameters now are the fitted ones.
    name : str
        The parameter to scan (floating).
    values : array_like, optional
        The tested values (within the parameter's limits). Default: ``bins`` values evenly
        over ``bound``.
    bins : int
        Number of points when ``values`` is not given (>= 2).
    bound : float or (float, float)
        When ``values`` is not given: ``n`` for the best value :math:`\pm n` HESSE errors
        (clipped into the limits), or ``(low, high)`` (within them).
    minimizer : zcache.minimize.Minuit, optional
        The best fit's minimizer and the serial fits' (default ``Minuit()``); its ``tol`` sets
        the batched fits' EDM bound too (MIGRAD's ``0.002 tol errordef``).
    batched : bool, optional
        None (default): batched fits where the loss allows it (an unbinned loss whose model
        vectorizes), else serial ones; True: batched or an error; False: serial.

    Returns
    -------
    ProfileScan

    Raises
    ------
    InferenceError
        ``name`` not a parameter of the loss, or fixed; values outside its limits or not finite;
        ``bins`` < 2; a bad ``bound``; ``batched=True`` for a loss that cannot be batched.
        Every parameter (value and ``floating``) is then as before, as after a success.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.inference import profile_scan
    >>> mu = zcache.Parameter("mu_scan", 0.0, lower=-1.0, upper=1.0)
    >>> sigma = zcache.Parameter("sigma_scan", 1.0, lower=0.5, upper=2.0)
    >>> x = np.random.default_rng(2).normal(0.1, 1.0, 400)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x))
    >>> scan = profile_scan(loss, "mu_scan", bins=11)
    >>> bool(scan.converged.all()), np.round(scan.delta[[0, 10]], 1).tolist()   # +-2 errors: about 4
    (True, [4.0, 4.0])
    >>> lower, upper = scan.interval(1.0)                       # about x.mean() -+ x.std() / 20
    >>> round(upper - lower, 2), float(mu.value())               # mu is where it was
    (0.1, 0.0)
    """
    who = "profile_scan"
    loss = _loss(loss, who)
    poi = _parameter(loss, name, who)
    if values is not None:
        values = np.atleast_1d(np.asarray(values, dtype=float))
        if values.ndim != 1 or len(values) < 1:
            raise InferenceError(f"{who}: values must be a 1-D sequence of numbers, got shape {values.shape}.")
        _inside(poi, values, who)
    else:
        if isinstance(bins, bool) or int(bins) != bins or bins < 2:
            raise InferenceError(f"{who}: bins must be a whole number >= 2, got {bins!r}.")
        if np.ndim(bound) == 0:
            if not (np.isfinite(float(bound)) and float(bound) > 0):
                raise InferenceError(f"{who}: bound must be a positive number of errors or (low, high), got {bound!r}.")
        else:
            low, high = (float(b) for b in bound)
            if not low < high:
                raise InferenceError(f"{who}: bound (low, high) needs low < high, got {bound!r}.")
            _inside(poi, np.array([low, high]), who)
    use_batched = _use_batched(loss, batched, who)
    minimizer = _minimizer(minimizer)
    with kept_parameters(loss):
        best, errors, result, fmin = _best_fit(loss, minimizer, who)
        nuisances = [p for p in loss.get_params(True) if p is not poi]
        if values is None:
            if np.ndim(bound) == 0:
                err = errors[name] if np.isfinite(errors[name]) and errors[name] > 0 else 1.0
                low, high = best[name] - float(bound) * err, best[name] + float(bound) * err
            lo_lim, hi_lim = _limits(poi)
            values = np.linspace(max(low, lo_lim), min(high, hi_lim), int(bins))
        start = _linear_start(result, best, [poi], nuisances, values[:, None])
        fits = _Conditional(loss, [poi], nuisances, minimizer, use_batched, who)
        # serially: outwards from the best fit on each side, each point from its neighbour's nuisances
        up = [int(i) for i in np.argsort(values) if values[i] >= best[name]]
        down = [int(i) for i in np.argsort(values)[::-1] if values[i] < best[name]]
        out = fits.fit_smooth(values[:, None], start, [values], chains=[c for c in (up, down) if c])
        return ProfileScan(
            name=name, values=values, delta=(out.fmin - fmin) / loss.errordef,
            nuisances={p.name: out.values[:, j].copy() for j, p in enumerate(nuisances)},
            converged=out.converged, refit=out.refit, best=best, error=errors[name], fmin=fmin,
            errordef=float(loss.errordef), path=fits.path)


def contour(loss: BaseLoss, names: Sequence[str], levels: Any = None, *, cl: Any = None, points: int = 36,
            tol: float = 1e-3, maxsteps: int = 12, minimizer: Any = None, batched: bool | None = None) -> Contour:
    r"""The contours of the profile likelihood of two parameters, the other floating ones fitted.

    Points are found along ``points`` rays from the best fit, each ray's distance to each level
    by the secant method on :math:`\sqrt{-2\Delta\ln L}`; each round fits every ray and level at
    once (batched where the loss allows it, see the module's description). The counterpart of
    iminuit's ``mncontour``.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss; its floating parameters now are the fitted ones.
    names : (str, str)
        The two parameters (both floating), x then y.
    levels : float or sequence of float, optional
        Levels of :math:`-2\Delta\ln L` (> 0). Default ``(2.30, 5.99)``: 68 % and 95 % for two
        parameters (1 and 4 are one and two standard deviations of each alone).
    cl : float or sequence of float, optional
        Confidence levels in (0, 1) instead of ``levels``: ``scipy.stats.chi2.ppf(cl, 2)``.
    points : int
        Points per curve (rays), >= 4.
    tol : float
        A point is on the curve when its :math:`-2\Delta\ln L` is within ``tol`` of the level.
    maxsteps : int
        The most rounds of fits.
    minimizer : zcache.minimize.Minuit, optional
        As in :func:`profile_scan`.
    batched : bool, optional
        As in :func:`profile_scan`.

    Returns
    -------
    Contour

    Raises
    ------
    InferenceError
        Not two distinct names of floating parameters; both ``levels`` and ``cl``, a level
        <= 0, a ``cl`` outside (0, 1); ``points`` < 4; a
        non-positive ``tol``; ``batched=True`` for a loss that cannot be batched. Every
        parameter (value and ``floating``) is then as before, as after a success.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.inference import contour
    >>> mu = zcache.Parameter("mu_cont", 0.0, lower=-1.0, upper=1.0)
    >>> sigma = zcache.Parameter("sigma_cont", 1.0, lower=0.5, upper=2.0)
    >>> x = np.random.default_rng(2).normal(0.1, 1.0, 400)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x))
    >>> c = contour(loss, ("mu_cont", "sigma_cont"), levels=2.30, points=8)
    >>> curve = c.curves[2.30]
    >>> curve.shape, bool(c.converged[2.30].all()), bool(np.allclose(c.delta[2.30], 2.30, atol=1e-3))
    ((8, 2), True, True)
    """
    who = "contour"
    loss = _loss(loss, who)
    px, py, level_list = _contour_arguments(loss, names, levels, cl, points, tol, who)
    use_batched = _use_batched(loss, batched, who)
    minimizer = _minimizer(minimizer)
    with kept_parameters(loss):
        best, errors, result, fmin = _best_fit(loss, minimizer, who)
        nuisances = [p for p in loss.get_params(True) if p is not px and p is not py]
        center = np.array([best[px.name], best[py.name]])
        scale = _ellipse(result, px.name, py.name, errors)
        phi = 2.0 * np.pi * np.arange(int(points)) / int(points)
        unit = np.stack([np.cos(phi), np.sin(phi)], axis=1)
        levels_arr = np.repeat(np.array(level_list), int(points))          # (R,) one row per ray and level
        direction = np.tile(unit @ scale.T, (len(level_list), 1))          # (R, 2)
        t_max = _ray_limits(center, direction, [px, py])
        target = np.sqrt(levels_arr)
        t = np.minimum(target, t_max)     # exact for a Gaussian likelihood: the HESSE ellipse
        fits = _Conditional(loss, [px, py], nuisances, minimizer, use_batched, who)
        low, high = np.array([_limits(px), _limits(py)]).T

        def at(t: np.ndarray) -> np.ndarray:  # the points of the rays (a point at a limit by rounding: on it)
            return np.clip(center + t[:, None] * direction, low, high)

        start = _linear_start(result, best, [px, py], nuisances, at(t))
        t, delta, ok, at_limit, steps = _walk_rays(fits, at, t, start, t_max, levels_arr, fmin, float(loss.errordef),
                                                   tol, int(maxsteps))
        converged = ok & (np.abs(delta - levels_arr) <= tol)
        P = int(points)
        points_xy = at(t)
        return Contour(
            names=(px.name, py.name), levels=level_list,
            curves={lv: points_xy[k * P:(k + 1) * P] for k, lv in enumerate(level_list)},
            delta={lv: delta[k * P:(k + 1) * P] for k, lv in enumerate(level_list)},
            converged={lv: converged[k * P:(k + 1) * P] for k, lv in enumerate(level_list)},
            at_limit={lv: at_limit[k * P:(k + 1) * P] for k, lv in enumerate(level_list)},
            best=best, errordef=float(loss.errordef), path=fits.path, steps=steps)


def _contour_arguments(loss: Any, names: Sequence[str], levels: Any, cl: Any, points: Any, tol: Any,
                       who: str) -> tuple[Parameter, Parameter, tuple[float, ...]]:
    """:func:`contour`'s arguments checked: the two parameters and the levels (-2 Delta ln L)."""
    if isinstance(names, str) or len(names) != 2:
        raise InferenceError(f"{who}: names must be two parameter names (x, y), got {names!r}.")
    px, py = (_parameter(loss, n, who) for n in names)
    if px is py:
        raise InferenceError(f"{who}: names must be two different parameters, got {names!r}.")
    if levels is not None and cl is not None:
        raise InferenceError(f"{who}: give levels or cl, not both.")
    if cl is not None:
        cls = np.atleast_1d(np.asarray(cl, dtype=float))
        if not np.all((cls > 0) & (cls < 1)):
            raise InferenceError(f"{who}: cl must be in (0, 1), got {cl!r}; levels= takes -2 Delta ln L.")
        level_list = tuple(float(scipy.stats.chi2.ppf(c, 2)) for c in cls)
    else:
        level_list = tuple(_level(v, who) for v in np.atleast_1d(np.asarray((2.30, 5.99) if levels is None
                                                                            else levels, dtype=object)))
    if isinstance(points, bool) or int(points) != points or points < 4:
        raise InferenceError(f"{who}: points must be a whole number >= 4, got {points!r}.")
    if not (np.isfinite(tol) and tol > 0):
        raise InferenceError(f"{who}: tol must be positive, got {tol!r}.")
    return px, py, level_list


def _walk_rays(fits: Any, at: Any, t: np.ndarray, start: np.ndarray, t_max: np.ndarray, levels_arr: np.ndarray,
               fmin: float, errordef: float, tol: float,
               maxsteps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`contour`'s secant search along every ray at once, from ``t`` (a ray's distance, in ellipse units).

    Returns ``(t, delta, ok, at_limit, steps)``: each ray's last distance, its -2 Delta ln L there,
    whether its conditional fit converged, whether a limit came before the level, and the steps.
    """
    target = np.sqrt(levels_arr)
    history: list[tuple[np.ndarray, np.ndarray]] = []
    rows = len(t)
    done = np.zeros(rows, bool)
    at_limit = np.zeros(rows, bool)
    delta = np.full(rows, np.nan)
    ok = np.zeros(rows, bool)
    steps = 0
    for _ in range(maxsteps):
        steps += 1
        out = fits.fit(at(t), start)
        d = (out.fmin - fmin) / errordef
        # rows already on the curve keep their point (refitted at the same place: one compiled shape)
        keep = done
        delta = np.where(keep, delta, d)
        ok = np.where(keep, ok, out.converged)
        start = np.where(keep[:, None], start, out.values)
        history.append((t.copy(), delta.copy()))
        close = np.abs(delta - levels_arr) <= tol
        short = (t >= t_max) & (delta < levels_arr)     # the limit comes before the level
        at_limit |= short & ~done
        done = done | close | short | ~np.isfinite(delta)
        if done.all():
            break
        t = np.where(done, t, _secant(history, target, t_max))
    return t, delta, ok, at_limit, steps


def profile_grid(loss: BaseLoss, names: Sequence[str], x: Any, y: Any, *, minimizer: Any = None,
                 batched: bool | None = None) -> ProfileGrid:
    r"""The profile likelihood of two parameters on a grid, the other floating ones fitted at each point.

    Every point of the grid is one conditional fit, all in one batched fit where the loss allows it
    (each from the best fit), else one by one with the minimizer (along each row of the grid, each
    point from its neighbour's). For the curves of given levels, :func:`contour` needs far fewer fits.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss; its floating parameters now are the fitted ones.
    names : (str, str)
        The two parameters (both floating).
    x, y : array_like
        The tested values of each (within its limits).
    minimizer : zcache.minimize.Minuit, optional
        As in :func:`profile_scan`.
    batched : bool, optional
        As in :func:`profile_scan`.

    Returns
    -------
    ProfileGrid

    Raises
    ------
    InferenceError
        As :func:`profile_scan` and :func:`contour`: unknown, fixed or equal names, values outside
        the limits. Every parameter (value and ``floating``) is then as before, as after a success.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.inference import profile_grid
    >>> mu = zcache.Parameter("mu_grid", 0.0, lower=-1.0, upper=1.0)
    >>> sigma = zcache.Parameter("sigma_grid", 1.0, lower=0.5, upper=2.0)
    >>> x = np.random.default_rng(2).normal(0.1, 1.0, 400)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x))
    >>> grid = profile_grid(loss, ("mu_grid", "sigma_grid"), [0.0, 0.1, 0.2], [0.9, 1.0, 1.1])
    >>> grid.delta.shape, int(np.argmin(grid.delta[1]))     # the smallest at mu ~ 0.1, sigma ~ 1
    ((3, 3), 1)
    """
    who = "profile_grid"
    loss = _loss(loss, who)
    if isinstance(names, str) or len(names) != 2:
        raise InferenceError(f"{who}: names must be two parameter names (x, y), got {names!r}.")
    px, py = (_parameter(loss, n, who) for n in names)
    if px is py:
        raise InferenceError(f"{who}: names must be two different parameters, got {names!r}.")
    xs, ys = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (x, y))
    if xs.ndim != 1 or ys.ndim != 1 or not len(xs) or not len(ys):
        raise InferenceError(f"{who}: x and y must be 1-D sequences of numbers.")
    _inside(px, xs, who)
    _inside(py, ys, who)
    use_batched = _use_batched(loss, batched, who)
    minimizer = _minimizer(minimizer)
    with kept_parameters(loss):
        best, _, result, fmin = _best_fit(loss, minimizer, who)
        nuisances = [p for p in loss.get_params(True) if p is not px and p is not py]
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        held = np.stack([gx.ravel(), gy.ravel()], axis=1)
        start = _linear_start(result, best, [px, py], nuisances, held)
        fits = _Conditional(loss, [px, py], nuisances, minimizer, use_batched, who)
        ny = len(ys)
        out = fits.fit_smooth(held, start, [xs, ys], chains=[list(range(i * ny, (i + 1) * ny)) for i in range(len(xs))])
        shape = (len(xs), ny)
        return ProfileGrid(
            names=(px.name, py.name), x=xs, y=ys, delta=((out.fmin - fmin) / loss.errordef).reshape(shape),
            nuisances={p.name: out.values[:, j].reshape(shape).copy() for j, p in enumerate(nuisances)},
            converged=out.converged.reshape(shape), refit=out.refit.reshape(shape), best=best, fmin=fmin,
            errordef=float(loss.errordef), path=fits.path)


def _linear_start(result: Any, best: dict[str, float], held: list[Parameter], nuisances: list[Parameter],
                  values: np.ndarray) -> np.ndarray:
    r"""Each row's nuisances where the best fit's Gaussian approximation puts their conditional minimum.

    :math:`\hat\nu + C_{\nu h} C_{hh}^{-1} (h - \hat h)`, from the best fit's covariance (exact for a
    quadratic loss, and fewer BFGS steps for every row otherwise), clipped into the limits; the best
    fit's values where there is no usable covariance.
    """
    center = np.array([best[p.name] for p in nuisances], dtype=float)
    start = np.tile(center, (len(values), 1))
    cov = getattr(result, "covariance", None)
    if cov is None or not nuisances:
        return start
    names = [p.name for p in result.params]
    h = [names.index(p.name) for p in held]
    n = [names.index(p.name) for p in nuisances]
    cov = np.asarray(cov, dtype=float)
    try:
        gain = np.linalg.solve(cov[np.ix_(h, h)], cov[np.ix_(h, n)])  # C_hh^-1 C_h(nu)
    except np.linalg.LinAlgError:
        return start
    if not np.all(np.isfinite(gain)):
        return start
    moved = start + (np.asarray(values, dtype=float) - [best[p.name] for p in held]) @ gain
    low, high = np.array([_limits(p) for p in nuisances]).T
    return np.clip(moved, low, high)


def _ellipse(result: Any, x: str, y: str, errors: dict[str, float]) -> np.ndarray:
    """The 2 x 2 Cholesky factor of the two parameters' HESSE covariance (their errors where it has none)."""
    cov = getattr(result, "covariance", None)
    if cov is not None:
        names = [p.name for p in result.params]
        i, j = names.index(x), names.index(y)
        sub = np.asarray(cov, dtype=float)[np.ix_([i, j], [i, j])]
        try:
            if np.all(np.isfinite(sub)):
                return np.linalg.cholesky(sub)
        except np.linalg.LinAlgError:
            pass
    ex, ey = (errors[n] if np.isfinite(errors[n]) and errors[n] > 0 else 1.0 for n in (x, y))
    return np.diag([ex, ey])


def _ray_limits(center: np.ndarray, direction: np.ndarray, params: list[Parameter]) -> np.ndarray:
    """How far each ray may go before a parameter's limit."""
    t = np.full(len(direction), np.inf)
    for j, p in enumerate(params):
        low, high = _limits(p)
        d = direction[:, j]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(d > 0, np.minimum(t, (high - center[j]) / d), t)
            t = np.where(d < 0, np.minimum(t, (low - center[j]) / d), t)
    return t


def _secant(history: list[tuple[np.ndarray, np.ndarray]], target: np.ndarray, t_max: np.ndarray) -> np.ndarray:
    """The next distance along each ray: secant on sqrt(delta) (a straight line through 0 after one step)."""
    t1, d1 = history[-1]
    s1 = np.sqrt(np.maximum(d1, 0.0))
    if len(history) == 1:
        t0, s0 = np.zeros_like(t1), np.zeros_like(t1)
    else:
        t0, d0 = history[-2]
        s0 = np.sqrt(np.maximum(d0, 0.0))
    slope = (s1 - s0) / np.where(t1 != t0, t1 - t0, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        step = t1 + (target - s1) / slope
        ratio = t1 * target / s1                      # the straight line through the origin
    nxt = np.where(np.isfinite(step) & (slope > 0), step, ratio)
    nxt = np.where(np.isfinite(nxt) & (nxt > 0), nxt, 2.0 * t1)   # flat so far: go further out
    return np.minimum(nxt, t_max)
