"""zcache.shapes: Chebyshev, Bernstein, KDE1D and HistogramPdf against numpy / scipy references.

Every expected value comes from an independent reference: ``numpy.polynomial.chebyshev``,
the Bernstein basis written out with ``scipy.special.comb`` and ``scipy.interpolate.BPoly``,
``scipy.stats.gaussian_kde``, ``numpy.histogram`` arithmetic, ``scipy.integrate.quad`` and
``numdifftools``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numdifftools as nd
import numpy as np
import pytest
import scipy.integrate
import scipy.interpolate
import scipy.special
import scipy.stats
import tensorflow as tf
from helpers import traced

import zcache
from zcache.exceptions import DensityError, FitError, ModelError, ParameterValueError
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Space, set_seed
from zcache.shapes import KDE1D, Bernstein, Chebyshev, HistogramPdf

KS_MIN_P = 1e-3  # fixed seeds: the draws are deterministic, the threshold only has to be sane
RTOL = 1e-11


# == independent references (numpy / scipy only) ================================================
def cheb_ref(x, coeffs, lo, hi):
    """numpy's chebval after mapping [lo, hi] onto [-1, 1], constant term 1."""
    t = (2.0 * np.asarray(x, float) - lo - hi) / (hi - lo)
    return np.polynomial.chebyshev.chebval(t, [1.0, *coeffs])


def cheb_primitive(coeffs, lo, hi):
    """The antiderivative by numpy's Chebyshev class on the domain [lo, hi] (its own mapping)."""
    return np.polynomial.Chebyshev([1.0, *coeffs], domain=[lo, hi]).integ()


def bern_ref(x, coeffs, lo, hi):
    """sum_i b_i C(n, i) t^i (1 - t)^(n - i), t = (x - lo) / (hi - lo), written out."""
    t = (np.asarray(x, float) - lo) / (hi - lo)
    n = len(coeffs) - 1
    return sum(b * scipy.special.comb(n, i) * t**i * (1.0 - t) ** (n - i) for i, b in enumerate(coeffs))


def bern_primitive(coeffs, lo, hi):
    """The antiderivative by scipy.interpolate.BPoly (one interval [lo, hi])."""
    return scipy.interpolate.BPoly(np.asarray(coeffs, float)[:, None], [lo, hi]).antiderivative()


def quad(f, a, b):
    value, err = scipy.integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-13, limit=200)
    assert err <= 1e-11 * abs(value) + 1e-300
    return value


class Poly:
    """A polynomial case: the class, its space, coefficients and numpy references."""

    def __init__(self, id_, cls, lo, hi, coeffs):
        self.id, self.cls, self.lo, self.hi, self.coeffs = id_, cls, lo, hi, list(coeffs)
        self.ref = cheb_ref if cls is Chebyshev else bern_ref
        self.primitive = cheb_primitive if cls is Chebyshev else bern_primitive

    def model(self, **extra):
        pars = [zcache.Parameter(f"{self.id}_k{i}", v) for i, v in enumerate(self.coeffs)]
        return self.cls(Space("x", self.lo, self.hi), pars, **extra), pars

    def pdf(self, x, coeffs=None):
        return self.ref(x, self.coeffs if coeffs is None else coeffs, self.lo, self.hi)

    def quad(self, a, b, coeffs=None):
        return quad(lambda v: float(self.pdf(np.array([v]), coeffs)[0]), a, b)

    def norm(self, coeffs=None):
        return self.quad(self.lo, self.hi, coeffs)


POLYS = [
    Poly("cheb3", Chebyshev, 1.0, 4.0, [0.3, -0.2, 0.1]),
    Poly("cheb5", Chebyshev, -2.0, 7.0, [-0.4, 0.25, 0.1, -0.05, 0.02]),
    Poly("cheb1", Chebyshev, 0.0, 1.0, [0.9]),
    Poly("bern4", Bernstein, 0.0, 5.0, [1.0, 0.4, 2.0, 0.3, 1.5]),
    Poly("bern7", Bernstein, -3.0, -1.0, [0.2, 1.1, 0.7, 0.05, 0.9, 1.6, 0.4, 2.2]),
    Poly("bern0", Bernstein, 2.0, 3.0, [2.5]),
]
BY_ID = {p.id: p for p in POLYS}


def polys(ids=None, slow=()):
    """Parametrize ``case`` with the polynomials named in ``ids`` (all by default), those in ``slow`` marked slow."""
    chosen = POLYS if ids is None else [BY_ID[i] for i in ids]
    return pytest.mark.parametrize(
        "case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.id in slow else []) for c in chosen])


def kde_reference(points, lo, hi, bandwidth="scott", weights=None):
    """scipy's gaussian_kde of all points, truncated to [lo, hi] and renormalized there: (pdf, cdf, kde)."""
    if isinstance(bandwidth, str):
        kde = scipy.stats.gaussian_kde(points, bw_method=bandwidth, weights=weights)
    else:  # ours: the kernel's standard deviation; scipy's scalar: a factor times the data's std
        probe = scipy.stats.gaussian_kde(points, weights=weights)
        std = math.sqrt(float(probe.covariance[0, 0])) / probe.factor
        kde = scipy.stats.gaussian_kde(points, bw_method=bandwidth / std, weights=weights)
    mass = kde.integrate_box_1d(lo, hi)

    def pdf(x):
        return kde(np.asarray(x, float)) / mass

    def cdf(x):
        return np.array([kde.integrate_box_1d(lo, v) for v in np.atleast_1d(x)]) / mass

    return pdf, cdf, kde


def hist_reference(counts, edges, x):
    """counts / (sum * widths) in the bin of each x (numpy.histogram's half-open bins), 0 outside."""
    counts, edges, x = np.asarray(counts, float), np.asarray(edges, float), np.asarray(x, float)
    density = counts / (counts.sum() * np.diff(edges))
    out = np.zeros_like(x)
    for i in range(counts.size):
        last = i == counts.size - 1
        sel = (x >= edges[i]) & ((x <= edges[i + 1]) if last else (x < edges[i + 1]))
        out[sel] = density[i]
    return out


def hist_cdf(counts, edges, x):
    """The histogram's CDF: linear inside each bin (np.interp of the cumulative fractions)."""
    cum = np.concatenate([[0.0], np.cumsum(counts)]) / np.sum(counts)
    return np.interp(x, edges, cum)


RNG = np.random.default_rng(2718)
KDE_POINTS = np.concatenate([RNG.normal(1.0, 0.6, 300), RNG.exponential(1.5, 200) + 2.0])  # some beyond hi
KDE_WEIGHTS = RNG.uniform(0.2, 2.0, KDE_POINTS.size)
KDE_LO, KDE_HI = -0.5, 5.0
H_EDGES = np.array([0.0, 0.5, 1.5, 2.0, 3.5, 4.0, 6.0, 7.0, 10.0])
H_COUNTS = np.array([12.0, 40.0, 33.0, 0.0, 71.0, 18.0, 25.0, 5.0])


# == polynomial densities =========================================================================
@polys()
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_polynomial_pdf_matches_reference(case, mode):
    """pdf (traced or eager) equals the numpy reference over quad's normalization, ~1e-11 relative."""
    model, _ = case.model()
    x = np.concatenate([np.linspace(case.lo, case.hi, 301), [case.lo, case.hi]])
    data = zcache.Data(x, obs="x")
    ours = traced(lambda: model.pdf(data))().numpy()
    np.testing.assert_allclose(ours, case.pdf(x) / case.norm(), rtol=RTOL, atol=0.0)
    np.testing.assert_allclose(model.unnormalized_pdf(x).numpy(), case.pdf(x), rtol=1e-12, atol=1e-14)


@polys()
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_polynomial_normalization_and_sub_ranges(case):
    """integrate() is 1 to 1e-8; integrate(a, b) over sub-ranges equals quad / norm and numpy's antiderivative."""
    model, _ = case.model()
    assert float(model.integrate()) == pytest.approx(1.0, abs=1e-8)
    z = case.norm()
    prim = case.primitive(case.coeffs, case.lo, case.hi)
    np.testing.assert_allclose(float(model.normalization()), prim(case.hi) - prim(case.lo), rtol=1e-12)
    cuts = np.linspace(case.lo, case.hi, 6)
    for a, b in [*zip(cuts[:-1], cuts[1:], strict=True), (cuts[1], cuts[4]), (case.lo - 1.0, cuts[2])]:
        a_in = max(a, case.lo)
        np.testing.assert_allclose(float(model.integrate(a, b)), case.quad(a_in, b) / z, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(float(model.integrate(a, b)), (prim(b) - prim(a_in)) / z, rtol=1e-10, atol=1e-15)


def test_chebyshev_empty_coefficients_is_flat_and_degrees():
    """No coefficients: the flat density 1/(hi - lo); degree counts the coefficients (Bernstein: minus one)."""
    flat = Chebyshev(Space("x", -1.0, 3.0), [])
    np.testing.assert_allclose(flat.pdf(np.array([-1.0, 0.2, 3.0])).numpy(), 0.25, rtol=1e-15)
    assert flat.degree == 0 and BY_ID["cheb5"].model()[0].degree == 5 and BY_ID["bern4"].model()[0].degree == 4


# == vectorized integrals over bin edges (all four shapes) =========================================
def _all_models():
    """id -> (model, reference of the normalized integral over [a, b])."""
    out = {}
    for case in (BY_ID["cheb5"], BY_ID["bern7"]):
        model, _ = case.model()
        prim, z = case.primitive(case.coeffs, case.lo, case.hi), case.norm()
        out[case.id] = (model, case.lo, case.hi, lambda a, b, prim=prim, z=z: (prim(b) - prim(a)) / z)
    _, _, kde = kde_reference(KDE_POINTS, KDE_LO, KDE_HI, weights=KDE_WEIGHTS)
    mass = kde.integrate_box_1d(KDE_LO, KDE_HI)
    out["kde"] = (KDE1D(Space("x", KDE_LO, KDE_HI), KDE_POINTS, weights=KDE_WEIGHTS), KDE_LO, KDE_HI,
                  lambda a, b: kde.integrate_box_1d(a, b) / mass)
    out["hist"] = (HistogramPdf(Space("x", H_EDGES[0], H_EDGES[-1]), H_COUNTS, H_EDGES), H_EDGES[0], H_EDGES[-1],
                   lambda a, b: hist_cdf(H_COUNTS, H_EDGES, b) - hist_cdf(H_COUNTS, H_EDGES, a))
    return out


@pytest.mark.parametrize("which", ["cheb5", pytest.param("bern7", marks=pytest.mark.slow), "kde", "hist"])  # bern7: 2.3 s
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_integral_broadcasts_over_bin_edges(which, mode):
    """_integral(lower_edges, upper_edges) with 1-D float64 tensors equals the per-bin integrals and the reference."""
    model, lo, hi, ref = _all_models()[which]
    edges = np.linspace(lo, hi, 24)  # not the histogram's edges: bins straddle them
    lo_t, hi_t = tf.constant(edges[:-1]), tf.constant(edges[1:])
    vec = traced(lambda: model._integral(lo_t, hi_t))().numpy()
    assert vec.shape == (23,)
    per_bin = np.array([float(model._integral(a, b)) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    np.testing.assert_allclose(vec, per_bin, rtol=1e-13, atol=1e-300)
    norm = float(model.normalization())
    expected = np.array([ref(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    np.testing.assert_allclose(vec / norm, expected, rtol=1e-9, atol=1e-14)
    assert vec.sum() / norm == pytest.approx(1.0, rel=1e-12)
    # and a 2-D array of limits keeps its shape
    grid = traced(lambda: model._integral(tf.reshape(lo_t[:22], [2, 11]), tf.reshape(hi_t[:22], [2, 11])))().numpy()
    np.testing.assert_allclose(grid.ravel(), per_bin[:22], rtol=1e-13, atol=1e-300)


# == gradients ====================================================================================
def _ref_loglik(case, x, coeffs):
    prim = case.primitive(coeffs, case.lo, case.hi)
    return float(np.sum(np.log(case.ref(x, coeffs, case.lo, case.hi))) - x.size * math.log(prim(case.hi) - prim(case.lo)))


@polys(["cheb3", "cheb5", "bern4", "bern7"], slow=("cheb5", "bern4", "bern7"))  # graph: 1.4-3 s a case
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_gradient_wrt_coefficients(case, mode):
    """d sum_log_pdf / d coefficients (traced or eager) against numdifftools on the numpy reference."""
    model, pars = case.model()
    x = np.random.default_rng(5).uniform(case.lo, case.hi, 200)
    data = zcache.Data(x, obs="x")
    ours = traced(lambda: zcache.gradient(lambda: model.sum_log_pdf(data), pars))().numpy()
    expected = nd.Gradient(lambda c: _ref_loglik(case, x, list(c)))(np.array(case.coeffs))
    np.testing.assert_allclose(ours, expected, rtol=1e-7, atol=1e-7)
    # the normalization's gradient alone, against central differences of numpy's antiderivative
    grad_norm = zcache.gradient(lambda: model.normalization(), pars).numpy()
    for i, got in enumerate(grad_norm):
        h = 1e-4
        up, down = list(case.coeffs), list(case.coeffs)
        up[i] += h
        down[i] -= h
        pu, pd = case.primitive(up, case.lo, case.hi), case.primitive(down, case.lo, case.hi)
        fd = ((pu(case.hi) - pu(case.lo)) - (pd(case.hi) - pd(case.lo))) / (2.0 * h)
        assert got == pytest.approx(fd, rel=1e-8, abs=1e-10)


# == caching ======================================================================================
def _norm_cache(model):
    found = [c for c in model.__zcache_evaluate__() if c.name.endswith("normalization")]
    assert len(found) == 1
    return found[0]


@polys(["cheb3", "bern4"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_set_value_never_stale(case, mode):
    """After set_value of a coefficient the pdf equals the reference at the new value; nothing recomputes without one."""
    model, pars = case.model()
    x1, x2 = np.linspace(case.lo, case.hi, 37), np.linspace(case.lo, case.hi, 11)[1:-1]
    d1, d2 = zcache.Data(x1, obs="x"), zcache.Data(x2, obs="x")
    both = traced(lambda: (model.pdf(d1), model.pdf(d2)))
    norm = _norm_cache(model)
    p1, _ = (t.numpy() for t in both())
    np.testing.assert_allclose(p1, case.pdf(x1) / case.norm(), rtol=RTOL)
    for i in (1, len(pars) - 1):
        new = list(case.coeffs)
        new[i] = case.coeffs[i] + 0.15
        pars[i].set_value(new[i])
        before = norm.stats["misses"]
        p1_new, p2_new = (t.numpy() for t in both())
        assert not np.allclose(p1_new, p1)
        np.testing.assert_allclose(p1_new, case.pdf(x1, new) / case.norm(new), rtol=RTOL)
        np.testing.assert_allclose(p2_new, case.pdf(x2, new) / case.norm(new), rtol=RTOL)
        assert norm.stats["misses"] == before + 1  # one normalization for both datasets
        pars[i].set_value(case.coeffs[i])
        p1 = both()[0].numpy()
        np.testing.assert_allclose(p1, case.pdf(x1) / case.norm(), rtol=RTOL)
    misses = norm.stats["misses"]
    both()
    assert norm.stats["misses"] == misses  # nothing changed: all hits


# == sampling =====================================================================================
def _ks_pvalue(sample, cdf_values):
    """KS p-value of a sorted sample whose reference CDF at the sample points is ``cdf_values``."""
    def cdf(v):
        return np.interp(v, sample, cdf_values)  # exact at the sample points, all kstest evaluates

    return scipy.stats.kstest(sample, cdf).pvalue


@polys(["cheb5", "bern4", "bern7"], slow=("cheb5", "bern7"))  # 1.4-2 s a case
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_polynomial_sample_follows_reference(case):
    """A seeded accept-reject sample lies in the space and passes a KS test against numpy's CDF."""
    model, _ = case.model()
    set_seed(31)
    x = np.sort(model.sample(4000).numpy().ravel())
    assert x.min() >= case.lo and x.max() <= case.hi
    prim = case.primitive(case.coeffs, case.lo, case.hi)
    cdf = (prim(x) - prim(case.lo)) / (prim(case.hi) - prim(case.lo))
    assert _ks_pvalue(x, cdf) > KS_MIN_P


# == KDE1D ========================================================================================
KDE_CASES = {
    "scott": dict(bandwidth="scott"),
    "silverman": dict(bandwidth="silverman"),
    "scott_weighted": dict(bandwidth="scott", weights=KDE_WEIGHTS),
    "silverman_weighted": dict(bandwidth="silverman", weights=KDE_WEIGHTS),
    "fixed": dict(bandwidth=0.35),
    "fixed_weighted": dict(bandwidth=0.2, weights=KDE_WEIGHTS),
}


@pytest.mark.parametrize("kind", list(KDE_CASES))
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_kde_matches_scipy(kind, mode):
    """pdf equals scipy's gaussian_kde (same rule and weights) truncated to the space and renormalized."""
    options = KDE_CASES[kind]
    pdf_ref, _, kde = kde_reference(KDE_POINTS, KDE_LO, KDE_HI, options["bandwidth"], options.get("weights"))
    model = KDE1D(Space("x", KDE_LO, KDE_HI), KDE_POINTS, **options)
    assert model.bandwidth == pytest.approx(math.sqrt(float(kde.covariance[0, 0])), rel=1e-12)
    x = np.linspace(KDE_LO, KDE_HI, 257)
    data = zcache.Data(x, obs="x")
    ours = traced(lambda: model.pdf(data))().numpy()
    np.testing.assert_allclose(ours, pdf_ref(x), rtol=1e-10, atol=0.0)
    assert float(model.integrate()) == pytest.approx(1.0, abs=1e-8)
    for a, b in [(KDE_LO, 0.3), (0.3, 2.0), (1.9, KDE_HI), (2.5, 2.6)]:
        expected = kde.integrate_box_1d(a, b) / kde.integrate_box_1d(KDE_LO, KDE_HI)
        np.testing.assert_allclose(float(model.integrate(a, b)), expected, rtol=1e-10)


def test_kde_from_weighted_data_and_two_column_shape():
    """A weighted zcache.Data gives its column and weights; an (N, 1) array equals the (N,) one."""
    space = Space("x", KDE_LO, KDE_HI)
    data = zcache.Data(np.stack([KDE_POINTS, -KDE_POINTS], axis=1), obs=["y", "x"], weights=KDE_WEIGHTS)
    from_data = KDE1D(space, data)  # picks column "x": the negated points
    pdf_ref, _, _ = kde_reference(-KDE_POINTS, KDE_LO, KDE_HI, "scott", KDE_WEIGHTS)
    x = np.linspace(KDE_LO, KDE_HI, 41)
    np.testing.assert_allclose(from_data.pdf(x).numpy(), pdf_ref(x), rtol=1e-10)
    column = KDE1D(space, KDE_POINTS[:, None], bandwidth=0.3)
    np.testing.assert_allclose(column.pdf(x).numpy(), KDE1D(space, KDE_POINTS, bandwidth=0.3).pdf(x).numpy(),
                               rtol=1e-15)
    assert column.n_kernels == KDE_POINTS.size


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_kde_blocks_of_events_match_scipy(mode):
    """More (event, kernel) pairs than one block (2^22): the blocked evaluation (last one padded) equals scipy."""
    rng = np.random.default_rng(8)
    points = rng.normal(0.0, 1.0, 2500)
    x = np.sort(rng.uniform(-3.0, 3.0, 4001))  # 1e7 pairs: 3 blocks of 2^22 // 2500 = 1677 events, the last padded
    model = KDE1D(Space("x", -3.0, 3.0), points, bandwidth="silverman")
    pdf_ref, _, _ = kde_reference(points, -3.0, 3.0, "silverman")
    data = zcache.Data(x, obs="x")
    ours = traced(lambda: model.pdf(data))().numpy()
    assert ours.shape == x.shape
    np.testing.assert_allclose(ours, pdf_ref(x), rtol=1e-10)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_kde_sample_follows_reference(weighted):
    """Exact sampling: in the space, KS test against scipy's truncated CDF; kernels beyond the space are used."""
    weights = KDE_WEIGHTS if weighted else None
    model = KDE1D(Space("x", KDE_LO, KDE_HI), KDE_POINTS, weights=weights)
    _, cdf_ref, _ = kde_reference(KDE_POINTS, KDE_LO, KDE_HI, "scott", weights)
    set_seed(77)
    x = np.sort(model.sample(3000).numpy().ravel())
    assert x.min() >= KDE_LO and x.max() <= KDE_HI
    assert _ks_pvalue(x, cdf_ref(x)) > KS_MIN_P


def test_kde_sample_far_tail_kernel():
    """A single kernel far below the space: events follow its truncated tail (inverse CDF from the small side)."""
    model = KDE1D(Space("x", 4.0, 6.0), np.array([0.0]), bandwidth=1.0)
    set_seed(3)
    x = np.sort(model.sample(2000).numpy().ravel())
    assert np.all(np.isfinite(x)) and x.min() >= 4.0 and x.max() <= 6.0
    ref = scipy.stats.truncnorm(4.0, 6.0)
    assert _ks_pvalue(x, ref.cdf(x)) > KS_MIN_P


# == HistogramPdf =================================================================================
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_histogram_pdf_matches_numpy(mode):
    """pdf equals counts / (sum * widths) in numpy.histogram's bins (edges included), 0 outside; integrals too."""
    model = HistogramPdf(Space("x", H_EDGES[0], H_EDGES[-1]), H_COUNTS, H_EDGES)
    x = np.concatenate([np.linspace(H_EDGES[0], H_EDGES[-1], 203), H_EDGES, H_EDGES[1:-1] - 1e-12])
    data = zcache.Data(x, obs="x")
    ours = traced(lambda: model.pdf(data))().numpy()
    np.testing.assert_allclose(ours, hist_reference(H_COUNTS, H_EDGES, x), rtol=1e-14, atol=0.0)
    outside = model.pdf(np.array([H_EDGES[0] - 1.0, H_EDGES[-1] + 0.5])).numpy()
    assert outside.tolist() == [0.0, 0.0]
    assert float(model.integrate()) == pytest.approx(1.0, abs=1e-12)
    for a, b in [(0.2, 0.3), (0.25, 3.7), (2.0, 3.5), (6.5, 10.0), (-1.0, 0.75)]:
        expected = hist_cdf(H_COUNTS, H_EDGES, b) - hist_cdf(H_COUNTS, H_EDGES, a)
        np.testing.assert_allclose(float(model.integrate(a, b)), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(model.counts, H_COUNTS)
    np.testing.assert_array_equal(model.edges, H_EDGES)


def test_histogram_from_hist_and_boost_histogram():
    """A hist.Hist (also weighted) and a boost_histogram.Histogram give the pdf of their values and edges."""
    hist = pytest.importorskip("hist")
    bh = pytest.importorskip("boost_histogram")
    rng = np.random.default_rng(4)
    values = rng.normal(5.0, 2.0, 5000)
    h = hist.Hist(hist.axis.Variable(H_EDGES, name="x"))
    h.fill(values)  # entries outside go to the flow bins, which are left out
    counts, _ = np.histogram(values, bins=H_EDGES)
    space = Space("x", H_EDGES[0], H_EDGES[-1])
    x = np.linspace(H_EDGES[0], H_EDGES[-1], 97)
    expected = hist_reference(counts, H_EDGES, x)
    np.testing.assert_allclose(HistogramPdf(space, h).pdf(x).numpy(), expected, rtol=1e-14)
    b = bh.Histogram(bh.axis.Regular(10, 0.0, 10.0))
    b.fill(values)
    counts_b, edges_b = np.histogram(values, bins=10, range=(0.0, 10.0))
    np.testing.assert_allclose(HistogramPdf(Space("x", 0.0, 10.0), b).pdf(x).numpy(),
                               hist_reference(counts_b, edges_b, x), rtol=1e-14)
    weights = rng.uniform(0.5, 1.5, values.size)
    hw = hist.Hist(hist.axis.Variable(H_EDGES), storage=hist.storage.Weight())
    hw.fill(values, weight=weights)
    counts_w, _ = np.histogram(values, bins=H_EDGES, weights=weights)
    np.testing.assert_allclose(HistogramPdf(space, hw).pdf(x).numpy(), hist_reference(counts_w, H_EDGES, x),
                               rtol=1e-12)
    with pytest.raises(ModelError, match="1-D"):
        HistogramPdf(space, hist.Hist(hist.axis.Regular(2, 0, 1), hist.axis.Regular(2, 0, 1)))
    with pytest.raises(ModelError, match="own edges"):
        HistogramPdf(space, h, H_EDGES)


def test_histogram_sample_bin_occupancy_and_shape():
    """Exact sampling: chi-square of the bin occupancy (empty bins stay empty) and KS against the linear CDF."""
    model = HistogramPdf(Space("x", H_EDGES[0], H_EDGES[-1]), H_COUNTS, H_EDGES, extended=500.0)
    set_seed(11)
    x = np.sort(model.sample(20000).numpy().ravel())
    assert x.min() >= H_EDGES[0] and x.max() <= H_EDGES[-1]
    observed, _ = np.histogram(x, bins=H_EDGES)
    expected = x.size * H_COUNTS / H_COUNTS.sum()
    assert np.all(observed[H_COUNTS == 0] == 0)
    keep = H_COUNTS > 0
    assert scipy.stats.chisquare(observed[keep], expected[keep]).pvalue > KS_MIN_P
    assert _ks_pvalue(x, hist_cdf(H_COUNTS, H_EDGES, x)) > KS_MIN_P
    assert model.is_extended and float(model.get_yield()) == 500.0


# == bad input ====================================================================================
SPACE = Space("x", 0.0, 1.0)
BAD_INPUT: list[tuple[str, Callable, type, str]] = [
    ("cheb_2d", lambda: Chebyshev(Space(["x", "y"], [0, 0], [1, 1]), [0.1]), ModelError, "one-dimensional"),
    ("cheb_not_space", lambda: Chebyshev((0.0, 1.0), [0.1]), ModelError, "Space"),
    ("cheb_scalar", lambda: Chebyshev(SPACE, 0.1), ModelError, "sequence"),
    ("cheb_string", lambda: Chebyshev(SPACE, ["a"]), ModelError, "Parameter or a number"),
    ("cheb_nan", lambda: Chebyshev(SPACE, [0.1, float("nan")]), ParameterValueError, "finite"),
    ("bern_empty", lambda: Bernstein(SPACE, []), ModelError, "at least 1"),
    ("bern_zero", lambda: Bernstein(SPACE, [0.0, 0.0, 0.0]), ParameterValueError, "non-zero"),
    ("bern_inf", lambda: Bernstein(SPACE, [1.0, float("inf")]), ParameterValueError, "finite"),
    ("kde_empty", lambda: KDE1D(SPACE, np.array([])), ModelError, "no data"),
    ("kde_nan", lambda: KDE1D(SPACE, np.array([0.1, np.nan])), ModelError, "NaN"),
    ("kde_2d", lambda: KDE1D(SPACE, np.ones((3, 2))), ModelError, "one-dimensional"),
    ("kde_bw_zero", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), bandwidth=0.0), ParameterValueError, "positive"),
    ("kde_bw_negative", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), bandwidth=-0.2), ParameterValueError, "positive"),
    ("kde_bw_nan", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), bandwidth=float("nan")), ParameterValueError,
     "positive"),
    ("kde_bw_rule", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), bandwidth="normal"), ModelError, "scott"),
    ("kde_no_spread", lambda: KDE1D(SPACE, np.array([0.3, 0.3])), ParameterValueError, "bandwidth="),
    ("kde_one_point", lambda: KDE1D(SPACE, np.array([0.3])), ParameterValueError, "bandwidth="),
    ("kde_weights_len", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), weights=[1.0]), ModelError, "one weight"),
    ("kde_weights_neg", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), weights=[1.0, -1.0]), ModelError, "negative"),
    ("kde_weights_zero", lambda: KDE1D(SPACE, np.array([0.1, 0.5]), weights=[0.0, 0.0]), ModelError, "sum to 0"),
    ("kde_far", lambda: KDE1D(SPACE, np.array([100.0, 101.0]), bandwidth=0.1), ModelError, "too far"),
    ("hist_negative", lambda: HistogramPdf(SPACE, [1.0, -1.0], [0.0, 0.5, 1.0]), ModelError, "negative"),
    ("hist_zero", lambda: HistogramPdf(SPACE, [0.0, 0.0], [0.0, 0.5, 1.0]), ModelError, "all counts are 0"),
    ("hist_nan", lambda: HistogramPdf(SPACE, [1.0, np.nan], [0.0, 0.5, 1.0]), ModelError, "NaN"),
    ("hist_edges_order", lambda: HistogramPdf(SPACE, [1.0, 1.0], [0.0, 0.5, 0.5]), ModelError, "increasing"),
    ("hist_edges_count", lambda: HistogramPdf(SPACE, [1.0, 1.0], [0.0, 1.0]), ModelError, "3 edges"),
    ("hist_no_edges", lambda: HistogramPdf(SPACE, [1.0, 1.0]), ModelError, "edges"),
    ("hist_cover", lambda: HistogramPdf(SPACE, [1.0, 1.0], [0.0, 0.5, 0.9]), ModelError, "cover the space"),
    ("hist_cover_low", lambda: HistogramPdf(SPACE, [1.0, 1.0], [-0.1, 0.5, 1.0]), ModelError, "cover the space"),
]


@pytest.mark.parametrize(("make", "error", "match"), [b[1:] for b in BAD_INPUT], ids=[b[0] for b in BAD_INPUT])
def test_bad_input_raises_and_changes_nothing(make, error, match):
    """Each bad input raises the named error with a hint, and adds nothing to the dependency graph."""
    before = zcache.dependency_graph().number_of_nodes()
    with pytest.raises(error, match=match):
        make()
    assert zcache.dependency_graph().number_of_nodes() == before


def test_bad_coefficient_parameters_are_left_unchanged():
    """A refused Bernstein (all coefficients 0) leaves its Parameters' values as they were."""
    pars = [zcache.Parameter(f"zero_b{i}", 0.0) for i in range(3)]
    with pytest.raises(ParameterValueError):
        Bernstein(SPACE, pars)
    assert [float(p) for p in pars] == [0.0, 0.0, 0.0]
    pars[1].set_value(0.5)
    model = Bernstein(SPACE, pars)  # now fine: (2 t (1 - t)) * 0.5, normalized
    x = np.array([0.25, 0.5])
    np.testing.assert_allclose(model.pdf(x).numpy(), bern_ref(x, [0.0, 0.5, 0.0], 0.0, 1.0) / (0.5 / 3.0), rtol=1e-13)


# -- issue 23, symptom 5: an impossible polynomial density is an error, never a number -------------
NEGATIVE_POLYNOMIALS = [
    # 1 + 2 T_2(x) = 4x^2 - 1: -1 at 0, integral 2/3, so pdf(0) was -1.5
    pytest.param(lambda: Chebyshev(Space("x", -1.0, 1.0), [0.0, 2.0]), 0.0, id="chebyshev"),
    # (1-t)^2 - 4 t (1-t) + t^2: integral 0, so pdf was +-inf
    pytest.param(lambda: Bernstein(Space("x", 0.0, 1.0), [1.0, -2.0, 1.0]), 0.5, id="bernstein-integral-0"),
]


@pytest.mark.parametrize("how", ["eager", pytest.param("zcache.function", marks=pytest.mark.slow), "tf.function",
                                 pytest.param("jit", marks=pytest.mark.slow)])  # 1.1-1.4 s a case
@pytest.mark.parametrize(("make", "at"), NEGATIVE_POLYNOMIALS)
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_negative_polynomial_density_raises(make, at, how):
    """Regression (issue 23, symptom 5): Chebyshev [0, 2] on (-1, 1) gave pdf(0) = -1.5 and
    Bernstein [1, -2, 1] (integral 0) +-inf, without a word. pdf and log_pdf raise DensityError
    (inside a plain tf.function: the failed check names it), of arrays and of Data; a loss of
    such a model is not finite (FitError from value()), never a number."""
    model = make()
    data = zcache.Data(np.array([at, at]), obs="x")

    def read():
        return model.pdf(np.array([at])), model.log_pdf(data)

    if how == "tf.function":
        with pytest.raises(tf.errors.InvalidArgumentError, match="zcache:DensityError"):
            tf.function(read)()
        return
    with zcache.set_jit_mode(how == "jit"):
        fn = read if how == "eager" else zcache.function(read, wraps="loss")
        with pytest.raises(DensityError, match="not a probability density"):
            fn()
        with pytest.raises(FitError, match="NaN or infinite"):
            UnbinnedNLL(model, data).value()


@pytest.mark.slow  # 2 s: a fit
def test_fit_does_not_end_valid_at_a_negative_density():
    """A Chebyshev fit whose best likelihood lies beyond the point where the series dips below
    zero between the events (1 + c2 T_2 < 0 at x = 0 for c2 > 1, no event there) stops at the
    edge as an invalid fit: the normalization is NaN wherever the polynomial is negative anywhere
    in its space, so the loss is NaN there and MIGRAD steps back."""
    rs = np.random.default_rng(5)
    x = rs.uniform(-1.0, 1.0, 600)
    x = x[np.abs(x) > 0.6]  # nothing near 0: the log-likelihood alone keeps growing with c2
    c2 = zcache.Parameter("c2_dip", 0.1)
    model = Chebyshev(Space("x", -1.0, 1.0), [0.0, c2])
    result = Minuit().minimize(UnbinnedNLL(model, zcache.Data(x, obs="x")))
    grid = np.linspace(-1.0, 1.0, 2001)
    lowest = float(tf.reduce_min(model.unnormalized_pdf(grid)))
    assert not (result.valid and lowest < 0.0)
    assert result.values["c2_dip"] <= 1.0 + 1e-6  # never past the dip
    assert not result.valid
