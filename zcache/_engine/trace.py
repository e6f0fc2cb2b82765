"""Input writes inside traces and inside eagerly run functions: what must be finished or undone.

A ``zcache.function`` whose body writes a Parameter or Data keeps, per trace, a
:class:`TraceRecord`: which inputs the graph writes, which dependent caches the graph
already invalidates in-graph, and which parameters' final values it returns. After each
call the function finishes what the graph could not (caches created after the trace,
the parameters' Python mirrors) and, when the call fails, puts every written input back.

An eagerly run ``zcache.function`` keeps a *journal* instead: the first old value of
each input it writes, undone if the call raises (:func:`call_eagerly`).

Writes anywhere else inside a trace (a plain ``tf.function``, a cache's miss branch)
are refused (:func:`require_managed_trace`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import networkx as nx
import tensorflow as tf

from ..exceptions import IllegalInGraphModeError, UnmanagedTraceError
from .context import CONTEXT
from .dependencies import CACHE, GRAPH

__all__ = [
    "TraceRecord",
    "call_eagerly",
    "forbid_in_trace",
    "invalidate_if_mutated_in_trace",
    "isolated_trace",
    "journal",
    "note_mutation",
    "require_managed_trace",
    "tracing",
]


def forbid_in_trace(what: str) -> None:
    """Raise :class:`IllegalInGraphModeError` if a graph is being traced.

    Parameters
    ----------
    what : str
        The call that is refused, for the message.
    """
    if tf.inside_function():
        raise IllegalInGraphModeError(
            f"{what} cannot be called while a TensorFlow graph is being traced (inside a "
            "zcache.function or tf.function): it changes Python-side state that the trace "
            "would bake in. Call it from eager code, outside the decorated function."
        )


class TraceRecord:
    """What one trace of a ``zcache.function`` did that Python must finish after each call.

    Parameters
    ----------
    isolated : bool
        A cache's miss branch (shared by all graphs): no input may be written there.
    """

    _ids = itertools.count(1)

    def __init__(self, isolated: bool = False) -> None:
        self.id = next(self._ids)
        self.isolated = isolated
        # input node id -> ids of the caches the trace already invalidates in-graph
        self.mutations: dict[int, set[int]] = {}
        # input node id -> per mutation in the trace being built, "value unchanged" (None: changed)
        self.unchanged: dict[int, list[Any]] = {}
        # (graph version, input node id -> dependent caches this trace does not invalidate)
        self._extra: tuple[int, dict[int, tuple[int, ...]]] = (-1, {})
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
        version, extra = self._extra
        if version != GRAPH.version:
            extra = {}
            for uid, handled in self.mutations.items():
                caches = tuple(sorted(set(GRAPH.dependent_caches(uid)) - handled))
                if caches:
                    extra[uid] = caches
            self._extra = (GRAPH.version, extra)
        return extra


@contextlib.contextmanager
def tracing(record: TraceRecord) -> Iterator[TraceRecord]:
    """While a ``zcache.function`` body (or a cache's miss branch) is traced with ``record``."""
    CONTEXT.traces.append(record)
    try:
        yield record
    finally:
        CONTEXT.traces.pop()


@contextlib.contextmanager
def isolated_trace() -> Iterator[None]:
    """While tracing a cache's miss branch (shared by all graphs): no outer trace's mutations."""
    if not CONTEXT.traces:
        yield
        return
    with tracing(TraceRecord(isolated=True)):
        yield


def require_managed_trace(what: str) -> None:
    """Refuse an input write inside a trace that no ``zcache.function`` manages.

    After each call a ``zcache.function`` invalidates the caches its graph could not know
    of (created after the trace), keeps the parameters' Python mirrors, and puts inputs
    back when the call fails. A plain ``tf.function`` cannot: its caches would go stale.
    """
    stack = CONTEXT.traces
    if not stack or stack[-1].isolated:
        inside_cache = bool(stack) and stack[-1].isolated
        raise UnmanagedTraceError(
            f"{what} was called inside "
            + ("the function of a CachedTensor, which must not change its inputs. Set values "
               "outside the cached function." if inside_cache else
               "a trace that zcache does not manage (a plain tf.function): caches created after "
               "the trace would not be invalidated when it runs, and would serve stale values. "
               "Decorate the function with @zcache.function(wraps='loss') instead of "
               "@tf.function, or call set_value/set_data eagerly.")
        )


def note_mutation(uid: int, handled: tuple[int, ...], unchanged: Any = None) -> None:
    """Called by ``set_value``/``set_data`` inside a trace, after their in-graph invalidation.

    Parameters
    ----------
    uid : int
        The node id of the written input.
    handled : tuple of int
        The caches the write already invalidates in the graph.
    unchanged : bool tensor or None
        Whether the new value equals the old (a parameter); ``None``: changed (data).
    """
    stack = CONTEXT.traces
    if stack:
        stack[-1].mutations.setdefault(uid, set()).update(handled)
        stack[-1].unchanged.setdefault(uid, []).append(unchanged)


def journal(obj: Any, undo: Callable[[], Any]) -> None:
    """An eager write of ``obj`` inside an eagerly run function; ``undo()`` puts it back.

    The call's journal keeps the first undo of each input, so that a call that fails can put
    every input back, as a traced call does. ``undo`` restores that one input only (the
    events of a weighted Data, not its weights: those are an input of their own).
    """
    stack = CONTEXT.journals
    if stack:
        stack[-1].setdefault(obj.node_id, undo)


def call_eagerly(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``func`` eagerly; if it raises, put back every input it wrote (first old values)."""
    stack = CONTEXT.journals
    written: dict[int, Callable[[], Any]] = {}
    stack.append(written)
    try:
        out = func(*args, **kwargs)
    except BaseException:
        stack.pop()
        for undo in reversed(list(written.values())):
            undo()
        raise
    stack.pop()
    if stack:  # an outer eager call may fail later: it must undo these writes as well
        for uid, entry in written.items():
            stack[-1].setdefault(uid, entry)
    return out


def invalidate_if_mutated_in_trace(cache: Any) -> None:
    """Before a traced read of ``cache``: clear its flag for inputs this trace already changed.

    ``set_value`` inside a trace invalidates the dependents it knows of; a cache created
    later in the same trace, or whose dependencies are not yet discovered, would otherwise
    serve a value computed from the old input. Unknown dependencies count as affected.
    """
    stack = CONTEXT.traces
    record = stack[-1] if stack else None
    if record is None or not record.mutations:
        return
    # The caches below this one are read inside its traced miss branch, a function traced
    # once and shared by every graph (no trace's mutations may enter it): handle them here.
    below = [] if cache.node_id not in GRAPH.nx else [
        c for c in GRAPH.objects(sorted(nx.ancestors(GRAPH.nx, cache.node_id)))
        if GRAPH.nx.nodes[c.node_id]["kind"] == CACHE and not c.always_dirty
    ]
    for c in [*below, cache]:
        _invalidate_if_mutated(record, c)


def _invalidate_if_mutated(record: TraceRecord, cache: Any) -> None:
    known = cache.state.known  # computed before: its dependencies are in the graph
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
        cache.state.invalidate_in_graph(None)
    else:
        cache.state.invalidate_in_graph(tf.reduce_all(tf.stack(conditions)))
