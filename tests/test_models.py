"""zcache.models: spaces, densities against scipy, caching of pdf and normalization, sampling."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
import tensorflow as tf
from helpers import slow_modes, traced
from hypothesis import given, settings
from hypothesis import strategies as st

import zcache
from zcache.exceptions import DataShapeError, ModelError, ParameterValueError
from zcache.loss import UnbinnedNLL
from zcache.models import Exponential, FunctionPdf, Gaussian, Model, ProductPdf, Space, SumPdf, set_seed

KS_MIN_P = 0.01  # fixed seeds: the draws are deterministic, the threshold only has to be sane


# -- independent references ----------------------------------------------------------------
def norm_pdf(x, mu, sigma, lo, hi):
    return scipy.stats.truncnorm.pdf(x, (lo - mu) / sigma, (hi - mu) / sigma, loc=mu, scale=sigma)


def norm_cdf(x, mu, sigma, lo, hi):
    return scipy.stats.truncnorm.cdf(x, (lo - mu) / sigma, (hi - mu) / sigma, loc=mu, scale=sigma)


def exp_pdf(x, lam, lo, hi):
    x = np.asarray(x, float)
    if lam == 0.0:
        return np.full_like(x, 1.0 / (hi - lo))
    # lam e^{lam x} / (e^{lam hi} - e^{lam lo}), written relative to the upper end (no overflow)
    return lam * np.exp(lam * (x - hi)) / (1.0 - np.exp(-lam * (hi - lo)))


def exp_cdf(x, lam, lo, hi):
    x = np.asarray(x, float)
    if lam > 0:  # anchored at the upper end: no overflow for steep slopes
        return (np.exp(lam * (x - hi)) - np.exp(-lam * (hi - lo))) / -np.expm1(-lam * (hi - lo))
    return np.expm1(lam * (x - lo)) / np.expm1(lam * (hi - lo))


def pdf_cache(model, data):
    """The CachedTensor of ``model.pdf(data)``."""
    found = [c for k, c in model.__dict__.get("_zcache_caches", {}).items()
             if k[0].endswith("._cached_pdf") and k[1][1][0] is data]
    assert len(found) == 1
    return found[0]


def norm_cache(model):
    found = [c for k, c in model.__dict__.get("_zcache_caches", {}).items() if k[0].endswith(".normalization")]
    assert len(found) == 1
    return found[0]


def delta(cache, before):
    now = cache.stats
    return {"hits": now["hits"] - before["hits"], "misses": now["misses"] - before["misses"]}


# -- Space ------------------------------------------------------------------------------------
def test_space_attributes_product_and_equality():
    """A Space keeps names and limits; `*` concatenates them; equality and hash follow the content."""
    s = Space("x", 0.0, 2.0)
    assert (s.obs, s.lower, s.upper, s.n_obs, s.volume) == (("x",), (0.0,), (2.0,), 1, 2.0)
    t = s * Space(["y", "z"], [-1.0, 0.0], [1.0, 0.5])
    assert t.obs == ("x", "y", "z") and t.lower == (0.0, -1.0, 0.0) and t.upper == (2.0, 1.0, 0.5)
    assert t.n_obs == 3 and t.volume == pytest.approx(2.0)
    assert Space("x", 0, 2) == s and hash(Space("x", 0, 2)) == hash(s)
    assert Space("x", 0, 3) != s and Space("y", 0, 2) != s and s != "x"
    assert "x in [0, 2]" in repr(s)


@pytest.mark.parametrize(
    ("obs", "lower", "upper"),
    [
        ("", 0.0, 1.0),
        ([], [], []),
        (["x", "x"], [0, 0], [1, 1]),
        ([1], 0.0, 1.0),
        ("x", [0.0, 1.0], 2.0),
        (["x", "y"], 0.0, 1.0),
        ("x", 1.0, 1.0),
        ("x", 2.0, 1.0),
        ("x", -np.inf, 1.0),
        ("x", 0.0, np.nan),
        ("x", None, 1.0),
    ],
)
def test_space_validation(obs, lower, upper):
    """Malformed names or limits raise ModelError."""
    with pytest.raises(ModelError):
        Space(obs, lower, upper)


def test_space_non_numeric_limits():
    """Non-numeric limits raise ModelError like every other malformed limit."""
    with pytest.raises(ModelError):
        Space("x", "a", 1.0)


def test_space_product_shared_obs():
    """Multiplying spaces that share an observable raises ModelError."""
    with pytest.raises(ModelError):
        Space("x", 0, 1) * Space(["y", "x"], [0, 0], [1, 1])


def test_space_product_with_non_space():
    """`Space * 3` is a TypeError (NotImplemented) or a ModelError, not an AttributeError."""
    with pytest.raises((TypeError, ModelError)):
        Space("x", 0, 1) * 3


def test_space_inside():
    """inside() is per event, limits included, for (N,) and (N, n_obs) input."""
    s = Space("x", 0.0, 1.0)
    np.testing.assert_array_equal(s.inside([-0.1, 0.0, 0.5, 1.0, 1.1]).numpy(), [False, True, True, True, False])
    s2 = s * Space("y", -1.0, 1.0)
    events = np.array([[0.5, 0.0], [0.5, 1.5], [-1.0, 0.0], [1.0, -1.0]])
    np.testing.assert_array_equal(s2.inside(events).numpy(), [True, False, False, True])


def test_space_select_by_obs():
    """select() picks columns by the data's obs names, in the space's order."""
    arr = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    data = zcache.Data(arr, obs=["a", "b", "c"])
    np.testing.assert_array_equal(Space("b", 0, 9).select(data).numpy(), [2.0, 5.0])
    sel = (Space("c", 0, 9) * Space("a", 0, 9)).select(data).numpy()
    np.testing.assert_array_equal(sel, arr[:, [2, 0]])
    same = Space(["a", "b", "c"], [0] * 3, [9] * 3).select(data).numpy()
    np.testing.assert_array_equal(same, arr)
    one = zcache.Data(np.array([1.0, 2.0]), obs="x")
    np.testing.assert_array_equal(Space("x", 0, 9).select(one).numpy(), [1.0, 2.0])


def test_space_select_without_obs():
    """Without names, columns are taken in order; (N, 1) and (N,) give (N,) for one observable."""
    s = Space("x", 0, 9)
    np.testing.assert_array_equal(s.select(np.array([[1.0], [2.0]])).numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(s.select(zcache.Data(np.array([1.0, 2.0]))).numpy(), [1.0, 2.0])
    assert s.select(np.array([1, 2])).dtype == tf.float64
    arr = np.array([[1.0, 2.0]])
    np.testing.assert_array_equal((s * Space("y", 0, 9)).select(zcache.Data(arr)).numpy(), arr)


@pytest.mark.parametrize(
    ("obs", "make_data"),
    [
        ("x", lambda: zcache.Data(np.zeros((3, 2)))),  # two unnamed columns for one obs
        (["x", "y"], lambda: zcache.Data(np.zeros(3))),  # one column for two
        (["x", "y"], lambda: np.zeros((3, 3))),
        ("x", lambda: zcache.Data(np.zeros((3, 2)), obs=["a", "b"])),  # no column 'x'
        ("x", lambda: zcache.Data(np.zeros(3), obs="y")),
        (["x", "y"], lambda: zcache.Data(np.zeros(3), obs="x")),
    ],
)
def test_space_select_mismatch(obs, make_data):
    """Missing or miscounted columns raise ModelError."""
    names = [obs] if isinstance(obs, str) else obs
    space = Space(names, [0.0] * len(names), [1.0] * len(names))
    with pytest.raises(ModelError):
        space.select(make_data())


# -- Gaussian and Exponential ---------------------------------------------------------------
def test_gaussian_pdf_matches_truncnorm(mode):
    """Gaussian pdf (cached on Data, and on arrays) equals scipy's truncnorm, also after set_value."""
    lo, hi = -1.0, 4.0
    mu, sigma = zcache.Parameter("mu", 0.5), zcache.Parameter("sigma", 1.3, lower=0.01)
    g = Gaussian(Space("x", lo, hi), mu, sigma)
    arr = np.linspace(lo, hi, 41)
    data = zcache.Data(arr)
    on_data, on_array = traced(lambda: g.pdf(data)), traced(lambda: g.pdf(arr))
    for m, s in [(0.5, 1.3), (0.5, 0.4), (3.9, 0.4), (-3.0, 2.0)]:
        zcache.set_values([mu, sigma], [m, s])
        ref = norm_pdf(arr, m, s, lo, hi)
        np.testing.assert_allclose(on_data().numpy(), ref, rtol=1e-12)
        np.testing.assert_allclose(on_array().numpy(), ref, rtol=1e-12)
        np.testing.assert_allclose(g.log_pdf(data).numpy(), np.log(ref), rtol=1e-12, atol=1e-13)
    assert on_data.trace_count == (0 if mode is False else 1)


def test_exponential_pdf_matches_formula(mode):
    """Exponential pdf equals the truncated exponential density for either sign of lambda and 0 (one trace)."""
    lo, hi = -2.0, 3.0
    lam = zcache.Parameter("lam", -1.7)
    e = Exponential(Space("x", lo, hi), lam)
    arr = np.linspace(lo, hi, 31)
    data = zcache.Data(arr)
    on_data = traced(lambda: e.pdf(data))
    for value in (-1.7, -1e-3, 0.0, 0.6, 25.0, -40.0):
        lam.set_value(value)
        ref = exp_pdf(arr, value, lo, hi)
        np.testing.assert_allclose(on_data().numpy(), ref, rtol=1e-10)
        np.testing.assert_allclose(e.pdf(arr).numpy(), ref, rtol=1e-10)


def test_exponential_large_positive_slope():
    """A steep rising exponential has a finite, correct pdf and samples spread below the upper end."""
    e = Exponential(Space("x", 0.0, 10.0), 100.0)
    x = np.array([9.95, 9.99, 10.0])
    np.testing.assert_allclose(e.pdf(x).numpy(), exp_pdf(x, 100.0, 0.0, 10.0), rtol=1e-10)
    set_seed(1)
    sample = e.sample(1000).numpy()
    assert np.unique(sample).size > 990
    assert scipy.stats.kstest(sample, lambda t: exp_cdf(t, 100.0, 0.0, 10.0)).pvalue > KS_MIN_P


def test_gaussian_far_tail():
    """A Gaussian truncated to its far tail still matches truncnorm and samples continuously."""
    g = Gaussian(Space("x", 8.0, 10.0), 0.0, 1.0)
    x = np.array([8.0, 8.1, 9.0])
    np.testing.assert_allclose(g.pdf(x).numpy(), norm_pdf(x, 0.0, 1.0, 8.0, 10.0), rtol=1e-6)
    set_seed(2)
    sample = g.sample(1000).numpy()
    assert np.unique(sample).size > 990
    assert scipy.stats.kstest(sample, lambda t: norm_cdf(t, 0.0, 1.0, 8.0, 10.0)).pvalue > KS_MIN_P


@pytest.mark.parametrize("lam0", [0.0, 1e-12, 1e-8, -1e-8])
def test_exponential_gradient_near_zero_slope(lam0):
    """d/dlam of sum log p at (and next to) lam = 0 is sum(x) - N (lo + hi) / 2, also on the small-lam branch."""
    lam = zcache.Parameter("lam", lam0)
    lo, hi = 0.0, 2.0
    e = Exponential(Space("x", lo, hi), lam)
    x = zcache.Data(np.array([0.2, 0.5, 1.5]))
    grad = zcache.gradient(lambda: tf.reduce_sum(e.log_pdf(x)), [lam])
    np.testing.assert_allclose(grad.numpy(), [np.sum(x.numpy()) - 3 * (lo + hi) / 2], rtol=1e-6)


def test_gaussian_width_must_be_positive():
    """A Gaussian with sigma <= 0 (number or Parameter) raises ParameterValueError."""
    space = Space("x", 0.0, 1.0)
    for bad in (0.0, -1.0, zcache.Parameter("s_neg", -0.5), zcache.Parameter("s_zero", 0.0)):
        with pytest.raises(ParameterValueError):
            Gaussian(space, 0.5, bad)


@pytest.mark.parametrize("model", ["Gaussian", "Exponential"])
def test_one_dimensional_models_reject_other_spaces(model):
    """Gaussian/Exponential on a 2-D space raise ModelError."""
    space = Space(["x", "y"], [0, 0], [1, 1])
    with pytest.raises(ModelError):
        Gaussian(space, 0.0, 1.0) if model == "Gaussian" else Exponential(space, -1.0)


def test_model_constructor_errors():
    """A non-Space or a non-numeric parameter raises ModelError."""
    with pytest.raises(ModelError):
        FunctionPdf(lambda x: x, "x")
    with pytest.raises(ModelError):
        Gaussian(Space("x", 0, 1), "abc", 1.0)
    with pytest.raises(ModelError):
        FunctionPdf(3, Space("x", 0, 1))


@pytest.mark.parametrize("cls", [Gaussian, Exponential])
def test_builtin_model_with_non_space(cls):
    """A built-in model given a string instead of a Space raises ModelError."""
    with pytest.raises(ModelError):
        cls("x", 0.0, 1.0) if cls is Gaussian else cls("x", -1.0)


# -- integrals ------------------------------------------------------------------------------
def test_analytic_normalization_matches_quad():
    """normalization() (analytic) equals scipy.integrate.quad of the unnormalized density."""
    g = Gaussian(Space("x", -1.0, 4.0), 0.7, 0.8)
    e = Exponential(Space("x", -1.0, 4.0), -0.9)
    for model in (g, e):
        ref = scipy.integrate.quad(lambda t, m=model: float(m.unnormalized_pdf([t])[0]), -1.0, 4.0, epsrel=1e-12)[0]
        np.testing.assert_allclose(float(model.normalization()), ref, rtol=1e-10)


@pytest.mark.parametrize(
    ("lower", "upper"),
    [(0.0, 1.0), (-1.0, 4.0), (None, None), (-5.0, 0.5), (2.0, 9.0), (-9.0, 9.0), (5.0, 6.0), (-3.0, -2.0),
     (2.0, 1.0), (1.0, 1.0)],
)
def test_integrate_partial_ranges(lower, upper):
    """integrate(a, b) is the probability of [a, b] intersected with the space (0 outside it)."""
    lo, hi = -1.0, 4.0
    g = Gaussian(Space("x", lo, hi), 0.7, 0.8)
    e = Exponential(Space("x", lo, hi), -0.9)
    a = lo if lower is None else min(max(lower, lo), hi)
    b = hi if upper is None else min(max(upper, lo), hi)
    ref_g = max(norm_cdf(b, 0.7, 0.8, lo, hi) - norm_cdf(a, 0.7, 0.8, lo, hi), 0.0)
    ref_e = max(exp_cdf(b, -0.9, lo, hi) - exp_cdf(a, -0.9, lo, hi), 0.0)
    np.testing.assert_allclose(float(g.integrate(lower, upper)), ref_g, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(float(e.integrate(lower, upper)), ref_e, rtol=1e-12, atol=1e-15)


def test_integrate_wrong_number_of_limits():
    """Giving one limit to a 2-D model's integrate raises ModelError."""
    m = ProductPdf([Gaussian(Space("m", 0.0, 2.0), 1.0, 0.2), Exponential(Space("t", 0.0, 5.0), -1.0)])
    with pytest.raises(ModelError):
        m.integrate(0.0, 1.0)


# -- caching ---------------------------------------------------------------------------------
def test_normalization_cache_depends_on_parameters_only(graph_mode):
    """normalization is reused across pdf calls and set_data, recomputed when a shape parameter moves."""
    lo, hi = 0.0, 5.0
    mu, sigma = zcache.Parameter("mu", 2.0), zcache.Parameter("sigma", 1.0, lower=0.1)
    n = zcache.Parameter("n", 50.0)
    g = Gaussian(Space("x", lo, hi), mu, sigma, extended=n)
    data = zcache.Data(np.linspace(lo, hi, 11))
    pdf_of_data = traced(lambda: g.pdf(data))
    pdf_of_data()
    norm, pdf = norm_cache(g), pdf_cache(g, data)
    assert (norm.stats["misses"], pdf.stats["misses"]) == (1, 1)

    b_norm, b_pdf = norm.stats, pdf.stats
    for _ in range(3):
        g.pdf(np.array([1.0, 2.0]))  # uncached evaluation: reads the normalization cache
    pdf_of_data()
    assert delta(norm, b_norm) == {"hits": 3, "misses": 0}
    assert delta(pdf, b_pdf) == {"hits": 1, "misses": 0}

    new = np.array([0.5, 1.5, 4.5])
    data.set_data(new)
    b_norm, b_pdf = norm.stats, pdf.stats
    np.testing.assert_allclose(pdf_of_data().numpy(), norm_pdf(new, 2.0, 1.0, lo, hi), rtol=1e-12)
    assert delta(pdf, b_pdf)["misses"] == 1
    assert delta(norm, b_norm) == {"hits": 1, "misses": 0}

    n.set_value(80.0)  # the yield is no shape parameter
    assert norm.is_valid and pdf.is_valid

    sigma.set_value(0.7)
    b_norm = norm.stats
    np.testing.assert_allclose(pdf_of_data().numpy(), norm_pdf(new, 2.0, 0.7, lo, hi), rtol=1e-12)
    assert delta(norm, b_norm)["misses"] == 1


def test_pdf_cached_per_dataset():
    """pdf(Data) has one cache per dataset; pdf(array) creates none and agrees with it."""
    g = Gaussian(Space("x", -2.0, 2.0), 0.1, 0.9)
    a, b = np.linspace(-2, 2, 7), np.linspace(-1, 1, 5)
    da, db = zcache.Data(a), zcache.Data(b)
    pa, pb = g.pdf(da).numpy(), g.pdf(db).numpy()
    assert pdf_cache(g, da) is not pdf_cache(g, db)
    ncaches = len(g._zcache_caches)
    np.testing.assert_allclose(g.pdf(a).numpy(), pa, rtol=1e-15)
    np.testing.assert_allclose(g.pdf(b).numpy(), pb, rtol=1e-15)
    assert len(g._zcache_caches) == ncaches
    np.testing.assert_allclose(pa, norm_pdf(a, 0.1, 0.9, -2, 2), rtol=1e-12)
    before = pdf_cache(g, da).stats
    np.testing.assert_array_equal(g.pdf(da).numpy(), pa)
    assert delta(pdf_cache(g, da), before) == {"hits": 1, "misses": 0}


@slow_modes("mode", "graph")  # graph: 1.2 s
def test_sum_recomputes_only_the_moved_component(mode):
    """In a SumPdf a component's parameter change misses only that component's and the sum's pdf cache."""
    lo, hi = -3.0, 3.0
    mu, lam, frac = zcache.Parameter("mu", 0.2), zcache.Parameter("lam", -0.5), zcache.Parameter("f", 0.4)
    g, e = Gaussian(Space("x", lo, hi), mu, 1.0), Exponential(Space("x", lo, hi), lam)
    s = SumPdf([g, e], fracs=[frac])
    arr = np.linspace(lo, hi, 13)
    data = zcache.Data(arr)

    def ref():
        f, m, la = (float(p.value()) for p in (frac, mu, lam))
        return f * norm_pdf(arr, m, 1.0, lo, hi) + (1 - f) * exp_pdf(arr, la, lo, hi)

    pdf_of_data = traced(lambda: s.pdf(data))
    np.testing.assert_allclose(pdf_of_data().numpy(), ref(), rtol=1e-12)
    caches = {"sum": pdf_cache(s, data), "g": pdf_cache(g, data), "e": pdf_cache(e, data), "gn": norm_cache(g),
              "en": norm_cache(e)}

    def misses_after(change):
        before = {k: c.stats for k, c in caches.items()}
        change()
        np.testing.assert_allclose(pdf_of_data().numpy(), ref(), rtol=1e-12)
        return {k for k, c in caches.items() if delta(c, before[k])["misses"]}

    assert misses_after(lambda: mu.set_value(0.5)) == {"sum", "g", "gn"}
    assert misses_after(lambda: lam.set_value(-0.2)) == {"sum", "e", "en"}
    assert misses_after(lambda: frac.set_value(0.7)) == {"sum"}
    assert misses_after(lambda: None) == set()


# -- FunctionPdf and user models ---------------------------------------------------------------
def test_function_pdf_with_analytic_integral(mode):
    """FunctionPdf uses the given integral for normalization and integrate(); pdf matches the formula."""
    slope = zcache.Parameter("slope", 0.5)
    calls = []

    def integral(lower, upper, slope):
        calls.append((lower, upper))
        return (upper - lower) + 0.5 * slope * (upper**2 - lower**2)

    lin = FunctionPdf(lambda x, slope: 1.0 + slope * x, Space("x", 0.0, 2.0), {"slope": slope}, integral=integral)
    arr = np.linspace(0, 2, 9)
    data = zcache.Data(arr)
    pdf_of_data = traced(lambda: lin.pdf(data))
    for s in (0.5, -0.3):
        slope.set_value(s)
        np.testing.assert_allclose(pdf_of_data().numpy(),
                                   (1 + s * arr) / (2 + 2 * s), rtol=1e-14)
        np.testing.assert_allclose(float(lin.integrate(0.5, 1.0)), (0.5 + 0.5 * s * 0.75) / (2 + 2 * s), rtol=1e-14)
    assert (0.0, 2.0) in calls and (0.5, 1.0) in calls


def test_function_pdf_numerical_normalization(mode):
    """Without an integral the normalization is numerical, within 1e-10 of quad, also after set_value."""
    mass, width = zcache.Parameter("m", 3.3), zcache.Parameter("w", 0.2, lower=0.01)
    lo, hi = 0.0, 10.0

    def bw(x, m, w):
        return 1.0 / ((x - m) ** 2 + w**2)

    model = FunctionPdf(bw, Space("x", lo, hi), {"m": mass, "w": width})
    norm = traced(model.normalization)
    for m, w in [(3.3, 0.2), (7.9, 0.2), (5.0, 1.5)]:
        zcache.set_values([mass, width], [m, w])
        f = lambda t, m=m, w=w: 1.0 / ((t - m) ** 2 + w * w)  # noqa: E731
        ref = scipy.integrate.quad(f, lo, hi, points=[m], epsrel=1e-13, epsabs=0, limit=200)[0]
        np.testing.assert_allclose(float(norm()), ref, rtol=1e-10)
        arr = np.array([0.0, m, 9.0])
        np.testing.assert_allclose(model.pdf(zcache.Data(arr)).numpy(), 1.0 / ((arr - m) ** 2 + w * w) / ref, rtol=1e-10)
        part = scipy.integrate.quad(f, 1.0, 4.0, points=[m] if 1 < m < 4 else None, epsrel=1e-13, epsabs=0,
                                    limit=200)[0]
        np.testing.assert_allclose(float(model.integrate(1.0, 4.0)), part / ref, rtol=1e-9)


class Linear(Model):
    """A user model defining only the unnormalized density."""

    def __init__(self, space, slope):
        super().__init__(space, {"slope": slope})

    def _unnormalized_pdf(self, x):
        return 1.0 + self.params["slope"].value() * x


@slow_modes("mode", "graph")  # graph: 1.4 s
def test_user_subclass_normalization_and_sampling(mode):
    """A subclass with only _unnormalized_pdf is normalized numerically, integrates and samples correctly."""
    slope = zcache.Parameter("slope", 1.5)
    model = Linear(Space("x", 0.0, 1.0), slope)
    arr = np.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(traced(lambda: model.pdf(zcache.Data(arr)))().numpy(), (1 + 1.5 * arr) / 1.75,
                               rtol=1e-12)
    np.testing.assert_allclose(float(model.integrate(0.0, 0.5)), (0.5 + 0.75 * 0.25) / 1.75, rtol=1e-12)
    set_seed(11)
    sample = model.sample(2000).numpy()
    assert sample.shape == (2000,) and sample.min() >= 0.0 and sample.max() <= 1.0

    def cdf(s):
        return lambda x: (x + 0.5 * s * x**2) / (1 + 0.5 * s)

    assert scipy.stats.kstest(sample, cdf(1.5)).pvalue > KS_MIN_P
    assert scipy.stats.kstest(sample, cdf(-0.9)).pvalue < 1e-6  # the test has power
    assert [p.name for p in model.get_params()] == ["slope"]


def test_unnormalized_pdf_is_required():
    """A subclass without _unnormalized_pdf fails with NotImplementedError when evaluated."""

    class Empty(Model):
        pass

    with pytest.raises(NotImplementedError):
        Empty(Space("x", 0, 1)).pdf([0.5])


def test_numerical_normalization_and_sampling_need_one_observable():
    """A 2-D user model without _integral/_sample raises ModelError for normalization and sampling."""

    class Flat2D(Model):
        def _unnormalized_pdf(self, x):
            return tf.ones_like(x[:, 0])

    model = Flat2D(Space(["x", "y"], [0, 0], [1, 1]))
    with pytest.raises(ModelError):
        model.normalization()
    with pytest.raises(ModelError):
        model.sample(10)


# -- SumPdf ----------------------------------------------------------------------------------
@slow_modes("mode", "graph")  # graph: 1.7 s
def test_sum_with_fractions(mode):
    """SumPdf with K-1 fractions: pdf, fractions, integrate, not extended."""
    lo, hi = 0.0, 10.0
    space = Space("x", lo, hi)
    f1, f2 = zcache.Parameter("f1", 0.3), zcache.Parameter("f2", 0.5)
    s = SumPdf([Gaussian(space, 3.0, 1.0), Gaussian(space, 6.0, 0.5), Exponential(space, -0.3)], fracs=[f1, f2])
    arr = np.linspace(lo, hi, 21)

    def ref(x, fr):
        return fr[0] * norm_pdf(x, 3.0, 1.0, lo, hi) + fr[1] * norm_pdf(x, 6.0, 0.5, lo, hi) \
            + fr[2] * exp_pdf(x, -0.3, lo, hi)

    data = zcache.Data(arr)
    pdf_of_data = traced(lambda: s.pdf(data))
    np.testing.assert_allclose(pdf_of_data().numpy(), ref(arr, [0.3, 0.5, 0.2]), rtol=1e-12)
    f2.set_value(0.1)
    np.testing.assert_allclose(s.fractions().numpy(), [0.3, 0.1, 0.6], rtol=1e-15)
    np.testing.assert_allclose(pdf_of_data().numpy(), ref(arr, [0.3, 0.1, 0.6]), rtol=1e-12)
    np.testing.assert_allclose(s.pdf(arr).numpy(), ref(arr, [0.3, 0.1, 0.6]), rtol=1e-12)
    part = scipy.integrate.quad(lambda t: ref(t, [0.3, 0.1, 0.6]), 2.0, 7.0, epsrel=1e-12)[0]
    np.testing.assert_allclose(float(s.integrate(2.0, 7.0)), part, rtol=1e-10)
    np.testing.assert_allclose(float(s.integrate()), 1.0, rtol=1e-14)
    assert not s.is_extended
    with pytest.raises(ModelError):
        s.get_yield()
    with pytest.raises(ModelError):
        s.sample()


@slow_modes("mode", "graph")  # graph: 1.2 s
def test_sum_with_yields(mode):
    """SumPdf with yields is extended: yield = sum, fractions = yields / sum; a yield change leaves components cached."""
    lo, hi = -5.0, 5.0
    space = Space("x", lo, hi)
    n1, n2 = zcache.Parameter("n1", 300.0), zcache.Parameter("n2", 100.0)
    g1, g2 = Gaussian(space, -1.0, 0.5), Gaussian(space, 1.0, 0.8)
    s = SumPdf([g1, g2], yields=[n1, n2])
    assert s.is_extended and float(s.get_yield()) == 400.0
    np.testing.assert_allclose(s.fractions().numpy(), [0.75, 0.25], rtol=1e-15)
    arr = np.linspace(lo, hi, 11)
    data = zcache.Data(arr)
    pdf_of_data = traced(lambda: s.pdf(data))
    pdf_of_data()
    n2.set_value(300.0)
    assert float(s.get_yield()) == 600.0
    before = pdf_cache(g1, data).stats, pdf_cache(g2, data).stats
    np.testing.assert_allclose(pdf_of_data().numpy(),
                               0.5 * norm_pdf(arr, -1, 0.5, lo, hi) + 0.5 * norm_pdf(arr, 1, 0.8, lo, hi), rtol=1e-12)
    assert delta(pdf_cache(g1, data), before[0])["misses"] == 0
    assert delta(pdf_cache(g2, data), before[1])["misses"] == 0
    assert [p.name for p in s.get_params()][:2] == ["n1", "n2"]


def test_sum_of_extended_components():
    """Without fracs or yields a SumPdf of extended models borrows their yields."""
    space = Space("x", -3.0, 3.0)
    n1, n2 = zcache.Parameter("n1", 30.0), zcache.Parameter("n2", 70.0)
    s = SumPdf([Gaussian(space, -1.0, 0.5, extended=n1), Exponential(space, -0.2, extended=n2)])
    assert s.is_extended and float(s.get_yield()) == 100.0
    np.testing.assert_allclose(s.fractions().numpy(), [0.3, 0.7], rtol=1e-15)
    n1.set_value(130.0)
    np.testing.assert_allclose(float(s.get_yield()), 200.0)
    names = [p.name for p in s.get_params()]
    assert names.count("n1") == 1 and names.count("n2") == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda g, e, o: SumPdf([g]),
        lambda g, e, o: SumPdf([g, "e"], fracs=[0.5]),
        lambda g, e, o: SumPdf([g, o], fracs=[0.5]),
        lambda g, e, o: SumPdf([g, e], fracs=[0.5], yields=[1.0, 2.0]),
        lambda g, e, o: SumPdf([g, e]),
        lambda g, e, o: SumPdf([g, e], fracs=[0.5, 0.2]),
        lambda g, e, o: SumPdf([g, e], fracs=[]),
        lambda g, e, o: SumPdf([g, e], yields=[10.0]),
        lambda g, e, o: SumPdf([g, e], fracs=["a"]),
        lambda g, e, o: ProductPdf([g]),
        lambda g, e, o: ProductPdf([g, o]),
        lambda g, e, o: ProductPdf([g, 3]),
    ],
)
def test_composite_validation(build):
    """Inconsistent SumPdf/ProductPdf arguments raise ModelError."""
    space = Space("x", 0.0, 1.0)
    with pytest.raises(ModelError):
        build(Gaussian(space, 0.5, 0.2), Exponential(space, -1.0), Gaussian(Space("x", 0.0, 2.0), 0.5, 0.2))


def test_get_params_floating_filter():
    """get_params lists each parameter once, in order, filtered by floating=True/False/None."""
    space = Space("x", 0.0, 5.0)
    mu, sigma = zcache.Parameter("mu", 2.0), zcache.Parameter("sigma", 1.0, floating=False)
    lam, frac = zcache.Parameter("lam", -1.0), zcache.Parameter("frac", 0.4)
    g, e = Gaussian(space, mu, sigma), Exponential(space, lam)
    s = SumPdf([g, e, Gaussian(space, mu, 0.3)], fracs=[frac, 0.2])
    names = lambda ps: [p.name for p in ps]  # noqa: E731
    assert names(s.get_params()) == ["frac", "mu", "lam"]
    assert names(s.get_params(True)) == ["frac", "mu", "lam"]
    assert names(s.get_params(floating=False)) == ["Sum_frac1", "sigma", "Gaussian_sigma"]
    assert names(s.get_params(None)) == ["frac", "Sum_frac1", "mu", "sigma", "lam", "Gaussian_sigma"]
    n = zcache.Parameter("n", 10.0)
    assert names(Gaussian(space, mu, sigma, extended=n).get_params()) == ["mu", "n"]


# -- ProductPdf ------------------------------------------------------------------------------
def _mass_time():
    mu, tau = zcache.Parameter("mu", 1.0), zcache.Parameter("tau", -1.3)
    m = Gaussian(Space("m", 0.0, 2.0), mu, 0.3)
    t = Exponential(Space("t", 0.0, 5.0), tau)
    return ProductPdf([m, t]), m, t, mu, tau


@slow_modes("mode", "graph")  # graph: 3 s
def test_product_disjoint_obs(mode):
    """ProductPdf over disjoint obs: pdf is the product, columns matched by name in any order."""
    prod, m, t, mu, tau = _mass_time()
    assert prod.space.obs == ("m", "t") and prod.space.lower == (0.0, 0.0) and prod.space.upper == (2.0, 5.0)
    rng = np.random.default_rng(0)
    mt = np.column_stack([rng.uniform(0, 2, 20), rng.uniform(0, 5, 20)])
    named = zcache.Data(mt, obs=["m", "t"])
    reordered = zcache.Data(np.column_stack([mt[:, 1], rng.uniform(size=20), mt[:, 0]]), obs=["t", "u", "m"])
    evaluate = traced(lambda: (prod.pdf(named), prod.pdf(reordered), prod.pdf(mt)))
    for mu_v in (1.0, 0.4):
        mu.set_value(mu_v)
        ref = norm_pdf(mt[:, 0], mu_v, 0.3, 0.0, 2.0) * exp_pdf(mt[:, 1], -1.3, 0.0, 5.0)
        for got in evaluate():
            np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    assert pdf_cache(m, reordered) is not None and pdf_cache(t, reordered) is not None  # factors cache their columns
    np.testing.assert_allclose(float(prod.integrate()), 1.0, rtol=1e-14)
    ref_part = (norm_cdf(1.0, 0.4, 0.3, 0, 2) - norm_cdf(0.2, 0.4, 0.3, 0, 2)) * exp_cdf(2.0, -1.3, 0, 5)
    np.testing.assert_allclose(float(prod.integrate([0.2, -1.0], [1.0, 2.0])), ref_part, rtol=1e-12)
    assert [p.name for p in prod.get_params()] == ["mu", "tau"]


def test_product_data_without_obs():
    """Data without obs names is read in the product's observable order, like an array."""
    prod, *_ = _mass_time()
    mt = np.array([[1.0, 1.0], [0.5, 2.0]])
    np.testing.assert_allclose(prod.pdf(zcache.Data(mt)).numpy(), prod.pdf(mt).numpy(), rtol=1e-14)


@slow_modes("mode", "graph")  # graph: 1.8 s
def test_product_same_obs_numerically_normalized(mode):
    """A product of two Gaussians on one space is the truncated Gaussian of the combined mean and width."""
    lo, hi = -3.0, 3.0
    m1 = zcache.Parameter("m1", -0.5)
    g1, g2 = Gaussian(Space("x", lo, hi), m1, 1.0), Gaussian(Space("x", lo, hi), 0.5, 0.7)
    prod = ProductPdf([g1, g2])
    arr = np.linspace(lo, hi, 13)
    data = zcache.Data(arr)
    pdf_of_data = traced(lambda: prod.pdf(data))
    for mv in (-0.5, 1.0):
        m1.set_value(mv)
        var = 0.49 / 1.49
        mean = (mv * 0.49 + 0.5 * 1.0) / 1.49
        ref = norm_pdf(arr, mean, np.sqrt(var), lo, hi)
        np.testing.assert_allclose(pdf_of_data().numpy(), ref, rtol=1e-10)
        np.testing.assert_allclose(prod.pdf(arr).numpy(), ref, rtol=1e-10)
        np.testing.assert_allclose(float(prod.integrate(lo, 0.0)),
                                   norm_cdf(0.0, mean, np.sqrt(var), lo, hi), rtol=1e-10)


# -- sampling ----------------------------------------------------------------------------------
def _ks_models():
    lo, hi = -2.0, 3.0
    space = Space("x", lo, hi)
    gauss = (Gaussian(space, 0.4, 0.9), lambda x: norm_cdf(x, 0.4, 0.9, lo, hi),
             lambda x: norm_cdf(x, 0.5, 0.9, lo, hi))
    expo = (Exponential(space, -0.8), lambda x: exp_cdf(x, -0.8, lo, hi), lambda x: exp_cdf(x, -0.65, lo, hi))
    mix = (SumPdf([Gaussian(space, 1.5, 0.3), Exponential(space, -0.8)], fracs=[0.3]),
           lambda x: 0.3 * norm_cdf(x, 1.5, 0.3, lo, hi) + 0.7 * exp_cdf(x, -0.8, lo, hi),
           lambda x: 0.25 * norm_cdf(x, 1.5, 0.3, lo, hi) + 0.75 * exp_cdf(x, -0.8, lo, hi))
    quad = (FunctionPdf(lambda x, a: 1.0 + a * x * x, space, {"a": 2.0}),
            lambda x: ((x - lo) + 2.0 * (x**3 - lo**3) / 3) / ((hi - lo) + 2.0 * (hi**3 - lo**3) / 3),
            lambda x: ((x - lo) + 1.0 * (x**3 - lo**3) / 3) / ((hi - lo) + 1.0 * (hi**3 - lo**3) / 3))
    # product of N(-0.5, 1) and N(0.5, 0.7): N(mean, var) with the combined mean and variance
    var, mean = 0.49 / 1.49, (-0.5 * 0.49 + 0.5) / 1.49
    prod = (ProductPdf([Gaussian(space, -0.5, 1.0), Gaussian(space, 0.5, 0.7)]),
            lambda x: norm_cdf(x, mean, np.sqrt(var), lo, hi), lambda x: norm_cdf(x, mean + 0.1, np.sqrt(var), lo, hi))
    return {"gauss": gauss, "expo": expo, "sum": mix, "accept-reject": quad, "product-same-obs": prod}


@pytest.mark.parametrize("name", ["gauss", "expo", "sum", "accept-reject",
                                  pytest.param("product-same-obs", marks=pytest.mark.slow)])  # 3 s
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_sample_distribution(name):
    """sample(n) gives a Data of n events inside the space, following the model's CDF (KS test)."""
    model, cdf, wrong_cdf = _ks_models()[name]
    set_seed(1234)
    data = model.sample(3000)
    assert isinstance(data, zcache.Data) and data.nevents == 3000 and data.obs == ("x",)
    x = data.numpy()
    assert bool(tf.reduce_all(model.space.inside(x)))
    assert scipy.stats.kstest(x, cdf).pvalue > KS_MIN_P
    assert scipy.stats.kstest(x, wrong_cdf).pvalue < KS_MIN_P  # the test can tell a slightly wrong model


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_sample_into_existing_data_does_not_retrace(graph_mode):
    """sample(n, data=d) refills d in place; the sampler traces once across sizes and parameter values."""
    mu = zcache.Parameter("mu", 0.0)
    a = zcache.Parameter("a", 2.0, lower=0.0)
    g = Gaussian(Space("x", -1.0, 1.0), mu, 0.5)
    ar = FunctionPdf(lambda x, a: 1.0 + a * x * x, Space("x", -1.0, 1.0), {"a": a})
    expected = 0 if graph_mode is False else 1
    for model, param in ((g, mu), (ar, a)):
        data = model.sample(10)
        for n, value in [(25, 0.3), (7, 0.1), (1000, 0.9)]:
            param.set_value(value)
            out = model.sample(n, data=data)
            assert out is data and data.nevents == n and bool(tf.reduce_all(model.space.inside(data.numpy())))
        assert model._sampler.trace_count == expected


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_sampling_follows_parameter_changes():
    """After set_value, samples (analytic and accept-reject, no retrace) follow the new parameters."""
    mu, a = zcache.Parameter("mu", -0.5), zcache.Parameter("a", 8.0, lower=0.0)
    g = Gaussian(Space("x", -1.0, 1.0), mu, 0.5)
    ar = FunctionPdf(lambda x, a: 1.0 + a * x * x, Space("x", -1.0, 1.0), {"a": a})
    set_seed(5)
    g.sample(10), ar.sample(10)
    mu.set_value(0.5)
    a.set_value(0.2)
    x_g, x_ar = g.sample(2000).numpy(), ar.sample(2000).numpy()
    assert scipy.stats.kstest(x_g, lambda x: norm_cdf(x, 0.5, 0.5, -1, 1)).pvalue > KS_MIN_P
    assert scipy.stats.kstest(x_ar, lambda x: ((x + 1) + 0.2 * (x**3 + 1) / 3) / (2 + 0.4 / 3)).pvalue > KS_MIN_P
    assert max(g._sampler.trace_count, ar._sampler.trace_count) == 1


def test_product_sampling_disjoint():
    """A disjoint ProductPdf samples each column from its factor; the Data carries the obs names."""
    prod, *_ = _mass_time()
    set_seed(3)
    data = prod.sample(2000)
    assert data.obs == ("m", "t") and data.numpy().shape == (2000, 2)
    mt = data.numpy()
    assert bool(tf.reduce_all(prod.space.inside(mt)))
    assert scipy.stats.kstest(mt[:, 0], lambda x: norm_cdf(x, 1.0, 0.3, 0, 2)).pvalue > KS_MIN_P
    assert scipy.stats.kstest(mt[:, 1], lambda x: exp_cdf(x, -1.3, 0, 5)).pvalue > KS_MIN_P
    assert abs(np.corrcoef(mt.T)[0, 1]) < 0.1


@slow_modes("graph_mode", "graph")  # graph: 1 s
def test_set_seed_reproducible(graph_mode):
    """The same seed gives the same sample (analytic and accept-reject); a distant seed another one."""
    g = Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0)
    ar = FunctionPdf(lambda x: 1.0 + x * x, Space("x", -1.0, 1.0))
    for model in (g, ar):
        set_seed(7)
        a = model.sample(50).numpy()
        set_seed(7)
        b = model.sample(50).numpy()
        set_seed(1000)
        c = model.sample(50).numpy()
        np.testing.assert_array_equal(a, b)
        assert not np.intersect1d(a, c).size


def test_nearby_seeds_give_independent_samples():
    """Samples for seeds 7 and 8 share no events."""
    g = Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0)
    set_seed(7)
    a = g.sample(200).numpy()
    set_seed(8)
    b = g.sample(200).numpy()
    assert np.intersect1d(a, b).size == 0


# -- accept-reject envelope: a peak narrower than the envelope grid ----------------------------
# Regression: the envelope was 1.25 x the density's maximum on a 4096-point grid, so a peak
# narrower than the spacing (0.0024 on [0, 10]) between two grid points was cut at the envelope
# and silently flattened (sigma 0.0008 sampled with std 0.00096).
_AR_LO, _AR_HI = 0.0, 10.0
_AR_SPACING = (_AR_HI - _AR_LO) / (zcache.models._numerics.FMAX_GRID - 1)


def _narrow_gaussian(mu, sigma=0.0008, name="narrow"):
    """A Gaussian-shaped FunctionPdf (no _integral, no _sample: accept-reject) on [0, 10]."""
    return FunctionPdf(lambda x, mu, sigma: tf.exp(-0.5 * ((x - mu) / sigma) ** 2),
                       Space("x", _AR_LO, _AR_HI), {"mu": mu, "sigma": sigma}, name=name)


@pytest.mark.parametrize("offset", [0.5, 0.4], ids=["between-grid-points", "off-grid"])
@pytest.mark.slow  # 3.7 s each; the eager spike test below is the fast check
def test_narrow_peak_function_pdf_samples_true_width(offset):
    """A FunctionPdf peak of width 0.0008 on a range of 10 (the envelope grid's spacing is 0.0024),
    centred midway between grid points or off them, samples with its true width and shape, with no
    retrace when the peak moves."""
    sigma = 0.0008
    mu = zcache.Parameter("mu_narrow", _AR_LO + (2047 + offset) * _AR_SPACING)
    model = _narrow_gaussian(mu, sigma)
    assert float(model._fmax()) >= 1.0  # the envelope bounds the density's true maximum (1)
    set_seed(2024)
    for centre, n in ((float(mu.value()), 6000), (_AR_LO + (1000 + offset) * _AR_SPACING, 2000)):
        mu.set_value(centre)
        x = model.sample(n).numpy()
        ref = scipy.stats.truncnorm((_AR_LO - centre) / sigma, (_AR_HI - centre) / sigma, loc=centre, scale=sigma)
        # 4 x the std of the sample std (sigma / sqrt(2N): 0.9% at 6k); the bug gave +21% (+11% off-grid)
        assert x.std() == pytest.approx(sigma, rel=4 / np.sqrt(2 * n))
        assert abs(x.mean() - centre) < 4 * sigma / np.sqrt(x.size)
        assert scipy.stats.kstest(x, ref.cdf).pvalue > KS_MIN_P
    assert model._sampler.trace_count == 1


def _spike(mu, height=100.0, width=1e-4):
    """A flat density with a spike 0.05 grid spacings wide midway between two grid points: its
    grid values are all 1, so only sampling can see the spike (it holds 0.25% of the events)."""
    return FunctionPdf(
        lambda x, mu: 1.0 + height * tf.exp(-0.5 * ((x - mu) / width) ** 2), Space("x", _AR_LO, _AR_HI),
        {"mu": mu}, name="spike",
    )


@slow_modes("mode", "graph")  # graph: 1.1 s
def test_spike_narrower_than_grid_raises_envelope_and_resamples(mode):
    """A proposal above the envelope raises it and restarts the sample: the spike the grid cannot
    see gets its share of the events (with the old fixed envelope it got 4 in 20k, not 50)."""
    mu = _AR_LO + 3000.5 * _AR_SPACING
    model = _spike(mu)
    assert float(model._fmax()) < 2.0  # the grid and its refinement miss the spike...
    set_seed(99)
    x = model.sample(20_000).numpy()
    spike_area = 100.0 * 1e-4 * np.sqrt(2 * np.pi)
    expected = x.size * spike_area / (_AR_HI - _AR_LO + spike_area)  # 50.0 +- 7.1
    inside = int(np.sum(np.abs(x - mu) < 5e-4))
    assert abs(inside - expected) < 4 * np.sqrt(expected), inside
    flat = x[np.abs(x - mu) > 5e-4]  # ...and the rest stays flat
    assert scipy.stats.kstest(flat, scipy.stats.uniform(_AR_LO, _AR_HI - _AR_LO).cdf).pvalue > KS_MIN_P
    assert model._sampler.trace_count == (1 if mode else 0)


@slow_modes("mode", "graph")  # graph: 2.7 s
def test_envelope_raised_too_often_or_not_finite_is_refused(monkeypatch, mode):
    """Past FMAX_RAISES raises of the envelope, or a density that is NaN or zero everywhere:
    sampling raises ModelError saying what to do, instead of a biased sample (or an endless loop)."""
    monkeypatch.setattr(zcache.models._base, "FMAX_RAISES", 0)
    set_seed(99)
    quoted = re.escape(f"({zcache.models._numerics.FMAX_SAFETY:g} x its maximum")
    with pytest.raises(ModelError, match=rf"exceeded the envelope {quoted}.* override _fmax\(\)"):
        _spike(_AR_LO + 3000.5 * _AR_SPACING).sample(20_000)
    half_nan = FunctionPdf(lambda x: tf.sqrt(x - 5.0), Space("x", _AR_LO, _AR_HI), name="half_nan")
    with pytest.raises(ModelError, match="must be finite and non-negative over the whole range"):
        half_nan.sample(100)
    zero = FunctionPdf(lambda x: 0.0 * x, Space("x", _AR_LO, _AR_HI), name="zero")
    with pytest.raises(ModelError, match="not positive and finite.* not zero everywhere"):
        zero.sample(100)


def test_sample_argument_errors():
    """sample() needs n for non-extended models and n >= 1; a wrong target Data is left unchanged."""
    g = Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0)
    with pytest.raises(ModelError):
        g.sample()
    for n in (0, -3):
        with pytest.raises(ModelError):
            g.sample(n)
    target = zcache.Data(np.zeros((4, 2)))
    with pytest.raises(DataShapeError):
        g.sample(10, data=target)
    np.testing.assert_array_equal(target.numpy(), np.zeros((4, 2)))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_extended_sample_poisson():
    """An extended model's sample() draws a Poisson number of events around the yield."""
    n = zcache.Parameter("n", 200.0, lower=0.0)
    g = Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0, extended=n)
    set_seed(21)
    sizes = np.array([g.sample().nevents for _ in range(40)])
    assert abs(sizes.mean() - 200.0) < 4 * np.sqrt(200.0 / 40)
    assert 0.3 * 200 < sizes.var() < 2.5 * 200
    n.set_value(20.0)
    sizes = np.array([g.sample().nevents for _ in range(30)])
    assert abs(sizes.mean() - 20.0) < 4 * np.sqrt(20.0 / 30)
    s = SumPdf([g, Exponential(Space("x", -3.0, 3.0), -1.0)], yields=[10.0, 30.0])
    assert abs(np.mean([s.sample().nevents for _ in range(20)]) - 40.0) < 4 * np.sqrt(40.0 / 20)


# -- properties ------------------------------------------------------------------------------
_GL_T, _GL_W = np.polynomial.legendre.leggauss(12)


def _integrate_numpy(values_at, lo, hi, panels=200):
    """Composite Gauss-Legendre (12 nodes x 200 panels), independent of zcache's own rule."""
    edges = np.linspace(lo, hi, panels + 1)
    half = 0.5 * np.diff(edges)
    x = (edges[:-1, None] + half[:, None] * (_GL_T[None, :] + 1.0)).ravel()
    w = (half[:, None] * _GL_W[None, :]).ravel()
    return float(np.sum(w * values_at(x)))


@settings(max_examples=12)
@given(
    mu=st.floats(-2.0, 6.0), sigma=st.floats(0.2, 4.0), lam=st.floats(-2.0, 2.0), frac=st.floats(0.0, 1.0),
    slope=st.floats(-0.2, 0.2),
)
def test_property_pdfs_integrate_to_one(mu, sigma, lam, frac, slope):
    """For random parameters within limits every model's pdf integrates to 1 over its space."""
    lo, hi = 0.0, 5.0
    space = Space("x", lo, hi)
    g = Gaussian(space, mu, sigma)
    e = Exponential(space, lam)
    lin = Linear(space, slope)
    models = [g, e, lin, SumPdf([g, e, lin], fracs=[frac, (1.0 - frac) / 2]), ProductPdf([g, e])]
    for model in models:
        total = _integrate_numpy(lambda x, m=model: m.pdf(x).numpy(), lo, hi)
        assert total == pytest.approx(1.0, rel=1e-9), model


@settings(max_examples=10)
@given(st.lists(st.tuples(st.sampled_from(["mu", "sigma", "lam", "frac"]), st.floats(0.0, 1.0)),
                min_size=1, max_size=6))
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_property_cached_pdf_equals_uncached(changes):
    """After any sequence of set_value, the cached pdf(Data) equals the reference and pdf(array)."""
    lo, hi = -1.0, 2.0
    params = {"mu": zcache.Parameter("mu", 0.5, lower=-1.0, upper=2.0),
              "sigma": zcache.Parameter("sigma", 0.5, lower=0.1, upper=2.0),
              "lam": zcache.Parameter("lam", -1.0, lower=-3.0, upper=3.0),
              "frac": zcache.Parameter("frac", 0.4, lower=0.0, upper=1.0)}
    space = Space("x", lo, hi)
    model = SumPdf([Gaussian(space, params["mu"], params["sigma"]), Exponential(space, params["lam"])],
                   fracs=[params["frac"]])
    arr = np.linspace(lo, hi, 17)
    data = zcache.Data(arr)
    for name, u in changes:
        p = params[name]
        p.set_value(p.lower + u * (p.upper - p.lower))
        m, s, la, f = (float(params[k].value()) for k in ("mu", "sigma", "lam", "frac"))
        ref = f * norm_pdf(arr, m, s, lo, hi) + (1 - f) * exp_pdf(arr, la, lo, hi)
        cached = model.pdf(data).numpy()
        np.testing.assert_allclose(cached, ref, rtol=1e-11)
        np.testing.assert_allclose(cached, model.pdf(arr).numpy(), rtol=1e-14)


def test_sum_of_extended_sums_lends_their_yields():
    """A SumPdf of SumPdfs with yields (no yields= of its own) is extended with the total yield,
    its fractions are the inner yields' shares, and every yield is a parameter of it."""
    s = Space("x", -5.0, 5.0)
    n = [zcache.Parameter(f"n_nested{k}", v) for k, v in enumerate([100.0, 300.0, 600.0])]
    inner = SumPdf([Gaussian(s, -1.0, 0.5), Gaussian(s, 1.0, 0.5)], yields=n[:2])
    outer = SumPdf([inner, Exponential(s, -0.2, extended=n[2])])
    assert outer.is_extended and float(outer.get_yield()) == pytest.approx(1000.0)
    np.testing.assert_allclose(outer.fractions().numpy(), [0.4, 0.6])
    assert {p.name for p in outer.get_params(None)} >= {"n_nested0", "n_nested1", "n_nested2"}
    x = np.linspace(-4.0, 4.0, 7)
    expected = 0.4 * inner.pdf(x).numpy() + 0.6 * Exponential(s, -0.2).pdf(x).numpy()
    np.testing.assert_allclose(outer.pdf(x).numpy(), expected, rtol=1e-12)
    n[0].set_value(400.0)  # the inner yield moves the outer fractions: (400 + 300) / 1300
    np.testing.assert_allclose(outer.fractions().numpy(), [700.0 / 1300.0, 600.0 / 1300.0])


# -- issue 23, symptom 3: per-event results of padded data have one row per event -----------------
def _padded_pdf_reader(how, model, data):
    """-sum(log pdf) and pdf of ``data``, read the way a user would: eagerly or in a trace of theirs."""
    def read():
        return -tf.reduce_sum(model.log_pdf(data)), model.pdf(data)

    if how == "eager":
        return read
    if how == "tf.function":
        return tf.function(read)
    return zcache.function(read, wraps="loss")  # "zcache.function" and "jit" (compiled by set_jit_mode)


# traced: 2-5 s each (test_parameter's padded set_data in a function is the fast traced check)
@pytest.mark.parametrize(
    "how", ["eager", *(pytest.param(h, marks=pytest.mark.slow) for h in ("zcache.function", "tf.function", "jit"))])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_pdf_of_padded_data_has_one_row_per_event(how):
    """Regression (issue 23, symptom 3): pdf of Data(x, capacity='auto') had one row per slot
    (2048 for 2000 events), so a user's -sum(log pdf) was 2886.44 instead of 2839.06. Per-event
    results have one row per event (eagerly, traced, under XLA, also after a set_data to another
    size without a retrace), -sum(log pdf) equals the loss, and raw=True keeps the padding rows."""
    rs = np.random.default_rng(23)
    x = rs.normal(0.2, 1.1, 2000)
    space = Space("x", -6.0, 6.0)
    mu, sigma = zcache.Parameter("mu_pad", 0.1), zcache.Parameter("sigma_pad", 1.0, lower=0.1)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, -0.1)], fracs=[0.8])
    padded = zcache.Data(x, obs="x", capacity="auto")
    loss = UnbinnedNLL(model, padded)
    with zcache.set_jit_mode(how == "jit"):
        read = _padded_pdf_reader(how, model, padded)
        traces = []
        for n in (2000, 1900):  # the second size fits the same capacity: one program for both
            padded.set_data(x[:n])
            plain = zcache.Data(x[:n], obs="x")
            nll, pdf = read()
            assert pdf.shape == (n,) and padded.value().shape == (2048,)
            np.testing.assert_allclose(pdf.numpy(), model.pdf(plain).numpy(), rtol=1e-13)
            np.testing.assert_allclose(float(nll), float(loss.value()), rtol=1e-13)
            np.testing.assert_allclose(float(nll), -np.log(model.pdf(plain).numpy()).sum(), rtol=1e-13)
            traces.append(read.experimental_get_tracing_count() if how == "tf.function" else getattr(read, "trace_count", 0))
    assert traces[0] == traces[1]  # the new size: no retrace
    assert model.log_pdf(padded).shape == (1900,) and model.unnormalized_pdf(padded).shape == (1900,)
    assert model.pdf(padded, raw=True).shape == (2048,)
    np.testing.assert_allclose(padded.unpadded(model.pdf(padded, raw=True)).numpy(), model.pdf(padded).numpy())
