"""@zcache.cached on model methods and the Cachable mixin."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache.exceptions import UncacheableArgumentError


class Gauss(zcache.Cachable):
    def __init__(self, mu=0.0, sigma=1.0):
        self.mu = zcache.Parameter("mu", mu)
        self.sigma = zcache.Parameter("sigma", sigma, lower=0.01)
        self.calls = 0

    @zcache.cached
    def shape(self, x):
        self.calls += 1
        z = (x.value() - self.mu.value()) / self.sigma.value()
        return tf.exp(-0.5 * z * z)

    @zcache.cached(deps=["sigma"])
    def norm(self):
        self.calls += 1
        return self.sigma.value() * np.sqrt(2.0 * np.pi)

    @zcache.cached(deps=lambda self: [self.mu])
    def moment(self, k):
        self.calls += 1
        return self.mu.value() ** k

    @zcache.function(wraps="model")
    def pdf(self, x):
        return self.shape(x) / self.norm()


def _ref_pdf(g, x):
    mu, sigma = float(g.mu.value()), float(g.sigma.value())
    return np.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))


def test_cached_method_matches_reference_and_invalidates(graph_mode):
    g = Gauss()
    arr = np.linspace(-2.0, 2.0, 9)
    x = zcache.Data(arr)
    np.testing.assert_allclose(g.pdf(x).numpy(), _ref_pdf(g, arr), rtol=1e-14)
    np.testing.assert_allclose(g.pdf(x).numpy(), _ref_pdf(g, arr), rtol=1e-14)
    g.sigma.set_value(1.5)
    np.testing.assert_allclose(g.pdf(x).numpy(), _ref_pdf(g, arr), rtol=1e-14)
    new = np.linspace(0.0, 1.0, 4)
    x.set_data(new)
    np.testing.assert_allclose(g.pdf(x).numpy(), _ref_pdf(g, new), rtol=1e-14)


def test_one_cache_per_instance_and_argument():
    g1, g2 = Gauss(0.0), Gauss(1.0)
    x, y = zcache.Data(np.zeros(2)), zcache.Data(np.ones(2))
    g1.shape(x)
    g1.shape(x)
    assert g1.calls == 1
    g1.shape(y)
    g2.shape(x)
    assert g1.calls == 2 and g2.calls == 1
    assert float(g1.moment(2)) == 0.0 and float(g2.moment(2)) == 1.0 and float(g2.moment(3)) == 1.0
    g2.moment(2)
    assert g2.calls == 3  # shape(x), moment(2), moment(3); the repeated moment(2) hit


def test_declared_deps_by_name_and_callable():
    g = Gauss()
    g.norm()
    g.moment(1)
    calls = g.calls
    g.mu.set_value(0.5)  # norm does not depend on mu
    g.norm()
    assert g.calls == calls
    assert float(g.moment(1)) == 0.5
    assert g.calls == calls + 1


def test_data_argument_is_a_dependency_even_if_unread():
    class Counter:
        @zcache.cached
        def n(self, data):
            return tf.constant(1.0)  # deliberately does not read `data`

    c, d = Counter(), zcache.Data(np.arange(3.0))
    c.n(d)
    cache = c._zcache_caches[next(iter(c._zcache_caches))]
    assert cache.is_valid
    d.set_data(np.arange(4.0))
    assert not cache.is_valid


@pytest.mark.parametrize("bad", [np.zeros(3), tf.constant([1.0]), [np.zeros(2)], {"a": tf.constant(1.0)}])
def test_untrackable_arguments_are_refused(bad):
    g = Gauss()
    with pytest.raises(UncacheableArgumentError, match="zcache.Data"):
        g.shape(bad)


def test_unhashable_argument_is_refused():
    g = Gauss()
    with pytest.raises(UncacheableArgumentError, match="not hashable"):
        g.moment({1, 2})


def test_cached_requires_callable():
    with pytest.raises(TypeError, match="decorates methods"):
        zcache.cached(42)


def test_get_deps_walks_nested_models():
    class Sum(zcache.Cachable):
        def __init__(self):
            self.parts = [Gauss(), Gauss(1.0)]
            self.frac = zcache.Parameter("frac", 0.3)
            self.data = {"x": zcache.Data(np.ones(2))}

    s = Sum()
    names = [d.name for d in s.get_deps()]
    assert names == ["mu", "sigma", "mu", "sigma", "frac", "data"]


def test_cache_value_keyed_by_call_site_and_closure():
    class Model(zcache.Cachable):
        def __init__(self):
            self.a = zcache.Parameter("a", 2.0)
            self.evaluations = 0

        def power(self, k):
            def f():
                self.evaluations += 1
                return self.a.value() ** k

            return self.cache_value(f)

    m = Model()
    assert float(m.power(2)) == 4.0 and float(m.power(3)) == 8.0 and float(m.power(2)) == 4.0
    assert m.evaluations == 2
    m.a.set_value(3.0)
    assert float(m.power(2)) == 9.0
    m.invalidate_caches()
    assert float(m.power(3)) == 27.0
    assert m.evaluations == 4


def test_cache_value_with_explicit_key_and_untrackable_closure():
    class Model(zcache.Cachable):
        def __init__(self):
            self.a = zcache.Parameter("a", 1.0)

    m = Model()
    t = tf.constant(3.0, tf.float64)
    with pytest.raises(UncacheableArgumentError, match="zcache cannot track"):
        m.cache_value(lambda: t * m.a.value())
    assert float(m.cache_value(lambda: t * m.a.value(), key="t")) == 3.0


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_instances_are_collected(collect):
    import weakref

    g = Gauss()
    g.shape(zcache.Data(np.ones(2)))
    ref = weakref.ref(g)
    del g
    collect()
    assert ref() is None
