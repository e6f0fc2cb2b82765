"""The dependency graph: who depends on whom.

Nodes are Parameters, Data and CachedTensors; an edge ``a -> b`` means "b was
computed from a", so the caches to invalidate when ``a`` changes are exactly the
descendants of ``a``.

The graph holds its objects *weakly*: node keys are integer ids, and a
``weakref.finalize`` removes the node when its object is garbage-collected, so a
toy loop that drops models leaves no trace here. A dependent keeps strong
references to its dependencies, so a node never outlives what it depends on.

Dependencies are declared (``deps=[...]``) or discovered: while a cache's
function runs, every zcache object that is read reports itself to the innermost
active ``recording`` block (:mod:`zcache._engine.context`).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import networkx as nx

from ..exceptions import DependencyCycleError
from .context import CONTEXT

__all__ = ["CACHE", "DATA", "GRAPH", "PARAMETER", "DependencyGraph", "dependency_graph", "to_dot"]

PARAMETER = "parameter"
DATA = "data"
CACHE = "cache"


class _GraphLock:
    """The graph's re-entrant lock; a thread holding it is inside the graph.

    The garbage collector may run a finalizer (a node removal) at any allocation, also in
    the middle of a traversal of this very graph ("dictionary changed size during
    iteration"); while the finalizing thread is inside the graph, the removal waits in
    ``pending`` and happens when the thread leaves.
    """

    def __init__(self, purge: Any) -> None:
        self._rlock = threading.RLock()
        self._purge = purge

    def __enter__(self) -> None:
        self._rlock.acquire()
        CONTEXT.graph_depth += 1

    def __exit__(self, *exc: object) -> None:
        try:
            CONTEXT.graph_depth -= 1
            if not CONTEXT.graph_depth:
                self._purge()
        finally:
            self._rlock.release()


class DependencyGraph:
    """A ``networkx.DiGraph`` of weakly-held zcache objects (edges: dependency -> dependent)."""

    def __init__(self) -> None:
        self.nx = nx.DiGraph()
        self._pending: list[int] = []  # nodes of collected objects, removed on leaving the lock
        #: Held while the graph is read or changed; collected objects' nodes wait for it.
        self.lock = _GraphLock(self._purge)
        self._ids = itertools.count(1)
        # Bumped on every structural change; memoized traversals are keyed by it.
        self.version = 0
        # Bumped by every change of a cache's bypass: a zcache.function then picks its graphs for the
        # new setting (one int compared per call, not a walk of the graph).
        self.bypass_version = 0
        # Bumped on every change of an input value: eager writes, in-graph writes when they are
        # traced, and after each call of a zcache.function whose graph writes inputs. A cache's
        # gradient compares it between its forward pass and its backward pass (see
        # CachedTensor._with_gradient); an eager miss, before and after computing.
        self.input_changes = 0
        self._memo: dict[tuple[str, int], tuple[Any, ...]] = {}

    # -- structure -------------------------------------------------------------------
    def add_node(self, obj: Any, kind: str, name: str) -> int:
        with self.lock:
            uid = next(self._ids)
            self.nx.add_node(uid, ref=weakref.ref(obj), kind=kind, name=name, always_dirty=False)
            self._changed()
        weakref.finalize(obj, self._remove_node, uid)
        return uid

    def _remove_node(self, uid: int) -> None:
        """Finalizer of a node's object: remove the node now, or when this thread leaves the graph."""
        self._pending.append(uid)
        if not CONTEXT.graph_depth:
            with self.lock:
                pass  # leaving the lock removes the pending nodes

    def _purge(self) -> None:
        CONTEXT.graph_depth += 1  # finalizers run here defer too
        try:
            while self._pending:
                uid = self._pending.pop()
                if uid in self.nx:
                    self.nx.remove_node(uid)
                    self._changed()
        finally:
            CONTEXT.graph_depth -= 1

    def add_edges(self, deps: Iterable[int], dependent: int) -> None:
        """Add ``dep -> dependent`` for every dep, all or nothing.

        Parameters
        ----------
        deps : iterable of int
            The node ids of the dependencies.
        dependent : int
            The node id of the dependent cache.

        Raises
        ------
        DependencyCycleError
            If any edge would close a cycle; the graph is unchanged.
        """
        with self.lock:
            deps = [d for d in deps if not self.nx.has_edge(d, dependent)]
            if not deps:
                return
            for d in deps:
                if d == dependent or nx.has_path(self.nx, dependent, d):
                    raise DependencyCycleError(
                        f"'{self.name(d)}' cannot be a dependency of '{self.name(dependent)}': "
                        f"'{self.name(d)}' already depends on '{self.name(dependent)}', so the "
                        "dependency graph would become cyclic. Compute the shared part in a third "
                        "CachedTensor that both read instead."
                    )
            self.nx.add_edges_from((d, dependent) for d in deps)
            self._changed()

    def set_always_dirty(self, uid: int, always_dirty: bool) -> None:
        """Mark a cache as bypassed: traversals go through it, invalidation skips it."""
        with self.lock:
            if uid in self.nx and self.nx.nodes[uid]["always_dirty"] != always_dirty:
                self.nx.nodes[uid]["always_dirty"] = always_dirty
                self.bypass_version += 1
                self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._memo.clear()

    # -- queries ---------------------------------------------------------------------
    def name(self, uid: int) -> str:
        attrs = self.nx.nodes.get(uid)  # one lookup: a finalizer may remove the node at any time
        return f"<node {uid}>" if attrs is None else attrs["name"]

    def obj(self, uid: int) -> Any:
        attrs = self.nx.nodes.get(uid)
        return None if attrs is None else attrs["ref"]()

    def has_path(self, source: int, target: int) -> bool:
        """Whether ``target`` depends on ``source`` (directly or transitively)."""
        with self.lock:
            return nx.has_path(self.nx, source, target)

    def _memoized(self, key: str, uid: int, compute) -> tuple[Any, ...]:
        memo_key = (key, uid)
        with self.lock:
            hit = self._memo.get(memo_key)
            if hit is None:
                hit = self._memo[memo_key] = tuple(compute())
            return hit

    def dependent_caches(self, uid: int) -> tuple[int, ...]:
        """Ids of all caches that depend on ``uid``, directly or transitively.

        Always-dirty caches (bypassed, see :meth:`CachedTensor.set_always_dirty`) are
        traversed but not returned: they hold no value that could go stale.
        """

        def compute() -> Iterator[int]:
            if uid not in self.nx:
                return iter(())
            nodes = self.nx.nodes
            return (n for n in nx.descendants(self.nx, uid)
                    if nodes[n]["kind"] == CACHE and not nodes[n]["always_dirty"])

        return self._memoized("dependents", uid, compute)

    def ancestor_parameters(self, uid: int) -> tuple[int, ...]:
        """Ids of all parameters ``uid`` depends on, directly or transitively (sorted)."""

        def compute() -> list[int]:
            if uid not in self.nx:
                return []
            nodes = self.nx.nodes
            return sorted(n for n in nx.ancestors(self.nx, uid) if nodes[n]["kind"] == PARAMETER)

        return self._memoized("parameters", uid, compute)

    def caches_with_parameters_read_by(self, uid: int) -> tuple[int, ...]:
        """Ids of the caches ``uid`` reads directly that depend on a parameter (sorted).

        Empty when every parameter behind ``uid`` reaches it without passing through another
        cache: TensorFlow's own gradient of ``uid``'s function is then its whole gradient.
        """

        def compute() -> list[int]:
            if uid not in self.nx:
                return []
            nodes = self.nx.nodes
            return sorted(n for n in self.nx.predecessors(uid)
                          if nodes[n]["kind"] == CACHE and self.ancestor_parameters(n))

        return self._memoized("caches with parameters", uid, compute)

    def ancestor_inputs(self, uid: int) -> tuple[int, ...]:
        """Ids of all parameters and data ``uid`` depends on, directly or transitively (sorted)."""

        def compute() -> list[int]:
            if uid not in self.nx:
                return []
            nodes = self.nx.nodes
            return sorted(n for n in nx.ancestors(self.nx, uid) if nodes[n]["kind"] in (PARAMETER, DATA))

        return self._memoized("inputs", uid, compute)

    def objects(self, uids: Iterable[int]) -> list[Any]:
        out = []
        for uid in uids:
            obj = self.obj(uid)
            if obj is not None:
                out.append(obj)
        return out

    def inputs(self) -> list[Any]:
        """Every live Parameter and Data."""
        with self.lock:
            uids = [n for n, kind in self.nx.nodes(data="kind") if kind in (PARAMETER, DATA)]
        return self.objects(uids)

    def caches(self) -> list[Any]:
        with self.lock:
            uids = [n for n, kind in self.nx.nodes(data="kind") if kind == CACHE]
        return self.objects(uids)


GRAPH = DependencyGraph()


# -- public views ------------------------------------------------------------------------
def dependency_graph() -> nx.DiGraph:
    """The live dependency graph (edges: dependency -> dependent).

    Nodes are integer ids (``obj.node_id``) with attributes ``kind``
    ('parameter', 'data' or 'cache'), ``name`` and ``ref`` (a weak reference to the
    object). Treat it as read-only.

    Returns
    -------
    networkx.DiGraph
        The graph itself, not a copy.

    Examples
    --------
    >>> import zcache
    >>> mu = zcache.Parameter("mu", 1.0)
    >>> sq = zcache.CachedTensor(lambda: mu.value() ** 2, name="sq")
    >>> _ = sq.value()
    >>> zcache.dependency_graph().has_edge(mu.node_id, sq.node_id)
    True
    """
    return GRAPH.nx


def _dot_id(uid: int) -> str:
    return f"n{uid}"


def to_dot(graph: nx.DiGraph | None = None) -> str:
    """Render the dependency graph (or a subgraph of it) in Graphviz DOT.

    Parameters are ellipses, data are boxes (cylinders), caches are rounded
    boxes labelled with their hit/miss counts.

    Parameters
    ----------
    graph : networkx.DiGraph, optional
        A subgraph of :func:`dependency_graph`; ``None`` renders the whole graph.

    Returns
    -------
    str
        The DOT source, ending with a newline.

    Examples
    --------
    >>> import zcache
    >>> p = zcache.Parameter("p_dot", 2.0)
    >>> c = zcache.CachedTensor(lambda: p.value() + 1.0, name="c_dot")
    >>> _ = c.value()
    >>> dot = zcache.to_dot()
    >>> "p_dot" in dot and "c_dot" in dot and "->" in dot
    True
    """
    g = GRAPH.nx if graph is None else graph
    shapes = {PARAMETER: "ellipse", DATA: "cylinder", CACHE: "box"}
    lines = ["digraph zcache {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    with GRAPH.lock:  # finalizers wait while the graph is listed
        nodes, edges = list(g.nodes(data=True)), list(g.edges())
    for uid, attrs in nodes:
        kind = attrs.get("kind", "")
        label = str(attrs.get("name", uid)).replace('"', r"\"")
        obj = attrs["ref"]() if "ref" in attrs else None
        dirty = bool(attrs.get("always_dirty"))
        if kind == CACHE and obj is not None:
            stats = obj.stats
            label += "\\nalways dirty" if dirty else f"\\nhits {stats['hits']}, misses {stats['misses']}"
        style = (', style="rounded,dashed"' if dirty else ', style="rounded"') if kind == CACHE else ""
        lines.append(f'  {_dot_id(uid)} [label="{label}", shape={shapes.get(kind, "box")}{style}];')
    for a, b in edges:
        lines.append(f"  {_dot_id(a)} -> {_dot_id(b)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
