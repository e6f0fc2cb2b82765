"""The basic models: Gaussian, Exponential and a density from a plain function (FunctionPdf)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..exceptions import ModelError, ParameterValueError
from ._base import Model
from ._sampling import rng, truncated_normal
from ._space import Space, one_dimensional

_SQRT2 = math.sqrt(2.0)


class Gaussian(Model):
    r"""Gaussian :math:`\exp(-(x-\mu)^2 / 2\sigma^2)`, truncated to the space.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    mu : Parameter or float
        The mean :math:`\mu` (a number: fixed).
    sigma : Parameter or float
        The width :math:`\sigma > 0` (a number: fixed).
    name : str, optional
        A label for reports.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional.
    ParameterValueError
        The width is not positive.

    Examples
    --------
    >>> from zcache.models import Space, Gaussian
    >>> g = Gaussian(Space("x", -1.0, 1.0), mu=0.0, sigma=1.0)
    >>> round(float(g.integrate(-1.0, 0.0)), 12)
    0.5
    """

    def __init__(self, space: Space, mu: Any, sigma: Any, *, name: str | None = None, extended: Any = None):
        one_dimensional(space, "Gaussian")
        super().__init__(space, {"mu": mu, "sigma": sigma}, name=name, extended=extended)
        width = self.params["sigma"]
        if not float(width.value()) > 0.0:
            raise ParameterValueError(
                f"Gaussian '{self.name}': the width '{width.name}' is {float(width.value())}; it must be "
                "positive. Give it a positive value and a positive lower limit (lower=1e-3, say)."
            )

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        z = (x - self.params["mu"].value()) / self.params["sigma"].value()
        return tf.exp(-0.5 * z * z)

    def _integral(self, lower: float, upper: float) -> tf.Tensor:
        mu, sigma = self.params["mu"].value(), self.params["sigma"].value()
        a, b = (lower - mu) / (sigma * _SQRT2), (upper - mu) / (sigma * _SQRT2)
        # erf(b) - erf(a) cancels in a tail: there use erfc on the side away from the mean.
        diff = tf.where(a >= 0.0, tf.math.erfc(a) - tf.math.erfc(b),
                        tf.where(b <= 0.0, tf.math.erfc(-b) - tf.math.erfc(-a), tf.math.erf(b) - tf.math.erf(a)))
        return 0.5 * math.sqrt(2.0 * math.pi) * sigma * diff

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        mu, sigma = self.params["mu"].value(), self.params["sigma"].value()
        return truncated_normal(n, mu, sigma, self.space.lower[0], self.space.upper[0])


class Exponential(Model):
    r"""Exponential :math:`e^{\lambda x}`, truncated to the space.

    Evaluated as :math:`e^{\lambda (x - s)}` with :math:`s` the end of the range
    where the exponential is largest, so it cannot overflow.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    lam : Parameter or float
        The slope :math:`\lambda` (a number: fixed).
    name : str, optional
        A label for reports.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional.

    Examples
    --------
    >>> from zcache.models import Space, Exponential
    >>> e = Exponential(Space("x", 0.0, 1.0), lam=-1.0)
    >>> round(float(e.integrate(0.0, 1.0)), 12)
    1.0
    """

    def __init__(self, space: Space, lam: Any, *, name: str | None = None, extended: Any = None):
        one_dimensional(space, "Exponential")
        super().__init__(space, {"lam": lam}, name=name, extended=extended)

    def _shift(self, lam: tf.Tensor) -> tf.Tensor:
        return tf.where(lam > 0.0, tf.constant(self.space.upper[0], tf.float64), tf.constant(self.space.lower[0], tf.float64))

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        lam = self.params["lam"].value()
        return tf.exp(lam * (x - self._shift(lam)))

    def _integral(self, lower: float, upper: float) -> tf.Tensor:
        # Anchored at the end where the integrand is largest, so nothing overflows:
        # lam <= 0: e^{lam (a - s)} E(lam, w);  lam > 0: e^{lam (b - s)} E(-lam, w);  w = b - a.
        lam = self.params["lam"].value()
        shift = self._shift(lam)
        positive = lam > 0.0
        anchor = tf.where(positive, upper - shift, lower - shift)
        return tf.exp(lam * anchor) * _expm1_ratio(tf.where(positive, -lam, lam), upper - lower)

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # Inverse CDF from the end where the density is largest: x = end + log1p(u * expm1(-|lam| w)) / (-+|lam|).
        lam = self.params["lam"].value()
        lo, hi = self.space.lower[0], self.space.upper[0]
        w = hi - lo
        u = rng().uniform([n], dtype=tf.float64)
        neg = -tf.abs(lam)  # the rate away from the anchor
        small = tf.abs(lam * w) < 1e-8
        safe = tf.where(small, -tf.ones_like(lam), neg)
        depth = tf.where(small, u * w, tf.math.log1p(u * tf.math.expm1(safe * w)) / safe)  # distance from anchor
        x = tf.where(lam > 0.0, hi - depth, lo + depth)
        return tf.clip_by_value(x, lo, hi)


def _expm1_ratio(lam: tf.Tensor, w: float) -> tf.Tensor:
    r"""$E(\lambda, w) = (e^{\lambda w} - 1)/\lambda$, with its Taylor series near 0 (exact gradient there too)."""
    small = tf.abs(lam * w) < 1e-5
    safe = tf.where(small, tf.ones_like(lam), lam)
    series = w * (1.0 + lam * w / 2.0 + (lam * w) ** 2 / 6.0)
    return tf.where(small, series, tf.math.expm1(safe * w) / safe)


class FunctionPdf(Model):
    """A model from a plain function ``func(x, **params)`` (unnormalized density).

    Parameters
    ----------
    func : callable
        ``func(x, **params) -> tensor`` with ``x`` of shape (N,) (or (N, n_obs)),
        parameters passed as scalar tensors by name.
    space : Space
        The observables and their range.
    params : dict of str to Parameter or float, optional
        Name -> Parameter or number.
    integral : callable, optional
        The analytic ``integral(lower, upper, **params)`` of ``func`` (1-D); without it the
        normalization is numerical.
    name : str, optional
        A label for reports; default the function's name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        ``func`` is not callable.

    Examples
    --------
    >>> import tensorflow as tf, zcache
    >>> from zcache.models import Space, FunctionPdf
    >>> slope = zcache.Parameter("slope_f", 0.5)
    >>> lin = FunctionPdf(lambda x, slope: 1.0 + slope * x, Space("x", 0.0, 1.0), {"slope": slope})
    >>> round(float(lin.pdf([0.0, 1.0])[1]), 10)      # (1 + 0.5) / 1.25
    1.2
    """

    def __init__(
        self,
        func: Callable[..., Any],
        space: Space,
        params: dict[str, Any] | None = None,
        *,
        integral: Callable[..., Any] | None = None,
        name: str | None = None,
        extended: Any = None,
    ):
        if not callable(func):
            raise ModelError(f"FunctionPdf needs a callable, got {func!r}.")
        super().__init__(space, params, name=name or getattr(func, "__name__", "FunctionPdf"), extended=extended)
        self._func = func
        self._analytic = integral

    def _values(self) -> dict[str, tf.Tensor]:
        return {key: p.value() for key, p in self.params.items()}

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return tf.convert_to_tensor(self._func(x, **self._values()), tf.float64)

    def _integral(self, lower: Any, upper: Any) -> Any:
        if self._analytic is None:
            return NotImplemented
        return self._analytic(lower, upper, **self._values())

