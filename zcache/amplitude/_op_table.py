"""The SymPy -> TensorFlow op table and the value helpers it shares with the translator and the jet rules.

A value is a Python number (a constant) or a float64 / complex128 tensor; the helpers keep
constants as numbers and promote a real tensor to complex only where the other operand is.
"""

from __future__ import annotations

import cmath
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine import xla_ops
from .._engine.tf_internals import leave_to_python
from ..exceptions import SymbolicError

# integer exponents up to this are computed by multiplications (numpy's x**n does the same)
_MAX_MUL_POWER = 8


def load_sympy() -> Any:
    try:
        import sympy
    except ImportError as err:  # pragma: no cover - [sympy] is part of [dev]
        raise SymbolicError("zcache.amplitude's SymPy bridge needs SymPy: pip install zcache[sympy].") from err
    return sympy


def short(node: Any, limit: int = 60) -> str:
    text = str(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------
# values: Python numbers (constants) or float64 / complex128 tensors
# ---------------------------------------------------------------------------------------
def is_complex(v: Any) -> bool:
    return isinstance(v, complex) or (isinstance(v, tf.Tensor) and v.dtype.is_complex)


def to_tensor(v: Any, complex_: bool) -> tf.Tensor:
    if isinstance(v, (int, float, complex)):
        return tf.constant(complex(v) if complex_ else float(v), tf.complex128 if complex_ else tf.float64)
    if complex_ and not v.dtype.is_complex:
        return tf.complex(v, tf.zeros_like(v))
    return v


def binary(a: Any, b: Any, op: Any) -> Any:
    if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)):
        return op(a, b)
    c = is_complex(a) or is_complex(b)
    return op(to_tensor(a, c), to_tensor(b, c))


def mul(a: Any, b: Any) -> Any:
    return binary(a, b, lambda x, y: x * y)


def add(a: Any, b: Any) -> Any:
    return binary(a, b, lambda x, y: x + y)


def integer_power(x: Any, n: int) -> Any:
    if isinstance(x, (int, float, complex)):
        return x**n
    if n == 0:
        return tf.ones_like(x)
    if abs(n) > _MAX_MUL_POWER:
        return tf.pow(x, tf.constant(float(n), x.dtype) if not x.dtype.is_complex else tf.constant(complex(n), x.dtype))
    out, base, k = None, x, abs(n)
    while k:  # binary exponentiation
        if k & 1:
            out = base if out is None else out * base
        k >>= 1
        if k:
            base = base * base
    return xla_ops.reciprocal(out) if n < 0 else out


def _real_fn(name: str, tf_fn: Any, np_fn: Any) -> Any:
    def apply(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(np_fn(complex(x))) if isinstance(x, complex) else float(np_fn(float(x)))
        return tf_fn(x)

    apply.__name__ = name
    return apply


def select(cond: Any, x: Any, y: Any) -> Any:
    if isinstance(cond, (bool, np.bool_)):
        return x if cond else y
    c = is_complex(x) or is_complex(y)
    x, y = to_tensor(x, c), to_tensor(y, c)
    x, y = x + tf.zeros_like(y), y + tf.zeros_like(x)
    cond = tf.convert_to_tensor(cond)
    return tf.where(cond, x, y)


def div(a: Any, b: Any) -> Any:
    return binary(a, b, lambda x, y: x / y)


def sqrt(x: Any) -> Any:
    if isinstance(x, (int, float, complex)):
        return cmath.sqrt(x) if isinstance(x, complex) or x < 0 else x**0.5
    return tf.sqrt(x)


def real_sign(x: Any) -> Any:
    return (1.0 if x > 0 else -1.0 if x < 0 else 0.0) if isinstance(x, (int, float)) else tf.sign(x)


# ---------------------------------------------------------------------------------------
# the translation of one node, given its children's values
# ---------------------------------------------------------------------------------------
def op_table() -> dict[Any, Any]:
    sp = load_sympy()

    def re_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(x).real
        return xla_ops.real(x) if x.dtype.is_complex else x

    def im_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(x).imag
        return xla_ops.imag(x) if x.dtype.is_complex else tf.zeros_like(x)

    def conj_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(x).conjugate() if isinstance(x, complex) else x
        return tf.math.conj(x) if x.dtype.is_complex else x

    def abs_(x: Any) -> Any:
        return abs(x) if isinstance(x, (int, float, complex)) else tf.abs(x)

    def arg_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return cmath.phase(complex(x))
        return tf.math.angle(x) if x.dtype.is_complex else tf.math.angle(tf.complex(x, tf.zeros_like(x)))

    def where_(pieces: list[tuple[Any, Any]]) -> Any:
        complex_ = any(is_complex(v) for v, _ in pieces)
        out = None
        for value, cond in reversed(pieces):
            value = to_tensor(value, complex_)
            if out is None:
                out = value
            else:
                cond = tf.convert_to_tensor(cond)
                value, rest = value + tf.zeros_like(out), out + tf.zeros_like(value)  # broadcast
                out = tf.where(cond, value, rest)
        return out

    def rel(tf_op: Any, py_op: Any) -> Any:
        def apply(a: Any, b: Any) -> Any:
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                return py_op(a, b)
            return tf_op(to_tensor(a, False), to_tensor(b, False))
        return apply

    def heaviside(x: Any, h0: Any = 0.5) -> Any:
        x = to_tensor(x, False)
        return tf.where(x > 0.0, tf.ones_like(x), tf.where(x < 0.0, tf.zeros_like(x), h0 * tf.ones_like(x)))

    unary = {
        sp.exp: _real_fn("exp", tf.exp, cmath.exp),
        sp.log: _real_fn("log", tf.math.log, cmath.log),
        sp.sin: _real_fn("sin", tf.sin, cmath.sin),
        sp.cos: _real_fn("cos", tf.cos, cmath.cos),
        sp.tan: _real_fn("tan", tf.tan, cmath.tan),
        sp.asin: _real_fn("asin", tf.asin, cmath.asin),
        sp.acos: _real_fn("acos", tf.acos, cmath.acos),
        sp.atan: _real_fn("atan", tf.atan, cmath.atan),
        sp.sinh: _real_fn("sinh", tf.sinh, cmath.sinh),
        sp.cosh: _real_fn("cosh", tf.cosh, cmath.cosh),
        sp.tanh: _real_fn("tanh", tf.tanh, cmath.tanh),
        sp.re: re_,
        sp.im: im_,
        sp.conjugate: conj_,
        sp.Abs: abs_,
        sp.arg: arg_,
        sp.sign: lambda x: tf.sign(to_tensor(x, False)),
    }
    table: dict[Any, Any] = {f: ("unary", fn) for f, fn in unary.items()}
    table[sp.atan2] = ("nary", lambda y, x: tf.atan2(to_tensor(y, False), to_tensor(x, False)))
    table[sp.Min] = ("nary", lambda *a: fold(a, lambda x, y: tf.minimum(to_tensor(x, False), to_tensor(y, False))))
    table[sp.Max] = ("nary", lambda *a: fold(a, lambda x, y: tf.maximum(to_tensor(x, False), to_tensor(y, False))))
    table[sp.Heaviside] = ("nary", heaviside)
    table[sp.StrictLessThan] = ("nary", rel(tf.less, lambda a, b: a < b))
    table[sp.LessThan] = ("nary", rel(tf.less_equal, lambda a, b: a <= b))
    table[sp.StrictGreaterThan] = ("nary", rel(tf.greater, lambda a, b: a > b))
    table[sp.GreaterThan] = ("nary", rel(tf.greater_equal, lambda a, b: a >= b))
    table[sp.Equality] = ("nary", rel(tf.equal, lambda a, b: a == b))
    table[sp.Unequality] = ("nary", rel(tf.not_equal, lambda a, b: a != b))
    table[sp.And] = ("nary", lambda *a: fold(a, tf.logical_and))
    table[sp.Or] = ("nary", lambda *a: fold(a, tf.logical_or))
    table[sp.Not] = ("unary", tf.logical_not)
    table[sp.Piecewise] = ("piecewise", where_)
    return table


def fold(args: Sequence[Any], op: Any) -> Any:
    out = args[0]
    for a in args[1:]:
        out = op(out, a)
    return out


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
