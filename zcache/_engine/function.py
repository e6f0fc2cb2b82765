"""``zcache.function``: a Python function that the mode policy traces or runs eagerly.

A call goes one of three ways:

1. inside another trace: the body is inlined into it (never a ``tf.function`` nested in another);
2. eagerly, when the policy (or :func:`zcache._engine.context.run_eagerly`) says so: the body runs
   with an undo journal (:func:`zcache._engine.trace.call_eagerly`);
3. traced: the graph for this autograd mode and jit mode is called under the engine lock
   (:meth:`Function._call_graph`); a graph whose body writes inputs returns its trace id
   and the written parameters' final values, and Python finishes what the graph could not
   (:meth:`Function._after_writes`), or undoes its writes when an attempt fails
   (:meth:`Function._undo_writes`). Whether an attempt compiles with XLA, and whether a
   failed one is retried (uncompiled, or eagerly) or raised, is the function's jit policy
   (:class:`zcache._engine.jit_policy.JitPolicy`).

Compiled with XLA (``zcache.set_jit_mode``), a graph's checks are outputs, not Assert ops
(XLA drops those): the call inspects them after the graph ran and, if one failed, takes
the path of a failed call (undo, then the check's zcache error). A graph that still holds an
Assert (a check in a nested graph), that XLA cannot compile, or (only where TensorFlow's internals
moved) that holds a complex gradient XLA computes without its conjugate
(:func:`zcache._engine.tf_internals.wrong_xla_gradient_ops`) runs uncompiled instead
(:attr:`Function.jit_fallback`, kept by the policy).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import types
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import networkx as nx
import tensorflow as tf

from ..exceptions import RetracingWarning, UnknownIdentifierError, warn_at_user_code
from .budget import BUDGET, CallCaches
from .cache_state import invalidate_eagerly
from .cached_tensor import CachedTensor, drop_compiled
from .collector import collector_out_of_traces
from .compile_cache import call_key, compiling, first_call
from .context import CONTEXT, ENGINE_LOCK, differentiating, record_read, recording, run_eagerly
from .data import Data, data_snapshot, undo_data_writes
from .dependencies import CACHE, GRAPH
from .inputs import backing_variable, forward_mode_watches
from .jit_policy import JitPolicy, JitRefused, Retry
from .mode import IDENTIFIERS, auto_decides, compiles, get_autograd_mode, traces
from .parameter import Parameter, refresh_mirrors, undo_parameter_writes
from .tf_internals import (
    EAGER_TENSOR,
    complex_gradients_fixed,
    tape_may_record,
    users_tape_may_record,
    without_grappler,
    wrong_xla_gradient_ops,
    zcache_graphs,
)
from .trace import TraceRecord, call_eagerly, forbid_in_trace, tracing
from .traced_checks import assertion_ops, calling_jit, collecting, error_from, failed_check

__all__ = ["Function", "clear_graph_cache", "drop_traces", "function"]

F = TypeVar("F", bound=Callable[..., Any])

_MAX_TRACES_DEFAULT = 40
#: Every live function (weakly): what ``drop_traces`` and ``clear_graph_cache`` reset.
_FUNCTIONS: weakref.WeakSet[Function] = weakref.WeakSet()
#: Ids of the check lists of compiled traces (``Function._checks``), unique in the process.
_CHECK_IDS = itertools.count(1)
#: The graphs a function keeps for the bypass settings other than the current one (the oldest dropped).
_PARKED_SETTINGS = 8
#: A function's state that belongs to the graphs of one bypass setting (``Function._new_graphs``).
_GRAPH_STATE = ("_tf_functions", "_checks", "_jit", "_concrete", "_compiled_calls", "_live_traces", "_traces",
                "_param_writes", "_data_writes", "_budget")

class Function:
    """A Python function that the mode policy traces or runs eagerly (made by :func:`zcache.function`).

    Parameters
    ----------
    func : callable
        The Python function.
    wraps : str
        The identifier that selects the policy.
    max_traces : int
        Bound on the graphs kept; past it they are dropped with a ``RetracingWarning``.
    eager_calls : int
        How many calls run eagerly before the function is traced, where the graph mode for
        ``wraps`` is ``'auto'``'s choice and no jit mode compiles it (default 0: traced from
        the first call). A loss's ``value()`` and ``value_gradient()`` take 2: a look before
        and after a fit then traces nothing that the fit's own program does not replace, and
        a third call shows that tracing pays.

    Attributes
    ----------
    wraps : str
        The identifier that selects the policy.
    trace_count : int
        How many times the Python body has been traced into a graph, over the whole life
        of the function (a retrace shows up as an increase).
    """

    def __init__(self, func: Callable[..., Any], wraps: str = "tensor", max_traces: int = _MAX_TRACES_DEFAULT,
                 eager_calls: int = 0):
        if not isinstance(wraps, str) or wraps not in IDENTIFIERS:
            raise UnknownIdentifierError(
                f"Unknown identifier wraps={wraps!r}; use one of {sorted(IDENTIFIERS)}."
            )
        if not callable(func):
            raise TypeError(f"zcache.function needs a callable, got {func!r}.")
        if not isinstance(max_traces, int) or max_traces < 1:
            raise ValueError(f"max_traces must be a positive int, got {max_traces!r}.")
        if not isinstance(eager_calls, int) or eager_calls < 0:
            raise ValueError(f"eager_calls must be an int >= 0, got {eager_calls!r}.")
        functools.update_wrapper(self, func)
        self.python_function = func
        self.wraps = wraps
        self.max_traces = max_traces
        self.eager_calls = eager_calls
        self.trace_count = 0
        # Calls from eager code so far (kept by reset: a function called before has shown that
        # tracing it pays).
        self._calls = 0
        self.reset()
        _FUNCTIONS.add(self)

    def reset(self) -> None:
        """Drop every traced graph of this function (the next call traces anew)."""
        self._reads: set[int] = set()  # node ids read at the top level of its traces
        # The graphs of other bypass settings (CachedTensor.set_always_dirty, zcache.precompute) of the
        # caches it reads: setting -> the graph state below, the most recently left last.
        self._parked: dict[frozenset[int], dict[str, Any]] = {}
        # The setting the graphs below were traced for (None: not known before the first trace ends),
        # and the graph's bypass_version it was last compared with.
        self._setting: frozenset[int] | None = None
        self._bypass_seen = GRAPH.bypass_version
        self._new_graphs()

    def _new_graphs(self) -> None:
        """No graph for the current setting (the next call traces)."""
        # One tf.function per (autograd mode, jit): the autograd mode is read while tracing
        # (zcache.gradient), so a graph traced under one mode must not serve the other.
        self._tf_functions: dict[tuple[bool, bool], Any] = {}
        self._checks: dict[int, list[tuple[type[Exception], str]]] = {}  # id -> checks of a compiled trace
        self._jit = JitPolicy()  # whether a call compiles; what follows a failed attempt
        self._concrete: dict[Any, Any] = {}
        self._compiled_calls: set[Any] = set()  # calls off the hot path whose programs ran (compile_cache)
        self._live_traces = 0
        self._traces: dict[int, TraceRecord] = {}  # trace id -> record (only traces that write inputs)
        self._traced_now: dict[int, Any] = {}  # data a trace made during this call writes, before it
        # node ids of every parameter / dataset some live trace writes
        self._param_writes: set[int] = set()
        self._data_writes: set[int] = set()
        self._budget = CallCaches()  # the caches its graphs touch, for the cache memory budget

    def _setting_now(self) -> frozenset[int]:
        """The bypassed caches among those its traces read, directly or below: what its graphs embed."""
        g = GRAPH.nx
        nodes = g.nodes
        below: set[int] = set()
        with GRAPH.lock:  # a collected object's node is removed after the walk, not during it
            for uid in self._reads:
                if uid in g:
                    below.add(uid)
                    below |= nx.ancestors(g, uid)
            return frozenset(uid for uid in below if nodes[uid].get("always_dirty"))

    def _follow_bypass(self) -> None:
        """A cache's bypass changed somewhere: use (or start) the graphs of this function's setting now.

        A graph traced with a cache bypassed computes it directly and writes no flag of it; one traced
        with the cache on reads its ``tf.cond``, whose flag nothing invalidates while the cache is
        bypassed. So a graph runs only under the setting it was traced for (keyed by the bypassed
        caches among those it reads, the setting recorded when each trace ended); the graphs of
        the other settings are kept (``_PARKED_SETTINGS`` of them), so that fits that toggle
        ``floating`` back and forth trace and compile each setting once.
        """
        self._bypass_seen = GRAPH.bypass_version
        setting = self._setting_now()
        if setting == self._setting:
            return
        if self._setting is not None and self._tf_functions:
            self._parked.pop(self._setting, None)
            self._parked[self._setting] = {name: getattr(self, name) for name in _GRAPH_STATE}
            while len(self._parked) > _PARKED_SETTINGS:
                del self._parked[next(iter(self._parked))]
        kept = self._parked.pop(setting, None)
        if kept is None:
            self._new_graphs()
        else:
            for name, value in kept.items():
                setattr(self, name, value)
        self._setting = setting

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<zcache.function {self.__qualname__} wraps={self.wraps!r} traces={self.trace_count}>"

    @property
    def jit_fallback(self) -> str | None:
        """Why this function runs uncompiled although the jit mode compiles it.

        A check in a nested graph, or an error of XLA; None while it compiles. Cleared by
        :meth:`reset`.
        """
        return self._jit.fallback

    @property
    def traced(self) -> bool:
        """Whether a call from eager code is traced under the current policy."""
        return traces(self.wraps)

    def _forward_mode(self) -> bool:
        """Whether a ``tf.autodiff.ForwardAccumulator`` watches an input this function's traces read.

        TensorFlow would build the JVP of a traced call from its graph, where a cache hit has a
        backward gradient only (and fails inside the cache's tf.cond; TensorFlow's forward-mode
        function machinery also fails on zcache's Data reads); run eagerly, every cache read that an
        accumulator watches is computed directly and carries TensorFlow's own JVP. Before the first
        trace the reads are unknown, so every live input is asked.
        """
        if not tape_may_record():
            return False
        if not self._reads:  # never traced: every input may be read (asked once, at the first call)
            return forward_mode_watches(o.node_id for o in GRAPH.inputs())
        uids: set[int] = set()
        for uid in self._reads:
            uids.update(GRAPH.ancestor_inputs(uid))
            if isinstance(GRAPH.obj(uid), (Parameter, Data)):
                uids.add(uid)
        return forward_mode_watches(uids)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tf.inside_function():  # inlined: the trace around it handles its writes
            return self.python_function(*args, **kwargs)
        if not traces(self.wraps) or CONTEXT.eager or self._forward_mode():
            return call_eagerly(self.python_function, *args, **kwargs)
        self._calls += 1
        if self._calls <= self.eager_calls and auto_decides(self.wraps) and not compiles(self.wraps):
            return call_eagerly(self.python_function, *args, **kwargs)
        out = self._call_graph(args, kwargs)
        if self._live_traces > self.max_traces:
            warn_at_user_code(
                f"{self!r} has traced {self._live_traces} graphs (bound {self.max_traces}); they "
                "were dropped. Retracing usually means Python numbers or new objects are passed "
                "as arguments: pass tensors, or keep changing values in zcache.Parameter/Data.",
                RetracingWarning,
            )
            self.reset()
        return out

    # -- the traced call -----------------------------------------------------------------
    def _call_graph(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the graph under the engine lock; finish its writes, or undo them if it fails.

        The lock makes eager writes, eager cache reads and other traced calls wait, so no
        graph can store a value computed from an input another thread changed meanwhile
        (TensorFlow still runs the graph's ops in parallel). Whether an attempt compiles with
        XLA, and what follows a failed one, is the jit policy's (:mod:`zcache._engine.jit_policy`).
        """
        # A user's own tape around a compiled call builds its backward outside zcache_graphs(), with
        # TensorFlow's gradients, which XLA computes wrong for a complex sqrt or 1/z (tf_internals item 18).
        may_compile = compiles(self.wraps) and not users_tape_may_record()
        with ENGINE_LOCK, calling_jit(may_compile), without_grappler():
            if self._bypass_seen != GRAPH.bypass_version:
                self._follow_bypass()
            data_before = self._data_before()
            # Filled by every trace made during this call (the trace for XLA included): the data
            # it writes as they were before the call, which every failed attempt puts back.
            self._traced_now = {}
            call = self._jit.call(may_compile, self._reads, functools.partial(self._trace_for_jit, args, kwargs))
            for jit in call:
                try:
                    out, trace_id, finals = self._run_checked(args, kwargs, jit)
                    break
                except JitRefused as err:  # while tracing: nothing ran
                    call.refused(err)
                except BaseException as err:
                    self._undo_writes({**self._traced_now, **data_before})
                    retry = call.after_error(err)
                    if retry is Retry.EAGERLY:
                        with run_eagerly():
                            return call_eagerly(self.python_function, *args, **kwargs)
                    if retry is None:
                        if isinstance(err, tf.errors.InvalidArgumentError):
                            raise error_from(err) from None
                        raise
            call.succeeded()
            if trace_id is not None:
                self._after_writes(self._traces[int(trace_id)], finals)
        if BUDGET.limit is not None:  # between calls, never while a graph runs
            with ENGINE_LOCK:
                self._budget.after_call(self._reads)
        return out

    def _run_checked(self, args: tuple[Any, ...], kwargs: dict[str, Any], jit: bool) -> tuple[Any, Any, Any]:
        """Run the graph: ``(output, trace id, final parameter values)``; a failed check of a compiled graph raises."""
        out, trace_id, finals, checks = self._run(args, kwargs, jit)
        if checks is not None:  # compiled: its checks are outputs
            failed = failed_check(checks[1], self._checks[int(checks[0])])
            if failed is not None:
                raise failed
        return out, trace_id, finals

    def _trace_for_jit(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Trace (not run) the graph for XLA, so that its reads are known (may raise ``JitRefused``)."""
        with collector_out_of_traces():
            self._tf_function(get_autograd_mode(), True).get_concrete_function(*args, **kwargs)

    def _tf_function(self, autograd: bool, jit: bool) -> Any:
        tf_function = self._tf_functions.get((autograd, jit))
        if tf_function is None:
            tf_function = self._tf_functions[(autograd, jit)] = tf.function(
                self._traced_body(jit), autograph=False, jit_compile=jit)
        return tf_function

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any], jit: bool) -> tuple[Any, Any, Any, Any]:
        autograd = get_autograd_mode()
        tf_function = self._tf_function(autograd, jit)
        if kwargs or not all(type(a) is EAGER_TENSOR for a in args):
            if tf.inside_function():  # built into the caller's graph: compiled (if at all) when that runs
                return tf_function(*args, **kwargs)
            # The first run of a graph compiles its XLA programs (this one's, or a fused one's
            # inside): the compile cache checks its folder before and records new entries after.
            key = call_key(args, kwargs)
            with first_call(self._compiled_calls, None if key is None else (autograd, jit, key)), \
                    collector_out_of_traces():  # this call may trace
                return tf_function(*args, **kwargs)
        # A minimizer's hot path: call the concrete graph for these dtypes and shapes
        # directly, skipping tf.function's argument binding and trace lookup.
        key = (autograd, jit, tuple((a.dtype, tuple(a.shape)) for a in args))
        concrete = self._concrete.get(key)
        if concrete is None:
            with collector_out_of_traces():
                concrete = self._concrete[key] = tf_function.get_concrete_function(*args)
            with compiling():
                return concrete(*args)
        return concrete(*args)

    def _traced_body(self, jit: bool) -> Callable[..., Any]:
        # A fresh wrapper per function, `__wrapped__` pointing at the user's function: TF keys
        # its signature and its "frequent retracing" statistics by the wrapped function. It holds
        # this function weakly: this function holds the tf.function that holds the wrapper, and a
        # strong reference would make the three a cycle, which kept a dropped zcache.function, its
        # graphs and everything its closure reads (models, caches, data) until a full collection.
        owner = weakref.ref(self)

        def body(*args: Any, **kwargs: Any) -> Any:
            return owner()._trace_body(jit, *args, **kwargs)

        return functools.update_wrapper(body, self.python_function)

    def _trace_body(self, jit: bool, *args: Any, **kwargs: Any) -> tuple[Any, Any, Any, Any]:
        """The traced graph: ``(output, trace id, final parameter values, checks)``.

        No writes: trace id and final values are None. ``checks``: ``(checks id, bool vector)``
        for a graph compiled with XLA that has checks, else None.
        """
        if not tf.inside_function():  # tf.config.run_functions_eagerly(True): writes are eager
            return call_eagerly(self.python_function, *args, **kwargs), None, None, None
        self.trace_count += 1
        self._live_traces += 1
        # A traced graph is reused by any later gradient request: all parameters count.
        with contextlib.ExitStack() as scopes:
            scopes.enter_context(zcache_graphs())  # zcache's gradients in the gradients this body builds
            collected = scopes.enter_context(collecting()) if jit else []
            with tracing(TraceRecord()) as record, differentiating(None), recording() as reads:
                out = self.python_function(*args, **kwargs)
        if jit:
            asserts = assertion_ops(tf.compat.v1.get_default_graph())
            if asserts:
                self._live_traces -= 1
                raise JitRefused(f"a check in a nested graph ({asserts[0]}) would be dropped by XLA")
            # Where TensorFlow's internals moved and the fix of XLA's complex gradients is off,
            # a graph holding one of those gradients would compile to a wrong number.
            wrong = [] if complex_gradients_fixed() else wrong_xla_gradient_ops(tf.compat.v1.get_default_graph())
            if wrong:
                self._live_traces -= 1
                raise JitRefused(f"XLA computes the complex gradient {wrong[0]} without its conjugate")
        checks = None
        if collected:
            check_id = next(_CHECK_IDS)
            self._checks[check_id] = [(error, message) for _, error, message in collected]
            checks = (tf.constant(check_id, tf.int64), tf.stack([ok for ok, _, _ in collected]))
        # What the graph reads (with the graph's ancestors: what it depends on) decides
        # whether a precompute change must drop it; outer recordings see the reads too.
        self._reads.update(obj.node_id for obj in reads)
        for obj in reads:
            record_read(obj)
        # No bypass changes during a call (refused in a trace): the setting this graph embeds.
        self._setting = self._setting_now()
        if not record.mutations:
            return out, None, None, checks
        self._traces[record.id] = record
        new_data = [uid for uid in record.written("data") if uid not in self._data_writes]
        with tf.init_scope():  # traced within this call: the data as they are before it runs
            self._traced_now.update({o.node_id: (o, data_snapshot(o)) for o in GRAPH.objects(new_data)})
        self._data_writes.update(new_data)
        # The parameters' final values, read after every write of the graph (automatic
        # control dependencies keep program order per Variable): their Python mirrors.
        params = GRAPH.objects(record.written("parameter"))
        record.param_ids = tuple(p.node_id for p in params)
        self._param_writes.update(record.param_ids)
        finals = tf.stack([backing_variable(p).read_value() for p in params]) if params else None
        return out, tf.constant(record.id, tf.int64), finals, checks

    # -- after the call --------------------------------------------------------------------
    def _after_writes(self, record: TraceRecord, finals: Any) -> None:
        """After a call whose graph wrote inputs: mirrors, caches the trace did not know, gradients."""
        GRAPH.input_changes += 1  # a tape that spans this call must not see the new values
        untraced = record.untraced_dependents()
        values = finals.numpy().tolist() if finals is not None else []
        written = [(GRAPH.obj(uid), v) for uid, v in zip(record.param_ids, values, strict=True)]
        written = [(p, v) for p, v in written if p is not None]  # collected since the trace: skipped
        changed = refresh_mirrors([p for p, _ in written], [v for _, v in written])
        if untraced:
            # A parameter set to the value it had invalidates nothing (data always invalidates).
            nodes = GRAPH.nx.nodes
            stale = [c for uid, caches in untraced.items()
                     if uid in changed or (uid in nodes and nodes[uid]["kind"] != "parameter") for c in caches]
            if stale:
                invalidate_eagerly(set(GRAPH.objects(stale)))

    def _data_before(self) -> dict[int, Any]:
        """The current values of the Data some trace of this function writes (to undo a failed call)."""
        if not self._data_writes:
            return {}
        return {o.node_id: (o, data_snapshot(o)) for o in GRAPH.objects(list(self._data_writes))}

    def _undo_writes(self, data_before: dict[int, Any]) -> None:
        """A call failed: put back every input its graph may have written, invalidating dependents."""
        if not self._param_writes and not self._data_writes:
            return
        dirty = undo_parameter_writes(GRAPH.objects(list(self._param_writes))) | undo_data_writes(data_before)
        GRAPH.input_changes += 1
        if dirty:
            invalidate_eagerly(set(GRAPH.objects(dirty)))

    def depends_on(self, uids: set[int]) -> bool:
        """Whether a traced graph of this function read (through caches) any of ``uids``.

        Parameters
        ----------
        uids : set of int
            Node ids of caches (or inputs).

        Returns
        -------
        bool
            True if some live graph of this function depends on one of them.
        """
        g = GRAPH.nx
        return any(uid in uids or (uid in g and not uids.isdisjoint(nx.ancestors(g, uid))) for uid in self._reads)


def function(func: F | None = None, *, wraps: str = "tensor", max_traces: int = _MAX_TRACES_DEFAULT) -> Any:
    """Decorate a function so that the mode policy decides whether it is traced.

    Parameters
    ----------
    func : callable, optional
        The function (when used as ``@zcache.function`` without arguments).
    wraps : str
        Identifier for the policy: 'tensor', 'loss', 'sample', 'gradient' or 'model'.
    max_traces : int
        Bound on the graphs kept; past it they are dropped with a
        :class:`~zcache.exceptions.RetracingWarning`.

    Returns
    -------
    Function
        The decorated function (or a decorator, without ``func``).

    Examples
    --------
    >>> import zcache, tensorflow as tf
    >>> mu = zcache.Parameter("mu_f", 1.0)
    >>> @zcache.function(wraps="loss")
    ... def loss():
    ...     return (mu.value() - 3.0) ** 2
    >>> float(loss()), float(loss())
    (4.0, 4.0)
    >>> _ = mu.set_value(2.0)
    >>> float(loss()), loss.trace_count   # new value, same graph
    (1.0, 1)
    """
    if func is None:
        return lambda f: Function(f, wraps=wraps, max_traces=max_traces)
    return Function(func, wraps=wraps, max_traces=max_traces)


def drop_traces(caches: Any = None) -> None:
    """Drop traced graphs (caches keep their values); the next calls trace anew.

    Parameters
    ----------
    caches : iterable of CachedTensor, optional
        Drop only the graphs that read one of these (directly or through other caches);
        ``None`` drops every graph.
    """
    forbid_in_trace("drop_traces")
    uids = None if caches is None else {c.node_id for c in caches}
    for func in list(_FUNCTIONS):
        if uids is None or func.depends_on(uids):
            func.reset()
    g = GRAPH.nx
    # a cache's own traced miss branch embeds the caches below it
    drop_compiled(cache for cache in GRAPH.caches()
                  if uids is None or cache.node_id in uids or not uids.isdisjoint(nx.ancestors(g, cache.node_id)))


def clear_graph_cache(depending_on: Any = None) -> None:
    """Drop the graphs traced by :func:`zcache.function` and invalidate the caches.

    Without arguments every graph of the process is dropped and every cache invalidated. With
    ``depending_on``, only what depends on those objects: a session (or a test) that holds
    several models can refresh one of them (after a change of Python state that its compiled
    graphs froze) without retracing and recompiling the others.

    Parameters
    ----------
    depending_on : iterable of Parameter, Data or CachedTensor, optional
        Drop only the graphs that read one of these (directly or through caches), and the
        traced miss branches of the caches that depend on one of them, and invalidate those
        caches (a Data's weights count as the Data). Graphs whose reads are not known (never
        traced to the end) are dropped too. ``None`` (default): everything.

    Raises
    ------
    IllegalInGraphModeError
        When called inside a trace.
    TypeError
        ``depending_on`` holds something that is not a zcache Parameter, Data or CachedTensor.

    Examples
    --------
    >>> import zcache
    >>> a, b = zcache.Parameter("a_clear", 2.0), zcache.Parameter("b_clear", 3.0)
    >>> fa = zcache.function(lambda: a.value() ** 2)
    >>> fb = zcache.function(lambda: b.value() ** 2)
    >>> float(fa()), float(fb())
    (4.0, 9.0)
    >>> zcache.clear_graph_cache(depending_on=[a])   # fb keeps its graph
    >>> float(fa()), float(fb()), fa.trace_count, fb.trace_count
    (4.0, 9.0, 2, 1)
    >>> zcache.clear_graph_cache()                   # every graph
    """
    forbid_in_trace("clear_graph_cache")
    if depending_on is None:
        for func in list(_FUNCTIONS):
            func.reset()
        drop_compiled(GRAPH.caches())
        invalidate_eagerly(GRAPH.caches())
        return
    uids = _node_ids(depending_on)
    for func in list(_FUNCTIONS):
        if not func._reads or func.depends_on(uids):
            func.reset()
    g = GRAPH.nx
    below = set(uids)
    for uid in uids:
        if uid in g:
            below |= nx.descendants(g, uid)
    caches = [c for c in GRAPH.objects(sorted(below)) if g.nodes[c.node_id]["kind"] == CACHE]
    drop_compiled(caches)
    invalidate_eagerly(caches)


def _node_ids(objects: Any) -> set[int]:
    """Node ids of zcache inputs and caches (a Data's weights included), refusing anything else."""
    if isinstance(objects, (Parameter, Data, CachedTensor)):
        objects = [objects]
    uids: set[int] = set()
    for obj in objects:
        if not isinstance(obj, (Parameter, Data, CachedTensor)):
            raise TypeError(
                f"clear_graph_cache(depending_on=...) takes zcache Parameters, Data and CachedTensors, got "
                f"{obj!r}; pass the model's parameters and datasets (or nothing, to clear everything)."
            )
        uids.add(obj.node_id)
        weights = obj.weights_data if isinstance(obj, Data) else None
        if weights is not None:
            uids.add(weights.node_id)
    return uids
