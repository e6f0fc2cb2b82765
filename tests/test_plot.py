"""zcache.plot: what is drawn equals independent numpy / scipy computations.

Every number is read back from the matplotlib artists (error bars, lines, steps, pull bars)
and compared with a reference built from numpy histograms and scipy.stats distributions of
the truncated densities, not with zcache.
"""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.stats  # noqa: E402
from matplotlib.container import BarContainer, ErrorbarContainer  # noqa: E402
from matplotlib.patches import StepPatch  # noqa: E402

import zcache  # noqa: E402
from zcache.amplitude import (  # noqa: E402
    AmplitudePdf,
    CoherentSum,
    ComplexParameter,
    DalitzKinematics,  # noqa: E402
    NonResonant,
)
from zcache.loss import UnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.models import Exponential, Gaussian, ProductPdf, Space, SumPdf  # noqa: E402
from zcache.plot import plot_fit, plot_profile, plot_projections, plot_pulls  # noqa: E402
from zcache.toys import ToyResult  # noqa: E402

LO, HI = 0.0, 10.0
MU, SIGMA, LAM, FRAC = 5.0, 0.6, -0.3, 0.35
RTOL = 1e-9


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# == reading back what was drawn ==================================================================
def _errorbar(ax, label):
    """x, y and the symmetric y error of the error-bar series with this label."""
    container = next(c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.get_label() == label)
    line, _, bars = container.lines
    segments = bars[0].get_segments()
    yerr = np.array([(s[1, 1] - s[0, 1]) / 2.0 for s in segments])
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float), yerr


def _line(ax, label):
    line = next(ln for ln in ax.get_lines() if ln.get_label() == label)
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def _stairs(ax, label):
    """Values and edges of the step patch with this label."""
    patch = next(p for p in ax.patches if isinstance(p, StepPatch) and p.get_label() == label)
    data = patch.get_data()
    return np.asarray(data.values, float), np.asarray(data.edges, float)


def _pull_bars(ax):
    """Bar centres and heights of the pull panel."""
    bars = next(c for c in ax.containers if isinstance(c, BarContainer))
    return (np.array([r.get_x() + r.get_width() / 2.0 for r in bars.patches]),
            np.array([r.get_height() for r in bars.patches]))


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


# == references (scipy, no zcache) ================================================================
def _signal_ref():
    return scipy.stats.truncnorm((LO - MU) / SIGMA, (HI - MU) / SIGMA, loc=MU, scale=SIGMA)


def _background_ref():
    return scipy.stats.truncexpon((HI - LO) * abs(LAM), loc=LO, scale=1.0 / abs(LAM))


def _mixture_cdf(x, frac):
    return frac * _signal_ref().cdf(x) + (1.0 - frac) * _background_ref().cdf(x)


def _mixture_pdf(x, frac):
    return frac * _signal_ref().pdf(x) + (1.0 - frac) * _background_ref().pdf(x)


def _sum_model(tag, yields=None):
    space = Space("x", LO, HI)
    mu = zcache.Parameter(f"mu_{tag}", MU, lower=3.0, upper=7.0)
    sigma = zcache.Parameter(f"sigma_{tag}", SIGMA, lower=0.1, upper=2.0)
    pdfs = [Gaussian(space, mu, sigma, name="signal"), Exponential(space, LAM, name="background")]
    if yields is None:
        return SumPdf(pdfs, fracs=[zcache.Parameter(f"frac_{tag}", FRAC, lower=0.0, upper=1.0)])
    return SumPdf(pdfs, yields=[zcache.Parameter(f"n{k}_{tag}", y) for k, y in enumerate(yields)])


def _check_fit_plot(drawn, x, edges, n_expected, frac, weights=None, data_label="data"):
    """Data points, curve, components, expected counts and pulls against the references."""
    width = edges[1] - edges[0]
    counts, _ = np.histogram(x, bins=edges, weights=weights)
    if weights is None:
        errors = np.sqrt(counts)
    else:
        errors = np.sqrt(np.histogram(x, bins=edges, weights=weights**2)[0])
    centers = 0.5 * (edges[1:] + edges[:-1])
    dx, dy, dyerr = _errorbar(drawn.ax, data_label)
    np.testing.assert_allclose(dx, centers, rtol=RTOL)
    np.testing.assert_allclose(dy, counts, rtol=RTOL)
    np.testing.assert_allclose(dyerr, errors, rtol=1e-7, atol=1e-12)

    mu_ref = n_expected * np.diff(_mixture_cdf(edges, frac))
    np.testing.assert_allclose(drawn.expected, mu_ref, rtol=1e-8)
    cx, cy = _line(drawn.ax, "fit")
    np.testing.assert_allclose(cy, n_expected * width * _mixture_pdf(cx, frac), rtol=1e-8)
    assert cx[0] == pytest.approx(LO) and cx[-1] == pytest.approx(HI)

    _, sig = _line(drawn.ax, "signal")
    _, bkg = _line(drawn.ax, "background")
    np.testing.assert_allclose(sig, n_expected * width * frac * _signal_ref().pdf(cx), rtol=1e-8)
    np.testing.assert_allclose(bkg, n_expected * width * (1 - frac) * _background_ref().pdf(cx), rtol=1e-8)
    np.testing.assert_allclose(sig + bkg, cy, rtol=1e-12)

    sigma = np.sqrt(mu_ref) if weights is None else errors
    px, py = _pull_bars(drawn.ax_pulls)
    np.testing.assert_allclose(px, centers, rtol=RTOL)
    np.testing.assert_allclose(py, (counts - mu_ref) / sigma, rtol=1e-7, atol=1e-9)
    assert drawn.ax_pulls.get_xlabel() == "x" and drawn.ax_pulls.get_ylabel() == "pull"
    assert {"signal", "background", "fit"} <= set(_legend(drawn.ax))


# == plot_fit, unbinned ==============================================================================
def test_plot_fit_not_extended_matches_histogram_and_truncated_reference():
    model = _sum_model("ne")
    data = model.sample(3000)
    x = data.value().numpy()
    drawn = plot_fit(model, data, bins=40)
    assert drawn.nexpected == 3000.0
    _check_fit_plot(drawn, x, np.linspace(LO, HI, 41), 3000.0, FRAC)
    assert drawn.figure is drawn.ax.figure is drawn.ax_pulls.figure


def test_plot_fit_extended_scales_to_the_yield_not_the_event_count():
    model = _sum_model("ext", yields=[1500.0, 2700.0])
    data = model.sample(4000)  # fewer events than the yields' sum: the plot must use the yields
    drawn = plot_fit(model, data, bins=25)
    assert drawn.nexpected == pytest.approx(4200.0)
    _check_fit_plot(drawn, data.value().numpy(), np.linspace(LO, HI, 26), 4200.0, 1500.0 / 4200.0)


def test_plot_fit_counts_only_events_in_range():
    model = _sum_model("range")
    x = model.sample(1000).value().numpy()
    outside = np.array([-1.0, -0.5, 10.5])
    drawn = plot_fit(model, zcache.Data(np.concatenate([x, outside]), obs="x"), bins=20)
    assert drawn.nexpected == 1000.0
    np.testing.assert_allclose(drawn.expected, 1000.0 * np.diff(_mixture_cdf(np.linspace(LO, HI, 21), FRAC)),
                               rtol=1e-8)


def test_plot_fit_weighted_data():
    """sum of weights per bin, sqrt(sum w^2) errors, N = sum of weights, pulls by the data's error."""
    model = _sum_model("w")
    x = model.sample(2000).value().numpy()
    w = np.random.default_rng(5).uniform(0.2, 1.8, len(x))
    drawn = plot_fit(model, zcache.Data(x, obs="x", weights=w), bins=30, data_label="weighted")
    assert drawn.nexpected == pytest.approx(w.sum(), rel=1e-12)
    _check_fit_plot(drawn, x, np.linspace(LO, HI, 31), w.sum(), FRAC, weights=w, data_label="weighted")


def test_plot_fit_unequal_bins_draw_densities():
    model = _sum_model("uneq")
    x = model.sample(2000).value().numpy()
    edges = np.array([0.0, 2.0, 4.0, 4.5, 5.0, 5.5, 6.0, 8.0, 10.0])
    drawn = plot_fit(model, x, bins=edges)
    counts, _ = np.histogram(x, bins=edges)
    _, dy, _ = _errorbar(drawn.ax, "data")
    np.testing.assert_allclose(dy, counts / np.diff(edges), rtol=RTOL)
    cx, cy = _line(drawn.ax, "fit")
    np.testing.assert_allclose(cy, 2000.0 * _mixture_pdf(cx, FRAC), rtol=1e-8)
    assert drawn.ax.get_ylabel() == "events / unit"


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_plot_fit_on_given_axes():
    model = _sum_model("axes")
    data = model.sample(500)
    fig, ax = plt.subplots()
    drawn = plot_fit(model, data, bins=10, ax=ax)  # the pull panel is carved out of ax
    assert drawn.ax is ax and drawn.ax_pulls is not None and drawn.ax_pulls.figure is fig
    fig2, (top, bottom) = plt.subplots(2, 1)
    drawn2 = plot_fit(model, data, bins=10, ax=(top, bottom), components=False)
    assert drawn2.ax is top and drawn2.ax_pulls is bottom and drawn2.components == {}
    assert "signal" not in _legend(top)
    drawn3 = plot_fit(model, data, bins=10, pulls=False)
    assert drawn3.ax_pulls is None and drawn3.ax.get_xlabel() == "x"


def test_plot_fit_refuses_a_2d_model():
    model = ProductPdf([Gaussian(Space("a", 0.0, 1.0), 0.5, 0.2), Gaussian(Space("b", 0.0, 1.0), 0.5, 0.2)])
    with pytest.raises(ValueError, match="plot_projections"):
        plot_fit(model, np.zeros((3, 2)) + 0.5)


# == plot_fit, binned ================================================================================
class _Histogram:
    """A stand-in for zcache.binned.BinnedData: the documented attributes only."""

    def __init__(self, edges, counts, variances, obs="x", name="hist"):
        self.edges = np.asarray(edges, dtype=np.float64)
        self.counts = np.asarray(counts, dtype=float)
        self.variances = np.asarray(variances, dtype=float)
        self.centers = 0.5 * (self.edges[1:] + self.edges[:-1])
        self.widths = np.diff(self.edges)
        self.nbins = len(self.counts)
        self.obs = obs
        self.name = name


def _check_binned(drawn, hist, n_expected, frac, poisson=True):
    mu_ref = n_expected * np.diff(_mixture_cdf(hist.edges, frac))
    _, dy, dyerr = _errorbar(drawn.ax, "data")
    np.testing.assert_allclose(dy, hist.counts, rtol=RTOL)
    np.testing.assert_allclose(dyerr, np.sqrt(hist.variances), rtol=1e-7)
    steps, step_edges = _stairs(drawn.ax, "fit (per bin)")
    np.testing.assert_allclose(step_edges, hist.edges, rtol=RTOL)
    np.testing.assert_allclose(steps, mu_ref, rtol=1e-8)
    cx, cy = _line(drawn.ax, "fit")
    np.testing.assert_allclose(cy, n_expected * hist.widths[0] * _mixture_pdf(cx, frac), rtol=1e-8)
    sigma = np.sqrt(mu_ref) if poisson else np.sqrt(hist.variances)
    _, py = _pull_bars(drawn.ax_pulls)
    np.testing.assert_allclose(py, (hist.counts - mu_ref) / sigma, rtol=1e-7, atol=1e-9)


def test_plot_fit_binned_stand_in():
    model = _sum_model("binned")
    x = model.sample(3000).value().numpy()
    edges = np.linspace(LO, HI, 36)
    counts, _ = np.histogram(x, bins=edges)
    hist = _Histogram(edges, counts, counts)
    drawn = plot_fit(model, hist)
    _check_binned(drawn, hist, 3000.0, FRAC)
    # weighted-like variances: error bars and pulls from them
    hist2 = _Histogram(edges, counts, 2.0 * counts + 1.0, name="weighted hist")
    _check_binned(plot_fit(model, hist2), hist2, 3000.0, FRAC, poisson=False)


def test_plot_fit_binned_extended_and_partial_range():
    model = _sum_model("binned_ext", yields=[1000.0, 2500.0])
    frac = 1000.0 / 3500.0
    x = model.sample(3300).value().numpy()
    edges = np.linspace(LO, HI, 21)
    counts, _ = np.histogram(x, bins=edges)
    _check_binned(plot_fit(model, _Histogram(edges, counts, counts)), _Histogram(edges, counts, counts), 3500.0, frac)
    # not extended, histogram over part of the range: N = total / the model's probability of that part
    model2 = _sum_model("binned_part")
    sub = np.linspace(2.0, 8.0, 13)
    counts2, _ = np.histogram(x, bins=sub)
    hist = _Histogram(sub, counts2, counts2)
    n_ref = counts2.sum() / (_mixture_cdf(8.0, FRAC) - _mixture_cdf(2.0, FRAC))
    drawn = plot_fit(model2, hist)
    assert drawn.nexpected == pytest.approx(n_ref, rel=1e-8)
    _check_binned(drawn, hist, n_ref, FRAC)


def test_plot_fit_binned_wrong_observable():
    model = _sum_model("binned_obs")
    with pytest.raises(ValueError, match="observable"):
        plot_fit(model, _Histogram([0.0, 5.0, 10.0], [1, 2], [1, 2], obs="y"))


def test_plot_fit_real_binned_data():
    """The real zcache.binned.BinnedData, from numpy counts and from the sample itself."""
    from zcache.binned import BinnedData

    model = _sum_model("binned_real")
    x = model.sample(2000).value().numpy()
    edges = np.linspace(LO, HI, 26)
    counts, _ = np.histogram(x, bins=edges)
    from_sample = BinnedData.from_numpy(x, edges, obs="x")
    np.testing.assert_array_equal(from_sample.counts, counts)
    hist = BinnedData(counts, edges, obs="x")
    drawn = plot_fit(model, hist)
    np.testing.assert_allclose(drawn.counts, counts, rtol=RTOL)
    np.testing.assert_allclose(drawn.errors, np.sqrt(counts), rtol=1e-7)
    np.testing.assert_allclose(drawn.expected, 2000.0 * np.diff(_mixture_cdf(edges, FRAC)), rtol=1e-8)


# == plot_projections ================================================================================
GX = (-2.0, 4.0, 0.8, 0.9)  # lower, upper, mu, sigma
GY = (0.0, 5.0, 2.0, 1.5)


def _truncnorm(lo, hi, mu, s):
    return scipy.stats.truncnorm((lo - mu) / s, (hi - mu) / s, loc=mu, scale=s)


def _product_model(tag, extended=None):
    gx = Gaussian(Space("x", GX[0], GX[1]), zcache.Parameter(f"mux_{tag}", GX[2]), GX[3], name="gx")
    gy = Gaussian(Space("y", GY[0], GY[1]), zcache.Parameter(f"muy_{tag}", GY[2]), GY[3], name="gy")
    return ProductPdf([gx, gy], extended=extended)


def test_plot_projections_product_pdf_equals_its_factors():
    model = _product_model("proj", extended=zcache.Parameter("n_proj", 2200.0))
    data = model.sample(2000)
    x = data.value().numpy()
    drawn = plot_projections(model, data, bins=24)
    assert len(drawn) == 2 and drawn[0].figure is drawn[1].figure
    for k, (params, name) in enumerate([(GX, "x"), (GY, "y")]):
        ref = _truncnorm(*params)
        edges = np.linspace(params[0], params[1], 25)
        d = drawn[k]
        _, dy, dyerr = _errorbar(d.ax, "data")
        counts, _ = np.histogram(x[:, k], bins=edges)
        np.testing.assert_allclose(dy, counts, rtol=RTOL)
        np.testing.assert_allclose(dyerr, np.sqrt(counts), rtol=1e-7)
        cx, cy = _line(d.ax, "fit")
        np.testing.assert_allclose(cy, 2200.0 * (edges[1] - edges[0]) * ref.pdf(cx), rtol=1e-8)
        mu_ref = 2200.0 * np.diff(ref.cdf(edges))
        np.testing.assert_allclose(d.expected, mu_ref, rtol=1e-8)
        _, py = _pull_bars(d.ax_pulls)
        np.testing.assert_allclose(py, (counts - mu_ref) / np.sqrt(mu_ref), rtol=1e-7, atol=1e-9)
        assert d.ax_pulls.get_xlabel() == name


def _ref_density(v):
    return _truncnorm(*GX).pdf(v[:, 0]) * _truncnorm(*GY).pdf(v[:, 1])


def test_plot_projections_from_a_weighted_mc_sample_and_variables():
    model = _product_model("mc")
    x = model.sample(1500).value().numpy()
    rng = np.random.default_rng(11)
    mc = np.column_stack([rng.uniform(GX[0], GX[1], 20_000), rng.uniform(GY[0], GY[1], 20_000)])
    w = _ref_density(mc)
    drawn = plot_projections(model, x, bins=20, mc=mc)
    for k in range(2):
        edges = drawn[k].edges
        lo, hi = min(x[:, k].min(), mc[:, k].min()), max(x[:, k].max(), mc[:, k].max())
        np.testing.assert_allclose(edges, np.linspace(lo, hi, 21), rtol=RTOL)
        ref = 1500.0 * np.histogram(mc[:, k], bins=edges, weights=w)[0] / w.sum()
        steps, _ = _stairs(drawn[k].ax, "fit")
        np.testing.assert_allclose(steps, ref, rtol=1e-8)
        assert drawn[k].x is None
    # a function of the observables
    drawn = plot_projections(model, x, bins=15, mc=mc, variables={"x + y": lambda v: v[:, 0] + v[:, 1]},
                             pulls=False)
    (d,) = drawn
    s_mc, s_data = mc.sum(axis=1), x.sum(axis=1)
    edges = np.linspace(min(s_mc.min(), s_data.min()), max(s_mc.max(), s_data.max()), 16)
    np.testing.assert_allclose(d.edges, edges, rtol=RTOL)
    np.testing.assert_allclose(d.counts, np.histogram(s_data, bins=edges)[0], rtol=RTOL)
    np.testing.assert_allclose(d.expected, 1500.0 * np.histogram(s_mc, bins=edges, weights=w)[0] / w.sum(), rtol=1e-8)
    assert d.ax.get_xlabel() == "x + y" and d.ax_pulls is None


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_plot_projections_sum_pdf_components_from_mc():
    """A 2-D SumPdf: components f_k p_k from the sample, adding up to the total."""
    bkg = ProductPdf([Exponential(Space("x", GX[0], GX[1]), -0.2), Exponential(Space("y", GY[0], GY[1]), -0.4)],
                     name="bkg")
    model = SumPdf([_product_model("sum2d"), bkg], fracs=[0.6])
    rng = np.random.default_rng(3)
    mc = np.column_stack([rng.uniform(GX[0], GX[1], 20_000), rng.uniform(GY[0], GY[1], 20_000)])
    x = model.sample(1000).value().numpy()
    (dx, _) = plot_projections(model, x, bins=20, mc=mc)
    ref_b = (scipy.stats.truncexpon((GX[1] - GX[0]) * 0.2, loc=GX[0], scale=1 / 0.2).pdf(mc[:, 0])
             * scipy.stats.truncexpon((GY[1] - GY[0]) * 0.4, loc=GY[0], scale=1 / 0.4).pdf(mc[:, 1]))
    w_total = 0.6 * _ref_density(mc) + 0.4 * ref_b
    ref_bkg = 1000.0 * np.histogram(mc[:, 0], bins=dx.edges, weights=0.4 * ref_b)[0] / w_total.sum()
    np.testing.assert_allclose(dx.components["bkg"], ref_bkg, rtol=1e-8)
    np.testing.assert_allclose(sum(dx.components.values()), dx.expected, rtol=1e-10)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_plot_projections_amplitude_pdf_uses_its_phase_space_sample():
    """A constant amplitude: the projection is the phase-space sample's own histogram."""
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039, names=("K-", "pi+", "pi+"))
    mc = kin.sample(20_000, name="phsp_plot")
    pdf = AmplitudePdf(CoherentSum([(ComplexParameter("c_nr_plot", 1.0, floating=False), NonResonant(kin))]), mc)
    data = kin.sample(3000, name="data_plot")
    drawn = plot_projections(pdf, data, bins=30, data_label="phase space")
    mc_values, x = mc.value().numpy(), data.value().numpy()
    for k in range(2):
        d = drawn[k]
        lo = min(x[:, k].min(), mc_values[:, k].min())
        hi = max(x[:, k].max(), mc_values[:, k].max())
        np.testing.assert_allclose(d.edges, np.linspace(lo, hi, 31), rtol=RTOL)
        ref = 3000.0 * np.histogram(mc_values[:, k], bins=d.edges)[0] / len(mc_values)
        np.testing.assert_allclose(d.expected, ref, rtol=1e-8)
        np.testing.assert_allclose(d.components["NR"], ref, rtol=1e-8)  # one component: the total
        assert d.ax_pulls.get_xlabel() == ("s12", "s13")[k]
        _, dy, _ = _errorbar(d.ax, "phase space")
        np.testing.assert_allclose(dy, np.histogram(x[:, k], bins=d.edges)[0], rtol=RTOL)


def test_plot_projections_axes_must_match():
    model = _product_model("axes_n")
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="one entry per projection"):
        plot_projections(model, model.sample(100), axes=[ax])


# == plot_profile =====================================================================================
def _gauss_fit(tag, n, loss_class=UnbinnedNLL):
    mu = zcache.Parameter(f"mu_{tag}", 0.3, lower=-2.0, upper=2.0)
    x = np.random.default_rng(4).normal(0.1, 1.0, n)
    return x, Minuit().minimize(loss_class(Gaussian(Space("x", -8.0, 8.0), mu, 1.0), zcache.Data(x)))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_plot_profile_draws_the_profile_parabola_and_minos():
    """A Gaussian mean of known width: -log L is n (mu - mean)^2 / 2 exactly."""
    x, result = _gauss_fit("profile", 400)
    name = "mu_profile"
    result.minos(name)
    drawn = plot_profile(result, name, bins=9, bound=2.0)
    grid, delta, valid = result.profile(name, bins=9, bound=2.0)
    px, py = _line(drawn.ax, "profile")
    np.testing.assert_allclose(px, grid, rtol=1e-12)
    np.testing.assert_allclose(py, delta, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(py, len(x) * (px - x.mean()) ** 2 / 2.0, rtol=1e-4, atol=1e-6)
    # HESSE: the exact curvature n, centred on the fitted value (the minimizer's own precision)
    hx, hy = _line(drawn.ax, "HESSE parabola")
    np.testing.assert_allclose(hy, len(x) * (hx - result.values[name]) ** 2 / 2.0, rtol=1e-6, atol=1e-9)
    _, one_sigma = _line(drawn.ax, r"1$\sigma$")
    np.testing.assert_allclose(one_sigma, 0.5)
    minos = [ln.get_xdata()[0] for ln in drawn.ax.get_lines() if ln.get_linestyle() == "-."]
    np.testing.assert_allclose(sorted(minos), x.mean() + np.array([-1.0, 1.0]) / np.sqrt(len(x)), rtol=1e-4)
    assert drawn.ax.get_ylabel() == r"$\Delta(-\log L)$" and drawn.ax.get_xlabel() == name
    assert valid.all() and drawn.valid.all() and drawn.errordef == 0.5


@pytest.mark.slow  # 2.7 s: a second fit and profile (the parabola-and-MINOS test is the fast one)
def test_plot_profile_chi2_errordef():
    """errordef 1: Delta chi2 on the axis, the one-sigma line at 1, the parabola from the errors."""

    class Chi2Like(UnbinnedNLL):
        errordef = 1.0  # the same function read as a chi2: errors sqrt(2) larger

    x, result = _gauss_fit("chi2", 300, Chi2Like)
    drawn = plot_profile(result, "mu_chi2", bins=5, bound=1.0, minimize=False)
    _, one_sigma = _line(drawn.ax, r"1$\sigma$")
    np.testing.assert_allclose(one_sigma, 1.0)
    hx, hy = _line(drawn.ax, "HESSE parabola")
    np.testing.assert_allclose(hy, len(x) * (hx - result.values["mu_chi2"]) ** 2 / 2.0, rtol=1e-6, atol=1e-9)
    assert drawn.ax.get_ylabel() == r"$\Delta\chi^2$" and drawn.errordef == 1.0
    assert _line(drawn.ax, "scan")


# == plot_pulls ========================================================================================
def test_plot_pulls_gaussian_fit_equals_mean_and_std():
    rng = np.random.default_rng(8)
    n = 300
    table = np.zeros(n + 5, dtype=[("mu", "f8"), ("mu_err", "f8"), ("mu_pull", "f8"), ("valid", "?")])
    table["mu_pull"][:n] = rng.normal(0.2, 1.3, n)
    table["valid"][:n] = True
    table["mu_pull"][n:] = 50.0  # failed fits: left out
    drawn = plot_pulls(ToyResult(table, {"mu": 0.0}), "mu", bins=16)
    pulls = table["mu_pull"][:n]
    assert drawn.mean == pytest.approx(np.mean(pulls), rel=1e-6, abs=1e-9)
    assert drawn.width == pytest.approx(np.std(pulls), rel=1e-6)
    assert drawn.mean_error == pytest.approx(np.std(pulls) / np.sqrt(n), rel=1e-6)
    top = max(4.0, np.ceil(np.abs(pulls).max()))
    edges = np.linspace(-top, top, 17)
    counts, _ = np.histogram(pulls, bins=edges)
    dx, dy, _ = _errorbar(drawn.ax, f"{n} toys")  # the filled bins
    np.testing.assert_allclose(dy, counts[counts > 0], rtol=RTOL)
    np.testing.assert_allclose(dx, (0.5 * (edges[1:] + edges[:-1]))[counts > 0], rtol=RTOL)
    np.testing.assert_allclose(drawn.counts, counts, rtol=RTOL)
    label = next(t for t in _legend(drawn.ax) if t.startswith("Gaussian fit"))
    assert f"{np.mean(pulls):.3f}" in label and f"{np.std(pulls):.3f}" in label
    gx, gy = _line(drawn.ax, label)
    np.testing.assert_allclose(gy, n * (edges[1] - edges[0]) * scipy.stats.norm.pdf(gx, np.mean(pulls), np.std(pulls)),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="no pulls of 'sigma'"):
        plot_pulls(ToyResult(table, {"mu": 0.0}), "sigma")


# == the optional dependency ============================================================================
def test_import_without_matplotlib_says_how_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.delitem(sys.modules, "zcache.plot")
    with pytest.raises(ImportError, match=r"pip install zcache\[plot\]"):
        importlib.import_module("zcache.plot")


@pytest.mark.slow
def test_zcache_works_without_matplotlib():
    """zcache (the demo included) imports with matplotlib unimportable; only zcache.plot refuses.

    (TensorFlow itself may import matplotlib where it is installed, so the check blocks it
    rather than looking for it in sys.modules.)
    """
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "import zcache, zcache.models, zcache.minimize, zcache.toys, zcache.amplitude, demos.amplitude\n"
            "try:\n    import zcache.plot\nexcept ImportError as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          cwd=pathlib.Path(__file__).resolve().parents[1])  # demos/ is the repository's
    assert "pip install zcache[plot]" in done.stdout
