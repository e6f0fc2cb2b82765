"""The mode policy: what is traced into a graph, what runs eagerly, which gradients.

Every function decorated with :func:`function` carries an *identifier*
(``wraps=``). The graph policy maps identifiers to "trace" or "run eagerly":

=========  ======  =======  ======  ===========
wraps      True    False    'auto'  dict
=========  ======  =======  ======  ===========
tensor     trace   eager    trace   as given, else 'auto'
loss       trace   eager    trace   as given, else 'auto'
sample     trace   eager    trace   as given, else 'auto'
gradient   trace   eager    trace   as given, else 'auto'
model      trace   eager    eager   as given, else 'auto'
=========  ======  =======  ======  ===========

A decorated function called while another function is being traced is inlined
into that trace: there are never nested ``tf.function`` objects.

The setters double as context managers, restoring the previous setting on exit::

    with zcache.set_graph_mode(False):
        ...  # everything eager, handy for debugging

Changing the policy inside a trace raises :class:`IllegalInGraphModeError`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import networkx as nx
import tensorflow as tf

from . import exceptions
from ._cached_tensor import INPUT_WRITES, differentiating, invalidate_eagerly
from ._depgraph import GRAPH, record_read, recording
from .exceptions import (
    GraphModeError,
    IllegalInGraphModeError,
    RetracingWarning,
    UnknownIdentifierError,
)

__all__ = [
    "IDENTIFIERS",
    "set_graph_mode",
    "get_graph_mode",
    "set_autograd_mode",
    "get_autograd_mode",
    "function",
    "Function",
    "clear_graph_cache",
    "executing_eagerly",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Identifiers a :func:`function` may carry, with whether ``'auto'`` traces them.
IDENTIFIERS: dict[str, bool] = {
    "tensor": True,
    "loss": True,
    "sample": True,
    "gradient": True,
    "model": False,
}

_MAX_TRACES_DEFAULT = 40


class _State:
    graph_setting: bool | str | dict[str, bool] = "auto"
    policy: dict[str, bool] = dict(IDENTIFIERS)
    autograd: bool = True


_state = _State()


def executing_eagerly() -> bool:
    """True if code runs eagerly right now (not inside any ``tf.function`` trace)."""
    return not tf.inside_function()


def _forbid_in_trace(what: str) -> None:
    if tf.inside_function():
        raise IllegalInGraphModeError(
            f"{what} cannot be called while a TensorFlow graph is being traced (inside a "
            "zcache.function or tf.function): it changes Python-side state that the trace "
            "would bake in. Call it from eager code, outside the decorated function."
        )


class ModeSetter:
    """Returned by the mode setters: the new mode is already active.

    Use it as a context manager to restore the previous mode on exit, or call
    :meth:`restore`.
    """

    def __init__(self, restore: Callable[[], None]) -> None:
        self._restore = restore
        self._restored = False

    def restore(self) -> None:
        """Restore the mode that was active before the setter was called (once)."""
        if not self._restored:
            self._restored = True
            self._restore()

    def __enter__(self) -> ModeSetter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def _policy_for(graph: object) -> dict[str, bool]:
    if graph is True or graph is False:
        return {key: bool(graph) for key in IDENTIFIERS}
    if isinstance(graph, str):
        if graph == "auto":
            return dict(IDENTIFIERS)
        raise GraphModeError(
            f"Unknown graph mode {graph!r}. Use True (trace every zcache.function), False "
            "(everything eager), 'auto' (trace all but 'model'), or a dict such as "
            "{'loss': True, 'model': False}."
        )
    if isinstance(graph, Mapping):
        policy = dict(IDENTIFIERS)
        for key, value in graph.items():
            if key not in IDENTIFIERS:
                raise UnknownIdentifierError(
                    f"Unknown identifier {key!r} in the graph-mode dict; known identifiers "
                    f"are {sorted(IDENTIFIERS)}."
                )
            if not isinstance(value, bool):
                raise GraphModeError(
                    f"The graph-mode dict maps identifiers to True/False, got {key!r}: {value!r}."
                )
            policy[key] = value
        return policy
    raise GraphModeError(
        f"Graph mode must be True, False, 'auto' or a dict, got {graph!r} "
        f"({type(graph).__name__})."
    )


def set_graph_mode(graph: bool | str | Mapping[str, bool], set_backend: bool | None = None) -> ModeSetter:
    """Set which :func:`function`-decorated functions are traced.

    Args:
        graph: ``True`` traces every identifier, ``False`` runs everything eagerly,
            ``'auto'`` traces all identifiers but ``'model'``, and a dict such as
            ``{'model': True}`` overrides single identifiers of ``'auto'``.
        set_backend: with ``graph=False``, also call
            ``tf.config.run_functions_eagerly(True)`` so that plain ``tf.function`` code
            runs eagerly too (default). Pass ``False`` to leave TensorFlow alone.

    Returns
    -------
        A :class:`ModeSetter`; as a context manager it restores the previous mode.

    Raises
    ------
        GraphModeError: for an unknown setting (state unchanged).
        IllegalInGraphModeError: when called inside a trace.

    Example:
        >>> import zcache
        >>> with zcache.set_graph_mode(False):
        ...     zcache.get_graph_mode()
        False
        >>> zcache.get_graph_mode()
        'auto'
    """
    _forbid_in_trace("set_graph_mode")
    policy = _policy_for(graph)
    if set_backend is not None and not isinstance(set_backend, bool):
        raise GraphModeError(f"set_backend must be True, False or None, got {set_backend!r}.")
    old_setting, old_policy = _state.graph_setting, _state.policy
    old_backend = tf.config.functions_run_eagerly()
    _state.graph_setting = dict(graph) if isinstance(graph, Mapping) else graph
    _state.policy = policy
    if set_backend is not False:
        tf.config.run_functions_eagerly(graph is False)

    def restore() -> None:
        _state.graph_setting, _state.policy = old_setting, old_policy
        if set_backend is not False:
            tf.config.run_functions_eagerly(old_backend)

    return ModeSetter(restore)


def get_graph_mode() -> bool | str | dict[str, bool]:
    """The current graph-mode setting, as it was given to :func:`set_graph_mode`."""
    setting = _state.graph_setting
    return dict(setting) if isinstance(setting, dict) else setting


def set_autograd_mode(autograd: bool) -> ModeSetter:
    """Choose automatic (``True``) or numerical (``False``) gradients in :func:`zcache.gradient`.

    Returns
    -------
        A :class:`ModeSetter`; as a context manager it restores the previous mode.

    Example:
        >>> import zcache
        >>> with zcache.set_autograd_mode(False):
        ...     zcache.get_autograd_mode()
        False
    """
    _forbid_in_trace("set_autograd_mode")
    if not isinstance(autograd, bool):
        raise GraphModeError(
            f"Autograd mode must be True (automatic) or False (numerical), got {autograd!r}."
        )
    old = _state.autograd
    _state.autograd = autograd

    def restore() -> None:
        _state.autograd = old

    return ModeSetter(restore)


def get_autograd_mode() -> bool:
    """True if :func:`zcache.gradient` uses automatic differentiation."""
    return _state.autograd


# -- traced functions ---------------------------------------------------------------------
_FUNCTIONS: weakref.WeakSet[Function] = weakref.WeakSet()
_EAGER_TENSOR = type(tf.constant(0.0))
_local = threading.local()


class _TraceRecord:
    """What one trace of a :class:`Function` did that Python must finish after each call."""

    _ids = itertools.count(1)

    def __init__(self, isolated: bool = False) -> None:
        self.id = next(self._ids)
        # A cache's miss branch (shared by all graphs): no input may be written there.
        self.isolated = isolated
        # input node id -> ids of the caches the trace already invalidates in-graph
        self.mutations: dict[int, set[int]] = {}
        # input node id -> per mutation in the trace being built, "value unchanged" (None: changed)
        self.unchanged: dict[int, list[Any]] = {}
        # (graph version, input node id -> dependent caches this trace does not invalidate)
        self.extra: tuple[int, dict[int, tuple[int, ...]]] = (-1, {})
        # Fixed when the trace ends: the parameters whose final values the graph returns, in
        # that order (a parameter collected later must not shift the others).
        self.param_ids: tuple[int, ...] = ()

    def written(self, kind: str) -> list[int]:
        """Node ids of the inputs of ``kind`` ('parameter' or 'data') this trace writes."""
        nodes = GRAPH.nx.nodes
        return [uid for uid in self.mutations if uid in nodes and nodes[uid]["kind"] == kind]

    def untraced_dependents(self) -> dict[int, tuple[int, ...]]:
        """Mutated input -> node ids of its dependent caches that this trace does not know of."""
        # A trace invalidates in-graph the caches that existed when it was traced; caches
        # created later that depend on what it mutates are invalidated after each call.
        # Ids, not objects: this memo must not keep caches the user dropped alive.
        version, extra = self.extra
        if version != GRAPH.version:
            extra = {}
            for uid, handled in self.mutations.items():
                caches = tuple(sorted(set(GRAPH.dependent_caches(uid)) - handled))
                if caches:
                    extra[uid] = caches
            self.extra = (GRAPH.version, extra)
        return extra


def require_managed_trace(what: str) -> None:
    """Refuse an input write inside a trace that no :class:`Function` manages.

    After each call a ``zcache.function`` invalidates the caches its graph could not know
    of (created after the trace), keeps the parameters' Python mirrors, and puts inputs
    back when the call fails. A plain ``tf.function`` cannot: its caches would go stale.
    """
    stack = getattr(_local, "traces", None)
    if not stack or stack[-1].isolated:
        inside_cache = bool(stack) and stack[-1].isolated
        raise exceptions.UnmanagedTraceError(
            f"{what} was called inside "
            + ("the function of a CachedTensor, which must not change its inputs. Set values "
               "outside the cached function." if inside_cache else
               "a trace that zcache does not manage (a plain tf.function): caches created after "
               "the trace would not be invalidated when it runs, and would serve stale values. "
               "Decorate the function with @zcache.function(wraps='loss') instead of "
               "@tf.function, or call set_value/set_data eagerly.")
        )


def note_mutation(uid: int, handled: tuple[int, ...], unchanged: Any = None) -> None:
    """Called by ``set_value``/``set_data`` inside a trace (see :class:`Function`)."""
    stack = getattr(_local, "traces", None)
    if stack:
        stack[-1].mutations.setdefault(uid, set()).update(handled)
        stack[-1].unchanged.setdefault(uid, []).append(unchanged)


def journal(obj: Any, old: Any) -> None:
    """An eager write of ``obj`` (its value before: ``old``), inside an eagerly run :class:`Function`.

    The call's journal keeps the first old value of each input, so that a call that fails can
    put every input back, as a traced call does.
    """
    stack = getattr(_local, "journals", None)
    if stack:
        stack[-1].setdefault(obj.node_id, (obj, old))


def _call_eagerly(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``func`` eagerly; if it raises, put back every input it wrote (first old values)."""
    stack = getattr(_local, "journals", None)
    if stack is None:
        stack = _local.journals = []
    written: dict[int, tuple[Any, Any]] = {}
    stack.append(written)
    try:
        out = func(*args, **kwargs)
    except BaseException:
        stack.pop()
        for obj, old in reversed(list(written.values())):
            if hasattr(obj, "set_data"):
                obj.set_data(old)
            else:
                obj.set_value(old)
        raise
    stack.pop()
    if stack:  # an outer eager call may fail later: it must undo these writes as well
        for uid, entry in written.items():
            stack[-1].setdefault(uid, entry)
    return out


@contextlib.contextmanager
def run_eagerly() -> Any:
    """On this thread only, run every :class:`Function` eagerly (process-wide modes untouched).

    What :func:`zcache.precompute` needs to record a loss's reads: flipping the
    process-wide graph mode instead would race with fits in other threads.
    """
    old = getattr(_local, "eager", False)
    _local.eager = True
    try:
        yield
    finally:
        _local.eager = old


def invalidate_if_mutated_in_trace(cache: Any) -> None:
    """Before a traced read of ``cache``: clear its flag for inputs this trace already changed.

    ``set_value`` inside a trace invalidates the dependents it knows of; a cache created
    later in the same trace, or whose dependencies are not yet discovered, would otherwise
    serve a value computed from the old input. Unknown dependencies count as affected.
    """
    stack = getattr(_local, "traces", None)
    record = stack[-1] if stack else None
    if record is None or not record.mutations:
        return
    # The caches below this one are read inside its traced miss branch, a function traced
    # once and shared by every graph (no trace's mutations may enter it): handle them here.
    below = [] if cache.node_id not in GRAPH.nx else [
        c for c in GRAPH.objects(sorted(nx.ancestors(GRAPH.nx, cache.node_id)))
        if c is not None and GRAPH.nx.nodes[c.node_id]["kind"] == "cache" and not c.always_dirty
    ]
    for c in [*below, cache]:
        _invalidate_if_mutated(record, c)


@contextlib.contextmanager
def isolated_trace() -> Any:
    """While tracing a cache's miss branch (shared by all graphs): no outer trace's mutations."""
    stack = getattr(_local, "traces", None)
    if stack is None:
        yield
        return
    stack.append(_TraceRecord(isolated=True))
    try:
        yield
    finally:
        stack.pop()


def _invalidate_if_mutated(record: _TraceRecord, cache: Any) -> None:
    known = cache._dtype is not None  # computed before: its dependencies are in the graph
    ancestors = nx.ancestors(GRAPH.nx, cache.node_id) if known and cache.node_id in GRAPH.nx else set()
    conditions: list[Any] = []
    for uid, handled in record.mutations.items():
        if cache.node_id in handled or (known and uid not in ancestors):
            continue
        conditions.extend(record.unchanged.get(uid, [None]))
        handled.add(cache.node_id)
    if not conditions:
        return
    if any(c is None for c in conditions):
        cache._invalidate_in_graph(None)
    else:
        cache._invalidate_in_graph(tf.reduce_all(tf.stack(conditions)))


class Function:
    """A Python function that the graph policy traces or runs eagerly.

    Attributes
    ----------
        wraps: the identifier that selects the policy.
        trace_count: how many times the Python body has been traced into a graph,
            over the whole life of the function (a retrace shows up as an increase).
    """

    def __init__(self, func: Callable[..., Any], wraps: str = "tensor", max_traces: int = _MAX_TRACES_DEFAULT):
        if not isinstance(wraps, str) or wraps not in IDENTIFIERS:
            raise UnknownIdentifierError(
                f"Unknown identifier wraps={wraps!r}; use one of {sorted(IDENTIFIERS)}."
            )
        if not callable(func):
            raise TypeError(f"zcache.function needs a callable, got {func!r}.")
        if not isinstance(max_traces, int) or max_traces < 1:
            raise ValueError(f"max_traces must be a positive int, got {max_traces!r}.")
        functools.update_wrapper(self, func)
        self.python_function = func
        self.wraps = wraps
        self.max_traces = max_traces
        self.trace_count = 0
        # One tf.function per autograd mode: the mode is read while tracing (zcache.gradient),
        # so a graph traced under one mode must not serve the other.
        self._tf_functions: dict[bool, Any] = {}
        self._live_traces = 0
        # trace id -> what that trace writes (only traces that write inputs are kept)
        self._traces: dict[int, _TraceRecord] = {}
        self._traced_now: dict[int, Any] = {}
        # node ids of every parameter / dataset some live trace writes
        self._param_writes: set[int] = set()
        self._data_writes: set[int] = set()
        self._reads: set[int] = set()  # node ids read at the top level of its traces
        self._concrete: dict[Any, Any] = {}
        _FUNCTIONS.add(self)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<zcache.function {self.__qualname__} wraps={self.wraps!r} traces={self.trace_count}>"

    @property
    def traced(self) -> bool:
        """Whether a call from eager code is traced under the current policy."""
        return _state.policy[self.wraps]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tf.inside_function():  # inlined: the trace around it handles its writes
            return self.python_function(*args, **kwargs)
        if not _state.policy[self.wraps] or getattr(_local, "eager", False):
            return _call_eagerly(self.python_function, *args, **kwargs)
        tf_function = self._tf_functions.get(_state.autograd)
        if tf_function is None:
            tf_function = self._tf_functions[_state.autograd] = tf.function(self._traced_body(), autograph=False)
        # One engine lock around the call: eager writes, eager cache reads and other traced
        # calls wait, so no graph can store a value computed from an input another thread
        # changed meanwhile (TensorFlow still runs the graph's ops in parallel).
        with INPUT_WRITES:
            data_before = self._data_before()
            self._traced_now = {}  # data a trace made during this call writes (filled by the trace)
            try:
                if not kwargs and all(type(a) is _EAGER_TENSOR for a in args):
                    # A minimizer's hot path: call the concrete graph for these dtypes and shapes
                    # directly, skipping tf.function's argument binding and trace lookup (~0.1 ms).
                    key = (_state.autograd, tuple((a.dtype, tuple(a.shape)) for a in args))
                    concrete = self._concrete.get(key)
                    if concrete is None:
                        concrete = self._concrete[key] = tf_function.get_concrete_function(*args)
                    out, trace_id, finals = concrete(*args)
                else:
                    out, trace_id, finals = tf_function(*args, **kwargs)
            except BaseException as err:
                self._undo_writes({**self._traced_now, **(data_before or {})})
                if isinstance(err, tf.errors.InvalidArgumentError):
                    raise _zcache_error_from(err) from None
                raise
            if trace_id is not None:
                self._after_writes(self._traces[int(trace_id)], finals)
        if self._live_traces > self.max_traces:
            warnings.warn(
                f"{self!r} has traced {self._live_traces} graphs (bound {self.max_traces}); they "
                "were dropped. Retracing usually means Python numbers or new objects are passed "
                "as arguments: pass tensors, or keep changing values in zcache.Parameter/Data.",
                RetracingWarning,
                stacklevel=2,
            )
            self.reset()
        return out

    def _traced_body(self) -> Callable[..., Any]:
        # A fresh wrapper per function, `__wrapped__` pointing at the user's function: TF keys
        # its signature and its "frequent retracing" statistics by the wrapped function.
        def body(*args: Any, **kwargs: Any) -> Any:
            return self._trace_body(*args, **kwargs)

        return functools.update_wrapper(body, self.python_function)

    def _trace_body(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, Any]:
        """The traced graph: ``(output, trace id, final parameter values)``; no writes: ``(output, None, None)``."""
        if not tf.inside_function():  # tf.config.run_functions_eagerly(True): writes are eager
            return _call_eagerly(self.python_function, *args, **kwargs), None, None
        self.trace_count += 1
        self._live_traces += 1
        stack = getattr(_local, "traces", None)
        if stack is None:
            stack = _local.traces = []
        record = _TraceRecord()
        stack.append(record)
        try:
            # A traced graph is reused by any later gradient request: all parameters count.
            with differentiating(None), recording() as reads:
                out = self.python_function(*args, **kwargs)
        finally:
            stack.pop()
        # What the graph reads (with the graph's ancestors: what it depends on) decides
        # whether a precompute change must drop it; outer recordings see the reads too.
        self._reads.update(obj.node_id for obj in reads)
        for obj in reads:
            record_read(obj)
        if not record.mutations:
            return out, None, None
        self._traces[record.id] = record
        new_data = [uid for uid in record.written("data") if uid not in self._data_writes]
        with tf.init_scope():  # traced within this call: the data as they are before it runs
            self._traced_now.update({o.node_id: o._var.read_value() for o in GRAPH.objects(new_data)})
        self._data_writes.update(new_data)
        # The parameters' final values, read after every write of the graph (automatic
        # control dependencies keep program order per Variable): their Python mirrors.
        params = GRAPH.objects(record.written("parameter"))
        record.param_ids = tuple(p.node_id for p in params)
        self._param_writes.update(record.param_ids)
        finals = tf.stack([p._var.read_value() for p in params]) if params else None
        return out, tf.constant(record.id, tf.int64), finals

    def _after_writes(self, record: _TraceRecord, finals: Any) -> None:
        """After a call whose graph wrote inputs: mirrors, caches the trace did not know, gradients."""
        GRAPH.input_changes += 1  # a tape that spans this call must not see the new values
        untraced = record.untraced_dependents()
        values = finals.numpy().tolist() if finals is not None else []
        changed: set[int] = set()
        for uid, v in zip(record.param_ids, values, strict=True):
            p = GRAPH.obj(uid)
            if p is None:  # collected since the trace
                continue
            if v != p._current():
                changed.add(uid)
            p._written_by_graph(v)
        if untraced:
            # A parameter set to the value it had invalidates nothing (data always invalidates).
            nodes = GRAPH.nx.nodes
            stale = [c for uid, caches in untraced.items()
                     if uid in changed or (uid in nodes and nodes[uid]["kind"] != "parameter") for c in caches]
            if stale:
                invalidate_eagerly(set(GRAPH.objects(stale)))

    def _data_before(self) -> dict[int, Any] | None:
        """The current values of the Data some trace of this function writes (to undo a failed call)."""
        if not self._data_writes:
            return None
        return {obj.node_id: obj._var.read_value() for obj in GRAPH.objects(list(self._data_writes))}

    def _undo_writes(self, data_before: dict[int, Any] | None) -> None:
        """A call failed: put back every input its graph may have written, invalidating dependents."""
        if not self._param_writes and not self._data_writes:
            return
        dirty: set[int] = set()
        for obj in GRAPH.objects(list(self._param_writes)):
            if obj._undo_graph_write():
                dirty.update(GRAPH.dependent_caches(obj.node_id))
        for obj in GRAPH.objects(list(data_before or ())):
            if obj._undo_graph_write(data_before[obj.node_id]):
                dirty.update(GRAPH.dependent_caches(obj.node_id))
        GRAPH.input_changes += 1
        if dirty:
            invalidate_eagerly(set(GRAPH.objects(dirty)))

    def reset(self) -> None:
        """Drop every traced graph of this function (the next call traces anew)."""
        self._tf_functions = {}
        self._concrete = {}
        self._live_traces = 0
        self._traces = {}
        self._param_writes = set()
        self._data_writes = set()
        self._reads = set()

    def _depends_on(self, uids: set[int]) -> bool:
        """Whether a traced graph of this function read (through caches) any of ``uids``."""
        g = GRAPH.nx
        return any(uid in uids or (uid in g and not uids.isdisjoint(nx.ancestors(g, uid))) for uid in self._reads)


_MARK = re.compile(r"\[zcache:(\w+)\] (.*?)(?:\] \[|\]?$)", re.MULTILINE)
_TF_SUFFIX = re.compile(r"\s*: Tensor had .*$")


def _zcache_error_from(err: tf.errors.InvalidArgumentError) -> Exception:
    """Turn a failed in-graph zcache check back into its zcache exception."""
    match = _MARK.search(err.message)
    if match is None:
        return err
    cls = getattr(exceptions, match.group(1), exceptions.ZCacheError)
    # TensorFlow wraps the message: "[msg] [Condition ...]" (asserts), "msg : Tensor had NaN values".
    text = _TF_SUFFIX.sub("", match.group(2).replace("\\'", "'")).strip()
    return cls(text)


def function(func: F | None = None, *, wraps: str = "tensor", max_traces: int = _MAX_TRACES_DEFAULT) -> Any:
    """Decorate a function so that the graph policy decides whether it is traced.

    Args:
        func: the function (when used as ``@zcache.function`` without arguments).
        wraps: identifier for the policy: 'tensor', 'loss', 'sample', 'gradient' or 'model'.
        max_traces: bound on the graphs kept; past it they are dropped with a
            :class:`RetracingWarning`.

    Example:
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

    Args:
        caches: drop only the graphs that read one of these CachedTensors (directly or
            through other caches); ``None`` drops every graph.
    """
    _forbid_in_trace("drop_traces")
    uids = None if caches is None else {c.node_id for c in caches}
    for func in list(_FUNCTIONS):
        if uids is None or func._depends_on(uids):
            func.reset()
    g = GRAPH.nx
    for cache in GRAPH.caches():  # a cache's own traced miss branch embeds the caches below it
        if uids is None or cache.node_id in uids or not uids.isdisjoint(nx.ancestors(g, cache.node_id)):
            cache._drop_compiled()


def clear_graph_cache() -> None:
    """Drop every graph traced by a :func:`function` and invalidate every cache.

    Raises
    ------
        IllegalInGraphModeError: when called inside a trace.
    """
    _forbid_in_trace("clear_graph_cache")
    for func in list(_FUNCTIONS):
        func.reset()
    for cache in GRAPH.caches():
        cache._drop_compiled()
    invalidate_eagerly(GRAPH.caches())
