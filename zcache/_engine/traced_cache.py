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
from .context import differentiating
from .tf_internals import is_second_order_cond_error, separately_compiled, stop_recording
from .trace import isolated_trace
from .traced_checks import refuse_unmanaged_xla

__all__ = ["MissBranch", "read_in_graph"]

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

    def function(self) -> Any:
        """The compiled branch (traced on its first call)."""
        fn = self._fn
        if fn is None:
            method = self._method

            def miss() -> tf.Tensor:
                # no trace's mutations enter a shared function; no gradient leaves a miss branch
                with isolated_trace(), differentiating(()):
                    return method()()

            fn = self._fn = separately_compiled(miss)
        return fn

    def trace(self) -> None:
        """Trace the branch now (its reads, and the caches it creates, become known)."""
        with stop_recording():
            self.function().get_concrete_function()

    def drop(self) -> None:
        """Forget the traced branch (the next read traces it anew)."""
        self._fn = None


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
    refuse_unmanaged_xla(f"CachedTensor '{state.name}' is read")
    state.traced = True
    static_shape: list[tf.TensorShape] = []

    def compute_and_store() -> tf.Tensor:
        out = miss.function()()
        static_shape.append(out.shape)
        return state.validated_in_graph(out)

    # compute_and_store is the true branch so that it is traced first: it creates the
    # value Variable on the very first trace, before the hit branch needs it.
    try:
        # Not recorded on tapes: the output is stop_gradient-ed anyway (the gradient comes
        # from _cache_gradient), and a tape that records the cond, e.g. one open while the
        # function is traced, makes TensorFlow build the cond's gradient, which fails.
        with stop_recording():
            out = tf.cond(tf.logical_not(state.flag.value()), compute_and_store, state.hit_in_graph)
    except ValueError as err:
        if is_second_order_cond_error(err):
            raise SecondOrderGradientError(_SECOND_ORDER_MSG.format(name=state.name)) from err
        raise
    out = tf.stop_gradient(out)
    out.set_shape(static_shape[0])
    return out
