r"""Complex couplings: a complex number as two real Parameters, and its derivatives by them."""

from __future__ import annotations

import cmath
import math
from collections.abc import Sequence

import tensorflow as tf

from .._engine.parameter import Parameter, set_values
from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError

__all__ = ["ComplexParameter", "coupling_derivatives"]


class ComplexParameter:
    r"""A complex coupling made of two real :class:`zcache.Parameter` objects.

    ``polar=True``: :math:`c = r e^{i\phi}` with ``mag`` (:math:`r \ge 0`) and ``phase``;
    ``polar=False``: :math:`c = a + i b` with ``real`` and ``imag``.

    Parameters
    ----------
    name : str
        The coupling's name; its parameters are ``<name>_mag`` / ``<name>_phase`` (polar)
        or ``<name>_re`` / ``<name>_im``.
    value : complex
        The starting value (finite).
    polar : bool
        Magnitude and phase (True) or real and imaginary part (False).
    floating : bool
        Whether both parameters float.

    Raises
    ------
    ModelError
        ``value`` is not a finite complex number.

    Examples
    --------
    >>> from zcache.amplitude import ComplexParameter
    >>> c = ComplexParameter("c1", 1j)
    >>> [p.name for p in c.params], round(float(c.mag.value()), 12)
    (['c1_mag', 'c1_phase'], 1.0)
    >>> abs(complex(c) - 1j) < 1e-15
    True
    """

    def __init__(self, name: str, value: complex, *, polar: bool = True, floating: bool = True):
        try:
            value = complex(value)
        except (TypeError, ValueError) as err:
            raise ModelError(f"ComplexParameter '{name}': the value must be a complex number, got {value!r}.") from err
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise ModelError(f"ComplexParameter '{name}': the value must be finite, got {value!r}.")
        self.name = name
        self.polar = bool(polar)
        if self.polar:
            self.mag = Parameter(f"{name}_mag", abs(value), lower=0.0, floating=floating)
            self.phase = Parameter(f"{name}_phase", cmath.phase(value), floating=floating)
            self.params = [self.mag, self.phase]
        else:
            self.real = Parameter(f"{name}_re", value.real, floating=floating)
            self.imag = Parameter(f"{name}_im", value.imag, floating=floating)
            self.params = [self.real, self.imag]

    def __repr__(self) -> str:
        return f"<ComplexParameter '{self.name}' {complex(self):.6g}>"

    def __complex__(self) -> complex:
        a, b = (float(p) for p in self.params)
        return cmath.rect(a, b) if self.polar else complex(a, b)

    def value(self) -> tf.Tensor:
        """The coupling as a tensor.

        Returns
        -------
        tf.Tensor
            complex128 scalar.
        """
        a, b = (p.value() for p in self.params)
        if self.polar:
            return tf.complex(a * tf.cos(b), a * tf.sin(b))
        return tf.complex(a, b)

    def set_value(self, value: complex) -> None:
        """Set both real parameters from a complex number (checked as one step).

        Parameters
        ----------
        value : complex
            The new coupling.
        """
        value = complex(value)
        set_values(self.params, [abs(value), cmath.phase(value)] if self.polar else [value.real, value.imag])


def coupling_derivatives(couplings: Sequence[ComplexParameter]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    r"""Couplings :math:`c_k` with their first and second derivatives by their two parameters each.

    Parameters
    ----------
    couplings : sequence of ComplexParameter
        Polar (:math:`r e^{i\phi}`) or Cartesian (:math:`a + ib`), mixed as they come.

    Returns
    -------
    c : tf.Tensor
        complex128 (K,), as each :meth:`ComplexParameter.value`.
    first : tf.Tensor
        complex128 (K, 2): :math:`\partial c_k / \partial p_{kj}` for ``params`` :math:`p_{k0}, p_{k1}`.
    second : tf.Tensor
        complex128 (K, 3): :math:`\partial^2 c_k` by :math:`(p_{k0}, p_{k0})`, :math:`(p_{k0}, p_{k1})`,
        :math:`(p_{k1}, p_{k1})`.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.amplitude import ComplexParameter, coupling_derivatives
    >>> c, first, second = coupling_derivatives([ComplexParameter("c_d", 2j), ComplexParameter("c_e", 1 + 1j, polar=False)])
    >>> (np.round(first.numpy(), 12) + 0.0).tolist()    # e^{i phi}, i c; then 1, i
    [[1j, (-2+0j)], [(1+0j), 1j]]
    >>> (np.round(second.numpy()[0], 12) + 0.0).tolist()   # 0, i e^{i phi}, -c
    [0j, (-1+0j), -2j]
    """
    values = tf.reshape(tf.stack([p.value() for cp in couplings for p in cp.params]), [-1, 2])
    a, b = tf.unstack(values, 2, axis=1)
    polar = tf.constant([cp.polar for cp in couplings])
    rotation = tf.complex(tf.cos(b), tf.sin(b))
    c = tf.where(polar, tf.complex(a, tf.zeros_like(a)) * rotation, tf.complex(a, b))
    one, zero = tf.ones_like(c), tf.zeros_like(c)
    first = tf.stack([tf.where(polar, rotation, one), tf.where(polar, 1j * c, 1j * one)], axis=1)
    second = tf.stack([zero, tf.where(polar, 1j * rotation, zero), tf.where(polar, -c, zero)], axis=1)
    return c, first, second


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
