"""zcache.amplitude._fused: a group's amplitudes as an XLA program forward and backward (issue 26, fused line shapes).

The fused program must equal the plain function in value, gradient and Hessian, eagerly and traced,
inside pfor (a jacobian) and where tapes are paused; the bridged model built with it must equal the
one built without it, and both numdifftools.
"""

from __future__ import annotations

import numdifftools as nd
import numpy as np
import pytest
import tensorflow as tf
from helpers import slow_modes, small_bridge_loss

import zcache
from zcache._engine.tf_internals import stop_recording
from zcache.amplitude._fused import fused_program

M_X = np.linspace(0.5, 1.2, 40)


def _line(stack, columns, values):
    """A relativistic Breit-Wigner (complex 1/z) with a complex angular factor from ``stack``: (2, N, 2)."""
    m, g, r = values
    s = columns[0] ** 2
    bw = tf.math.reciprocal(tf.complex(m**2 - s, -m * g)) * tf.cast(tf.sqrt(m * g), tf.complex128)
    ff = tf.cast(1.0 / (1.0 + (r * columns[0]) ** 2), tf.complex128)
    one = bw * ff * stack[0]
    two = bw * tf.math.conj(stack[1]) * tf.complex(tf.cos(r * columns[0]), tf.zeros_like(s))
    return tf.stack([tf.stack([one, two], -1), tf.stack([two * ff, one * one], -1)])


SPEC = [tf.TensorSpec([2, None], tf.complex128), [tf.TensorSpec([None], tf.float64)],
        [tf.TensorSpec([], tf.float64)] * 3]
STACK = tf.constant(np.stack([np.exp(1j * M_X), 0.5 + 1j * M_X]), tf.complex128)
X = tf.constant(M_X, tf.float64)
V0 = np.array([0.8, 0.12, 1.5])


def _nll(program, v):
    """A likelihood-like scalar, not linear in the amplitudes (so a Hessian reads their second derivatives)."""
    a = program(STACK, [X], [v[0], v[1], v[2]])
    return -tf.reduce_sum(tf.math.log(tf.reduce_sum(tf.abs(a) ** 2, axis=[0, 2])))


def _numpy_nll(v):
    return float(_nll(_line, tf.constant(v, tf.float64)))


def _grad_hess(program, v, pfor=True):
    v = tf.constant(v, tf.float64)
    with tf.GradientTape() as outer:
        outer.watch(v)
        with tf.GradientTape() as inner:
            inner.watch(v)
            y = _nll(program, v)
        g = inner.gradient(y, v)
    return y, g, outer.jacobian(g, v, experimental_use_pfor=pfor)


@pytest.fixture(scope="module")
def fused():
    return fused_program(_line, SPEC, 3)


@pytest.fixture(scope="module")
def reference():
    gradient = nd.Gradient(_numpy_nll, step=1e-6)(V0)
    hessian = nd.Hessian(_numpy_nll, step=nd.step_generators.MaxStepGenerator(1e-3, num_steps=8))(V0)
    return _numpy_nll(V0), gradient, hessian


# about 5, 5 and 2 CPU seconds: slow (CONTRIBUTING.md, "Test times"); the fast loop keeps the fused program's
# other tests (a gradient where tapes are paused, a user's vectorized map)
# eager is exhaustive: the same numbers as the traced cases, which make test keeps
@pytest.mark.slow
@pytest.mark.parametrize("how", [pytest.param("eager", marks=pytest.mark.exhaustive), "traced",
                                 "traced-while-loop-jacobian"])
def test_value_gradient_hessian_equal_the_plain_function_and_numdifftools(fused, reference, how):
    value, gradient, hessian = reference
    if how == "eager":
        y, g, h = _grad_hess(fused, V0)
    elif how == "traced":
        y, g, h = tf.function(lambda: _grad_hess(fused, V0), autograph=False)()
    else:
        y, g, h = tf.function(lambda: _grad_hess(fused, V0, pfor=False), autograph=False)()
    plain = tf.function(lambda: _grad_hess(_line, V0), autograph=False)()
    assert float(y) == pytest.approx(value, rel=1e-13)
    np.testing.assert_allclose(g.numpy(), plain[1].numpy(), rtol=1e-11)
    np.testing.assert_allclose(h.numpy(), plain[2].numpy(), rtol=1e-10, atol=1e-10 * np.abs(hessian).max())
    np.testing.assert_allclose(g.numpy(), gradient, rtol=1e-7)
    np.testing.assert_allclose(h.numpy(), hessian, rtol=1e-6, atol=1e-6 * np.abs(hessian).max())


@pytest.mark.slow  # about 1.8 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_a_gradient_built_where_tapes_are_paused_is_not_zero(fused):
    """The backward program traced where recording is paused (as inside a cache's miss branch) still
    differentiates fn: without tf_internals item 14 its tape recorded nothing and the gradient was zero."""
    fresh = fused_program(_line, SPEC, 3)  # its backward program not traced yet

    @tf.function(autograph=False)
    def gradient_taken_while_paused():
        v = tf.constant(V0, tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = _nll(fresh, v)
        with stop_recording():
            return tape.gradient(y, v)

    expected = tf.function(lambda: _grad_hess(_line, V0)[1], autograph=False)()
    np.testing.assert_allclose(gradient_taken_while_paused().numpy(), expected.numpy(), rtol=1e-11)


def test_a_users_vectorized_map_over_the_fused_program(fused):
    """pfor vectorizes the call (batched toys): per-point values and gradients equal the plain function's."""
    points = tf.constant(V0 * np.array([[1.0, 1.0, 1.0], [1.01, 0.9, 1.2], [0.97, 1.1, 0.8]]), tf.float64)

    def value_and_gradient(program):
        def one(v):
            with tf.GradientTape() as tape:
                tape.watch(v)
                y = _nll(program, v)
            return y, tape.gradient(y, v)
        return tf.function(lambda: tf.vectorized_map(one, points), autograph=False)()

    got, want = value_and_gradient(fused), value_and_gradient(_line)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-13)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-11)


def test_needs_a_value():
    with pytest.raises(ValueError, match="at least one value"):
        fused_program(_line, SPEC, 0)


# exhaustive (fused line shapes are opt-in; mostly second-order traces): make test keeps fused_program's own tests
# (value, gradient, Hessian eager and traced, pfor and while-loop jacobians, paused tapes, vectorized_map)
@pytest.mark.exhaustive
@pytest.mark.parametrize("mode", ["eager", "graph", "jit"])
def test_bridged_model_fused_equals_unfused_and_numdifftools(mode):
    """SymbolicModel(fused=True) against fused=False (the default): value, gradient (caches valid, then
    precomputed) and exact Hessian (eager and graph); the gradient against numdifftools."""
    losses = {f: small_bridge_loss(fused=f, tag=f"bw_{f}", n_phsp=400, n_data=150, seed=5) for f in (True, False)}
    x = np.array([0.92, 0.11, 0.76, 0.16, 0.55, 0.45])
    found = {}
    for fused_groups, loss in losses.items():
        params = loss.params
        assert len(params) == 6
        with zcache.set_graph_mode(mode != "eager"), zcache.set_jit_mode(mode == "jit"):
            loss.value()  # every cache valid
            value, gradient = loss.value_gradient_at(x, params)
            zcache.precompute(loss)
            _, precomputed = loss.value_gradient_at(x, params)
            # (the exact Hessian under XLA: test_amplitude_symbolic's compiled Hessians, slow; 35 s more here)
            hessian = loss.hessian_at(x, params, exact=True) if mode != "jit" else tf.zeros([6, 6], tf.float64)
        found[fused_groups] = float(value), gradient.numpy(), precomputed.numpy(), hessian.numpy()
    (v1, g1, p1, h1), (v0, g0, _, h0) = found[True], found[False]
    assert v1 == pytest.approx(v0, rel=1e-13)
    scale = np.abs(g0).max()
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12 * scale)
    np.testing.assert_allclose(p1, g0, rtol=1e-10, atol=1e-12 * scale)
    np.testing.assert_allclose(h1, h0, rtol=1e-9, atol=1e-11 * np.abs(h0).max())
    loss = losses[True]
    with zcache.set_graph_mode(False):
        reference = nd.Gradient(lambda v: float(loss.value_at(v, loss.params)), step=1e-6)(x)
    np.testing.assert_allclose(g1, reference, rtol=1e-6, atol=1e-7 * scale)


@slow_modes("mode", "graph")  # [graph]: about 5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_auto_fuses_the_groups_that_float_and_equals_plain(mode):
    """SymbolicModel(fused="auto"), the default: a group whose line shape floats when its program is
    first built is fused, a fixed one stays plain; value and gradient equal the plain model's."""
    losses = {f: small_bridge_loss(fused=f, tag=f"auto_{f}_{mode}", n_phsp=300, n_data=100, seed=6)
              for f in ("auto", False)}
    for loss in losses.values():
        for p in loss.model.get_params(None):
            if p.name.endswith(("m2", "g2")):
                p.floating = False  # the second Breit-Wigner fixed before the first evaluation
        assert len(loss.params) == 4
    found = {}
    for f, loss in losses.items():
        value, gradient = loss.value_gradient()
        found[f] = float(value), gradient.numpy()
    assert losses["auto"].model.fused_groups == [0] and losses[False].model.fused_groups == []
    assert losses["auto"].model.coupling_groups[0][0][0].endswith("g1")
    assert found["auto"][0] == pytest.approx(found[False][0], rel=1e-13)
    np.testing.assert_allclose(found["auto"][1], found[False][1], rtol=1e-10, atol=1e-12 * np.abs(found[False][1]).max())


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_fused_takes_true_false_or_auto(bad):
    from zcache.exceptions import SymbolicError

    with pytest.raises(SymbolicError, match="fused= must be True, False or 'auto'"):
        small_bridge_loss(fused=bad, tag=f"bad_fused_{bad}")
