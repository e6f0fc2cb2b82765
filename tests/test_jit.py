"""The XLA-compiled mode (``zcache.set_jit_mode``): same numbers, same cache contract, and every
in-graph check still raises its zcache error (XLA drops Assert ops; under jit the checks are
outputs of the compiled function, inspected after each call)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from helpers import complex_line_shape_loss

import zcache
from zcache._engine.traced_checks import assertion_ops, require
from zcache.binned import BinnedData, ExtendedBinnedNLL, Template
from zcache.exceptions import (
    DataRangeError,
    FitError,
    GraphModeError,
    IllegalInGraphModeError,
    InvalidDataError,
    ModelError,
    ParameterValueError,
    UnknownIdentifierError,
    UnmanagedTraceError,
)
from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.shapes import (
    ARGUS,
    KDE1D,
    Bernstein,
    Chebyshev,
    CrystalBall,
    DoubleCrystalBall,
    HistogramPdf,
    JohnsonSU,
    Voigtian,
)

# XLA sums the 2,000 log-densities in another order (and fuses exp/log differently) than
# TensorFlow's kernels: the loss differs by a few ulps of each term, i.e. about N * 1e-16
# relative to a sum of N terms; gradients cancel between events, so their relative error is
# larger where they are near zero. Measured: value 3e-15, gradient 2e-13 (of its norm).
VALUE_RTOL = 1e-12
GRAD_ATOL = 1e-9


@pytest.fixture(autouse=True)
def _restore_jit():
    before = zcache.get_jit_mode()
    yield
    zcache.set_jit_mode(before)


@pytest.fixture
def fit():
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma", 0.5, lower=0.05, upper=2.0)
    lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter("nsig", 600.0, lower=0.0, upper=1e5)
    nbkg = zcache.Parameter("nbkg", 1400.0, lower=0.0, upper=1e5)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    rng = np.random.default_rng(7)
    x = np.r_[rng.normal(5.0, 0.5, 600), rng.exponential(1 / 0.3, 3000)]
    x = x[(x > 0.0) & (x < 10.0)][:2000]
    data = zcache.Data(x, name="x")
    loss = ExtendedUnbinnedNLL(model, data)
    zcache.precompute(loss)
    return loss, data, list(loss.params)


def _compiled_graphs(fn):
    """The concrete graphs of ``fn``'s XLA-compiled tf.functions."""
    graphs = []
    for (_, jit), tf_function in fn._tf_functions.items():
        if jit:
            graphs += [c.graph for c in tf_function._list_all_concrete_functions()]
    return graphs


def _state(params, data, caches):
    return [float(p) for p in params], data.numpy().copy(), [c.is_valid for c in caches]


# -- the policy ------------------------------------------------------------------------------
def test_set_jit_mode_settings_and_restorer():
    assert zcache.get_jit_mode() is False
    with zcache.set_jit_mode("auto"):
        assert zcache.get_jit_mode() == "auto"
        with zcache.set_jit_mode({"tensor": True}):
            assert zcache.get_jit_mode() == {"tensor": True}
        assert zcache.get_jit_mode() == "auto"
    assert zcache.get_jit_mode() is False
    for bad in ("fast", 1, None, {"loss": 1}):
        with pytest.raises(GraphModeError):
            zcache.set_jit_mode(bad)
    with pytest.raises(UnknownIdentifierError):
        zcache.set_jit_mode({"losses": True})
    assert zcache.get_jit_mode() is False

    @zcache.function(wraps="loss")
    def inside():
        zcache.set_jit_mode(True)
        return tf.constant(1.0)

    with pytest.raises(IllegalInGraphModeError):
        inside()


def test_auto_compiles_loss_functions_only():
    from zcache._engine.mode import compiles

    with zcache.set_jit_mode("auto"):
        assert [k for k in ("tensor", "loss", "sample", "gradient", "model") if compiles(k)] == ["loss"]
    with zcache.set_jit_mode({"loss": False, "tensor": True}):
        assert compiles("tensor") and not compiles("loss")


def test_switching_takes_effect_without_clear_graph_cache():
    p = zcache.Parameter("p_switch", 2.0)

    @zcache.function(wraps="loss")
    def f():
        return p.value() ** 2

    assert float(f()) == 4.0 and f.trace_count == 1
    with zcache.set_jit_mode(True):
        assert float(f()) == 4.0 and f.trace_count == 2  # its own, compiled graph
        p.set_value(3.0)
        assert float(f()) == 9.0 and f.trace_count == 2  # no retrace on a value change
    assert float(f()) == 9.0 and f.trace_count == 2  # the uncompiled graph is still there
    assert set(f._tf_functions) == {(True, False), (True, True)}
    assert f.jit_fallback is None


# -- numbers ---------------------------------------------------------------------------------
@pytest.mark.slow  # 25 s: XLA compiles value, gradient and Hessian (test_new_number_of_events_... compares a compiled value fast)
def test_values_gradients_hessian_equal_uncompiled(fit):
    loss, _, params = fit
    moved = {"mu": 5.1, "sigma": 0.55, "lam": -0.28, "nsig": 620.0, "nbkg": 1390.0}
    x = np.array([moved[p.name] for p in params])
    start = [float(p) for p in params]
    ref = [loss.value(), *loss.value_gradient(), loss.value_at(x), *loss.value_gradient_at(x),
           loss.hessian_at(x)]
    zcache.set_values(params, start)
    with zcache.set_jit_mode("auto"):
        got = [loss.value(), *loss.value_gradient(), loss.value_at(x), *loss.value_gradient_at(x),
               loss.hessian_at(x)]
        got2 = [loss.value(), *loss.value_gradient()]  # at x now (value_at set it), hits
    for r, g in zip(ref, got, strict=True):
        r, g = r.numpy(), g.numpy()
        if r.ndim == 0:
            np.testing.assert_allclose(g, r, rtol=VALUE_RTOL)
        else:
            np.testing.assert_allclose(g, r, rtol=1e-9, atol=GRAD_ATOL * max(1.0, np.abs(r).max()))
    np.testing.assert_allclose(got2[0].numpy(), ref[3].numpy(), rtol=VALUE_RTOL)
    for name in ("_value_fn",):
        fn = getattr(loss, name)
        assert fn.jit_fallback is None
        graphs = _compiled_graphs(fn)
        assert graphs and all(assertion_ops(g) == [] for g in graphs)
    for fn in loss._at(tuple(params)):
        assert fn.jit_fallback is None
        assert all(assertion_ops(g) == [] for g in _compiled_graphs(fn))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_caches_keep_their_contract_under_jit():
    x = zcache.Data(np.linspace(0.0, 1.0, 500), name="xc")
    mu = zcache.Parameter("mu_c", 0.2)
    s = zcache.Parameter("s_c", 1.0)
    shape = zcache.CachedTensor(lambda: tf.exp(-0.5 * (x.value() - mu.value()) ** 2), name="shape_c")

    @zcache.function(wraps="loss")
    def loss():
        return -tf.reduce_sum(tf.math.log(shape.value())) * s.value()

    def reference():
        return -np.sum(-0.5 * (x.numpy() - float(mu)) ** 2) * float(s)

    with zcache.set_jit_mode(True):
        # the first call traces the graph for XLA (to learn which data it reads), then runs
        # uncompiled for these new data shapes: that gives the cache's Variable its shape, which
        # XLA cannot; every later call is compiled, with no further trace
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)
        traces = loss.trace_count
        assert traces == 2
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)
        assert loss.trace_count == traces and shape.stats == {"hits": 1, "misses": 1}
        s.set_value(2.0)
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)  # hit
        mu.set_value(0.4)
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)  # miss: never stale
        assert shape.stats == {"hits": 2, "misses": 2}
        x.set_data(np.linspace(0.0, 2.0, 500))
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)
        x.set_data(np.linspace(0.0, 2.0, 300))  # a new shape: this call uncompiled, then recompiled
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)
        np.testing.assert_allclose(float(loss()), reference(), rtol=1e-12)
        assert shape.stats == {"hits": 3, "misses": 4}
        assert loss.trace_count == traces
        # exact gradients through a hit
        g = zcache.gradient(loss, [mu, s])
        expected = [-np.sum(x.numpy() - 0.4) * 2.0, reference() / 2.0]
        np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-10)
        assert loss.jit_fallback is None


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_a_cache_hit_under_jit_does_not_compute_the_miss_branch():
    """XLA keeps the cache's tf.cond a conditional (a select would compute the miss on every hit).

    The miss branch is element-wise only (what XLA would turn into a select); the compiled
    program must hold a conditional, and the hit must not cost what the miss costs.
    """
    x = zcache.Data(np.linspace(0.0, 1.0, 20_000), name="x_sel")
    p = zcache.Parameter("p_sel", 1.0)

    def expensive():
        y = x.value()
        for _ in range(40):
            y = tf.sin(y) + 0.1
        return y

    column = zcache.CachedTensor(expensive, name="sines_sel")

    @zcache.function(wraps="tensor")
    def total():
        return tf.reduce_sum(column.value() * p.value())

    with zcache.set_graph_mode(True), zcache.set_jit_mode(True):
        total()
        total()
        assert total.jit_fallback is None
        [tf_function] = [f for (_, jit), f in total._tf_functions.items() if jit]
        hlo = tf_function.experimental_get_compiler_ir()(stage="optimized_hlo")
        assert " conditional(" in hlo, "XLA compiled the cache read as a select: every hit computes its miss"
        p.set_value(2.0)
        hits = column.stats["hits"]
        np.testing.assert_allclose(float(total()), 2.0 * float(tf.reduce_sum(expensive())), rtol=1e-12)
        assert column.stats["hits"] == hits + 1


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_new_number_of_events_recompiles_without_retrace(fit):
    loss, data, _ = fit
    with zcache.set_jit_mode("auto"):
        first = float(loss.value())
        traces = loss._value_fn.trace_count
        data.set_data(data.numpy()[:1500])
        second = float(loss.value())
        assert loss._value_fn.trace_count == traces  # XLA recompiles per shape; TF does not retrace
    assert float(loss.value()) == pytest.approx(second, rel=VALUE_RTOL)
    assert first != second


# -- refused inputs raise, and change nothing ------------------------------------------------
# above and inf are exhaustive: make test keeps NaN (a third and second refused value under XLA)
@pytest.mark.parametrize("bad", [np.nan, pytest.param(8.0, marks=pytest.mark.exhaustive),
                                 pytest.param(np.inf, marks=pytest.mark.exhaustive)], ids=["nan", "above", "inf"])
@pytest.mark.slow  # XLA compiles the three functions (test_refused_write_... is the fast refusal under jit)
def test_value_at_refuses_bad_values_under_jit(fit, bad):
    loss, data, params = fit
    caches = zcache.precompute(loss).cached
    x = np.array([float(p) for p in params])
    x[[p.name for p in params].index("mu")] = bad
    with zcache.set_jit_mode("auto"):
        good = float(loss.value())
        before = _state(params, data, caches)
        for call in (loss.value_at, loss.value_gradient_at, loss.hessian_at):
            with pytest.raises(ParameterValueError, match="NaN or outside its limits; all unchanged"):
                call(x)
            after = _state(params, data, caches)
            assert after[0] == before[0]
            np.testing.assert_array_equal(after[1], before[1])
            assert after[2] == before[2]
            assert float(loss.value()) == pytest.approx(good, rel=VALUE_RTOL)  # no cache stale
    with pytest.raises(ParameterValueError) as eager_err:
        loss.value_at(x)
    with zcache.set_jit_mode("auto"), pytest.raises(ParameterValueError) as jit_err:
        loss.value_at(x)
    assert str(jit_err.value) == str(eager_err.value)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_refused_write_leaves_no_cache_valid_with_a_refused_value():
    p = zcache.Parameter("p_ref", 1.0, lower=0.0, upper=5.0)
    q = zcache.Parameter("q_ref", 1.0)
    c = zcache.CachedTensor(lambda: p.value() * 10.0, name="c_ref")

    @zcache.function(wraps="loss")
    def set_and_read(v, w):
        q.set_value(w)  # an unguarded write: must be undone as well
        p.set_value(v)
        return c.value() + q.value()

    with zcache.set_jit_mode(True):
        assert float(set_and_read(tf.constant(2.0, tf.float64), tf.constant(3.0, tf.float64))) == 23.0
        assert c.is_valid
        with pytest.raises(ParameterValueError, match="above the upper limit 5.0"):
            set_and_read(tf.constant(9.0, tf.float64), tf.constant(4.0, tf.float64))
        assert (float(p), float(q)) == (2.0, 3.0)
        assert float(p.variable.numpy()) == 2.0 and float(q.variable.numpy()) == 3.0
        # XLA ran the write, but of the old value (checks_hold): c kept its flag and value
        assert c.is_valid and c.stats["misses"] == 1
        assert float(c.value()) == 20.0
        assert set_and_read.jit_fallback is None
    # the same message as the uncompiled graph
    with pytest.raises(ParameterValueError) as plain:
        set_and_read(tf.constant(9.0, tf.float64), tf.constant(4.0, tf.float64))
    with zcache.set_jit_mode(True), pytest.raises(ParameterValueError) as compiled:
        set_and_read(tf.constant(9.0, tf.float64), tf.constant(4.0, tf.float64))
    assert str(plain.value) == str(compiled.value)
    with zcache.set_jit_mode(True), pytest.raises(ParameterValueError, match="not finite"):
        set_and_read(tf.constant(np.nan, tf.float64), tf.constant(4.0, tf.float64))
    assert (float(p), float(q)) == (2.0, 3.0)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_bad_set_data_inside_a_compiled_function(fit):
    loss, data, params = fit
    good = data.numpy().copy()
    with zcache.set_jit_mode("auto"):
        value = float(loss.value())

        @zcache.function(wraps="loss")
        def refill(x):
            data.set_data(x)
            return loss.value()

        assert float(refill(tf.constant(good))) == pytest.approx(value, rel=VALUE_RTOL)
        outside = good.copy()
        outside[3] = 12.0
        with pytest.raises(DataRangeError, match="lie outside"):
            refill(tf.constant(outside))
        np.testing.assert_array_equal(data.numpy(), good)
        assert float(loss.value()) == pytest.approx(value, rel=VALUE_RTOL)
        nan = good.copy()
        nan[5] = np.nan
        with pytest.raises(InvalidDataError, match="NaN or infinite values; data unchanged"):
            refill(tf.constant(nan))
        np.testing.assert_array_equal(data.numpy(), good)
        assert float(loss.value()) == pytest.approx(value, rel=VALUE_RTOL)
        assert refill.jit_fallback is None
        assert all(assertion_ops(g) == [] for g in _compiled_graphs(refill))
    assert {p.name: float(p) for p in params} == {"mu": 5.0, "sigma": 0.5, "lam": -0.3, "nsig": 600.0,
                                                   "nbkg": 1400.0}


def test_a_failed_first_compiled_call_puts_back_the_data_it_wrote():
    """The first call under jit traces for XLA, then runs uncompiled: the data its graph wrote before a
    later check failed are put back (their snapshot, taken by the trace for XLA, was once dropped)."""
    data = zcache.Data(np.arange(4.0), name="x_first_failed")
    p = zcache.Parameter("p_first_failed", -1.0)

    @zcache.function(wraps="loss")
    def refill(x):
        data.set_data(x)
        checks = require(p.value() > 0.0, ModelError, "p must be positive")
        with tf.control_dependencies(checks):
            return tf.reduce_sum(data.value())

    with zcache.set_jit_mode(True):
        with pytest.raises(ModelError, match="p must be positive"):
            refill(tf.constant([5.0, 6.0, 7.0, 8.0]))
        np.testing.assert_array_equal(data.numpy(), np.arange(4.0))
        p.set_value(1.0)
        assert float(refill(tf.constant([5.0, 6.0, 7.0, 8.0]))) == 26.0
        p.set_value(-1.0)
        with pytest.raises(ModelError, match="p must be positive"):
            refill(tf.constant([1.0, 1.0, 1.0, 1.0]))
        np.testing.assert_array_equal(data.numpy(), [5.0, 6.0, 7.0, 8.0])


@pytest.mark.slow  # 4 s: a fit under XLA
def test_nan_loss_raises_fit_error_under_jit():
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu_nan", 1.0, lower=0.0, upper=10.0)
    sigma = zcache.Parameter("sigma_nan", 1.0, lower=0.01, upper=5.0)
    data = zcache.Data(np.linspace(0.5, 9.5, 200), name="x_nan")
    loss = UnbinnedNLL(Gaussian(space, mu, sigma), data)
    fine = float(loss.value())
    width = zcache.CachedTensor(lambda: 2.0 * sigma.value(), name="width_nan")

    @zcache.function(wraps="loss")
    def at(m, s):
        mu.set_value(m)
        sigma.set_value(s)
        return loss.value() + 0.0 * width.value()  # width: computed and flagged at s, then undone

    with pytest.raises(FitError) as plain:
        at(tf.constant(0.0, tf.float64), tf.constant(0.02, tf.float64))
    with zcache.set_jit_mode(True):
        assert float(loss.value()) == pytest.approx(fine, rel=VALUE_RTOL)
        with pytest.raises(FitError) as compiled:
            at(tf.constant(0.0, tf.float64), tf.constant(0.02, tf.float64))
        assert (float(mu), float(sigma)) == (1.0, 1.0)
        assert float(loss.value()) == pytest.approx(fine, rel=VALUE_RTOL)
        assert float(width.value()) == 2.0  # not the 0.04 the failed call stored
        assert at.jit_fallback is None
    assert str(compiled.value) == str(plain.value)


# -- what cannot be compiled runs uncompiled --------------------------------------------------
def test_check_inside_a_cache_falls_back_to_uncompiled_and_still_raises():
    p = zcache.Parameter("p_nested", 1.0)

    def positive_double():
        checks = require(p.value() > 0.0, ModelError, "p must be positive")
        with tf.control_dependencies(checks):
            return 2.0 * p.value()

    c = zcache.CachedTensor(positive_double, name="c_nested")

    @zcache.function(wraps="loss")
    def f():
        return c.value() + 1.0

    with zcache.set_jit_mode(True):
        assert float(f()) == 3.0  # the first call (new data shapes) runs uncompiled
        assert float(f()) == 3.0 and f.jit_fallback is not None and "nested graph" in f.jit_fallback
        p.set_value(-1.0)
        with pytest.raises(ModelError, match="p must be positive"):
            f()
        assert not c.is_valid


def test_what_xla_cannot_compile_runs_uncompiled():
    x = zcache.Data(np.array([1.0, 2.0, 2.0, 3.0]), name="x_strings")

    @zcache.function(wraps="loss")
    def distinct():  # string ops have no XLA kernel
        return tf.size(tf.strings.as_string(x.value()))

    with zcache.set_jit_mode(True):
        assert int(distinct()) == 4 and distinct.jit_fallback is None  # the first call runs uncompiled
        assert int(distinct()) == 4
        assert distinct.jit_fallback is not None and "XLA" in distinct.jit_fallback
        assert int(distinct()) == 4


# -- a fit -------------------------------------------------------------------------------------
# exhaustive (two fits, XLA compiles): make test keeps a compiled fit under XLA equal to MIGRAD's and the same fit
# without XLA equal to MIGRAD's (test_compiled_fit.py's test_compiled_fit_in_modes, [jit] and [graph]), and compiled
# fits under XLA equal to the uncompiled ones toy by toy (test_toys_on_padded_data_under_jit_match_the_uncompiled_study)
@pytest.mark.exhaustive
def test_minuit_fit_same_with_jit_on_and_off(fit):
    from zcache.minimize import Minuit

    loss, _, params = fit
    start = [float(p) for p in params]
    results = []
    for jit in (False, "auto"):
        zcache.set_values(params, start)
        with zcache.set_jit_mode(jit):
            # the compiled fit both times (under XLA every fit is): to 1e-6 only the same algorithm agrees, and
            # the first fit without XLA would be the tiered start's MIGRAD (test_tiers: within the tolerance)
            result = Minuit(tiered=False).minimize(loss)
        results.append(([float(p) for p in params], result))
    (v0, r0), (v1, r1) = results
    assert r0.valid and r1.valid
    np.testing.assert_allclose(v1, v0, rtol=1e-6, atol=1e-6)
    assert r1.fmin == pytest.approx(r0.fmin, rel=1e-10)


@pytest.mark.slow  # 3 s (test_new_number_of_events_recompiles_without_retrace is the fast check)
def test_set_data_to_another_number_of_events_inside_a_compiled_function(fit):
    loss, data, _ = fit
    good = data.numpy().copy()

    @zcache.function(wraps="loss")
    def refill(x):
        data.set_data(x)
        return loss.value()

    with zcache.set_jit_mode("auto"):
        fewer = float(refill(tf.constant(good[:1500])))  # another shape: this call uncompiled
        assert float(refill(tf.constant(good[:1500]))) == pytest.approx(fewer, rel=VALUE_RTOL)
        assert refill.jit_fallback is None
        assert data.numpy().shape == (1500,)
        with pytest.raises(InvalidDataError):
            refill(tf.constant(np.r_[good[:999], np.nan]))
        np.testing.assert_array_equal(data.numpy(), good[:1500])
    assert float(loss.value()) == pytest.approx(fewer, rel=VALUE_RTOL)


# -- shape buckets: padded data ---------------------------------------------------------------
def _padded_fit(capacity):
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma", 0.5, lower=0.05, upper=2.0)
    lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter("nsig", 600.0, lower=0.0, upper=1e5)
    nbkg = zcache.Parameter("nbkg", 1400.0, lower=0.0, upper=1e5)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    rng = np.random.default_rng(11)
    x = np.r_[rng.normal(5.0, 0.5, 1200), rng.exponential(1 / 0.3, 6000)]
    x = x[(x > 0.0) & (x < 10.0)][:4000]
    data = zcache.Data(x[:2000], name="x_padded", capacity=capacity)
    return model, data, ExtendedUnbinnedNLL(model, data), x


def _variable_shapes(loss):
    """The shapes of every Variable the loss's compiled graphs read: XLA compiles per these shapes."""
    return sorted((v.name, tuple(tf.shape(v).numpy())) for fn in loss.functions()
                  for g in _compiled_graphs(fn) for v in g.variables)


@pytest.mark.slow  # 17 s: XLA compiles per capacity
def test_padded_data_new_sizes_neither_retrace_nor_recompile():
    import time

    model, data, loss, x = _padded_fit(capacity=4096)
    params = list(loss.params)
    x0 = np.array([float(p) for p in params])
    plain = zcache.Data(x[:2000], name="x_plain")
    reference = ExtendedUnbinnedNLL(model, plain)
    with zcache.set_jit_mode("auto"):
        t0 = time.perf_counter()
        loss.value_gradient_at(x0, params)  # traces; fills the caches uncompiled (a new shape for XLA)
        loss.value_gradient_at(x0 * (1 + 1e-9), params)  # compiles
        first = time.perf_counter() - t0
        traces, shapes = [f.trace_count for f in loss.functions()], _variable_shapes(loss)
        assert shapes  # the compiled graphs read the padded events (and their caches)
        for n in (1500, 3999, 17, 2000):
            data.set_data(x[:n])
            t0 = time.perf_counter()
            value, grad = loss.value_gradient_at(x0, params)
            elapsed = time.perf_counter() - t0
            plain.set_data(x[:n])
            with zcache.set_jit_mode(False):
                ref_value, ref_grad = reference.value_gradient_at(x0, params)
            assert float(value) == pytest.approx(float(ref_value), rel=VALUE_RTOL)
            np.testing.assert_allclose(grad.numpy(), ref_grad.numpy(), rtol=1e-10, atol=GRAD_ATOL)
            assert elapsed < first / 5, (n, elapsed, first)  # a recompile costs about as much as the first call
        assert [f.trace_count for f in loss.functions()] == traces
        assert _variable_shapes(loss) == shapes
        assert all(f.jit_fallback is None for f in loss.functions())
        data.set_data(x[:4000].repeat(2)[:4097])  # past the capacity: grows once (a new bucket)
        assert data.capacity == 4608
        grown = ExtendedUnbinnedNLL(model, zcache.Data(x[:4000].repeat(2)[:4097], name="x_grown"))
        for _ in range(2):  # uncompiled (new shapes), then compiled for them
            value, _ = loss.value_gradient_at(x0, params)
            assert float(value) == pytest.approx(float(grown.value_at(x0, params)), rel=VALUE_RTOL)
        assert [f.trace_count for f in loss.functions()] == traces


@pytest.mark.slow  # 16 s: two toy studies
def test_toys_on_padded_data_under_jit_match_the_uncompiled_study():
    """A toy study on padded data, compiled: no retrace after the first toy, same fits as without XLA."""
    from zcache.minimize import Minuit
    from zcache.toys import run_toys

    model, data, loss, _ = _padded_fit(capacity=4096)
    params = list(loss.params)
    with zcache.set_jit_mode("auto"):
        run_toys(model, loss, 1, seed=1, minimizer=Minuit(), progress=False)  # compiles
        traces = [f.trace_count for f in loss.functions()]
        compiled = run_toys(model, loss, 4, seed=5, minimizer=Minuit(), progress=False)
        assert [f.trace_count for f in loss.functions()] == traces
        assert all(f.jit_fallback is None for f in loss.functions())
    # compiled as under XLA (where every fit is): to 1e-3 errors only the same algorithm agrees; without XLA a
    # loss's first two fits would be the tiered start's MIGRAD (test_tiers: the tiers agree within the tolerance)
    plain = run_toys(model, loss, 4, seed=5, minimizer=Minuit(tiered=False), progress=False)
    assert compiled.table["nevents"].tolist() == plain.table["nevents"].tolist()
    assert len(set(plain.table["nevents"].tolist())) > 1  # the toys have different sizes
    assert compiled.table["valid"].all() and plain.table["valid"].all()
    for p in params:
        err = plain.table[f"{p.name}_err"]
        np.testing.assert_array_less(np.abs(compiled.table[p.name] - plain.table[p.name]), 1e-3 * err)
    assert data.nevents == 2000  # run_toys puts the events back


# -- line shapes through complex arithmetic (issue 23) ----------------------------------------------
# differences and exact-caches are exhaustive: make test keeps the exact case after precompute, which compiles the
# same line shape, the bridge's compiled Hessian by differences, and exact Hessians through valid caches
# (test_loss.py's test_hessian_at_exact_through_valid_caches)
@pytest.mark.parametrize("exact", [pytest.param(False, marks=pytest.mark.exhaustive), "precompute",
                                   pytest.param("caches", marks=pytest.mark.exhaustive)],
                         ids=["differences", "exact", "exact-caches"])
@pytest.mark.slow  # XLA compiles Hessians of line shapes
def test_jit_hessian_line_shapes_floating_equals_uncompiled(exact):
    """hessian_at with a mass and a width floating, through complex 1/z and sqrt: compiled (True and
    'auto', repeated) equals graph mode and eager, which equal central differences of the gradient;
    ``exact`` (after precompute): the second-order autodiff Hessian in one compiled call; ``exact-caches``:
    the same without precompute, through the valid caches of the line shape (issue 26)."""
    loss, params = complex_line_shape_loss("cls")
    if exact == "precompute":
        zcache.precompute(loss)
    x = np.array([0.93, 0.11])
    hessian_at = functools.partial(loss.hessian_at, exact=True) if exact == "caches" else loss.hessian_at
    with zcache.set_graph_mode(False):
        loss.value()  # valid caches for exact-caches
        eager = hessian_at(x, params).numpy()
        reference = zcache.hessian(loss.value, params).numpy()  # differences of eager gradients
    np.testing.assert_allclose(eager, reference, rtol=1e-5)
    graph = hessian_at(x, params).numpy()
    np.testing.assert_allclose(graph, eager, rtol=1e-9)
    for jit in (True, "auto"):
        with zcache.set_jit_mode(jit):
            for _ in range(3):  # a result that changes between calls would show here
                np.testing.assert_allclose(hessian_at(x, params).numpy(), eager, rtol=1e-9)
                value, grad = loss.value_gradient_at(x * 1.01, params)
                with zcache.set_jit_mode(False), zcache.set_graph_mode(False):
                    value0, grad0 = loss.value_gradient_at(x * 1.01, params)
                np.testing.assert_allclose(grad.numpy(), grad0.numpy(), rtol=1e-9)
    assert [float(p) for p in params] == pytest.approx(x * 1.01, rel=1e-15)
    assert all(fn.jit_fallback is None for fn in loss.functions())


# -- an amplitude fit ----------------------------------------------------------------------------
@pytest.mark.exhaustive  # CI's 25 minutes; XLA's Dalitz loss runs in make bench-smoke and test-all
def test_amplitude_loss_compiles_and_keeps_its_mass_check():
    """A Dalitz amplitude loss compiles (a mass whose limits lie inside the channel's range needs no
    in-graph check); a mass without such limits keeps the check, runs uncompiled, and still raises."""
    from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance

    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039, names=("K-", "pi+", "pi+"))
    zcache.models.set_seed(3)
    mc, data = kin.sample(4000, name="mc_jit"), kin.sample(2000, name="data_jit")
    limited = zcache.Parameter("m_kst_jit", 0.8955, lower=0.85, upper=0.95)
    free = zcache.Parameter("m_k0_jit", 1.425)  # no limits: the range check stays in the graph
    amps = [(ComplexParameter("c_nr_jit", 1.0, floating=False), NonResonant(kin)),
            (ComplexParameter("c_kst_jit", 0.5 + 0.3j), Resonance(kin, ("12", "13"), limited, 0.047, 1, name="Kst")),
            (ComplexParameter("c_k0_jit", 0.3 - 0.2j), Resonance(kin, ("12", "13"), 1.425, 0.27, 0, name="K0"))]
    loss = UnbinnedNLL(AmplitudePdf(CoherentSum(amps), mc), data)
    params = list(loss.params)
    x0 = np.array([float(p) for p in params])
    ref_value, ref_grad = loss.value_gradient_at(x0, params)
    with zcache.set_jit_mode("auto"):
        for _ in range(3):
            value, grad = loss.value_gradient_at(x0, params)
        assert all(f.jit_fallback is None for f in loss.functions())
    assert float(value) == pytest.approx(float(ref_value), rel=VALUE_RTOL)
    np.testing.assert_allclose(grad.numpy(), ref_grad.numpy(), rtol=1e-9, atol=GRAD_ATOL)

    checked = UnbinnedNLL(AmplitudePdf(CoherentSum(
        [amps[0], (ComplexParameter("c_free_jit", 0.3 - 0.2j), Resonance(kin, ("12", "13"), free, 0.27, 0, name="K0f"))]),
        mc), data)
    with zcache.set_jit_mode("auto"):
        for _ in range(2):
            float(checked.value())
        assert "nested graph" in (checked._value_fn.jit_fallback or "")
        free.set_value(5.0)  # above the channels' range
        with pytest.raises(ModelError, match="left the channels' range"):
            checked.value()


# -- every shape and binned loss ---------------------------------------------------------------
def _shape_losses():
    """id -> a zero-argument builder of a loss over each family of zcache.shapes and zcache.binned."""
    rng = np.random.default_rng(12)
    space = Space("x", 0.0, 10.0)
    x = np.r_[rng.normal(5.0, 0.5, 300), rng.uniform(0.0, 10.0, 500)]
    edges = np.linspace(0.0, 10.0, 31)

    def p(name, value, lo, hi):
        return zcache.Parameter(name, value, lower=lo, upper=hi)

    def peak_plus(background):
        def build(tag):
            mu, sigma = p(f"mu_{tag}", 5.0, 3.0, 7.0), p(f"sigma_{tag}", 0.5, 0.1, 2.0)
            peaks = {
                "cb": lambda: CrystalBall(space, mu, sigma, p(f"a_{tag}", 1.4, 0.3, 5.0), p(f"n_{tag}", 3.0, 1.1, 20.0)),
                "dcb": lambda: DoubleCrystalBall(space, mu, sigma, 1.2, 3.0, p(f"ar_{tag}", 2.0, 0.3, 5.0), 2.0),
                "voigt": lambda: Voigtian(space, mu, sigma, p(f"g_{tag}", 0.2, 0.01, 2.0)),
                "johnson": lambda: JohnsonSU(space, mu, sigma, p(f"gam_{tag}", 0.1, -3.0, 3.0),
                                             p(f"del_{tag}", 1.5, 0.3, 5.0)),
            }
            backgrounds = {
                "chebyshev": lambda: Chebyshev(space, [p(f"c1_{tag}", 0.1, -1.0, 1.0)]),
                "bernstein": lambda: Bernstein(space, [1.0, p(f"b1_{tag}", 0.8, 0.01, 5.0), 1.2]),
                "argus": lambda: ARGUS(space, 10.5, p(f"c_{tag}", -1.0, -20.0, -0.01), 0.5),
                "kde": lambda: KDE1D(space, rng.uniform(0.0, 10.0, 400)),
                "histogram": lambda: HistogramPdf(space, *np.histogram(rng.uniform(0.0, 10.0, 3000), edges)),
            }
            return peaks, backgrounds[background]()
        return build

    def unbinned(peak, background):
        def make():
            peaks, bkg = peak_plus(background)(f"{peak}_{background}")
            yields = [p(f"ns_{peak}_{background}", 300.0, 0.0, 1e4), p(f"nb_{peak}_{background}", 500.0, 0.0, 1e4)]
            return ExtendedUnbinnedNLL(SumPdf([peaks[peak](), bkg], yields=yields), zcache.Data(x, name="x"))
        return make

    def binned(kind):
        def make():
            data = BinnedData.from_numpy(x, bins=edges)
            if kind == "template":
                t1, _ = np.histogram(rng.normal(5.0, 0.5, 2000), edges)
                t2, _ = np.histogram(rng.uniform(0.0, 10.0, 2000), edges)
                return Template(data, [t1, t2])
            peaks, bkg = peak_plus("histogram")(kind)
            yields = [p(f"ns_{kind}", 300.0, 0.0, 1e4), p(f"nb_{kind}", 500.0, 0.0, 1e4)]
            return ExtendedBinnedNLL(SumPdf([peaks["cb"](), bkg], yields=yields), data)
        return make

    return {  # every shape once; BinnedChi2 integrates the model as ExtendedBinnedNLL does
        "cb+chebyshev": unbinned("cb", "chebyshev"), "dcb+bernstein": unbinned("dcb", "bernstein"),
        "voigt+argus": unbinned("voigt", "argus"), "johnson+kde": unbinned("johnson", "kde"),
        "binned_extended+histogram": binned("extended"), "template": binned("template"),
    }


SHAPE_LOSSES = _shape_losses()


#: exhaustive pairs of test_every_shape_and_binned_loss_compiles_to_the_same_numbers: make test keeps the other
#: four shape pairs; voigt+argus is the Voigtian's XLA trace, johnson+kde (both shapes run in graph mode)
SHAPE_LOSSES_EXHAUSTIVE = {"voigt+argus", "johnson+kde"}


@pytest.mark.slow  # XLA compiles six losses (the Voigtian the longest)
@pytest.mark.parametrize("which", [pytest.param(w, marks=pytest.mark.exhaustive if w in SHAPE_LOSSES_EXHAUSTIVE else ())
                                   for w in SHAPE_LOSSES])
def test_every_shape_and_binned_loss_compiles_to_the_same_numbers(which):
    """What a day-one user fits (zcache.shapes, zcache.binned) compiles under XLA (no fallback to
    the uncompiled graph) and gives the uncompiled value and gradient."""
    loss = SHAPE_LOSSES[which]()
    params = list(loss.params)
    start = np.array([float(q) for q in params])
    moved = start * 1.01 + 0.001
    value, grad = (t.numpy() for t in loss.value_gradient_at(moved))
    zcache.set_values(params, start)
    with zcache.set_jit_mode(True):
        for _ in range(2):  # the first call for a new shape runs uncompiled; the second compiled
            got_value, got_grad = (t.numpy() for t in loss.value_gradient_at(moved))
    np.testing.assert_allclose(got_value, value, rtol=VALUE_RTOL)
    np.testing.assert_allclose(got_grad, grad, rtol=1e-9, atol=GRAD_ATOL * max(1.0, np.abs(grad).max()))
    fn = loss._at(tuple(params))[1]
    assert fn.jit_fallback is None and _compiled_graphs(fn)


# -- a user's own tf.function(jit_compile=True) -------------------------------------------------
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_a_users_jit_compile_function_is_refused_not_unchecked(fit):
    """XLA drops zcache's checks: a user's tf.function(jit_compile=True) around a zcache loss
    returned a number for an event outside the range (a wrong number, no DataRangeError).
    Cache reads and checks are refused there at trace time, with the way to compile instead;
    zcache.set_jit_mode compiles the same loss and keeps the check."""
    loss, data, params = fit
    before = _state(params, data, [])
    expected = float(loss.value())

    @tf.function(jit_compile=True)
    def users():
        return loss.value()

    @zcache.function(wraps="loss")
    def wrapped():
        return loss.value()

    @tf.function(jit_compile=True)
    def users_around_zcache():
        return wrapped()

    mu = params[0]

    @tf.function(jit_compile=True)
    def parameters_only():  # no cache and no check: nothing for XLA to drop
        return mu.value() ** 2

    for fn in (users, users_around_zcache):
        with pytest.raises(UnmanagedTraceError, match="set_jit_mode"):
            fn()
    assert float(parameters_only()) == pytest.approx(float(mu) ** 2, rel=1e-15)
    after = _state(params, data, [])
    assert after[0] == before[0] and np.array_equal(after[1], before[1])

    outside = data.numpy().copy()
    outside[0] = 11.0  # outside [0, 10]
    with zcache.set_jit_mode(True):
        assert float(wrapped()) == pytest.approx(expected, rel=VALUE_RTOL)
        with data.set_data(outside):
            for _ in range(2):  # the first call for these shapes runs uncompiled, the second compiled
                with pytest.raises(DataRangeError):
                    wrapped()
        assert float(wrapped()) == pytest.approx(expected, rel=VALUE_RTOL)
