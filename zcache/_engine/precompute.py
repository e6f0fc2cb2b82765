r"""Precompute: cache what a fit cannot change, bypass what it changes on every call.

RooFit's constant-term optimization, done on zcache's dependency graph. Given the
floating parameters :math:`F`, every cache :math:`c` in the target's graph is

- **cached** when no floating parameter is among its ancestors,
  :math:`\mathrm{anc}(c) \cap F = \emptyset`: its value survives the whole fit.
  The *highest* such nodes (no cached dependent) are what the fit reads; the
  inner ones are kept too, so that a later change of one fixed parameter
  recomputes only its branch (``keep_inner=False`` frees them);
- **always dirty** otherwise: bypassed, no ``tf.cond``, no flag writes, no stored
  value, TensorFlow's own gradient. A fit moves these inputs on every call, so a
  cache could only cost time (the CMS ``combine`` lesson).

With numerical gradients (one parameter moved per step) caching floating nodes
pays again: a sum of K components then recomputes only the component that owns
the moved parameter. ``keep_floating=None`` picks this automatically from
:func:`zcache.get_autograd_mode`. Even then a node that depends on *every*
floating parameter (the sum itself) changes on every step and stays always dirty.

Cached nodes stay under invalidation: a fixed parameter changed later by the
user invalidates exactly the cached parts that depend on it.

What a target is evaluated by is a small protocol, :class:`zcache.types.Precomputable` (one
method, ``__zcache_evaluate__``), which losses and models implement; a
:class:`~zcache.CachedTensor` or a zero-argument callable is a target too. The last
report of each target is kept here, weakly keyed by the target (and holding its caches
weakly): :func:`ensure_precomputed` (what minimizers call) reuses it, :func:`precomputed`
returns it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import networkx as nx

from .cached_tensor import CachedTensor
from .context import recording, run_eagerly
from .dependencies import CACHE, GRAPH
from .mode import get_autograd_mode
from .parameter import Parameter
from .trace import forbid_in_trace

__all__ = [
    "precompute",
    "PrecomputeReport",
    "NodeReport",
    "Precomputable",
    "ensure_precomputed",
    "precomputed",
]

CACHED, INNER, FLOATING, DIRTY = "cached", "cached (inner)", "cached (floating)", "always dirty"


@runtime_checkable
class Precomputable(Protocol):
    """What :func:`zcache.precompute` evaluates a target by: losses and models implement it.

    ``__zcache_evaluate__()`` is called eagerly (on this thread), while zcache records the
    zcache objects read at the top level. It computes what a fit of the object reads (a loss
    its value; a model its normalization) and returns the caches a fit reads besides, which
    need not be computed now (a model's per-dataset ``pdf`` caches). :func:`zcache.precompute`
    classifies the caches recorded and returned, and all their cache ancestors.

    Examples
    --------
    >>> import tensorflow as tf, zcache
    >>> class Shape:
    ...     def __init__(self):
    ...         self.width = zcache.Parameter("width_proto", 2.0, floating=False)
    ...         self.area = zcache.CachedTensor(lambda: self.width.value() ** 2, name="area")
    ...         self.spare = zcache.CachedTensor(lambda: 2.0 * self.width.value(), name="spare")
    ...     def __zcache_evaluate__(self):
    ...         self.area.value()          # read now: recorded
    ...         return [self.spare]        # read by a fit later: classified too
    >>> shape = Shape()
    >>> isinstance(shape, Precomputable)
    True
    >>> sorted((n.name, n.status) for n in zcache.precompute(shape).nodes)
    [('area', 'cached'), ('spare', 'cached')]
    """

    def __zcache_evaluate__(self) -> Iterable[CachedTensor]:
        """Compute what a fit reads, eagerly; return the caches it reads besides (may be empty)."""
        ...


@dataclass(frozen=True)
class NodeReport:
    """One cache in a :class:`PrecomputeReport`.

    Attributes
    ----------
    name : str
        The cache's name.
    status : str
        ``'cached'`` (highest constant), ``'cached (inner)'``, ``'cached (floating)'`` or
        ``'always dirty'``.
    nbytes : int
        Bytes its stored value holds.
    depends_on : tuple of str
        The parameters and data it depends on (transitively).
    floating : tuple of str
        The floating parameters among them.
    """

    name: str
    status: str
    nbytes: int
    depends_on: tuple[str, ...]
    floating: tuple[str, ...]


@dataclass
class PrecomputeReport:
    """What :func:`zcache.precompute` did; ``undo()`` restores the previous setting.

    The report holds its caches weakly: it never keeps a dropped model's caches (and their
    stored values) alive, so :attr:`caches`, :attr:`cached` and :attr:`always_dirty` list the
    caches still alive, and ``undo()`` restores those.

    Attributes
    ----------
    nodes : list of NodeReport
        One :class:`NodeReport` per cache, highest first.
    floating : tuple of str
        Names of the parameters treated as floating.
    """

    nodes: list[NodeReport]
    floating: tuple[str, ...]
    _previous: dict[int, tuple[weakref.ref[CachedTensor], bool]] = field(init=False, repr=False, default_factory=dict)
    _caches: list[weakref.ref[CachedTensor]] = field(init=False, repr=False, default_factory=list)

    @property
    def caches(self) -> list[CachedTensor]:
        """Every cache classified (kept and bypassed) and still alive, in the graph's order, inputs first."""
        return [c for c in (ref() for ref in self._caches) if c is not None]

    @property
    def cached(self) -> list[CachedTensor]:
        """The caches kept (highest and inner)."""
        return [c for c in self.caches if not c.always_dirty]

    @property
    def always_dirty(self) -> list[CachedTensor]:
        """The caches bypassed."""
        return [c for c in self.caches if c.always_dirty]

    @property
    def total_bytes(self) -> int:
        """Bytes held by the kept caches."""
        return sum(c.nbytes for c in self.cached)

    def undo(self) -> None:
        """Switch every cache back to what it was before :func:`zcache.precompute`.

        A :func:`zcache.function` then runs the graphs it traced for that setting, if it has them.
        """
        forbid_in_trace("PrecomputeReport.undo")
        for ref, was_dirty in self._previous.values():
            cache = ref()
            if cache is not None and cache.always_dirty != was_dirty:
                cache.set_always_dirty(was_dirty)
        self._previous = {}

    def __str__(self) -> str:
        rows = [("cache", "status", "bytes", "floating deps", "depends on")]
        rows += [(n.name, n.status, f"{n.nbytes:,}", ", ".join(n.floating) or "-", ", ".join(n.depends_on) or "-")
                 for n in self.nodes]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [f"precompute: {len(self.cached)} cached ({self.total_bytes:,} bytes), "
                 f"{len(self.always_dirty)} always dirty; floating: {', '.join(self.floating) or '-'}"]
        for r in rows:
            lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
        return "\n".join(lines)


# target -> (setting, report) of its last precompute. Weakly keyed, and a report holds its
# caches weakly, so the memo keeps nothing alive and delays no collection: a dropped loss, its
# model and their caches are collected together, in one pass.
_REPORTS: weakref.WeakKeyDictionary[Any, tuple[tuple, PrecomputeReport]] = weakref.WeakKeyDictionary()


def precomputed(target: Any) -> PrecomputeReport | None:
    """The report of the last :func:`zcache.precompute` of ``target``.

    Parameters
    ----------
    target : object
        The precompute target (a loss, say).

    Returns
    -------
    PrecomputeReport or None
        None when ``target`` was never precomputed (or cannot be weakly referenced). A report
        undone since is still returned.

    Examples
    --------
    >>> import zcache
    >>> from zcache._engine.precompute import precomputed
    >>> p = zcache.Parameter("p_memo", 2.0, floating=False)
    >>> square = zcache.CachedTensor(lambda: p.value() ** 2, name="square")
    >>> precomputed(square) is None
    True
    >>> report = zcache.precompute(square)
    >>> precomputed(square) is report
    True
    """
    entry = _lookup(target)
    return None if entry is None else entry[1]


def _lookup(target: Any) -> tuple[tuple, PrecomputeReport] | None:
    try:
        return _REPORTS.get(target)
    except TypeError:  # not weakly referenceable (or not hashable): never remembered
        return None


def _evaluate(target: Any) -> set[Any]:
    """Run ``target`` eagerly once, returning the zcache objects it read at the top level."""
    # Eager on this thread only: flipping the process-wide graph mode here raced with fits in
    # other threads and could leave the whole process eager.
    with run_eagerly(), recording() as reads:
        if isinstance(target, Precomputable):
            reads.update(target.__zcache_evaluate__())
        elif isinstance(target, CachedTensor):
            target.value()
        elif callable(target):
            target()
        else:
            raise TypeError(
                "precompute takes a loss, a model (any object with __zcache_evaluate__, see "
                f"zcache.types.Precomputable), a CachedTensor or a zero-argument callable, got {target!r}."
            )
    return reads


def _key(target: Any, floating: Sequence[Parameter], keep_floating: bool, keep_inner: bool) -> tuple:
    return (tuple(id(p) for p in floating), keep_floating, keep_inner, GRAPH.version)


def precompute(
    target: Any,
    floating: Sequence[Parameter] | None = None,
    *,
    keep_floating: bool | None = None,
    keep_inner: bool = True,
) -> PrecomputeReport:
    """Cache the sub-expressions of ``target`` that no floating parameter touches.

    Parameters
    ----------
    target : loss, model, Precomputable, CachedTensor or callable
        What a fit evaluates: a loss, a model (any :class:`zcache.types.Precomputable`), a
        CachedTensor or a zero-argument callable.
    floating : sequence of Parameter, optional
        The parameters a fit will move; default: those with ``floating=True`` among the
        target's inputs.
    keep_floating : bool, optional
        Keep caches that depend on floating parameters (pays with numerical gradients);
        ``None``: keep them iff the autograd mode is off.
    keep_inner : bool
        Keep constant caches below the highest ones.

    Returns
    -------
    PrecomputeReport
        What was classified how (print it; ``.undo()`` reverts).

    Raises
    ------
    TypeError
        ``target`` is none of the above.
    IllegalInGraphModeError
        Called inside a trace.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian, Exponential, SumPdf
    >>> from zcache.loss import UnbinnedNLL
    >>> s = Space("x", 0.0, 10.0)
    >>> mu = zcache.Parameter("mu_p", 5.0)
    >>> model = SumPdf([Gaussian(s, mu, 1.0), Exponential(s, -0.2)], fracs=[0.5])
    >>> loss = UnbinnedNLL(model, zcache.Data(np.linspace(0.5, 9.5, 100)))
    >>> report = zcache.precompute(loss)
    >>> sorted((n.status, n.name) for n in report.nodes)[0]      # the exponential: data and fixed lam only
    ('always dirty', 'Gaussian._cached_pdf')
    >>> [n.name for n in report.nodes if n.status == "cached"]
    ['Exponential._cached_pdf', 'data in range']
    >>> report.undo()
    """
    forbid_in_trace("zcache.precompute")
    if keep_floating is None:
        keep_floating = not get_autograd_mode()
    reads = _evaluate(target)
    roots = [r for r in reads if isinstance(r, CachedTensor)]
    g = GRAPH.nx
    uids: set[int] = set()
    for root in roots:
        uids.add(root.node_id)
        uids.update(n for n in nx.ancestors(g, root.node_id) if g.nodes[n]["kind"] == CACHE)
    caches = GRAPH.objects(sorted(uids))
    if floating is None:
        params = {n for uid in uids for n in GRAPH.ancestor_parameters(uid)}
        floating = [p for p in GRAPH.objects(sorted(params)) if p.floating]
    floating = list(floating)
    floating_ids = {p.node_id for p in floating}

    floating_of = {c.node_id: [GRAPH.name(n) for n in GRAPH.ancestor_parameters(c.node_id) if n in floating_ids]
                   for c in caches}
    status = _statuses(g, caches, floating_of, len(floating_ids), keep_floating, keep_inner)

    previous = {c.node_id: (c, c.always_dirty) for c in caches}
    changed = []
    for c in caches:
        dirty = status[c.node_id] == DIRTY
        if c.always_dirty != dirty:
            c.set_always_dirty(dirty)
            changed.append(c)
    if changed:
        # Graphs traced before hold the old choice of tf.cond or direct computation: a zcache.function
        # keeps them for that setting and follows the switch (set_always_dirty drops the miss branches).
        if any(not c.always_dirty for c in changed):
            # fill the newly kept caches now (the evaluation above computed them without storing), not
            # inside the first timed call; a precompute that only bypasses caches has nothing to fill
            _evaluate(target)

    report = _report(g, uids, caches, status, floating_of, floating, previous)
    try:
        _REPORTS[target] = (_key(target, floating, keep_floating, keep_inner), report)
    except TypeError:  # not weakly referenceable (or not hashable): nothing to remember
        pass
    return report


def _statuses(g: nx.DiGraph, caches: list[CachedTensor], floating_of: dict[int, list[str]], n_floating: int,
              keep_floating: bool, keep_inner: bool) -> dict[int, str]:
    """Each cache's status (node id -> CACHED, INNER, FLOATING or DIRTY), by the rules of :func:`precompute`."""
    constant = {uid for uid, names in floating_of.items() if not names}
    highest = {uid for uid in constant
               if not any(d in constant for d in g.successors(uid))}
    status: dict[int, str] = {}
    for c in caches:
        uid = c.node_id
        if uid in highest:
            status[uid] = CACHED
        elif uid in constant:
            status[uid] = INNER if keep_inner else DIRTY
        elif keep_floating and len(set(floating_of[uid])) < n_floating:
            status[uid] = FLOATING  # misses only when one of *its* parameters moves
        else:
            status[uid] = DIRTY  # changes on every call of a fit
    return status


def _report(g: nx.DiGraph, uids: set[int], caches: list[CachedTensor], status: dict[int, str],
            floating_of: dict[int, list[str]], floating: list[Any],
            previous: dict[int, tuple[CachedTensor, bool]]) -> PrecomputeReport:
    """:func:`precompute`'s report: the caches from the top of the graph down, and what it changed."""
    order = {uid: i for i, uid in enumerate(_topological(g, uids))}
    nodes = []
    for c in sorted(caches, key=lambda c: -order[c.node_id]):
        inputs = [n for n in nx.ancestors(g, c.node_id) if g.nodes[n]["kind"] != CACHE]
        nodes.append(NodeReport(
            name=c.name,
            status=status[c.node_id],
            nbytes=c.nbytes,
            depends_on=tuple(sorted(GRAPH.name(n) for n in inputs)),
            floating=tuple(sorted(floating_of[c.node_id])),
        ))
    report = PrecomputeReport(nodes, tuple(p.name for p in floating))
    # Weakly: a report (kept by a fit result, or remembered for its loss) must not keep the
    # caches of a dropped model alive, nor delay their collection.
    report._previous = {uid: (weakref.ref(c), dirty) for uid, (c, dirty) in previous.items()}
    report._caches = [weakref.ref(c) for c in caches]
    return report


def ensure_precomputed(target: Any, floating: Sequence[Parameter], keep_floating: bool) -> PrecomputeReport:
    """:func:`zcache.precompute` unless ``target`` already has this exact setting (no eager pass, no retrace).

    The setting is the floating parameters, ``keep_floating``, ``keep_inner=True`` and the
    dependency graph's version. A target that cannot be weakly referenced is precomputed on
    every call.

    Parameters
    ----------
    target : object
        As for :func:`zcache.precompute`.
    floating : sequence of Parameter
        The parameters the fit moves.
    keep_floating : bool
        As for :func:`zcache.precompute`.

    Returns
    -------
    PrecomputeReport
        The remembered report, or a new one.
    """
    previous = _lookup(target)
    if previous is not None and previous[0] == _key(target, floating, keep_floating, True):
        return previous[1]
    return precompute(target, floating, keep_floating=keep_floating)


def _topological(g: nx.DiGraph, uids: set[int]) -> list[int]:
    return list(nx.topological_sort(g.subgraph(uids)))

