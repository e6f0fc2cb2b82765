r"""Fused line shapes: a group's amplitudes as one XLA program forward, and one XLA program backward.

A coherent sum's group of amplitudes (one resonance's line shape times its angular factors, say) is a few
hundred element-wise operations over (H, K, N) complex tensors that depend on a handful of real parameters
(a mass, a width). Run as TensorFlow kernels, each operation is a pass over memory, and TensorFlow's
backward pass reads every intermediate the forward pass kept.

:func:`fused_program` turns the group's function ``fn(stack, events, values)`` into a program whose
forward pass is ``fn`` compiled with XLA (one loop over the events) and whose backward pass is a second
XLA program that recomputes ``fn`` and differentiates it in the same loop (rematerialization): nothing
but the inputs is kept between the two, and each is one pass over memory. The parameters' cotangents
are those of ``fn``: :math:`\bar v_j = \mathrm{Re} \sum \bar A \, \overline{\partial A / \partial v_j}`.

A caller whose parameters enter many element-wise ops should broadcast them over the events inside
``fn`` (``SymbolicModel`` does): the backward program then reduces each parameter's cotangent over the
events once, not once per use.

Second derivatives stay exact: the backward program has a gradient of its own, reverse over reverse
through the plain ``fn`` (what TensorFlow computes without fusing), so a Hessian costs what it did.

Per call, fusing wins at some sizes and models and loses at others (the compiled forward pass is
faster, the compiled backward pass was slower until the parameters were widened over the events);
whole fits in fresh processes favour fusing wherever line shapes float, so ``SymbolicModel``'s
default ``fused="auto"`` fuses exactly those groups (the measurements: ``benchmarks/RESULTS.md``,
"Fused line shapes" and "Fused line shapes: fits"; ``design/decisions/0007-fused-line-shapes.md``).
Tried and not kept:
derivatives in the forward pass by forward-mode accumulators (the backward pass a contraction), slower
still; XLA on the forward pass alone with TensorFlow differentiating it, which must return every
intermediate.

Gradients with respect to the data (``stack``, ``events``) are not propagated: they are event columns,
which no fit differentiates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from .._engine.tf_internals import leave_to_python, recording_resumed, zcache_graphs

__all__ = ["fused_program"]


def fused_program(fn: Callable[[tf.Tensor, tf.Tensor, list[tf.Tensor]], Any],
                  signature: Sequence[Any], n_values: int) -> Any:
    """``fn`` as a ``tf.function`` of the same ``signature``: XLA forward, XLA (recompute + reverse mode) backward.

    Parameters
    ----------
    fn : callable
        ``fn(stack, events, values) -> A``: ``stack`` and ``events`` tensors (data; ``events`` the
        (N, columns) matrix as stored, sliced inside the program, where XLA reads each column in the
        loops that use it: sliced outside, each column was a strided copy), ``values`` a list of
        ``n_values`` real float64 scalars;
        ``A`` a tensor, or a list of tensors of one shape, which the program returns stacked along a new
        first axis. The stack is made outside
        XLA: XLA's CPU code for a concatenation of fused operands evaluates each operand's expression
        per output element, without vectorizing, and recomputes what the operands share (slower
        than a list of outputs stacked after: ``design/decisions/0009``).
    signature : sequence
        ``fn``'s input signature, ``[stack_spec, events_spec, [value_specs]]``.
    n_values : int
        The number of values (at least one).

    Returns
    -------
    tf.types.experimental.GenericFunction
        Called as ``fn`` (a list output stacked); equal to it, with the same first and second
        derivatives with respect to ``values``.

    Examples
    --------
    >>> import tensorflow as tf
    >>> def line(stack, events, values):
    ...     m, g = values
    ...     z = 1.0 / tf.complex(m**2 - events[:, 0] ** 2, -m * g)
    ...     return tf.reshape(z, [1, -1, 1]) * stack[0][None, :, None]
    >>> spec = [tf.TensorSpec([1, None], tf.complex128), tf.TensorSpec([None, 1], tf.float64),
    ...         [tf.TensorSpec([], tf.float64)] * 2]
    >>> fused = fused_program(line, spec, 2)
    >>> x = tf.constant([[0.7], [0.8], [0.9]], tf.float64)
    >>> stack = tf.ones([1, 3], tf.complex128)
    >>> m, g = tf.constant(0.8, tf.float64), tf.constant(0.1, tf.float64)
    >>> with tf.GradientTape() as tape:
    ...     tape.watch([m, g])
    ...     loss = tf.reduce_sum(tf.abs(fused(stack, x, [m, g])) ** 2)
    >>> with tf.GradientTape() as plain:
    ...     plain.watch([m, g])
    ...     reference = tf.reduce_sum(tf.abs(line(stack, x, [m, g])) ** 2)
    >>> [float(abs(a - b) / abs(b)) < 1e-12 for a, b in zip(tape.gradient(loss, [m, g]),
    ...                                                       plain.gradient(reference, [m, g]))]
    [True, True]
    """
    if n_values < 1:
        raise ValueError("fused_program needs at least one value to differentiate by.")

    zero = tf.UnconnectedGradients.ZERO

    def stacked(out: Any) -> tf.Tensor:
        return tf.stack(out) if isinstance(out, (list, tuple)) else out

    def vjp(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor], da: tf.Tensor) -> tf.Tensor:
        # (P,): the values' cotangents, fn recomputed and differentiated in one program. Its trace may
        # be made where tapes are paused (a gradient taken inside a cache's miss branch, built with
        # tf_internals.stop_recording): paused, this tape would record nothing and give zeros (item 14).
        with zcache_graphs():  # zcache's gradients (tf_internals items 10, 17): this program is compiled
            with recording_resumed(), tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(values)
                a = stacked(fn(stack, events, values))  # (in XLA the stack is dead code: only its gradient is used)
            return tf.stack(tape.gradient(a, values, output_gradients=da, unconnected_gradients=zero))

    forward = tf.function(fn, jit_compile=True, autograph=False)
    backward = tf.function(vjp, jit_compile=True, autograph=False)

    def body(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor]) -> tf.Tensor:
        # custom_gradient takes tensors only: (stack, events, *values)
        @tf.custom_gradient
        def fused(st: tf.Tensor, ev: tf.Tensor, *vals: tf.Tensor) -> Any:
            def grad(da: tf.Tensor) -> tuple:
                bar = cotangents(da, st, ev, *vals)
                return (None, None, *tf.unstack(bar, n_values))

            return stacked(forward(st, ev, list(vals))), grad

        return fused(stack, events, *values)

    @tf.custom_gradient
    def cotangents(da: tf.Tensor, *flat: tf.Tensor) -> Any:
        # Local copies: custom_gradient hands this function the caller's tensors (of another graph), and
        # its own backward pass may be built in a graph that reaches only tensors made here.
        da, st, ev, *vals = [tf.identity(t) for t in (da, *flat)]

        def second_order(u: tf.Tensor) -> tuple:
            # reverse over reverse through the plain fn (as without fusing)
            with zcache_graphs():
                with tf.GradientTape(watch_accessed_variables=False) as tape:
                    tape.watch([da, *vals])
                    bar = vjp(st, ev, vals, da)
                d_da, *d_vals = tape.gradient(bar, [da, *vals], output_gradients=u, unconnected_gradients=zero)
            return (d_da, None, None, *d_vals)

        return backward(st, ev, vals, da), second_order

    return tf.function(body, input_signature=signature, autograph=False)


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
