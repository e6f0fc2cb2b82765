"""Polynomials, never clipped: :class:`~zcache.shapes.Chebyshev` and :class:`~zcache.shapes.Bernstein`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.cachable import cached
from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError, ParameterValueError
from ..models import Model, Space, one_dimensional
from ._common import limit_tensors


def _coefficient_list(coeffs: Any, what: str, minimum: int) -> list[Any]:
    """The coefficients as a list (Parameters as they are, numbers as floats).

    Checked before any Parameter is created, so that a refusal leaves nothing behind.
    """
    if isinstance(coeffs, str | bytes) or not isinstance(coeffs, Sequence | np.ndarray):
        raise ModelError(
            f"{what} needs a sequence of coefficients (zcache.Parameter or numbers), got {coeffs!r}; "
            "wrap a single coefficient in a list."
        )
    out: list[Any] = []
    for i, c in enumerate(coeffs):
        if isinstance(c, Parameter):
            out.append(c)
            continue
        try:
            value = float(c)
        except (TypeError, ValueError) as err:
            raise ModelError(f"{what}: coefficient {i} must be a zcache.Parameter or a number, got {c!r}.") from err
        if not math.isfinite(value):
            raise ParameterValueError(f"{what}: coefficient {i} is {value}; give a finite number.")
        out.append(value)
    if len(out) < minimum:
        raise ModelError(f"{what} needs at least {minimum} coefficient(s), got {len(out)}.")
    return out



def _clenshaw(coeffs: Sequence[Any], t: tf.Tensor) -> tf.Tensor:
    r""":math:`\sum_k a_k T_k(t)` by Clenshaw's recurrence (``coeffs`` scalars, ``t`` any shape)."""
    b1 = tf.zeros_like(t)
    b2 = tf.zeros_like(t)
    for a in reversed(coeffs[1:]):
        b1, b2 = a + 2.0 * t * b1 - b2, b1
    return coeffs[0] + t * b1 - b2


def _chebyshev_antiderivative(a: Sequence[Any]) -> list[Any]:
    r"""Chebyshev coefficients of :math:`\int \sum_k a_k T_k`, constant term 0.

    From :math:`\int T_0 = T_1`, :math:`\int T_1 = T_2/4 + \mathrm{const}` and
    :math:`\int T_k = T_{k+1}/(2(k+1)) - T_{k-1}/(2(k-1))` for :math:`k \ge 2`:
    :math:`A_1 = a_0 - a_2/2`, :math:`A_k = (a_{k-1} - a_{k+1})/(2k)` for :math:`k \ge 2`.
    """
    n = len(a) - 1
    padded = [*a, 0.0, 0.0]
    out: list[Any] = [0.0, padded[0] - 0.5 * padded[2]]
    out += [(padded[k - 1] - padded[k + 1]) / (2.0 * k) for k in range(2, n + 2)]
    return out


def _de_casteljau(coeffs: Sequence[Any], t: tf.Tensor) -> tf.Tensor:
    r""":math:`\sum_i \beta_i \binom{n}{i} t^i (1-t)^{n-i}` by de Casteljau's algorithm (stable on [0, 1])."""
    s = 1.0 - t
    level = list(coeffs)
    while len(level) > 1:
        level = [s * level[i] + t * level[i + 1] for i in range(len(level) - 1)]
    return level[0] + tf.zeros_like(t)


# -- polynomials ----------------------------------------------------------------------------------
#: Points (ends included) at which a polynomial shape checks that it is non-negative over its
#: space: a dip below zero narrower than 1/1024 of the range passes unseen.
_POSITIVITY_GRID = 1025
#: Round-off allowed below zero there (relative to the largest value): a polynomial touching zero.
_POSITIVITY_RTOL = 1e-12


class _NonNegativePolynomial(Model):
    """A polynomial shape: its normalization is NaN at parameter values where it dips below zero.

    A polynomial can be negative between the events, where no ``log pdf`` of a loss sees it.
    A NaN normalization makes every density value NaN (``pdf`` raises DensityError, a loss is
    NaN and a minimizer steps back), so no fit reports a minimum at a negative density.
    """

    @cached
    def normalization(self) -> tf.Tensor:
        r""":math:`\int_\Omega f\,dx`, or NaN where :math:`f` is negative somewhere in the space.

        Negative means below zero at one of ``_POSITIVITY_GRID`` evenly spaced points of the
        space (ends included) by more than round-off; an integral that is not positive makes
        the density impossible too (``Model.pdf`` raises DensityError).

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        norm = self._raw_integral(self.space.lower, self.space.upper)
        grid = tf.constant(np.linspace(self.space.lower[0], self.space.upper[0], _POSITIVITY_GRID))
        values = self._unnormalized_pdf(grid)
        ok = tf.reduce_min(values) >= -_POSITIVITY_RTOL * tf.reduce_max(tf.abs(values))
        return tf.where(ok, norm, tf.constant(np.nan, tf.float64))


class Chebyshev(_NonNegativePolynomial):
    r"""Chebyshev series :math:`1 + \sum_{i=1}^n c_i T_i(x')`, :math:`x'` the observable mapped onto [-1, 1].

    With the space :math:`[l, u]`, :math:`x' = (2x - l - u)/(u - l)`. The constant term is fixed
    to 1 and ``coeffs`` are :math:`c_1, \ldots, c_n` (as RooChebychev and ``zfit.pdf.Chebyshev``),
    so the normalization is :math:`(u - l)(1 - \sum_{i\,\mathrm{even}} c_i/(i^2 - 1))` and no
    coefficient is redundant. Evaluated by Clenshaw's recurrence; the integral is analytic (the
    antiderivative's Chebyshev series, also over sub-ranges). The density is not forced to be
    non-negative: large coefficients make it dip below zero somewhere, and there
    :meth:`~zcache.models.Model.pdf` raises :class:`~zcache.exceptions.DensityError` and a loss is
    NaN (the normalization is NaN wherever the series is negative in the space, see the module
    notes), so a fit steps back from such coefficients.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    coeffs : sequence of Parameter or float
        :math:`c_1, \ldots, c_n` (numbers are fixed); an empty sequence gives a flat density.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space`, or ``coeffs`` is not
        a sequence of Parameters and numbers.
    ParameterValueError
        A coefficient given as a number is NaN or infinite.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.models import Space
    >>> from zcache.shapes import Chebyshev
    >>> cheb = Chebyshev(Space("x", 0.0, 2.0), [0.5, -0.2])
    >>> round(float(cheb.unnormalized_pdf([2.0])[0]), 12)     # x' = 1: 1 + 0.5 - 0.2
    1.3
    >>> round(float(cheb.normalization()), 12)      # 2 (1 + 0.2 / 3)
    2.133333333333
    """

    def __init__(self, space: Space, coeffs: Sequence[Any], *, name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "Chebyshev")
        coeffs = _coefficient_list(coeffs, "Chebyshev", minimum=0)
        super().__init__(space, {f"c{i + 1}": c for i, c in enumerate(coeffs)}, name=name, extended=extended)
        self._keys = [f"c{i + 1}" for i in range(len(coeffs))]
        lo, hi = space.lower[0], space.upper[0]
        self._center, self._half = 0.5 * (lo + hi), 0.5 * (hi - lo)

    @property
    def degree(self) -> int:
        """The degree :math:`n` of the series (the number of coefficients)."""
        return len(self._keys)

    def _series(self) -> list[Any]:
        return [1.0, *(self.params[k].value() for k in self._keys)]

    def _mapped(self, x: tf.Tensor) -> tf.Tensor:
        return (x - self._center) / self._half

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return _clenshaw(self._series(), self._mapped(x))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = limit_tensors(lower, upper)
        antiderivative = _chebyshev_antiderivative(self._series())
        return self._half * (_clenshaw(antiderivative, self._mapped(upper)) - _clenshaw(antiderivative, self._mapped(lower)))


class Bernstein(_NonNegativePolynomial):
    r"""Bernstein polynomial :math:`\sum_{i=0}^n b_i \binom{n}{i} t^i (1-t)^{n-i}`, :math:`t` the observable mapped onto [0, 1].

    With the space :math:`[l, u]`, :math:`t = (x - l)/(u - l)` (RooBernstein,
    ``zfit.pdf.Bernstein``). All :math:`n + 1` coefficients are parameters, but the overall
    scale cancels in the normalization (:math:`\lambda b` gives the same density as :math:`b`):
    fix one coefficient in a fit (give it as a number), else the likelihood has a flat
    direction. Non-negative coefficients make the density non-negative (the basis polynomials
    are non-negative on [0, 1]): give floating coefficients ``lower=0``. Where other coefficients
    make it negative somewhere, or its integral not positive, ``pdf`` raises
    :class:`~zcache.exceptions.DensityError` and a loss is NaN (see the module notes). The density is
    evaluated by de Casteljau's algorithm (:math:`O(n^2)` operations per event, numerically
    stable); the integral is analytic, from the antiderivative
    :math:`\int_0^t B_{i,n} = \frac{1}{n+1} \sum_{j > i} B_{j,n+1}(t)` (sub-ranges too).

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    coeffs : sequence of Parameter or float
        :math:`b_0, \ldots, b_n` (numbers are fixed); at least one, not all zero.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space`, or ``coeffs`` is not
        a non-empty sequence of Parameters and numbers.
    ParameterValueError
        A coefficient given as a number is NaN or infinite, or all coefficients are zero (the
        density would be 0 everywhere).

    Examples
    --------
    >>> from zcache.models import Space
    >>> from zcache.shapes import Bernstein
    >>> bern = Bernstein(Space("x", 0.0, 4.0), [1.0, 0.0, 3.0])    # (1 - t)^2 + 3 t^2
    >>> round(float(bern.normalization()), 12)                      # 4 * (1 + 0 + 3) / 3
    5.333333333333
    >>> round(float(bern.integrate(0.0, 2.0)), 12)                  # t in [0, 1/2]: (10/24) / (4/3)
    0.3125
    """

    def __init__(self, space: Space, coeffs: Sequence[Any], *, name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "Bernstein")
        coeffs = _coefficient_list(coeffs, "Bernstein", minimum=1)
        if all(float(c) == 0.0 for c in coeffs):
            raise ParameterValueError(
                "Bernstein: all coefficients are 0, so the density is 0 everywhere; give at least one "
                "non-zero coefficient (non-negative ones keep the density non-negative)."
            )
        super().__init__(space, {f"b{i}": c for i, c in enumerate(coeffs)}, name=name, extended=extended)
        self._keys = [f"b{i}" for i in range(len(coeffs))]
        self._lower, self._width = space.lower[0], space.upper[0] - space.lower[0]

    @property
    def degree(self) -> int:
        """The degree :math:`n` of the polynomial (the number of coefficients minus one)."""
        return len(self._keys) - 1

    def _mapped(self, x: tf.Tensor) -> tf.Tensor:
        return (x - self._lower) / self._width

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return _de_casteljau([self.params[k].value() for k in self._keys], self._mapped(x))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = limit_tensors(lower, upper)
        b = [self.params[k].value() for k in self._keys]
        # Antiderivative (degree n + 1): d_0 = 0, d_j = (b_0 + ... + b_{j-1}) / (n + 1).
        scale = 1.0 / len(b)
        d: list[Any] = [0.0]
        for coeff in b:
            d.append(d[-1] + scale * coeff)
        return self._width * (_de_casteljau(d, self._mapped(upper)) - _de_casteljau(d, self._mapped(lower)))


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
