r"""Fit plots: data with the fitted model, projections, likelihood profiles and toy pulls.

Needs matplotlib, an optional extra (``pip install zcache[plot]``); ``import zcache`` never
imports it. Nothing here calls ``plt.show()``: every function draws on the axes it is given
(or on a new figure) and returns them with the numbers it drew, so a plot can be checked,
restyled or saved (``result.figure.savefig(...)``).

- :func:`plot_fit`: a 1-D model on unbinned data (:class:`zcache.Data`) or on a histogram
  (a ``zcache.binned.BinnedData``, or any object with ``edges``, ``counts`` and
  ``variances``): the data with error bars, the model scaled to them, its components and
  a pull panel :math:`(n_i - \mu_i)/\sigma_i`;
- :func:`plot_projections`: the 1-D projections of a model of several observables (a
  Dalitz-plot :class:`zcache.amplitude.AmplitudePdf`, a :class:`zcache.models.ProductPdf`),
  with pulls;
- :func:`plot_profile`: the likelihood profile of a parameter from a
  :class:`zcache.minimize.FitResult`, with the HESSE parabola and the MINOS interval;
- :func:`plot_pulls`: the pull distribution of a toy study (:class:`zcache.toys.ToyResult`)
  with a Gaussian fitted to it;
- :func:`plot_scan`, :func:`plot_contour`: a profile scan with its intervals and the contours of
  two parameters (:func:`zcache.inference.profile_scan`, :func:`zcache.inference.contour`);
- :func:`plot_cls`: the "Brazil" plot of an upper limit: CLs (or the p-value) against the
  POI, the expected median with its ±1σ and ±2σ bands, and the CL line.

The expected count in bin :math:`i` is :math:`\mu_i = N\,P_i`, with :math:`N` the yield of
an extended model (else the number of events in the model's range) and :math:`P_i` the
model's probability of the bin: its integral over the bin for a 1-D model, the fraction of
a phase-space (Monte Carlo) sample's model weight for a projection. The smooth curve is
:math:`N\,w\,p(x)` for bins of width :math:`w`.

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import matplotlib.pyplot as plt
>>> import zcache
>>> from zcache.models import Space, Gaussian, Exponential, SumPdf
>>> from zcache.plot import plot_fit
>>> space = Space("m", 0.0, 10.0)
>>> model = SumPdf([Gaussian(space, 5.0, 0.5, name="signal"), Exponential(space, -0.3, name="background")],
...                fracs=[0.3])
>>> drawn = plot_fit(model, model.sample(2000), bins=40)
>>> float(drawn.counts.sum()), sorted(drawn.components), drawn.ax_pulls.get_ylabel()
(2000.0, ['background', 'signal'], 'pull')
>>> plt.close(drawn.figure)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from mpl_toolkits.axes_grid1 import make_axes_locatable
except ImportError as err:  # matplotlib is an optional extra
    raise ImportError("zcache.plot needs matplotlib, which is not installed: pip install zcache[plot]") from err
from scipy import stats

from .._engine.data import Data
from .._engine.tf_internals import leave_to_python
from ..amplitude import AmplitudePdf
from ..inference import Contour, ProfileScan, PValues, UpperLimit
from ..minimize import FitResult
from ..models import Model, ProductPdf, SumPdf
from ..toys import ToyResult

__all__ = ["FitPlot", "ProfilePlot", "PullPlot", "plot_fit", "plot_projections", "plot_profile", "plot_pulls",
           "ScanPlot", "ContourPlot", "plot_scan", "plot_contour", "CLsPlot", "plot_cls"]

#: Points of the smooth model curve.
_CURVE_POINTS = 400
#: Relative tolerance under which bins count as equally wide (the y axis is then "events / width").
_UNIFORM_RTOL = 1e-6
#: The pull panel shows at least +-_PULL_RANGE.
_PULL_RANGE = 3.5
#: Room above the highest point per legend entry, as a fraction of it.
_LEGEND_HEADROOM = 0.06


@dataclass
class FitPlot:
    r"""What :func:`plot_fit` (and each projection of :func:`plot_projections`) drew.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
        The figure of the axes.
    ax : matplotlib.axes.Axes
        The main panel (data, model, components).
    ax_pulls : matplotlib.axes.Axes or None
        The pull panel below it (None with ``pulls=False``).
    edges : ndarray
        Bin edges, shape (nbins + 1,).
    counts : ndarray
        Data per bin (sums of weights for weighted data).
    errors : ndarray
        The data's error per bin: :math:`\sqrt{n}`, :math:`\sqrt{\sum w^2}`, or
        :math:`\sqrt{\mathrm{variance}}` of binned data.
    expected : ndarray
        The model's expected count per bin, :math:`N P_i`.
    pulls : ndarray
        :math:`(n_i - \mu_i)/\sigma_i` per bin; NaN where :math:`\sigma_i = 0`.
    nexpected : float
        :math:`N`: the yield of an extended model, else the events (or sum of weights) in range.
    x : ndarray or None
        Abscissae of the smooth model curve (None when the model was projected from a sample).
    curve : ndarray or None
        The curve as drawn, :math:`N\,w\,p(x)` (per reference bin width, see ``scale``).
    components : dict of str to ndarray
        Component name -> drawn values: on ``x`` when there is a smooth curve, else per bin.
    scale : ndarray
        Per bin, the factor from counts to drawn values: 1 for equal bins, else
        1 / bin width (densities, "events / unit").
    """

    figure: Figure
    ax: Axes
    ax_pulls: Axes | None
    edges: np.ndarray
    counts: np.ndarray
    errors: np.ndarray
    expected: np.ndarray
    pulls: np.ndarray
    nexpected: float
    x: np.ndarray | None = None
    curve: np.ndarray | None = None
    components: dict[str, np.ndarray] = field(default_factory=dict)
    scale: np.ndarray | None = None


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


# -- helpers ---------------------------------------------------------------------------------
def _is_binned(data: Any) -> bool:
    """A histogram by duck typing (zcache.binned.BinnedData or a look-alike), never an import."""
    return not isinstance(data, Data) and all(hasattr(data, a) for a in ("edges", "counts", "variances"))


def _obs_tuple(obs: Any) -> tuple[str, ...] | None:
    if obs is None:
        return None
    return (obs,) if isinstance(obs, str) else tuple(obs)


def _events(model: Model, data: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The events in the model's observable order, (N,) for 1-D else (N, n_obs), and their weights."""
    if isinstance(data, Data):
        x = model.space.select(data).numpy()[: data.nevents]  # padded data: the events only
        w = data.weights_data.numpy() if data.is_weighted else None
        return x, w
    x = np.asarray(data, dtype=float)
    if model.space.n_obs == 1 and x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    expected = 1 if model.space.n_obs == 1 else 2
    if x.ndim != expected or (x.ndim == 2 and x.shape[1] != model.space.n_obs):
        raise ValueError(f"The events must have shape (N,{'' if expected == 1 else f' {model.space.n_obs}'}) for "
                         f"{model.space!r}; got {x.shape}.")
    return x, None


def _edges(bins: int | Sequence[float] | np.ndarray, lower: float, upper: float) -> np.ndarray:
    if np.ndim(bins) == 0:
        if int(bins) < 1:
            raise ValueError(f"bins must be >= 1, got {bins!r}.")
        return np.linspace(lower, upper, int(bins) + 1)
    edges = np.asarray(bins, dtype=float)
    if edges.ndim != 1 or len(edges) < 2 or not np.all(np.diff(edges) > 0):
        raise ValueError("bins must be a number of bins or increasing bin edges.")
    return edges


def _histogram(values: np.ndarray, edges: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Counts and errors: sqrt(n), or sqrt(sum w^2) for weighted events."""
    counts, _ = np.histogram(values, bins=edges, weights=weights)
    if weights is None:
        return counts.astype(float), np.sqrt(counts)
    sumw2, _ = np.histogram(values, bins=edges, weights=weights**2)
    return counts.astype(float), np.sqrt(sumw2)


def _pulls(counts: np.ndarray, expected: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    pulls = np.full(len(counts), np.nan)
    ok = sigma > 0
    pulls[ok] = (counts[ok] - expected[ok]) / sigma[ok]
    return pulls


def _bin_probabilities(model: Model, edges: np.ndarray) -> np.ndarray:
    """The model's probability of each bin (Model.integrate_bins where it exists, else integrate per bin)."""
    if hasattr(model, "integrate_bins"):
        return np.asarray(model.integrate_bins(edges), dtype=float).reshape(-1)
    return np.array([float(model.integrate(a, b)) for a, b in zip(edges[:-1], edges[1:], strict=True)])


def _scale(edges: np.ndarray) -> tuple[np.ndarray, float, str]:
    """Per-bin factor to what is drawn, the curve's reference width, and the y label.

    Equal bins show counts ("events / w"); unequal ones densities ("events / unit"), so that
    a narrow bin does not look like a dip.
    """
    widths = np.diff(edges)
    if np.allclose(widths, widths[0], rtol=_UNIFORM_RTOL, atol=0.0):
        return np.ones_like(widths), float(widths[0]), f"events / {widths[0]:.3g}"
    return 1.0 / widths, 1.0, "events / unit"


def _unique_names(names: list[str]) -> list[str]:
    """Component labels, numbered where two components share a name."""
    return [f"{n} ({k})" if names.count(n) > 1 else n for k, n in enumerate(names)]


def _panels(ax: Any, pulls: bool) -> tuple[Figure, Axes, Axes | None]:
    """The main panel and the pull panel: new ones, a given pair, or the pull panel carved out of ``ax``."""
    if ax is None:
        if not pulls:
            fig, main = plt.subplots(figsize=(6.4, 4.8))
            return fig, main, None
        fig = plt.figure(figsize=(6.4, 5.6))
        grid = fig.add_gridspec(2, 1, height_ratios=(3, 1), hspace=0.05)
        main = fig.add_subplot(grid[0])
        return fig, main, fig.add_subplot(grid[1], sharex=main)
    if isinstance(ax, (tuple, list)):
        if len(ax) != 2:
            raise ValueError("ax must be an Axes or a (main, pulls) pair of Axes.")
        main, lower = ax
        return main.figure, main, lower if pulls else None
    if not pulls:
        return ax.figure, ax, None
    lower = make_axes_locatable(ax).append_axes("bottom", size="33%", pad=0.08, sharex=ax)
    return ax.figure, ax, lower


def _draw(fig: Figure, ax: Axes, ax_pulls: Axes | None, *, edges: np.ndarray, counts: np.ndarray,
          errors: np.ndarray, expected: np.ndarray, pulls: np.ndarray, nexpected: float, xlabel: str,
          label: str, x: np.ndarray | None = None, curve: np.ndarray | None = None,
          components: dict[str, np.ndarray] | None = None, steps: bool = False, data_label: str = "data") -> FitPlot:
    """Data points, the model (curve and/or steps), components, pulls; labels and legend."""
    components = components or {}
    scale, _, ylabel = _scale(edges)
    centers = 0.5 * (edges[1:] + edges[:-1])
    if x is not None:
        ax.plot(x, curve, color="C0", lw=2, label=label, zorder=3)
        for k, (name, values) in enumerate(components.items()):
            ax.plot(x, values, color=f"C{k + 1}", lw=1.5, ls="--", label=name, zorder=2)
    if steps or x is None:
        ax.stairs(expected * scale, edges, baseline=None, color="C0", lw=2 if x is None else 1,
                  label=label if x is None else f"{label} (per bin)", zorder=3)
    if x is None:
        for k, (name, values) in enumerate(components.items()):
            ax.stairs(values * scale, edges, baseline=None, color=f"C{k + 1}", lw=1.5, ls="--", label=name,
                      zorder=2)
    ax.errorbar(centers, counts * scale, yerr=errors * scale, fmt="o", color="k", ms=3, elinewidth=1,
                label=data_label, zorder=4)
    ax.set_xlim(edges[0], edges[-1])
    # Headroom for the legend, which grows with the components, so that it does not hide the peak.
    highest = max(np.max((counts + errors) * scale), np.max(expected * scale),
                  np.max(curve) if curve is not None else 0.0)
    entries = len(ax.get_legend_handles_labels()[1])
    ax.set_ylim(0.0, highest * (1.05 + _LEGEND_HEADROOM * entries) if highest > 0 else None)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small", frameon=False)
    if ax_pulls is None:
        ax.set_xlabel(xlabel)
    else:
        ok = np.isfinite(pulls)
        ax_pulls.bar(centers[ok], pulls[ok], width=np.diff(edges)[ok], color="0.55", label="pulls")
        ax_pulls.axhline(0.0, color="k", lw=0.8)
        for level in (-2.0, 2.0):
            ax_pulls.axhline(level, color="k", lw=0.6, ls=":")
        top = max(_PULL_RANGE, float(np.ceil(np.max(np.abs(pulls[ok]), initial=0.0))) + 0.5)
        ax_pulls.set_ylim(-top, top)
        ax_pulls.set_xlim(edges[0], edges[-1])
        ax_pulls.set_ylabel("pull")
        ax_pulls.set_xlabel(xlabel)
        ax.tick_params(labelbottom=False)
    return FitPlot(figure=fig, ax=ax, ax_pulls=ax_pulls, edges=edges, counts=counts, errors=errors,
                   expected=expected, pulls=pulls, nexpected=nexpected, x=x, curve=curve,
                   components=dict(components), scale=scale)


# -- plot_fit --------------------------------------------------------------------------------
def plot_fit(
    model: Model,
    data: Any,
    *,
    bins: int | Sequence[float] | np.ndarray = 50,
    components: bool = True,
    pulls: bool = True,
    ax: Axes | tuple[Axes, Axes] | None = None,
    label: str = "fit",
    data_label: str = "data",
    npoints: int = _CURVE_POINTS,
) -> FitPlot:
    r"""A 1-D model over its data: histogram with error bars, the scaled model, components, pulls.

    The model is scaled to the data: :math:`\mu_i = N P_i` per bin, with :math:`N` the
    yield of an extended model, else the number of events (sum of weights) in the model's
    range, and :math:`P_i` the model's integral over bin :math:`i`
    (``model.integrate_bins(edges)`` where the model has it, else ``model.integrate`` per
    bin). The smooth curve is :math:`N\,w\,p(x)`, and the components of a
    :class:`zcache.models.SumPdf` are :math:`N\,w\,f_k\,p_k(x)` with :math:`f_k` its
    fractions, so they add up to the curve. Pulls are :math:`(n_i-\mu_i)/\sqrt{\mu_i}`
    for unweighted counts, :math:`(n_i-\mu_i)/\sigma_i` with the data's error for
    weighted ones.

    Binned data (a ``zcache.binned.BinnedData``, or any object with ``edges``, ``counts``
    and ``variances``) bring their own bins; error bars are :math:`\sqrt{\mathrm{variances}}`,
    the expected counts per bin are drawn as steps under the smooth curve, and a model that
    is not extended is scaled to the histogram's total (divided by the model's probability of
    the histogram's range).

    Parameters
    ----------
    model : zcache.models.Model
        A one-dimensional model, at the values to show (after a fit: the fitted values).
    data : zcache.Data, BinnedData or array_like
        Unbinned events (a :class:`zcache.Data`, weighted or not, or an array of shape (N,)),
        or a histogram.
    bins : int or sequence of float
        Unbinned data: a number of equal bins over the model's range, or bin edges (unequal
        bins are drawn as densities, "events / unit"). Ignored for binned data.
    components : bool
        Draw the components of a SumPdf.
    pulls : bool
        Add the pull panel below.
    ax : matplotlib.axes.Axes or (Axes, Axes), optional
        Draw here: one Axes (the pull panel is carved out of its bottom) or a (main, pulls)
        pair; default a new figure.
    label : str
        The model's legend entry.
    data_label : str
        The data's legend entry.
    npoints : int
        Points of the smooth curve.

    Returns
    -------
    FitPlot
        The figure, the axes and what was drawn on them (counts, errors, expected counts,
        pulls, the curve and the components).

    Raises
    ------
    ValueError
        The model is not one-dimensional, the binned data's observable is not the model's, or
        ``bins`` are not usable.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.plot import plot_fit
    >>> n = zcache.Parameter("n_plotfit", 1000.0)
    >>> model = Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0, extended=n)
    >>> drawn = plot_fit(model, model.sample(1000), bins=30)
    >>> drawn.nexpected, len(drawn.pulls), round(float(drawn.expected.sum()), 6)
    (1000.0, 30, 1000.0)
    >>> plt.close(drawn.figure)
    """
    if model.space.n_obs != 1:
        raise ValueError(f"plot_fit needs a one-dimensional model; {model.space!r} has {model.space.n_obs} "
                         "observables: use plot_projections.")
    steps = _is_binned(data)  # a histogram is drawn as steps, events as points with error bars
    edges, counts, errors, poisson, nexp = _binned_counts(model, data) if steps else _event_counts(model, data, bins)
    expected = nexp * _bin_probabilities(model, edges)
    pulls_ = _pulls(counts, expected, np.sqrt(np.clip(expected, 0.0, None)) if poisson else errors)
    x, curve, comps = _curves(model, edges, nexp, int(npoints), components)
    fig, main, lower = _panels(ax, pulls)
    return _draw(fig, main, lower, edges=edges, counts=counts, errors=errors, expected=expected, pulls=pulls_,
                 nexpected=nexp, xlabel=model.space.obs[0], label=label, x=x, curve=curve, components=comps,
                 steps=steps, data_label=data_label)


def _binned_counts(model: Model, data: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, float]:
    """A histogram's edges, counts and errors, whether the errors are Poisson, and the number the model expects.

    An extended model expects its yield, any other the histogram's sum over the model's probability of its bins.
    """
    data_obs = _obs_tuple(getattr(data, "obs", None))
    if data_obs is not None and data_obs != model.space.obs:
        raise ValueError(f"The histogram's observable {data_obs} is not the model's {model.space.obs}.")
    edges = np.asarray(data.edges, dtype=float).reshape(-1)
    counts = np.asarray(data.counts, dtype=float).reshape(-1)
    variances = np.asarray(data.variances, dtype=float).reshape(-1)
    errors = np.sqrt(np.clip(variances, 0.0, None))
    poisson = bool(np.allclose(variances, counts))
    prob = _bin_probabilities(model, edges)
    nexp = float(model.get_yield()) if model.is_extended else float(counts.sum() / prob.sum())
    return edges, counts, errors, poisson, nexp


def _event_counts(model: Model, data: Any, bins: int | Sequence[float] | np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, float]:
    """Events histogrammed over the model's range: edges, counts, errors, whether unweighted, the number expected.

    An extended model expects its yield, any other the events (sum of weights) in its range.
    """
    lo, hi = model.space.lower[0], model.space.upper[0]
    x_data, weights = _events(model, data)
    edges = _edges(bins, lo, hi)
    counts, errors = _histogram(x_data, edges, weights)
    in_range = (x_data >= lo) & (x_data <= hi)
    n_in = float(in_range.sum()) if weights is None else float(weights[in_range].sum())
    nexp = float(model.get_yield()) if model.is_extended else n_in
    return edges, counts, errors, weights is None, nexp


def _curves(model: Model, edges: np.ndarray, nexp: float, npoints: int, components: bool
            ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The smooth curve ``N w p(x)`` and, for a SumPdf with ``components``, its components ``N w f_k p_k(x)``.

    The curve spans the histogram (the model's range clipped to the bins); ``w`` is the reference bin width.
    """
    lo, hi = model.space.lower[0], model.space.upper[0]
    _, ref_width, _ = _scale(edges)
    x = np.linspace(max(lo, edges[0]), min(hi, edges[-1]), npoints)
    curve = nexp * ref_width * model.pdf(x).numpy()
    comps: dict[str, np.ndarray] = {}
    if components and isinstance(model, SumPdf):
        fractions = model.fractions().numpy()
        names = _unique_names([p.name for p in model.pdfs])
        comps = {name: nexp * ref_width * f * p.pdf(x).numpy()
                 for name, f, p in zip(names, fractions, model.pdfs, strict=True)}
    return x, curve, comps


# -- plot_projections ------------------------------------------------------------------------
def _factor_of(model: Model, obs: str) -> Model | None:
    """The 1-D factor of a ProductPdf over disjoint observables that owns ``obs`` (else None)."""
    if not isinstance(model, ProductPdf):
        return None
    all_obs = [o for p in model.pdfs for o in p.space.obs]
    if len(set(all_obs)) != len(all_obs):  # factors sharing one space: no factor is a projection
        return None
    return next((p for p in model.pdfs if p.space.obs == (obs,)), None)


def _mc_weights(model: Model, mc: Any, components: bool) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    r"""MC events (M, n_obs), the model's weight per event, and each component's weight.

    AmplitudePdf: :math:`|\sum_k c_k A_k|^2` and :math:`|c_k A_k|^2` (so interference is the
    difference); SumPdf: :math:`p` and :math:`f_k p_k`; else :math:`p`. Weights of a weighted
    MC sample (efficiencies) multiply them.
    """
    values, gen = _events(model, mc)
    if values.ndim == 1:
        values = values[:, None]
    comps: dict[str, np.ndarray] = {}
    if isinstance(model, AmplitudePdf):
        matrix = model.amplitude.amplitude_matrix(mc if isinstance(mc, Data) else values).numpy()  # one row per event
        terms = matrix * model.amplitude.coupling_vector().numpy()[None, :]
        total = np.abs(terms.sum(axis=1)) ** 2
        if components:
            names = _unique_names([a.name for a in model.amplitude.amplitudes])
            comps = {n: np.abs(terms[:, k]) ** 2 for k, n in enumerate(names)}
    else:
        total = model.pdf(mc if isinstance(mc, Data) else values).numpy()
        if components and isinstance(model, SumPdf):
            fractions = model.fractions().numpy()
            names = _unique_names([p.name for p in model.pdfs])
            comps = {n: f * p.pdf(mc if isinstance(mc, Data) else values).numpy()
                     for n, f, p in zip(names, fractions, model.pdfs, strict=True)}
    inside = model.space.inside(values if model.space.n_obs > 1 else values[:, 0]).numpy()
    gen = np.ones(len(values)) if gen is None else gen
    gen = np.where(inside, gen, 0.0)
    return values, total * gen, {n: w * gen for n, w in comps.items()}


def _uniform_sample(model: Model, n: int, seed: int | None) -> np.ndarray:
    """Events uniform in the model's space (its box, cut to the space's own ``inside``)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.array(model.space.lower), np.array(model.space.upper)
    box = lo + (hi - lo) * rng.uniform(size=(int(n), len(lo)))
    inside = model.space.inside(box if len(lo) > 1 else box[:, 0]).numpy()
    return box[inside]


def plot_projections(
    model: Model,
    data: Any,
    *,
    bins: int | Sequence[float] | np.ndarray = 50,
    mc: Any = None,
    variables: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
    components: bool = True,
    pulls: bool = True,
    axes: Sequence[Any] | None = None,
    label: str = "fit",
    data_label: str = "data",
    n_mc: int = 200_000,
    seed: int | None = 0,
) -> list[FitPlot]:
    r"""The 1-D projections of a model of several observables over its data, with pulls.

    Per projection: the data's histogram with :math:`\sqrt{n}` error bars, the model's
    projection scaled to :math:`N` (the yield of an extended model, else the events in the
    model's space) and the pulls :math:`(n_i-\mu_i)/\sqrt{\mu_i}`.

    The model is projected

    - for a :class:`zcache.models.ProductPdf` over disjoint observables (a rectangular
      space), exactly: the projection on an observable is its 1-D factor, drawn as a smooth
      curve, :math:`\mu_i` its integral over the bin;
    - otherwise from a Monte Carlo sample uniform over the space, each event weighted by the
      model's density: :math:`\mu_i = N \sum_{j\in i} w_j / \sum_j w_j`, drawn as steps. The
      sample is ``mc`` if given (for a weighted :class:`zcache.Data`, its weights multiply the
      model's: an efficiency), else the normalization (phase-space) sample of a
      :class:`zcache.amplitude.AmplitudePdf`, else ``n_mc`` events drawn uniformly in the
      space. The components are those of a SumPdf (:math:`f_k p_k`) or the coherent terms
      :math:`|c_k A_k|^2` of an AmplitudePdf, on the same scale as the total (their sum
      differs from it by the interference).

    Parameters
    ----------
    model : zcache.models.Model
        The model, at the values to show.
    data : zcache.Data or array_like
        The events (an array: shape (N, n_obs), columns in the model's order).
    bins : int or sequence of float
        Bins per projection: a number (over the observable's range, or the range of a
        variable's values) or bin edges.
    mc : zcache.Data or array_like, optional
        A sample uniform over the model's space (phase space) to project with.
    variables : mapping of str to callable, optional
        Projections on functions of the observables instead of the observables themselves:
        label -> ``f(events)`` with ``events`` of shape (N, n_obs), returning shape (N,)
        (e.g. the lower and higher of two symmetric invariant masses). Always projected
        from the sample.
    components : bool
        Draw the components.
    pulls : bool
        Add a pull panel below each projection.
    axes : sequence, optional
        One entry per projection: an Axes (the pull panel is carved out of its bottom) or a
        (main, pulls) pair; default a new figure with the projections side by side.
    label : str
        The model's legend entry.
    data_label : str
        The data's legend entry.
    n_mc : int
        Size of the uniform sample drawn when the model brings none.
    seed : int or None
        Seed of that sample.

    Returns
    -------
    list of FitPlot
        One per projection (``x`` and ``curve`` None where projected from the sample,
        ``components`` then per bin).

    Raises
    ------
    ValueError
        ``axes`` has the wrong length, or the events have the wrong shape.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from zcache.models import Space, Gaussian, ProductPdf
    >>> from zcache.plot import plot_projections
    >>> model = ProductPdf([Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0), Gaussian(Space("y", -3.0, 3.0), 0.5, 0.8)])
    >>> drawn = plot_projections(model, model.sample(2000), bins=30)
    >>> [d.ax_pulls.get_xlabel() for d in drawn], [float(d.counts.sum()) for d in drawn]
    (['x', 'y'], [2000.0, 2000.0])
    >>> plt.close(drawn[0].figure)
    """
    x_data, w_data = _events(model, data)
    if x_data.ndim == 1:
        x_data = x_data[:, None]
    inside = model.space.inside(x_data if model.space.n_obs > 1 else x_data[:, 0]).numpy()
    n_in = float(inside.sum()) if w_data is None else float(w_data[inside].sum())
    nexp = float(model.get_yield()) if model.is_extended else n_in
    projections = _projections(model, variables, mc)
    if axes is not None and len(axes) != len(projections):
        raise ValueError(f"axes needs one entry per projection ({len(projections)}), got {len(axes)}.")
    mc_parts = None  # (values, weights, component weights, total weight) of the sample that projects the model
    if any(factor is None for _, _, factor in projections):
        if mc is None:
            mc = model.phasespace if isinstance(model, AmplitudePdf) else _uniform_sample(model, n_mc, seed)
        mc_values, mc_w, mc_comps = _mc_weights(model, mc, components)
        mc_parts = (mc_values, mc_w, mc_comps, mc_w.sum())
    panels = _projection_panels(len(projections), pulls) if axes is None else [_panels(a, pulls) for a in axes]
    out = []
    for (name, func, factor), (fig, main, lower) in zip(projections, panels, strict=True):
        values = np.asarray(func(x_data), dtype=float)
        edges, expected, x, curve, comps = _projected(model, name, func, factor, values, bins, nexp, mc_parts)
        counts, errors = _histogram(values, edges, w_data)
        sigma = np.sqrt(np.clip(expected, 0.0, None)) if w_data is None else errors
        out.append(_draw(fig, main, lower, edges=edges, counts=counts, errors=errors, expected=expected,
                         pulls=_pulls(counts, expected, sigma), nexpected=nexp, xlabel=name, label=label, x=x,
                         curve=curve, components=comps,
                         data_label=data_label))
    return out


def _projections(model: Model, variables: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None, mc: Any
                 ) -> list[tuple[str, Callable[[np.ndarray], np.ndarray], Model | None]]:
    """(name, function of the events, the model's factor for it or None) per projection.

    Without ``variables`` one per observable; the factor of a ProductPdf over that observable projects the model
    exactly (unless ``mc`` is given), else (None) a weighted sample does.
    """
    if variables is not None:
        return [(name, func, None) for name, func in variables.items()]
    return [(o, (lambda v, k=k: v[:, k]), None if mc is not None else _factor_of(model, o))
            for k, o in enumerate(model.space.obs)]


def _projection_panels(n: int, pulls: bool) -> list[tuple[Figure, Axes, Axes | None]]:
    """A new figure with ``n`` panels side by side, each with a pull panel below if ``pulls``."""
    fig = plt.figure(figsize=(5.4 * n, 5.4 if pulls else 4.4))
    grid = fig.add_gridspec(2 if pulls else 1, n, height_ratios=(3, 1) if pulls else None, hspace=0.05, wspace=0.3)
    panels = []
    for k in range(n):
        main = fig.add_subplot(grid[0, k])
        panels.append((fig, main, fig.add_subplot(grid[1, k], sharex=main) if pulls else None))
    return panels


def _projected(model: Model, name: str, func: Callable[[np.ndarray], np.ndarray], factor: Model | None,
               values: np.ndarray, bins: int | Sequence[float] | np.ndarray, nexp: float, mc_parts: Any
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, dict[str, np.ndarray]]:
    """One projection of the model: the bin edges, expected counts, the curve (a factor) or the components (a sample).

    A factor is integrated over the bins of its observable's range and drawn as a curve; a sample's projection is
    histogrammed over the range of the data and the sample, with its components.
    """
    if factor is not None:
        k = model.space.obs.index(name)
        edges = _edges(bins, model.space.lower[k], model.space.upper[k])
        expected = nexp * _bin_probabilities(factor, edges)
        _, ref_width, _ = _scale(edges)
        x = np.linspace(edges[0], edges[-1], _CURVE_POINTS)
        return edges, expected, x, nexp * ref_width * factor.pdf(x).numpy(), {}
    mc_values, mc_w, mc_comps, mc_total = mc_parts
    mc_values_k = np.asarray(func(mc_values), dtype=float)
    both = np.concatenate([values, mc_values_k[mc_w != 0]])
    edges = _edges(bins, float(both.min()), float(both.max()))
    expected = nexp * np.histogram(mc_values_k, bins=edges, weights=mc_w)[0] / mc_total
    comps = {n: nexp * np.histogram(mc_values_k, bins=edges, weights=w)[0] / mc_total for n, w in mc_comps.items()}
    return edges, expected, None, None, comps


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
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
    else:
        fig = ax.figure
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
        grid = np.linspace(x[0], x[-1], _CURVE_POINTS)
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
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
    else:
        fig = ax.figure
    centers = 0.5 * (edges[1:] + edges[:-1])
    filled = counts > 0  # empty bins are not drawn
    ax.errorbar(centers[filled], counts[filled], yerr=np.sqrt(counts[filled]), fmt="o", color="k", ms=3,
                label=f"{n} toys", zorder=3)
    grid = np.linspace(edges[0], edges[-1], _CURVE_POINTS)
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
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
    else:
        fig = ax.figure
    order = np.argsort(scan.values)
    x, delta = scan.values[order], scan.delta[order]
    (points,) = ax.plot(x, delta, "o-", color="k", ms=3, label="profile", zorder=3)
    bad = ~scan.converged[order]
    if bad.any():
        ax.plot(x[bad], delta[bad], "x", color="C3", ms=8, label="not converged", zorder=4)
    parabola = None
    if np.isfinite(scan.error) and scan.error > 0:
        grid = np.linspace(x[0], x[-1], _CURVE_POINTS)
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
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
    else:
        fig = ax.figure
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
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
    else:
        fig = ax.figure
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
