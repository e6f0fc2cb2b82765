"""The jet rules of the SymPy translator: the first and second derivatives of each op, as jets.

Each rule takes the jets of a node's arguments (:mod:`._jets`: a value with its derivatives) and
computes the node's jet with the same value helpers as the value path (:mod:`._op_table`), so
that a jet's value equals the translated value.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from .._engine import xla_ops
from .._engine.tf_internals import leave_to_python
from . import _jets as jets_
from ._op_table import add, div, integer_power, load_sympy, mul, sqrt


def power_rule(b: jets_.Jet, n: int) -> jets_.Jet:
    """``b ** n`` for an integer ``n``, by multiplications as the value path."""
    if n == 0:
        return jets_.constant(1.0, len(b.d))
    if n == 1:
        return b
    return jets_.chain(b, integer_power(b.v, n), lambda: mul(float(n), integer_power(b.v, n - 1)),
                       lambda: mul(float(n * (n - 1)), integer_power(b.v, n - 2)))


def abs2_jet(z: jets_.Jet) -> jets_.Jet:
    r""":math:`|z|^2 = \mathrm{Re}(z)^2 + \mathrm{Im}(z)^2` (not holomorphic: through the real parts)."""
    re = jets_.linear(z, lambda x: xla_ops.real(x) if isinstance(x, tf.Tensor) else complex(x).real)
    im = jets_.linear(z, lambda x: xla_ops.imag(x) if isinstance(x, tf.Tensor) else complex(x).imag)
    return jets_.add(jets_.mul(re, re, mul), jets_.mul(im, im, mul), add)


def sqrt_jet(a: jets_.Jet) -> jets_.Jet:
    root = sqrt(a.v)
    return jets_.chain(a, root, lambda: div(0.5, root), lambda: div(-0.25, mul(a.v, root)))


def arg_jet(z: jets_.Jet, log: Any) -> jets_.Jet:
    r""":math:`\arg z = \mathrm{Im} \log z` (the principal branch, as ``tf.math.angle``), ``log`` the op table's."""
    log_z = jets_.chain(z, log(z.v), lambda: div(1.0, z.v), lambda: div(-1.0, mul(z.v, z.v)))
    return jets_.linear(log_z, lambda x: xla_ops.imag(x) if isinstance(x, tf.Tensor) else complex(x).imag)


def derivative_rules(table: dict[Any, Any]) -> dict[Any, tuple[Any, Any]]:
    """The derivatives f' and f'' from (x, f(x)) per holomorphic function of the op ``table`` (whose functions they call)."""
    sp = load_sympy()
    cos, sin, cosh, sinh = (table[f][1] for f in (sp.cos, sp.sin, sp.cosh, sp.sinh))

    def one_minus_sq(x: Any) -> Any:
        return add(1.0, mul(-1.0, mul(x, x)))

    return {
        sp.exp: (lambda x, f: f, lambda x, f: f),
        sp.log: (lambda x, f: div(1.0, x), lambda x, f: div(-1.0, mul(x, x))),
        sp.sin: (lambda x, f: cos(x), lambda x, f: mul(-1.0, f)),
        sp.cos: (lambda x, f: mul(-1.0, sin(x)), lambda x, f: mul(-1.0, f)),
        sp.tan: (lambda x, f: add(1.0, mul(f, f)), lambda x, f: mul(mul(2.0, f), add(1.0, mul(f, f)))),
        sp.sinh: (lambda x, f: cosh(x), lambda x, f: f),
        sp.cosh: (lambda x, f: sinh(x), lambda x, f: f),
        sp.tanh: (lambda x, f: add(1.0, mul(-1.0, mul(f, f))),
                  lambda x, f: mul(mul(-2.0, f), add(1.0, mul(-1.0, mul(f, f))))),
        sp.asin: (lambda x, f: div(1.0, sqrt(one_minus_sq(x))),
                  lambda x, f: div(x, mul(one_minus_sq(x), sqrt(one_minus_sq(x))))),
        sp.acos: (lambda x, f: div(-1.0, sqrt(one_minus_sq(x))),
                  lambda x, f: div(mul(-1.0, x), mul(one_minus_sq(x), sqrt(one_minus_sq(x))))),
        sp.atan: (lambda x, f: div(1.0, add(1.0, mul(x, x))),
                  lambda x, f: div(mul(-2.0, x), mul(add(1.0, mul(x, x)), add(1.0, mul(x, x))))),
    }


@functools.lru_cache(maxsize=1)
def jet_constants() -> frozenset:
    sp = load_sympy()
    return frozenset([sp.sign, sp.Heaviside, sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan, sp.GreaterThan,
                      sp.Equality, sp.Unequality, sp.And, sp.Or, sp.Not])


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
