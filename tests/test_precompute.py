"""zcache.precompute: constant parts cached, floating parts bypassed, values never change."""

from __future__ import annotations

import numdifftools as nd
import numpy as np
import pytest
import tensorflow as tf
from helpers import slow_modes
from scipy.special import erf

import zcache
from zcache._engine.dependencies import GRAPH
from zcache.loss import UnbinnedNLL
from zcache.models import Exponential, Gaussian, Space, SumPdf

LO, HI = 0.0, 10.0


def _reference_nll(x: np.ndarray, mu: float, sigma: float, lam: float, frac: float) -> float:
    """Independent numpy NLL of frac * Gauss + (1 - frac) * Exp truncated to [LO, HI]."""
    gnorm = sigma * np.sqrt(np.pi / 2) * (erf((HI - mu) / (np.sqrt(2) * sigma)) - erf((LO - mu) / (np.sqrt(2) * sigma)))
    gauss = np.exp(-0.5 * ((x - mu) / sigma) ** 2) / gnorm
    expo = np.exp(lam * x) * lam / (np.exp(lam * HI) - np.exp(lam * LO))
    return float(-np.sum(np.log(frac * gauss + (1 - frac) * expo)))


@pytest.fixture
def world():
    """mu, sigma floating; lam and the fraction fixed."""
    space = Space("x", LO, HI)
    mu = zcache.Parameter("mu_pc", 5.0, lower=1.0, upper=9.0)
    sigma = zcache.Parameter("sigma_pc", 1.0, lower=0.1, upper=5.0)
    lam = zcache.Parameter("lam_pc", -0.3, lower=-2.0, upper=-0.01, floating=False)
    frac = zcache.Parameter("frac_pc", 0.4, lower=0.0, upper=1.0, floating=False)
    gauss, expo = Gaussian(space, mu, sigma), Exponential(space, lam)
    model = SumPdf([gauss, expo], fracs=[frac])
    x = np.random.default_rng(3).uniform(LO, HI, 400)
    loss = UnbinnedNLL(model, zcache.Data(x, obs="x"))
    return dict(mu=mu, sigma=sigma, lam=lam, frac=frac, gauss=gauss, expo=expo, model=model, loss=loss, x=x)


def _caches(model) -> dict[str, zcache.CachedTensor]:
    out = {}
    for owner in (model, *model.pdfs):
        for cache in owner.__dict__.get("_zcache_caches", {}).values():
            out[cache.name] = cache
    return out


def _ref(w) -> float:
    return _reference_nll(w["x"], *(float(w[k].value()) for k in ("mu", "sigma", "lam", "frac")))


def test_report_classifies_constant_and_floating_nodes(world):
    """Data-and-fixed-parameter nodes are cached (highest), floating-dependent ones always dirty."""
    report = zcache.precompute(world["loss"])
    status = {n.name: n.status for n in report.nodes}
    assert status["Exponential._cached_pdf"] == "cached"
    assert status["Exponential.normalization"] == "cached (inner)"
    assert status["data in range"] == "cached"
    for name in ("Gaussian._cached_pdf", "Gaussian.normalization", "SumPdf._cached_pdf"):
        assert status[name] == "always dirty"
    assert set(report.floating) == {"mu_pc", "sigma_pc"}
    caches = _caches(world["model"])
    assert caches["Exponential._cached_pdf"].nbytes == 400 * 8
    assert caches["Gaussian._cached_pdf"].nbytes == 0  # the bypassed value is released
    assert report.total_bytes == sum(c.nbytes for c in report.cached)
    text = str(report)
    assert "always dirty" in text and "Exponential._cached_pdf" in text and "mu_pc" in text


@slow_modes("graph_mode", "graph")  # graph: 2.5 s
def test_precompute_never_changes_the_loss(world, graph_mode):
    """Loss values equal an independent numpy NLL before/after precompute, over parameter moves."""
    loss = world["loss"]
    before = float(loss.value())
    assert before == pytest.approx(_ref(world), rel=1e-12)
    zcache.precompute(loss)
    rng = np.random.default_rng(1)
    for _ in range(4):
        zcache.set_values([world["mu"], world["sigma"]], [rng.uniform(2, 8), rng.uniform(0.5, 3)])
        assert float(loss.value()) == pytest.approx(_ref(world), rel=1e-12)
        x = [float(world["mu"].value()) + 0.1, float(world["sigma"].value())]
        assert float(loss.value_at(x, [world["mu"], world["sigma"]])) == pytest.approx(_ref(world), rel=1e-12)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_fixed_parameter_changed_later_invalidates_the_cached_part(world, graph_mode):
    """Unlike a rebuilt function, a cached constant part follows a later change of its fixed parameter."""
    loss, expo_pdf = world["loss"], None
    zcache.precompute(loss)
    expo_pdf = _caches(world["model"])["Exponential._cached_pdf"]
    for _ in range(3):  # the first two calls run eagerly under 'auto'; the third traces
        float(loss.value())
    traces = [f.trace_count for f in loss.functions()]
    world["lam"].set_value(-0.7)
    assert not expo_pdf.is_valid
    assert float(loss.value()) == pytest.approx(_ref(world), rel=1e-12)
    assert expo_pdf.is_valid
    world["frac"].set_value(0.7)
    assert float(loss.value()) == pytest.approx(_ref(world), rel=1e-12)
    assert [f.trace_count for f in loss.functions()] == traces  # no retrace for either change


@pytest.mark.slow  # 2.3 s
def test_always_dirty_nodes_get_no_flag_writes_and_no_counts(world):
    """A floating parameter's change invalidates no bypassed cache; bypassed caches are never read as caches."""
    loss = world["loss"]
    zcache.precompute(loss)
    caches = _caches(world["model"])
    dirty = [caches[n] for n in ("Gaussian._cached_pdf", "Gaussian.normalization", "SumPdf._cached_pdf")]
    assert all(c.always_dirty for c in dirty)
    assert GRAPH.dependent_caches(world["mu"].node_id) == ()
    before = [c.stats for c in dirty]
    for v in (4.0, 4.5, 5.0):
        loss.value_at([v, 1.0], [world["mu"], world["sigma"]])
        loss.value_gradient_at([v, 1.2], [world["mu"], world["sigma"]])
    assert [c.stats for c in dirty] == before
    assert caches["Exponential._cached_pdf"].stats["misses"] == 1  # computed once by precompute


@slow_modes("graph_mode", "graph")  # graph: 3.4 s
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_gradient_and_hessian_after_precompute_match_numdifftools(world, graph_mode):
    """Bypassed nodes use TensorFlow's own gradient (and exact Hessians); both match finite differences."""
    loss = world["loss"]
    params = [world["mu"], world["sigma"]]
    zcache.precompute(loss)
    x0 = np.array([4.6, 1.3])

    def f(p):
        return _reference_nll(world["x"], p[0], p[1], -0.3, 0.4)

    _, grad = loss.value_gradient_at(x0, params)
    np.testing.assert_allclose(grad.numpy(), nd.Gradient(f)(x0), rtol=1e-7)
    hess = loss.hessian_at(x0, params).numpy()
    np.testing.assert_allclose(hess, nd.Hessian(f)(x0), rtol=1e-6)


@pytest.mark.slow  # 1.5 s
def test_hessian_without_precompute_uses_gradient_differences(world):
    """With floating caches switched on, the Hessian comes from differences of exact gradients."""
    loss = world["loss"]
    params = [world["mu"], world["sigma"]]
    zcache.precompute(loss, floating=[*params, world["lam"]], keep_floating=True)  # keeps the Gaussian's cache
    assert not loss._exact_hessian_ok(tuple(params))
    x0 = np.array([4.6, 1.3])
    hess = loss.hessian_at(x0, params).numpy()
    expected = nd.Hessian(lambda p: _reference_nll(world["x"], p[0], p[1], -0.3, 0.4))(x0)
    np.testing.assert_allclose(hess, expected, rtol=1e-5)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_undo_restores_every_cache(world):
    """undo() switches the bypassed caches back on; values stay exact."""
    loss = world["loss"]
    report = zcache.precompute(loss)
    caches = _caches(world["model"])
    assert caches["Gaussian._cached_pdf"].always_dirty
    report.undo()
    assert not any(c.always_dirty for c in caches.values())
    world["mu"].set_value(6.0)
    assert float(loss.value()) == pytest.approx(_ref(world), rel=1e-12)
    assert caches["Gaussian._cached_pdf"].is_valid


@pytest.mark.parametrize("autograd, kept", [(True, False), (False, True)])
def test_keep_floating_follows_the_autograd_mode(world, autograd, kept):
    """Numerical gradients move one parameter per call, so caches of some floating parameters are kept then.

    A node that depends on every floating parameter (the sum) changes on every step: always dirty.
    """
    floating = [world["mu"], world["sigma"], world["lam"]]
    with zcache.set_autograd_mode(autograd):
        report = zcache.precompute(world["loss"], floating=floating)
    status = {n.name: n.status for n in report.nodes}
    for name in ("Gaussian._cached_pdf", "Exponential._cached_pdf"):
        assert (status[name] == "cached (floating)") is kept
        assert (status[name] == "always dirty") is not kept
    assert status["SumPdf._cached_pdf"] == "always dirty"


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_keep_inner_false_frees_inner_constant_nodes(world):
    report = zcache.precompute(world["loss"], keep_inner=False)
    status = {n.name: n.status for n in report.nodes}
    assert status["Exponential.normalization"] == "always dirty"
    assert status["Exponential._cached_pdf"] == "cached"
    world["lam"].set_value(-0.5)  # the highest node is still invalidated through the bypassed one
    assert float(world["loss"].value()) == pytest.approx(_ref(world), rel=1e-12)


def test_explicit_floating_list(world):
    """floating=[...] overrides the parameters' own flags."""
    report = zcache.precompute(world["loss"], floating=[world["lam"]])
    status = {n.name: n.status for n in report.nodes}
    assert status["Exponential._cached_pdf"] == "always dirty"
    assert status["Gaussian._cached_pdf"] == "cached"  # the highest node without lam


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_precompute_of_a_model_and_of_a_callable(world):
    model = world["model"]
    float(world["loss"].value())
    report = zcache.precompute(model)
    assert any(n.name == "Exponential._cached_pdf" and n.status == "cached" for n in report.nodes)
    c = zcache.CachedTensor(lambda: world["lam"].value() * 2.0, name="twice")
    report = zcache.precompute(lambda: c.value() + 1.0)
    assert [n.name for n in report.nodes] == ["twice"] and report.nodes[0].status == "cached"


def test_target_evaluated_again_only_to_fill_newly_kept_caches(world):
    """A precompute that only bypasses caches runs its target once; one that keeps a cache it bypassed
    before runs it a second time, filling that cache, so the next call hits."""
    mu, lam = world["mu"], world["lam"]
    below = zcache.CachedTensor(lambda: lam.value() * 2.0, name="fixed part")
    moved = zcache.CachedTensor(lambda: below.value() + mu.value(), name="moved part")
    runs = []

    def target():
        runs.append(1)
        return moved.value()

    report = zcache.precompute(target)  # moved bypassed (mu floats), below kept: nothing to fill
    assert {n.name: n.status for n in report.nodes} == {"fixed part": "cached", "moved part": "always dirty"}
    assert len(runs) == 1
    mu.floating = False
    try:
        report = zcache.precompute(target)  # moved kept now: filled by a second run
        assert {n.name: n.status for n in report.nodes}["moved part"] == "cached"
        assert len(runs) == 3
        misses = moved.stats["misses"]
        np.testing.assert_allclose(float(moved.value()), 2.0 * float(lam.value()) + float(mu.value()))
        assert moved.stats["misses"] == misses  # a hit: the second run stored it
        zcache.precompute(target)  # nothing changed: one run
        assert len(runs) == 4
    finally:
        mu.floating = True


def test_any_precomputable_object_is_a_target(world):
    """The protocol: __zcache_evaluate__ computes what a fit reads and returns the caches read besides."""
    from zcache._engine.precompute import Precomputable

    lam = world["lam"]

    class Target:
        def __init__(self):
            self.read = zcache.CachedTensor(lambda: lam.value() * 2.0, name="read now")
            self.later = zcache.CachedTensor(lambda: world["mu"].value() + lam.value(), deps=[world["mu"], lam],
                                             name="read later")

        def __zcache_evaluate__(self):
            self.read.value()
            return [self.later]

    target = Target()
    assert isinstance(target, Precomputable) and isinstance(world["loss"], Precomputable)
    status = {n.name: n.status for n in zcache.precompute(target).nodes}
    assert status == {"read now": "cached", "read later": "always dirty"}  # mu floats
    assert target.later.stats["misses"] == 0  # returned caches are classified, not computed


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_the_last_report_is_remembered_weakly(world, collect):
    """ensure_precomputed reuses the last report of the same setting; the memo and the report keep
    neither a dropped loss nor its caches alive."""
    import weakref

    from zcache._engine.precompute import ensure_precomputed, precomputed

    loss, params = world["loss"], [world["mu"], world["sigma"]]
    assert precomputed(loss) is None
    report = ensure_precomputed(loss, params, keep_floating=False)
    assert precomputed(loss) is report and ensure_precomputed(loss, params, keep_floating=False) is report
    other = ensure_precomputed(loss, params[:1], keep_floating=False)  # another floating set
    assert other is not report and precomputed(loss) is other

    def dropped():
        model = Gaussian(Space("x", LO, HI), zcache.Parameter("mu_drop", 5.0), 1.0)
        temporary = UnbinnedNLL(model, zcache.Data(world["x"], obs="x"))
        kept = zcache.precompute(temporary)
        assert kept.caches
        return kept, weakref.ref(temporary), [weakref.ref(c) for c in kept.caches]

    kept, loss_ref, cache_refs = dropped()
    collect()
    assert loss_ref() is None and all(r() is None for r in cache_refs)
    assert kept.caches == [] and kept.nodes  # the names stay


@pytest.mark.slow  # 2.1 s
def test_precompute_drops_only_the_graphs_that_read_changed_caches(world):
    """An unrelated traced function keeps its graph across a precompute."""
    other = zcache.Parameter("other_pc", 1.0)
    unrelated = zcache.function(lambda: other.value() * 2.0, wraps="tensor")
    unrelated()
    for _ in range(3):  # traced at the third call (the first two run eagerly)
        float(world["loss"].value())
    assert world["loss"].functions()[0].trace_count == 1
    zcache.precompute(world["loss"])
    unrelated()
    assert unrelated.trace_count == 1
    float(world["loss"].value())
    assert world["loss"].functions()[0].trace_count == 2  # re-traced with the bypassed nodes


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_precompute_errors(world):
    with pytest.raises(TypeError, match="precompute takes"):
        zcache.precompute(42)

    @zcache.function(wraps="tensor")
    def inside():
        zcache.precompute(world["loss"])
        return tf.constant(1.0)

    with zcache.set_graph_mode(True), pytest.raises(zcache.exceptions.IllegalInGraphModeError):
        inside()
    float(world["loss"].value())
    c = _caches(world["model"])["Gaussian.normalization"]
    with pytest.raises(zcache.exceptions.IllegalInGraphModeError):
        zcache.function(lambda: c.set_always_dirty(True) or tf.constant(0.0), wraps="tensor")()
    assert not c.always_dirty


@slow_modes("graph_mode")
def test_graphs_are_kept_per_bypass_setting(world, graph_mode):
    """Fits that toggle ``floating``: a zcache.function keeps its graphs per precompute (bypass) setting, so
    each setting is traced once, and a graph never runs under another setting. Between the switches lam
    and the events change (set_value, set_data); values and gradients equal the numpy NLL's throughout.

    A graph traced with the exponential's pdf cached, run while that cache is bypassed, would store the
    pdf and flag it valid, and lam's next move would invalidate nothing (bypassed): a stale value."""
    loss, lam = world["loss"], world["lam"]
    params = [world["mu"], world["sigma"], lam]
    rng = np.random.default_rng(7)

    def check(x0):
        value, grad = loss.value_gradient_at(x0, params)
        assert float(value) == pytest.approx(_reference_nll(world["x"], *x0, 0.4), rel=1e-12)
        expected = nd.Gradient(lambda p: _reference_nll(world["x"], *p, 0.4))(x0)
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-7)

    def round_trip():
        for floating in (False, True, False, True):
            lam.floating = floating  # lam fixed: the exponential's pdf is cached; floating: bypassed
            report = zcache.precompute(loss)
            assert report.floating == (("mu_pc", "sigma_pc", "lam_pc") if floating else ("mu_pc", "sigma_pc"))
            for _ in range(2):  # lam moves between the calls (floating or not: value_gradient_at sets it)
                check(np.array([rng.uniform(3, 7), rng.uniform(0.6, 2.0), rng.uniform(-0.8, -0.1)]))
            lam.set_value(rng.uniform(-0.8, -0.1))
            assert float(loss.value()) == pytest.approx(_ref(world), rel=1e-12)
            world["x"] = rng.uniform(LO, HI, 400)  # same number of events: no new shapes
            loss.data.set_data(world["x"])
            check(np.array([5.0, 1.0, float(lam.value())]))

    lam.floating = False
    round_trip()
    traces = [f.trace_count for f in loss.functions()]
    round_trip()
    assert [f.trace_count for f in loss.functions()] == traces  # both settings' graphs were kept
    if graph_mode is not False:
        assert sum(traces) > 0


def test_set_always_dirty_switches_the_graph_of_a_zcache_function(graph_mode):
    """A user's set_always_dirty (no precompute) takes effect at the next call of a zcache.function, both
    ways; the graph of each setting is traced once and values follow set_value throughout."""
    a = zcache.Parameter("a_sw", 2.0)
    inner = zcache.CachedTensor(lambda: a.value() ** 2, name="inner_sw")
    outer = zcache.CachedTensor(lambda: inner.value() + 1.0, name="outer_sw")
    f = zcache.function(lambda: outer.value() * 3.0, wraps="tensor")
    expected_traces = 0
    for step, dirty in enumerate((False, True, False, True, False)):
        inner.set_always_dirty(dirty)
        for v in (1.5 + step, 2.5 + step):
            a.set_value(v)
            assert float(f()) == 3.0 * (v**2 + 1.0)
            assert float(outer.value()) == v**2 + 1.0
        if graph_mode is not False and step < 2:
            expected_traces += 1
        assert f.trace_count == expected_traces
