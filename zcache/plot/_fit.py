"""Fit projections: data with the fitted model over one or several observables, with pulls.

:func:`plot_fit` draws a 1-D model on data, :func:`plot_projections` the 1-D projections of a model of
several observables; both share the binning, the scaling to the data and the pull panel (``_draw``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from mpl_toolkits.axes_grid1 import make_axes_locatable

from .._engine.data import Data
from .._engine.tf_internals import leave_to_python
from ..amplitude import AmplitudePdf
from ..models import Model, ProductPdf, SumPdf
from ._common import CURVE_POINTS, FIGSIZE

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
            fig, main = plt.subplots(figsize=FIGSIZE)
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
    npoints: int = CURVE_POINTS,
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
        x = np.linspace(edges[0], edges[-1], CURVE_POINTS)
        return edges, expected, x, nexp * ref_width * factor.pdf(x).numpy(), {}
    mc_values, mc_w, mc_comps, mc_total = mc_parts
    mc_values_k = np.asarray(func(mc_values), dtype=float)
    both = np.concatenate([values, mc_values_k[mc_w != 0]])
    edges = _edges(bins, float(both.min()), float(both.max()))
    expected = nexp * np.histogram(mc_values_k, bins=edges, weights=mc_w)[0] / mc_total
    comps = {n: nexp * np.histogram(mc_values_k, bins=edges, weights=w)[0] / mc_total for n, w in mc_comps.items()}
    return edges, expected, None, None, comps

leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
