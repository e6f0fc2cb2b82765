"""zcache._engine.xla_ops: ops spelled so that TensorFlow converts them to XLA quickly.

Each spelling gives TensorFlow's own op's values to the last bit and its gradients, eagerly,
traced and compiled with XLA; compiled, the graph (gradients included) holds no op that TensorFlow
converts through its slow per-op MLIR legalization; outside XLA each is TensorFlow's own op.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from zcache._engine import xla_ops

RNG = np.random.default_rng(11)
X = tf.constant(np.concatenate([RNG.uniform(-3.0, 3.0, 64), [1e-300, -1e300, 0.5]]))
Y = tf.constant(np.concatenate([RNG.normal(size=64), [2.0, -0.0, 7.0]]))
Z = tf.complex(X, Y)

#: name -> (zcache's spelling, TensorFlow's op, its input, its output is complex)
CASES = {
    "real": (xla_ops.real, tf.math.real, Z),
    "imag": (xla_ops.imag, tf.math.imag, Z),
    "reciprocal": (xla_ops.reciprocal, tf.math.reciprocal, X),
    "reciprocal_complex": (xla_ops.reciprocal, tf.math.reciprocal, Z),
}


def _value_and_gradient(fn, arg):
    """fn(arg) and the gradient of sum(Re(w * fn(arg))) with a fixed complex/real weight w."""
    with tf.GradientTape() as tape:
        tape.watch(arg)
        out = fn(arg)
        weight = tf.cast(tf.range(1, tf.size(out) + 1), out.dtype) / 7.0
        if out.dtype.is_complex:  # Re(w out) with w = (1 - i/2) k / 7, without a Real op
            loss = xla_ops.real(tf.reduce_sum(weight * tf.constant(1.0 - 0.5j, out.dtype) * out))
        else:
            loss = tf.reduce_sum(weight * out)
    return out, tape.gradient(loss, arg)


@pytest.mark.parametrize("how", ["eager", "graph", "xla"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_equal_to_tensorflows_op(name, how):
    """Values bit for bit, gradients to rounding, eagerly, in a graph and compiled by XLA (compared there with
    TensorFlow's op compiled by XLA)."""
    ours, theirs, arg = CASES[name]
    run = {"eager": lambda f: f, "graph": lambda f: tf.function(f, autograph=False),
           "xla": lambda f: tf.function(f, autograph=False, jit_compile=True)}[how]
    got, got_grad = run(lambda a: _value_and_gradient(ours, a))(arg)
    want, want_grad = run(lambda a: _value_and_gradient(theirs, a))(arg)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_allclose(got_grad.numpy(), want_grad.numpy(), rtol=1e-15, atol=1e-300)


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_slow_op_under_xla_and_tensorflows_op_elsewhere(name):
    """Under jit_compile the function and its gradient hold no op of SLOW_TO_CONVERT (the reason for the
    module); in a plain graph the spelling is TensorFlow's own op (its faster kernel there)."""
    ours, theirs, arg = CASES[name]

    def both(a):
        return _value_and_gradient(ours, a)

    compiled = tf.function(both, autograph=False, jit_compile=True).get_concrete_function(arg)
    assert xla_ops.slow_to_convert(compiled.graph) == []
    plain = tf.function(ours, autograph=False).get_concrete_function(arg)
    reference = tf.function(theirs, autograph=False).get_concrete_function(arg)
    ops = sorted(op.type for op in plain.graph.get_operations() if op.type not in {"Placeholder", "Identity", "Const"})
    want = sorted(op.type for op in reference.graph.get_operations() if op.type not in {"Placeholder", "Identity", "Const"})
    assert ops == want


def test_slow_to_convert_finds_ops_in_called_functions():
    """The check looks into the functions a graph calls, and names each op found."""
    inner = tf.function(lambda z: tf.math.imag(z) + tf.sqrt(tf.abs(tf.math.real(z))), autograph=False)
    outer = tf.function(lambda z: inner(z) * 2.0, autograph=False).get_concrete_function(Z)
    found = xla_ops.slow_to_convert(outer.graph)
    assert sorted(entry.split("/")[-1].split(":")[0] for entry in found) == ["Abs", "Imag", "Real", "Sqrt"]
    assert all("/" in entry for entry in found)  # all inside the called function
    assert xla_ops.slow_to_convert(tf.function(lambda x: x * 2.0).get_concrete_function(X).graph) == []
