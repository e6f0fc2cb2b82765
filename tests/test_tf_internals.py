"""Every TensorFlow internal zcache relies on (zcache/_engine/tf_internals.py), one test each.

These fail loudly when a TensorFlow upgrade moves or changes an internal; the list, with
why each is needed and what breaks without it, is in design/invariants.md.
"""

from __future__ import annotations

import ast
import gc
import pathlib
import weakref

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache._engine import tf_internals as _tf_internals
from zcache.exceptions import ParameterValueError, UnmanagedTraceError

ZCACHE = pathlib.Path(zcache.__file__).parent


def test_every_internal_was_found():
    assert _tf_internals.MISSING == []


@pytest.mark.slow  # about 3.5 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times"); static; `make lint` runs it
def test_no_other_module_touches_tensorflow_internals():
    """Only _engine/tf_internals.py (and _engine/xla_cache_format.py, TensorFlow's flag reader) imports
    tensorflow.python or names a private TensorFlow attribute."""
    offenders = []
    paths = sorted(ZCACHE.rglob("*.py"))
    assert ZCACHE / "_engine" / "tf_internals.py" in paths and len(paths) > 30
    for path in paths:
        if path in (ZCACHE / "_engine" / "tf_internals.py", ZCACHE / "_engine" / "xla_cache_format.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorflow.python"):
                offenders.append(f"{path.name}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Import) and any(a.name.startswith("tensorflow.python") for a in node.names):
                offenders.append(f"{path.name}:{node.lineno} imports tensorflow.python")
            if isinstance(node, ast.Constant) and node.value in ("_noinline", "_gradient_op_type"):
                offenders.append(f"{path.name}:{node.lineno} names {node.value}")
            if isinstance(node, ast.Attribute) and node.attr in ("ag_pass_through", "experimental_attributes"):
                offenders.append(f"{path.name}:{node.lineno} uses {node.attr}")
    assert offenders == []


def test_stop_recording_pauses_tapes():
    x = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        with _tf_internals.stop_recording():
            y = x * x
        z = x * 3.0
    assert tape.gradient(y, x) is None
    assert float(tape.gradient(z, x)) == 3.0


def test_recording_resumed_restarts_paused_tapes_and_forward_accumulators():
    """Item 14: a thread paused by stop_recording records for no tape or forward accumulator, even one
    opened afterwards (a JVP then comes out as zero: the silent failure the fused programs must avoid);
    recording_resumed records again inside and leaves the thread paused afterwards."""
    assert _tf_internals.can_resume_recording()
    v = tf.constant(3.0, tf.float64)
    with _tf_internals.stop_recording():
        with tf.autodiff.ForwardAccumulator(v, tf.constant(1.0, tf.float64)) as acc:
            y = v * v
        assert acc.jvp(y) is None  # TensorFlow's behaviour that item 14 works around
        with _tf_internals.recording_resumed():
            with tf.autodiff.ForwardAccumulator(v, tf.constant(1.0, tf.float64)) as acc:
                y = v * v
            assert float(acc.jvp(y)) == 6.0
            with tf.GradientTape() as tape:
                tape.watch(v)
                z = v ** 3
            assert float(tape.gradient(z, v)) == 27.0
        with tf.GradientTape() as tape:  # paused again
            tape.watch(v)
            z = v ** 3
        assert tape.gradient(z, v) is None
    with _tf_internals.recording_resumed():  # not paused: nothing to resume, nothing paused after
        pass
    with tf.GradientTape() as tape:
        tape.watch(v)
        z = v ** 3
    assert float(tape.gradient(z, v)) == 27.0


def test_gradient_registry_entry_dies_with_its_graph():
    """tie_gradient_to_graph: the custom gradient's registry entry is weak and removed with the graph."""
    registry = _tf_internals._GRADIENT_REGISTRY
    assert isinstance(registry, dict)
    x = tf.Variable(1.5, dtype=tf.float64)

    @tf.custom_gradient
    def ident(v):
        return tf.identity(v), lambda dy: 2.0 * dy

    names = []

    def body():
        with tf.GradientTape() as tape:
            out = ident(x.value())
        name = out.op.get_attr("_gradient_op_type").decode()
        assert name in registry
        _tf_internals.tie_gradient_to_graph(out)
        names.append(name)
        return out, tape.gradient(out, x)

    fn = tf.function(body, autograph=False)
    out, grad = fn()
    assert float(grad) == 2.0  # the weakly held gradient still works while the graph lives
    assert names[0] in registry
    ref = weakref.ref(fn.get_concrete_function().graph)
    del fn, out, grad
    gc.collect()
    assert ref() is None
    assert names[0] not in registry


def test_autograph_leaves_zcache_code_alone():
    """With autograph on, zcache's code runs as Python (no conversion of its branches)."""
    p = zcache.Parameter("p_ag", 2.0)
    c = zcache.CachedTensor(lambda: p.value() ** 2, name="c_ag")

    @tf.function  # autograph on, as users write it
    def f():
        return c.value() + 1.0

    assert float(f()) == 5.0
    from tensorflow.python.autograph.core import config
    from tensorflow.python.autograph.impl import api

    # by marks on zcache's own code, not by a rule in autograph's global CONVERSION_RULES
    assert not [rule for rule in config.CONVERSION_RULES if "zcache" in repr(rule)]
    from zcache import amplitude  # a package imported after zcache marks its modules itself

    for entity in (c.value, p.set_value, zcache.CachedTensor, zcache.function, zcache.types.Function,
                   amplitude.SymbolicModel, amplitude.SymbolicModel.__init__):
        assert api.is_autograph_artifact(entity), entity
    assert not api.is_autograph_artifact(f.python_function)  # the user's own code is converted as before


def test_zcache_errors_pass_through_autograph():
    """ag_pass_through: a zcache error raised in autograph-converted code keeps its type."""
    p = zcache.Parameter("p_pass", 1.0)

    @tf.function  # autograph on
    def write():
        p.set_value(tf.constant(2.0, tf.float64))
        return 0

    with pytest.raises(UnmanagedTraceError):
        write()

    @tf.function
    def bad_value(x):
        raise ParameterValueError("kept")

    with pytest.raises(ParameterValueError, match="kept"):
        bad_value(tf.constant(1.0))


def test_separately_compiled_function_is_not_inlined():
    calls = []

    def inner():
        calls.append(1)
        return tf.constant(1.0) + 1.0

    compiled = _tf_internals.separately_compiled(inner)

    @tf.function(autograph=False)
    def outer():
        return compiled() * 2.0

    assert float(outer()) == 4.0
    graph = outer.get_concrete_function().graph
    ops = {op.type for op in graph.get_operations()}
    assert ops & {"StatefulPartitionedCall", "PartitionedCall"}, ops
    attrs = compiled.get_concrete_function().function_def.attr
    assert attrs["_noinline"].b
    # under jit, XLA's function: TensorFlow marks it not inlined itself
    xla = _tf_internals.separately_compiled(inner, jit_compile=True)
    xla_attrs = xla.get_concrete_function().function_def.attr
    assert xla_attrs["_XlaMustCompile"].b and xla_attrs["_noinline"].b


def test_eager_variable_inside_a_trace_does_not_retrace():
    made = []

    @tf.function(autograph=False)
    def f(x):
        if not made:
            made.append(_tf_internals.eager_variable(np.float64(3.0), trainable=False))
        return x * made[0]

    assert float(f(tf.constant(2.0, tf.float64))) == 6.0
    assert float(f(tf.constant(3.0, tf.float64))) == 9.0
    assert f.experimental_get_tracing_count() == 1


def test_assign_eagerly_writes_as_assign_does():
    """The bare kernel: the value lands, of any shape where the Variable has none, and a wrong dtype is refused."""
    scalar = _tf_internals.eager_variable(np.float64(1.0))
    _tf_internals.assign_eagerly(scalar, 2.5)
    assert scalar.numpy() == 2.5
    stored = _tf_internals.eager_variable(np.zeros(0), shape=tf.TensorShape(None))
    _tf_internals.assign_eagerly(stored, tf.constant([1.0, 2.0, 3.0], tf.float64))
    assert stored.numpy().tolist() == [1.0, 2.0, 3.0]
    flag = _tf_internals.eager_variable(False)
    _tf_internals.assign_eagerly(flag, True)
    assert bool(flag.numpy())
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        _tf_internals.assign_eagerly(scalar, tf.constant([1, 2], tf.int32))
    assert scalar.numpy() == 2.5


def test_eager_tensor_type():
    assert type(tf.constant([1, 2])) is _tf_internals.EAGER_TENSOR
    assert isinstance(tf.constant(1.0), tf.Tensor)


def test_graph_key_differs_between_graphs():
    eager = _tf_internals.graph_key()
    keys = []
    tf.function(lambda: keys.append(_tf_internals.graph_key()) or tf.constant(0.0), autograph=False)()
    assert keys[0] != eager


def test_assertion_text_is_recovered():
    """TensorFlow's wrapping of failed assertion messages: both forms zcache parses."""

    @tf.function(autograph=False)
    def checked(x):
        tf.debugging.assert_all_finite(x, "[zcache:InvalidDataError] finite please")
        return x

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        checked(tf.constant(np.nan))
    from zcache._engine.traced_checks import error_from

    err = error_from(info.value)
    assert type(err).__name__ == "InvalidDataError" and str(err) == "finite please"

    @tf.function(autograph=False)
    def asserted(x):
        tf.debugging.assert_equal(x, tf.constant(True), message="[zcache:ModelError] must hold")
        return x

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        asserted(tf.constant(False))
    err = error_from(info.value)
    assert type(err).__name__ == "ModelError" and str(err) == "must hold"

    @tf.function(autograph=False)
    def required(x):  # the form zcache's own checks take (traced_checks.require): the message is the only data
        tf.debugging.Assert(x, ["[zcache:ModelError] must hold [0, 1]"])
        return x

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        required(tf.constant(False))
    err = error_from(info.value)
    assert type(err).__name__ == "ModelError" and str(err) == "must hold [0, 1]"


def test_require_adds_one_assert_op_and_no_function():
    """A traced zcache check is one Assert op: tf.debugging.assert_equal guarded its Assert with a tf.cond, two
    branch functions traced per check (most of the trace of a small in-graph setter, issue 51)."""
    from zcache._engine.traced_checks import assertion_ops, error_from, require
    from zcache.exceptions import ModelError

    graphs = []

    @tf.function(autograph=False)
    def checked(x):
        before = len(tf.compat.v1.get_default_graph().get_operations())
        require(x > 0.0, ModelError, "x must be positive")
        graph = tf.compat.v1.get_default_graph()
        graphs.append((graph, [op.type for op in graph.get_operations()[before:]]))
        return x

    assert float(checked(tf.constant(1.0))) == 1.0
    graph, added = graphs[0]
    assert added.count("Assert") == 1 and "If" not in added and "StatelessIf" not in added, added
    assert len(assertion_ops(graph)) == 1 and not graph.as_graph_def().library.function
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        checked(tf.constant(-1.0))
    err = error_from(info.value)
    assert isinstance(err, ModelError) and str(err) == "x must be positive"


def test_inside_control_flow_sees_cond_branches_and_loop_bodies():
    """Item 12: a graph being built is told apart as a tf.cond branch or loop body (or inside one)."""
    seen = {}

    @tf.function(autograph=False)
    def f(x):
        seen["function"] = _tf_internals.inside_control_flow()

        def branch():
            seen["cond"] = _tf_internals.inside_control_flow()
            return tf.identity(x)

        y = tf.cond(x > 0, branch, lambda: -x)

        def body(i):
            seen["loop"] = _tf_internals.inside_control_flow()
            return (i + 1,)

        tf.while_loop(lambda i: i < 2, body, (tf.constant(0),))
        return y

    f(tf.constant(1.0))
    assert seen == {"function": False, "cond": True, "loop": True}
    assert _tf_internals.inside_control_flow() is False


def test_built_inside_tells_a_tape_in_the_trace_from_one_around_the_call():
    """Item 12: a backward pass built by a tape inside the trace (or in a cond branch there) is built inside the
    forward pass's graph; one built for an eager tape around the call is not."""
    seen = {}
    v = tf.Variable(0.5, dtype=tf.float64)

    @tf.custom_gradient
    def marked(x):
        graph = tf.compat.v1.get_default_graph()

        def vjp(dy):
            seen.setdefault("backward", []).append(_tf_internals.built_inside(graph))
            return dy

        return tf.identity(x), vjp

    @tf.function(autograph=False)
    def inner_tape():
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = marked(v.read_value())
        return tape.gradient(y, v)

    @tf.function(autograph=False)
    def forward():
        return marked(v.read_value())

    inner_tape()
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = forward()
    tape.gradient(y, v)
    assert seen["backward"] == [True, False]
    assert _tf_internals.built_inside(tf.compat.v1.get_default_graph())


def test_tensorflow_still_miscompiles_x_times_one_plus_x_in_a_backward_cond():
    """TensorFlow 2.21's graph optimizer turns ``x * 1.0 + x``, computed in a ``tf.cond`` branch of a custom
    gradient's backward function (an eager tape around a ``tf.function`` call), into an empty float32 gradient.
    zcache's backward pass has that shape (``tf.cond(hit, recompute, zeros)``), so a cache computing ``a * 1.0 + a``
    whose gradient is taken by a tape around a traced call gets it wrong; the stateful machine's formulas avoid the
    pattern (``tests/test_properties.py``, ``_norm``). When this test fails, TensorFlow has fixed it: drop the
    machine's workaround and this test."""
    v = tf.Variable(0.5, dtype=tf.float64)
    flag = tf.Variable(True)

    @tf.function(autograph=False)
    def f():
        x = v.read_value()

        @tf.custom_gradient
        def read(value, x):
            return tf.identity(value), lambda dy: (dy, tf.cond(flag, lambda: x * 1.0 + x, lambda: tf.zeros_like(x)))

        return read(tf.constant(0.0, tf.float64), x)

    f()
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = f()
    g = tape.gradient(y, v)
    assert (g.dtype, tuple(g.shape)) == (tf.float32, (0,)), f"TensorFlow now gives {g!r} (1.0 is right)"


def test_inside_vectorized_loop_sees_jacobian_and_vectorized_map_bodies():
    """Item 13: the body of a pfor loop (tape.jacobian, tf.vectorized_map) is told apart, traced or eager;
    a plain function, a while loop's body and a user's own name scope are not."""
    seen = {}
    v = tf.Variable([1.0, 2.0], dtype=tf.float64)

    @tf.custom_gradient
    def spy(t):
        def grad(dy):
            seen.setdefault("jacobian", []).append(_tf_internals.inside_vectorized_loop())
            return dy * 2.0 * t
        return t * t, grad

    def jacobian():
        with tf.GradientTape() as tape:
            y = spy(v)
        return tape.jacobian(y, v)

    def mapped(t):
        seen["vectorized_map"] = _tf_internals.inside_vectorized_loop()
        return t * 2.0

    @tf.function(autograph=False)
    def f():
        seen["function"] = _tf_internals.inside_vectorized_loop()
        with tf.name_scope("loop"):
            seen["name scope"] = _tf_internals.inside_vectorized_loop()

        def body(i):
            seen["while"] = _tf_internals.inside_vectorized_loop()
            return (i + 1,)

        tf.while_loop(lambda i: i < 2, body, (tf.constant(0),))
        tf.vectorized_map(mapped, tf.constant([1.0, 2.0]))
        return jacobian()

    np.testing.assert_array_equal(f().numpy(), np.diag([2.0, 4.0]))
    np.testing.assert_array_equal(jacobian().numpy(), np.diag([2.0, 4.0]))  # eager: pfor runs in a function
    assert seen == {"function": False, "name scope": False, "while": False, "vectorized_map": True,
                    "jacobian": [True, True]}
    assert _tf_internals.inside_vectorized_loop() is False


def test_second_order_cond_error_is_recognized():
    """The text TensorFlow raises for the second-order gradient of a cond over a shape-relaxed Variable.

    zcache keeps its cond off every tape (stop_recording), so nested tapes through a cache work
    in a trace; should the cond be recorded again, the error is mapped to SecondOrderGradientError.
    """
    stored = tf.Variable(np.zeros([0]), shape=tf.TensorShape(None))
    x = tf.Variable(1.0, dtype=tf.float64)
    flag = tf.Variable(False)

    @tf.function(autograph=False)
    def raw():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = tf.cond(flag, lambda: tf.reduce_sum(stored.read_value()) * x, lambda: x ** 3)
            g = inner.gradient(y, x)
        return outer.gradient(g, x)

    with pytest.raises(ValueError) as info:
        raw()
    assert _tf_internals.is_second_order_cond_error(info.value)
    assert not _tf_internals.is_second_order_cond_error(ValueError("another problem"))

    p = zcache.Parameter("p_so", 1.0)
    c = zcache.CachedTensor(lambda: p.value() ** 3, name="c_so")

    @tf.function(autograph=False)
    def second():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = c.value()
            g = inner.gradient(y, p.variable)
        return outer.gradient(g, p.variable)

    assert float(second()) == pytest.approx(6.0, rel=1e-12)


def test_xla_shape_error_is_recognized():
    """XLA cannot assign a Variable of another shape: the text zcache.function runs one call uncompiled on."""
    v = tf.Variable(np.zeros([0]), shape=tf.TensorShape(None))

    @tf.function(jit_compile=True, autograph=False)
    def fill(x):
        v.assign(x)
        return tf.reduce_sum(v.read_value())

    with pytest.raises(tf.errors.OpError) as info:
        fill(tf.ones([3], tf.float64))
    assert _tf_internals.is_xla_shape_error(info.value)
    assert not _tf_internals.is_xla_shape_error(tf.errors.InvalidArgumentError(None, None, "another problem"))
    assert not _tf_internals.is_xla_shape_error(ValueError("cannot be changed after initialization"))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_keep_conditional_keeps_an_element_wise_cond_a_conditional_under_xla():
    """Pinned: XLA turns a cond with an element-wise miss function into a select; keep_conditional stops it.

    If the first assertion fails, XLA no longer does this and ``keep_conditional`` may go; if
    the second fails, it no longer works and every cache hit under jit computes its miss.
    """
    x = tf.Variable(np.linspace(0.0, 1.0, 1000))
    flag = tf.Variable(True)
    count = tf.Variable(0, dtype=tf.int64)
    hits = tf.Variable(0, dtype=tf.int64)

    def sines():
        y = x.read_value()
        for _ in range(5):
            y = tf.sin(y) + 0.1
        return y

    def body(keep):
        inner = _tf_internals.separately_compiled(sines)  # as a cache's miss branch is

        def miss():
            y = inner()
            n = count.read_value() + 1
            count.assign(_tf_internals.keep_conditional(n) if keep else n)
            return y

        def hit():  # a hit counts too (an empty branch would keep the conditional anyway)
            hits.assign_add(1)
            return x.read_value()

        return tf.reduce_sum(tf.cond(flag.read_value(), hit, miss))

    def optimized(keep):
        fn = tf.function(lambda: body(keep), jit_compile=True)
        return fn.experimental_get_compiler_ir()(stage="optimized_hlo")

    assert " conditional(" not in optimized(False)
    assert " conditional(" in optimized(True)
    assert int(_tf_internals.keep_conditional(tf.constant(7, tf.int64))) == 7


def test_xla_calling_graph_is_the_graph_that_calls_the_jit_compile_function():
    """Pinned: tf.function(jit_compile=True) enters an XLA context on the graph that calls it
    (what zcache's refusal of cache reads in a user's XLA function relies on)."""
    seen = {}

    def body(name):
        seen[name] = _tf_internals.xla_calling_graph()

        def branch():
            seen[name + " cond"] = _tf_internals.xla_calling_graph()
            return tf.constant(1.0)

        return tf.cond(tf.constant(True), branch, lambda: tf.constant(0.0))

    assert _tf_internals.xla_calling_graph() is None  # eagerly
    tf.function(lambda: body("plain"), autograph=False)()
    tf.function(lambda: body("jit"), autograph=False, jit_compile=True)()

    @tf.function(autograph=False)
    def plain_outer():
        seen["plain outer"] = tf.compat.v1.get_default_graph()
        return tf.function(lambda: body("jit inside plain"), autograph=False, jit_compile=True)()

    @tf.function(autograph=False, jit_compile=True)
    def jit_outer():
        return tf.function(lambda: body("plain inside jit"), autograph=False)()

    plain_outer()
    jit_outer()
    concrete = tf.function(lambda: (seen.setdefault("body", tf.compat.v1.get_default_graph()), body("concrete"))[1],
                           autograph=False, jit_compile=True)
    concrete.get_concrete_function()  # traced, not called: the context is on the body
    assert seen["concrete"] is seen["body"] and seen["concrete cond"] is seen["body"]
    assert seen["plain"] is None and seen["plain cond"] is None
    eager_graph = seen["jit"]
    assert eager_graph is not None and not eager_graph.building_function
    assert seen["jit cond"] is eager_graph and seen["plain inside jit"] is eager_graph
    assert seen["plain inside jit cond"] is eager_graph
    assert seen["jit inside plain"] is seen["plain outer"] and seen["jit inside plain cond"] is seen["plain outer"]


_COMPLEX_OPS = {"Sqrt": tf.sqrt, "Rsqrt": tf.math.rsqrt, "Reciprocal": tf.math.reciprocal}


def _complex_gradients(op, z, jit, order):
    """First (order 1) or second (order 2, a nested tape) derivative of a real function of ``op(z)``."""

    def loss(z):
        y = op(z)
        return tf.reduce_sum(1.3 * tf.math.real(y) + 0.4 * tf.math.imag(y) + tf.math.real(y * y))

    def grad(z):
        with tf.GradientTape() as outer:
            outer.watch(z)
            with tf.GradientTape() as inner:
                inner.watch(z)
                value = loss(z)
            g = inner.gradient(value, z)
            second = tf.reduce_sum(tf.math.real(g) * tf.math.imag(g))
        return g if order == 1 else outer.gradient(second, z)

    with _tf_internals.zcache_graphs():  # where zcache builds its graphs (item 18)
        return tf.function(grad, autograph=False, jit_compile=jit)(z).numpy()


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("dtype", [tf.complex128, tf.complex64])
@pytest.mark.parametrize("name", sorted(_COMPLEX_OPS))
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_complex_sqrt_rsqrt_reciprocal_gradients_are_right_under_xla(name, dtype, order):
    """XLA's kernels of SqrtGrad, RsqrtGrad and ReciprocalGrad drop the conjugate of a complex input
    (issue 23: every compiled gradient through a Breit-Wigner's 1/z was wrong); zcache builds these
    gradients from plain ops inside XLA, so compiled and uncompiled gradients agree, to first and
    second order."""
    z = tf.constant([0.3 + 0.7j, -1.2 + 0.4j, 2.0 - 0.5j], dtype)
    plain = _complex_gradients(_COMPLEX_OPS[name], z, False, order)
    compiled = _complex_gradients(_COMPLEX_OPS[name], z, True, order)
    np.testing.assert_allclose(compiled, plain, rtol=1e-4 if dtype == tf.complex64 else 1e-12)
    assert _tf_internals.complex_gradients_fixed()


def test_xla_still_drops_the_conjugate_of_the_fused_complex_gradients():
    """Pinned: TensorFlow's own fused gradient ops, compiled with XLA, are still wrong for complex
    inputs (when this fails, XLA was fixed and item 10 of _tf_internals may go)."""
    y = tf.constant([0.3 + 0.7j], tf.complex128)
    dy = tf.constant([1.0 + 0.5j], tf.complex128)
    fused = tf.raw_ops.ReciprocalGrad
    plain = tf.function(lambda: fused(y=y, dy=dy), autograph=False)().numpy()
    compiled = tf.function(lambda: fused(y=y, dy=dy), autograph=False, jit_compile=True)().numpy()
    np.testing.assert_allclose(plain, -dy.numpy() * np.conj(y.numpy() ** 2))
    assert not np.allclose(compiled, plain)


def test_a_wrong_fused_gradient_is_found_in_a_graph():
    """wrong_xla_gradient_ops finds a complex SqrtGrad (what zcache.function refuses to compile when the
    fix is off), and not a real one."""
    def grads(dtype):
        def fn():  # the fused op as TensorFlow's own gradient would build it (zcache's never does)
            z = tf.constant([0.5, 2.0], dtype)
            return tf.raw_ops.SqrtGrad(y=tf.sqrt(z), dy=tf.ones_like(z))
        return tf.function(fn, autograph=False).get_concrete_function().graph

    assert any("SqrtGrad" in name for name in _tf_internals.wrong_xla_gradient_ops(grads(tf.complex128)))
    assert _tf_internals.wrong_xla_gradient_ops(grads(tf.float64)) == []


def test_complex_gradients_are_built_without_the_fused_ops_outside_xla_too():
    """Issue 26: a function's backward is built once, where it was traced, and reused inside XLA
    (the bridge's group programs): the plain-op gradient of a complex sqrt / 1/z is built everywhere."""
    def fn():
        z = tf.constant([0.5 + 0.1j, 2.0 - 0.3j], tf.complex128)
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = tf.reduce_sum(tf.math.real(tf.sqrt(z) + tf.math.reciprocal(z)))
        return tape.gradient(y, z)

    with _tf_internals.zcache_graphs():
        graph = tf.function(fn, autograph=False).get_concrete_function().graph
        assert _tf_internals.wrong_xla_gradient_ops(graph) == []
        z = np.array([0.5 + 0.1j, 2.0 - 0.3j])
        # d Re f / d z for a holomorphic f, as TensorFlow defines it: conj(f'(z))
        np.testing.assert_allclose(tf.function(fn, autograph=False)().numpy(),
                                   np.conj(0.5 / np.sqrt(z) - 1.0 / z**2), rtol=1e-12)


def test_zcache_gradients_apply_only_inside_zcache_graphs():
    """Item 18: outside zcache_graphs() TensorFlow's registry holds its own gradient functions (the same
    objects) and a user's graph gets TensorFlow's fused gradient; inside, zcache's; another thread that
    builds a gradient while one thread is inside gets TensorFlow's; the numbers agree."""
    import threading

    from tensorflow.python.framework import ops

    registry = ops._gradient_registry._registry
    kinds = ("Sqrt", "Rsqrt", "Reciprocal", "Inv", "Complex")
    before = {k: registry[k]["type"] for k in kinds}
    assert all(f.__module__.startswith("tensorflow.") for f in before.values())

    def fn():
        z = tf.constant([0.5 + 0.1j, 2.0 - 0.3j], tf.complex128)
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = tf.reduce_sum(tf.math.real(tf.sqrt(z)))
        return tape.gradient(y, z)

    def fused_ops():
        return _tf_internals.wrong_xla_gradient_ops(tf.function(fn, autograph=False).get_concrete_function().graph)

    outside = fused_ops()
    other = {}
    with _tf_internals.zcache_graphs():
        with _tf_internals.zcache_graphs():  # re-entrant
            assert registry["Sqrt"]["type"] is not before["Sqrt"]
            inside = fused_ops()
            thread = threading.Thread(target=lambda: other.setdefault("ops", fused_ops()))
            thread.start()
            thread.join()
        assert registry["Sqrt"]["type"] is not before["Sqrt"]
    assert {k: registry[k]["type"] for k in kinds} == before
    assert any("SqrtGrad" in name for name in outside) and any("SqrtGrad" in name for name in other["ops"])
    assert inside == []
    z = np.array([0.5 + 0.1j, 2.0 - 0.3j])
    np.testing.assert_allclose(tf.function(fn, autograph=False)().numpy(), np.conj(0.5 / np.sqrt(z)), rtol=1e-12)


def test_without_grappler_is_thread_local_and_restored():
    """Item 11: inside the block this thread's function calls carry a config without Grappler; other
    threads and the code after the block keep theirs; a function gives the same numbers either way."""
    import threading

    from tensorflow.python.eager import context

    def meta_optimizer_disabled() -> bool:
        config = tf.compat.v1.ConfigProto()
        config.ParseFromString(context.context().function_call_options.config_proto_serialized)
        return config.graph_options.rewrite_options.disable_meta_optimizer

    fn = tf.function(lambda x: tf.reduce_sum(tf.exp(x) * 2.0 + 1.0))
    x = tf.constant([0.5, 1.5], tf.float64)
    expected = fn(x).numpy()
    seen = {}
    with _tf_internals.without_grappler():
        assert meta_optimizer_disabled()
        other = threading.Thread(target=lambda: seen.setdefault("other", meta_optimizer_disabled()))
        other.start()
        other.join()
        assert fn(x).numpy() == expected
    assert not meta_optimizer_disabled() and seen["other"] is False


def test_may_take_higher_order_gradient_counts_the_tapes_that_watch():
    """One tape: a first-order gradient only; two nested tapes that watch the tensors: a gradient of
    a gradient may be taken. A read whose miss gives TensorFlow's own gradient is taken only in the
    first case (a pfor of its cond's gradient fails)."""
    x = tf.Variable(2.0)
    assert not _tf_internals.may_take_higher_order_gradient([x.value()])
    with tf.GradientTape():
        assert not _tf_internals.may_take_higher_order_gradient([x.value()])
        with tf.GradientTape():
            assert _tf_internals.may_take_higher_order_gradient([x.value()])
    with tf.GradientTape(watch_accessed_variables=False) as outer:
        with tf.GradientTape(watch_accessed_variables=False) as inner:
            inner.watch(x)
            assert not _tf_internals.may_take_higher_order_gradient([x.value()])  # outer does not watch x
            outer.watch(x)
            assert _tf_internals.may_take_higher_order_gradient([x.value()])


def test_calls_without_body_shape_inference_marks_this_threads_calls_only():
    """Item 16: inside the block a call of a traced function built into a graph carries
    ``_disable_call_shape_inference`` (TensorFlow then does not infer shapes through the body), its
    outputs keep the function's static shapes and its values; outside the block, and on another
    thread inside it, calls are built as TensorFlow builds them."""
    import threading

    inner = tf.function(lambda x: tf.reshape(tf.exp(x) * 2.0, [-1, 2]), autograph=False)

    def calls(graph):
        return [op for op in graph.get_operations() if op.type in ("PartitionedCall", "StatefulPartitionedCall")]

    def marked(op):
        try:
            return bool(op.get_attr("_disable_call_shape_inference"))
        except ValueError:
            return False

    def outer(x):
        return inner(x) + 1.0

    spec = tf.TensorSpec([6], tf.float64)
    with _tf_internals.calls_without_body_shape_inference():
        with_block = tf.function(outer, autograph=False).get_concrete_function(spec)
        other = {}
        thread = threading.Thread(
            target=lambda: other.setdefault("fn", tf.function(outer, autograph=False).get_concrete_function(spec)))
        thread.start()
        thread.join()
    without = tf.function(outer, autograph=False).get_concrete_function(spec)
    assert not [m for m in _tf_internals.MISSING if "partitioned_call_op" in m]
    from tensorflow.python.eager.polymorphic_function import atomic_function

    assert atomic_function.partitioned_call_op.__module__ == atomic_function.__name__  # TensorFlow's own again
    assert [marked(op) for op in calls(with_block.graph)] == [True]
    assert [marked(op) for op in calls(without.graph)] == [False]
    assert [marked(op) for op in calls(other["fn"].graph)] == [False]
    assert with_block.structured_outputs.shape.as_list() == [3, 2] == without.structured_outputs.shape.as_list()
    x = tf.constant(np.linspace(-1.0, 1.0, 6))
    np.testing.assert_array_equal(with_block(x).numpy(), without(x).numpy())
    np.testing.assert_allclose(with_block(x).numpy(), (np.exp(x.numpy()) * 2.0 + 1.0).reshape(3, 2), rtol=1e-15)


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("jit", [False, True])
def test_complex_gradient_takes_its_parts_with_casts_under_xla(jit, broadcast):
    """Item 17: inside XLA the gradient of tf.complex holds no Real or Imag (TensorFlow converts those to
    XLA through a per-op MLIR legalization, ~3.5 ms each); outside it is TensorFlow's own. Either way it
    equals the analytic gradient, to second order, also where a scalar part is broadcast."""
    from zcache._engine.xla_ops import real, slow_to_convert

    re0 = tf.constant([0.3, -1.2, 2.0], tf.float64)
    im0 = tf.constant(0.7, tf.float64) if broadcast else tf.constant([0.7, 0.4, -0.5], tf.float64)

    def grads(re, im):
        with tf.GradientTape(persistent=True) as outer:
            outer.watch([re, im])
            with tf.GradientTape() as inner:
                inner.watch([re, im])
                z = tf.complex(re, im + 0.0 * re if not broadcast else im)
                y = real(tf.reduce_sum(z * z * tf.constant(1.0 - 2.0j, tf.complex128)))
            g_re, g_im = inner.gradient(y, [re, im])
            second = tf.reduce_sum(g_re * g_re) + tf.reduce_sum(g_im * g_im)
        return g_re, g_im, outer.gradient(second, re), outer.gradient(second, im)

    fn = tf.function(grads, autograph=False, jit_compile=jit)
    with _tf_internals.zcache_graphs():  # where zcache builds its graphs (item 18)
        found = [t.numpy() for t in fn(re0, im0)]
    # y = Re((1 - 2i) sum (re + i im)^2) = sum (re^2 - im^2 + 4 re im)
    re, im = re0.numpy(), np.broadcast_to(im0.numpy(), (3,))
    g_re, g_im = 2 * re + 4 * im, -2 * im + 4 * re
    if broadcast:  # second = sum g_re^2 + G^2 with G = sum g_im
        big = g_im.sum()
        want = [g_re, big, 4 * g_re + 8 * big, 8 * g_re.sum() - 4 * big * re.size]
    else:
        want = [g_re, g_im, 4 * g_re + 8 * g_im, 8 * g_re - 4 * g_im]
    for got, ref in zip(found, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-13)
    with _tf_internals.zcache_graphs():
        graph = fn.get_concrete_function(re0, im0).graph
    kinds = {name.split(":")[0].split("/")[-1] for name in slow_to_convert(graph)}
    assert kinds == (set() if jit else {"Real", "Imag"})
    assert _tf_internals.complex_gradient_converts_fast()


def test_a_users_tape_around_a_compiled_function_gets_the_conjugate_complex_gradient():
    """Item 18: a user's own GradientTape around a zcache.function compiled with XLA builds the call's backward
    outside zcache_graphs(), with TensorFlow's fused SqrtGrad, which XLA computes without the conjugate (the
    gradient came out with its sign flipped from the second call on); the call then runs uncompiled. Against
    the analytic derivative of sum Re(1.3 sqrt(c + i p)): 1.3 sum Re(i / (2 sqrt(c + i p)))."""
    p = zcache.Parameter("p_users_tape", 0.7)
    c = np.array([0.3, -0.4, 1.1])
    f = zcache.function(lambda: tf.reduce_sum(tf.math.real(
        1.3 * tf.sqrt(tf.complex(tf.constant(c), p.value() * tf.ones(3, tf.float64))))))
    expected = 1.3 * np.sum(np.real(1j / (2.0 * np.sqrt(c + 0.7j))))
    with zcache.set_jit_mode(True):
        for _ in range(3):
            with tf.GradientTape() as tape:
                y = f()
            assert tape.gradient(y, p.variable).numpy() == pytest.approx(expected, rel=1e-12)
        assert zcache.gradient(f, [p]).numpy()[0] == pytest.approx(expected, rel=1e-12)  # compiled, zcache's tape


def test_forward_accumulator_watches_only_what_an_accumulator_watches():
    """Item 19: eagerly (handles) and in a trace (reads), a tape alone is not an accumulator."""
    from zcache._engine.tf_internals import forward_accumulator_watches, tape_may_record

    a, b = tf.Variable(1.0, dtype=tf.float64), tf.Variable(2.0, dtype=tf.float64)
    assert not tape_may_record() and not forward_accumulator_watches([a, b])
    with tf.GradientTape() as tape:
        tape.watch(a)
        assert tape_may_record() and not forward_accumulator_watches([a, b])
    with tf.autodiff.ForwardAccumulator(a, tf.constant(1.0, tf.float64)):
        assert forward_accumulator_watches([a]) and forward_accumulator_watches([b, a])
        assert not forward_accumulator_watches([b])

        @tf.function(autograph=False)  # zcache calls it from its own, unconverted code
        def traced_under():
            return forward_accumulator_watches([a]), forward_accumulator_watches([b])

        assert traced_under() == (True, False)

    @tf.function(autograph=False)
    def opened_inside():
        with tf.autodiff.ForwardAccumulator(b, tf.constant(1.0, tf.float64)):
            return forward_accumulator_watches([b]), forward_accumulator_watches([a])

    assert opened_inside() == (True, False)


def test_program_bytes_register_and_call_by_name():
    """Item 20: a concrete function with a nested function and a captured Variable, written as bytes,
    registered under new names and called by name gives the function's own results (no trace)."""
    v = tf.Variable(np.array([1.0, 2.0, 3.0]))

    @tf.function(autograph=False)
    def inner(x):
        return tf.reduce_sum(x * v)

    @tf.function(autograph=False)
    def outer(x, n):
        return tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + inner(x)), (0, tf.constant(0.0, tf.float64)))

    concrete = outer.get_concrete_function(tf.TensorSpec([3], tf.float64), tf.TensorSpec([], tf.int32))
    data, name, outputs = _tf_internals.program_bytes(concrete)
    assert _tf_internals.can_reuse_programs() and outputs == 2
    new_name, inputs, n_out = _tf_internals.register_program(data, name, "_zcache_test20")
    assert new_name == name + "_zcache_test20" and n_out == 2 and inputs == [tf.float64, tf.int32, tf.resource]
    x = tf.constant([0.5, 1.0, 2.0], tf.float64)
    got = _tf_internals.call_program(new_name, [x, tf.constant(3), v.handle], n_out)
    want = concrete(x, tf.constant(3))
    assert [t.numpy().tolist() for t in got] == [t.numpy().tolist() for t in want]
    assert float(got[1]) == 3 * (0.5 + 2.0 + 6.0)
    # the same bytes again: the functions are kept, not added twice; garbage is a ZCacheError
    assert _tf_internals.register_program(data, name, "_zcache_test20")[0] == new_name
    with pytest.raises(zcache.exceptions.ZCacheError):
        _tf_internals.register_program(b"\xff not a library", name, "_zcache_bad")
    with pytest.raises(zcache.exceptions.ZCacheError):
        _tf_internals.register_program(data, "no_such_function", "_zcache_bad")


@pytest.mark.slow  # 4.2 (XLA) and 1.8 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times"); make test runs both
@pytest.mark.parametrize("jit", [False, True])
def test_an_exact_hessian_through_complex_numbers_logs_no_casting_warning(jit, caplog):
    """Item 18: an exact Hessian vectorizes (pfor) the gradient's complex-to-real Casts (under XLA, item 17's
    gradient of tf.complex takes its parts with Casts: the jit case logged before the change); TensorFlow's converter
    spelled them tf.cast, which logged "You are casting an input of type complex128 ..." for each (thousands of
    lines in a stress run). zcache's converter builds the same op without the warning, only inside
    zcache_graphs(): pfor's registry holds TensorFlow's converter again afterwards. The Hessian is the
    differences' of exact gradients (and the same as before the change: the same Cast op)."""
    import logging

    from helpers import complex_line_shape_loss
    from tensorflow.python.ops.parallel_for import pfor

    tf_converter = pfor._pfor_converter_registry["Cast"]
    assert tf_converter.__module__ == pfor.__name__
    loss, params = complex_line_shape_loss(f"hessian_warning_{jit}")
    at = [p.value().numpy() for p in params]
    with caplog.at_level(logging.WARNING, logger="tensorflow"), zcache.set_jit_mode(jit):
        exact = loss.hessian_at(at, params, exact=True).numpy()
    assert not [r for r in caplog.records if "imaginary part" in r.getMessage()]
    assert pfor._pfor_converter_registry["Cast"] is tf_converter
    differences = loss.hessian_at(at, params, exact=False).numpy()
    np.testing.assert_allclose(exact, differences, rtol=1e-5, atol=1e-6 * np.abs(exact).max())
    with _tf_internals.zcache_graphs():
        assert pfor._pfor_converter_registry["Cast"] is not tf_converter
    assert pfor._pfor_converter_registry["Cast"] is tf_converter
