"""zcache.loss: NLL values against numpy, gradients and Hessians against numdifftools, errors, traces."""

from __future__ import annotations

from types import SimpleNamespace

import numdifftools as nd
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
from helpers import GRAPH_MODES, slow_modes

import zcache
from zcache.exceptions import DataRangeError, FitError, ModelError, ParameterValueError
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, SimultaneousLoss, UnbinnedNLL
from zcache.models import Exponential, FunctionPdf, Gaussian, Space, SumPdf

LO, HI = -2.0, 4.0
START = {"mu": 1.0, "sigma": 0.6, "lam": -0.5, "frac": 0.4}


# -- independent references ----------------------------------------------------------------
def ref_pdf(x, mu, sigma, lam, frac):
    """frac * truncated normal + (1 - frac) * truncated exponential on [LO, HI], from scipy/numpy."""
    gauss = scipy.stats.truncnorm.pdf(x, (LO - mu) / sigma, (HI - mu) / sigma, loc=mu, scale=sigma)
    expo = lam * np.exp(lam * (x - LO)) / np.expm1(lam * (HI - LO))
    return frac * gauss + (1.0 - frac) * expo


def ref_nll(x, mu, sigma, lam, frac):
    return -np.sum(np.log(ref_pdf(x, mu, sigma, lam, frac)))


def ref_extended_nll(x, mu, sigma, lam, nsig, nbkg):
    nu = nsig + nbkg
    return ref_nll(x, mu, sigma, lam, nsig / nu) + nu - len(x) * np.log(nu)


def draw(n, seed):
    """Events from the START mixture (numpy only), inside [LO, HI]."""
    rng = np.random.default_rng(seed)
    nsig = rng.binomial(n, START["frac"])
    sig = scipy.stats.truncnorm.rvs((LO - 1.0) / 0.6, (HI - 1.0) / 0.6, loc=1.0, scale=0.6, size=nsig,
                                    random_state=rng)
    u = rng.uniform(size=n - nsig)
    bkg = LO + np.log1p(u * np.expm1(-0.5 * (HI - LO))) / -0.5
    return rng.permutation(np.concatenate([sig, bkg]))


def make(extended=False, n=1000, seed=0):
    """A Gaussian + Exponential model on [LO, HI] with floating parameters, its data and loss."""
    space = Space("x", LO, HI)
    p = SimpleNamespace(
        mu=zcache.Parameter("mu", START["mu"], lower=-1.0, upper=3.0),
        sigma=zcache.Parameter("sigma", START["sigma"], lower=0.1, upper=3.0),
        lam=zcache.Parameter("lam", START["lam"], lower=-3.0, upper=3.0),
    )
    parts = [Gaussian(space, p.mu, p.sigma), Exponential(space, p.lam)]
    if extended:
        p.nsig = zcache.Parameter("nsig", 0.4 * n, lower=0.0)
        p.nbkg = zcache.Parameter("nbkg", 0.6 * n, lower=0.0)
        model = SumPdf(parts, yields=[p.nsig, p.nbkg])
    else:
        p.frac = zcache.Parameter("frac", START["frac"], lower=0.0, upper=1.0)
        model = SumPdf(parts, fracs=[p.frac])
    data = zcache.Data(draw(n, seed), name="x_data")
    loss = (ExtendedUnbinnedNLL if extended else UnbinnedNLL)(model, data)
    return SimpleNamespace(p=p, model=model, data=data, loss=loss)


def simple(n=300, seed=7, extended=False):
    """A Gaussian (mu, sigma[, yield n]) on [LO, HI]: cheap to trace."""
    p = SimpleNamespace(mu=zcache.Parameter("mu", 1.0, lower=-1.0, upper=3.0),
                        sigma=zcache.Parameter("sigma", 0.6, lower=0.1, upper=3.0))
    if extended:
        p.n = zcache.Parameter("n", float(n), lower=0.0)
    model = Gaussian(Space("x", LO, HI), p.mu, p.sigma, extended=p.n if extended else None)
    rng = np.random.default_rng(seed)
    data = zcache.Data(scipy.stats.truncnorm.rvs((LO - 1.0) / 0.6, (HI - 1.0) / 0.6, loc=1.0, scale=0.6, size=n,
                                                 random_state=rng), name="g_data")
    loss = (ExtendedUnbinnedNLL if extended else UnbinnedNLL)(model, data)
    return SimpleNamespace(p=p, model=model, data=data, loss=loss)


def simple_ref(x, mu, sigma, n=None):
    nll = ref_nll(x, mu, sigma, -0.5, 1.0)
    return nll if n is None else nll + n - len(x) * np.log(n)


def current(params):
    return np.array([float(q.value()) for q in params])


def expected_traces(mode):
    return 0 if mode is False else 1


# -- values ----------------------------------------------------------------------------------
def test_unbinned_nll_value(graph_mode):
    """UnbinnedNLL.value() equals the numpy NLL, after set_value and after set_data with another size."""
    m = make()
    x = m.data.numpy()
    np.testing.assert_allclose(float(m.loss.value()), ref_nll(x, **START), rtol=1e-12)
    assert [q.name for q in m.loss.params] == ["frac", "mu", "sigma", "lam"]
    zcache.set_values([m.p.mu, m.p.frac], [1.4, 0.25])
    np.testing.assert_allclose(float(m.loss.value()), ref_nll(x, 1.4, 0.6, -0.5, 0.25), rtol=1e-12)
    m.p.lam.set_value(0.3)
    np.testing.assert_allclose(float(m.loss.value()), ref_nll(x, 1.4, 0.6, 0.3, 0.25), rtol=1e-12)
    new = draw(700, seed=1)
    m.data.set_data(new)
    np.testing.assert_allclose(float(m.loss.value()), ref_nll(new, 1.4, 0.6, 0.3, 0.25), rtol=1e-12)
    assert m.loss._value_fn.trace_count == expected_traces(graph_mode)


def test_extended_nll_value(mode):
    """ExtendedUnbinnedNLL adds nu - N log nu; N follows set_data without retracing."""
    m = make(extended=True)
    x = m.data.numpy()
    np.testing.assert_allclose(float(m.loss.value()), ref_extended_nll(x, 1.0, 0.6, -0.5, 400.0, 600.0), rtol=1e-12)
    assert [q.name for q in m.loss.params] == ["nsig", "nbkg", "mu", "sigma", "lam"]
    zcache.set_values([m.p.nsig, m.p.nbkg, m.p.sigma], [250.0, 900.0, 0.8])
    np.testing.assert_allclose(float(m.loss.value()), ref_extended_nll(x, 1.0, 0.8, -0.5, 250.0, 900.0), rtol=1e-12)
    new = draw(1500, seed=2)
    m.data.set_data(new)
    np.testing.assert_allclose(float(m.loss.value()), ref_extended_nll(new, 1.0, 0.8, -0.5, 250.0, 900.0),
                               rtol=1e-12)
    assert m.loss._value_fn.trace_count == expected_traces(mode)


def test_extended_nll_of_extended_model():
    """An extended Gaussian (extended=yield) gets the Poisson term of its yield."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    n = zcache.Parameter("n", 40.0, lower=0.0)
    model = Gaussian(Space("x", LO, HI), 1.0, 0.6, extended=n)
    x = draw(50, seed=3)
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x))
    ref = ref_nll(x, 1.0, 0.6, -0.5, 1.0) + 40.0 - 50 * np.log(40.0)
    np.testing.assert_allclose(float(loss.value()), ref, rtol=1e-12)
    assert loss.params == [n]


# -- gradients and Hessians --------------------------------------------------------------------
def _ref_fn(m, names):
    x = m.data.numpy()
    if hasattr(m.p, "frac"):
        return lambda v: ref_nll(x, **{**START, **dict(zip(names, v))})
    shape = {k: v for k, v in START.items() if k != "frac"}
    return lambda v: ref_extended_nll(x, **{**shape, "nsig": 400.0, "nbkg": 600.0, **dict(zip(names, v))})


@slow_modes("mode", "graph")  # graph: 2.3 s
def test_gradient_matches_numdifftools(mode):
    """gradient() and value_gradient() of the extended NLL equal numdifftools, on a cache miss and a hit."""
    m = make(extended=True)
    names = [q.name for q in m.loss.params]
    ref = _ref_fn(m, names)
    x0 = current(m.loss.params)
    expected = nd.Gradient(ref)(x0)
    np.testing.assert_allclose(m.loss.gradient().numpy(), expected, rtol=1e-7, atol=1e-7)  # miss
    value, grad = m.loss.value_gradient()  # every cache is a hit now
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(float(value), ref(x0), rtol=1e-12)
    m.p.mu.set_value(1.2)
    x1 = current(m.loss.params)
    np.testing.assert_allclose(m.loss.gradient().numpy(), nd.Gradient(ref)(x1), rtol=1e-7, atol=1e-7)
    assert [f.trace_count for f in m.loss.functions()] == [0, expected_traces(mode)]


@slow_modes("mode", "graph")  # graph: 2.2 s
def test_numerical_gradient_mode(mode):
    """With set_autograd_mode(False) the gradient (central differences) agrees with autodiff and numdifftools."""
    m = simple()
    x = m.data.numpy()
    # traced numerical steps are slow to trace: one parameter in graph mode, both eagerly
    params, index = ([m.p.sigma], [1]) if mode else (m.loss.params, [0, 1])
    auto = m.loss.gradient(params).numpy()
    with zcache.set_autograd_mode(False):
        value, numerical = m.loss.value_gradient(params)
        m.p.mu.set_value(1.1)
        moved = m.loss.gradient(params).numpy()
    np.testing.assert_allclose(numerical.numpy(), auto, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(float(value), simple_ref(x, 1.0, 0.6), rtol=1e-12)
    expected = nd.Gradient(lambda v: simple_ref(x, *v))([1.1, 0.6])[index]
    np.testing.assert_allclose(moved, expected, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(current(m.loss.params), [1.1, 0.6])  # the steps were undone


def test_gradient_of_a_parameter_subset():
    """gradient(params) follows the given order; a parameter the loss ignores gets 0."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    m = make()
    other = zcache.Parameter("other", 1.0)
    full = dict(zip([q.name for q in m.loss.params], m.loss.gradient().numpy()))
    sub = m.loss.gradient([m.p.sigma, other, m.p.mu]).numpy()
    np.testing.assert_allclose(sub, [full["sigma"], 0.0, full["mu"]], rtol=1e-12)
    with pytest.raises(TypeError):
        m.loss.gradient(["mu"])


@slow_modes("mode", "graph")  # graph: 2.1 s
def test_value_at_family(mode):
    """value_at / value_gradient_at / hessian_at set parameters in place, subtract the offset, reject bad x."""
    m = simple()
    x = m.data.numpy()
    ref = lambda v: simple_ref(x, *v)  # noqa: E731
    np.testing.assert_allclose(float(m.loss.value()), ref([1.0, 0.6]), rtol=1e-12)  # as a minimizer starts
    assert m.loss.offset == 0.0
    m.loss.offset = 100.0
    assert m.loss.offset == 100.0
    for v in ([1.1, 0.7], [0.9, 0.5]):
        np.testing.assert_allclose(float(m.loss.value_at(v)), ref(v) - 100.0, rtol=1e-12)
        np.testing.assert_array_equal(current(m.loss.params), v)
    for v in ([1.2, 0.55], [1.0, 0.65]):
        value, grad = m.loss.value_gradient_at(v)
        np.testing.assert_array_equal(current(m.loss.params), v)
        np.testing.assert_allclose(float(value), ref(v) - 100.0, rtol=1e-12)
        np.testing.assert_allclose(grad.numpy(), nd.Gradient(ref)(v), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(float(m.loss.value()), ref([1.0, 0.65]), rtol=1e-12)  # value() has no offset
    for v in ([1.2, 0.55], [0.95, 0.62]):
        hess = m.loss.hessian_at(v).numpy()
        np.testing.assert_array_equal(current(m.loss.params), v)
        np.testing.assert_allclose(hess, nd.Hessian(ref)(v), rtol=1e-5)
    # bad input: ParameterValueError, every parameter unchanged (one check guards all writes)
    for bad in ([1.5, 10.0], [5.0, 0.7], [1.5, np.nan]):
        with pytest.raises(ParameterValueError):
            m.loss.value_at(bad)
        np.testing.assert_array_equal(current(m.loss.params), [0.95, 0.62])
    np.testing.assert_allclose(float(m.loss.value_at([0.95, 0.62])), ref([0.95, 0.62]) - 100.0, rtol=1e-12)
    e = expected_traces(mode)
    # several calls each; without precompute the Hessian is differences of value_gradient_at calls
    assert [f.trace_count for f in m.loss._at_fns[tuple(m.loss.params)]] == [e, e, 0]


def test_a_look_before_and_after_a_fit_traces_nothing():
    """Under the default graph mode, value() and value_gradient() run their first two calls eagerly, then
    trace: a look at the loss before and after a fit costs no trace. Eager and traced calls agree with numpy
    / numdifftools, after a change of parameters and of data too; the minimizer's value_at traces from its
    first call."""
    m = simple()
    gradient_fn = lambda: m.loss._gradient_fns[tuple(m.loss.params)]  # noqa: E731

    def look(points):
        """value_gradient() and value() at each point against numpy and numdifftools."""
        ref = lambda v: simple_ref(m.data.numpy(), *v)  # noqa: E731
        for v in points:
            zcache.set_values([m.p.mu, m.p.sigma], v)
            value, grad = m.loss.value_gradient()
            np.testing.assert_allclose(float(value), ref(v), rtol=1e-12)
            np.testing.assert_allclose(grad.numpy(), nd.Gradient(ref)(v), rtol=1e-7)
            assert float(m.loss.value()) == pytest.approx(ref(v), rel=1e-12)

    look(([1.0, 0.6], [1.2, 0.5]))  # two calls each, eager
    assert m.loss._value_fn.trace_count == 0 and gradient_fn().trace_count == 0
    new = draw(500, seed=3)
    m.data.set_data(new[(new > LO) & (new < HI)])
    look(([1.2, 0.5], [0.9, 0.7]))  # traced at the third call, and that graph serves the fourth
    assert m.loss._value_fn.trace_count == 1 and gradient_fn().trace_count == 1
    m.loss.value_at([1.1, 0.55])
    assert m.loss._at_fns[tuple(m.loss.params)][0].trace_count == 1


@pytest.mark.parametrize(
    "graph",
    [pytest.param(True, id="graph"),
     pytest.param(False, id="eager")],
)
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_value_at_as_first_evaluation_is_not_stale(graph):
    """value_at / value_gradient_at called before any other evaluation of the loss give fresh values."""
    with zcache.set_graph_mode(graph):
        for method in ("value_at", "value_gradient_at"):
            m = simple()
            x = m.data.numpy()
            for v in ([1.1, 0.7], [0.9, 0.5], [1.0, 0.6]):
                out = getattr(m.loss, method)(v)
                value = out[0] if isinstance(out, tuple) else out
                np.testing.assert_allclose(float(value), simple_ref(x, *v), rtol=1e-12, err_msg=f"{method} {v}")


def test_value_at_subset_of_parameters():
    """value_at(x, params) moves only the given parameters, in the given order."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    m = make(n=200)
    ref = _ref_fn(m, ["sigma", "lam"])
    np.testing.assert_allclose(float(m.loss.value_at([0.8, -0.9], params=[m.p.sigma, m.p.lam])), ref([0.8, -0.9]),
                               rtol=1e-12)
    np.testing.assert_array_equal(current(m.loss.params), [0.4, 1.0, 0.8, -0.9])


@pytest.mark.slow  # 1.5 s
def test_hessian_at_exact_with_precompute():
    """After precompute (floating caches bypassed) hessian_at takes the exact path and still agrees."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    m = simple()
    report = zcache.precompute(m.loss)
    try:
        assert m.loss._exact_hessian_ok(tuple(m.loss.params))
        ref = lambda v: simple_ref(m.data.numpy(), *v)  # noqa: E731
        hess = m.loss.hessian_at([0.9, 0.7]).numpy()
        np.testing.assert_allclose(hess, nd.Hessian(ref)([0.9, 0.7]), rtol=1e-6)
    finally:
        report.undo()


# eager is exhaustive: make test keeps graph mode, the path that failed to build
@pytest.mark.parametrize("graph", [pytest.param(False, marks=pytest.mark.exhaustive), True], ids=["eager", "graph"])
def test_hessian_at_exact_through_valid_caches(graph):
    """hessian_at(exact=True) without precompute: second-order autodiff through the model's caches (valid
    ones: hits in the forward pass) equals numdifftools; traced, it failed to build before."""
    with zcache.set_graph_mode(graph):
        m = simple()
        ref = lambda v: simple_ref(m.data.numpy(), *v)  # noqa: E731
        assert not m.loss._exact_hessian_ok(tuple(m.loss.params))  # no precompute: caches on the path
        for v in ([0.9, 0.7], [0.9, 0.7], [1.1, 0.6]):
            m.loss.value_at(v)  # the caches are valid at v when the Hessian is asked for
            hess = m.loss.hessian_at(v, exact=True).numpy()
            np.testing.assert_allclose(hess, nd.Hessian(ref)(v), rtol=1e-7)
            np.testing.assert_array_equal(current(m.loss.params), v)


# -- combinations ------------------------------------------------------------------------------
@slow_modes("mode", "graph")  # graph: 4.8 s
def test_simultaneous_loss(mode):
    """`a + b` sums the values, lists shared parameters once and differentiates like the numpy sum."""
    a = simple(n=200)
    sigma2 = zcache.Parameter("sigma2", 1.1, lower=0.1)
    x1, x2 = a.data.numpy(), draw(150, seed=5)
    b = UnbinnedNLL(Gaussian(Space("x", LO, HI), a.p.mu, sigma2), zcache.Data(x2))
    total = a.loss + b
    assert isinstance(total, SimultaneousLoss) and total.losses == [a.loss, b]
    assert [q.name for q in total.params] == ["mu", "sigma", "sigma2"]

    def ref(v):
        return simple_ref(x1, v[0], v[1]) + simple_ref(x2, v[0], v[2])

    np.testing.assert_allclose(float(total.value()), ref([1.0, 0.6, 1.1]), rtol=1e-12)
    with zcache.set_graph_mode(False):
        np.testing.assert_allclose(float(total.value()), float(a.loss.value()) + float(b.value()), rtol=1e-14)
    a.p.mu.set_value(1.3)  # the shared parameter moves both terms
    np.testing.assert_allclose(float(total.value()), ref([1.3, 0.6, 1.1]), rtol=1e-12)
    np.testing.assert_allclose(total.gradient().numpy(), nd.Gradient(ref)([1.3, 0.6, 1.1]), rtol=1e-7, atol=1e-7)

    c = UnbinnedNLL(Exponential(Space("x", LO, HI), zcache.Parameter("lam", -0.5)), zcache.Data(x2))
    triple = total + c
    assert triple.losses == [a.loss, b, c] and len(triple.params) == 4
    with zcache.set_graph_mode(False):
        np.testing.assert_allclose(float(triple.value()), float(total.value()) + float(c.value()), rtol=1e-14)


def test_gaussian_constraint():
    """GaussianConstraint is 1/2 sum ((p - mu) / sigma)^2; it adds to the loss and to its gradient."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    m = make(n=200)
    ext = zcache.Parameter("ext", 2.0)
    fixed = zcache.Parameter("fixed", 0.0, floating=False)
    con = GaussianConstraint([m.p.mu, ext, fixed], [0.8, 1.5, 0.5], [0.1, 2.0, 1.0])
    np.testing.assert_allclose(float(con.value()), 0.5 * (2.0**2 + 0.25**2 + 0.5**2), rtol=1e-14)
    loss = UnbinnedNLL(m.model, m.data, constraints=[con])
    assert [q.name for q in loss.params] == ["frac", "mu", "sigma", "lam", "ext"]  # fixed ones are not floated
    np.testing.assert_allclose(float(loss.value()), float(m.loss.value()) + float(con.value()), rtol=1e-14)
    grad = loss.gradient().numpy()
    np.testing.assert_allclose(grad[:4], m.loss.gradient().numpy() + [0.0, 20.0, 0.0, 0.0], rtol=1e-10)
    np.testing.assert_allclose(grad[4], 0.5 / 4.0, rtol=1e-12)
    ext.set_value(1.5)
    np.testing.assert_allclose(float(loss.value()), float(m.loss.value()) + 0.5 * (2.0**2 + 0.5**2), rtol=1e-14)


@pytest.mark.parametrize(
    ("params", "observed", "sigma"),
    [([1.0], [1.0], [1.0]), (["p"], [1.0], [1.0]), (None, [1.0, 2.0], [1.0]), (None, [1.0], [1.0, 1.0]),
     (None, [1.0], [0.0]), (None, [1.0], [-1.0])],
)
def test_gaussian_constraint_validation(params, observed, sigma):
    """Non-Parameters, a wrong number of values or sigma <= 0 raise ModelError."""
    with pytest.raises(ModelError):
        GaussianConstraint(params or [zcache.Parameter("p", 1.0)], observed, sigma)


COV3 = np.array([[0.04, 0.018, -0.01], [0.018, 0.09, 0.03], [-0.01, 0.03, 0.25]])


def test_gaussian_constraint_with_covariance_against_numpy_and_scipy():
    """1/2 d^T C^-1 d; differences equal those of -multivariate_normal.logpdf; gradient C^-1 d."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    ps = [zcache.Parameter(f"cc{i}", v) for i, v in enumerate([0.1, -0.2, 0.4])]
    mu = np.array([0.0, 0.1, 0.3])
    con = GaussianConstraint(ps, mu, cov=COV3)
    ref = scipy.stats.multivariate_normal(mean=mu, cov=COV3)
    rng = np.random.default_rng(4)
    first = None
    for theta in rng.multivariate_normal(mu, COV3, size=5):
        zcache.set_values(ps, theta)
        d = theta - mu
        value = float(con.value())
        np.testing.assert_allclose(value, 0.5 * d @ np.linalg.solve(COV3, d), rtol=1e-12)
        if first is None:
            first = (value, ref.logpdf(theta))
        else:
            np.testing.assert_allclose(value - first[0], -(ref.logpdf(theta) - first[1]), rtol=1e-10, atol=1e-12)
        grad = zcache.gradient(con.value, ps)
        np.testing.assert_allclose(np.array(grad, dtype=float), np.linalg.solve(COV3, d), rtol=1e-10)
    # a diagonal cov is the sigma form
    diag = GaussianConstraint(ps, mu, cov=np.diag([0.04, 0.09, 0.25]))
    np.testing.assert_allclose(float(diag.value()), float(GaussianConstraint(ps, mu, [0.2, 0.3, 0.5]).value()),
                               rtol=1e-12)
    assert con.observed is con.mu and np.allclose(con.sigma, [0.2, 0.3, 0.5])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, "exactly one"),
    ({"sigma": [0.1, 0.1], "cov": np.eye(2)}, "exactly one"),
    ({"cov": np.eye(3)}, "shape"),
    ({"cov": [[1.0, 0.5], [0.4, 1.0]]}, "symmetric"),
    ({"cov": [[1.0, 2.0], [2.0, 1.0]]}, "positive definite"),
    ({"cov": [[1.0, 0.0], [0.0, 0.0]]}, "positive definite"),
    ({"cov": [[1.0, np.nan], [np.nan, 1.0]]}, "NaN"),
])
def test_gaussian_constraint_covariance_validation(kwargs, match):
    """Neither or both of sigma/cov, a wrong shape, asymmetric or not positive definite: ModelError."""
    ps = [zcache.Parameter("cv_a", 0.0), zcache.Parameter("cv_b", 0.0)]
    with pytest.raises(ModelError, match=match):
        GaussianConstraint(ps, [0.0, 0.0], **kwargs)


@pytest.mark.slow  # 2.6 s: a fit (the constraint values stay in the fast loop)
def test_fit_with_a_correlated_constraint():
    """A Gaussian mean measured by data plus a correlated constraint on (mean, b): the linear-algebra optimum."""
    from zcache.minimize import Minuit

    x = np.random.default_rng(12).normal(0.3, 1.0, 400)
    mean = zcache.Parameter("cfit_mu", 0.0, lower=-3.0, upper=3.0)
    b = zcache.Parameter("cfit_b", 0.0, lower=-3.0, upper=3.0)
    mu0, cov = np.array([0.1, 0.5]), np.array([[0.01, 0.008], [0.008, 0.04]])
    loss = UnbinnedNLL(Gaussian(Space("x", -12.0, 12.0), mean, 1.0), zcache.Data(x),
                       constraints=[GaussianConstraint([mean, b], mu0, cov=cov)])
    result = Minuit(tol=1e-6).minimize(loss)
    # NLL = 1/2 N (mu - xbar)^2 + 1/2 d^T C^-1 d (+ const): a quadratic with Hessian H = A + C^-1
    a = np.diag([len(x), 0.0])
    hess = a + np.linalg.inv(cov)
    best = np.linalg.solve(hess, a @ [x.mean(), 0.0] + np.linalg.solve(cov, mu0))
    assert result.valid
    errors = np.sqrt(np.diag(np.linalg.inv(hess)))
    # within Minuit's tolerance: EDM < 2e-3 * tol * errordef, so much less than 1e-3 sigma
    assert np.all(np.abs([result.values["cfit_mu"] - best[0], result.values["cfit_b"] - best[1]]) < 1e-3 * errors)
    np.testing.assert_allclose(result.covariance, np.linalg.inv(hess), rtol=1e-4)
    assert abs(result.covariance[0, 1]) > 1e-4  # the constraint's correlation carries over to b


# -- errors ----------------------------------------------------------------------------------
def test_construction_errors():
    """Wrong model/data/extension/columns raise ModelError; events outside the space DataRangeError."""
    zcache.set_graph_mode(False)  # restored by the autouse fixture
    space = Space("x", LO, HI)
    gauss = Gaussian(space, 1.0, 0.6)
    inside = zcache.Data(np.array([0.0, 1.0]))
    with pytest.raises(ModelError):
        UnbinnedNLL(gauss, np.array([0.0, 1.0]))
    with pytest.raises(ModelError):
        UnbinnedNLL("gauss", inside)
    with pytest.raises(ModelError):
        ExtendedUnbinnedNLL(gauss, inside)
    with pytest.raises(ModelError):
        UnbinnedNLL(gauss, zcache.Data(np.zeros((2, 2)), obs=["y", "z"]))
    with pytest.raises(ModelError):
        UnbinnedNLL(gauss, zcache.Data(np.zeros((2, 2))))
    with pytest.raises(DataRangeError):
        UnbinnedNLL(gauss, zcache.Data(np.array([0.0, HI + 0.1])))
    with pytest.raises(DataRangeError):  # only the model's column is checked, but it is checked
        UnbinnedNLL(gauss, zcache.Data(np.array([[0.0, 99.0], [LO - 1.0, 0.0]]), obs=["x", "y"]))
    loss = UnbinnedNLL(gauss, zcache.Data(np.array([[0.0, 99.0]]), obs=["x", "y"]))  # other columns are free
    np.testing.assert_allclose(float(loss.value()), -np.log(ref_pdf(0.0, 1.0, 0.6, -0.5, 1.0)), rtol=1e-12)
    with pytest.raises(ModelError):
        SimultaneousLoss([loss, 3])
    with pytest.raises(TypeError):
        loss + 1  # noqa: B018


@slow_modes("mode", "graph")  # graph: 1.5 s
def test_data_outside_range_after_set_data(mode):
    """set_data with events outside the space makes the next value()/value_gradient() raise DataRangeError."""
    m = simple()
    good = m.data.numpy()
    ref = float(m.loss.value())
    m.data.set_data(np.append(good[:10], HI + 0.5))
    with pytest.raises(DataRangeError):
        m.loss.value()
    with pytest.raises(DataRangeError):
        m.loss.value_gradient()
    m.data.set_data(good)
    np.testing.assert_allclose(float(m.loss.value()), ref, rtol=1e-14)
    assert m.loss._value_fn.trace_count == expected_traces(mode)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_range_error_message_complete_in_graph():
    """The traced DataRangeError carries the whole message, including the advice at its end."""
    m = simple(n=50)
    m.data.set_data(np.array([HI + 1.0]))
    with zcache.set_graph_mode(True), pytest.raises(DataRangeError) as info:
        m.loss.value()
    assert str(info.value).startswith("events of 'g_data' lie outside Space(x in [-2, 4]) of 'Gaussian'")
    assert str(info.value).endswith("or widen the space.")


@slow_modes("mode", "graph")  # graph: 1.4 s
def test_nan_loss_raises_fit_error(mode):
    """A NaN/inf loss raises FitError, changes nothing, and the loss is right again once fixed."""
    sigma = zcache.Parameter("sigma_free", 0.6)  # no limits
    x = draw(200, seed=6)
    loss = UnbinnedNLL(Gaussian(Space("x", LO, HI), 1.0, sigma), zcache.Data(x))
    ok = float(loss.value())
    sigma.set_value(0.0)
    with pytest.raises(FitError):
        loss.value()
    assert float(sigma.value()) == 0.0
    sigma.set_value(0.6)
    assert float(loss.value()) == ok
    sigma.set_value(0.9)
    np.testing.assert_allclose(float(loss.value()), ref_nll(x, 1.0, 0.9, -0.5, 1.0), rtol=1e-12)

    # a model that is zero at an event: -log 0 = inf
    a = zcache.Parameter("a", 1.0)
    parabola = FunctionPdf(lambda t, a: a * t * t, Space("x", -1.0, 1.0), {"a": a})
    zero = UnbinnedNLL(parabola, zcache.Data(np.array([0.5, 0.0])))
    with pytest.raises(FitError):
        zero.value()
    assert float(a.value()) == 1.0


def test_unbinned_nll_of_extended_model_excludes_yields():
    """A non-extended NLL of a model made extended by a yield lists only the shape parameters."""
    m = simple(extended=True, n=100)
    loss = UnbinnedNLL(m.model, m.data)
    assert [q.name for q in loss.params] == ["mu", "sigma"]
    assert [q.name for q in ExtendedUnbinnedNLL(m.model, m.data).params] == ["mu", "sigma", "n"]


# -- traces ----------------------------------------------------------------------------------
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_loss_functions_trace_once(mode):
    """value(), value_gradient() and value_at() trace once across set_value and set_data of any size."""
    m = simple(extended=True)
    for step, n in enumerate([300, 50, 1200]):
        if step:
            m.data.set_data(np.random.default_rng(step).uniform(LO, HI, n))
            zcache.set_values([m.p.mu, m.p.n], [1.0 + 0.1 * step, 100.0 + n])
        ref = simple_ref(m.data.numpy(), float(m.p.mu.value()), 0.6, float(m.p.n.value()))
        np.testing.assert_allclose(float(m.loss.value()), ref, rtol=1e-12)
        np.testing.assert_allclose(float(m.loss.value_gradient()[0]), ref, rtol=1e-12)
        np.testing.assert_allclose(float(m.loss.value_at(current(m.loss.params))), ref, rtol=1e-12)
    functions = m.loss.functions()
    assert len(functions) == 5  # value, value_gradient, value_at, value_gradient_at, hessian_at
    assert [f.trace_count for f in functions] == [expected_traces(mode)] * 3 + [0, 0]
    assert all(isinstance(v, tf.Tensor) for v in m.loss.value_gradient())


# -- regression: the floating set and the offset ------------------------------------------------
@pytest.mark.slow  # 2.3 s
def test_params_follow_floating_flags_set_after_construction():
    """Regression: loss.params was frozen when the loss was built, so `floating = False` later was ignored."""
    m = make(extended=True, n=200)
    fixed = zcache.Parameter("c_fixed", 0.0, floating=False)
    con = GaussianConstraint([m.p.mu, fixed], [1.0, 0.0], [0.5, 1.0])
    loss = ExtendedUnbinnedNLL(m.model, m.data, constraints=[con])
    assert [q.name for q in loss.params] == ["nsig", "nbkg", "mu", "sigma", "lam"]
    m.p.lam.floating = False
    fixed.floating = True  # a constrained parameter that becomes floating enters too
    assert [q.name for q in loss.params] == ["nsig", "nbkg", "mu", "sigma", "c_fixed"]
    assert [q.name for q in loss.get_params(floating=False)] == ["lam"]
    assert len(loss.get_params(floating=None)) == 6
    m.p.lam.floating = True
    assert [q.name for q in loss.params] == ["nsig", "nbkg", "mu", "sigma", "lam", "c_fixed"]
    # the gradient w.r.t. the default parameters follows too, and equals numdifftools on numpy
    m.p.sigma.floating = False
    x = m.data.numpy()
    v0 = current(loss.params)

    def ref(v):
        nsig, nbkg, mu, lam, c = v
        return ref_extended_nll(x, mu, 0.6, lam, nsig, nbkg) + 0.5 * (((mu - 1.0) / 0.5) ** 2 + c**2)

    np.testing.assert_allclose(loss.gradient().numpy(), nd.Gradient(ref)(v0), rtol=1e-6, atol=1e-6)


def test_unbinned_nll_yield_stays_out_when_toggled():
    """The non-extended NLL of an extended model never floats the yield, whatever its flag."""
    m = simple(extended=True, n=100)
    loss = UnbinnedNLL(m.model, m.data)
    m.p.n.floating = False
    m.p.n.floating = True
    assert [q.name for q in loss.params] == ["mu", "sigma"]
    assert m.p.n not in loss.get_params(floating=None)
    m.p.mu.floating = False
    assert [q.name for q in loss.params] == ["sigma"]


def test_simultaneous_loss_params_follow_flags():
    a = simple(n=100)
    b = UnbinnedNLL(Gaussian(Space("x", LO, HI), a.p.mu, zcache.Parameter("s2", 1.0, lower=0.1)),
                    zcache.Data(draw(50, seed=4)))
    total = a.loss + b
    assert [q.name for q in total.params] == ["mu", "sigma", "s2"]
    a.p.mu.floating = False  # shared: leaves both parts
    assert [q.name for q in total.params] == ["sigma", "s2"]
    assert [q.name for q in total.get_params(floating=None)] == ["mu", "sigma", "s2"]


@slow_modes("mode", "graph")  # graph: 1.5 s
def test_value_at_offset_is_an_argument(mode):
    """Regression: the offset was loss state that every fit overwrote; now each call passes its own."""
    m = simple()
    x = m.data.numpy()
    for offset in (0.0, 100.0, -3.5):
        np.testing.assert_allclose(float(m.loss.value_at([1.1, 0.7], offset=offset)),
                                   simple_ref(x, 1.1, 0.7) - offset, rtol=1e-12)
        value, _ = m.loss.value_gradient_at([1.1, 0.7], offset=offset)
        np.testing.assert_allclose(float(value), simple_ref(x, 1.1, 0.7) - offset, rtol=1e-12)
    assert m.loss.offset == 0.0  # passing an offset does not store it
    m.loss.offset = 7.0
    np.testing.assert_allclose(float(m.loss.value_at([1.1, 0.7])), simple_ref(x, 1.1, 0.7) - 7.0, rtol=1e-12)
    with pytest.raises(FitError):
        m.loss.offset = float("nan")
    e = expected_traces(mode)
    assert [f.trace_count for f in m.loss._at_fns[tuple(m.loss.params)]][:2] == [e, e]  # no retrace per offset


# == event weights =============================================================================
def _np_weighted_nll(x, w, p, lo, hi, extended):
    """-sum w log p (truncated Gaussian; extended: with yield p[2]), in numpy/scipy."""
    mu, sigma = p[0], p[1]
    norm = scipy.stats.norm.cdf(hi, mu, sigma) - scipy.stats.norm.cdf(lo, mu, sigma)
    value = -np.sum(w * (scipy.stats.norm.logpdf(x, mu, sigma) - np.log(norm)))
    if extended:
        value += p[2] - np.sum(w) * np.log(p[2])
    return value


@pytest.mark.parametrize("extended", [False, True], ids=["plain", "extended"])
@slow_modes("mode", "graph")  # graph: 1.5 s
def test_weighted_nll_value_and_gradient(mode, extended):
    rng = np.random.default_rng(7)
    x = np.clip(rng.normal(0.2, 1.1, 800), -3.9, 3.9)
    w = rng.uniform(-0.3, 2.0, x.size)  # negative weights allowed (sWeights)
    mu, sigma = zcache.Parameter("mu_w", 0.1), zcache.Parameter("sigma_w", 1.3, lower=0.1)
    nu = zcache.Parameter("nu_w", 700.0, lower=1.0)
    model = Gaussian(Space("x", -4.0, 4.0), mu, sigma, extended=nu if extended else None)
    data = zcache.Data(x, weights=w)
    loss = (ExtendedUnbinnedNLL if extended else UnbinnedNLL)(model, data)
    params = [mu, sigma, nu] if extended else [mu, sigma]
    p0 = np.array([float(p) for p in params])
    ref = lambda p: _np_weighted_nll(x, w, p, -4.0, 4.0, extended)  # noqa: E731
    value, grad = loss.value_gradient(params)
    assert float(value) == pytest.approx(ref(p0), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), nd.Gradient(ref)(p0), rtol=1e-7)
    assert data.weights_data in loss.datasets() and loss.is_weighted
    # new weights: the value follows, nothing retraces
    assert float(loss.value()) == pytest.approx(ref(p0), rel=1e-12)
    traces = loss._value_fn.trace_count
    w2 = rng.uniform(0.5, 1.5, x.size)
    data.set_data(x, weights=w2)
    assert float(loss.value()) == pytest.approx(_np_weighted_nll(x, w2, p0, -4.0, 4.0, extended), rel=1e-12)
    assert loss._value_fn.trace_count == traces
    (terms, weights), = loss.weighted_event_terms()
    expected = scipy.stats.norm.logpdf(x, p0[0], p0[1]) - np.log(
        scipy.stats.norm.cdf(4.0, p0[0], p0[1]) - scipy.stats.norm.cdf(-4.0, p0[0], p0[1]))
    np.testing.assert_allclose(terms.numpy(), expected + (np.log(p0[2]) if extended else 0.0), rtol=1e-12)
    np.testing.assert_array_equal(weights.numpy(), w2)


# == padded data (shape buckets) ===============================================================
#: the cases of test_padded_data_give_the_unpadded_loss that `make test` runs: every mode, weight and loss kind
#: once; the other eight of the 12 (3 modes x weighted x extended) are exhaustive
PADDED_KEPT = {"eager-unweighted-nll", "graph-weighted-extended", "auto-weighted-nll", "auto-unweighted-extended"}


# costly cases (fits of padded data): the fast loop runs none (test_parameter checks padded data in a traced function)
@pytest.mark.parametrize(("graph_mode", "weighted", "extended"), [
    pytest.param(GRAPH_MODES[m], w, e, id=f"{m}-{wi}-{ei}",
                 marks=() if f"{m}-{wi}-{ei}" in PADDED_KEPT else pytest.mark.exhaustive)
    for m in GRAPH_MODES for w, wi in ((False, "unweighted"), (True, "weighted"))
    for e, ei in ((False, "nll"), (True, "extended"))], indirect=["graph_mode"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_padded_data_give_the_unpadded_loss(graph_mode, extended, weighted):
    """A padded dataset (capacity=) gives the loss, gradient and Hessian of the same events unpadded,
    to 1e-12, against numpy too; set_data to other sizes within the capacity keeps that."""
    f = make(extended=extended, n=700, seed=5)
    m, p, x = f.model, f.p, draw(700, 5)
    w = np.random.default_rng(2).uniform(0.2, 1.8, 700) if weighted else None
    plain = zcache.Data(x, name="plain_events", weights=w)
    padded = zcache.Data(x, name="padded_events", weights=w, capacity=1024)
    cls = ExtendedUnbinnedNLL if extended else UnbinnedNLL
    a, b = cls(m, plain), cls(m, padded)
    params = list(a.params)
    x0 = np.array([float(q) for q in params])
    for n in (700, 333, 1000):
        events = np.r_[x, x][:n]
        weights = None if w is None else np.r_[w, w][:n]
        plain.set_data(events, weights=weights)
        padded.set_data(events, weights=weights)
        assert padded.capacity == 1024 and padded.nevents == n
        va, ga = a.value_gradient_at(x0, params)
        vb, gb = b.value_gradient_at(x0, params)
        assert float(vb) == pytest.approx(float(va), rel=1e-12)
        np.testing.assert_allclose(gb.numpy(), ga.numpy(), rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(b.hessian_at(x0, params).numpy(), a.hessian_at(x0, params).numpy(),
                                   rtol=1e-10, atol=1e-8)
        if not weighted and not extended:
            ref = ref_nll(events, float(p.mu), float(p.sigma), float(p.lam), float(p.frac))
            assert float(vb) == pytest.approx(ref, rel=1e-10)
        assert float(m.sum_log_pdf(padded)) == pytest.approx(float(m.sum_log_pdf(plain)), rel=1e-12)


@pytest.mark.parametrize("weightcorr", [pytest.param("asymptotic", marks=pytest.mark.slow),
                                        pytest.param("sumw2", marks=pytest.mark.slow), None])  # 2.6-4.8 s a case
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_weighted_loss_refuses_weights_summing_to_zero_or_less(weightcorr):
    """Regression (issue 23, symptom 4): with all weights 0 the fit was 'valid' with errors 0.0
    (asymptotic, sumw2) or 2.99 / 2.32 (None). No weighted loss can hold such weights: set_data
    refuses them (all 0, and a negative sum), eagerly and traced, leaving the loss's value, and
    the fit on the old weights is what it was."""
    from zcache.exceptions import WeightSumError
    from zcache.minimize import Minuit

    rs = np.random.default_rng(4)
    x = rs.normal(0.0, 1.0, 200)
    w = rs.uniform(0.5, 1.5, 200)
    mu = zcache.Parameter("mu_w0", 0.1)
    data = zcache.Data(x, obs="x", weights=w)
    loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), data)
    reference = Minuit(weightcorr=weightcorr).minimize(loss)
    assert reference.valid and reference.errors["mu_w0"] > 0.01
    before = float(loss.value())

    @zcache.function(wraps="loss")
    def set_in_graph(ws):
        data.set_data(tf.constant(x), weights=ws)
        return loss.value()

    for bad in (np.zeros(200), -w):
        with pytest.raises(WeightSumError):
            data.set_data(x, weights=bad)
        with pytest.raises(WeightSumError):
            set_in_graph(tf.constant(bad))
        assert float(loss.value()) == before
    again = Minuit(weightcorr=weightcorr).minimize(loss)
    assert again.valid and again.errors["mu_w0"] == pytest.approx(reference.errors["mu_w0"], rel=1e-6)


def test_a_constraints_measured_values_cannot_change_after_it_is_traced():
    """A GaussianConstraint's mu, sigma and cov are constants of every graph traced from it: assigning or
    writing into them raised nothing and changed no traced loss (a silently stale penalty); now both refuse."""
    from zcache.loss import GaussianConstraint

    p = zcache.Parameter("p_ro", 1.5)
    con = GaussianConstraint([p], [1.0], [0.5])
    before = float(con.value())
    with pytest.raises(AttributeError):
        con.mu = np.array([2.0])
    for array in (con.mu, con.sigma, con.cov, con.observed):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 2.0
    assert float(con.value()) == before == 0.5
