r"""The gradient through a cache: a custom-gradient identity on the values of its parameters.

TensorFlow cannot differentiate through the read of a Variable, so a cache's output is
wrapped in a ``tf.custom_gradient`` identity whose inputs are the values of every
parameter the cache depends on (transitively). Its backward pass recomputes the cache's
function under a tape and returns the vector-Jacobian product

.. math:: \bar p_i = \sum_k \bar y_k \, \partial y_k / \partial p_i ,

so a hit and a miss give the same gradient, eagerly and traced, at no cost when no
gradient is asked for.

If an input changed between the forward and the backward pass (a persistent tape that
spans a ``set_value``; ``GRAPH.input_changes`` moved), the backward pass recomputes the
function at the forward pass's inputs instead, substituting every input ancestor by its
forward value (:func:`zcache._engine.context.substituted`). So it always does for a forward
pass traced in a function whose gradient is taken by a tape outside it (an eager tape around
a call of a ``zcache.function`` or a plain ``tf.function``): TensorFlow builds that backward
pass once, as a function of its own, when the first call is recorded, and runs it after every
later call, whatever was set between the call and ``tape.gradient``; a comparison of
``GRAPH.input_changes`` made while it is built says nothing about those runs (found by
``make stress``: such a gradient was taken at the values set after the call). So it does
for a cache read inside a user's ``tf.cond`` or loop: the backward pass is then built in a control-flow
gradient graph, which cannot capture the inputs' Variables
(:func:`zcache._engine.tf_internals.inside_control_flow`). And so it does inside the
vectorized loop of ``tape.jacobian`` (a Hessian: the second-order pass calls the backward
pass again wherever the loss is not linear in the cache), which cannot vectorize the
``tf.cond`` and store of the caches below
(:func:`zcache._engine.tf_internals.inside_vectorized_loop`).
"""

from __future__ import annotations

import weakref
from typing import Any

import tensorflow as tf

from ..exceptions import ForwardModeError, ZCacheError
from .context import backward_pass, constant_data, differentiating, evaluation, recording, substituted, wanted_parameters
from .dependencies import GRAPH
from .inputs import backing_variable
from .tf_internals import (
    built_inside,
    inside_control_flow,
    inside_vectorized_loop,
    tape_may_record,
    tie_gradient_to_graph,
    zcache_graphs,
)

__all__ = ["with_gradient"]


def with_gradient(cache: Any, out: tf.Tensor, hit: tf.Tensor | None = None) -> tf.Tensor:
    """``out`` (the value of ``cache``, without a gradient) with the cache's exact gradient attached.

    Parameters
    ----------
    cache : CachedTensor
        The cache whose value ``out`` is.
    out : tf.Tensor
        Its value, as read (a hit) or computed (a traced miss), stop-gradient-ed; or, with
        ``hit``, the output of ``read_in_graph_differentiably``, which carries TensorFlow's
        gradient of a miss.
    hit : tf.Tensor, optional
        With a differentiable ``out``: whether the read hit. The backward pass then passes
        the incoming gradient on to ``out`` and recomputes only after a hit (it gives zeros
        after a miss, whose gradient flows through ``out``).

    Returns
    -------
    tf.Tensor
        ``out``, differentiable w.r.t. the parameters the innermost ``differentiating``
        scope asks for (all of the cache's parameters by default).
    """
    params = wanted_parameters(GRAPH.objects(GRAPH.ancestor_parameters(cache.node_id)))
    if not params:
        return out
    variables = [backing_variable(p) for p in params]
    ids = frozenset(p.node_id for p in params)  # not the Parameters: a kept graph must not keep them
    # The inputs of this forward pass. A persistent tape may ask for the gradient after an
    # input changed (set_value between the forward pass and tape.gradient): the backward
    # pass must then recompute func at these values, not at the current ones.
    inputs = GRAPH.objects(GRAPH.ancestor_inputs(cache.node_id))
    forward_values = [v.value() for v in variables]
    others = {o.node_id: backing_variable(o).value() for o in inputs if o.node_id not in ids}
    generation = GRAPH.input_changes
    # Weakly: inside a trace, tf.custom_gradient registers vjp in TensorFlow's global
    # gradient registry for good, which would keep this cache, and all it reads, alive.
    ref, name = weakref.ref(cache), cache.name
    uids = [p.node_id for p in params]
    nested = tf.inside_function() and inside_control_flow()  # see the module docstring
    # the graph of a traced forward pass (weakly: it keeps this closure): a backward pass built outside
    # it runs after later calls too
    forward_graph = weakref.ref(tf.compat.v1.get_default_graph()) if tf.inside_function() else None

    def backward(dy: tf.Tensor, param_values: tuple[tf.Tensor, ...]) -> list[tf.Tensor]:
        # no gradient w.r.t. the data (nor a second-order one through them); the caches read here
        # take this custom gradient too (in_backward_pass)
        with constant_data(), backward_pass(), zcache_graphs():
            return recomputed(dy, param_values)

    def recomputed(dy: tf.Tensor, param_values: tuple[tf.Tensor, ...]) -> list[tf.Tensor]:
        cache = ref()
        if cache is None:
            raise ZCacheError(
                f"CachedTensor '{name}' was garbage-collected, but a graph that read it is "
                "being differentiated; keep the cache alive as long as its graphs are used."
            )
        # No input changed since the forward pass, and the caches below may be read here: not
        # inside control flow, nor in a vectorized loop's body (a second derivative with
        # tape.jacobian, which cannot vectorize a cache's store).
        if (GRAPH.input_changes == generation and not nested and not inside_vectorized_loop()
                and (forward_graph is None or built_inside(forward_graph()))):
            with differentiating(ids), tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                with recording():  # reads here are not new dependencies
                    y = tf.convert_to_tensor(cache.func())
            grads = tape.gradient(y, variables, output_gradients=tf.cast(dy, y.dtype))
        else:  # recompute at the forward pass's inputs (inner caches recompute too)
            stand_ins = dict(others)
            stand_ins.update(zip(uids, param_values, strict=True))
            with differentiating(ids), tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(param_values)
                with substituted(stand_ins), recording(), evaluation(fresh=True):
                    y = tf.convert_to_tensor(cache.func())
            grads = tape.gradient(y, list(param_values), output_gradients=tf.cast(dy, y.dtype))
        return [tf.zeros_like(v) if g is None else tf.cast(g, v.dtype)
                for g, v in zip(grads, param_values, strict=True)]

    if hit is None:

        @tf.custom_gradient
        def cached_value(*param_values: tf.Tensor) -> Any:
            return tf.identity(out), lambda dy: backward(dy, param_values)

        result = cached_value(*forward_values)
    else:
        # out carries the miss branch's own gradient; the recomputation is needed after a hit only
        @tf.custom_gradient
        def read(value: tf.Tensor, *param_values: tf.Tensor) -> Any:
            def vjp(dy: tf.Tensor) -> list[tf.Tensor]:
                try:
                    grads = tf.cond(hit, lambda: backward(dy, param_values),
                                    lambda: [tf.zeros_like(v) for v in param_values])
                except AttributeError as err:  # see _forward_mode_error
                    if tape_may_record():
                        raise _forward_mode_error(name) from err
                    raise
                return [dy, *grads]

            return tf.identity(value), vjp

        result = read(out, *forward_values)
    if tf.inside_function():
        tie_gradient_to_graph(result)
    return result


def _forward_mode_error(name: str) -> ForwardModeError:
    # A plain tf.function traced without a forward accumulator and called under one: TensorFlow
    # builds the call's JVP from the backward functions recorded in its graph, with the
    # accumulator's eager tangents, and the cache's tf.cond there fails ("Tensor.graph is undefined
    # when eager execution is enabled"). A read traced under the accumulator, and a zcache.function
    # called under one, compute the cache directly instead (CachedTensor._forward_mode).
    return ForwardModeError(
        f"CachedTensor '{name}' is read in a tf.function traced without a tf.autodiff.ForwardAccumulator "
        "and now called under one; a cache in such a graph has a backward gradient only. Wrap the function "
        "with zcache.function (which then runs it eagerly), call it eagerly under the accumulator, or trace "
        "a new tf.function under the accumulator."
    )
