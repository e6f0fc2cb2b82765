"""zcache.binned and Model.integrate_bins against scipy.stats and iminuit.cost on the same histograms.

References are independent of zcache: bin probabilities from scipy.stats cdf differences (or
scipy.integrate.quad), losses from ``iminuit.cost`` (which returns -2 log L with errordef 1, so
zcache's values are compared through 2 x differences, and minima and errors directly) or from
numpy formulas written out here.
"""

from __future__ import annotations

import hist
import iminuit
import iminuit.cost as icost
import numdifftools as nd
import numpy as np
import pytest
import scipy.integrate
import scipy.stats
import tensorflow as tf
from helpers import slow_modes

import zcache
from zcache.binned import BinnedChi2, BinnedData, BinnedNLL, ExtendedBinnedNLL, Template
from zcache.exceptions import DataError, DataRangeError, DataShapeError, FitError, InvalidDataError, ModelError
from zcache.loss import GaussianConstraint, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, FunctionPdf, Gaussian, ProductPdf, Space, SumPdf

LO, HI = 0.0, 10.0
EDGES = np.array([-1.0, 0.0, 0.5, 1.5, 2.0, 3.5, 4.7, 5.0, 5.2, 6.0, 8.0, 9.9, 10.0, 12.0])  # beyond the space


# == numpy / scipy references =================================================================
def trunc_norm_cdf(x, mu, sigma, lo=LO, hi=HI):
    """CDF of a normal truncated to [lo, hi], 0 below and 1 above."""
    d = scipy.stats.norm(mu, sigma)
    x = np.clip(x, lo, hi)
    return (d.cdf(x) - d.cdf(lo)) / (d.cdf(hi) - d.cdf(lo))


def trunc_exp_cdf(x, lam, lo=LO, hi=HI):
    """CDF of exp(lam x) truncated to [lo, hi] (scipy.stats.expon for lam < 0, reflected for lam > 0)."""
    x = np.clip(x, lo, hi)
    if lam < 0:
        d = scipy.stats.expon(loc=lo, scale=-1.0 / lam)
        return (d.cdf(x) - d.cdf(lo)) / (d.cdf(hi) - d.cdf(lo))
    d = scipy.stats.expon(loc=-hi, scale=1.0 / lam)  # of -x
    return (d.sf(-x) - d.sf(-lo)) / (d.sf(-hi) - d.sf(-lo))


def mix_cdf(x, frac, mu, sigma, lam):
    return frac * trunc_norm_cdf(x, mu, sigma) + (1.0 - frac) * trunc_exp_cdf(x, lam)


def scaled_cdf(x, nsig, nbkg, mu, sigma, lam):
    return nsig * trunc_norm_cdf(x, mu, sigma) + nbkg * trunc_exp_cdf(x, lam)


def sample(nsig, nbkg, seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(5.0, 0.7, nsig), rng.exponential(4.0, nbkg)])
    return x[(x >= LO) & (x <= HI)]


def iminuit_fit(cost, start, limits):
    """iminuit's own fit of an iminuit cost: MIGRAD (tight), HESSE; and the errors from a
    numdifftools Hessian of the cost at its minimum (a second, more accurate reference)."""
    m = iminuit.Minuit(cost, *start.values(), name=list(start))
    m.limits = [limits[k] for k in start]
    m.strategy, m.tol = 2, 1e-6
    m.migrad()
    m.hesse()
    assert m.valid
    x = np.array(m.values)
    hess = nd.Hessian(lambda v: cost(*v), step=1e-4 * np.maximum(np.abs(x), 1.0))(x)
    nd_errors = np.sqrt(np.diag(2.0 * m.errordef * np.linalg.inv(hess)))
    return m, dict(zip(start, nd_errors, strict=True))


def assert_same_fit(result, m, nd_errors, hesse_rel=1e-4):
    """Minima equal to 1e-4 of the errors; errors equal to iminuit's HESSE to ``hesse_rel`` and to those
    of a numdifftools Hessian of iminuit's cost to 1e-5 (iminuit's HESSE, finite differences of the
    cost alone, is itself good to about 1e-4). The numdifftools reference is the covariance's diagonal:
    ``errors`` are Minuit's, mapped through the limit transform of a bounded parameter."""
    assert result.valid
    names = list(result.values)
    for name in nd_errors:
        k = names.index(name)
        err = m.errors[name]
        assert abs(result.values[name] - m.values[name]) < 1e-4 * err, name
        assert result.errors[name] == pytest.approx(err, rel=hesse_rel), name
        assert np.sqrt(result.covariance[k, k]) == pytest.approx(nd_errors[name], rel=1e-5), name


def traces(loss):
    return [f.trace_count for f in loss.functions()]


class Fixture:
    """A Gaussian + Exponential model on [LO, HI] with its parameters (fractions or yields)."""

    def __init__(self, extended=False, **start):
        s = {"frac": 0.3, "mu": 4.8, "sigma": 0.8, "lam": -0.2, "nsig": 2500.0, "nbkg": 8000.0, **start}
        self.space = Space("x", LO, HI)
        self.mu = zcache.Parameter("mu", s["mu"], lower=3.0, upper=7.0)
        self.sigma = zcache.Parameter("sigma", s["sigma"], lower=0.1, upper=3.0)
        self.lam = zcache.Parameter("lam", s["lam"], lower=-2.0, upper=-0.01)
        self.gauss = Gaussian(self.space, self.mu, self.sigma)
        self.expo = Exponential(self.space, self.lam)
        if extended:
            self.nsig = zcache.Parameter("nsig", s["nsig"], lower=0.0, upper=1e6)
            self.nbkg = zcache.Parameter("nbkg", s["nbkg"], lower=0.0, upper=1e6)
            self.model = SumPdf([self.gauss, self.expo], yields=[self.nsig, self.nbkg])
            self.params = {"nsig": self.nsig, "nbkg": self.nbkg, "mu": self.mu, "sigma": self.sigma, "lam": self.lam}
        else:
            self.frac = zcache.Parameter("frac", s["frac"], lower=0.0, upper=1.0)
            self.model = SumPdf([self.gauss, self.expo], fracs=[self.frac])
            self.params = {"frac": self.frac, "mu": self.mu, "sigma": self.sigma, "lam": self.lam}
        self.limits = {k: (p.lower, p.upper) for k, p in self.params.items()}

    def start(self):
        return {k: float(p) for k, p in self.params.items()}


# == Model.integrate_bins ======================================================================
def test_integrate_bins_gaussian_exponential(mode):
    """Truncated cdf differences; bins beyond the space are clipped (0 outside); both signs of lam."""
    space = Space("x", LO, HI)
    g = Gaussian(space, 4.2, 1.3)
    np.testing.assert_allclose(g.integrate_bins(EDGES).numpy(), np.diff(trunc_norm_cdf(EDGES, 4.2, 1.3)),
                               rtol=1e-12, atol=1e-16)
    for lam in (-0.45, 0.3, -1e-7):
        e = Exponential(space, lam)
        got = e.integrate_bins(EDGES).numpy()
        np.testing.assert_allclose(got, np.diff(trunc_exp_cdf(EDGES, lam)), rtol=1e-9 if lam == -1e-7 else 1e-12,
                                   atol=1e-16)
        assert got[0] == 0.0 and got[-1] == 0.0 and got.sum() == pytest.approx(1.0, abs=1e-14)
    # a Gaussian far in a tail: erfc differences keep their relative precision
    tail = Gaussian(space, -6.0, 0.5).integrate_bins(EDGES).numpy()
    d = scipy.stats.norm(-6.0, 0.5)
    lo, hi = np.clip(EDGES[:-1], LO, HI), np.clip(EDGES[1:], LO, HI)
    ref = (d.sf(lo) - d.sf(hi)) / (d.sf(LO) - d.sf(HI))
    np.testing.assert_allclose(tail[1:4], ref[1:4], rtol=1e-10)


def test_integrate_bins_sum_and_product():
    f = Fixture()
    ref = np.diff(mix_cdf(EDGES, 0.3, 4.8, 0.8, -0.2))
    np.testing.assert_allclose(f.model.integrate_bins(EDGES).numpy(), ref, rtol=1e-12, atol=1e-16)
    y = Fixture(extended=True)
    ref = np.diff(scaled_cdf(EDGES, 2500.0, 8000.0, 4.8, 0.8, -0.2)) / 10500.0
    np.testing.assert_allclose(y.model.integrate_bins(EDGES).numpy(), ref, rtol=1e-12, atol=1e-16)
    # ProductPdf over one 1-D space: numerical, vs quad of the product of normalized pdfs
    space = Space("x", LO, HI)
    prod = ProductPdf([Gaussian(space, 5.0, 2.0), Exponential(space, -0.3)])

    def density(x):
        return scipy.stats.norm(5.0, 2.0).pdf(x) * np.exp(-0.3 * x)

    edges = np.linspace(LO, HI, 7)
    ref = np.array([scipy.integrate.quad(density, a, b, epsabs=0, epsrel=1e-13)[0] for a, b in zip(edges[:-1], edges[1:])])
    np.testing.assert_allclose(prod.integrate_bins(edges).numpy(), ref / ref.sum(), rtol=1e-10)


def test_integrate_bins_numerical_and_cached():
    """A FunctionPdf without integral: Gauss-Legendre per bin vs quad; cached until a parameter changes."""
    calls = []
    a = zcache.Parameter("a_fn", 0.5)

    def shape(x, a):
        calls.append(1)
        return 1.0 + a * tf.sin(x) + 0.05 * x * x

    model = FunctionPdf(shape, Space("x", LO, HI), {"a": a})

    def ref(av):
        f = lambda x: 1.0 + av * np.sin(x) + 0.05 * x * x  # noqa: E731
        lo, hi = np.clip(EDGES[:-1], LO, HI), np.clip(EDGES[1:], LO, HI)
        parts = np.array([scipy.integrate.quad(f, p, q, epsabs=0, epsrel=1e-13)[0] for p, q in zip(lo, hi)])
        return parts / scipy.integrate.quad(f, LO, HI, epsabs=0, epsrel=1e-13)[0]

    np.testing.assert_allclose(model.integrate_bins(EDGES).numpy(), ref(0.5), rtol=1e-11, atol=1e-16)
    n = len(calls)
    assert n > 0
    for same in (EDGES, list(EDGES), tuple(float(e) for e in EDGES)):  # one cache for equal edges
        np.testing.assert_allclose(model.integrate_bins(same).numpy(), ref(0.5), rtol=1e-11, atol=1e-16)
    assert len(calls) == n  # nothing computed
    a.set_value(-0.3)
    np.testing.assert_allclose(model.integrate_bins(EDGES).numpy(), ref(-0.3), rtol=1e-11, atol=1e-16)
    assert len(calls) > n


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_integrate_bins_number_only_integral(mode):
    """An analytic integral written for numbers (a Python branch on the limits) is called per bin, also in a loss."""
    lam = zcache.Parameter("lam_num", -0.4)

    def integral(lower, upper, lam):
        if lower >= upper:  # fails for tensors of limits: integrate_bins falls back to one call per bin
            return tf.constant(0.0, tf.float64)
        return (tf.exp(lam * upper) - tf.exp(lam * lower)) / lam

    model = FunctionPdf(lambda x, lam: tf.exp(lam * x), Space("x", LO, HI), {"lam": lam}, integral=integral)
    np.testing.assert_allclose(model.integrate_bins(EDGES).numpy(), np.diff(trunc_exp_cdf(EDGES, -0.4)), rtol=1e-12,
                               atol=1e-16)
    n = np.arange(EDGES.size - 1, dtype=float)
    n[[0, -1]] = 0.0  # the bins outside the space
    loss = ExtendedBinnedNLL(FunctionPdf(lambda x, lam: tf.exp(lam * x), Space("x", LO, HI), {"lam": lam},
                                         integral=integral, extended=50.0), BinnedData(n, EDGES))
    cost = icost.ExtendedBinnedNLL(n, EDGES, lambda e, lam: 50.0 * trunc_exp_cdf(e, lam))
    za = float(loss.value())
    lam.set_value(-0.1)
    assert 2.0 * (za - float(loss.value())) == pytest.approx(cost(-0.4) - cost(-0.1), rel=1e-9)


def test_integrate_bins_sum_recomputes_only_the_moved_component():
    """A SumPdf reuses its components' caches: moving the Gaussian's mean recomputes no Exponential bins."""
    calls = []
    lam = zcache.Parameter("lam_count", -0.2)

    def expo(x, lam):
        calls.append(1)
        return tf.exp(lam * x)

    space = Space("x", LO, HI)
    mu = zcache.Parameter("mu_count", 5.0)
    model = SumPdf([Gaussian(space, mu, 1.0), FunctionPdf(expo, space, {"lam": lam})], fracs=[0.4])
    model.integrate_bins(EDGES)
    n = len(calls)
    mu.set_value(5.5)
    ref = 0.4 * np.diff(trunc_norm_cdf(EDGES, 5.5, 1.0)) + 0.6 * np.diff(trunc_exp_cdf(EDGES, -0.2))
    np.testing.assert_allclose(model.integrate_bins(EDGES).numpy(), ref, rtol=1e-11, atol=1e-16)
    assert len(calls) == n


def test_integrate_bins_bad_input():
    g = Gaussian(Space("x", LO, HI), 5.0, 1.0)
    for bad in ([1.0], [[0.0, 1.0], [1.0, 2.0]], [0.0, 2.0, 1.0], [0.0, 1.0, 1.0], [0.0, np.nan], "ab"):
        with pytest.raises(ModelError):
            g.integrate_bins(bad)
    two_d = ProductPdf([Gaussian(Space("m", 0.0, 1.0), 0.5, 0.1), Exponential(Space("t", 0.0, 1.0), -1.0)])
    with pytest.raises(ModelError, match="one observable"):
        two_d.integrate_bins([0.0, 1.0])


# == BinnedData =================================================================================
def test_binned_data_views_and_constructors():
    x = sample(300, 900, seed=3)
    b = BinnedData.from_numpy(x, bins=20, range=(LO, HI), name="m", obs="x")
    counts, edges = np.histogram(x, bins=20, range=(LO, HI))
    assert b.nbins == 20 and b.name == "m" and b.obs == "x"
    np.testing.assert_array_equal(b.edges, edges)
    np.testing.assert_array_equal(b.counts, counts)
    np.testing.assert_array_equal(b.variances, counts)
    np.testing.assert_allclose(b.centers, 0.5 * (edges[1:] + edges[:-1]))
    np.testing.assert_allclose(b.widths, np.diff(edges))
    assert b.edges.dtype == np.float64 and not b.edges.flags.writeable
    # a weighted zcache.Data: weighted counts, sums of squared weights
    w = np.random.default_rng(4).uniform(0.5, 2.0, x.size)
    d = BinnedData.from_numpy(zcache.Data(x, name="xw", obs="x", weights=w), bins=edges)
    np.testing.assert_allclose(d.counts, np.histogram(x, edges, weights=w)[0], rtol=1e-13)
    np.testing.assert_allclose(d.variances, np.histogram(x, edges, weights=w * w)[0], rtol=1e-13)
    assert (d.name, d.obs) == ("xw", "x")
    # a column of a two-column Data
    two = zcache.Data(np.stack([x, -x], axis=1), obs=["x", "y"])
    np.testing.assert_array_equal(BinnedData.from_numpy(two, bins=edges, obs="x").counts, counts)
    # hist with Weight storage: variances are sums of w^2; flow bins left out
    h = hist.Hist.new.Reg(20, LO, HI, name="x").Weight()
    h.fill(np.append(x, [-5.0, 50.0]), weight=np.append(w, [1.0, 1.0]))
    hb = BinnedData.from_hist(h)
    np.testing.assert_allclose(hb.counts, np.histogram(x, edges, weights=w)[0], rtol=1e-13)
    np.testing.assert_allclose(hb.variances, np.histogram(x, edges, weights=w * w)[0], rtol=1e-13)
    assert hb.obs == "x"


def test_binned_data_bad_input_changes_nothing():
    with pytest.raises(ModelError, match="increasing"):
        BinnedData([1.0, 2.0], [0.0, 2.0, 1.0])
    with pytest.raises(DataShapeError):
        BinnedData([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    with pytest.raises(InvalidDataError):
        BinnedData([1.0, np.nan], [0.0, 1.0, 2.0])
    with pytest.raises(InvalidDataError):
        BinnedData([1.0, 2.0], [0.0, np.inf, 2.0])
    with pytest.raises(DataError):
        BinnedData([1.0, -2.0], [0.0, 1.0, 2.0])  # negative counts need variances
    with pytest.raises(DataError):
        BinnedData([1.0, 2.0], [0.0, 1.0, 2.0], variances=[1.0, -1.0])
    with pytest.raises(DataShapeError):
        BinnedData.from_hist(hist.Hist.new.Reg(2, 0, 1).Reg(2, 0, 1).Double())
    with pytest.raises(InvalidDataError):
        BinnedData.from_numpy(np.array([0.1, np.nan]), bins=2)
    b = BinnedData([1.0, 2.0], [0.0, 1.0, 2.0], variances=[0.5, 0.5])
    for counts, variances, error in (([1.0, np.nan], None, InvalidDataError), ([1.0, 2.0, 3.0], None, DataShapeError),
                                     ([1.0, 2.0], [1.0], DataShapeError), ([1.0, 2.0], [1.0, -1.0], DataError)):
        with pytest.raises(error):
            b.set_counts(counts, variances)
        assert b.counts.tolist() == [1.0, 2.0] and b.variances.tolist() == [0.5, 0.5]


# == BinnedNLL / ExtendedBinnedNLL ==============================================================
@slow_modes("mode", "graph")  # graph: 3.8 s
def test_binned_nll_values_vs_iminuit(mode):
    """2 x differences equal iminuit's, empty bins included; gradient equals iminuit's (halved)."""
    f = Fixture()
    n, xe = np.histogram(sample(150, 450, seed=5), bins=40, range=(LO, HI))
    assert (n == 0).any()  # empty bins: values stay finite
    loss = BinnedNLL(f.model, BinnedData(n, xe, obs="x"))
    cost = icost.BinnedNLL(n, xe, mix_cdf)
    a, b = np.array([0.3, 4.8, 0.8, -0.2]), np.array([0.25, 5.1, 0.6, -0.3])
    params = list(f.params.values())
    za = float(loss.value())
    zcache.set_values(params, b)
    zb = float(loss.value())
    assert 2.0 * (za - zb) == pytest.approx(cost(*a) - cost(*b), rel=1e-9)
    grad = loss.gradient(params).numpy()
    np.testing.assert_allclose(2.0 * grad, nd.Gradient(lambda v: cost(*v), step=1e-6)(b), rtol=1e-6)
    assert loss.errordef == 0.5 and [p.name for p in loss.params] == list(f.params)
    assert traces(loss)[0] == (1 if mode else 0)


@slow_modes("mode", "graph")  # graph: 1.6 s
def test_extended_binned_nll_values_vs_iminuit(mode):
    f = Fixture(extended=True)
    n, xe = np.histogram(sample(150, 450, seed=6), bins=40, range=(LO, HI))
    loss = ExtendedBinnedNLL(f.model, BinnedData(n, xe))
    cost = icost.ExtendedBinnedNLL(n, xe, scaled_cdf)
    a, b = np.array([2500.0, 8000.0, 4.8, 0.8, -0.2]), np.array([140.0, 420.0, 5.1, 0.6, -0.3])
    params = list(f.params.values())
    za = float(loss.value())
    zcache.set_values(params, b)
    zb = float(loss.value())
    assert 2.0 * (za - zb) == pytest.approx(cost(*a) - cost(*b), rel=1e-9)
    # the saturated reference: 2 x value is iminuit's value itself (Baker-Cousins)
    assert 2.0 * zb == pytest.approx(cost(*b), rel=1e-9)
    assert traces(loss)[0] == (1 if mode else 0)


@pytest.mark.slow  # 4.6 s; test_loss checks constraints and sums of losses fast
def test_constraints_and_simultaneous_losses():
    """A GaussianConstraint adds its penalty; binned and unbinned losses add up in a SimultaneousLoss."""
    f = Fixture()
    x = sample(150, 450, seed=9)
    n, xe = np.histogram(x, bins=20, range=(LO, HI))
    plain = BinnedNLL(f.model, BinnedData(n, xe))
    constrained = BinnedNLL(f.model, BinnedData(n, xe), constraints=[GaussianConstraint([f.sigma], [0.7], [0.05])])
    assert float(constrained.value()) - float(plain.value()) == pytest.approx(0.5 * ((0.8 - 0.7) / 0.05) ** 2, rel=1e-9)
    unbinned = UnbinnedNLL(f.model, zcache.Data(x, obs="x"))
    total = plain + unbinned
    assert [p.name for p in total.params] == list(f.params)
    assert float(total.value()) == pytest.approx(float(plain.value()) + float(unbinned.value()), rel=1e-12)


@pytest.mark.slow  # 7 s: a fit (the values against iminuit stay in the fast loop)
def test_binned_nll_fit_vs_iminuit():
    f = Fixture()
    n, xe = np.histogram(sample(3000, 9000, seed=1), bins=40, range=(LO, HI))
    start = f.start()
    m, nd_errors = iminuit_fit(icost.BinnedNLL(n, xe, mix_cdf), start, f.limits)
    result = Minuit(tol=1e-6, strategy=2).minimize(BinnedNLL(f.model, BinnedData(n, xe)))
    assert_same_fit(result, m, nd_errors)
    assert 2.0 * result.fmin == pytest.approx(m.fval, rel=1e-8)  # half of iminuit's chi2-like minimum


@pytest.mark.slow  # 7 s: a fit
def test_extended_binned_nll_fit_vs_iminuit():
    f = Fixture(extended=True)
    n, xe = np.histogram(sample(3000, 9000, seed=2), bins=40, range=(LO, HI))
    m, nd_errors = iminuit_fit(icost.ExtendedBinnedNLL(n, xe, scaled_cdf), f.start(), f.limits)
    result = Minuit(tol=1e-6, strategy=2).minimize(ExtendedBinnedNLL(f.model, BinnedData(n, xe)))
    assert_same_fit(result, m, nd_errors)


@pytest.mark.slow  # 3.8 s
def test_binned_nll_renormalizes_over_a_partial_histogram():
    """A histogram over part of the space: BinnedNLL renormalizes over the bins, the extended NLL does not."""
    f = Fixture(extended=True)
    x = sample(800, 2000, seed=8)
    n, xe = np.histogram(x, bins=15, range=(2.0, 8.0))
    shape, ext = BinnedNLL(f.model, BinnedData(n, xe)), ExtendedBinnedNLL(f.model, BinnedData(n, xe))
    nu = 10500.0

    def multinomial(v):  # iminuit wants a cdf normalized over the histogram
        c = mix_cdf(xe, v[0], *v[1:])
        return icost.BinnedNLL(n, xe, lambda e: (mix_cdf(e, v[0], *v[1:]) - c[0]) / (c[-1] - c[0]))()

    a, b = [2500 / nu, 4.8, 0.8, -0.2], [3000 / (3000 + 7500), 5.2, 0.9, -0.1]
    ya, yb = [2500.0, 8000.0, 4.8, 0.8, -0.2], [3000.0, 7500.0, 5.2, 0.9, -0.1]
    values = []
    for y in (ya, yb):
        zcache.set_values(list(f.params.values()), y)
        values.append((float(shape.value()), float(ext.value())))
    assert 2.0 * (values[0][0] - values[1][0]) == pytest.approx(multinomial(a) - multinomial(b), rel=1e-9)
    cost = icost.ExtendedBinnedNLL(n, xe, scaled_cdf)
    assert 2.0 * (values[0][1] - values[1][1]) == pytest.approx(cost(*ya) - cost(*yb), rel=1e-9)


# two fits over toys; eager is exhaustive: make test keeps the traced loss (graph)
@slow_modes("mode", "graph", "eager", exhaustive=("eager",))
def test_binned_nll_toy_loop_no_retrace(mode):
    """set_counts on a traced loss: the value follows the new counts, nothing retraces, fits too."""
    f = Fixture()
    xe = np.linspace(LO, HI, 31)
    data = BinnedData(np.histogram(sample(300, 900, seed=10), xe)[0], xe, obs="x")
    loss = BinnedNLL(f.model, data)
    loss.value()
    before = traces(loss)
    rng = np.random.default_rng(11)
    probs = np.diff(mix_cdf(xe, 0.3, 4.8, 0.8, -0.2))
    for _ in range(3):
        n = rng.multinomial(1000, probs).astype(float)
        data.set_counts(n)
        mu = n.sum() * probs
        ref = np.sum(n[n > 0] * np.log(n[n > 0] / mu[n > 0]))  # the multinomial NLL minus the saturated one
        assert float(loss.value()) == pytest.approx(ref, rel=1e-11)
        np.testing.assert_array_equal(data.counts, n)
    assert traces(loss) == before
    first = Minuit().minimize(loss)
    after_fit = traces(loss)
    data.set_counts(rng.multinomial(1000, probs).astype(float))
    second = Minuit().minimize(loss)
    assert first.valid and second.valid and traces(loss) == after_fit
    assert second.fmin != first.fmin


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_binned_nll_bad_input():
    f = Fixture()
    xe = np.linspace(LO, HI, 5)
    with pytest.raises(ModelError, match=">= 0"):
        BinnedNLL(f.model, BinnedData([1.0, -1.0, 2.0, 3.0], xe, variances=np.ones(4)))
    with pytest.raises(ModelError, match="not extended"):
        ExtendedBinnedNLL(f.model, BinnedData([1.0, 1.0, 2.0, 3.0], xe))
    with pytest.raises(ModelError, match="'y'"):
        BinnedNLL(f.model, BinnedData([1.0, 1.0, 2.0, 3.0], xe, obs="y"))
    with pytest.raises(ModelError):
        BinnedNLL(f.model, np.array([1.0, 2.0]))
    with pytest.raises(DataRangeError):  # counts where the model predicts nothing
        BinnedNLL(f.model, BinnedData([1.0, 2.0, 3.0], [-2.0, -1.0, 5.0, 10.0]))
    # bins outside the space are fine when empty
    ok = BinnedNLL(f.model, BinnedData([0.0, 2.0, 3.0], [-2.0, -1.0, 5.0, 10.0]))
    assert np.isfinite(float(ok.value()))
    # negative counts set later: the loss refuses them when evaluated (eagerly and traced)
    data = BinnedData([1.0, 1.0, 2.0, 3.0], xe)
    loss = BinnedNLL(f.model, data)
    value = float(loss.value())
    data.set_counts([1.0, -1.0, 2.0, 3.0], variances=np.ones(4))
    with pytest.raises(ModelError, match=">= 0"):
        loss.value()
    with zcache.set_graph_mode(False), pytest.raises(ModelError, match=">= 0"):
        loss.value()
    data.set_counts([1.0, 1.0, 2.0, 3.0])
    assert float(loss.value()) == value
    # a model that predicts nothing where there are counts: a FitError, not a silent inf
    narrow = Gaussian(Space("x", LO, HI), 1.0, 0.01)
    with pytest.raises(FitError):
        BinnedNLL(narrow, BinnedData([1.0, 1.0, 2.0, 3.0], xe)).value()


# == BinnedChi2 ==================================================================================
def numpy_chi2(n, var, mu):
    keep = var > 0
    return np.sum((n[keep] - mu[keep]) ** 2 / var[keep])


@slow_modes("mode", "graph")  # graph: 3 s
def test_binned_chi2_values(mode):
    """Against the numpy formula: extended (the yields fitted) and not (scaled to the total); weighted hist."""
    x = sample(2000, 6000, seed=12)
    w = np.random.default_rng(13).uniform(0.5, 1.5, x.size)
    h = hist.Hist.new.Reg(25, LO, HI, name="x").Weight()
    h.fill(x, weight=w)
    h.view().value[3] = h.view().variance[3] = 0.0  # an empty bin: left out
    data = BinnedData.from_hist(h)
    n, var, xe = data.counts, data.variances, data.edges
    f, y = Fixture(), Fixture(extended=True)
    shape, ext = BinnedChi2(f.model, data), BinnedChi2(y.model, data)
    assert shape.errordef == 1.0 and [p.name for p in ext.params] == list(y.params)
    p = np.diff(mix_cdf(xe, 0.3, 4.8, 0.8, -0.2))
    assert float(shape.value()) == pytest.approx(numpy_chi2(n, var, n.sum() * p / p.sum()), rel=1e-12)
    assert float(ext.value()) == pytest.approx(numpy_chi2(n, var, np.diff(scaled_cdf(xe, 2500, 8000, 4.8, 0.8, -0.2))),
                                               rel=1e-12)
    zcache.set_values(list(y.params.values()), [2200.0, 6100.0, 5.1, 0.6, -0.3])
    assert float(ext.value()) == pytest.approx(numpy_chi2(n, var, np.diff(scaled_cdf(xe, 2200, 6100, 5.1, 0.6, -0.3))),
                                               rel=1e-12)
    # negative counts with variances are fine for a chi-square
    data.set_counts(n - 40.0, var)
    assert float(ext.value()) == pytest.approx(
        numpy_chi2(n - 40.0, var, np.diff(scaled_cdf(xe, 2200, 6100, 5.1, 0.6, -0.3))), rel=1e-12)
    assert traces(ext)[0] == (1 if mode else 0)


@pytest.mark.slow  # 7 s: a fit
def test_binned_chi2_fit_vs_iminuit():
    """The least-squares fit users expect: zcache vs iminuit minimizing the numpy chi2 (errordef 1)."""
    y = Fixture(extended=True)
    n, xe = np.histogram(sample(3000, 9000, seed=14), bins=40, range=(LO, HI))
    n = n.astype(float)

    def chi2(nsig, nbkg, mu, sigma, lam):
        return numpy_chi2(n, n, np.diff(scaled_cdf(xe, nsig, nbkg, mu, sigma, lam)))

    chi2.errordef = iminuit.Minuit.LEAST_SQUARES
    m, nd_errors = iminuit_fit(chi2, y.start(), y.limits)
    result = Minuit(tol=1e-6, strategy=2).minimize(BinnedChi2(y.model, BinnedData(n, xe)))
    assert_same_fit(result, m, nd_errors, hesse_rel=3e-4)  # iminuit's HESSE of this chi2: 1.3e-4 off numdifftools'
    assert result.fmin == pytest.approx(m.fval, rel=1e-8)


# == Template ===================================================================================
def templates_and_data(seed):
    rng = np.random.default_rng(seed)
    xe = np.linspace(LO, HI, 21)
    sig = np.histogram(rng.normal(5.0, 0.8, 400), xe)[0].astype(float)
    bkg = np.histogram(rng.exponential(4.0, 800), xe)[0].astype(float)
    sig[-1] = bkg[-1] = 0.0  # no template predicts the last bin: left out (as iminuit does)
    data = np.histogram(np.concatenate([rng.normal(5.0, 0.8, 300), rng.exponential(4.0, 1200)]), xe)[0].astype(float)
    return xe, sig, bkg, data


@pytest.mark.parametrize("method", [pytest.param("jsc", marks=pytest.mark.slow), "da"])  # jsc graph: 2 s
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_template_values_vs_iminuit(method, mode):
    xe, sig, bkg, n = templates_and_data(15)
    loss = Template(BinnedData(n, xe), [sig, bkg], method=method)
    assert [p.name for p in loss.params] == ["yield_template0", "yield_template1"] and loss.errordef == 0.5
    cost = icost.Template(n, xe, [sig, bkg], method=method)
    points = [np.array([300.0, 1100.0]), np.array([250.0, 1300.0]), np.array([0.0, 1400.0])]
    values = []
    for pt in points:
        zcache.set_values(loss.yields, pt)
        values.append(float(loss.value()))
    for i, j in ((0, 1), (1, 2)):
        assert 2.0 * (values[i] - values[j]) == pytest.approx(cost(*points[i]) - cost(*points[j]), rel=1e-9)
    assert 2.0 * values[0] == pytest.approx(cost(*points[0]), rel=1e-9)
    grad = loss.gradient().numpy()  # at the last point, a yield at its limit 0
    np.testing.assert_allclose(2.0 * grad[1:], nd.Gradient(lambda v: cost(0.0, *v))(points[2][1:]), rtol=1e-7)
    assert traces(loss)[0] == (1 if mode else 0)
    # the counts change: values follow without a retrace
    before = traces(loss)
    n2 = n + np.arange(n.size) % 3
    loss.data.set_counts(n2)
    zcache.set_values(loss.yields, points[0])
    assert 2.0 * float(loss.value()) == pytest.approx(icost.Template(n2, xe, [sig, bkg], method=method)(*points[0]),
                                                     rel=1e-9)
    assert traces(loss) == before


@pytest.mark.slow  # 3 s: a fit
def test_template_weighted_hist_templates_fit_vs_iminuit():
    """hist templates with Weight storage: their variances enter; fitted yields and errors as iminuit's."""
    rng = np.random.default_rng(16)
    xe, _, _, n = templates_and_data(17)
    hs = []
    for name, draw in (("sig", lambda: rng.normal(5.0, 0.8, 500)), ("bkg", lambda: rng.exponential(4.0, 900))):
        h = hist.Hist.new.Regular(20, LO, HI, name="x").Weight()
        h.name = name
        v = draw()
        h.fill(v, weight=rng.uniform(0.5, 1.5, v.size))
        hs.append(h)
    loss = Template(BinnedData(n, xe), hs, method="jsc")
    assert [p.name for p in loss.yields] == ["yield_sig", "yield_bkg"]
    weighted = [np.stack([h.values(), h.variances()], axis=-1) for h in hs]
    cost = icost.Template(n, xe, weighted, method="jsc")
    start = {"yield_sig": 700.0, "yield_bkg": 700.0}
    m, nd_errors = iminuit_fit(cost, start, {k: (0.0, np.inf) for k in start})
    result = Minuit(tol=1e-6, strategy=2).minimize(loss)
    assert_same_fit(result, m, nd_errors)


def test_template_given_yields_and_bad_input():
    xe, sig, bkg, n = templates_and_data(18)
    data = BinnedData(n, xe)
    ys = zcache.Parameter("ys", 300.0, lower=0.0)
    loss = Template(data, [sig, BinnedData(bkg, xe, name="bkg")], yields=[ys, 1200.0], method="da")
    assert loss.params == [ys] and loss.yields[1].name == "yield_bkg" and not loss.yields[1].floating
    ref = icost.Template(n, xe, [sig, bkg], method="da")(300.0, 1200.0)
    assert 2.0 * float(loss.value()) == pytest.approx(ref, rel=1e-9)
    with pytest.raises(ModelError, match="method"):
        Template(data, [sig, bkg], method="asy")
    with pytest.raises(ModelError):
        Template(data, [])
    with pytest.raises(ModelError, match="yields"):
        Template(data, [sig, bkg], yields=[ys])
    with pytest.raises(DataShapeError):
        Template(data, [sig[:-1], bkg])
    with pytest.raises(ModelError, match="edges"):
        Template(data, [BinnedData(sig, xe * 2.0), bkg])
    with pytest.raises(DataError):
        Template(data, [np.zeros_like(sig), bkg])
    with pytest.raises(ModelError, match=">= 0"):
        Template(BinnedData(np.where(np.arange(n.size) == 4, -1.0, n), xe, variances=np.ones_like(n)), [sig, bkg])


# -- issue 51: a histogram with no counts in a fit without a yield ----------------------------------
def test_binned_nll_of_a_histogram_with_zero_total_count_is_refused_at_build_and_evaluation():
    """The model is scaled to the total: with 0 counts every expected count is 0 and the NLL a constant."""
    from zcache.exceptions import EmptyDataError

    mu = zcache.Parameter("mu_zero_total", 1.5, lower=0.0, upper=3.0)
    model = Gaussian(Space("x", 0.0, 3.0), mu, 1.0)
    with pytest.raises(EmptyDataError, match="sum to zero or less.*ExtendedBinnedNLL"):
        BinnedNLL(model, BinnedData([0.0, 0.0, 0.0], [0.0, 1.0, 2.0, 3.0], name="h_zero"))
    h = BinnedData([4.0, 0.0, 2.0], [0.0, 1.0, 2.0, 3.0], name="h_later_zero")
    loss = BinnedNLL(model, h)
    good = float(loss.value())

    @zcache.function
    def traced_value():
        return loss.value()

    assert float(traced_value()) == pytest.approx(good, rel=1e-12)
    with h.set_counts([0.0, 0.0, 0.0]):
        with pytest.raises(EmptyDataError, match="h_later_zero"):
            loss.value()
        with pytest.raises(EmptyDataError, match="h_later_zero"):
            traced_value()
    assert float(loss.value()) == float(traced_value()) == pytest.approx(good, rel=1e-12)


def test_binned_chi2_without_a_yield_refuses_a_total_of_zero_or_less_and_extended_fits_allow_zero():
    from zcache.exceptions import EmptyDataError

    edges = [0.0, 1.0, 2.0, 3.0]
    mu = zcache.Parameter("mu_zero_chi2", 1.5, lower=0.0, upper=3.0)
    with pytest.raises(EmptyDataError, match="h_neg"):
        BinnedChi2(Gaussian(Space("x", 0.0, 3.0), mu, 1.0),
                   BinnedData([1.0, -3.0, 1.0], edges, variances=[1.0, 1.0, 1.0], name="h_neg"))
    # With a yield an empty histogram is a fine measurement (an upper limit): the Poisson NLL is sum(mu_i).
    nu = zcache.Parameter("nu_zero", 5.0, lower=0.0, upper=100.0)
    extended = Gaussian(Space("x", 0.0, 3.0), mu, 1.0, extended=nu)
    loss = ExtendedBinnedNLL(extended, BinnedData([0.0, 0.0, 0.0], edges, name="h_empty_ext"))
    assert float(loss.value()) == pytest.approx(5.0, rel=1e-12)
    chi2 = BinnedChi2(extended, BinnedData([0.0, 0.0, 0.0], edges, variances=[1.0, 1.0, 1.0], name="h_empty_chi"))
    probs = np.diff(scipy.stats.norm.cdf(edges, 1.5, 1.0)) / (scipy.stats.norm.cdf(3.0, 1.5, 1.0)
                                                                - scipy.stats.norm.cdf(0.0, 1.5, 1.0))
    assert float(chi2.value()) == pytest.approx(float(np.sum((5.0 * probs) ** 2)), rel=1e-10)
