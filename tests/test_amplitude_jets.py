"""Second-order jets (zcache.amplitude._jets) against numdifftools, per event."""

import numpy as np
import pytest
import tensorflow as tf

from zcache.amplitude import _jets as J


def _times(a, b):
    if isinstance(a, tf.Tensor) and isinstance(b, tf.Tensor) and a.dtype != b.dtype:
        a, b = tf.cast(a, tf.complex128), tf.cast(b, tf.complex128)
    return a * b


def _plus(a, b):
    if isinstance(a, tf.Tensor) and isinstance(b, tf.Tensor) and a.dtype != b.dtype:
        a, b = tf.cast(a, tf.complex128), tf.cast(b, tf.complex128)
    return a + b


def _select(cond, a, b):
    a, b = (v if isinstance(v, tf.Tensor) else tf.constant(v, tf.float64) for v in (a, b))
    return tf.where(cond, a + tf.zeros_like(b), b + tf.zeros_like(a))


def _function(x, y, jets):
    """One expression, as jets (``jets=True``) or plain tensors: products, sums, every chain rule, a branch,
    a complex power and the real part of a complex value."""
    if jets:
        X, Y = J.variable(x, 0, 2), J.variable(y, 1, 2)
        mul = lambda a, b: J.mul(a, b, _times)  # noqa: E731
        add = lambda a, b: J.add(a, b, _plus)  # noqa: E731
        exp = lambda a: J.chain(a, tf.exp(a.v), lambda: tf.exp(a.v), lambda: tf.exp(a.v))  # noqa: E731
        sin = lambda a: J.chain(a, tf.sin(a.v), lambda: tf.cos(a.v), lambda: -tf.sin(a.v))  # noqa: E731
        atan = lambda a: J.chain(a, tf.atan(a.v), lambda: 1 / (1 + a.v**2),  # noqa: E731
                                 lambda: -2 * a.v / (1 + a.v**2) ** 2)
        inv = lambda a: J.chain(a, 1 / a.v, lambda: -1 / a.v**2, lambda: 2 / a.v**3)  # noqa: E731
        z = add(X, mul(J.constant(tf.constant(1j, tf.complex128), 2), Y))  # x + i y
        zz = inv(mul(z, add(z, J.constant(tf.constant(0.3 - 0.2j, tf.complex128), 2))))  # 1 / (z (z + a))
        real = J.linear(zz, tf.math.real)
        branch = J.where(x > 0.5, mul(exp(mul(X, Y)), sin(Y)), atan(mul(X, X)), _select)
        return add(add(real, branch), mul(J.constant(2.5, 2), X))
    z = tf.complex(x, y)
    zz = 1 / (z * (z + (0.3 - 0.2j)))
    branch = tf.where(x > 0.5, tf.exp(x * y) * tf.sin(y), tf.atan(x * x))
    return tf.math.real(zz) + branch + 2.5 * x


@pytest.mark.slow  # about 4 CPU seconds (CONTRIBUTING.md, "Test times")
def test_jets_equal_numdifftools_per_event():
    import numdifftools as nd

    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(0.1, 0.4, 6), rng.uniform(0.6, 1.0, 6)])  # both branches, away from the edge
    y = rng.uniform(0.2, 1.5, 12)
    jet = _function(tf.constant(x), tf.constant(y), jets=True)
    value = _function(tf.constant(x), tf.constant(y), jets=False)
    np.testing.assert_allclose(J.dense(jet.v, value).numpy(), value.numpy(), rtol=1e-14)
    first = [J.dense(d, value).numpy() for d in jet.d]
    second = [J.dense(d, value).numpy() for d in jet.dd]
    for i in range(len(x)):
        f = lambda p: float(_function(tf.constant([p[0]]), tf.constant([p[1]]), jets=False)[0])  # noqa: E731,B023
        point = np.array([x[i], y[i]])
        np.testing.assert_allclose([d[i] for d in first], nd.Gradient(f)(point), rtol=1e-8, atol=1e-9)
        hess = nd.Hessian(f)(point)
        np.testing.assert_allclose([d[i] for d in second], [hess[0, 0], hess[0, 1], hess[1, 1]], rtol=1e-6, atol=1e-7)


def test_constants_carry_no_derivatives_and_pairs_are_ordered():
    c = J.constant(tf.constant([1.0, 2.0], tf.float64), 3)
    assert c.is_constant and len(c.d) == 3 and len(c.dd) == 6
    assert J.pairs(3) == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    v = J.variable(tf.constant([0.5, 0.7], tf.float64), 1, 3)
    product = J.mul(c, v, _times)
    assert product.d[0] is None and product.d[2] is None and all(x is None for x in product.dd)
    np.testing.assert_allclose(J.dense(product.d[1], product.v).numpy(), [1.0, 2.0])


@pytest.mark.parametrize("complex_", [False, True])
def test_a_real_jet_is_made_complex_once(complex_):
    """A real node read by several complex products is converted once (the memo), with its derivatives."""
    x = tf.constant([0.5, 0.7], tf.float64)
    real = J.variable(x, 0, 1)
    other = J.variable(tf.complex(x, x) if complex_ else x, 0, 1)
    a, b = J.mul(real, other, _times), J.mul(other, real, _times)
    np.testing.assert_allclose(J.dense(a.dd[0], a.v).numpy(), J.dense(b.dd[0], b.v).numpy())
    np.testing.assert_allclose(J.dense(a.dd[0], a.v).numpy(), 2.0 * np.ones(2))  # d2(x v)/dx2, dv/dx = 1
