"""What Parameter and Data share: the write lock, invalidation of dependents, the backing Variable.

Both are inputs of the dependency graph backed by a ``tf.Variable`` (held as ``_var``), and
both write it the same way: eagerly under :data:`WRITES`, then :func:`input_changed`; inside a
trace with :func:`invalidate_in_graph`'s flag writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from .cache_state import invalidate_eagerly
from .context import ENGINE_LOCK
from .dependencies import GRAPH
from .tf_internals import forward_accumulator_watches

__all__ = ["WRITES", "backing_variable", "forward_mode_watches", "input_changed", "invalidate_in_graph", "variable_name"]

# Eager writes hold the engine lock (see _context), so that a Parameter's Variable and its
# Python mirror change together (two threads setting one parameter could otherwise leave a
# stale mirror: a later set_value of the mirrored value would then be skipped), and so that
# no cache flags valid a value computed from an input that changed meanwhile.
WRITES = ENGINE_LOCK


def input_changed(uids: set[int] | tuple[int, ...]) -> None:
    """Record an eager input change and invalidate the caches ``uids``."""
    GRAPH.input_changes += 1
    if uids:
        invalidate_eagerly(GRAPH.objects(uids))


def invalidate_in_graph(uid: int, unchanged: tf.Tensor | None) -> list[Any]:
    """Add flag writes for the dependents of ``uid`` to the graph being traced."""
    caches = GRAPH.objects(GRAPH.dependent_caches(uid))
    for cache in caches:
        cache.state.invalidate_in_graph(unchanged)
    return caches


def variable_name(name: str) -> str:
    """``name`` made a valid name for a ``tf.Variable``."""
    cleaned = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    return cleaned if cleaned and cleaned[0].isalnum() else f"v{cleaned}"


def backing_variable(obj: Any) -> tf.Variable:
    """The ``tf.Variable`` behind ``obj`` (a Parameter or Data), read neither as a dependency nor substituted.

    For the engine (gradients, snapshots); users read ``obj.variable``.
    """
    return obj._var


def forward_mode_watches(uids: Iterable[int]) -> bool:
    """Whether an active ``tf.autodiff.ForwardAccumulator`` watches any of these inputs (Parameter and Data ids).

    What a cache read and a ``zcache.function`` call ask before they serve a stored value or a traced
    graph, which carry backward gradients only (``tf_internals`` item 19).
    """
    variables = [backing_variable(o) for o in GRAPH.objects(uids)]
    return bool(variables) and forward_accumulator_watches(variables)
