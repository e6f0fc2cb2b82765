"""The pictures of a toy study: the pull distribution with a Gaussian fitted to it (:func:`plot_pulls`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats

from .._engine.tf_internals import leave_to_python
from ..toys import ToyResult
from ._common import CURVE_POINTS, figure_and_axes


@dataclass
class PullPlot:
    r"""What :func:`plot_pulls` drew.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
        The figure of the axes.
    ax : matplotlib.axes.Axes
        The axes.
    pulls : ndarray
        The pulls histogrammed (valid toys, finite values).
    edges : ndarray
        Bin edges.
    counts : ndarray
        Toys per bin.
    mean, width : float
        The fitted Gaussian's mean and standard deviation (maximum likelihood).
    mean_error, width_error : float
        Their statistical errors, :math:`\sigma/\sqrt{n}` and :math:`\sigma/\sqrt{2n}`.
    """

    figure: Figure
    ax: Axes
    pulls: np.ndarray
    edges: np.ndarray
    counts: np.ndarray
    mean: float
    width: float
    mean_error: float
    width_error: float



# -- plot_pulls ------------------------------------------------------------------------------
def plot_pulls(
    toys: ToyResult,
    name: str,
    *,
    bins: int = 20,
    limits: tuple[float, float] | None = None,
    valid_only: bool = True,
    ax: Axes | None = None,
) -> PullPlot:
    r"""The pull distribution of a parameter over toys, with a Gaussian fitted to it.

    The pulls :math:`(\hat\theta-\theta_0)/\sigma_{\hat\theta}` of a
    :class:`zcache.toys.ToyResult`, histogrammed with :math:`\sqrt{n}` error bars; the
    Gaussian is the maximum-likelihood fit to the pulls themselves (unbinned,
    ``scipy.stats.norm.fit``: their mean and standard deviation), drawn scaled to the
    histogram with its mean and width (and their errors :math:`\sigma/\sqrt n`,
    :math:`\sigma/\sqrt{2n}`) in the legend, over the standard normal for reference.

    Parameters
    ----------
    toys : zcache.toys.ToyResult
        The toy study.
    name : str
        A fitted parameter.
    bins : int
        Number of bins.
    limits : (float, float), optional
        The histogram's range; default symmetric, at least (-4, 4), wide enough for all pulls.
    valid_only : bool
        Leave out the toys whose fit was not valid.
    ax : matplotlib.axes.Axes, optional
        Draw here; default a new figure.

    Returns
    -------
    PullPlot
        The figure, the axes, the histogram and the fitted mean and width.

    Raises
    ------
    ValueError
        ``name`` was not fitted in the toys, or fewer than two toys are left.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt, numpy as np
    >>> from zcache.toys import ToyResult
    >>> from zcache.plot import plot_pulls
    >>> table = np.zeros(400, dtype=[("mu_pull", "f8"), ("valid", "?")])
    >>> table["mu_pull"], table["valid"] = np.random.default_rng(2).normal(0.0, 1.0, 400), True
    >>> drawn = plot_pulls(ToyResult(table, {"mu": 0.0}), "mu")
    >>> abs(drawn.mean) < 0.15, abs(drawn.width - 1.0) < 0.1, int(drawn.counts.sum())
    (True, True, 400)
    >>> plt.close(drawn.figure)
    """
    column = f"{name}_pull"
    if column not in (toys.table.dtype.names or ()):
        raise ValueError(f"plot_pulls: no pulls of '{name}' in the toys; their parameters are {toys.names}.")
    pulls = np.asarray(toys.table[column], dtype=float)
    if valid_only:
        pulls = pulls[np.asarray(toys.table["valid"], dtype=bool)]
    pulls = pulls[np.isfinite(pulls)]
    if len(pulls) < 2:
        raise ValueError(f"plot_pulls: {len(pulls)} toy(s) with a finite pull of '{name}'; a Gaussian needs two.")
    mean, width = (float(v) for v in stats.norm.fit(pulls))
    n = len(pulls)
    mean_error, width_error = width / np.sqrt(n), width / np.sqrt(2.0 * n)
    if limits is None:
        top = max(4.0, float(np.ceil(np.max(np.abs(pulls)))))
        limits = (-top, top)
    edges = np.linspace(float(limits[0]), float(limits[1]), int(bins) + 1)
    counts, _ = np.histogram(pulls, bins=edges)
    w = edges[1] - edges[0]
    fig, ax = figure_and_axes(ax)
    centers = 0.5 * (edges[1:] + edges[:-1])
    filled = counts > 0  # empty bins are not drawn
    ax.errorbar(centers[filled], counts[filled], yerr=np.sqrt(counts[filled]), fmt="o", color="k", ms=3,
                label=f"{n} toys", zorder=3)
    grid = np.linspace(edges[0], edges[-1], CURVE_POINTS)
    ax.plot(grid, n * w * stats.norm.pdf(grid, mean, width), color="C0", lw=2, zorder=2,
            label=f"Gaussian fit\n$\\mu$ = {mean:.3f} $\\pm$ {mean_error:.3f}\n"
                  f"$\\sigma$ = {width:.3f} $\\pm$ {width_error:.3f}")
    ax.plot(grid, n * w * stats.norm.pdf(grid), color="0.5", ls="--", lw=1, label="N(0, 1)", zorder=1)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(f"pull of {name}")
    ax.set_ylabel(f"toys / {w:.3g}")
    ax.legend(fontsize="small", frameon=False)
    return PullPlot(figure=fig, ax=ax, pulls=pulls, edges=edges, counts=counts.astype(float), mean=mean,
                    width=width, mean_error=float(mean_error), width_error=float(width_error))

leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
