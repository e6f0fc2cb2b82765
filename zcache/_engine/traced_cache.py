r"""A cache read inside a traced graph: ``tf.cond`` between the stored value and a compiled miss.

.. code-block:: text

    value = tf.cond(not flag, miss_branch, read_stored)

so the same graph serves a hit and a miss, and invalidation is a flag write that may
happen outside any trace. The miss branch (compute, store, then set the flag) is traced
once per cache into a function of its own (:class:`MissBranch`) and called from every
graph that reads the cache.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..exceptions import SecondOrderGradientError
from .cache_state import CacheState
from .context import constant_data, differentiating
from .tf_internals import is_second_order_cond_error, made_by_zcache, separately_compiled, stop_recording
from .trace import isolated_trace
from .traced_checks import refuse_unmanaged_xla

__all__ = ["MissBranch", "read_in_graph", "read_in_graph_differentiably"]

_SECOND_ORDER_MSG = (
    "Nested tf.GradientTape (second derivatives) through the CachedTensor '{name}' inside a "
    "traced function is not supported: TensorFlow cannot build the second-order gradient of a "
    "tf.cond that reads shape-relaxed Variables. Use zcache.hessian(func, params) (central "
    "differences of exact gradients; works traced and eager), or take the nested tapes eagerly."
)


class MissBranch:
    """A cache's miss branch (compute and store), traced once and shared by every graph.

    Without it each graph would inline the miss branch, and the miss branches of every
    cache below, once per path through the dependency graph (a K x K matrix of integrals
    over K columns traced each column K times).

    Parameters
    ----------
    compute_and_store : bound method
        Computes the cache's value and stores it; held weakly (the function must not keep
        the cache alive).
    """

    def __init__(self, compute_and_store: Callable[[], tf.Tensor]) -> None:
        self._method = weakref.WeakMethod(compute_and_store)
        self._fn: Any = None
        self._differentiable: bool | None = None

    def function(self) -> Any:
        """The compiled branch (traced on its first call)."""
        fn = self._fn
        if fn is None:
            method = self._method

            def miss() -> tf.Tensor:
                # No trace's mutations enter a shared function. No cache read here attaches a
                # gradient, and the data carry none: the only gradient that leaves the branch
                # (read_in_graph_differentiably) is that of the parameters read directly.
                with isolated_trace(), differentiating(()), constant_data():
                    return method()()

            fn = self._fn = separately_compiled(miss)
        return fn

    def trace(self) -> None:
        """Trace the branch now (its reads, and the caches it creates, become known)."""
        self.concrete()

    def concrete(self) -> Any:
        """The traced branch's concrete function (traced now if it was not), traced with no tape recording."""
        with stop_recording():
            return self.function().get_concrete_function()

    def drop(self) -> None:
        """Forget the traced branch (the next read traces it anew)."""
        self._fn = None
        self._differentiable = None

    def untracked_variables(self) -> list[str]:
        """Names of the ``tf.Variable`` s the branch reads that zcache did not make (the user's own).

        zcache cannot invalidate the cache when one of them is assigned; the traced branch's
        captures are where such a read shows.
        """
        return sorted({v.name for v in self.concrete().variables if not made_by_zcache(v)})

    def differentiable(self) -> bool:
        """Whether a ``tf.cond`` between this branch and a stored value should take TensorFlow's gradient.

        Not where TensorFlow cannot build it: the branch's value depends, through ops with a
        gradient, on a Variable of partly unknown shape other than the data (read as constants
        here; a user's own Variable read in a cache's function), and the cond's gradient must
        fill the hit branch's gradient of that Variable with zeros of its shape. Nor where the
        branch calls other functions (the caches below it, a fused amplitude program): its
        gradient then builds a forward and backward pair of each again, beside the backward
        pass a hit needs anyway (``design/invariants.md``, "Gradient rules").
        """
        if self._differentiable is None:
            concrete = self.concrete()
            flat = not concrete.graph.as_graph_def().library.function
            self._differentiable = flat and not _depends_on_relaxed_variables(concrete)
        return self._differentiable


def _depends_on_relaxed_variables(concrete: Any) -> bool:
    """Whether ``concrete``'s outputs depend, other than through StopGradient, on a float Variable of unknown shape."""
    relaxed = {id(v.handle) for v in concrete.variables
               if (v.dtype.is_floating or v.dtype.is_complex) and not v.shape.is_fully_defined()}
    graph = concrete.graph
    todo = [internal for external, internal in graph.captures if id(external) in relaxed]
    outputs = {id(t) for t in graph.outputs}
    seen: set[int] = set()
    while todo:
        tensor = todo.pop()
        if id(tensor) in outputs:
            return True
        for op in tensor.consumers():
            if op.type != "StopGradient" and id(op) not in seen:
                seen.add(id(op))
                todo.extend(op.outputs)
    return False


def read_in_graph(state: CacheState, miss: MissBranch) -> tf.Tensor:
    """The cache's value inside a trace, without a gradient (see ``_cache_gradient``).

    Parameters
    ----------
    state : CacheState
        The cache's flag, stored value and counters.
    miss : MissBranch
        Its compiled miss branch, traced before (:meth:`MissBranch.trace`).

    Returns
    -------
    tf.Tensor
        The stored value after a hit, the new value after a miss (stop-gradient-ed).
    """
    # Not recorded on tapes: the output is stop_gradient-ed anyway (the gradient comes
    # from _cache_gradient), and a tape that records the cond, e.g. one open while the
    # function is traced, makes TensorFlow build the cond's gradient, which fails.
    with stop_recording():
        out = _cond(state, miss, tf.logical_not(state.flag.value()), differentiable=False)
    return tf.stop_gradient(out)


def read_in_graph_differentiably(state: CacheState, miss: MissBranch) -> tuple[tf.Tensor, tf.Tensor]:
    """The cache's value inside a trace, with TensorFlow's gradient of a miss, and whether it hit.

    For a cache whose parameters its function reads directly (no cache between them,
    :meth:`DependencyGraph.caches_with_parameters_read_by`): the compiled miss branch's own
    gradient is then the cache's whole gradient, and TensorFlow's gradient of the cond keeps
    the miss branch's intermediates, so a miss with a gradient costs what the uncached
    function does. The hit branch has no gradient; ``_cache_gradient`` adds it, on a hit only.

    Returns
    -------
    (tf.Tensor, tf.Tensor)
        The value (differentiable after a miss), and the flag as read: True for a hit.
    """
    hit = state.flag.value()
    return _cond(state, miss, tf.logical_not(hit), differentiable=True), hit


def _cond(state: CacheState, miss: MissBranch, missed: tf.Tensor, differentiable: bool) -> tf.Tensor:
    refuse_unmanaged_xla(f"CachedTensor '{state.name}' is read")
    state.traced = True
    static_shape: list[tf.TensorShape] = []

    def compute_and_store() -> tf.Tensor:
        out = miss.function()()
        static_shape.append(out.shape)
        return state.validated_in_graph(out)

    def hit() -> tf.Tensor:
        out = state.hit_in_graph()
        return tf.stop_gradient(out) if differentiable else out

    # compute_and_store is the true branch so that it is traced first: it creates the
    # value Variable on the very first trace, before the hit branch needs it.
    try:
        out = tf.cond(missed, compute_and_store, hit)
    except ValueError as err:
        if is_second_order_cond_error(err):
            raise SecondOrderGradientError(_SECOND_ORDER_MSG.format(name=state.name)) from err
        raise
    out.set_shape(static_shape[0])
    return out
