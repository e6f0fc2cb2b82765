r"""CachedTensor: a value Variable, a validity flag, and ``tf.cond`` between them.

Reading a cache inside a trace builds

.. code-block:: text

    value = tf.cond(not flag, compute_and_store, read_cache)

so the same graph serves a hit and a miss, and invalidation is a flag write that
may happen outside any trace. Eagerly the same choice is a Python ``if``.

Gradients. TensorFlow cannot differentiate through the read of a Variable, so
the cond's output is wrapped in a ``tf.custom_gradient`` identity whose inputs
are the values of every parameter the cache depends on (transitively). Its
backward pass recomputes the cache's function under a tape and returns the
vector-Jacobian product

.. math:: \bar p_i = \sum_k \bar y_k \, \partial y_k / \partial p_i ,

so a hit and a miss give the same gradient, eagerly and traced, at no cost
when no gradient is asked for. Eagerly, a miss returns the freshly computed
tensor itself and its gradient is TensorFlow's own.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, nullcontext
from typing import Any

import numpy as np
import tensorflow as tf

from ._depgraph import CACHE, GRAPH, record_read, recording, substituted, substituting
from ._tensorlike import TensorLike, eager_variable
from .exceptions import (
    CachedValueError,
    DependencyCycleError,
    IllegalInGraphModeError,
    InvalidDependencyError,
    SecondOrderGradientError,
    UndeclaredDependencyWarning,
    ZCacheError,
)

__all__ = ["CachedTensor"]

_local = threading.local()
_EVALUATION = threading.local()  # .memo: bypassed cache -> tensor, within one evaluation
_GRAD_CONTEXT = threading.local()  # stack of frozensets of parameter node ids (None: all)

#: The engine lock. Held by every eager write of a Parameter's or Data's Variable (see
#: _parameter.py), by every eager cache read (hit, or compute and store), and around every call
#: of a traced zcache.function: so no value computed from an input that another thread changes
#: meanwhile is ever flagged valid, and a returned value never mixes old and new inputs.
INPUT_WRITES = threading.RLock()

_SECOND_ORDER_MSG = (
    "Nested tf.GradientTape (second derivatives) through the CachedTensor '{name}' inside a "
    "traced function is not supported: TensorFlow cannot build the second-order gradient of a "
    "tf.cond that reads shape-relaxed Variables. Use zcache.hessian(func, params) (central "
    "differences of exact gradients; works traced and eager), or take the nested tapes eagerly."
)


def _computing() -> list[Any]:
    stack = getattr(_local, "computing", None)
    if stack is None:
        stack = _local.computing = []
    return stack


def differentiating(params: Iterable[Any] | None) -> Any:
    """Declare, on this thread, the parameters that gradients are taken with respect to.

    Inside, a cache attaches its gradient only for these (``None``: all its parameters,
    the safe default for user tapes). ``zcache.value_and_gradient`` sets it around its
    forward and backward pass, so a cache that depends on none of them, e.g. a column of
    fixed line-shape parameters in a fit of couplings, adds nothing to the gradient graph.
    """
    return _scope(None if params is None else frozenset(p.node_id for p in params))


@contextlib.contextmanager
def _scope(ids: frozenset[int] | None) -> Iterator[None]:
    stack = _GRAD_CONTEXT.__dict__.setdefault("stack", [])
    stack.append(ids)
    try:
        yield
    finally:
        stack.pop()


@contextlib.contextmanager
def evaluation(fresh: bool = False) -> Iterator[None]:
    """One evaluation (of a loss, or of a bypassed cache): bypassed caches are computed once in it.

    Open only where no input changes and no gradient tape starts or stops: a tensor computed
    before a ``set_value``, or outside a tape, must not be reused after it. ``fresh``: a new
    evaluation even inside another (a backward pass at other inputs).
    """
    outer = _EVALUATION.__dict__.get("memo")
    if outer is not None and not fresh:
        yield
        return
    _EVALUATION.memo = {}
    try:
        yield
    finally:
        _EVALUATION.memo = outer


def _wanted(params: list[Any]) -> list[Any]:
    stack = _GRAD_CONTEXT.__dict__.get("stack")
    if not stack or stack[-1] is None:
        return params
    return [p for p in params if p.node_id in stack[-1]]


def _check_dep(obj: Any) -> Any:
    if isinstance(obj, TensorLike):  # Parameter, Data or CachedTensor
        return obj
    raise InvalidDependencyError(
        f"deps must contain zcache.Parameter, zcache.Data or zcache.CachedTensor objects, got "
        f"{obj!r} ({type(obj).__name__}). Wrap arrays in zcache.Data and numbers in "
        "zcache.Parameter, or pass deps=None to discover dependencies automatically."
    )


class CachedTensor(TensorLike):
    """The cached value of ``func()``, recomputed only after a dependency changed.

    Args:
        func: zero-argument callable returning a tensor (or array-like).
        deps: the Parameters, Data and CachedTensors ``func`` depends on. ``None``
            (default) discovers them by recording what ``func`` reads; reads outside
            a declared list are added too, with an :class:`UndeclaredDependencyWarning`.
        name: a label for reports and the dependency graph.

    Example:
        >>> import numpy as np, tensorflow as tf, zcache
        >>> x = zcache.Data(np.linspace(0.0, 1.0, 5), name="x")
        >>> tau = zcache.Parameter("tau", 2.0)
        >>> decay = zcache.CachedTensor(lambda: tf.exp(-x.value() / tau.value()), name="decay")
        >>> _ = decay.value(); _ = decay.value()
        >>> decay.stats
        {'hits': 1, 'misses': 1}
        >>> _ = tau.set_value(3.0)        # invalidates decay
        >>> decay.is_valid
        False
    """

    def __init__(self, func: Callable[[], Any], deps: Iterable[Any] | None = None, name: str | None = None):
        if not callable(func):
            raise TypeError(f"CachedTensor needs a zero-argument callable, got {func!r}.")
        self.name = name or getattr(func, "__name__", "cache")
        self._func = func
        if deps is not None and not isinstance(deps, Iterable):
            raise InvalidDependencyError(f"deps must be a list of zcache objects or None, got {deps!r}.")
        self._declared = None if deps is None else tuple(_check_dep(d) for d in deps)
        self._deps: list[Any] = []
        self._dtype: tf.DType | None = None
        self._rank: int | None = None
        # Every static shape a trace gave func, merged: a traced graph's hit reads the stored
        # value with that static shape, so later values must be compatible with it.
        self._shape = tf.TensorShape(None)
        self._cache: tf.Variable | None = None
        self._flag = eager_variable(False, trainable=False, name="valid")
        self._hits = eager_variable(np.int64(0), trainable=False, name="hits")
        self._misses = eager_variable(np.int64(0), trainable=False, name="misses")
        self._py_hits = 0
        self._py_misses = 0
        # Python mirror of the flag; exact until a graph may write the flag (_traced).
        self._py_valid = False
        self._traced = False
        self._warned = False
        # Bypassed: value() computes func() directly, with no tf.cond, flag or store (see
        # set_always_dirty); set by zcache.precompute for nodes that change on every call.
        self._always_dirty = False
        # The miss branch, traced once into a function of its own (see _compiled_miss).
        self._miss_fn: Any = None
        self._lock = threading.RLock()
        self.node_id = GRAPH.add_node(self, CACHE, self.name)
        if self._declared:
            self._add_deps(self._declared)

    def __repr__(self) -> str:
        return f"<zcache.CachedTensor '{self.name}' deps={[d.name for d in self._deps]}>"

    # -- dependencies ------------------------------------------------------------------
    @property
    def deps(self) -> tuple[Any, ...]:
        """The direct dependencies known so far (declared and discovered)."""
        return tuple(self._deps)

    def _add_deps(self, objs: Iterable[Any]) -> None:
        new = [o for o in objs if o is not self and all(o is not d for d in self._deps)]
        if new:
            GRAPH.add_edges([o.node_id for o in new], self.node_id)
            self._deps.extend(new)

    def _parameters(self) -> list[Any]:
        return GRAPH.objects(GRAPH.ancestor_parameters(self.node_id))

    # -- state -------------------------------------------------------------------------
    @property
    def is_valid(self) -> bool:
        """Whether the next eager ``value()`` is a hit (eager only)."""
        if tf.inside_function():
            raise IllegalInGraphModeError("CachedTensor.is_valid is a Python bool; read it eagerly.")
        return self._is_valid()

    def _is_valid(self) -> bool:
        return bool(self._flag.numpy()) if self._traced else self._py_valid

    @property
    def stats(self) -> dict[str, int]:
        """Hits and misses so far, counting eager calls and executions of traced graphs."""
        return {
            "hits": self._py_hits + int(self._hits.numpy()),
            "misses": self._py_misses + int(self._misses.numpy()),
        }

    def reset_stats(self) -> None:
        """Set the hit and miss counters to zero."""
        self._py_hits = self._py_misses = 0
        self._hits.assign(0)
        self._misses.assign(0)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached value (0 before the first computation and when always dirty)."""
        if self._cache is None or self._always_dirty:
            return 0
        return int(tf.size(self._cache)) * self._cache.dtype.size

    def invalidate(self) -> None:
        """Mark the cached value stale; the next ``value()`` recomputes it."""
        if tf.inside_function():
            self._invalidate_in_graph(None)
            return
        invalidate_eagerly([self])

    def _invalidate_in_graph(self, unchanged: tf.Tensor | None) -> None:
        self._traced = True
        if unchanged is None:
            self._flag.assign(False)
        else:  # keep the flag only if the new parameter value equals the old one
            self._flag.assign(tf.logical_and(self._flag.value(), unchanged))

    @property
    def always_dirty(self) -> bool:
        """Whether the cache is bypassed (see :meth:`set_always_dirty`)."""
        return self._always_dirty

    def set_always_dirty(self, always_dirty: bool = True) -> None:
        """Bypass the cache (RooFit's "always dirty") or switch it back on.

        A bypassed cache computes ``func()`` on every ``value()``: no ``tf.cond``, no
        flag writes, no stored value, TensorFlow's own gradient. This is the right
        setting for a node whose inputs change on every call (a fit's floating
        parameters), where a cache could only add cost. Invalidation skips bypassed
        caches but still reaches the caches that depend on them.

        Graphs traced before the switch keep the old behaviour; :func:`zcache.precompute`
        drops them. Switching a cache back on invalidates it.
        """
        if tf.inside_function():
            raise IllegalInGraphModeError(
                f"CachedTensor '{self.name}'.set_always_dirty changes what is traced; call it eagerly."
            )
        always_dirty = bool(always_dirty)
        if always_dirty == self._always_dirty:
            return
        with self._lock:
            invalidate_eagerly([self])
            self._always_dirty = always_dirty
            if always_dirty and self._cache is not None:  # release the stored value's memory
                self._cache.assign(np.zeros([0] * (self._rank or 0), dtype=self._dtype.as_numpy_dtype))
        GRAPH.set_always_dirty(self.node_id, always_dirty)

    # -- computing ---------------------------------------------------------------------
    def _compute(self) -> tf.Tensor:
        stack = _computing()
        if any(c is self for c in stack):
            chain = " -> ".join(c.name for c in [*stack, self])
            raise DependencyCycleError(
                f"CachedTensor '{self.name}' reads itself while computing ({chain}); a cache "
                "cannot depend on itself. Break the cycle by computing the shared part once."
            )
        stack.append(self)
        try:
            with recording() as reads:
                out = self._func()
        finally:
            stack.pop()
        out = self._checked(out)
        reads.discard(self)
        if self._declared is not None and not self._warned:
            missing = [r for r in reads if not _is_ancestor(r, self._deps)]
            if missing:
                self._warned = True
                warnings.warn(
                    f"CachedTensor '{self.name}' read {[m.name for m in missing]}, which are not "
                    "in its declared deps; they were added so that the cache cannot go stale. "
                    "Declare them, or pass deps=None to discover dependencies automatically.",
                    UndeclaredDependencyWarning,
                    stacklevel=4,
                )
        self._add_deps(reads)
        return out

    def _checked(self, out: Any) -> tf.Tensor:
        try:
            out = tf.convert_to_tensor(out)
        except (TypeError, ValueError) as err:
            raise CachedValueError(
                f"CachedTensor '{self.name}': func returned {type(out).__name__}, which is not a "
                "tensor; return a tf.Tensor or an array-like of numbers."
            ) from err
        if self._dtype is None:
            self._dtype, self._rank = out.dtype, out.shape.rank
        elif out.dtype != self._dtype or (
            out.shape.rank is not None and self._rank is not None and out.shape.rank != self._rank
        ):
            raise CachedValueError(
                f"CachedTensor '{self.name}': func returned dtype {out.dtype.name} and rank "
                f"{out.shape.rank}, but the cache holds dtype {self._dtype.name} and rank "
                f"{self._rank}; a cached function must keep its dtype and rank. The cache is unchanged."
            )
        if not out.shape.is_compatible_with(self._shape):
            raise CachedValueError(
                f"CachedTensor '{self.name}': func returned shape {out.shape}, but a traced graph "
                f"relies on the static shape {self._shape}; a cached value may change its shape only "
                "where its traced shape leaves it open (None, e.g. the events axis of Data). Let the "
                "shape depend on Data and Parameters only, not on Python state. The cache is unchanged."
            )
        if tf.inside_function():
            self._shape = self._shape.merge_with(out.shape)
        return out

    def value(self) -> tf.Tensor:
        """The cached value if valid, else ``func()`` computed, stored and returned."""
        record_read(self)
        if substituting():  # a backward pass at its forward pass's inputs: the stored value is not theirs
            return self._recomputed()
        if self._always_dirty:
            return self._bypassed()
        if tf.inside_function():
            return self._value_in_graph()
        # The engine lock (see INPUT_WRITES): no input changes while the value is computed
        # and stored, so a value computed from an old input can never be flagged valid.
        with INPUT_WRITES:
            with self._lock:
                hit = self._cache.value() if self._is_valid() else None
                if hit is not None:
                    self._py_hits += 1
            if hit is not None:
                return self._with_gradient(hit)
            out = self._compute()
            with self._lock:
                self._py_misses += 1
                if self._cache is None:
                    self._cache = eager_variable(out, shape=tf.TensorShape(None), trainable=False, name="cache")
                else:
                    self._cache.assign(out)
                self._flag.assign(True)
                self._py_valid = True
            return out

    def _recomputed(self) -> tf.Tensor:
        """``func()`` at the substituted inputs (see ``_with_gradient``): nothing read from or stored in the cache."""
        with recording():  # reads here are not new dependencies
            return self._checked(self._func())

    def _value_in_graph(self) -> tf.Tensor:
        self._traced = True
        from . import _mode  # _mode imports this module

        # Trace the miss branch first: the caches it reads (possibly created by it) and their
        # dependencies are then known to the in-graph invalidation below.
        with _stop_recording():
            self._compiled_miss().get_concrete_function()
        _mode.invalidate_if_mutated_in_trace(self)
        static_shape: list[tf.TensorShape] = []

        def compute_and_store() -> tf.Tensor:
            out = self._compiled_miss()()
            static_shape.append(out.shape)
            # The flag is set only once the whole miss branch succeeded: a check in func that
            # fails (an assert, even one not feeding the value) leaves the cache invalid.
            with tf.control_dependencies([out]):
                done = [self._flag.assign(True), self._misses.assign_add(1)]
            with tf.control_dependencies(done):
                return tf.identity(out)

        def read_cache() -> tf.Tensor:
            with tf.control_dependencies([self._hits.assign_add(1)]):
                return self._cache.read_value()

        # compute_and_store is the true branch so that it is traced first: it creates the
        # value Variable on the very first trace, before read_cache needs it.
        try:
            # Not recorded on tapes: the output is stop_gradient-ed anyway (the gradient comes
            # from _with_gradient), and a tape that records the cond, e.g. one open while the
            # function is traced, makes TensorFlow build the cond's gradient, which fails.
            with _stop_recording():
                out = tf.cond(tf.logical_not(self._flag.value()), compute_and_store, read_cache)
        except ValueError as err:
            if "partially known TensorShape" in str(err):
                raise SecondOrderGradientError(_SECOND_ORDER_MSG.format(name=self.name)) from err
            raise
        out = tf.stop_gradient(out)
        out.set_shape(static_shape[0])
        return self._with_gradient(out)

    def _bypassed(self) -> tf.Tensor:
        # Always dirty: computed directly, once per evaluation. A bypassed node read by several
        # others (a column read by K integral entries) is computed on the first read and reused
        # within the same evaluation (the outermost bypassed computation, or a loss evaluation)
        # and the same graph; inputs cannot change inside one evaluation (functions are pure).
        memo = _EVALUATION.__dict__.get("memo")
        if memo is None:
            with evaluation():
                return self._bypassed()
        key = (self.node_id, id(tf.compat.v1.get_default_graph()))
        out = memo.get(key)
        if out is None:
            out = memo[key] = self._compute()
        return out

    def _compiled_miss(self) -> Any:
        """The miss branch (compute, store, set the flag) as a ``tf.function`` of its own.

        Traced once per cache and then called from every graph that reads this cache:
        without it each graph would inline the miss branch, and the miss branches of
        every cache below, once per path through the dependency graph (a K x K matrix of
        integrals over K columns traced each column K times).
        """
        fn = self._miss_fn
        if fn is None:
            ref = weakref.ref(self)  # the function must not keep the cache alive

            def miss() -> tf.Tensor:
                from ._mode import isolated_trace  # _mode imports this module

                # no trace's mutations enter a shared function; no gradient leaves a miss branch
                with isolated_trace(), differentiating(()):
                    return ref()._compute_and_store()

            fn = self._miss_fn = tf.function(miss, autograph=False, experimental_attributes={"_noinline": True})
        return fn

    def _compute_and_store(self) -> tf.Tensor:
        out = self._compute()
        if self._cache is None:
            empty = np.zeros([0] * (self._rank or 0), dtype=self._dtype.as_numpy_dtype)
            self._cache = eager_variable(empty, shape=tf.TensorShape(None), trainable=False, name="cache")
        with tf.control_dependencies([self._cache.assign(out)]):
            return tf.identity(out)

    def _drop_compiled(self) -> None:
        self._miss_fn = None

    def _with_gradient(self, out: tf.Tensor) -> tf.Tensor:
        params = _wanted(self._parameters())
        if not params:
            return out
        variables = [p._var for p in params]
        ids = frozenset(p.node_id for p in params)  # not the Parameters: a kept graph must not keep them
        # The inputs of this forward pass. A persistent tape may ask for the gradient after an
        # input changed (set_value between the forward pass and tape.gradient): the backward
        # pass must then recompute func at these values, not at the current ones.
        inputs = GRAPH.objects(GRAPH.ancestor_inputs(self.node_id))
        forward_values = [v.value() for v in variables]
        others = {o.node_id: o._var.value() for o in inputs if o.node_id not in ids}
        generation = GRAPH.input_changes
        # Weakly: inside a trace, tf.custom_gradient registers vjp in TensorFlow's global
        # gradient registry for good, which would keep this cache, and all it reads, alive.
        ref, name = weakref.ref(self), self.name
        uids = [p.node_id for p in params]

        @tf.custom_gradient
        def cached_value(*param_values: tf.Tensor) -> Any:
            def vjp(dy: tf.Tensor) -> list[tf.Tensor]:
                cache = ref()
                if cache is None:
                    raise ZCacheError(
                        f"CachedTensor '{name}' was garbage-collected, but a graph that read it is "
                        "being differentiated; keep the cache alive as long as its graphs are used."
                    )
                if GRAPH.input_changes == generation:  # no input changed since the forward pass
                    with _scope(ids), tf.GradientTape(watch_accessed_variables=False) as tape:
                        tape.watch(variables)
                        with recording():  # reads here are not new dependencies
                            y = tf.convert_to_tensor(cache._func())
                    grads = tape.gradient(y, variables, output_gradients=tf.cast(dy, y.dtype))
                else:  # recompute at the forward pass's inputs (inner caches recompute too)
                    stand_ins = dict(others)
                    stand_ins.update(zip(uids, param_values, strict=True))
                    with _scope(ids), tf.GradientTape(watch_accessed_variables=False) as tape:
                        tape.watch(param_values)
                        with substituted(stand_ins), recording(), evaluation(fresh=True):
                            y = tf.convert_to_tensor(cache._func())
                    grads = tape.gradient(y, list(param_values), output_gradients=tf.cast(dy, y.dtype))
                return [tf.zeros_like(v) if g is None else tf.cast(g, v.dtype)
                        for g, v in zip(grads, param_values, strict=True)]

            return tf.identity(out), vjp

        result = cached_value(*forward_values)
        if tf.inside_function():
            _tie_gradient_to_graph(result)
        return result


def _stop_recording() -> Any:
    """TensorFlow's context that pauses every gradient tape on this thread (a no-op if absent)."""
    try:
        from tensorflow.python.eager import record
    except ImportError:  # pragma: no cover - another TensorFlow layout
        return nullcontext()
    return record.stop_recording()


def _tie_gradient_to_graph(result: tf.Tensor) -> None:
    """Make the gradient that ``tf.custom_gradient`` registered for ``result`` die with its graph.

    Inside a trace, ``tf.custom_gradient`` registers its backward function in TensorFlow's
    global gradient registry and never removes it; the function holds tensors of the graph,
    so every graph that reads a cache would stay alive for good (about 0.5 MB per traced
    function: a toy loop that builds a new loss per toy grows without bound). The graph
    keeps the function instead, the registry only a weak reference, and the entry is
    removed when the graph is collected. Left alone if TensorFlow's internals differ.
    """
    try:
        from tensorflow.python.framework import ops

        registry = ops._gradient_registry._registry
        name = result.op.get_attr("_gradient_op_type").decode()
        entry = registry[name]
        fn = entry["type"]
        graph = result.graph
        kept = getattr(graph, "_zcache_gradients", None)
        if kept is None:
            kept = graph._zcache_gradients = []
        kept.append(fn)
    except (AttributeError, ImportError, KeyError, TypeError, ValueError):
        return
    fn_ref = weakref.ref(fn)

    def weak_gradient(op: Any, *grads: Any) -> Any:
        return fn_ref()(op, *grads)

    entry["type"] = weak_gradient
    weakref.finalize(graph, registry.pop, name, None)


_BATCH = 8
_SPARE_FLAGS: list[tf.Variable] = []


def _padded(flags: list[tf.Variable]) -> tuple[tf.Variable, ...]:
    """Pad to a power of two with spare flags, so ``_clear_flags`` traces O(log K) times."""
    size = 1 << (len(flags) - 1).bit_length()
    while len(_SPARE_FLAGS) < size - len(flags):
        _SPARE_FLAGS.append(eager_variable(False, trainable=False, name="spare_flag"))
    return (*flags, *_SPARE_FLAGS[: size - len(flags)])


@tf.function(autograph=False)
def _clear_flags(flags: tuple[tf.Variable, ...]) -> None:
    for flag in flags:
        flag.assign(False)


def invalidate_eagerly(caches: Iterable[CachedTensor]) -> None:
    """Clear the flags of ``caches`` from eager code, in one graph call when there are many.

    Each cache's lock is held only for its flag write; locks are taken in one order (node id),
    always after the engine lock when both are held, so no lock order can deadlock.
    """
    caches = sorted(caches, key=lambda c: c.node_id)
    with ExitStack() as stack:
        for cache in caches:
            stack.enter_context(cache._lock)
        writes = [c._flag for c in caches if c._traced or c._py_valid]
        for cache in caches:
            cache._py_valid = False
        if len(writes) >= _BATCH:
            _clear_flags(_padded(writes))
        else:
            for flag in writes:
                flag.assign(False)


def _is_ancestor(obj: Any, deps: list[Any]) -> bool:
    """Whether ``obj`` is one of ``deps`` or something they depend on."""
    return any(obj is d or GRAPH.has_path(obj.node_id, d.node_id) for d in deps)
