"""Pictures of inference: likelihood profiles, scans, contours and the CLs "Brazil" plot.

:func:`plot_profile` (a profile from a fit's result), :func:`plot_scan`, :func:`plot_contour` and
:func:`plot_cls` (from :mod:`zcache.inference`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats

from .._engine.tf_internals import leave_to_python
from ..inference import Contour, ProfileScan, PValues, UpperLimit
from ..minimize import FitResult
from ._common import CURVE_POINTS, figure_and_axes


@dataclass
class ProfilePlot:
    """What :func:`plot_profile` drew.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
        The figure of the axes.
    ax : matplotlib.axes.Axes
        The axes.
    x : ndarray
        The parameter values (from :meth:`zcache.minimize.FitResult.profile`).
    delta : ndarray
        The loss minus its minimum at each value.
    valid : ndarray of bool
        Whether each point's minimization converged.
    errordef : float
        The loss's change for one sigma (0.5 for a negative log-likelihood, 1 for a chi2).
    """

    figure: Figure
    ax: Axes
    x: np.ndarray
    delta: np.ndarray
    valid: np.ndarray
    errordef: float



# -- plot_profile ----------------------------------------------------------------------------
def plot_profile(
    result: FitResult,
    name: str,
    *,
    bins: int = 30,
    bound: float | tuple[float, float] = 2.0,
    minimize: bool = True,
    ax: Axes | None = None,
) -> ProfilePlot:
    r"""The likelihood profile of one parameter, with the HESSE parabola and the one-sigma line.

    The points are :meth:`zcache.minimize.FitResult.profile` (the other parameters
    minimized at each point, or fixed with ``minimize=False``): the loss minus its minimum,
    :math:`\Delta(-\log L)` for a likelihood (errordef 1/2) or :math:`\Delta\chi^2`
    (errordef 1). The HESSE parabola is :math:`\mathrm{errordef}\,((x-\hat x)/\sigma)^2`,
    the horizontal line is one sigma (errordef), and the MINOS interval is marked where it
    was computed (:meth:`~zcache.minimize.FitResult.minos`). Points whose minimization did
    not converge are crossed.

    Parameters
    ----------
    result : zcache.minimize.FitResult
        A Minuit fit result (live, not unpickled).
    name : str
        The fitted parameter.
    bins : int
        Number of points.
    bound : float or (float, float)
        The best value :math:`\pm` this many HESSE errors, or a (low, high) range.
    minimize : bool
        Profile (True) or scan (False).
    ax : matplotlib.axes.Axes, optional
        Draw here; default a new figure.

    Returns
    -------
    ProfilePlot
        The figure, the axes and the profile's numbers.

    Raises
    ------
    zcache.exceptions.FitError
        Not a live Minuit result, or ``name`` was not fitted.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt, numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.minimize import Minuit
    >>> from zcache.plot import plot_profile
    >>> mu = zcache.Parameter("mu_plotprofile", 0.1, lower=-2.0, upper=2.0)
    >>> x = np.random.default_rng(1).normal(0.0, 1.0, 500)
    >>> result = Minuit().minimize(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x)))
    >>> drawn = plot_profile(result, "mu_plotprofile", bins=5, bound=1.0)
    >>> drawn.errordef, np.round(drawn.delta[[0, 2, 4]], 2).tolist()   # one sigma: errordef
    (0.5, [0.5, 0.0, 0.5])
    >>> plt.close(drawn.figure)
    """
    x, delta, valid = result.profile(name, bins=bins, bound=bound, minimize=minimize)
    errordef = float(result.minuit.errordef)
    fig, ax = figure_and_axes(ax)
    ax.plot(x, delta, "o-", color="k", ms=3, label="profile" if minimize else "scan", zorder=3)
    if not valid.all():
        ax.plot(x[~valid], delta[~valid], "x", color="C3", ms=8, label="not converged", zorder=4)
    best, error = result.values[name], result.errors[name]
    if result.covariance is not None:
        # The parabola is the curvature itself: Minuit's error of a bounded parameter has been through
        # its limit transform, the covariance has not.
        k = list(result.values).index(name)
        error = float(np.sqrt(result.covariance[k, k]))
    if np.isfinite(error) and error > 0:
        grid = np.linspace(x[0], x[-1], CURVE_POINTS)
        ax.plot(grid, errordef * ((grid - best) / error) ** 2, "--", color="C0", label="HESSE parabola", zorder=2)
    ax.axhline(errordef, color="0.4", ls=":", label=r"1$\sigma$")
    minos = result.minos_errors.get(name)
    if minos is not None:
        ax.axvline(best + minos.lower, color="C1", ls="-.", label="MINOS")
        ax.axvline(best + minos.upper, color="C1", ls="-.")
    ax.set_xlabel(name)
    ax.set_ylabel({0.5: r"$\Delta(-\log L)$", 1.0: r"$\Delta\chi^2$"}.get(errordef, r"$\Delta$ loss"))
    ax.set_ylim(bottom=0.0)
    ax.legend(fontsize="small", frameon=False)
    return ProfilePlot(figure=fig, ax=ax, x=x, delta=delta, valid=valid, errordef=errordef)


# -- plot_scan, plot_contour -------------------------------------------------------------------
@dataclass
class ScanPlot:
    r"""What :func:`plot_scan` drew.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
        The figure of the axes.
    ax : matplotlib.axes.Axes
        The axes.
    points : matplotlib.lines.Line2D
        The scan: the tested values against :math:`-2\Delta\ln L`.
    parabola : matplotlib.lines.Line2D or None
        The HESSE parabola :math:`((x - \hat x)/\sigma)^2` (None without a finite error).
    levels : dict of float to matplotlib.lines.Line2D
        The horizontal line of each level.
    intervals : dict of float to (float, float)
        Each level's interval (:meth:`zcache.inference.ProfileScan.interval`), marked by vertical lines
        where its ends are finite.
    """

    figure: Figure
    ax: Axes
    points: Any
    parabola: Any
    levels: dict[float, Any]
    intervals: dict[float, tuple[float, float]]


def plot_scan(scan: ProfileScan, ax: Axes | None = None, levels: Sequence[float] = (1.0, 4.0)) -> ScanPlot:
    r"""A profile-likelihood scan (:func:`zcache.inference.profile_scan`) with its intervals.

    Draws :math:`-2\Delta\ln L` at the scanned values (points whose fit did not converge crossed),
    the HESSE parabola, a horizontal line at each level and the interval where the profile
    crosses it (1 and 4: one and two standard deviations).

    Parameters
    ----------
    scan : zcache.inference.ProfileScan
        The scan.
    ax : matplotlib.axes.Axes, optional
        Draw here; default a new figure.
    levels : sequence of float
        Levels of :math:`-2\Delta\ln L` to mark (> 0).

    Returns
    -------
    ScanPlot

    Raises
    ------
    zcache.exceptions.InferenceError
        A level that is not positive.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt, numpy as np
    >>> from zcache.inference import ProfileScan
    >>> from zcache.plot import plot_scan
    >>> x = np.linspace(-3.0, 3.0, 13)
    >>> scan = ProfileScan("mu", x, x**2, {}, np.ones(13, bool), np.zeros(13, bool), {"mu": 0.0}, 1.0, 0.0,
    ...                    0.5, "serial")
    >>> drawn = plot_scan(scan)
    >>> bool(np.all(drawn.points.get_ydata() == x**2)), [tuple(round(e, 6) for e in i) for i in drawn.intervals.values()]
    (True, [(-1.0, 1.0), (-2.0, 2.0)])
    >>> plt.close(drawn.figure)
    """
    intervals = {float(level): scan.interval(level) for level in levels}  # checks the levels first
    fig, ax = figure_and_axes(ax)
    order = np.argsort(scan.values)
    x, delta = scan.values[order], scan.delta[order]
    (points,) = ax.plot(x, delta, "o-", color="k", ms=3, label="profile", zorder=3)
    bad = ~scan.converged[order]
    if bad.any():
        ax.plot(x[bad], delta[bad], "x", color="C3", ms=8, label="not converged", zorder=4)
    parabola = None
    if np.isfinite(scan.error) and scan.error > 0:
        grid = np.linspace(x[0], x[-1], CURVE_POINTS)
        (parabola,) = ax.plot(grid, ((grid - scan.minimum) / scan.error) ** 2, "--", color="C0",
                              label="HESSE parabola", zorder=2)
    lines = {}
    for k, (level, (low, high)) in enumerate(intervals.items()):
        lines[level] = ax.axhline(level, color="0.4", ls=":", lw=1)
        ends = [e for e in (low, high) if np.isfinite(e)]
        for j, e in enumerate(ends):
            ax.axvline(e, color=f"C{k + 1}", ls="-.", lw=1,
                       label=f"$-2\\Delta\\ln L$ = {level:g}: [{low:.4g}, {high:.4g}]" if j == 0 else None)
    ax.set_xlabel(scan.name)
    ax.set_ylabel(r"$-2\Delta\ln L$")
    ax.set_ylim(bottom=0.0)
    ax.legend(fontsize="small", frameon=False)
    return ScanPlot(figure=fig, ax=ax, points=points, parabola=parabola, levels=lines, intervals=intervals)


@dataclass
class ContourPlot:
    """What :func:`plot_contour` drew.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
        The figure of the axes.
    ax : matplotlib.axes.Axes
        The axes.
    curves : dict of float to matplotlib.lines.Line2D
        Each level's closed curve (its first point repeated at the end to close it).
    minimum : matplotlib.lines.Line2D
        The best fit's marker.
    """

    figure: Figure
    ax: Axes
    curves: dict[float, Any]
    minimum: Any


def plot_contour(contour: Contour, ax: Axes | None = None) -> ContourPlot:
    r"""The contours of a profile likelihood in two parameters (:func:`zcache.inference.contour`).

    Each level's curve is drawn closed, labelled with its level and, for the levels of 68 %
    and 95 % in two dimensions, its confidence level; points on a parameter's limit (an open
    contour) are marked.

    Parameters
    ----------
    contour : zcache.inference.Contour
        The contours.
    ax : matplotlib.axes.Axes, optional
        Draw here; default a new figure.

    Returns
    -------
    ContourPlot

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt, numpy as np
    >>> from zcache.inference import Contour
    >>> from zcache.plot import plot_contour
    >>> phi = np.linspace(0.0, 2.0 * np.pi, 16, endpoint=False)
    >>> circle = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    >>> c = Contour(("a", "b"), (1.0,), {1.0: circle}, {1.0: np.ones(16)}, {1.0: np.ones(16, bool)},
    ...             {1.0: np.zeros(16, bool)}, {"a": 0.0, "b": 0.0}, 0.5, "batched")
    >>> drawn = plot_contour(c)
    >>> xy = drawn.curves[1.0].get_xydata()
    >>> len(xy), bool(np.all(xy[:16] == circle)), bool(np.all(xy[16] == circle[0]))
    (17, True, True)
    >>> plt.close(drawn.figure)
    """
    fig, ax = figure_and_axes(ax)
    curves = {}
    for k, level in enumerate(contour.levels):
        xy = np.asarray(contour.curves[level], dtype=float)
        closed = np.concatenate([xy, xy[:1]])
        cl = float(stats.chi2.cdf(level, 2))
        (curves[level],) = ax.plot(closed[:, 0], closed[:, 1], "-", color=f"C{k}",
                                   label=f"$-2\\Delta\\ln L$ = {level:g} ({100 * cl:.1f} % CL)")
        limit = np.asarray(contour.at_limit[level], dtype=bool)
        if limit.any():
            ax.plot(xy[limit, 0], xy[limit, 1], "s", color=f"C{k}", ms=4, mfc="none",
                    label="at a limit" if k == 0 else None)
    x0, y0 = contour.minimum
    (minimum,) = ax.plot([x0], [y0], "+", color="k", ms=10, label="best fit")
    ax.set_xlabel(contour.names[0])
    ax.set_ylabel(contour.names[1])
    ax.legend(fontsize="small", frameon=False)
    return ContourPlot(figure=fig, ax=ax, curves=curves, minimum=minimum)


# -- plot_cls ----------------------------------------------------------------------------------
@dataclass
class CLsPlot:
    """What :func:`plot_cls` drew: the axes, the artists and the numbers behind them.

    Attributes
    ----------
    figure, ax
        The figure and axes.
    values : ndarray
        The tested POI values (the x of every curve).
    observed : ndarray
        The observed CLs (or p-value) drawn.
    expected : ndarray or None
        The expected CLs, shape (5, n): −2σ … +2σ (None for a p-value plot).
    observed_line, expected_line, cl_line
        The ``Line2D`` artists (``expected_line`` None for a p-value plot).
    band_1sigma, band_2sigma
        The filled bands (``PolyCollection``; None for a p-value plot).
    limits : list
        The vertical lines at the observed and median expected limits (from an UpperLimit; else []).
    """

    figure: Figure
    ax: Axes
    values: np.ndarray
    observed: np.ndarray
    expected: np.ndarray | None
    observed_line: Any
    expected_line: Any
    band_1sigma: Any
    band_2sigma: Any
    cl_line: Any
    limits: list = field(default_factory=list)


def plot_cls(result: Any, ax: Axes | None = None, *, cl: float | None = None, kind: str = "cls") -> CLsPlot:
    r"""The "Brazil" plot: CLs against the POI, the expected median with ±1σ (green) and ±2σ (yellow) bands.

    Parameters
    ----------
    result : zcache.inference.UpperLimit or zcache.inference.PValues
        An upper limit (its p-values, confidence level and limits are drawn) or p-values.
    ax : matplotlib.axes.Axes, optional
        Where to draw; default a new figure.
    cl : float, optional
        The confidence level of the horizontal line at ``1 - cl``; default the limit's, or 0.95.
    kind : {"cls", "clsb"}
        ``"cls"``: CLs with the expected bands; ``"clsb"``: the p-value of the tested
        hypothesis :math:`p_\mu` (no bands: they are CLs's).

    Returns
    -------
    CLsPlot

    Raises
    ------
    ValueError
        ``result`` is neither, an unknown ``kind``, or ``cl`` not in (0, 1).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt, numpy as np
    >>> from zcache.inference import PValues
    >>> from zcache.plot import plot_cls
    >>> x = np.linspace(0.0, 5.0, 6)
    >>> cls = np.exp(-x)
    >>> z = np.zeros(6)
    >>> pv = PValues(values=x, statistic="qtilde", observed=z, clsb=cls, clb=np.ones(6), cls=cls,
    ...              expected_cls=np.exp(-x[None, :] * np.array([[2.0], [1.5], [1.0], [0.7], [0.5]])), clsb_err=z,
    ...              clb_err=z, cls_err=z, expected_cls_err=np.zeros((5, 6)))
    >>> drawn = plot_cls(pv)
    >>> bool(np.array_equal(drawn.observed_line.get_ydata(), cls)), round(float(drawn.cl_line.get_ydata()[0]), 6)
    (True, 0.05)
    >>> plt.close(drawn.figure)
    """
    if kind not in ("cls", "clsb"):
        raise ValueError(f"plot_cls: kind must be 'cls' or 'clsb', got {kind!r}.")
    limit = None
    if isinstance(result, UpperLimit):
        limit, pv = result, result.p_values
        cl = result.cl if cl is None else cl
    elif isinstance(result, PValues):
        pv = result
    else:
        raise ValueError(f"plot_cls draws a zcache.inference.UpperLimit or PValues, got {type(result).__name__}.")
    cl = 0.95 if cl is None else float(cl)
    if not 0.0 < cl < 1.0:
        raise ValueError(f"plot_cls: cl must be in (0, 1), got {cl!r}.")
    fig, ax = figure_and_axes(ax)
    x = np.asarray(pv.values, dtype=float)
    expected = band1 = band2 = expected_line = None
    if kind == "cls":
        observed = np.asarray(pv.cls, dtype=float)
        expected = np.asarray(pv.expected_cls, dtype=float)
        band2 = ax.fill_between(x, expected[0], expected[4], color="yellow", label=r"expected $\pm 2\sigma$", lw=0)
        band1 = ax.fill_between(x, expected[1], expected[3], color="limegreen", label=r"expected $\pm 1\sigma$", lw=0)
        (expected_line,) = ax.plot(x, expected[2], color="k", ls="--", label="expected median")
        label, ylabel = "observed CL$_s$", "CL$_s$"
    else:
        observed = np.asarray(pv.clsb, dtype=float)
        label, ylabel = r"observed $p_\mu$", r"$p_\mu$ (CL$_{s+b}$)"
    (observed_line,) = ax.plot(x, observed, color="k", marker="o", ms=3, label=label)
    (cl_line,) = ax.plot([x[0], x[-1]], [1.0 - cl, 1.0 - cl], color="r", lw=1, label=f"{1.0 - cl:g} ({cl:.0%} CL)")
    lines = []
    if limit is not None:
        lines.append(ax.axvline(limit.observed, color="k", lw=0.8, ls=":"))
        lines.append(ax.axvline(float(limit.expected[2]), color="0.4", lw=0.8, ls=":"))
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("POI")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small", frameon=False)
    return CLsPlot(figure=fig, ax=ax, values=x, observed=observed, expected=expected, observed_line=observed_line,
                   expected_line=expected_line, band_1sigma=band1, band_2sigma=band2, cl_line=cl_line, limits=lines)

leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
