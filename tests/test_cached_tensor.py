"""CachedTensor: hits, misses, staleness, gradients, errors; eager and traced."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache._engine.dependencies import GRAPH
from zcache.exceptions import (
    CachedValueError,
    DependencyCycleError,
    IllegalInGraphModeError,
    InvalidDependencyError,
    UndeclaredDependencyWarning,
    UntrackedVariableWarning,
)


@pytest.fixture
def model():
    """x (data), p, q (parameters); f = exp(sin(x p)) q, cached; plus an uncached reference."""
    x = zcache.Data(np.linspace(0.0, 2.0, 11), name="x")
    p = zcache.Parameter("p", 1.3)
    q = zcache.Parameter("q", 0.7)

    def f():
        return tf.exp(tf.sin(x.value() * p.value())) * q.value()

    def reference():
        return np.exp(np.sin(x.numpy() * float(p.value()))) * float(q.value())

    return x, p, q, zcache.CachedTensor(f, name="f"), reference


@pytest.mark.parametrize("traced", [False, True], ids=["direct", "via-function"])
def test_hit_miss_and_never_stale(model, traced, graph_mode):
    x, p, q, cache, reference = model
    read = zcache.function(lambda: cache.value()) if traced else cache.value
    np.testing.assert_allclose(read().numpy(), reference(), rtol=1e-14)
    np.testing.assert_allclose(read().numpy(), reference(), rtol=1e-14)
    assert cache.stats == {"hits": 1, "misses": 1}
    p.set_value(0.4)
    np.testing.assert_allclose(read().numpy(), reference(), rtol=1e-14)
    x.set_data(np.linspace(-1.0, 1.0, 31))
    out = read().numpy()
    assert out.shape == (31,)
    np.testing.assert_allclose(out, reference(), rtol=1e-14)
    cache.invalidate()
    np.testing.assert_allclose(read().numpy(), reference(), rtol=1e-14)
    assert cache.stats == {"hits": 1, "misses": 4}
    if traced:
        assert read.trace_count == (0 if graph_mode is False else 1)


@pytest.mark.parametrize("capacity", [None, 16], ids=["unpadded", "padded"])
@pytest.mark.parametrize("traced", [False, True], ids=["direct", "via-function"])
def test_a_cache_that_only_counts_events_is_recomputed_by_set_data(capacity, traced, mode):
    # an extended loss keeps N as a data-only cache (ChunkedLoss did): counting the events, reading
    # the mask or slicing to the events is a read of the data, or set_data leaves N stale
    x = zcache.Data(np.arange(5.0), name="counted", capacity=capacity)
    count = zcache.CachedTensor(lambda: tf.cast(x.nevents, tf.float64), name="count")
    masked = zcache.CachedTensor(lambda: tf.reduce_sum(x.mask) if capacity else tf.constant(0.0, tf.float64),
                                 name="masked")
    sliced = zcache.CachedTensor(lambda: tf.reduce_sum(x.unpadded(tf.ones_like(x.variable))), name="sliced")
    caches = (count, masked, sliced)
    read = zcache.function(lambda: [c.value() for c in caches]) if traced else (lambda: [c.value() for c in caches])
    expected = [[5.0, 5.0 if capacity else 0.0, 5.0], [9.0, 9.0 if capacity else 0.0, 9.0],
                [2.0, 2.0 if capacity else 0.0, 2.0]]
    for n, want in zip((5, 9, 2), expected, strict=True):
        if n != 5:
            x.set_data(np.arange(float(n)))
        assert [float(v) for v in read()] == want
        assert [float(v) for v in read()] == want  # the hit
    assert count.stats == {"hits": 3, "misses": 3}


def test_eager_and_traced_share_the_cache(model):
    _, p, _, cache, reference = model
    traced = zcache.function(lambda: cache.value())
    cache.value()  # eager miss
    traced()  # traced hit
    p.set_value(2.0)
    traced()  # traced miss
    cache.value()  # eager hit (the flag was set in the graph)
    np.testing.assert_allclose(cache.value().numpy(), reference(), rtol=1e-14)
    assert cache.stats == {"hits": 3, "misses": 2}


def test_static_shape_is_kept_in_trace():
    d = zcache.Data(np.zeros((4, 3)))
    c = zcache.CachedTensor(lambda: d.value() * 2.0)
    shapes = []

    @zcache.function
    def f():
        v = c.value()
        shapes.append(v.shape.as_list())
        return v

    f()
    assert shapes == [[None, 3]]


def _grads(loss, params):
    with tf.GradientTape() as tape:
        y = loss()
    return tf.stack(tape.gradient(y, [p.variable for p in params]))


@pytest.mark.parametrize("traced", [False, True], ids=["direct", "via-function"])
def test_gradient_on_hit_and_miss(model, traced, graph_mode):
    x, p, q, cache, _ = model

    def cached_loss():
        return tf.reduce_sum(cache.value() ** 2)

    def uncached_loss():
        return tf.reduce_sum((tf.exp(tf.sin(x.value() * p.value())) * q.value()) ** 2)

    grad = (lambda: _grads(cached_loss, [p, q]))
    if traced:
        grad = zcache.function(grad, wraps="gradient")
    for step in range(3):  # miss, hit, then miss after a change
        got = grad().numpy()
        want = _grads(uncached_loss, [p, q]).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12)
        if step == 1:
            p.set_value(0.9)
    assert cache.stats["hits"] >= 1 and cache.stats["misses"] >= 2


@pytest.mark.parametrize("traced", [False, True], ids=["direct", "via-function"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_gradient_through_cache_of_cache(traced, graph_mode):
    a, b = zcache.Parameter("a", 0.3), zcache.Parameter("b", -1.2)
    x = zcache.Data(np.linspace(0.1, 1.0, 7))
    inner = zcache.CachedTensor(lambda: tf.sin(a.value() * x.value()), name="inner")
    outer = zcache.CachedTensor(lambda: inner.value() * tf.exp(b.value() * x.value()), name="outer")

    def loss():
        return tf.reduce_sum(outer.value() * inner.value())

    def ref():
        i = tf.sin(a.value() * x.value())
        return tf.reduce_sum(i * tf.exp(b.value() * x.value()) * i)

    grad = lambda: zcache.value_and_gradient(loss, [a, b])  # noqa: E731
    if traced:
        grad = zcache.function(grad, wraps="gradient")
    for _ in range(3):
        v, g = grad()
        rv, rg = zcache.value_and_gradient(ref, [a, b])
        np.testing.assert_allclose(v.numpy(), rv.numpy(), rtol=1e-13)
        np.testing.assert_allclose(g.numpy(), rg.numpy(), rtol=1e-12)
    a.set_value(0.5)
    np.testing.assert_allclose(grad()[1].numpy(), zcache.gradient(ref, [a, b]).numpy(), rtol=1e-12)


def test_gradient_of_data_only_cache_is_zero_and_free():
    x = zcache.Data(np.linspace(0.0, 1.0, 5))
    p = zcache.Parameter("p", 2.0)
    angular = zcache.CachedTensor(lambda: tf.cos(x.value()))
    angular.value()
    g = zcache.gradient(lambda: angular.value() * p.value(), [p])
    np.testing.assert_allclose(g.numpy(), [np.sum(np.cos(np.linspace(0.0, 1.0, 5)))], rtol=1e-14)


def test_gradient_through_caches_read_inside_a_users_cond_and_loop():
    """Cache reads inside a user's tf.cond and tf.while_loop differentiate exactly on hit and miss (there the
    backward pass recomputes at the forward pass's values: a control-flow gradient graph cannot capture the
    inputs' Variables). Before, the loop's gradient failed to build."""
    x = zcache.Data(np.linspace(0.1, 2.0, 9), name="x_cf")
    p = zcache.Parameter("p_cf", 0.8)
    inner = zcache.CachedTensor(lambda: tf.sin(p.value() * x.value()), name="inner_cf")
    outer = zcache.CachedTensor(lambda: inner.value() * p.value() ** 2, name="outer_cf")

    @tf.function
    def user(flag):
        with tf.GradientTape() as tape:
            y = tf.cond(flag, lambda: tf.reduce_sum(outer.value()), lambda: tf.reduce_sum(inner.value()) * 3.0)
            y = tf.while_loop(lambda i, acc: i < 2, lambda i, acc: (i + 1, acc + tf.reduce_sum(outer.value())),
                              (0, y))[1]
        return y, tape.gradient(y, p.variable)

    def ref(flag):
        v, xs = p._current(), x.numpy()
        d_outer = np.sum(np.cos(v * xs) * xs * v**2 + 2 * v * np.sin(v * xs))
        return (1.0 if flag else 0.0) * d_outer + (0.0 if flag else 3.0 * np.sum(np.cos(v * xs) * xs)) + 2 * d_outer

    for flag in (True, False, True):  # misses, then hits
        for _ in range(2):
            np.testing.assert_allclose(user(tf.constant(flag))[1].numpy(), ref(flag), rtol=1e-12)
        p.set_value(p._current() + 0.1)
    assert zcache._engine.tf_internals.inside_control_flow() is False


def test_second_order_eager_is_exact(model):
    x, p, _, cache, _ = model

    def hess(f):
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                y = tf.reduce_sum(f())
            g = t1.gradient(y, p.variable)
        return t2.gradient(g, p.variable).numpy()

    ref = hess(lambda: tf.exp(tf.sin(x.value() * p.value())) * 0.7)
    cache.value()  # make the next read a hit
    np.testing.assert_allclose(hess(cache.value), ref, rtol=1e-12)
    cache.invalidate()
    np.testing.assert_allclose(hess(cache.value), ref, rtol=1e-12)


def test_second_order_traced_is_exact(model):
    """Nested tapes through a cache inside a trace (the cache's tf.cond is not recorded on tapes)."""
    x, p, _, cache, _ = model

    def hess(f):
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                y = tf.reduce_sum(f())
            g = t1.gradient(y, p.variable)
        return t2.gradient(g, p.variable)

    traced = zcache.function(lambda: hess(cache.value))
    ref = lambda: tf.exp(tf.sin(x.value() * p.value())) * 0.7  # noqa: E731
    for value in (1.3, 1.3, 0.9):  # miss, hit, miss
        p.set_value(value)
        np.testing.assert_allclose(float(traced()), float(hess(ref)), rtol=1e-12)
    assert traced.trace_count == 1


def test_cache_read_inside_a_users_vectorized_map():
    """A cache read inside a user's tf.vectorized_map (in a plain tf.function, with a tape) is computed
    there, as a bypassed cache is: right values and gradients, never stale after set_value. Before, pfor
    could not vectorize the cache's tf.cond and store and the function failed to build."""
    xs = np.linspace(0.1, 2.0, 9)
    x = zcache.Data(xs, name="x_vmap")
    p = zcache.Parameter("p_vmap", 0.8)
    cache = zcache.CachedTensor(lambda: tf.sin(p.value() * x.value()), name="c_vmap")

    @tf.function
    def user(scales):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.vectorized_map(lambda s: s * tf.reduce_sum(cache.value()), scales))
        return y, tape.gradient(y, p.variable)

    for v in (0.8, 0.5):
        p.set_value(v)
        y, g = user(tf.constant([1.0, 2.0], tf.float64))
        np.testing.assert_allclose(float(y), 3.0 * np.sum(np.sin(v * xs)), rtol=1e-13)
        np.testing.assert_allclose(float(g), 3.0 * np.sum(np.cos(v * xs) * xs), rtol=1e-13)
    np.testing.assert_allclose(cache.value().numpy(), np.sin(0.5 * xs), rtol=1e-13)


# [vectorized] slow: about 6 CPU seconds; the fast loop keeps [while-loop] (CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("pfor", [pytest.param(True, marks=pytest.mark.slow), False], ids=["vectorized", "while-loop"])
def test_users_jacobian_hessian_of_a_likelihood_through_caches(pfor):
    """A user's own Hessian of an NLL (nested tapes, tape.jacobian) inside a plain tf.function, through a
    model's caches (the density, its normalization): exact on misses and hits, eagerly too. The jacobian's
    vectorized body calls a cache's backward pass (the NLL is not linear in the density), which then
    recomputes at its forward values: before, reading the caches below there failed to vectorize."""
    import numdifftools as nd
    import scipy.stats

    from zcache.models import Gaussian, Space

    mu = zcache.Parameter("mu_jac", 0.2, lower=-1.0, upper=1.0)
    sigma = zcache.Parameter("sigma_jac", 0.9, lower=0.1, upper=3.0)
    model = Gaussian(Space("x_jac", -3.0, 3.0), mu, sigma)
    xs = np.random.default_rng(2).normal(0.1, 1.0, 60)
    xs = xs[np.abs(xs) < 3.0]
    data = zcache.Data(xs, name="x_jac_data")
    variables = [mu.variable, sigma.variable]
    zero = tf.UnconnectedGradients.ZERO

    def hessian():
        with tf.GradientTape(persistent=not pfor) as outer:
            with tf.GradientTape() as inner:
                nll = -tf.reduce_sum(tf.math.log(model.pdf(data)))
            gradient = tf.stack(inner.gradient(nll, variables, unconnected_gradients=zero))
        return tf.stack(outer.jacobian(gradient, variables, unconnected_gradients=zero, experimental_use_pfor=pfor))

    def nll_ref(v):
        m, s = v
        norm = scipy.stats.norm.cdf(3.0, m, s) - scipy.stats.norm.cdf(-3.0, m, s)
        return -np.sum(scipy.stats.norm.logpdf(xs, m, s) - np.log(norm))

    traced = tf.function(hessian)
    for v in ((0.2, 0.9), (0.2, 0.9), (0.3, 1.1)):  # misses, hits, misses
        mu.set_value(v[0])
        sigma.set_value(v[1])
        expected = nd.Hessian(nll_ref)(v)
        np.testing.assert_allclose(traced().numpy(), expected, rtol=1e-8)
        np.testing.assert_allclose(hessian().numpy(), expected, rtol=1e-8)


@pytest.mark.parametrize("traced", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "traced"])  # 1.6 s
def test_hessian_helper(model, traced):
    x, p, q, cache, _ = model
    f = lambda: cache.value() ** 2  # noqa: E731
    ref = lambda: (tf.exp(tf.sin(x.value() * p.value())) * q.value()) ** 2  # noqa: E731
    h = zcache.function(lambda: zcache.hessian(f, [p, q])) if traced else (lambda: zcache.hessian(f, [p, q]))
    exact = _exact_hessian(ref, [p, q])
    np.testing.assert_allclose(h().numpy(), exact, rtol=1e-6, atol=1e-8)
    assert float(p.value()) == 1.3 and float(q.value()) == 0.7  # parameters restored


def _exact_hessian(f, params):
    variables = [p.variable for p in params]
    with tf.GradientTape(persistent=True) as t2:
        with tf.GradientTape() as t1:
            y = tf.reduce_sum(f())
        g = t1.gradient(y, variables)
    return np.array([[h.numpy() for h in t2.gradient(gi, variables)] for gi in g])


def test_declared_deps():
    p, q = zcache.Parameter("p", 1.0), zcache.Parameter("q", 2.0)
    c = zcache.CachedTensor(lambda: p.value() * 3.0, deps=[p])
    assert c.deps == (p,)
    g = zcache.dependency_graph()
    assert g.has_edge(p.node_id, c.node_id) and not g.has_edge(q.node_id, c.node_id)
    c.value()
    q.set_value(5.0)
    assert c.is_valid


def test_undeclared_read_is_added_with_warning():
    p, q = zcache.Parameter("p", 1.0), zcache.Parameter("q", 2.0)
    c = zcache.CachedTensor(lambda: p.value() * q.value(), deps=[p])
    with pytest.warns(UndeclaredDependencyWarning, match=r"read \['q'\]"):
        c.value()
    q.set_value(3.0)  # must not be stale
    assert float(c.value()) == 3.0


def test_reading_a_transitive_dependency_needs_no_declaration():
    p = zcache.Parameter("p", 2.0)
    inner = zcache.CachedTensor(lambda: p.value() + 1.0)
    outer = zcache.CachedTensor(lambda: inner.value() * p.value(), deps=[inner])
    assert float(outer.value()) == 6.0  # reads p, an ancestor of `inner`: no warning


def test_an_unexpected_warning_fails_the_test():
    """Positive control for "no warning" above (and every test that relies on it): the suite turns
    warnings into errors (setup.cfg filterwarnings), so an undeclared read outside pytest.warns raises."""
    p, q = zcache.Parameter("p", 1.0), zcache.Parameter("q", 2.0)
    c = zcache.CachedTensor(lambda: p.value() * q.value(), deps=[p])
    with pytest.raises(UndeclaredDependencyWarning, match=r"read \['q'\]"):
        c.value()


@pytest.mark.parametrize("bad", [[1.0], [np.zeros(3)], ["p"], 5])
def test_invalid_deps(bad):
    with pytest.raises(InvalidDependencyError, match="deps must"):
        zcache.CachedTensor(lambda: tf.constant(1.0), deps=bad)


def test_not_callable():
    with pytest.raises(TypeError, match="zero-argument callable"):
        zcache.CachedTensor(tf.constant(1.0))


def test_self_reading_cycle_is_detected():
    holder = {}
    a = zcache.CachedTensor(lambda: holder["b"].value() + 1.0, name="a")
    b = zcache.CachedTensor(lambda: a.value() * 2.0, name="b")
    holder["b"] = b
    with pytest.raises(DependencyCycleError, match="a -> b -> a"):
        a.value()


def test_declared_cycle_is_refused_and_graph_unchanged():
    p = zcache.Parameter("p", 1.0)
    a = zcache.CachedTensor(lambda: p.value(), deps=[p], name="a")
    b = zcache.CachedTensor(lambda: a.value(), deps=[a], name="b")
    ids = {p.node_id, a.node_id, b.node_id}

    def edges():  # under the graph's lock: a finalizer of an earlier test's object may remove a node meanwhile
        with GRAPH.lock:
            return {(u, v) for u, v in zcache.dependency_graph().edges() if u in ids or v in ids}

    before = edges()
    with pytest.raises(DependencyCycleError, match="already depends on"):
        a.add_dependencies([b])
    assert edges() == before


def test_add_dependencies_invalidates_on_the_new_input():
    """A dependency func does not read (a cached method's argument) still invalidates the cache."""
    p, q = zcache.Parameter("p_add", 1.0), zcache.Parameter("q_add", 2.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0, name="c_add")
    c.add_dependencies([q])
    assert float(c.value()) == 2.0 and c.is_valid
    q.set_value(3.0)
    assert not c.is_valid
    with pytest.raises(zcache.exceptions.InvalidDependencyError):
        c.add_dependencies([1.0])
    assert [d.name for d in c.deps] == ["q_add", "p_add"]


def test_bad_return_value():
    c = zcache.CachedTensor(lambda: object(), name="bad")
    with pytest.raises(CachedValueError, match="not a tensor"):
        c.value()


def test_dtype_or_rank_change_is_refused():
    p = zcache.Parameter("p", 1.0)
    state = {"rank2": False}

    def f():
        v = tf.fill([2], p.value())
        return tf.reshape(v, [1, 2]) if state["rank2"] else v

    c = zcache.CachedTensor(f, name="shapeshifter")
    c.value()
    state["rank2"] = True
    p.set_value(2.0)
    with pytest.raises(CachedValueError, match="keep its dtype and rank"):
        c.value()
    state["rank2"] = False
    np.testing.assert_allclose(c.value().numpy(), [2.0, 2.0])


def test_is_valid_illegal_in_trace():
    c = zcache.CachedTensor(lambda: tf.constant(1.0))

    @zcache.function
    def f():
        return c.is_valid

    with pytest.raises(IllegalInGraphModeError):
        f()


def test_nbytes_stats_reset_and_repr():
    d = zcache.Data(np.zeros(100))
    c = zcache.CachedTensor(lambda: d.value() + 1.0, name="plus1")
    assert c.nbytes == 0
    c.value()
    c.value()
    assert c.nbytes == 800
    assert c.stats == {"hits": 1, "misses": 1}
    c.reset_stats()
    assert c.stats == {"hits": 0, "misses": 0}
    assert "plus1" in repr(c)


def test_cache_as_tensor():
    p = zcache.Parameter("p", 3.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0)
    assert float(c + 1.0) == 7.0
    assert float(tf.sqrt(c * 6.0)) == 6.0


@pytest.mark.slow  # 1.8 s
def test_dropped_objects_leave_the_graph(collect):
    g = zcache.dependency_graph()
    collect()
    before = g.number_of_nodes()

    def make():
        p = zcache.Parameter("tmp", 1.0)
        x = zcache.Data(np.ones(3))
        c = zcache.CachedTensor(lambda: x.value() * p.value())
        c.value()
        return c.node_id

    uid = make()
    collect()
    assert uid not in g
    assert g.number_of_nodes() == before


def test_threads_never_see_stale_values():
    """Four threads set values and read shared and private caches; reads are never stale."""
    p = zcache.Parameter("p", 0.0)
    shared = zcache.CachedTensor(lambda: p.value() * 2.0, name="shared")
    errors = []
    lock = threading.Lock()  # serializes set+read pairs on the shared parameter

    def worker(k):
        own = zcache.Parameter(f"own{k}", 0.0)
        private = zcache.CachedTensor(lambda: own.value() + 1.0)
        for i in range(40):
            own.set_value(float(i))
            if float(private.value()) != i + 1.0:
                errors.append(("private", k, i))
            with lock:
                p.set_value(float(k * 100 + i))
                if float(shared.value()) != 2.0 * (k * 100 + i):
                    errors.append(("shared", k, i))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.slow  # 1.9 s
def test_many_traced_dependents_are_invalidated_in_one_batch():
    p = zcache.Parameter("p", 1.0)
    caches = [zcache.CachedTensor(lambda k=k: p.value() * k, name=f"c{k}") for k in range(12)]
    total = zcache.function(lambda: tf.add_n([c.value() for c in caches]))
    assert float(total()) == 66.0
    assert all(c.is_valid for c in caches)
    p.set_value(2.0)
    assert not any(c.is_valid for c in caches)
    assert float(total()) == 132.0


def test_set_value_from_another_thread_waits_for_a_compute_in_progress():
    """A value computed while another thread changes an input is never flagged valid with the
    old input: the writer waits for the engine lock until the value is stored, then invalidates."""
    import threading
    import time

    p = zcache.Parameter("p", 1.0)
    started = threading.Event()

    def f():
        out = p.value() * 10.0
        started.set()
        time.sleep(0.2)  # the other thread's set_value arrives while we compute
        return out

    c = zcache.CachedTensor(f, name="racy")
    writer = threading.Thread(target=lambda: (started.wait(), p.set_value(2.0)))
    writer.start()
    first = float(c.value())
    writer.join()
    assert first == 10.0  # computed from the value p had while it was computed
    assert not c.is_valid  # the write came after the store and invalidated it
    assert float(c.value()) == 20.0 and c.stats == {"hits": 0, "misses": 2}
    assert float(c.value()) == 20.0 and c.stats == {"hits": 1, "misses": 2}


def test_eager_set_value_after_traced_set_value_sees_true_value():
    p = zcache.Parameter("p", 1.0)
    c = zcache.CachedTensor(lambda: p.value() + 1.0)

    @zcache.function
    def move(v):
        p.set_value(v)
        return c.value()

    assert float(move(tf.constant(5.0, tf.float64))) == 6.0
    p.set_value(1.0)  # a stale Python copy of the value (1.0) would skip this write
    assert float(p.value()) == 1.0 and float(c.value()) == 2.0
    assert "value=1" in repr(p)


def _tf_reports_retracing(caplog, functions) -> bool:
    """Call ``zcache.function(f)(2.0)`` for each f; whether TensorFlow logged its retracing warning.

    A Python number goes through ``tf.function.__call__``, which counts traces per Python function
    for that warning; tensors alone take zcache's concrete-function fast path, which TF never counts."""
    caplog.clear()
    with caplog.at_level("WARNING", logger="tensorflow"):
        for f in functions:
            zcache.function(f)(2.0)
    return "retracing" in caplog.text


def test_no_tensorflow_retracing_warning_for_many_functions(caplog):
    """Distinct zcache.functions each traced once are not reported as retracing by TF."""
    p = zcache.Parameter("p", 1.0)

    def f1(x):
        return p.value() * x

    def f2(x):
        return p.value() * x * 2.0

    def f3(x):
        return p.value() * x * 3.0

    def f4(x):
        return p.value() * x * 4.0

    def f5(x):
        return p.value() * x * 5.0

    def f6(x):
        return p.value() * x * 6.0

    def f7(x):
        return p.value() * x * 7.0

    assert not _tf_reports_retracing(caplog, (f1, f2, f3, f4, f5, f6, f7))


def test_tensorflow_retracing_warning_is_seen_for_one_function_traced_seven_times(caplog):
    """Positive control for the test above: one Python function under seven zcache.functions is
    seven traces of it for TF (zcache keys TF's statistics by the user's function), which TF
    reports, and the same detector sees it."""
    p = zcache.Parameter("p", 1.0)

    def f(x):
        return p.value() * x

    assert _tf_reports_retracing(caplog, [f] * 7)


def test_batched_invalidation_traces_once_per_power_of_two(caplog):
    from zcache._engine.cache_state import clear_flags as _clear_flags

    p = zcache.Parameter("p", 1.0)
    caches = []
    before = _clear_flags.experimental_get_tracing_count()
    with caplog.at_level("WARNING", logger="tensorflow"):
        for k in range(9, 17):  # batch sizes 9..16 all pad to 16
            caches.append(zcache.CachedTensor(lambda k=k: p.value() * k))
            while len(caches) < k:
                caches.append(zcache.CachedTensor(lambda: p.value() + 1.0))
            for c in caches:
                c.value()
            p.set_value(float(p.value()) + 1.0)
            assert not any(c.is_valid for c in caches)
    assert _clear_flags.experimental_get_tracing_count() - before <= 1
    assert "retracing" not in caplog.text


def test_unpadded_batches_would_retrace():
    """Positive control for the test above: the tracing count does count the batch function's
    traces (batches of 9..15 flags, not padded: seven traces; zcache pads to powers of two)."""
    from zcache._engine.cache_state import clear_flags as _clear_flags

    before = _clear_flags.experimental_get_tracing_count()
    for k in range(9, 16):
        _clear_flags(tuple(tf.Variable(True) for _ in range(k)))
    assert _clear_flags.experimental_get_tracing_count() - before == 7


# -- revision 3: compiled miss branches and gradient scope -----------------------------------
def _diamond(k: int):
    """k columns, k*(k+1)/2 pair caches reading two columns each, and a matrix cache of the pairs."""
    x = zcache.Data(np.linspace(0.1, 1.0, 50), name="x_dia")
    ps = [zcache.Parameter(f"p_dia{i}", 1.0 + 0.1 * i) for i in range(k)]
    cols = [zcache.CachedTensor(lambda i=i: tf.sin(ps[i].value() * x.value()), name=f"col{i}") for i in range(k)]
    pairs = [zcache.CachedTensor(lambda i=i, j=j: tf.reduce_mean(cols[i].value() * cols[j].value()), name=f"pair{i}{j}")
             for i in range(k) for j in range(i, k)]
    top = zcache.CachedTensor(lambda: tf.stack([p.value() for p in pairs]), name="top")
    return x, ps, cols, pairs, top


@pytest.mark.slow  # 2.3 s
def test_miss_branch_is_traced_once_per_cache_not_once_per_path():
    """Each cache's miss branch is one function: traced once however many caches read it."""
    x, ps, cols, pairs, top = _diamond(4)
    f = zcache.function(lambda: tf.reduce_sum(top.value()))
    g = zcache.function(lambda: tf.reduce_sum(top.value()) + tf.reduce_sum(cols[0].value()))
    ref = lambda: sum(np.mean(np.sin(ps[i]._current() * x.numpy()) * np.sin(ps[j]._current() * x.numpy()))  # noqa: E731
                      for i in range(4) for j in range(i, 4))
    np.testing.assert_allclose(f().numpy(), ref(), rtol=1e-12)
    traced = [c._miss._fn.experimental_get_tracing_count() for c in [*cols, *pairs, top]]
    assert traced == [1] * len(traced)  # 4 columns read by 10 pairs, still one trace each
    g()  # another graph reuses them
    assert [c._miss._fn.experimental_get_tracing_count() for c in [*cols, *pairs, top]] == traced
    ps[2].set_value(0.3)  # stale-free through the compiled branches
    np.testing.assert_allclose(f().numpy(), ref(), rtol=1e-12)
    assert [pairs[i].stats["misses"] for i in range(len(pairs))].count(2) == 4  # the pairs with column 2
    zcache.clear_graph_cache()  # drops the compiled branches too
    assert all(c._miss._fn is None for c in [*cols, *pairs, top])
    np.testing.assert_allclose(f().numpy(), ref(), rtol=1e-12)


def test_a_cache_read_traced_outside_xla_holds_no_loop(model):
    """The one-step loop that keeps a cache's cond a conditional under XLA is traced only for XLA.

    Outside XLA it was pure trace cost: one ``tf.while_loop`` (two graphs of its own) per cache
    read, ~28 % of a bridged amplitude model's first trace. The miss counter and values stay
    right without it; under XLA ``tests/test_jit.py`` pins the conditional.
    """
    x, p, q, cache, reference = model
    fn = zcache.function(lambda: tf.reduce_sum(cache.value()))
    with zcache.set_graph_mode(True):
        first = float(fn())
        [concrete] = fn._concrete.values()
        graph_def = concrete.graph.as_graph_def()
        ops = [n.op for n in graph_def.node] + [n.op for f_ in graph_def.library.function for n in f_.node_def]
        assert "If" in ops or "StatelessIf" in ops  # the cache's cond is there ...
        assert not {"While", "StatelessWhile"} & set(ops)  # ... without a loop
        misses = cache.stats["misses"]
        p.set_value(0.4)
        second = float(fn())
        float(fn())
        np.testing.assert_allclose(second, np.sum(reference()), rtol=1e-12)
    np.testing.assert_allclose(first, np.sum(np.exp(np.sin(x.numpy() * 1.3)) * 0.7), rtol=1e-12)
    assert cache.stats["misses"] == misses + 1


def test_a_cache_that_reads_a_users_tf_variable_warns_once_when_traced():
    """zcache cannot see a write to a tf.Variable it did not make: a cache whose function reads one
    would go stale silently when it is assigned. Its first traced read warns, naming the Variable and
    the remedies; a Parameter read the same way warns nothing, and invalidate() after the write gives
    the new value."""
    x = zcache.Data(np.linspace(0.0, 2.0, 5), name="x_untracked")
    scale = tf.Variable(0.5, dtype=tf.float64, name="users_scale")
    p = zcache.Parameter("p_tracked", 0.5)
    raw = zcache.CachedTensor(lambda: x.value() * scale, name="reads_raw")
    tracked = zcache.CachedTensor(lambda: x.value() * p.variable, name="reads_parameter")
    read_raw = zcache.function(lambda: tf.reduce_sum(raw.value()))
    with pytest.warns(UntrackedVariableWarning, match=r"CachedTensor 'reads_raw' reads the tf.Variable\(s\) "
                                                      r"\['users_scale:0'\].*Parameter.*invalidate\(\)"):
        assert float(read_raw()) == pytest.approx(2.5, rel=1e-14)
    read_raw_again = zcache.function(lambda: 2.0 * tf.reduce_sum(raw.value()))
    assert float(read_raw_again()) == pytest.approx(5.0, rel=1e-14)  # once per cache: no second warning
    scale.assign(2.0)
    raw.invalidate()
    assert float(read_raw()) == pytest.approx(10.0, rel=1e-14)
    assert float(zcache.function(lambda: tf.reduce_sum(tracked.value()))()) == pytest.approx(2.5, rel=1e-14)
    p.set_value(2.0)
    assert float(zcache.function(lambda: tf.reduce_sum(tracked.value()))()) == pytest.approx(10.0, rel=1e-14)


def _counted_model():
    """x, p and a cache of exp(sin(x p)) whose function counts its executions in ``calls``."""
    x = zcache.Data(np.linspace(0.0, 2.0, 11), name="x_counted")
    p = zcache.Parameter("p_counted", 1.3)
    calls = tf.Variable(np.int64(0))

    def f():
        with tf.control_dependencies([calls.assign_add(1)]):
            return tf.exp(tf.sin(x.value() * p.value()))

    return x, p, calls, zcache.CachedTensor(f, name="counted")


def _square_sum_gradient(x, v):
    """d/dp sum(exp(sin(x p))^2) at p = v, by hand."""
    return np.sum(2.0 * np.exp(2.0 * np.sin(x * v)) * np.cos(x * v) * x)


@pytest.mark.filterwarnings("ignore::zcache.exceptions.UntrackedVariableWarning")  # calls, the counter
@pytest.mark.parametrize("how", ["value_and_gradient", "user-tape-inside", "user-tape-outside"])
def test_a_traced_miss_with_a_gradient_computes_the_function_once(how):
    """On a traced miss the gradient comes from the miss branch's own intermediates (TensorFlow's
    gradient of the cache's cond): the cached function runs once, as without a cache (it ran
    twice before: the backward pass recomputed it). A hit with a gradient recomputes it once."""
    x, p, calls, cache = _counted_model()

    def loss():
        return tf.reduce_sum(cache.value() ** 2)

    if how == "value_and_gradient":
        fn = zcache.function(lambda: zcache.value_and_gradient(loss, [p])[1][0])
    elif how == "user-tape-inside":
        def with_tape():
            with tf.GradientTape() as tape:
                y = loss()
            return tape.gradient(y, p.variable)

        fn = zcache.function(with_tape)
    else:
        traced = zcache.function(loss)

        def fn():
            with tf.GradientTape() as tape:
                y = traced()
            return tape.gradient(y, p.variable)

    with zcache.set_graph_mode(True):
        for value, kind in [(1.3, "miss"), (1.3, "hit"), (0.7, "miss"), (0.7, "hit")]:
            p.set_value(value)
            before, stats = int(calls.numpy()), cache.stats
            grad = float(fn())
            assert int(calls.numpy()) - before == 1, kind
            counter = "misses" if kind == "miss" else "hits"
            assert cache.stats[counter] == stats[counter] + 1
            np.testing.assert_allclose(grad, _square_sum_gradient(x.numpy(), value), rtol=1e-12)


@pytest.mark.filterwarnings("ignore::zcache.exceptions.UntrackedVariableWarning")  # scale, on purpose
def test_the_miss_gradient_stays_exact_where_the_miss_branch_cannot_give_it():
    """Where TensorFlow's gradient of the cond is not the cache's whole gradient, or cannot be built,
    the read takes the recomputing custom gradient: a cache between the parameter and this cache
    (the miss branch reads it without a gradient), a data-only cache below (the branch calls its
    miss function), a user's Variable of unknown shape read in the function (the cond's gradient
    cannot fill its zeros), a second derivative (nested tapes), and a user's tf.cond around the read.
    Each gradient equals the uncached one, on misses and hits."""
    x = zcache.Data(np.linspace(0.0, 2.0, 11), name="x_exact")
    p = zcache.Parameter("p_exact", 1.3)
    scale = tf.Variable(np.full(11, 0.5), shape=tf.TensorShape([None]))
    inner = zcache.CachedTensor(lambda: tf.sin(x.value() * p.value()), name="inner_exact")
    outer = zcache.CachedTensor(lambda: tf.exp(inner.value()), name="outer_exact")
    relaxed = zcache.CachedTensor(lambda: tf.exp(tf.sin(x.value() * p.value())) * scale, name="relaxed_exact")
    leaf = zcache.CachedTensor(lambda: tf.exp(tf.sin(x.value() * p.value())), name="leaf_exact")
    columns = zcache.CachedTensor(lambda: 2.0 * x.value(), name="columns_exact")  # data only
    over_columns = zcache.CachedTensor(lambda: tf.exp(tf.sin(0.5 * columns.value() * p.value())), name="over_columns")

    def first(read):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(read() ** 2)
        return tape.gradient(y, p.variable)

    def second(read):
        with tf.GradientTape() as outer_tape:
            with tf.GradientTape() as tape:
                y = tf.reduce_sum(read() ** 2)
            g = tape.gradient(y, p.variable)
        return outer_tape.gradient(g, p.variable)

    def in_cond(read):
        with tf.GradientTape() as tape:
            y = tf.cond(p.value() > 0.0, lambda: tf.reduce_sum(read() ** 2), lambda: tf.constant(0.0, tf.float64))
        return tape.gradient(y, p.variable)

    def plain():
        return tf.exp(tf.sin(x.value() * p.value()))

    cases = {
        "cache between": (lambda: first(outer.value), lambda: first(plain)),
        "relaxed Variable": (lambda: first(relaxed.value), lambda: first(lambda: plain() * scale)),
        "second order": (lambda: second(outer.value), lambda: second(plain)),
        "second order, direct": (lambda: second(relaxed.value), lambda: second(lambda: plain() * scale)),
        "second order, leaf": (lambda: second(leaf.value), lambda: second(plain)),
        "a data-only cache below": (lambda: first(over_columns.value), lambda: first(plain)),
        "user's cond": (lambda: in_cond(leaf.value), lambda: in_cond(plain)),
    }
    traced = {name: zcache.function(got) for name, (got, _) in cases.items()}
    with zcache.set_graph_mode(True):
        for value in (1.3, 1.3, 0.7, 0.7):  # miss, hit
            p.set_value(value)
            for name, (_, want) in cases.items():
                np.testing.assert_allclose(float(traced[name]()), float(want()), rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("graph", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "graph"])  # graph: 3 s
def test_gradient_scope_keeps_gradients_exact_for_any_later_request(graph):
    """zcache.gradient w.r.t. some parameters skips the caches of others, but a graph traced under
    one request and reused for a gradient w.r.t. other parameters is still exact."""
    x, ps, cols, pairs, top = _diamond(3)
    a = zcache.Parameter("a_scope", 0.7)

    def loss():
        return a.value() * tf.reduce_sum(top.value())

    def numeric(i, h=1e-6):
        p = ([a] + ps)[i]
        v0 = p._current()
        p.set_value(v0 + h)
        up = float(loss())
        p.set_value(v0 - h)
        down = float(loss())
        p.set_value(v0)
        return (up - down) / (2 * h)

    with zcache.set_graph_mode(graph):
        only_a = zcache.function(lambda: zcache.gradient(loss, [a]))
        np.testing.assert_allclose(only_a().numpy(), [numeric(0)], rtol=1e-7)
        traced = zcache.function(loss)  # traced without scope: reused by any tape
        with tf.GradientTape() as tape:
            y = traced()
        grads = tape.gradient(y, [p.variable for p in ps])
        np.testing.assert_allclose([float(g) for g in grads], [numeric(i + 1) for i in range(3)], rtol=1e-6)
        both = zcache.function(lambda: zcache.gradient(loss, [a, ps[1]]))
        np.testing.assert_allclose(both().numpy(), [numeric(0), numeric(2)], rtol=1e-6)


@pytest.mark.slow  # 3 s
def test_gradient_scope_leaves_caches_of_other_parameters_out_of_the_graph():
    """A gradient w.r.t. a coupling-like parameter builds no backward pass through the other caches."""
    x, ps, cols, pairs, top = _diamond(4)
    a = zcache.Parameter("a_small", 0.7)
    # a cache of `a` *and* the others: its backward pass used to differentiate w.r.t. all of them
    mid = zcache.CachedTensor(lambda: a.value() * tf.reduce_sum(top.value()), name="mid")
    loss = mid.value
    f = zcache.function(lambda: zcache.gradient(loss, [a]))
    g = zcache.function(lambda: zcache.gradient(loss, [a, *ps]))
    f(), g()

    def ops(fn):
        (tf_function,) = fn._tf_functions.values()
        return len(tf_function.get_concrete_function().graph.get_operations())

    assert ops(f) * 5 < ops(g), (ops(f), ops(g))  # without the scope both were the size of g


def _column_read_by_three(tag, n):
    """A counted column sin(p x) over n points, read by three caches (sums of its powers 1, 2, 3)."""
    x = zcache.Data(np.linspace(0.1, 1.0, n), name=f"x_{tag}")
    p = zcache.Parameter(f"p_{tag}", 1.3)
    calls = {"col": 0}

    def column():
        calls["col"] += 1
        return tf.sin(p.value() * x.value())

    col = zcache.CachedTensor(column, name=f"col_{tag}")
    pairs = [zcache.CachedTensor(lambda k=k: tf.reduce_sum(col.value() ** k), name=f"{tag}_pow{k}") for k in (1, 2, 3)]
    return p, calls, pairs


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_bypassed_cache_read_by_several_is_computed_once_per_evaluation(graph):
    """Always-dirty (precompute: depends on a floating parameter) caches are computed once per
    evaluation, however many caches read them (a column read by K integral entries)."""
    p, calls, pairs = _column_read_by_three("once", 50)
    top = zcache.CachedTensor(lambda: tf.stack([q.value() for q in pairs]), name="top_once")
    report = zcache.precompute(top, [p])
    assert {n.status for n in report.nodes} == {"always dirty"}
    with zcache.set_graph_mode(graph):
        f = zcache.function(lambda: top.value())
        calls["col"] = 0
        f()
        assert calls["col"] == 1  # eager: one computation; graph: one traced computation
        p.set_value(0.4)
        got = f().numpy()
    xs = np.linspace(0.1, 1.0, 50)
    np.testing.assert_allclose(got, [np.sum(np.sin(0.4 * xs) ** k) for k in (1, 2, 3)], rtol=1e-12)
    g = zcache.gradient(lambda: tf.reduce_sum(top.value()), [p])
    ref = sum(np.sum(k * np.sin(0.4 * xs) ** (k - 1) * np.cos(0.4 * xs) * xs) for k in (1, 2, 3))
    np.testing.assert_allclose(g.numpy(), [ref], rtol=1e-10)


# -- issue 10: paths off the tested path ---------------------------------------------------
def _guarded(mu):
    """A cache function with a check, as TensorFlow users write it; value mu^3 + 10 mu."""

    def f():
        with tf.control_dependencies([tf.debugging.assert_positive(mu.value(), message="mu <= 0")]):
            return mu.value() ** 3 + 10.0 * mu.value()

    return f


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_cache_function_that_raises_leaves_the_cache_invalid(mode):
    """Regression (issue 10, symptom 2): a check in func that failed inside a trace left the flag
    set (it was not ordered after the value write), so the next call returned the value of the
    old parameter (10.397 for -10.397). The flag is now set only after the whole miss branch."""
    mu = zcache.Parameter("mu", 0.9)
    c = zcache.CachedTensor(_guarded(mu), name="guarded")
    read = zcache.function(lambda: c.value()) if mode == "graph" else c.value
    np.testing.assert_allclose(float(read()), 0.9**3 + 9.0, rtol=1e-14)
    mu.set_value(-0.9)
    for _ in range(2):  # it raises every time, never serves the old value
        with pytest.raises(tf.errors.InvalidArgumentError, match="mu <= 0"):
            read()
        assert not c.is_valid
    mu.set_value(1.1)
    np.testing.assert_allclose(float(read()), 1.1**3 + 11.0, rtol=1e-14)
    assert c.is_valid


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_failed_call_puts_back_the_parameters_its_graph_set():
    """A zcache.function call that fails leaves every Parameter and Data as before the call (so a
    cache computed in it at the refused value is invalid again), and its caches stay correct."""
    mu = zcache.Parameter("mu", 0.9)
    x = zcache.Data(np.array([1.0, 2.0]), name="x")
    c = zcache.CachedTensor(_guarded(mu), name="guarded")
    s = zcache.CachedTensor(lambda: tf.reduce_sum(x.value()) * mu.value(), name="sum")

    @zcache.function(wraps="loss")
    def at(v, data):
        x.set_data(data)
        mu.set_value(v)
        return c.value() + s.value()

    np.testing.assert_allclose(float(at(tf.constant(1.0, tf.float64), tf.constant([3.0], tf.float64))), 11.0 + 3.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="mu <= 0"):
        at(tf.constant(-2.0, tf.float64), tf.constant([5.0, 5.0], tf.float64))
    assert float(mu.value()) == 1.0 and mu._current() == 1.0 and x.numpy().tolist() == [3.0]
    np.testing.assert_allclose(float(c.value()), 11.0)
    np.testing.assert_allclose(float(s.value()), 3.0)


@pytest.mark.parametrize("persistent", [True, False])
def test_tape_that_spans_set_value_differentiates_at_the_forward_values(persistent):
    """Regression (issue 10, symptom 3): a gradient taken after a set_value (recorded on a hit at
    mu = 1, set_value(3), then tape.gradient) returned the gradient at mu = 3 (55 instead of 11):
    the backward pass recomputed with the current values. Eager tape, and inside a trace."""
    mu = zcache.Parameter("mu", 1.0)
    x = zcache.Data(np.array([1.0, 2.0]), name="x")
    c = zcache.CachedTensor(lambda: mu.value() ** 3 * tf.reduce_sum(x.value()) + 8.0 * mu.value(), name="c")
    inner = zcache.CachedTensor(lambda: tf.sin(mu.value() * x.value()), name="inner")
    outer = zcache.CachedTensor(lambda: tf.reduce_sum(inner.value()) * mu.value(), name="outer")

    def want(m, xs):  # d/dmu of c + outer
        return 3.0 * m**2 * np.sum(xs) + 8.0 + np.sum(np.sin(m * xs)) + m * np.sum(xs * np.cos(m * xs))

    _ = c.value(), outer.value()  # the tape records hits
    with tf.GradientTape(persistent=persistent) as tape:
        tape.watch(mu.variable)
        y = c.value() + outer.value()
    mu.set_value(3.0)
    x.set_data([5.0])
    np.testing.assert_allclose(float(tape.gradient(y, mu.variable)), want(1.0, np.array([1.0, 2.0])), rtol=1e-12)

    @zcache.function
    def traced():
        with tf.GradientTape() as t:
            t.watch(mu.variable)
            y = c.value() + outer.value()
        mu.set_value(2.0)
        return t.gradient(y, mu.variable)

    for start in (3.0, 0.5):
        mu.set_value(start)
        np.testing.assert_allclose(float(traced()), want(start, np.array([5.0])), rtol=1e-12)
        assert float(mu.value()) == 2.0
        np.testing.assert_allclose(float(c.value()), 8.0 * 5.0 + 16.0)


def test_nested_tapes_that_span_set_value_give_the_forward_hessian():
    mu = zcache.Parameter("mu", 1.0)
    c = zcache.CachedTensor(lambda: mu.value() ** 3 + 10.0 * mu.value(), name="c")
    _ = c.value()
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = c.value()
        g = t1.gradient(y, mu.variable)
    mu.set_value(2.0)
    assert float(g) == 13.0
    assert float(t2.gradient(g, mu.variable)) == 6.0


def test_cache_that_reads_parameter_variable_records_the_dependency():
    """Regression (issue 10, symptom 9): a cache reading Parameter.variable (public) recorded no
    dependency and stayed stale forever. Reading .variable now counts as a read (Data too)."""
    p = zcache.Parameter("p", 1.0)
    x = zcache.Data(np.array([1.0, 2.0]), name="x")
    c = zcache.CachedTensor(lambda: tf.reduce_sum(x.variable * p.variable), name="raw")
    assert float(c.value()) == 3.0
    p.set_value(3.0)
    assert float(c.value()) == 9.0
    x.set_data([4.0])
    assert float(c.value()) == 12.0
    assert set(c.deps) == {p, x}


def test_tape_that_spans_set_value_through_parameter_variable():
    """A cache that reads p.variable (not p.value()) also gets the gradient at the forward point
    (found by the stateful machine: 0 on a hit, or the gradient at the new value)."""
    p = zcache.Parameter("p", 1.0)
    c = zcache.CachedTensor(lambda: tf.sin(p.variable), name="via_variable")
    _ = c.value()
    with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(p.variable)
        y = c.value()
    p.set_value(2.0)
    np.testing.assert_allclose(float(tape.gradient(y, p.variable)), np.cos(1.0), rtol=1e-14)


@pytest.mark.parametrize("warm", [False, True], ids=["first-gradient", "later-gradient"])
@pytest.mark.parametrize("kind", ["zcache.function", "tf.function"])
def test_outer_tape_spanning_set_value_gets_the_traced_calls_gradient(kind, warm):
    """An eager tape around a call of a traced function, then ``set_value``, then ``tape.gradient``: the gradient at
    the call's values, as TensorFlow gives for a plain Variable read (found by ``make stress``, seed 908558645400: the
    backward pass, built once when the first call was recorded, read the Variables when it ran and gave the gradient
    at the values set after the call; ``warm``: an earlier gradient built it, with nothing set in between)."""
    p = zcache.Parameter("p_span_call", 0.5)
    c = zcache.CachedTensor(lambda: tf.cos(p.value()) * tf.sin(p.value()), name="span_call")
    f = zcache.function(c.value) if kind == "zcache.function" else tf.function(c.value)
    f()

    def expected(v):  # d/dp cos(p) sin(p)
        return np.cos(v) ** 2 - np.sin(v) ** 2

    if warm:
        with tf.GradientTape() as tape:
            tape.watch(p.variable)
            y = f()
        np.testing.assert_allclose(float(tape.gradient(y, p.variable)), expected(0.5), rtol=1e-14)
    with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(p.variable)
        y = f()
    p.set_value(0.9)
    np.testing.assert_allclose(float(tape.gradient(y, p.variable)), expected(0.5), rtol=1e-14)
    np.testing.assert_allclose(float(y), np.cos(0.5) * np.sin(0.5), rtol=1e-14)
    with tf.GradientTape() as tape:  # and the next call's gradient is at the new value
        tape.watch(p.variable)
        y = f()
    np.testing.assert_allclose(float(tape.gradient(y, p.variable)), expected(0.9), rtol=1e-14)


@pytest.mark.parametrize("graph", [True, {"tensor": False}, False])
def test_failed_call_puts_back_inputs_in_every_graph_mode(graph):
    """A zcache.function that the policy runs eagerly also puts back the inputs it set before
    it raised (found by the stateful machine: only traced calls did)."""
    p, g = zcache.Parameter("p", 1.0), zcache.Parameter("g", 0.0)
    x = zcache.Data(np.array([1.0, 2.0]), name="x")

    def guarded():
        with tf.control_dependencies([tf.debugging.assert_less(g.value(), tf.constant(1.0, tf.float64))]):
            return p.value() * tf.reduce_sum(x.value())

    c = zcache.CachedTensor(guarded, name="guarded")

    @zcache.function
    def f():
        x.set_data(np.array([7.0]))
        zcache.set_values([p], [5.0])
        g.set_value(2.0)
        return c.value()

    assert float(c.value()) == 3.0
    with zcache.set_graph_mode(graph), pytest.raises(tf.errors.InvalidArgumentError):
        f()
    assert (float(p.value()), float(g.value()), x.numpy().tolist()) == (1.0, 0.0, [1.0, 2.0])
    assert float(c.value()) == 3.0


def test_declared_weighted_data_brings_its_weights():
    """deps=[data] of weighted data covers data.weights: no UndeclaredDependencyWarning, and new
    weights invalidate the cache (to a user the weights are part of the data)."""
    data = zcache.Data(np.array([1.0, 2.0]), name="wd", weights=[1.0, 3.0])
    cache = zcache.CachedTensor(lambda: tf.reduce_sum(data.value() * data.weights), deps=[data], name="wsum")
    assert float(cache.value()) == 7.0  # filterwarnings=error: an undeclared read would fail here
    data.set_data(np.array([1.0, 2.0]), weights=[2.0, 2.0])
    assert not cache.is_valid
    assert float(cache.value()) == 6.0


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_cache_read_by_several_at_substituted_inputs_is_computed_once(graph):
    """Under a substitution (a compiled fit's program, a batched toy, a backward pass at old inputs)
    a cache read by several others is computed once per evaluation, graph and substitution; a
    compiled program has no Grappler to merge repeated computations (each block of an integral
    matrix recomputed its groups' columns). Another substitution in the same evaluation gets its
    own value."""
    from zcache._engine.context import evaluation, substituted

    p, calls, pairs = _column_read_by_three("subst_once", 40)
    xs = np.linspace(0.1, 1.0, 40)

    def at(value):
        with substituted({p.node_id: tf.constant(value, tf.float64)}):
            return tf.stack([q.value() for q in pairs])

    def both():
        with evaluation():
            return at(0.4), at(0.9)

    run = tf.function(both) if graph else both
    a, b = run()
    assert calls["col"] == 2  # one per substitution, not one per reading cache
    for value, got in ((0.4, a), (0.9, b)):
        np.testing.assert_allclose(got.numpy(), [np.sum(np.sin(value * xs) ** k) for k in (1, 2, 3)], rtol=1e-12)
    # gradients through the shared value: every reader's contribution
    v = tf.constant(0.4, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(v)
        with evaluation(), substituted({p.node_id: v}):
            total = tf.reduce_sum(tf.stack([q.value() for q in pairs]))
    ref = sum(np.sum(k * np.sin(0.4 * xs) ** (k - 1) * np.cos(0.4 * xs) * xs) for k in (1, 2, 3))
    np.testing.assert_allclose(tape.gradient(total, v).numpy(), ref, rtol=1e-10)


def test_varies_names_the_substituted_or_varying_inputs():
    """``varies``: False outside a substitution; inside, whether an input has a stand-in; while
    invariants are found, whether it is among the varying inputs (stand-ins of fixed inputs do not count)."""
    from zcache._engine.context import finding_invariants, substituted, varies

    a, b = zcache.Parameter("varies_a", 1.0), zcache.Parameter("varies_b", 2.0)
    assert not varies([a.node_id, b.node_id])
    with substituted({a.node_id: tf.constant(1.5, tf.float64)}):
        assert varies([a.node_id]) and varies([b.node_id, a.node_id]) and not varies([b.node_id])
        with substituted({b.node_id: tf.constant(2.5, tf.float64)}):  # the innermost block only
            assert varies([b.node_id]) and not varies([a.node_id])
    stand_ins = {a.node_id: tf.constant(1.5, tf.float64), b.node_id: tf.constant(2.0, tf.float64)}
    with substituted(stand_ins), finding_invariants({a.node_id}):
        assert varies([a.node_id]) and not varies([b.node_id])
    assert not varies([a.node_id])


@pytest.mark.parametrize("graph", [False, True])
def test_once_per_evaluation_computes_once_and_records_its_reads(graph):
    """``once_per_evaluation``: one computation per evaluation, graph and substitution frame; outside an
    evaluation one per call; the reads it names are recorded at every call (a cache computed around a
    reuse still depends on them), and a cache reading the reused value is invalidated by its input."""
    from zcache._engine.cached_tensor import once_per_evaluation
    from zcache._engine.context import evaluation, recording, substituted

    data = zcache.Data(np.array([1.0, 2.0, 3.0]), name="once_data")
    calls = []

    def doubled():
        calls.append(1)
        return 2.0 * data.value()

    found = []

    def run():
        with evaluation():
            once_per_evaluation(("doubled", data.node_id), doubled, reads=(data,))
            with recording() as reads:
                second = once_per_evaluation(("doubled", data.node_id), doubled, reads=(data,))
            with substituted({data.node_id: tf.constant([5.0], tf.float64)}):
                third = once_per_evaluation(("doubled", data.node_id), doubled, reads=(data,))
        found.append(reads)
        return second, third

    second, third = tf.function(run)() if graph else run()
    reads = found[0]
    assert len(calls) == 2 and reads == {data}  # the substituted frame computes anew
    np.testing.assert_array_equal(np.asarray(second), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(np.asarray(third), [10.0])
    once_per_evaluation("outside", doubled)
    once_per_evaluation("outside", doubled)
    assert len(calls) == 4

    cache = zcache.CachedTensor(lambda: tf.reduce_sum(once_per_evaluation(("doubled", data.node_id), doubled,
                                                                          reads=(data,))), name="once_sum")
    with zcache.set_graph_mode(graph):
        with evaluation():
            once_per_evaluation(("doubled", data.node_id), doubled, reads=(data,))
            assert float(cache.value()) == 12.0  # computed from the reused value
        data.set_data(np.array([1.0, 1.0]))
        assert float(cache.value()) == 4.0
