"""The jit policy of a ``zcache.function`` (``zcache._engine.jit_policy``): whether an attempt compiles
with XLA, what a failed attempt does next, and the bounded registry of stored data layouts."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache._engine.jit_policy import STORED_ROWS, JitPolicy, JitRefused, Retry, StoredRows
from zcache.exceptions import ModelError


@pytest.fixture(autouse=True)
def _restore_jit():
    before = zcache.get_jit_mode()
    yield
    zcache.set_jit_mode(before)


class Tracer:
    """Stands in for the function's trace for XLA: counts calls, optionally refuses."""

    def __init__(self, refuse: str | None = None):
        self.calls = 0
        self.refuse = refuse

    def __call__(self) -> None:
        self.calls += 1
        if self.refuse is not None:
            raise JitRefused(self.refuse)


def _first_attempt(call) -> bool:
    return next(iter(call))


def _stored_once(policy, reads, tracer):
    """One successful call over ``reads`` (uncompiled: new rows), so the next may compile."""
    call = policy.call(True, reads, tracer)
    assert _first_attempt(call) is False
    call.succeeded()


def _xla_error(cls, message):
    return cls(None, None, message)


def test_new_data_rows_run_one_call_uncompiled_then_compile():
    data = zcache.Data(np.arange(4.0), name="x_policy_rows")
    policy, tracer, reads = JitPolicy(StoredRows()), Tracer(), {data.node_id}
    _stored_once(policy, reads, tracer)
    assert _first_attempt(policy.call(True, reads, tracer)) is True
    assert tracer.calls == 1  # traced for XLA once: its reads are known from then on
    data.set_data(np.arange(6.0))  # another number of rows: XLA cannot reshape the caches
    _stored_once(policy, reads, tracer)
    assert _first_attempt(policy.call(True, reads, tracer)) is True
    assert policy.fallback is None and tracer.calls == 1


def test_an_xla_failure_falls_back_and_is_remembered():
    data = zcache.Data(np.arange(4.0), name="x_policy_fallback")
    policy, tracer, reads = JitPolicy(StoredRows()), Tracer(), {data.node_id}
    _stored_once(policy, reads, tracer)
    call = policy.call(True, reads, tracer)
    attempts = iter(call)
    assert next(attempts) is True
    err = _xla_error(tf.errors.UnimplementedError, "No registered 'AsString' OpKernel for XLA_CPU_JIT\nmore lines")
    assert call.after_error(err) is Retry.PLAIN
    assert policy.fallback == "XLA failed: UnimplementedError: No registered 'AsString' OpKernel for XLA_CPU_JIT"
    assert next(attempts) is False
    call.succeeded()
    for _ in range(2):  # remembered: every later call runs uncompiled, without tracing again
        call = policy.call(True, reads, tracer)
        assert _first_attempt(call) is False
        call.succeeded()
    assert tracer.calls == 1


def test_an_xla_shape_error_runs_only_this_call_uncompiled():
    data = zcache.Data(np.arange(4.0), name="x_policy_shape")
    policy, tracer, reads = JitPolicy(StoredRows()), Tracer(), {data.node_id}
    _stored_once(policy, reads, tracer)
    call = policy.call(True, reads, tracer)
    attempts = iter(call)
    assert next(attempts) is True
    err = _xla_error(tf.errors.InvalidArgumentError, "Shape of resource x cannot be changed after initialization")
    assert call.after_error(err) is Retry.PLAIN
    assert next(attempts) is False and policy.fallback is None
    call.succeeded()
    assert _first_attempt(policy.call(True, reads, tracer)) is True


def test_a_refused_trace_is_a_fallback():
    data = zcache.Data(np.arange(4.0), name="x_policy_refused")
    reads = {data.node_id}
    policy, tracer = JitPolicy(StoredRows()), Tracer(refuse="a check in a nested graph (Assert) would be dropped")
    call = policy.call(True, reads, tracer)
    assert _first_attempt(call) is False and "nested graph" in policy.fallback
    call.succeeded()
    assert _first_attempt(policy.call(True, reads, tracer)) is False and tracer.calls == 1
    # refused while an attempt traces (the graph was traced anew): the same fallback
    policy = JitPolicy(StoredRows())
    _stored_once(policy, reads, Tracer())
    call = policy.call(True, reads, Tracer())
    attempts = iter(call)
    assert next(attempts) is True
    call.refused(JitRefused("XLA computes the complex gradient Sqrt without its conjugate"))
    assert next(attempts) is False and policy.fallback.startswith("XLA computes")


def test_what_follows_other_errors():
    data = zcache.Data(np.arange(4.0), name="x_policy_errors")
    reads = {data.node_id}
    policy = JitPolicy(StoredRows())
    cancelled = _xla_error(tf.errors.CancelledError, "cancelled")
    checked = _xla_error(tf.errors.InvalidArgumentError, "[zcache:ModelError] bad")
    for may_compile in (False, True):  # an uncompiled attempt: never retried as one
        call = policy.call(may_compile, reads, Tracer())
        assert _first_attempt(call) is False
        assert call.after_error(cancelled) is Retry.EAGERLY  # a failed check may surface as a cancellation
        assert call.after_error(checked) is None
        assert call.after_error(ValueError("user code")) is None
    assert policy.fallback is None
    call.succeeded()
    call = policy.call(True, reads, Tracer())
    assert _first_attempt(call) is True
    assert call.after_error(ModelError("a failed check, an output of the compiled graph")) is None
    assert policy.fallback is None and not call.plain


def test_uncompiled_calls_neither_trace_nor_store_rows():
    data = zcache.Data(np.arange(4.0), name="x_policy_off")
    policy, tracer, reads = JitPolicy(StoredRows()), Tracer(), {data.node_id}
    call = policy.call(False, reads, tracer)
    assert _first_attempt(call) is False
    call.succeeded()
    assert tracer.calls == 0 and len(policy.stored) == 0


def test_stored_rows_are_bounded_oldest_first():
    stored = StoredRows(kept=2)
    a, b, c = ((1, 4),), ((1, 5),), ((2, 4),)
    stored.add(a)
    stored.add(b)
    stored.add(a)  # known: keeps its place
    stored.add(c)
    assert a not in stored and b in stored and c in stored and len(stored) == 2
    assert STORED_ROWS.kept == 256


def test_the_bound_decides_whether_a_layout_compiles():
    one, two = zcache.Data(np.arange(4.0), name="x_policy_one"), zcache.Data(np.arange(3.0), name="x_policy_two")
    stored = StoredRows(kept=1)
    first, second = JitPolicy(stored), JitPolicy(stored)
    _stored_once(first, {one.node_id}, Tracer())
    assert _first_attempt(first.call(True, {one.node_id}, Tracer())) is True
    _stored_once(second, {two.node_id}, Tracer())  # pushes the first layout out
    assert _first_attempt(first.call(True, {one.node_id}, Tracer())) is False


def test_functions_share_the_stored_layouts():
    """The first call under jit runs uncompiled (a second trace); a function over the same data compiles at once."""
    x = zcache.Data(np.linspace(0.0, 1.0, 7), name="x_policy_shared")

    @zcache.function(wraps="loss")
    def total():
        return tf.reduce_sum(x.value())

    @zcache.function(wraps="loss")
    def squares():
        return tf.reduce_sum(x.value() ** 2)

    with zcache.set_jit_mode(True):
        assert float(total()) == pytest.approx(3.5)
        assert total.trace_count == 2  # traced for XLA, then run uncompiled (new rows)
        assert float(squares()) == pytest.approx(np.sum(np.linspace(0.0, 1.0, 7) ** 2))
        assert squares.trace_count == 1  # traced for XLA and run compiled
        assert total.jit_fallback is None and squares.jit_fallback is None


def test_reset_clears_the_fallback():
    x = zcache.Data(np.array([1.0, 2.0]), name="x_policy_reset")

    @zcache.function(wraps="loss")
    def distinct():  # string ops have no XLA kernel
        return tf.size(tf.strings.as_string(x.value()))

    with zcache.set_jit_mode(True):
        distinct()
        distinct()
        assert distinct.jit_fallback is not None and "XLA" in distinct.jit_fallback
        distinct.reset()
        assert distinct.jit_fallback is None
