"""The cache memory budget: how many bytes the caches may hold between evaluations.

``zcache.set_cache_budget(nbytes)`` bounds the bytes of every stored value, valid or not (an
invalidated cache still holds its buffer). Past the bound, caches are *evicted*: the flag is
cleared, then the stored value released; the next read recomputes it, so a value is never stale
and a fit gives the same numbers. The order: invalid caches first (free: nothing to recompute),
then valid ones by least-recent use.

Where it is enforced: between calls, under the engine lock, never while a graph runs:

- after an eager store (:func:`stored_eagerly`);
- after each top-level call of a traced ``zcache.function`` (:meth:`CallCaches.after_call`);
- when the budget is set.

Within one call the caches it fills may exceed the budget transiently: the budget bounds what
caches hold between evaluations (a chunked loss makes one evaluation one chunk).

Which caches were used: eager reads and stores stamp the cache with a global tick. A traced
read cannot tell Python when it runs, so after each call the function's graphs' caches (what
they read, and every cache below) are probed in one graph call, for the size of each stored
value and its hit + miss counters: a cache whose counters moved was used in the call, and is
stamped with the call's tick (ties broken by the order of the dependency graph: a cache below
counts as less recent than the one read above it). Caches read by a graph zcache does not call
(a user's plain ``tf.function``) are not stamped; their sizes are probed at every enforcement.

Cost when no budget is set: one ``if`` per eager read and per call. The registry holds caches
weakly: a dropped model's caches are not kept alive by the budget.
"""

from __future__ import annotations

import itertools
import numbers
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import networkx as nx
import tensorflow as tf

from ..exceptions import CacheBudgetError
from .cache_state import invalidate_eagerly
from .context import CONTEXT, ENGINE_LOCK
from .dependencies import CACHE, GRAPH
from .restorer import Restorer
from .trace import forbid_in_trace

__all__ = [
    "BUDGET",
    "CacheBudgetInfo",
    "CallCaches",
    "cache_budget_info",
    "enforce",
    "note_traced_read",
    "set_cache_budget",
    "stamp",
    "stored_eagerly",
]


@dataclass(frozen=True)
class CacheBudgetInfo:
    """The cache memory budget and what the caches hold, as :func:`zcache.cache_budget_info` reports it.

    Attributes
    ----------
    budget : int or None
        The bytes the caches may hold between evaluations; None: unlimited.
    held_bytes : int
        Bytes of the stored values (valid or not; an evicted cache holds none).
    caches_holding : int
        How many caches hold a value.
    evictions : int
        Caches evicted so far (by any budget in this process).
    recomputations : int
        Evicted caches computed again since (their next read).
    """

    budget: int | None
    held_bytes: int
    caches_holding: int
    evictions: int
    recomputations: int


class CallCaches:
    """The caches some graphs may touch, probed in one graph call: sizes, and which were used.

    A ``zcache.function`` keeps one (dropped with its graphs); the caches read by untracked
    graphs share another. The probe is rebuilt when the dependency graph or the reads change.
    """

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._caches: list[weakref.ref[Any]] = []
        self._waiting: list[weakref.ref[Any]] = []  # caches with no value Variable yet
        self._probe: Any = None

    def after_call(self, reads: Iterable[int]) -> None:
        """After a call whose graphs read ``reads`` (node ids): update sizes, stamp the used caches, enforce.

        Parameters
        ----------
        reads : iterable of int
            Node ids the graphs read at their top level (their caches below are found here).
        """
        self.update(set(reads), stamp=True)
        enforce()

    def update(self, reads: set[int], stamp: bool) -> None:
        """Probe the caches below ``reads``: the bytes each holds; with ``stamp``, mark the used ones."""
        caches = self._current(reads)
        if not caches:
            return
        values = self._probe().numpy().tolist()
        n = len(caches)
        tick = next(BUDGET.ticks) if stamp else 0
        for rank, cache in enumerate(caches):
            state = cache.state
            uses = values[n + rank]
            used = uses != state.graph_uses
            state.graph_uses = uses
            if state.evicted:
                if not used:  # still released: holds nothing (a scalar's placeholder aside)
                    continue
                state.evicted = False  # read since: a miss, which stored it again
                BUDGET.recomputations += 1
            _hold(cache, values[rank] * state.stored.dtype.size)
            if used and stamp:
                state.last_use = (tick, rank)

    def _current(self, reads: set[int]) -> list[Any]:
        key = (len(reads), GRAPH.version)
        caches = [ref() for ref in self._caches]
        if (key != self._key or any(c is None for c in caches)
                or any((c := ref()) is not None and c.state.stored is not None for ref in self._waiting)):
            caches = self._rebuild(reads, key)
        return caches

    def _rebuild(self, reads: set[int], key: tuple[int, int]) -> list[Any]:
        with GRAPH.lock:
            g = GRAPH.nx
            ids: set[int] = set()
            for uid in reads:
                if uid in g:
                    ids.add(uid)
                    ids.update(nx.ancestors(g, uid))
            nodes = g.nodes
            order = [n for n in nx.topological_sort(g.subgraph(ids))
                     if nodes[n]["kind"] == CACHE and not nodes[n]["always_dirty"]]
        found = GRAPH.objects(order)  # dependencies first: a cache below is "less recent"
        caches = [c for c in found if c.state.stored is not None]
        self._waiting = [weakref.ref(c) for c in found if c.state.stored is None]
        self._caches = [weakref.ref(c) for c in caches]
        self._key = key
        variables = [(c.state.stored, c.state.hits, c.state.misses) for c in caches]

        @tf.function(autograph=False)
        def probe() -> tf.Tensor:
            sizes = [tf.size(stored, out_type=tf.int64) for stored, _, _ in variables]
            uses = [hits.read_value() + misses.read_value() for _, hits, misses in variables]
            return tf.stack(sizes + uses)

        self._probe = probe if caches else None
        return caches


class _Budget:
    """The process-wide budget state (changed under the engine lock)."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.ticks = itertools.count(1)
        self.evictions = 0
        self.recomputations = 0
        #: caches whose ``held_bytes`` is above zero (weakly)
        self.held: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        #: caches read by a trace no ``zcache.function`` manages (weakly), and their probe
        self.untracked: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.untracked_lock = threading.Lock()  # traces of plain tf.functions run without the engine lock
        self.untracked_probe = CallCaches()


#: The process-wide budget.
BUDGET = _Budget()


def _hold(cache: Any, nbytes: int) -> None:
    cache.state.held_bytes = nbytes
    if nbytes:
        BUDGET.held[cache.node_id] = cache
    else:
        BUDGET.held.pop(cache.node_id, None)


def stamp(cache: Any) -> None:
    """An eager hit of ``cache`` (under the engine lock, with a budget set): it is the most recently used."""
    cache.state.last_use = (next(BUDGET.ticks), 0)


def stored_eagerly(cache: Any, out: tf.Tensor) -> None:
    """``cache`` just stored ``out`` eagerly (under the engine lock, with a budget set): count it, enforce."""
    state = cache.state
    if state.evicted:
        state.evicted = False
        BUDGET.recomputations += 1
    _hold(cache, out.shape.num_elements() * out.dtype.size)
    stamp(cache)
    enforce()


def note_traced_read(cache: Any) -> None:
    """While tracing a read of ``cache``: remember it if no ``zcache.function`` manages the trace."""
    if not CONTEXT.traces:
        with BUDGET.untracked_lock:
            BUDGET.untracked[cache.node_id] = cache


def enforce() -> None:
    """Evict caches until the held bytes fit the budget: invalid first, then the least recently used.

    Called under the engine lock, between calls, with a budget set.
    """
    limit = BUDGET.limit
    if limit is None:
        return
    with BUDGET.untracked_lock:
        untracked = set(BUDGET.untracked.keys())
    if untracked:  # a plain tf.function may have filled them: sizes only, no stamps
        BUDGET.untracked_probe.update(untracked, stamp=False)
    held = []
    for cache in list(BUDGET.held.values()):
        if cache.always_dirty:  # bypassed since: released, holds nothing
            _hold(cache, 0)
        else:
            held.append(cache)
    total = sum(c.state.held_bytes for c in held)
    if total <= limit:
        return
    held.sort(key=lambda c: (c.state.is_valid(), c.state.last_use, c.node_id))
    victims = []
    for cache in held:
        if total <= limit:
            break
        victims.append(cache)
        total -= cache.state.held_bytes
    _evict(victims)


def _evict(caches: list[Any]) -> None:
    """Clear the flags, then free the stored values of ``caches``; their next read recomputes them."""
    invalidate_eagerly(caches)
    for cache in caches:
        state = cache.state
        with state.lock:
            state.release()
            state.evicted = True
            state.evictions += 1
        BUDGET.evictions += 1
        _hold(cache, 0)


def _rescan() -> None:
    """Count what every cache holds now (the budget tracks nothing while it is None)."""
    BUDGET.held.clear()
    for cache in GRAPH.caches():
        state = cache.state
        if state.evicted and state.is_valid():  # recomputed while no budget was set
            state.evicted = False
        if state.traced:  # graphs ran untracked meanwhile: a probe must see only later uses
            state.graph_uses = int(state.hits.numpy()) + int(state.misses.numpy())
        if not (cache.always_dirty or state.evicted):
            _hold(cache, state.nbytes())


def _checked(nbytes: Any) -> int | None:
    if nbytes is None:
        return None
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral):
        raise CacheBudgetError(
            f"The cache budget is a number of bytes (an int, e.g. 2**30) or None (unlimited), got {nbytes!r} "
            f"({type(nbytes).__name__}). The budget is unchanged."
        )
    if nbytes < 0:
        raise CacheBudgetError(f"The cache budget cannot be negative, got {nbytes}. The budget is unchanged.")
    return int(nbytes)


def _apply(limit: int | None) -> None:
    BUDGET.limit = limit
    if limit is not None:
        _rescan()
        enforce()


def set_cache_budget(nbytes: int | None) -> Restorer:
    """Bound the bytes that caches hold between evaluations, evicting the least recently used.

    An evicted cache is recomputed on its next read (never a stale value), so results do not
    change; only time does. The bytes counted are those of every stored value, valid or not;
    invalid caches are evicted first, then valid ones by least-recent use (eager reads, and
    calls of ``zcache.function`` whose graphs read them). The budget is enforced between calls:
    within one call the caches it fills may exceed it. ``CachedTensor.stats`` then counts each
    cache's evictions and bytes; :func:`zcache.cache_budget_info` sums them up.

    Parameters
    ----------
    nbytes : int or None
        The bytes caches may hold; ``None`` (the default setting) is unlimited and costs nothing.

    Returns
    -------
    Restorer
        As a context manager it restores the previous budget (enforcing it again).

    Raises
    ------
    CacheBudgetError
        ``nbytes`` is not a non-negative int or None; the budget is unchanged.
    IllegalInGraphModeError
        When called inside a trace.

    Examples
    --------
    >>> import numpy as np, tensorflow as tf, zcache
    >>> x = zcache.Data(np.linspace(0.0, 1.0, 1000), name="x_budget")
    >>> big = zcache.CachedTensor(lambda: tf.exp(x.value()), name="big")
    >>> _ = big.value()
    >>> with zcache.set_cache_budget(0):      # nothing may stay: evicted
    ...     big.stats["evictions"], big.is_valid
    (1, False)
    >>> bool(tf.reduce_all(big.value() == tf.exp(x.value())))   # recomputed on the next read
    True
    >>> zcache.cache_budget_info().budget is None
    True
    """
    forbid_in_trace("set_cache_budget")
    limit = _checked(nbytes)
    with ENGINE_LOCK:
        old = BUDGET.limit
        _apply(limit)

    def restore() -> None:
        with ENGINE_LOCK:
            _apply(old)

    return Restorer(restore)


def cache_budget_info() -> CacheBudgetInfo:
    """The cache memory budget, the bytes caches hold, and the evictions so far.

    Returns
    -------
    zcache.types.CacheBudgetInfo
        ``budget``, ``held_bytes``, ``caches_holding``, ``evictions``, ``recomputations``.

    Raises
    ------
    IllegalInGraphModeError
        When called inside a trace.

    Examples
    --------
    >>> import zcache
    >>> with zcache.set_cache_budget(2**20):
    ...     info = zcache.cache_budget_info()
    >>> info.budget, info.held_bytes <= 2**20
    (1048576, True)
    """
    forbid_in_trace("cache_budget_info")
    with ENGINE_LOCK:
        if BUDGET.limit is None:  # nothing tracked: count every cache now
            sizes = [0 if c.always_dirty or (c.state.evicted and not c.state.is_valid()) else c.state.nbytes()
                     for c in GRAPH.caches()]
        else:
            with BUDGET.untracked_lock:
                untracked = set(BUDGET.untracked.keys())
            if untracked:
                BUDGET.untracked_probe.update(untracked, stamp=False)
            sizes = [c.state.held_bytes for c in list(BUDGET.held.values()) if not c.always_dirty]
        return CacheBudgetInfo(BUDGET.limit, sum(sizes), sum(1 for s in sizes if s),
                               BUDGET.evictions, BUDGET.recomputations)
