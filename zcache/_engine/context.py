"""Per-thread context, and the engine lock: every piece of state one thread's work carries.

What is per thread, what is per process
---------------------------------------
Process-wide (one setting for every thread; change them from one thread, between
computations): the graph, jit and autograd modes (``zcache.set_graph_mode``,
``zcache.set_autograd_mode``), the dependency graph, every Parameter, Data and cache.

Per thread (this module's :data:`CONTEXT`; a new thread starts with all of it empty):

===============  ==================================================================
``reads``        stack of :func:`recording` blocks (dependency discovery)
``substitutes``  stack of :func:`substituted` blocks (a backward pass at old inputs, or one
                 toy of a batched evaluation)
``serving``      :func:`finding_invariants`: the caches no substituted input reaches
``computing``    the caches whose functions are running (cycle detection)
``memo``         :func:`evaluation`: bypassed caches computed once per evaluation
``grad_params``  stack of :func:`differentiating` scopes
``traces``       stack of trace records of the ``zcache.function`` bodies being traced
``journals``     stack of undo journals of eagerly run ``zcache.function`` calls
``eager``        :func:`run_eagerly`: every ``zcache.function`` eager on this thread
``graph_depth``  how deep this thread is inside the dependency graph's lock
``jit_checks``   the checks of the XLA-compiled ``zcache.function`` body being traced
``calling_jit``  how many ``zcache.function`` calls that may compile with XLA run on this thread
===============  ==================================================================

The engine lock :data:`ENGINE_LOCK` (re-entrant) is held by every eager write of an
input, by every eager cache read from the validity check to the store, and around every
call of a traced ``zcache.function``: no value computed from an input that another thread
changes meanwhile is ever flagged valid, and a returned value never mixes old and new
inputs. Locks are always taken in the order engine lock, graph lock, cache locks (by
node id), so no two threads can deadlock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "CONTEXT",
    "ENGINE_LOCK",
    "backward_pass",
    "constant_data",
    "differentiating",
    "evaluation",
    "finding_invariants",
    "in_backward_pass",
    "outside_substitution",
    "record_read",
    "recording",
    "run_eagerly",
    "substitute",
    "substituted",
    "substituting",
    "wanted_parameters",
]

#: The engine lock (see the module docstring).
ENGINE_LOCK = threading.RLock()


class _Context(threading.local):
    """The per-thread state; ``__init__`` runs once in each thread that touches it."""

    def __init__(self) -> None:
        self.reads: list[set[Any]] = []
        self.substitutes: list[dict[Any, Any]] = []
        self.serving: tuple[list[Any], frozenset[int]] | None = None
        self.computing: list[Any] = []
        self.memo: dict[Any, Any] | None = None
        self.grad_params: list[frozenset[int] | None] = []
        self.traces: list[Any] = []
        self.journals: list[dict[int, Callable[[], Any]]] = []  # node id -> undo
        self.eager = False
        self.graph_depth = 0
        # (graph key, checks) of the XLA-compiled zcache.function body being traced: its
        # in-graph checks become outputs there instead of Assert ops (``_graph_checks.require``)
        self.jit_checks: list[tuple[int, list[Any]]] = []
        # > 0 while a zcache.function that may compile with XLA is called (always from eager
        # code): the XLA context then on the eager graph is zcache's (``refuse_unmanaged_xla``)
        self.calling_jit = 0
        # > 0 while a cache's miss branch is traced: data read there carries no gradient
        # (``constant_data``)
        self.constant_data = 0
        # > 0 while a cache's backward pass is built (``backward_pass``)
        self.backward_passes = 0


#: This thread's context.
CONTEXT = _Context()


# -- dependency discovery ------------------------------------------------------------------
@contextlib.contextmanager
def recording() -> Iterator[set[Any]]:
    """Collect every zcache object read inside the block (innermost block only)."""
    reads: set[Any] = set()
    CONTEXT.reads.append(reads)
    try:
        yield reads
    finally:
        CONTEXT.reads.pop()


def record_read(obj: Any) -> None:
    """Report that ``obj`` was read; called by ``value()`` of every zcache object."""
    stack = CONTEXT.reads
    if stack:
        stack[-1].add(obj)


# -- a backward pass at the forward pass's inputs -----------------------------------------
@contextlib.contextmanager
def substituted(values: dict[Any, Any]) -> Iterator[None]:
    """Inside the block, reading the input ``uid`` gives ``values[uid]`` (a tensor), not its Variable.

    Keys are node ids of Parameters, Data and caches (a cache's key stands in for its value),
    and ``("weights", uid)`` for the weights of a Data ``uid`` that has none of its own.

    A cache's backward pass recomputes its function at the inputs of its *forward* pass:
    an input changed in between (a persistent tape that spans a ``set_value``) must not
    leak into the gradient. Caches read inside the block recompute instead of reading
    their stored value (which belongs to the current inputs).
    """
    CONTEXT.substitutes.append(values)
    try:
        yield
    finally:
        CONTEXT.substitutes.pop()


@contextlib.contextmanager
def finding_invariants(varying: set[int]) -> Iterator[list[Any]]:
    """Inside a :func:`substituted` block: collect the caches that none of the inputs ``varying`` reaches.

    A batched evaluation (:mod:`zcache.scale`) substitutes each toy's parameters and events
    (``varying``; its fixed parameters are substituted too, but are the same for every toy):
    a cache that no varying input reaches has one value for every toy, so it is read once,
    outside the batch, and stands in for itself (see ``CachedTensor._recomputed``). Inside
    the block such a cache is read through itself (:func:`outside_substitution`), and a cache
    whose dependencies were never discovered is discovered by its recomputation here: no
    earlier evaluation of the loss is needed.
    """
    found: list[Any] = []
    CONTEXT.serving = (found, frozenset(varying))
    try:
        yield found
    finally:
        CONTEXT.serving = None


@contextlib.contextmanager
def outside_substitution() -> Iterator[None]:
    """Inside the block, no :func:`substituted` or :func:`finding_invariants` block is open.

    :func:`finding_invariants` reads a cache that no varying input reaches through the cache
    itself (a hit, or computed and stored at the current inputs), not recomputed at the
    substituted ones: its value is the same either way.
    """
    stack, serving = CONTEXT.substitutes, CONTEXT.serving
    CONTEXT.substitutes, CONTEXT.serving = [], None
    try:
        yield
    finally:
        CONTEXT.substitutes, CONTEXT.serving = stack, serving


def substitute(uid: Any) -> Any:
    """The tensor that stands in for input ``uid`` in a :func:`substituted` block, else None."""
    stack = CONTEXT.substitutes
    return stack[-1].get(uid) if stack else None


@contextlib.contextmanager
def constant_data() -> Iterator[None]:
    """Inside the block, ``Data.value()`` is stop-gradient-ed.

    A cache's miss branch is traced so: a gradient may leave it (a traced read whose miss
    gives TensorFlow's own gradient, ``read_in_graph_differentiably``), and TensorFlow's
    gradient of that ``tf.cond`` must fill the hit branch's gradient for every input the miss
    branch differentiates, which it cannot for a Variable of partly unknown shape (the data:
    ``set_data`` may change the number of events). The data never needs a gradient.
    """
    CONTEXT.constant_data += 1
    try:
        yield
    finally:
        CONTEXT.constant_data -= 1


@contextlib.contextmanager
def backward_pass() -> Iterator[None]:
    """Declare that a cache's backward pass is being built inside the block (see :func:`in_backward_pass`)."""
    CONTEXT.backward_passes += 1
    try:
        yield
    finally:
        CONTEXT.backward_passes -= 1


def in_backward_pass() -> bool:
    """Whether a cache's backward pass is being built on this thread."""
    return CONTEXT.backward_passes > 0


def substituting() -> bool:
    """Whether a :func:`substituted` block is open on this thread."""
    return bool(CONTEXT.substitutes)


def varies(uids: Iterable[int]) -> bool:
    """Whether one of the inputs ``uids`` is substituted in the innermost :func:`substituted` block.

    While :func:`finding_invariants` is open, whether one of them is among its ``varying``
    inputs (the block's stand-ins then include inputs that are the same for every evaluation).
    False outside a :func:`substituted` block.
    """
    serving = CONTEXT.serving
    if serving is not None:
        return not serving[1].isdisjoint(uids)
    stack = CONTEXT.substitutes
    return bool(stack) and any(uid in stack[-1] for uid in uids)


# -- evaluations and gradient scopes -------------------------------------------------------
@contextlib.contextmanager
def evaluation(fresh: bool = False) -> Iterator[None]:
    """One evaluation (of a loss, or of a bypassed cache): bypassed caches are computed once in it.

    Open only where no input changes and no gradient tape starts or stops: a tensor computed
    before a ``set_value``, or outside a tape, must not be reused after it. ``fresh``: a new
    evaluation even inside another (a backward pass at other inputs).
    """
    outer = CONTEXT.memo
    if outer is not None and not fresh:
        yield
        return
    CONTEXT.memo = {}
    try:
        yield
    finally:
        CONTEXT.memo = outer


@contextlib.contextmanager
def differentiating(params: Iterable[Any] | None) -> Iterator[None]:
    """Declare, on this thread, the parameters that gradients are taken with respect to.

    Inside, a cache attaches its gradient only for these (``None``: all its parameters,
    the safe default for user tapes). ``zcache.value_and_gradient`` sets it around its
    forward and backward pass, so a cache that depends on none of them, e.g. a column of
    fixed line-shape parameters in a fit of couplings, adds nothing to the gradient graph.
    Parameters may be given as objects with a ``node_id`` or as node ids.
    """
    ids = None if params is None else frozenset(p if isinstance(p, int) else p.node_id for p in params)
    CONTEXT.grad_params.append(ids)
    try:
        yield
    finally:
        CONTEXT.grad_params.pop()


def wanted_parameters(params: list[Any]) -> list[Any]:
    """The members of ``params`` that the innermost :func:`differentiating` scope asks for."""
    stack = CONTEXT.grad_params
    if not stack or stack[-1] is None:
        return params
    return [p for p in params if p.node_id in stack[-1]]


# -- the eager override ----------------------------------------------------------------------
@contextlib.contextmanager
def run_eagerly() -> Iterator[None]:
    """On this thread only, run every ``zcache.function`` eagerly (process-wide modes untouched).

    What :func:`zcache.precompute` needs to record a loss's reads: flipping the
    process-wide graph mode instead would race with fits in other threads.
    """
    old = CONTEXT.eager
    CONTEXT.eager = True
    try:
        yield
    finally:
        CONTEXT.eager = old
