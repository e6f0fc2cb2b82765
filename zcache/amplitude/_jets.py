r"""Second-order jets: a value with its exact first and second derivatives, carried forward op by op.

A :class:`Jet` holds :math:`v`, :math:`\partial_j v` and :math:`\partial_j \partial_l v` (:math:`j \le l`)
with respect to :math:`L` real parameters, each a Python number, a tensor (per event), or ``None`` for
zero. Arithmetic on jets is the chain rule of second order: for :math:`f(v)`,
:math:`\partial_j f = f' \partial_j v` and
:math:`\partial_j \partial_l f = f'' \partial_j v \, \partial_l v + f' \partial_j \partial_l v`,
which holds for real and for holomorphic complex functions alike; the non-holomorphic ones
(real part, modulus) are written through real and imaginary parts.

Why by hand: :class:`zcache.amplitude.SymbolicModel`'s Hessian needs per-event second derivatives of
each group's amplitudes by its line-shape parameters. SymPy's ``diff`` of ampform's spin-2 amplitude
grows by more than an order of magnitude in operations and is slow (every product rule copies the
subtrees); TensorFlow's forward mode builds each JVP from a gradient of a gradient. A jet walks the
expression's DAG once, each shared node once, and its derivatives are a few ops per node per
parameter pair, in one ``tf.function`` per group with the values (without XLA: its compile cost
seconds, ``benchmarks/RESULTS.md``, "The structured Hessian").

A walk that meets a function without a rule raises :class:`NoJet`; callers check first
(``_Translator.has_jets``) and differentiate the loss instead where a rule is missing.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from .._engine.tf_internals import leave_to_python

__all__ = ["Jet", "NoJet", "pairs", "constant", "variable", "add", "mul", "chain", "linear", "where", "dense"]

Value = Any  # a Python number, a tf.Tensor, or None (zero, in derivatives)


class NoJet(Exception):
    """An operation without a derivative rule: no exact Hessian by jets (the caller falls back)."""


def pairs(n: int) -> list[tuple[int, int]]:
    """The (j, l) with j <= l of ``n`` parameters, in the order of :attr:`Jet.dd`.

    Examples
    --------
    >>> pairs(2)
    [(0, 0), (0, 1), (1, 1)]
    """
    return [(j, k) for j in range(n) for k in range(j, n)]


@dataclass(frozen=True, eq=False)  # hashed by identity: a memo key
class Jet:
    """A value ``v``, its first derivatives ``d`` (L,) and second ``dd`` (one per :func:`pairs`); None is zero."""

    v: Value
    d: tuple[Value, ...]
    dd: tuple[Value, ...]

    @property
    def is_constant(self) -> bool:
        """Whether every derivative is zero."""
        return all(x is None for x in self.d) and all(x is None for x in self.dd)


def constant(v: Value, n: int) -> Jet:
    """A value that no parameter moves."""
    return Jet(v, (None,) * n, (None,) * (n * (n + 1) // 2))


def variable(v: Value, j: int, n: int) -> Jet:
    """Parameter ``j`` of ``n`` itself, at value ``v``."""
    return Jet(v, tuple(1.0 if i == j else None for i in range(n)), (None,) * (n * (n + 1) // 2))


def _is_complex(v: Value) -> bool:
    return isinstance(v, complex) or (isinstance(v, tf.Tensor) and v.dtype.is_complex)


def _as(v: Value, complex_: bool) -> Value:
    if isinstance(v, (int, float, complex)):
        return v
    if complex_ and not v.dtype.is_complex:
        return tf.cast(v, tf.complex128)  # one op (tf.complex(v, zeros) is two)
    return v


def _times(a: Value, b: Value) -> Value:
    """The product, None as zero and Python numbers folded."""
    if a is None or b is None:
        return None
    if isinstance(a, (int, float)) and a == 1.0:
        return b
    if isinstance(b, (int, float)) and b == 1.0:
        return a
    c = _is_complex(a) or _is_complex(b)
    return _as(a, c) * _as(b, c)


def _plus(a: Value, b: Value) -> Value:
    if a is None:
        return b
    if b is None:
        return a
    c = _is_complex(a) or _is_complex(b)
    return _as(a, c) + _as(b, c)


def _sum(*terms: Value) -> Value:
    out = None
    for t in terms:
        out = _plus(out, t)
    return out


_COMPLEX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _promoted(a: Jet, b: Jet) -> tuple[Jet, Jet]:
    """``a`` and ``b``, a real one made complex once (memoized: a real node read by many complex ones)."""
    ca, cb = _is_complex(a.v), _is_complex(b.v)
    if ca == cb:
        return a, b
    real = b if ca else a
    found = _COMPLEX.get(real)
    if found is None:
        part = lambda x: None if x is None else _as(x, True)  # noqa: E731
        found = _COMPLEX[real] = Jet(part(real.v), tuple(part(x) for x in real.d), tuple(part(x) for x in real.dd))
    return (a, found) if ca else (found, b)


def add(a: Jet, b: Jet, plus: Callable[[Value, Value], Value]) -> Jet:
    """``a + b``; ``plus`` adds two values (the caller's, with its dtype rules)."""
    a, b = _promoted(a, b)
    return Jet(plus(a.v, b.v), tuple(_plus(x, y) for x, y in zip(a.d, b.d, strict=True)),
               tuple(_plus(x, y) for x, y in zip(a.dd, b.dd, strict=True)))


def mul(a: Jet, b: Jet, times: Callable[[Value, Value], Value]) -> Jet:
    """``a * b`` (product rule); ``times`` multiplies two values."""
    a, b = _promoted(a, b)
    n = len(a.d)
    d = tuple(_plus(_times(a.d[j], b.v), _times(a.v, b.d[j])) for j in range(n))
    dd = tuple(_sum(_times(a.dd[p], b.v), _times(a.d[j], b.d[k]), _times(a.d[k], b.d[j]), _times(a.v, b.dd[p]))
               for p, (j, k) in enumerate(pairs(n)))
    return Jet(times(a.v, b.v), d, dd)


def chain(a: Jet, f: Value, f1: Callable[[], Value], f2: Callable[[], Value]) -> Jet:
    """``f(a)`` given ``f = f(a.v)`` and its derivatives ``f1() = f'(a.v)``, ``f2() = f''(a.v)`` (made when needed)."""
    n = len(a.d)
    if a.is_constant:
        return constant(f, n)
    first = f1()
    d = tuple(_times(first, x) for x in a.d)
    second = f2() if any(x is not None for x in a.d) else None
    dd = tuple(_plus(_times(second, _times(a.d[j], a.d[k])), _times(first, a.dd[p]))
               for p, (j, k) in enumerate(pairs(n)))
    return Jet(f, d, dd)


def linear(a: Jet, f: Callable[[Value], Value]) -> Jet:
    """``f(a)`` for a real-linear ``f`` (real part, imaginary part, conjugate): applied to every part."""
    part = lambda x: None if x is None else f(x)  # noqa: E731
    return Jet(f(a.v), tuple(part(x) for x in a.d), tuple(part(x) for x in a.dd))


def where(cond: Value, a: Jet, b: Jet, select: Callable[[Value, Value, Value], Value]) -> Jet:
    """``a`` where ``cond`` else ``b``, part by part (``cond`` piecewise constant: no derivative of its own).

    ``select(cond, x, y)`` picks between two values (numbers or tensors, broadcast by the caller).
    """
    def pick(x: Value, y: Value) -> Value:
        if x is None and y is None:
            return None
        return select(cond, 0.0 if x is None else x, 0.0 if y is None else y)

    return Jet(select(cond, a.v, b.v), tuple(pick(x, y) for x, y in zip(a.d, b.d, strict=True)),
               tuple(pick(x, y) for x, y in zip(a.dd, b.dd, strict=True)))


def dense(x: Value, like: tf.Tensor) -> tf.Tensor:
    """``x`` (None as zero, a number or a tensor that broadcasts) as a tensor of ``like``'s shape and dtype."""
    if x is None:
        return tf.zeros_like(like)
    if not isinstance(x, tf.Tensor):
        return tf.constant(x, like.dtype) + tf.zeros_like(like)
    return _as(x, like.dtype.is_complex) + tf.zeros_like(like)


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
