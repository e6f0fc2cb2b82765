"""Parameters and Data: values, limits, invalidation, bad input leaves state unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache.exceptions import (
    DataDtypeError,
    DataError,
    DataShapeError,
    EmptyDataError,
    InvalidDataError,
    ParameterValueError,
    WeightSumError,
)


# -- Parameter ---------------------------------------------------------------------------
def test_parameter_basics():
    p = zcache.Parameter("mu", 1.5, lower=-1.0, upper=3.0, floating=False)
    assert p.name == "mu" and p.lower == -1.0 and p.upper == 3.0 and p.floating is False
    assert p.value().dtype == tf.float64 and float(p.value()) == 1.5
    assert isinstance(p.variable, tf.Variable)
    assert "mu" in repr(p) and "1.5" in repr(p)
    p.floating = True
    assert p.floating


def test_parameter_acts_as_tensor():
    p = zcache.Parameter("p", 2.0)
    x = tf.constant([1.0, 2.0], tf.float64)
    np.testing.assert_allclose((x * p).numpy(), [2.0, 4.0])
    np.testing.assert_allclose((p * x).numpy(), [2.0, 4.0])
    np.testing.assert_allclose((p + 1.0).numpy(), 3.0)
    np.testing.assert_allclose((1.0 - p).numpy(), -1.0)
    np.testing.assert_allclose((p / 4.0).numpy(), 0.5)
    np.testing.assert_allclose((8.0 / p).numpy(), 4.0)
    np.testing.assert_allclose((p**3).numpy(), 8.0)
    np.testing.assert_allclose((2.0**p).numpy(), 4.0)
    np.testing.assert_allclose((-p).numpy(), -2.0)
    np.testing.assert_allclose(tf.exp(p).numpy(), math.exp(2.0))
    assert float(p) == 2.0 and np.asarray(p) == 2.0
    assert bool((p > 1.0).numpy())
    with pytest.raises(TypeError, match="no truth value"):
        bool(p)


def test_set_value_context_manager_restores():
    p = zcache.Parameter("p", 1.0)
    with p.set_value(5.0):
        assert float(p.value()) == 5.0
    assert float(p.value()) == 1.0
    p.set_value(tf.constant(7.0, tf.float64))
    assert float(p.value()) == 7.0
    p.set_value(np.float32(2.5))
    assert float(p.value()) == 2.5


@pytest.mark.parametrize(
    "value, match",
    [
        (float("nan"), "not finite"),
        (float("inf"), "not finite"),
        (-0.5, "below the lower limit 0.0"),
        (10.5, "above the upper limit 10.0"),
        ([1.0, 2.0], "takes a real scalar"),
        ("3", "takes a real scalar"),
        (1 + 2j, "takes a real scalar"),
    ],
)
def test_bad_values_raise_and_leave_state_unchanged(value, match):
    p = zcache.Parameter("width", 1.0, lower=0.0, upper=10.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0)
    c.value()
    with pytest.raises(ParameterValueError, match=match):
        p.set_value(value)
    assert float(p.value()) == 1.0
    assert c.is_valid


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"value": 5.0, "lower": 0.0, "upper": 1.0}, "above the upper limit"),
        ({"value": 0.5, "lower": 1.0, "upper": 0.0}, "must be below upper limit"),
        ({"value": float("nan")}, "not finite"),
        ({"value": 0.5, "lower": float("nan")}, "lower limit is NaN"),
    ],
)
def test_bad_construction(kwargs, match):
    with pytest.raises(ParameterValueError, match=match):
        zcache.Parameter("bad", **kwargs)


def test_bad_name():
    with pytest.raises(TypeError, match="non-empty str name"):
        zcache.Parameter("", 1.0)


def test_set_value_invalidates_only_dependents():
    a, b = zcache.Parameter("a", 1.0), zcache.Parameter("b", 2.0)
    ca = zcache.CachedTensor(lambda: a.value() + 1.0)
    cb = zcache.CachedTensor(lambda: b.value() + 1.0)
    cab = zcache.CachedTensor(lambda: ca.value() * cb.value())  # cache of caches
    assert float(cab.value()) == 6.0
    a.set_value(3.0)
    assert not ca.is_valid and not cab.is_valid and cb.is_valid
    assert float(cab.value()) == 12.0
    assert cb.stats == {"hits": 1, "misses": 1}


def test_same_value_invalidates_nothing():
    p = zcache.Parameter("p", 1.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0)
    c.value()
    p.set_value(1.0)
    assert c.is_valid
    zcache.set_values([p], [1.0])
    assert c.is_valid


def test_set_values_checks_all_before_writing():
    a, b = zcache.Parameter("a", 1.0), zcache.Parameter("b", 1.0, upper=2.0)
    with pytest.raises(ParameterValueError, match="above the upper limit"):
        zcache.set_values([a, b], [5.0, 3.0])
    assert float(a.value()) == 1.0 and float(b.value()) == 1.0
    with pytest.raises(ParameterValueError, match="2 parameters but 1 values"):
        zcache.set_values([a, b], [5.0])
    c = zcache.CachedTensor(lambda: a.value() + b.value())
    c.value()
    with zcache.set_values([a, b], [2.0, 1.5]):
        assert not c.is_valid
        assert float(c.value()) == 3.5
    assert float(c.value()) == 2.0


def test_set_values_inside_trace():
    a, b = zcache.Parameter("a", 1.0), zcache.Parameter("b", 1.0)
    c = zcache.CachedTensor(lambda: a.value() * b.value())

    @zcache.function
    def f(x, y):
        zcache.set_values([a, b], [x, y])
        return c.value()

    assert float(f(tf.constant(2.0, tf.float64), tf.constant(3.0, tf.float64))) == 6.0
    assert float(c.value()) == 6.0


def test_parameter_created_inside_trace():
    made = []

    @zcache.function
    def f():
        if not made:
            made.append(zcache.Parameter("inner", 3.0))
        return made[0].value() * 2.0

    assert float(f()) == 6.0
    made[0].set_value(4.0)
    assert float(f()) == 8.0
    assert f.trace_count == 1


# -- Data --------------------------------------------------------------------------------
def test_data_basics():
    d = zcache.Data([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], name="xy")
    assert d.nevents == 3 and d.event_shape == (2,) and d.np_dtype == np.float64
    assert d.value().shape.as_list() == [3, 2]
    assert d.variable.shape.as_list() == [None, 2]
    assert "xy" in repr(d)
    ints = zcache.Data(np.array([1, 2, 3], dtype=np.int32))
    assert ints.np_dtype == np.int64
    ints.set_data(np.array([4, 5], dtype=np.int16))
    assert ints.numpy().tolist() == [4, 5]


def test_set_data_changes_size_and_invalidates(graph_mode):
    d = zcache.Data(np.arange(4.0), name="x")
    c = zcache.CachedTensor(lambda: tf.reduce_sum(d.value()))

    @zcache.function
    def total():
        return c.value()

    assert float(total()) == 6.0
    with d.set_data(np.arange(10.0)):
        assert not c.is_valid
        assert d.nevents == 10
        assert float(total()) == 45.0
    assert float(total()) == 6.0  # restored, and invalidated again
    assert total.trace_count <= 1


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((3, 2)), DataShapeError, "got an array of shape \\(3, 2\\)"),
        (np.zeros(0), EmptyDataError, "no events"),
        (np.array([1.0, np.nan]), InvalidDataError, "1 value\\(s\\) are NaN or infinite"),
        (np.array([1.0, np.inf, -np.inf]), InvalidDataError, "2 value\\(s\\)"),
        (np.array([1 + 1j]), DataDtypeError, "cannot be cast safely"),
        (np.array(["a"]), DataDtypeError, "cannot be cast safely"),
    ],
)
def test_bad_data_leaves_state_unchanged(bad, error, match):
    d = zcache.Data(np.arange(3.0), name="x")
    c = zcache.CachedTensor(lambda: d.value() * 2.0)
    c.value()
    with pytest.raises(error, match=match):
        d.set_data(bad)
    assert d.numpy().tolist() == [0.0, 1.0, 2.0]
    assert c.is_valid


@pytest.mark.parametrize(
    "bad, error",
    [(3.0, DataShapeError), (np.array([]), EmptyDataError), (np.array(["x"]), DataDtypeError),
     ([np.nan], InvalidDataError)],
)
def test_bad_data_construction(bad, error):
    with pytest.raises(error):
        zcache.Data(bad)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_set_data_inside_trace():
    d = zcache.Data(np.arange(3.0))
    c = zcache.CachedTensor(lambda: tf.reduce_sum(d.value()))

    @zcache.function
    def f(x):
        d.set_data(x)
        return c.value()

    assert float(f(tf.constant([1.0, 2.0], tf.float64))) == 3.0
    assert float(f(tf.constant([1.0, 2.0, 3.0, 4.0], tf.float64))) == 10.0
    assert d.nevents == 4 and float(c.value()) == 10.0
    with pytest.raises(InvalidDataError, match="NaN or infinite"):
        f(tf.constant([np.nan], tf.float64))
    assert d.nevents == 4 and c.is_valid
    with pytest.raises(EmptyDataError, match="no events"):
        f(tf.zeros((0,), tf.float64))
    assert d.nevents == 4
    with pytest.raises(DataShapeError):
        f(tf.zeros((2, 2), tf.float64))


@pytest.mark.parametrize("values", [[0.5, [0.0, 1.0]], [[3.0, 4.0]], ["a", 1.0]])
def test_set_values_rejects_malformed_values(values):
    a, b = zcache.Parameter("a", 1.0), zcache.Parameter("b", 2.0)
    with pytest.raises(ParameterValueError, match="set_values takes"):
        zcache.set_values([a, b], values)
    assert float(a.value()) == 1.0 and float(b.value()) == 2.0


# == event weights =============================================================================
def test_weights_live_in_their_own_data_and_follow_set_data(graph_mode):
    d = zcache.Data(np.array([1.0, 2.0, 3.0]), name="wx", weights=[0.5, -1.0, 2.0])
    assert d.is_weighted and isinstance(d.weights_data, zcache.Data)
    total = zcache.CachedTensor(lambda: tf.reduce_sum(d.weights * d.value()), name="weighted sum")
    assert float(total.value()) == pytest.approx(0.5 - 2.0 + 6.0)
    with d.set_data([1.0, 1.0], weights=[3.0, 4.0]):  # invalidates what reads the weights
        assert float(total.value()) == pytest.approx(7.0)
    assert float(total.value()) == pytest.approx(4.5)  # restored: events and weights
    d.set_data([2.0, 5.0])  # no weights: a sample is unweighted, every weight 1
    np.testing.assert_array_equal(d.weights.numpy(), [1.0, 1.0])
    assert float(total.value()) == pytest.approx(7.0)

    @zcache.function
    def refill(x, w):
        d.set_data(x, weights=w)
        return tf.reduce_sum(d.weights)

    assert float(refill(tf.constant([1.0, 2.0, 3.0], tf.float64), tf.constant([1.0, 1.0, -0.5], tf.float64))) == 1.5
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0, 3.0])
    assert float(total.value()) == pytest.approx(1.0 + 2.0 - 1.5)


@pytest.mark.parametrize("weights, error", [
    ([1.0, 2.0], DataShapeError), ([[1.0, 2.0, 3.0]], DataShapeError), ([1.0, np.nan, 1.0], InvalidDataError),
    (["a", "b", "c"], DataDtypeError),
])
def test_bad_weights_raise_and_change_nothing(weights, error):
    with pytest.raises(error):
        zcache.Data(np.array([1.0, 2.0, 3.0]), weights=weights)
    d = zcache.Data(np.array([1.0, 2.0, 3.0]), weights=[1.0, 1.0, 2.0])
    with pytest.raises(error):
        d.set_data(np.array([4.0, 5.0, 6.0]), weights=weights)
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(d.weights.numpy(), [1.0, 1.0, 2.0])
    plain = zcache.Data(np.array([1.0, 2.0]))
    with pytest.raises(DataError, match="created without weights"):
        plain.set_data(np.array([1.0, 2.0]), weights=[1.0, 1.0])
    assert plain.weights is None and not plain.is_weighted


def test_failed_eager_call_puts_weighted_data_back_with_their_weights():
    """The undo of an eagerly run zcache.function restores events and weights (it used to reset
    the weights to 1: the events' undo went through set_data, which reads no weights as 'all 1')."""
    d = zcache.Data(np.array([1.0, 2.0, 3.0]), name="undo_w", weights=[0.5, 2.0, 3.0])

    @zcache.function(wraps="model")
    def fails():
        d.set_data(np.array([4.0, 5.0]), weights=[7.0, 8.0])
        raise RuntimeError("boom")

    with zcache.set_graph_mode(False), pytest.raises(RuntimeError, match="boom"):
        fails()
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(d.weights.numpy(), [0.5, 2.0, 3.0])


# == padded data (shape buckets) ===============================================================
def test_padded_data_layout_and_growth():
    d = zcache.Data(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), name="pad2", obs=("a", "b"), capacity=4)
    assert d.capacity == 4 and d.nevents == 3 and not d.is_weighted
    np.testing.assert_array_equal(d.value().numpy(), [[1, 2], [3, 4], [5, 6], [5, 6]])  # last event repeated
    np.testing.assert_array_equal(d.numpy(), [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(d.weights.numpy(), [1, 1, 1, 0])
    np.testing.assert_array_equal(d.mask.numpy(), [1, 1, 1, 0])
    np.testing.assert_array_equal(d.weights_data.numpy(), [1, 1, 1])
    d.set_data(np.ones((2, 2)))
    assert d.capacity == 4 and d.nevents == 2 and d.value().shape == (4, 2)
    d.set_data(np.ones((5, 2)))  # more than the capacity: its size class (at least 16 rows)
    assert d.capacity == 16 and d.weights_data.capacity == 16 and d.nevents == 5
    np.testing.assert_array_equal(d.weights.numpy(), [1] * 5 + [0] * 11)
    d.set_data(np.ones((1, 2)))  # never shrinks
    assert d.capacity == 16 and d.nevents == 1 and "capacity=16" in repr(d)
    assert zcache.Data(np.arange(5.0), capacity="auto").capacity == 16
    assert zcache.Data(np.arange(10_000.0), capacity="auto").capacity == 10_240  # 8 classes per octave
    assert zcache.Data(np.arange(40.0), capacity=3).capacity == 40
    assert zcache.Data(np.arange(41.0), capacity=3).capacity == 44
    assert zcache.Data(np.arange(3.0)).mask is None


def test_size_classes_pad_at_most_an_eighth():
    from zcache._engine.data import size_class

    sizes = np.unique(np.r_[np.arange(1, 5000), np.geomspace(5000, 1e7, 400).astype(int)])
    classes = np.array([size_class(n) for n in sizes])
    assert (classes >= sizes).all() and (classes >= 16).all()
    big = sizes >= 16
    assert ((classes[big] - sizes[big]) / sizes[big]).max() <= 0.125
    assert len(set(classes[(sizes > 1024) & (sizes <= 2048)])) == 8  # eight per power of two


@pytest.mark.parametrize("capacity", [0, -3, 2.5, "big", True])
def test_bad_capacity_is_refused(capacity):
    with pytest.raises(DataError, match="capacity must be"):
        zcache.Data(np.arange(3.0), capacity=capacity)


def test_padded_weighted_data():
    d = zcache.Data(np.array([1.0, 2.0, 3.0]), name="padw", weights=[0.5, -1.0, 2.0], capacity=4)
    assert d.is_weighted and d.capacity == 4
    np.testing.assert_array_equal(d.weights.numpy(), [0.5, -1.0, 2.0, 0.0])
    np.testing.assert_array_equal(d.weights_data.numpy(), [0.5, -1.0, 2.0])
    total = zcache.CachedTensor(lambda: tf.reduce_sum(d.weights * d.value()), name="padded weighted sum")
    assert float(total.value()) == pytest.approx(0.5 - 2.0 + 6.0)
    with d.set_data([1.0, 1.0], weights=[3.0, 4.0]):
        assert float(total.value()) == pytest.approx(7.0)
        np.testing.assert_array_equal(d.weights.numpy(), [3.0, 4.0, 0.0, 0.0])
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0, 3.0])
    assert float(total.value()) == pytest.approx(4.5)
    d.set_data([2.0, 5.0])  # a sample: weights 1, padding 0
    np.testing.assert_array_equal(d.weights.numpy(), [1.0, 1.0, 0.0, 0.0])


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_padded_set_data_inside_a_function(graph_mode):
    d = zcache.Data(np.arange(1.0, 5.0), name="padf", capacity=8)
    total = zcache.CachedTensor(lambda: tf.reduce_sum(d.weights * d.value()), name="padf sum")
    assert float(total.value()) == 10.0

    @zcache.function
    def refill(x):
        d.set_data(x)
        return tf.reduce_sum(d.weights * d.value()), d.nevents

    s, n = refill(tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], tf.float64))
    assert float(s) == 21.0 and int(n) == 6
    assert d.nevents == 6 and d.capacity == 8 and float(total.value()) == 21.0
    np.testing.assert_array_equal(d.value().numpy(), [1, 2, 3, 4, 5, 6, 6, 6])
    if refill.traced:
        with pytest.raises(DataShapeError, match="capacity"):  # cannot grow inside a graph
            refill(tf.constant(np.arange(9.0)))
    else:  # run eagerly: it grows, as set_data outside a function
        assert int(refill(tf.constant(np.arange(9.0)))[1]) == 9 and d.capacity == 16
        d.set_data(np.arange(1.0, 7.0))
    with pytest.raises(InvalidDataError):
        refill(tf.constant([1.0, np.nan]))
    np.testing.assert_array_equal(d.numpy(), [1, 2, 3, 4, 5, 6])  # both refused: unchanged
    assert d.nevents == 6 and float(total.value()) == 21.0


def test_failed_call_restores_padded_data_and_count(graph_mode):
    d = zcache.Data(np.arange(1.0, 4.0), name="padundo", capacity=4)

    @zcache.function
    def fails(x):
        d.set_data(x)
        tf.debugging.assert_equal(tf.constant(False), True, message="boom")
        return d.nevents

    with pytest.raises((tf.errors.InvalidArgumentError, RuntimeError)):
        fails(tf.constant([9.0], tf.float64))
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(d.weights.numpy(), [1.0, 1.0, 1.0, 0.0])


# -- issue 23, symptom 4: weights that sum to zero or less ----------------------------------------
BAD_WEIGHTS = {"all-zero": np.zeros(4), "negative-sum": np.array([1.0, -2.0, 0.5, -0.5])}


@pytest.mark.parametrize("capacity", [None, pytest.param("auto", marks=pytest.mark.slow)])  # 1.2-1.7 s a case
@pytest.mark.parametrize("bad", ["all-zero", pytest.param("negative-sum", marks=pytest.mark.slow)], ids=list(BAD_WEIGHTS))
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_all_zero_weights_raise(bad, capacity):
    """Regression (issue 23, symptom 4): all weights 0 (a flat likelihood) made a 'valid' fit
    with errors 0.0 (or 2.99 / 2.32). Weights summing to <= 0 are a WeightSumError on creation
    and on set_data, eagerly, in a zcache.function and under XLA, and a refused set_data leaves
    the events, the weights and the caches as they were. Single negative weights stay fine."""
    x = np.array([0.1, 0.2, 0.3, 0.4])
    w = BAD_WEIGHTS[bad]
    with pytest.raises(WeightSumError, match="sum to"):
        zcache.Data(x, name="w0", weights=w, capacity=capacity)
    d = zcache.Data(x, name="w1", weights=[2.0, -0.5, 1.0, 1.0], capacity=capacity)  # sWeights: sum 3.5
    total = zcache.CachedTensor(lambda: tf.reduce_sum(d.weights * d.value()), deps=[d], name="w1 total")
    before = float(total.value())

    def unchanged():
        np.testing.assert_array_equal(d.numpy(), x)
        np.testing.assert_array_equal(d.weights_data.numpy(), [2.0, -0.5, 1.0, 1.0])
        assert float(total.value()) == before

    with pytest.raises(WeightSumError, match="data unchanged"):
        d.set_data(x[::-1], weights=w)
    assert total.is_valid  # refused before any write: nothing invalidated
    unchanged()
    for jit in (False, True):
        with zcache.set_jit_mode(jit):
            @zcache.function(wraps="loss")
            def refill(events, weights):
                d.set_data(events, weights=weights)
                return total.value()

            with pytest.raises(WeightSumError, match="positive"):
                refill(tf.constant(x[::-1]), tf.constant(w))
            unchanged()
