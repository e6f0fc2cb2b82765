"""zcache._fitting.compiled_fit: the whole fit in one program, the default path of Minuit.

The reference is the same loss fitted by MIGRAD + HESSE (``Minuit(compiled=False)``, at a tighter
tolerance so that its minimum is the more precise of the two): the compiled fit must find the same
minimum (within 1e-3 of an error), the same errors (HESSE's definition, 1e-4 relative) and the
same validity verdict, over a zoo of losses: every shape, constraints, weights, binned losses, a
simultaneous loss, an amplitude model, yields at a limit, 1 to 20 parameters.
"""

from __future__ import annotations

import os

import networkx as nx
import numpy as np
import pytest
import tensorflow as tf
from helpers import gauss_exp_study

import zcache
from zcache._fitting.compiled_fit import CompiledFit
from zcache.binned import BinnedChi2, BinnedData, BinnedNLL, ExtendedBinnedNLL
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, SimultaneousLoss, UnbinnedNLL
from zcache.minimize import Minuit as TieredMinuit
from zcache.models import Exponential, FunctionPdf, Gaussian, ProductPdf, Space, SumPdf, set_seed
from zcache.shapes import ARGUS, Bernstein, Chebyshev, CrystalBall, DoubleCrystalBall, JohnsonSU, Voigtian


def Minuit(**options):  # noqa: N802 - reads like the class
    """``zcache.minimize.Minuit`` whose first fit of a loss is compiled too (``tiered=False``): these tests are
    about the compiled fit itself; the tiered start, whose first fit is MIGRAD's, is tests/test_tiers.py's."""
    options.setdefault("tiered", False)
    return TieredMinuit(**options)


def P(name, value, lower=None, upper=None):  # noqa: N802 - reads like the constructor
    return zcache.Parameter(name, value, lower=lower, upper=upper)


def _sampled(model, n, seed=7):
    set_seed(seed)
    return model.sample(n)


# -- the zoo: each builds (loss, fitted parameters or None) with names ending in _<tag> ---------
def gauss(t):
    mu, sigma = P(f"mu_{t}", 0.4, -2.0, 2.0), P(f"sigma_{t}", 1.4, 0.2, 4.0)
    x = np.random.default_rng(1).normal(0.1, 1.1, 2000)
    return UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x, obs="x")), None


def gauss_exp(t):
    model, loss, params = gauss_exp_study(t, n=3000)
    zcache.set_values(params, [5.2, 0.7, -0.25, 800.0, 2300.0])
    return loss, None


def crystal_ball(t):
    space = Space("x", -6.0, 4.0)
    model = CrystalBall(space, P(f"mu_{t}", 0.0, -1.0, 1.0), P(f"s_{t}", 1.0, 0.3, 3.0), P(f"a_{t}", 1.2, 0.3, 5.0),
                        P(f"n_{t}", 3.0, 1.1, 20.0))
    data = _sampled(model, 4000)
    zcache.set_values(model.get_params(), [0.1, 1.1, 1.0, 4.0])
    return UnbinnedNLL(model, data), None


def double_crystal_ball(t):
    space = Space("x", -6.0, 6.0)
    model = DoubleCrystalBall(space, P(f"mu_{t}", 0.0, -1.0, 1.0), P(f"s_{t}", 1.0, 0.3, 3.0), P(f"al_{t}", 1.5, 0.5, 5.0),
                              2.5, P(f"ar_{t}", 1.5, 0.5, 5.0), 2.5)
    data = _sampled(model, 4000)
    zcache.set_values([p for p in model.get_params() if p.floating], [0.1, 1.1, 1.3, 1.7])
    return UnbinnedNLL(model, data), None


def argus(t):
    space = Space("m", 5.2, 5.29)
    model = ARGUS(space, 5.29, P(f"c_{t}", -20.0, -60.0, -1.0), 0.5)
    data = _sampled(model, 3000)
    zcache.set_values(model.get_params(), [-25.0])
    return UnbinnedNLL(model, data), None


def voigtian(t):
    space = Space("x", -5.0, 5.0)
    model = Voigtian(space, P(f"mu_{t}", 0.0, -1.0, 1.0), P(f"s_{t}", 0.5, 0.1, 2.0), P(f"g_{t}", 0.4, 0.05, 2.0))
    data = _sampled(model, 1500)
    zcache.set_values(model.get_params(), [0.05, 0.6, 0.35])
    return UnbinnedNLL(model, data), None


def johnson_su(t):
    space = Space("x", -6.0, 6.0)
    model = JohnsonSU(space, P(f"mu_{t}", 0.0, -2.0, 2.0), P(f"l_{t}", 1.0, 0.2, 4.0), P(f"g_{t}", 0.3, -2.0, 2.0),
                      P(f"d_{t}", 1.5, 0.3, 5.0))
    data = _sampled(model, 4000)
    zcache.set_values(model.get_params(), [0.1, 1.1, 0.2, 1.7])
    return UnbinnedNLL(model, data), None


def chebyshev(t):
    space = Space("x", -1.0, 1.0)
    model = Chebyshev(space, [P(f"c1_{t}", 0.2, -0.5, 0.5), P(f"c2_{t}", 0.1, -0.5, 0.5)])
    data = _sampled(model, 4000)
    zcache.set_values(model.get_params(), [0.15, 0.05])
    return UnbinnedNLL(model, data), None


def bernstein(t):
    space = Space("x", 0.0, 1.0)
    coeffs = [1.0, P(f"b1_{t}", 2.0, 0.1, 10.0), P(f"b2_{t}", 1.5, 0.1, 10.0)]
    model = Bernstein(space, coeffs)
    data = _sampled(model, 4000)
    zcache.set_values(model.get_params(), [1.8, 1.7])
    return UnbinnedNLL(model, data), None


def product_2d(t):
    sx, sy = Space("x", -5.0, 5.0), Space("y", 0.0, 5.0)
    model = ProductPdf([Gaussian(sx, P(f"mu_{t}", 0.0, -2.0, 2.0), P(f"s_{t}", 1.0, 0.3, 3.0)),
                        Exponential(sy, P(f"lam_{t}", -0.5, -3.0, -0.01))])
    data = _sampled(model, 3000)
    zcache.set_values(model.get_params(), [0.1, 1.2, -0.6])
    return UnbinnedNLL(model, data), None


def constrained(t):
    loss, _ = gauss_exp(t)
    sigma = next(p for p in loss.get_params() if p.name == f"sigma_{t}")
    con = GaussianConstraint([sigma], [0.62], [0.02])
    return ExtendedUnbinnedNLL(loss.model, loss.data, constraints=[con]), None


def weighted(t):
    mu, sigma = P(f"mu_{t}", 0.3, -2.0, 2.0), P(f"sigma_{t}", 1.3, 0.2, 4.0)
    rng = np.random.default_rng(4)
    x = rng.normal(0.0, 1.0, 3000)
    w = rng.uniform(0.2, 1.8, x.size)
    return UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, sigma), zcache.Data(x, weights=w, obs="x")), None


def binned(t):
    mu, sigma = P(f"mu_{t}", 4.8, 3.0, 7.0), P(f"sigma_{t}", 1.2, 0.3, 3.0)
    x = np.random.default_rng(5).normal(5.0, 1.0, 5000)
    counts, edges = np.histogram(x, bins=30, range=(0.0, 10.0))
    return BinnedNLL(Gaussian(Space("x", 0.0, 10.0), mu, sigma), BinnedData(counts, edges)), None


def binned_extended(t):
    lam, n = P(f"lam_{t}", -0.4, -2.0, -0.01), P(f"n_{t}", 900.0, 1.0, 1e4)
    x = np.random.default_rng(6).exponential(2.5, 1000)
    counts, edges = np.histogram(x, bins=20, range=(0.0, 10.0))
    return ExtendedBinnedNLL(Exponential(Space("x", 0.0, 10.0), lam, extended=n), BinnedData(counts, edges)), None


def binned_chi2(t):
    mu, sigma = P(f"mu_{t}", 4.8, 3.0, 7.0), P(f"sigma_{t}", 1.2, 0.3, 3.0)
    x = np.random.default_rng(8).normal(5.0, 1.0, 20000)
    counts, edges = np.histogram(x, bins=20, range=(2.0, 8.0))
    return BinnedChi2(Gaussian(Space("x", 2.0, 8.0), mu, sigma, extended=P(f"n_{t}", 19000.0, 1.0, 1e5)),
                      BinnedData(counts, edges)), None


def simultaneous(t):
    mu = P(f"mu_{t}", 0.2, -2.0, 2.0)
    losses = []
    for k, width in enumerate((0.8, 1.5)):
        sigma = P(f"sigma{k}_{t}", width * 1.2, 0.2, 4.0)
        x = np.random.default_rng(10 + k).normal(0.0, width, 1500)
        losses.append(UnbinnedNLL(Gaussian(Space("x", -8.0, 8.0), mu, sigma), zcache.Data(x, obs="x")))
    return SimultaneousLoss(losses), None


def twenty_parameters(t):
    """Ten Gaussians sharing nothing, fitted together: 20 parameters (50 took 110 s of CI time, mostly the
    reference's traces; the compiled path has nothing per parameter but the Hessian's columns)."""
    losses = []
    for k in range(10):
        mu, sigma = P(f"mu{k}_{t}", 0.2, -2.0, 2.0), P(f"sigma{k}_{t}", 1.3, 0.2, 4.0)
        x = np.random.default_rng(100 + k).normal(0.0, 1.0, 200)
        losses.append(UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x, obs="x")))
    return SimultaneousLoss(losses), None


def amplitude(t):
    from helpers import uniform_np

    from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance

    masses = (1.86966, 0.493677, 0.13957039, 0.13957039)
    kin = DalitzKinematics(*masses, names=("K-", "pi+", "pi+"))
    mass = P(f"kst_mass_{t}", 0.8955, 0.85, 0.95)
    kst = Resonance(kin, ("12", "13"), mass, 0.0473, 1, name=f"kst_{t}")
    k0 = Resonance(kin, ("12", "13"), 1.425, 0.27, 0, name=f"k0_{t}")
    c_nr = ComplexParameter(f"c_nr_{t}", 1.0 + 0.0j, floating=False)
    c_kst, c_k0 = ComplexParameter(f"c_kst_{t}", 0.3 + 0.2j), ComplexParameter(f"c_k0_{t}", 0.5 - 0.5j)
    amp = CoherentSum([(c_nr, NonResonant(kin)), (c_kst, kst), (c_k0, k0)])
    mc = zcache.Data(uniform_np(2000, masses, seed=1), name=f"mc_{t}", obs=("s12", "s13"))
    pdf = AmplitudePdf(amp, mc)
    data = _sampled(pdf, 800)
    zcache.set_values([*c_kst.params, *c_k0.params, mass], [0.35, 0.5, 0.6, -0.8, 0.9])
    return UnbinnedNLL(pdf, data), None


#: double_crystal_ball and voigtian are left out of CI's run (43 and 23 s, their traces; the compiled path does
#: nothing per shape); ``ZCACHE_LONG_TESTS=1`` adds them.
ZOO = {
    "gauss": gauss, "gauss_exp": gauss_exp, "crystal_ball": crystal_ball,
    "argus": argus, "johnson_su": johnson_su, "chebyshev": chebyshev, "bernstein": bernstein,
    "product_2d": product_2d, "constrained": constrained, "weighted": weighted, "binned": binned,
    "binned_extended": binned_extended, "binned_chi2": binned_chi2, "simultaneous": simultaneous,
    "twenty_parameters": twenty_parameters, "amplitude": amplitude,
}
if os.environ.get("ZCACHE_LONG_TESTS"):
    ZOO.update(double_crystal_ball=double_crystal_ball, voigtian=voigtian)
#: models of test_compiled_fit_equals_migrad_hesse in the fast loop: one (each of the others costs 2.5-4.5 CPU
#: seconds; `make test` runs them all: CONTRIBUTING.md, "Test times")
FAST = {"gauss"}


def compare(loss, params=None, ref_tol=1e-5, **options):
    """Fit ``loss`` by MIGRAD (the reference, by default to 1e-4 of its usual EDM goal, so that its
    minimum is exact to far below the tolerances) and by the default path from the same start."""
    fitted = list(loss.params if params is None else params)
    start = np.array([float(p) for p in fitted])
    ref = Minuit(compiled=False, tol=ref_tol, **options).minimize(loss, params)
    zcache.set_values(fitted, start)
    new = Minuit(**options).minimize(loss, params)
    assert new.valid == ref.valid, (new, ref)
    assert ref.path == "migrad"
    errors = np.array([ref.errors[n] for n in ref.names])
    shift = np.array([new.values[n] - ref.values[n] for n in ref.names]) / errors
    assert np.max(np.abs(shift)) <= 1e-3, dict(zip(ref.names, shift, strict=True))
    np.testing.assert_allclose([new.errors[n] for n in ref.names], errors, rtol=1e-4)
    assert new.fmin <= ref.fmin + 1e-6
    # the parameters hold the result
    np.testing.assert_array_equal([float(p) for p in fitted], [new.values[n] for n in ref.names])
    return new, ref


#: exhaustive models of test_compiled_fit_equals_migrad_hesse: make test keeps the other 12 (twenty_parameters is
#: the costliest; Chebyshev stands for Bernstein; the amplitude model keeps its loss under XLA in test_jit)
EXHAUSTIVE = {"twenty_parameters", "bernstein", "johnson_su", "amplitude"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else [
    pytest.mark.slow, *([pytest.mark.exhaustive] if n in EXHAUSTIVE else [])]) for n in ZOO])
def test_compiled_fit_equals_migrad_hesse(name):
    loss, params = ZOO[name](f"zoo_{name}")
    new, _ = compare(loss, params)
    assert new.path == "compiled" and new.fallback is None, new.fallback
    assert new.valid


# graph exhaustive: the default mode, so the same comparison on the same model as
# test_compiled_fit_equals_migrad_hesse[gauss_exp] (make test; the fast loop keeps its [gauss])
@pytest.mark.parametrize("mode", [pytest.param("graph", marks=pytest.mark.exhaustive),
                                  pytest.param("jit", marks=pytest.mark.slow)])
def test_compiled_fit_in_modes(mode):
    """Under XLA (set_jit_mode('auto')) the program is compiled; the result is the same."""
    loss, _ = gauss_exp(f"modes_{mode}")
    with zcache.set_jit_mode("auto" if mode == "jit" else False):
        new, _ = compare(loss)
    assert new.path == "compiled"


@pytest.mark.slow  # 4.5-7.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_eager_mode_and_numerical_gradients_fit_with_migrad():
    """The compiled path needs a traced loss and zcache's automatic gradient: elsewhere MIGRAD fits."""
    loss, _ = gauss("eager")
    with zcache.set_graph_mode(False):
        assert Minuit().minimize(loss).path == "migrad"
    with zcache.set_autograd_mode(False):
        assert Minuit().minimize(loss).path == "migrad"
    assert Minuit(use_gradient=False).minimize(loss).path == "migrad"
    assert Minuit().minimize(loss).path == "compiled"


@pytest.mark.slow  # 4.5-7.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_a_yield_at_its_limit_falls_back_to_migrad_and_says_so():
    """Background-only data: the signal yield's minimum is its limit 0. The compiled fit ends on the
    limit, and MIGRAD (which handles a parameter at a limit) takes over: same verdict as MIGRAD alone."""
    rng = np.random.default_rng(3)  # as test_minimize's issue-23 case: nsig's minimum is its limit
    x = -np.log1p(-rng.uniform(size=200) * -np.expm1(-0.3 * 10.0)) / 0.3
    space = Space("x", 0.0, 10.0)
    sigma, lam = P("sigma_lim", 0.5, 0.1, 2.0), P("lam_lim", -0.3, -2.0, -0.01)
    nsig, nbkg = P("nsig_lim", 10.0, 0.0, 1e6), P("nbkg_lim", 190.0, 0.0, 1e4)
    model = SumPdf([Gaussian(space, 5.0, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x"), constraints=[GaussianConstraint([sigma], [0.5], [0.05])])
    new, ref = compare(loss, ref_tol=0.1)  # the fallback is MIGRAD at the default tolerance
    assert new.path == "migrad" and "limit" in new.fallback, new.fallback
    assert new.valid and new.values["nsig_lim"] < 1e-3


@pytest.mark.slow  # about 2.5 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_result_minuit_is_made_at_the_fits_minimum_and_state():
    """``result.minuit`` (MINOS, profiles) is created when asked for, at the fit's state, after a later fit."""
    loss, _ = gauss_exp("minos")
    result = Minuit().minimize(loss)
    assert result.path == "compiled" and result._minuit is None
    mu = next(p for p in loss.params if p.name == "mu_minos")
    before = result.values["mu_minos"]
    loss.data.set_data(np.random.default_rng(9).uniform(0.0, 10.0, 3000))  # another dataset, then MINOS of the first
    minos = result.minos("mu_minos")["mu_minos"]
    assert minos.valid and minos.lower < 0 < minos.upper
    assert abs(-minos.lower - result.errors["mu_minos"]) < 0.1 * result.errors["mu_minos"]
    assert float(mu) == pytest.approx(before)  # MINOS put the parameter back
    assert result.minuit.valid


def test_a_loop_of_fits_traces_once():
    """A user's toy loop (set_data + fit) runs on the compiled path without retracing."""
    model, loss, params = gauss_exp_study("loop", n=500)
    params[2].floating = False  # lambda fixed: the background's pdf of the events is a data-only column,
    truth = [5.0, 0.6, -0.3, 150.0, 350.0]  # passed into the program, whose length changes with each toy
    fit = None
    for seed in range(20):
        zcache.set_values(params, truth)
        set_seed(100 + seed)
        loss.data.set_data(model.sample(int(np.random.default_rng(seed).poisson(500))).numpy())
        result = Minuit().minimize(loss)
        assert result.valid and result.path == "compiled", result.fallback
        fit = CompiledFit.of(loss, tuple(loss.params))
    assert fit.traces == 1


@pytest.mark.slow  # 3.5-4.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_the_first_fit_of_a_fresh_loss_evaluates_it_only_in_its_program():
    """A fit that is the loss's first evaluation: every cache's dependencies are discovered by the
    search for the caches no fitted parameter reaches (no extra evaluation of the loss before the
    program); those are served, each computed once through its cache; the others are computed in
    the program only (no miss of their caches), and the fit equals MIGRAD's."""
    space = Space("x", 0.0, 10.0)
    mu, sigma = P("mu_fresh", 5.2, 3.0, 7.0), P("sigma_fresh", 0.7, 0.1, 2.0)
    lam = zcache.Parameter("lam_fresh", -0.3, lower=-2.0, upper=-0.01, floating=False)
    nsig, nbkg = P("nsig_fresh", 250.0, 0.0, 5000.0), P("nbkg_fresh", 700.0, 0.0, 5000.0)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    rng = np.random.default_rng(4)
    bkg = rng.exponential(1 / 0.3, 1400)
    x = np.concatenate([rng.normal(5.0, 0.6, 300), bkg[bkg < 10.0][:700]])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x"))
    start = [float(p) for p in loss.params]
    result = Minuit(precompute=False).minimize(loss)  # (precompute would evaluate the loss: test_precompute)
    assert result.valid and result.path == "compiled", result.fallback
    fit = CompiledFit.of(loss, tuple(loss.params))
    graph = zcache.dependency_graph()
    caches = {graph.nodes[n]["ref"]() for p in [mu, sigma, lam, nsig, nbkg] for n in nx.descendants(graph, p.node_id)}
    fitted = {p.node_id for p in loss.params}
    invariant = {c for c in caches if fitted.isdisjoint(nx.ancestors(graph, c.node_id))}
    served = {ref() for ref in fit._invariants[1]}
    # the background's density (lambda fixed) and the data's range check; not what is below the density
    assert {c.name for c in served} == {"Exponential._cached_pdf", "data in range"}
    assert served & caches <= invariant
    for cache in caches:  # served (and below them): computed once through the caches; the others in the program only
        assert cache.stats["misses"] == (1 if cache in invariant else 0), cache.name
    zcache.set_values(loss.params, start)
    reference = Minuit(compiled=False, tol=1e-4).minimize(loss)
    for name, value in reference.values.items():
        assert result.values[name] == pytest.approx(value, abs=1e-3 * reference.errors[name])


@pytest.mark.slow  # 3.5-4.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_the_program_calls_its_value_gradient_without_shape_inference_through_it():
    """The program's calls of its value + gradient function (start, seed Hessian, BFGS step, final
    Hessian, Newton step, flat directions) are built without TensorFlow's shape inference through that
    function's body (tf_internals item 16: ~95 ms per call site for the J/psi amplitude model), and
    the fit is the one MIGRAD + HESSE find."""
    model, loss, params = gauss_exp_study("no_inference", n=800)
    start = [float(p) for p in params]
    result = Minuit().minimize(loss)
    assert result.valid and result.path == "compiled", result.fallback
    zcache.set_values(params, start)
    reference = Minuit(compiled=False).minimize(loss)
    for p in params:
        assert abs(result.values[p.name] - reference.values[p.name]) < 0.05 * reference.errors[p.name]  # within both EDM goals
    program = CompiledFit.of(loss, tuple(loss.params))
    [fn] = program._programs.values()
    [concrete] = fn._list_all_concrete_functions()
    graph_def = concrete.graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    sites = [n for n in nodes if n.op in ("PartitionedCall", "StatefulPartitionedCall")
             and "value_gradient" in n.attr["f"].func.name]
    assert len(sites) >= 5
    assert all(n.attr["_disable_call_shape_inference"].b for n in sites)


@pytest.mark.slow  # 3.5-4.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_the_program_calls_one_value_gradient_function_not_inlined_copies():
    """Issue 54: the value + gradient function is prepared once and called from each of its sites, not
    inlined at each (every copy was prepared again at the program's first call); the fit is MIGRAD +
    HESSE's."""
    model, loss, params = gauss_exp_study("not_inlined", n=800)
    start = [float(p) for p in params]
    result = Minuit().minimize(loss)
    assert result.valid and result.path == "compiled", result.fallback
    [fn] = CompiledFit.of(loss, tuple(loss.params))._programs.values()
    [concrete] = fn._list_all_concrete_functions()
    graph_def = concrete.graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    sites = [n for n in nodes if n.op in ("PartitionedCall", "StatefulPartitionedCall")
             and "value_gradient" in n.attr["f"].func.name]
    [called] = {n.attr["f"].func.name for n in sites}  # one function, called from every site
    assert len(sites) >= 6
    [library] = [f for f in graph_def.library.function if f.signature.name == called]
    assert library.attr["_noinline"].b
    zcache.set_values(params, start)
    reference = Minuit(compiled=False).minimize(loss)
    for p in params:
        assert abs(result.values[p.name] - reference.values[p.name]) < 0.05 * reference.errors[p.name]


def test_the_compile_cache_checks_a_program_at_its_first_call_and_new_shapes_only(monkeypatch):
    """A warm fit runs what TensorFlow holds in memory: the compile cache checks its folder (a stat per entry)
    at a program's first call and at each new number of events (XLA compiles per shape), not at every fit."""
    from zcache._engine import compile_cache

    if compile_cache.compile_cache_info().directory is None:
        pytest.skip("the compile cache is off in this session")
    model, loss, params = gauss_exp_study("checks", n=500)
    rng = np.random.default_rng(5)
    # 30 % Gauss, 70 % exp(-0.3 x) on [0, 10] (inverse CDF)
    toys = [np.concatenate([np.clip(rng.normal(5.0, 0.6, n - 7 * n // 10), 0.0, 10.0),
                            -np.log1p(-rng.random(7 * n // 10) * (1.0 - np.exp(-3.0))) / 0.3])
            for n in (500, 500, 500, 520, 520, 500)]
    checks = []
    real = compile_cache._before
    monkeypatch.setattr(compile_cache, "_before", lambda: checks.append(1) or real())
    per_fit = []
    for x in toys:
        loss.data.set_data(x)
        zcache.set_values(params, [5.0, 0.6, -0.3, 150.0, 350.0])
        before = len(checks)
        result = Minuit().minimize(loss)
        assert result.valid and result.path == "compiled", result.fallback
        per_fit.append(len(checks) - before)
    assert per_fit[0] >= 1 and per_fit[3] >= 1  # the first call; 520 events, new to the program
    assert per_fit[1] == per_fit[2] == per_fit[4] == per_fit[5] == 0  # warm: shapes seen before


@pytest.mark.slow  # 300 fits (1,000 took 26 s of CI's time for the same property)
def test_hundreds_of_fits_trace_once():
    model, loss, params = gauss_exp_study("thousand", n=200)
    truth = [5.0, 0.6, -0.3, 60.0, 140.0]
    set_seed(3)
    samples = [model.sample(200).numpy() for _ in range(10)]
    for k in range(300):
        zcache.set_values(params, truth)
        loss.data.set_data(samples[k % 10])
        assert Minuit().minimize(loss).path == "compiled"
    assert CompiledFit.of(loss, tuple(loss.params)).traces == 1


@pytest.mark.slow  # about 1.8 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_floating_toggles_between_fits_get_their_own_program():
    loss, _ = gauss("toggle")
    sigma = next(p for p in loss.get_params(floating=None) if p.name == "sigma_toggle")
    both = Minuit().minimize(loss)
    sigma.floating = False
    try:
        one = Minuit().minimize(loss)
    finally:
        sigma.floating = True
    assert both.path == one.path == "compiled"
    assert one.names == ["mu_toggle"] and float(sigma) == pytest.approx(both.values["sigma_toggle"])


def test_a_non_finite_start_is_refused_as_before():
    from zcache.exceptions import FitError

    mu, sigma = P("mu_nf", 0.0, -1.0, 1.0), P("sigma_nf", 0.01, 0.001, 2.0)
    loss = UnbinnedNLL(Gaussian(Space("x", -50.0, 50.0), mu, sigma), zcache.Data(np.array([0.0, 40.0]), obs="x"))
    with pytest.raises(FitError):
        Minuit().minimize(loss)
    assert float(mu) == 0.0 and float(sigma) == 0.01


def test_run_is_refused_inside_a_trace():
    from zcache.exceptions import IllegalInGraphModeError

    loss, _ = gauss("trace")

    @tf.function
    def inside():
        return CompiledFit.of(loss, loss.params).run(np.array([0.4, 1.4]), edm_max=1e-5)

    with pytest.raises(IllegalInGraphModeError):
        inside()


@pytest.mark.slow  # about 2.6 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_function_pdf_of_a_user():
    """A user's own density (FunctionPdf) traced with its parameters replaced by the program's vector."""
    a, b = P("a_user", 0.5, 0.0, 2.0), P("b_user", 0.2, -1.0, 1.0)
    model = FunctionPdf(lambda x, a, b: 1.0 + a * x + b * x * x, Space("x", 0.0, 1.0), {"a": a, "b": b})
    data = _sampled(model, 3000)
    zcache.set_values([a, b], [0.8, 0.0])
    new, _ = compare(UnbinnedNLL(model, data))
    assert new.path == "compiled"


@pytest.mark.slow  # about 2.6 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_a_flat_direction_does_not_send_the_fit_away():
    """Two parameters that enter only as their sum (as two amplitudes of one shape do in an amplitude
    fit): the loss does not constrain their difference. The compiled fit's first step must not run
    along it (a seed eigenvalue of 1e-12 of the largest sent a J/psi fit's couplings to 2e4); the
    Hessian is singular there: made positive definite as Minuit2 does (issue 26: the J/psi fit's
    degenerate couplings fell back to MIGRAD, a trace and a fit more), with MIGRAD's verdict."""
    a, b = P("a_flat", 0.3, -5.0, 5.0), P("b_flat", 0.1, None, None)
    model = FunctionPdf(lambda x, a, b: tf.exp(-0.5 * (x - a - b) ** 2), Space("x", -6.0, 6.0), {"a": a, "b": b})
    x = np.random.default_rng(12).normal(0.8, 1.0, 2000)
    loss = UnbinnedNLL(model, zcache.Data(x, obs="x"))
    out = CompiledFit.of(loss, [a, b]).run(np.array([0.3, 0.1]), edm_max=1e-5)
    assert np.all(np.abs(out.x) < 5.0), out.x
    assert out.x.sum() == pytest.approx(x.mean(), abs=1e-3)
    zcache.set_values([a, b], [0.3, 0.1])
    result = Minuit().minimize(loss)
    zcache.set_values([a, b], [0.3, 0.1])
    migrad = Minuit(compiled=False).minimize(loss)
    assert result.valid == migrad.valid
    assert result.path == "compiled" and result.made_posdef and migrad.made_posdef
    assert result.fmin == pytest.approx(migrad.fmin, abs=1e-6)
    assert result.values["a_flat"] + result.values["b_flat"] == pytest.approx(x.mean(), abs=1e-3)
    assert np.all(np.isfinite(result.covariance))
    assert result.to_dict()["made_posdef"] is True


def test_made_positive_definite_only_for_flat_directions():
    """Minuit2's MnPosDef on a matrix with a flat direction (eigenvalue ~0); a clearly negative
    curvature (a saddle) is refused, and the caller falls back to MIGRAD."""
    from zcache._fitting.compiled_fit import made_positive_definite

    flat = np.array([[4.0, 4.0], [4.0, 4.0 - 1e-9]])  # the difference of two parameters is free
    shifted, ok = made_positive_definite(tf.constant(flat))
    assert bool(ok)
    np.linalg.cholesky(shifted.numpy())  # positive definite now
    # scaled by the diagonal: eigenvalues 0 and 2; raised by 1e-3 x 2, times the diagonal 4
    np.testing.assert_allclose(shifted.numpy() - flat, np.diag([8e-3, 8e-3]), rtol=1e-6)
    saddle = np.array([[1.0, 0.0], [0.0, -0.5]])
    assert not bool(made_positive_definite(tf.constant(saddle))[1])
    assert not bool(made_positive_definite(tf.constant(np.array([[1.0, 2.0], [2.0, 1.0]])))[1])


# -- a Hessian with an exact block (structured_hessian="auto") --------------------------------------
@pytest.mark.parametrize("traced", [False, True])
def test_forward_hessian_takes_an_exact_block_and_differences_the_rest(traced):
    """forward_hessian with ``block``: the block's entries are the given ones, the mixed and the other
    entries forward differences (against the analytic Hessian), one gradient per differenced parameter;
    a block of every parameter is the given matrix, and a wrong block shows where it sits."""
    from zcache._fitting.batched_bfgs import forward_hessian

    rng = np.random.default_rng(4)
    a = rng.normal(size=(5, 5))
    a = a @ a.T + np.eye(5)
    calls = []

    def vg(x):  # f = x A x / 2 + sum x^4 / 4
        calls.append(1)
        g = tf.einsum("ij,bj->bi", a, x) + x**3
        return 0.5 * tf.reduce_sum(x * (g - x**3), axis=1) + 0.25 * tf.reduce_sum(x**4, axis=1), g, tf.ones([1], tf.bool)

    x = tf.constant([[0.3, -0.2, 0.5, 0.1, -0.4]], tf.float64)
    exact = a + np.diag(3.0 * x.numpy()[0] ** 2)
    lower, upper = tf.fill([5], tf.constant(-9.0, tf.float64)), tf.fill([5], tf.constant(9.0, tf.float64))
    _, g, _ = vg(x)

    def hessian(block):
        fn = lambda: forward_hessian(vg, x, g, tf.ones_like(x), lower, upper, 1e-6, block)[0]  # noqa: E731
        calls.clear()
        out = tf.function(fn, autograph=False)() if traced else fn()
        return out.numpy(), len(calls)

    plain, n_plain = hessian(None)
    inside = [1, 3]
    mixed, n_mixed = hessian((inside, lambda _: tf.constant(exact[np.ix_(inside, inside)])[None]))
    assert np.abs(plain - exact).max() < 1e-5 and np.abs(mixed - exact).max() < 1e-5
    np.testing.assert_array_equal(mixed[np.ix_(inside, inside)], exact[np.ix_(inside, inside)])
    np.testing.assert_array_equal(mixed, mixed.T)
    if not traced:  # eager: one gradient per differenced parameter (traced, the loop body is traced once)
        assert (n_plain, n_mixed) == (5, 3)
    whole, _ = hessian((range(5), lambda _: tf.constant(exact)[None]))
    np.testing.assert_array_equal(whole, exact)
    wrong, _ = hessian((inside, lambda _: tf.zeros([1, 2, 2], tf.float64)))
    np.testing.assert_array_equal(wrong[np.ix_(inside, inside)], 0.0)
    np.testing.assert_allclose(np.delete(np.delete(wrong, inside, 0), inside, 1),
                               np.delete(np.delete(mixed, inside, 0), inside, 1), rtol=1e-12)
