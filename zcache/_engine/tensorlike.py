"""Let Parameters, Data and CachedTensors stand in for tensors.

Each class defines ``value()``; this mixin routes arithmetic, ``tf.convert_to_tensor``
and ``numpy.asarray`` through it, so ``mu * x`` and ``tf.exp(mu)`` work and every
such use is recorded as a read for dependency discovery.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import tensorflow as tf


class TensorLike:
    """Mixin: arithmetic and conversions through ``self.value()``."""

    __slots__ = ()

    def value(self) -> tf.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def dtype(self) -> tf.DType:
        return self.value().dtype

    @property
    def shape(self) -> tf.TensorShape:
        return self.value().shape

    def numpy(self) -> np.ndarray:
        """The current value as a numpy array (eager only)."""
        return self.value().numpy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self.numpy())
        return arr.astype(dtype) if dtype is not None else arr

    def __float__(self) -> float:
        return float(self.numpy())

    def __bool__(self) -> bool:
        # Truthiness of a tensor is ambiguous; refusing is safer than `if param:` bugs.
        raise TypeError(f"{type(self).__name__} has no truth value; compare its value() instead.")

    # arithmetic: delegate to the tensor
    def __neg__(self) -> tf.Tensor:
        return -self.value()

    def __abs__(self) -> tf.Tensor:
        return abs(self.value())

    def __pow__(self, other: Any) -> tf.Tensor:
        return self.value() ** other

    def __rpow__(self, other: Any) -> tf.Tensor:
        return other ** self.value()

    def __getitem__(self, item: Any) -> tf.Tensor:
        return self.value()[item]

    def __tf_tracing_type__(self, context: Any) -> tf.types.experimental.TraceType:
        # As a tf.function argument a zcache object is keyed by identity: a new value
        # never retraces, another object traces its own graph (zfit #470/#593 class of bugs).
        return _IdentityTraceType(self)


class _IdentityTraceType(tf.types.experimental.TraceType):
    """Trace type of one zcache object: equal only to itself, never converted to a tensor."""

    def __init__(self, obj: Any) -> None:
        self._ref = weakref.ref(obj)
        self._id = id(obj)

    def is_subtype_of(self, other: Any) -> bool:
        return self == other

    def most_specific_common_supertype(self, others: Any) -> Any:
        return self if all(self == other for other in others) else None

    def placeholder_value(self, placeholder_context: Any = None) -> Any:
        return self._ref()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _IdentityTraceType)
            and self._id == other._id
            and self._ref() is other._ref()
            and self._ref() is not None
        )

    def __hash__(self) -> int:
        return self._id


def _binary(name: str) -> None:
    def op(self: TensorLike, other: Any) -> tf.Tensor:
        return getattr(self.value(), name)(other)

    op.__name__ = name
    setattr(TensorLike, name, op)


for _name in (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__",
    "__lt__", "__le__", "__gt__", "__ge__",
):
    _binary(_name)


class StandIn(TensorLike):
    """A tensor in a Variable's place: what ``Parameter.variable`` gives inside a backward pass.

    A cache's backward pass recomputes its function at the inputs of the forward pass (see
    ``_context.substituted``); a function that reads ``param.variable`` must see that value
    too, not the Variable's current one. It behaves like the Variable in arithmetic, in
    TensorFlow ops and for ``value()`` / ``read_value()``.
    """

    __slots__ = ("_tensor", "name")

    def __init__(self, tensor: tf.Tensor) -> None:
        self._tensor = tensor
        self.name = "stand-in"

    def value(self) -> tf.Tensor:
        return self._tensor

    def read_value(self) -> tf.Tensor:
        return self._tensor


def _convert(value: TensorLike, dtype: Any = None, name: Any = None, as_ref: bool = False) -> tf.Tensor:
    out = value.value()
    if dtype is not None and out.dtype != dtype:
        out = tf.cast(out, dtype)
    return out


tf.register_tensor_conversion_function(TensorLike, _convert)
