r"""Real and imaginary parts and reciprocals spelled so that TensorFlow converts them to XLA quickly.

TensorFlow turns a graph into XLA's HLO op by op. Most ops have a converter of their own (Mul,
Cast, Complex, Conj, Inv), but TensorFlow 2.21 converts some through a separate MLIR legalization
per op (``MlirXlaOpKernel``), which costs tens of times more each: Real, Imag, Reciprocal, Sqrt,
Exp, Cos, Abs, IsFinite and more (:data:`SLOW_TO_CONVERT`, measured by
``benchmarks/_xla_convert.py``). The conversion runs at the first call of each compiled program
in every process, also when the persistent compile cache then finds the program, because the
cache is keyed by the converted HLO. A bridged model's fused programs held dozens of such ops,
most of them Real and Imag (many from TensorFlow's gradient of ``tf.complex``): a large part of
its first call (``design/decisions/0004-compile-cache.md``).

Inside an XLA context (:func:`zcache._engine.tf_internals.xla_calling_graph`) the functions here
spell each op with converters of the fast kind whose gradients use fast ones too, and XLA computes
the same values to the last bit: a real part is a Cast to the real type (its gradient a Cast
back), an imaginary part the real part of ``-i z`` (exact for finite ``z``), a reciprocal the op's
old name Inv (the same HLO). Outside XLA each is TensorFlow's own op. The gradient of
``tf.complex`` itself takes its parts the same way inside XLA (``tf_internals`` item 17).

Not spelled otherwise: Sqrt. Its one fast equivalent, ``pow(x, 1/2)`` (which XLA simplifies to the
square root), has a gradient through ``pow(x, -1/2)`` that XLA computes as a general power, ten
times slower per element than Sqrt's own gradient: a program's every call would pay for a
conversion that happens once per process.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .tf_internals import leave_to_python, xla_calling_graph

__all__ = ["SLOW_TO_CONVERT", "imag", "real", "reciprocal", "slow_to_convert"]

#: Op types that TensorFlow 2.21 converts to XLA through a per-op MLIR legalization (tens of
#: times slower than the others; its ``unary_ops.cc`` registers them with
#: ``MlirXlaOpKernel``). Complex is not among them, but its gradient is (Real and Imag).
SLOW_TO_CONVERT = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Exp", "Expm1", "Floor",
    "Imag", "IsFinite", "IsInf", "IsNan", "Lgamma", "Log1p", "Real", "Reciprocal", "Rsqrt", "Sigmoid",
    "Sign", "Sinh", "Sqrt", "Tanh",
})


def _in_xla() -> bool:
    return xla_calling_graph() is not None


def real(z: tf.Tensor) -> tf.Tensor:
    """The real part of a complex tensor (``tf.math.real``).

    Parameters
    ----------
    z : tf.Tensor
        complex64 or complex128.

    Returns
    -------
    tf.Tensor
        float32 or float64, the same values as ``tf.math.real(z)`` and the same gradient.

    Examples
    --------
    >>> import tensorflow as tf
    >>> from zcache._engine import xla_ops
    >>> f = tf.function(lambda z: (xla_ops.real(z), xla_ops.imag(z)), jit_compile=True)
    >>> [float(t) for t in f(tf.constant(3.0 - 4.0j, tf.complex128))]
    [3.0, -4.0]
    """
    if _in_xla():
        # a Cast to a real type keeps the real part; its gradient is a Cast back
        return tf.raw_ops.Cast(x=z, DstT=z.dtype.real_dtype)
    return tf.math.real(z)


def imag(z: tf.Tensor) -> tf.Tensor:
    """The imaginary part of a complex tensor (``tf.math.imag``): see :func:`real`."""
    if _in_xla():
        return tf.raw_ops.Cast(x=z * tf.constant(-1j, z.dtype), DstT=z.dtype.real_dtype)
    return tf.math.imag(z)


def reciprocal(x: tf.Tensor) -> tf.Tensor:
    """``tf.math.reciprocal``; under XLA its old name ``Inv``, which XLA converts as ``1 / x`` directly.

    The same HLO as Reciprocal's, and the same gradient (ReciprocalGrad, ``-dy y^2``; for a
    complex ``x`` the conjugated one of ``tf_internals`` item 10). Not the division ``1 / x``
    itself: its gradient divides twice per element (a fused D0 group's backward program ran
    about 15 % slower).
    """
    if _in_xla():
        return tf.raw_ops.Inv(x=x)
    return tf.math.reciprocal(x)


def slow_to_convert(graph: Any) -> list[str]:
    """The ops of ``graph``, and of the functions it calls, whose types are :data:`SLOW_TO_CONVERT`.

    Parameters
    ----------
    graph : tf.Graph
        A traced graph (a concrete function's ``graph``).

    Returns
    -------
    list of str
        ``"Type:name"`` for an op of ``graph`` itself, ``"function/Type:name"`` for one inside a
        called function; empty when XLA converts every op quickly.
    """
    graph_def = graph.as_graph_def()
    found = [f"{node.op}:{node.name}" for node in graph_def.node if node.op in SLOW_TO_CONVERT]
    for func in graph_def.library.function:
        found += [f"{func.signature.name}/{node.op}:{node.name}" for node in func.node_def if node.op in SLOW_TO_CONVERT]
    return found


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
