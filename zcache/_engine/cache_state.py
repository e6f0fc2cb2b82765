"""A cache's storage: the value Variable, the validity flag, hit and miss counters.

The flag is a ``tf.Variable`` so that a traced graph reads and writes it; eagerly a
Python mirror (``py_valid``) saves the device read, exact until a graph first touches
the flag (``traced``), after which the Variable is the truth. Counters are kept twice
for the same reason: Python integers for eager reads, Variables for executions of
traced graphs.

Eager invalidation (:func:`invalidate_eagerly`) clears many flags in one graph call.

The cache memory budget (:mod:`zcache._engine.budget`) keeps its per-cache bookkeeping here
(bytes it counts, last use, evictions); it is touched only while a budget is set.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from contextlib import ExitStack
from typing import Any

import numpy as np
import tensorflow as tf

from ..exceptions import CachedValueError
from .tf_internals import assign_eagerly, eager_variable, keep_conditional, xla_calling_graph

__all__ = ["CacheState", "invalidate_eagerly"]


class CacheState:
    """The stored value of one cache, whether it is valid, and how often it was hit or missed.

    Parameters
    ----------
    name : str
        The cache's name, for error messages.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype: tf.DType | None = None
        self.rank: int | None = None
        # Every static shape a trace gave the value, merged: a traced graph's hit reads the
        # stored value with that static shape, so later values must be compatible with it.
        self.shape = tf.TensorShape(None)
        self.stored: tf.Variable | None = None
        self.flag = eager_variable(False, trainable=False, name="valid")
        self.hits = eager_variable(np.int64(0), trainable=False, name="hits")
        self.misses = eager_variable(np.int64(0), trainable=False, name="misses")
        self.py_hits = 0
        self.py_misses = 0
        self.py_valid = False  # exact until a graph may write the flag (traced)
        self.traced = False
        self.lock = threading.RLock()
        # The budget's bookkeeping (zcache._engine.budget), kept only while a budget is set:
        self.held_bytes = 0  # bytes of the stored value as the budget counts them (0 once evicted)
        self.last_use: tuple[int, int] = (0, 0)  # (tick, rank within the call): least recent first
        self.evicted = False  # released by the budget and not recomputed since
        self.graph_uses = 0  # hits + misses of traced graphs when last looked at
        self.evictions = 0

    @property
    def known(self) -> bool:
        """Whether a value was computed before (its dtype, rank and dependencies are known)."""
        return self.dtype is not None

    def is_valid(self) -> bool:
        """Whether the next eager read is a hit."""
        return bool(self.flag.numpy()) if self.traced else self.py_valid

    def stats(self, budgeted: bool = False) -> dict[str, int]:
        """Hits and misses, eager and in executions of traced graphs.

        With ``budgeted`` (a cache memory budget is set), or once the budget evicted this
        cache, also its evictions and the bytes its stored value holds.
        """
        out = {"hits": self.py_hits + int(self.hits.numpy()), "misses": self.py_misses + int(self.misses.numpy())}
        if budgeted or self.evictions:
            out.update(evictions=self.evictions, nbytes=self.nbytes())
        return out

    def reset_stats(self) -> None:
        """Set the hit, miss and eviction counters to zero."""
        self.py_hits = self.py_misses = self.evictions = self.graph_uses = 0
        self.hits.assign(0)
        self.misses.assign(0)

    def nbytes(self) -> int:
        """Bytes held by the stored value."""
        return 0 if self.stored is None else int(tf.size(self.stored)) * self.stored.dtype.size

    def checked(self, out: Any, stored: bool = True) -> tf.Tensor:
        """``out`` as a tensor, refused if its dtype, rank or static shape cannot be stored.

        ``stored=False``: a value computed at substituted inputs, never stored (a backward pass,
        one toy of a batched evaluation, whose events may be padded to another number of rows):
        its static shape is neither checked against nor merged into the stored one.

        Raises
        ------
        CachedValueError
            Not a tensor, or another dtype/rank than before, or a static shape that a
            traced graph relies on.
        """
        try:
            out = tf.convert_to_tensor(out)
        except (TypeError, ValueError) as err:
            raise CachedValueError(
                f"CachedTensor '{self.name}': func returned {type(out).__name__}, which is not a "
                "tensor; return a tf.Tensor or an array-like of numbers."
            ) from err
        if self.dtype is None:
            self.dtype, self.rank = out.dtype, out.shape.rank
        elif out.dtype != self.dtype or (
            out.shape.rank is not None and self.rank is not None and out.shape.rank != self.rank
        ):
            raise CachedValueError(
                f"CachedTensor '{self.name}': func returned dtype {out.dtype.name} and rank "
                f"{out.shape.rank}, but the cache holds dtype {self.dtype.name} and rank "
                f"{self.rank}; a cached function must keep its dtype and rank. The cache is unchanged."
            )
        if not stored:
            return out
        if not out.shape.is_compatible_with(self.shape):
            raise CachedValueError(
                f"CachedTensor '{self.name}': func returned shape {out.shape}, but a traced graph "
                f"relies on the static shape {self.shape}; a cached value may change its shape only "
                "where its traced shape leaves it open (None, e.g. the events axis of Data). Let the "
                "shape depend on Data and Parameters only, not on Python state. The cache is unchanged."
            )
        if tf.inside_function():
            self.shape = self.shape.merge_with(out.shape)
        return out

    # -- eager ---------------------------------------------------------------------------
    def read_eagerly(self) -> tf.Tensor | None:
        """The stored value if valid (counted as a hit), else None."""
        with self.lock:
            if not self.is_valid():
                return None
            self.py_hits += 1
            return self.stored.value()

    def store_eagerly(self, out: tf.Tensor) -> None:
        """Store a freshly computed value and flag it valid (counted as a miss)."""
        with self.lock:
            self.py_misses += 1
            if self.stored is None:
                self.stored = eager_variable(out, shape=tf.TensorShape(None), trainable=False, name="cache")
            else:
                assign_eagerly(self.stored, out)  # stored has no static shape: any shape of out
            assign_eagerly(self.flag, True)
            self.py_valid = True

    def release(self) -> None:
        """Free the stored value's memory (the cache is bypassed from now on)."""
        if self.stored is not None:
            self.stored.assign(np.zeros([0] * (self.rank or 0), dtype=self.dtype.as_numpy_dtype))

    # -- in a graph --------------------------------------------------------------------------
    def store_in_graph(self, out: tf.Tensor) -> tf.Tensor:
        """Store ``out`` (inside the miss branch); returns ``out`` after the store."""
        if self.stored is None:
            empty = np.zeros([0] * (self.rank or 0), dtype=self.dtype.as_numpy_dtype)
            self.stored = eager_variable(empty, shape=tf.TensorShape(None), trainable=False, name="cache")
        with tf.control_dependencies([self.stored.assign(out)]):
            return tf.identity(out)

    def validated_in_graph(self, out: tf.Tensor) -> tf.Tensor:
        """``out`` after the flag is set and the miss counted (both only once ``out`` exists).

        A check in the cached function that fails (an assert, even one not feeding the
        value) therefore leaves the cache invalid.
        """
        self.traced = True
        with tf.control_dependencies([out]):
            count = self.misses.value() + 1
            if xla_calling_graph() is not None:
                # the counter goes through keep_conditional: XLA then keeps the cache's cond. Only
                # there: its loop took ~28 % of a bridged model's first trace (one per cache read)
                count = keep_conditional(count)
            done = [self.flag.assign(True), self.misses.assign(count)]
        with tf.control_dependencies(done):
            return tf.identity(out)

    def hit_in_graph(self) -> tf.Tensor:
        """The stored value, counted as a hit."""
        with tf.control_dependencies([self.hits.assign_add(1)]):
            return self.stored.read_value()

    def invalidate_in_graph(self, unchanged: tf.Tensor | None) -> None:
        """Clear the flag in the graph being built (kept where ``unchanged`` is True)."""
        self.traced = True
        if unchanged is None:
            self.flag.assign(False)
        else:  # keep the flag only if the new parameter value equals the old one
            self.flag.assign(tf.logical_and(self.flag.value(), unchanged))


_BATCH = 8
_SPARE_FLAGS: list[tf.Variable] = []


def _padded(flags: list[tf.Variable]) -> tuple[tf.Variable, ...]:
    """Pad to a power of two with spare flags, so ``clear_flags`` traces O(log K) times."""
    size = 1 << (len(flags) - 1).bit_length()
    while len(_SPARE_FLAGS) < size - len(flags):
        _SPARE_FLAGS.append(eager_variable(False, trainable=False, name="spare_flag"))
    return (*flags, *_SPARE_FLAGS[: size - len(flags)])


@tf.function(autograph=False)
def clear_flags(flags: tuple[tf.Variable, ...]) -> None:
    """Clear many flags in one graph call."""
    for flag in flags:
        flag.assign(False)


def invalidate_eagerly(caches: Iterable[Any]) -> None:
    """Clear the flags of ``caches`` from eager code, in one graph call when there are many.

    Each cache's lock is held only for its flag write; locks are taken in one order (node id),
    always after the engine lock when both are held, so no lock order can deadlock.
    """
    states = [c.state for c in sorted(caches, key=lambda c: c.node_id)]
    with ExitStack() as stack:
        for state in states:
            stack.enter_context(state.lock)
        writes = [s.flag for s in states if s.traced or s.py_valid]
        for state in states:
            state.py_valid = False
        if len(writes) >= _BATCH:
            clear_flags(_padded(writes))
        else:
            for flag in writes:
                assign_eagerly(flag, False)
