"""Peaks and thresholds: Crystal Ball, double Crystal Ball, ARGUS, Voigtian, Johnson SU; the Faddeeva function."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError, ParameterValueError
from ..models import Model, Space, one_dimensional, rng

_SQRT2 = math.sqrt(2.0)
_SQRT_PI = math.sqrt(math.pi)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
# Below these magnitudes expm1(y)/y and log1p(y)/y use their Taylor series (error ~ y^4/120,
# y^4/5 < 1e-16 there), so the Crystal Ball tail integral is exact at n = 1 and alpha -> 0.
_SERIES_EPS = 1e-4

# Faddeeva function: Weideman's rational approximation (N = 64 terms) inside |z| < 8, the
# Laplace continued fraction (20 levels) outside. Against scipy.special.wofz the largest relative
# error of Re w(x + iy) over x in [-1e3, 1e3] is ~1e-14 for y >= 1 and ~5e-15 / y below (6e-13 at
# y = 0.01, 5e-11 at y = 1e-4): Weideman's absolute error ~1e-15 meets a small Re w where y is
# small; the continued fraction is exact to rounding for |z| >= 8. N = 32 was ~500x worse (3e-10
# at y = 0.01). Humlicek's W4 is ~1e-4 relative, and Zaghloul's algorithm 916 needs
# data-dependent series lengths (a loop).
_W_N = 64
_W_CF_RADIUS = 8.0
_W_CF_DEPTH = 20


def _weideman_coefficients(n: int) -> tuple[float, np.ndarray]:
    """Weideman's (1994) expansion: L and the polynomial coefficients (highest degree first)."""
    m = 2 * n
    m2 = 2 * m
    k = np.arange(-m + 1, m)
    length = math.sqrt(n / math.sqrt(2.0))
    t = length * np.tan(k * math.pi / m2)
    f = np.concatenate([[0.0], np.exp(-t * t) * (length**2 + t * t)])
    a = np.real(np.fft.fft(np.fft.fftshift(f))) / m2
    return length, a[1:n + 1][::-1].copy()


_W_L, _W_COEFFS = _weideman_coefficients(_W_N)

# Voigtian integrals: x = mu + h tan(theta), h = sigma + gamma, maps any interval to a bounded
# theta interval on which the integrand (Lorentzian tails included) is smooth; 16 panels of
# 16-point Gauss-Legendre give ~1e-15 relative against scipy.integrate.quad for a peak of any
# width relative to the range (8 panels: ~5e-10 for very narrow peaks).
_V_PANELS = 16
_V_T, _V_W = np.polynomial.legendre.leggauss(16)
# ARGUS integral for c >= _ARGUS_SERIES_MIN_C: a power series with _ARGUS_SERIES_TERMS terms
# (all positive for c > 0; accurate to rounding for c up to ~100); below, the incomplete gamma.
_ARGUS_SERIES_MIN_C = -1.0
_ARGUS_SERIES_TERMS = 200


# -- checks -------------------------------------------------------------------------------------
def _check_positive(model: Model, keys: tuple[str, ...], minimum: float = 0.0) -> None:
    for key in keys:
        param = model.params[key]
        value = float(param.value())
        if not value > minimum:
            raise ParameterValueError(
                f"{type(model).__name__} '{model.name}': '{key}' (parameter '{param.name}') is {value}; it must be "
                f"> {minimum:g}. Give it a value above {minimum:g} and a lower limit above {minimum:g} "
                f"(lower={minimum + 1e-3:g}, say), so that a fit keeps it there."
            )


def _limits(lower: Any, upper: Any) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.convert_to_tensor(lower, tf.float64), tf.convert_to_tensor(upper, tf.float64)


# -- numerically safe elementary functions ------------------------------------------------------
def _exprel(y: tf.Tensor) -> tf.Tensor:
    """``expm1(y) / y``, 1 at 0, with exact gradients near 0 (Taylor series there)."""
    small = tf.abs(y) < _SERIES_EPS
    safe = tf.where(small, tf.ones_like(y), y)
    return tf.where(small, 1.0 + y * (0.5 + y * (1.0 / 6.0 + y / 24.0)), tf.math.expm1(safe) / safe)


def _log1prel(y: tf.Tensor) -> tf.Tensor:
    """``log1p(y) / y`` for ``y >= 0``, 1 at 0 (Taylor series near 0)."""
    small = tf.abs(y) < _SERIES_EPS
    safe = tf.where(small, tf.ones_like(y), y)
    return tf.where(small, 1.0 - y * (0.5 - y * (1.0 / 3.0 - y / 4.0)), tf.math.log1p(safe) / safe)


def _gauss_integral(t1: tf.Tensor, t2: tf.Tensor) -> tf.Tensor:
    r""":math:`\int_{t_1}^{t_2} e^{-t^2/2}\,dt` for :math:`t_1 \le t_2`, erfc on the side away from 0 (no cancellation)."""
    a, b = t1 / _SQRT2, t2 / _SQRT2
    diff = tf.where(a >= 0.0, tf.math.erfc(a) - tf.math.erfc(b),
                    tf.where(b <= 0.0, tf.math.erfc(-b) - tf.math.erfc(-a), tf.math.erf(b) - tf.math.erf(a)))
    return _SQRT_HALF_PI * diff


def _cb_shape(t: tf.Tensor, alpha: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
    r"""Unit-peak Crystal Ball in the oriented variable ``t`` with the tail at :math:`t < -\alpha` (``alpha >= 0``).

    Tail: :math:`A (B - t)^{-n} = e^{-\alpha^2/2} (1 + k s)^{-n}`, :math:`k = \alpha/n`,
    :math:`s = -\alpha - t \ge 0`, as ``exp(-alpha^2/2 - n log1p(k s))``: no overflow of
    :math:`(n/\alpha)^n`, finite for ``alpha -> 0`` (a flat tail) and ``n -> inf``.
    """
    in_tail = t < -alpha
    s = tf.maximum(-alpha - t, 0.0)  # 0 in the core: the unused tail branch stays finite
    tail = tf.exp(-0.5 * alpha * alpha - n * tf.math.log1p(alpha / n * s))
    core_t = tf.where(in_tail, tf.zeros_like(t), t)
    return tf.where(in_tail, tail, tf.exp(-0.5 * core_t * core_t))


def _cb_integral(t1: tf.Tensor, t2: tf.Tensor, alpha: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
    r""":math:`\int_{t_1}^{t_2}` of :func:`_cb_shape` for :math:`t_1 \le t_2` (broadcasting).

    Tail part, with :math:`s_i = -\alpha - t_i`, :math:`e = 1 - n`, :math:`k = \alpha/n`:
    :math:`\int_{s_2}^{s_1} (1+ks)^{-n} ds = (1+ks_2)^{e}\,\mathrm{exprel}(e\Delta)\,\Delta/k` with
    :math:`\Delta = \log\frac{1+ks_1}{1+ks_2} = \log(1 + k d)`, :math:`d = (s_1-s_2)/(1+ks_2)`,
    and :math:`\Delta/k = d\,\mathrm{log1prel}(kd)`: the closed form
    :math:`[(1+ks)^{1-n}/(k(1-n))]`, its :math:`n = 1` logarithm and its :math:`\alpha \to 0`
    limit in one expression, with no cancellation near any of them.
    """
    edge = -alpha
    # tail over [min(t1, edge), min(t2, edge)], core over [max(t1, edge), max(t2, edge)]
    s1 = -alpha - tf.minimum(t1, edge)
    s2 = -alpha - tf.minimum(t2, edge)
    k = alpha / n
    base = 1.0 + k * s2
    d = (s1 - s2) / base
    delta_over_k = d * _log1prel(k * d)
    delta = k * delta_over_k
    e = 1.0 - n
    tail = tf.exp(-0.5 * alpha * alpha + e * tf.math.log1p(k * s2)) * _exprel(e * delta) * delta_over_k
    core = _gauss_integral(tf.maximum(t1, edge), tf.maximum(t2, edge))
    return tail + core


# -- Faddeeva function ----------------------------------------------------------------------------
def faddeeva(z: Any) -> tf.Tensor:
    r"""The Faddeeva function :math:`w(z) = e^{-z^2}\operatorname{erfc}(-iz)` in TensorFlow.

    For :math:`\operatorname{Im} z \ge 0`: Weideman's rational approximation with 64 terms for
    :math:`|z| < 8`, the Laplace continued fraction (20 levels) for :math:`|z| \ge 8`. The
    relative error of :math:`\operatorname{Re} w(x+iy)` against ``scipy.special.wofz`` is about
    1e-14 for :math:`y \ge 1` and :math:`5\cdot 10^{-15}/y` below (6e-13 at :math:`y = 0.01`,
    5e-11 at :math:`y = 10^{-4}`), for every :math:`x`; :math:`\operatorname{Im} w` is accurate
    to ~1e-13. For
    :math:`\operatorname{Im} z < 0`, :math:`w(z) = 2e^{-z^2} - w(-z)` (which grows like
    :math:`e^{y^2}`). Differentiable (automatic differentiation through every branch).

    Parameters
    ----------
    z : array_like
        Complex arguments (cast to complex128).

    Returns
    -------
    tf.Tensor
        complex128, the shape of ``z``.

    Examples
    --------
    >>> import numpy as np, scipy.special
    >>> from zcache.shapes import faddeeva
    >>> z = np.array([0.5 + 0.1j, 3.0 + 1e-3j, 20.0 + 2.0j])
    >>> bool(np.allclose(faddeeva(z).numpy(), scipy.special.wofz(z), rtol=1e-12, atol=0.0))
    True
    """
    z = tf.convert_to_tensor(z, tf.complex128)
    lower_half = tf.math.imag(z) < 0.0
    zu = tf.where(lower_half, -z, z)  # in the upper half-plane
    w = _faddeeva_upper(zu)
    z_low = tf.where(lower_half, z, tf.zeros_like(z))  # exp(-z^2) only where used: no inf elsewhere
    return tf.where(lower_half, 2.0 * tf.exp(-z_low * z_low) - w, w)


def _faddeeva_upper(z: tf.Tensor) -> tf.Tensor:
    x, y = tf.math.real(z), tf.math.imag(z)
    far = x * x + y * y >= _W_CF_RADIUS**2
    # Each branch at arguments where it is finite, so that tf.where passes no NaN gradient.
    z_far = tf.where(far, z, tf.fill(tf.shape(z), tf.constant(_W_CF_RADIUS * 1j, tf.complex128)))
    z_near = tf.where(far, tf.zeros_like(z), z)
    # Laplace continued fraction: w = (i/sqrt(pi)) / (z - (1/2)/(z - 1/(z - (3/2)/(z - ...)))).
    r = tf.zeros_like(z_far)
    for k in range(_W_CF_DEPTH, 0, -1):
        r = tf.constant(0.5 * k, tf.complex128) / (z_far - r)
    w_far = tf.constant(1j / _SQRT_PI, tf.complex128) / (z_far - r)
    # Weideman: w = 2 p(Z) / (L - iz)^2 + 1 / (sqrt(pi) (L - iz)),  Z = (L + iz) / (L - iz).
    iz = tf.constant(1j, tf.complex128) * z_near
    denom = tf.constant(_W_L + 0j, tf.complex128) - iz
    big_z = (tf.constant(_W_L + 0j, tf.complex128) + iz) / denom
    p = tf.fill(tf.shape(z_near), tf.constant(complex(_W_COEFFS[0]), tf.complex128))
    for coeff in _W_COEFFS[1:]:
        p = p * big_z + tf.constant(complex(coeff), tf.complex128)
    w_near = 2.0 * p / (denom * denom) + tf.constant(1.0 / _SQRT_PI + 0j, tf.complex128) / denom
    return tf.where(far, w_far, w_near)


# -- models ---------------------------------------------------------------------------------------
class CrystalBall(Model):
    r"""Crystal Ball: a Gaussian core with a power-law tail on one side.

    With :math:`t = \operatorname{sign}(\alpha)(x-\mu)/\sigma` and :math:`a = |\alpha|`:
    :math:`e^{-t^2/2}` for :math:`t \ge -a`, else :math:`A (B - t)^{-n}` with
    :math:`A = (n/a)^n e^{-a^2/2}`, :math:`B = n/a - a` (continuous with a continuous
    derivative at the junction). ``alpha > 0``: the tail is on the left (as
    ``scipy.stats.crystalball(beta=alpha, m=n)``, RooCrystalBall, zfit); ``alpha < 0``: on
    the right (zfit's convention). The integral is analytic (erf for the core, the power law's
    closed form for the tail, a logarithm at ``n = 1``, stable near it).

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    mu : Parameter or float
        The peak position :math:`\mu`.
    sigma : Parameter or float
        The core width :math:`\sigma > 0`.
    alpha : Parameter or float
        Where the tail starts, in units of :math:`\sigma` from the peak; its sign picks the side.
    n : Parameter or float
        The power of the tail, :math:`n > 0`.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space`.
    ParameterValueError
        ``sigma`` or ``n`` is not positive.

    Examples
    --------
    >>> from zcache.models import Space
    >>> from zcache.shapes import CrystalBall
    >>> cb = CrystalBall(Space("x", -10.0, 5.0), mu=0.0, sigma=1.0, alpha=1.0, n=2.0)
    >>> round(float(cb.unnormalized_pdf([0.0])[0]), 12), round(float(cb.integrate(-10.0, 5.0)), 12)
    (1.0, 1.0)
    """

    def __init__(self, space: Space, mu: Any, sigma: Any, alpha: Any, n: Any, *,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "CrystalBall")
        super().__init__(space, {"mu": mu, "sigma": sigma, "alpha": alpha, "n": n}, name=name, extended=extended)
        _check_positive(self, ("sigma", "n"))

    def _oriented(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        p = self.params
        alpha = p["alpha"].value()
        side = tf.where(alpha >= 0.0, tf.constant(1.0, tf.float64), tf.constant(-1.0, tf.float64))
        return p["mu"].value(), p["sigma"].value(), tf.abs(alpha), p["n"].value(), side

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        mu, sigma, alpha, n, side = self._oriented()
        return _cb_shape(side * (x - mu) / sigma, alpha, n)

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limits(lower, upper)
        mu, sigma, alpha, n, side = self._oriented()
        right = side > 0.0
        t1 = tf.where(right, (lower - mu) / sigma, (mu - upper) / sigma)
        t2 = tf.where(right, (upper - mu) / sigma, (mu - lower) / sigma)
        return sigma * _cb_integral(t1, t2, alpha, n)


class DoubleCrystalBall(Model):
    r"""Double-sided Crystal Ball: a Gaussian core with power-law tails on both sides.

    With :math:`t = (x-\mu)/\sigma`: a left tail (as :class:`CrystalBall` with
    :math:`\alpha_L, n_L`) for :math:`t < -\alpha_L`, the Gaussian :math:`e^{-t^2/2}` for
    :math:`-\alpha_L \le t \le \alpha_R`, a mirrored tail with :math:`\alpha_R, n_R` for
    :math:`t > \alpha_R` (``zfit.pdf.DoubleCB``; RooCrystalBall with ``sigmaL = sigmaR``).
    Analytic integral.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    mu : Parameter or float
        The peak position :math:`\mu`.
    sigma : Parameter or float
        The core width :math:`\sigma > 0`.
    alphal : Parameter or float
        Start of the left tail, :math:`\alpha_L \ge 0`, in units of :math:`\sigma` below the peak.
    nl : Parameter or float
        Power of the left tail, :math:`n_L > 0`.
    alphar : Parameter or float
        Start of the right tail, :math:`\alpha_R \ge 0`, in units of :math:`\sigma` above the peak.
    nr : Parameter or float
        Power of the right tail, :math:`n_R > 0`.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space`.
    ParameterValueError
        ``sigma``, ``nl`` or ``nr`` is not positive, or ``alphal`` or ``alphar`` is negative.

    Examples
    --------
    >>> from zcache.models import Space
    >>> from zcache.shapes import DoubleCrystalBall
    >>> dcb = DoubleCrystalBall(Space("x", -8.0, 8.0), 0.0, 1.0, alphal=1.2, nl=3.0, alphar=2.0, nr=5.0)
    >>> round(float(dcb.integrate(-8.0, 0.0) + dcb.integrate(0.0, 8.0)), 12)
    1.0
    """

    def __init__(self, space: Space, mu: Any, sigma: Any, alphal: Any, nl: Any, alphar: Any, nr: Any, *,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "DoubleCrystalBall")
        super().__init__(space, {"mu": mu, "sigma": sigma, "alphal": alphal, "nl": nl, "alphar": alphar, "nr": nr},
                         name=name, extended=extended)
        _check_positive(self, ("sigma", "nl", "nr"))
        for key in ("alphal", "alphar"):
            param = self.params[key]
            if not float(param.value()) >= 0.0:
                raise ParameterValueError(
                    f"DoubleCrystalBall '{self.name}': '{key}' (parameter '{param.name}') is {float(param.value())}; "
                    "it is a distance from the peak in units of sigma and must be >= 0 (the side is fixed by "
                    "the parameter). Give it a non-negative value and lower=0."
                )

    def _values(self) -> tuple[tf.Tensor, ...]:
        p = self.params
        # |alpha|: the side is fixed by the parameter, and a fit stepping below 0 stays finite.
        return (p["mu"].value(), p["sigma"].value(), tf.abs(p["alphal"].value()), p["nl"].value(),
                tf.abs(p["alphar"].value()), p["nr"].value())

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        mu, sigma, alphal, nl, alphar, nr = self._values()
        t = (x - mu) / sigma
        return tf.where(t < 0.0, _cb_shape(t, alphal, nl), _cb_shape(-t, alphar, nr))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limits(lower, upper)
        mu, sigma, alphal, nl, alphar, nr = self._values()
        ta, tb = (lower - mu) / sigma, (upper - mu) / sigma
        left = _cb_integral(tf.minimum(ta, 0.0), tf.minimum(tb, 0.0), alphal, nl)
        right = _cb_integral(-tf.maximum(tb, 0.0), -tf.maximum(ta, 0.0), alphar, nr)  # mirrored: t -> -t
        return sigma * (left + right)


class ARGUS(Model):
    r"""ARGUS threshold shape (RooArgusBG): :math:`x\,u^p e^{c\,u}`, :math:`u = 1 - (x/m_0)^2`, 0 for :math:`x \ge m_0`.

    ``p = 0.5`` is the classic ARGUS function, ``scipy.stats.argus(chi, scale=m0)`` with
    :math:`\chi^2 = -2c`. The integral is analytic for every :math:`p > -1`: with
    :math:`u = 1 - (x/m_0)^2`, :math:`\int x\,u^p e^{cu}\,dx = \tfrac{m_0^2}{2}\int u^p e^{cu}\,du`,
    a regularized incomplete gamma function for :math:`c < -1` (``p = 0.5``: the familiar erf
    form), its power series for :math:`c \ge -1` (positive terms for :math:`c > 0`; accurate up
    to :math:`c \approx 100`).

    Sampling is accept-reject, which needs a bounded density: ``p >= 0``.

    Parameters
    ----------
    space : Space
        A one-dimensional space with ``lower >= 0`` (the shape is negative for :math:`x < 0`).
    m0 : Parameter or float
        The end point :math:`m_0 > 0`; it should lie above the space's lower limit.
    c : Parameter or float
        The curvature :math:`c` (usually negative).
    p : Parameter or float
        The power :math:`p > -1`; default 0.5.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space` or reaches below 0.
    ParameterValueError
        ``m0`` is not positive, or ``p <= -1`` (the density is then not integrable).

    Examples
    --------
    >>> from zcache.models import Space
    >>> from zcache.shapes import ARGUS
    >>> argus = ARGUS(Space("mbc", 5.2, 5.3), m0=5.29, c=-20.0)
    >>> round(float(argus.integrate(5.2, 5.29)), 12), float(argus.pdf([5.295])[0])
    (1.0, 0.0)
    """

    def __init__(self, space: Space, m0: Any, c: Any, p: Any = 0.5, *,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "ARGUS")
        if space.lower[0] < 0.0:
            raise ModelError(
                f"ARGUS is a threshold shape for x >= 0 (it is negative below 0); got {space!r}. "
                "Start the space at 0 or above."
            )
        super().__init__(space, {"m0": m0, "c": c, "p": p}, name=name, extended=extended)
        _check_positive(self, ("m0",))
        _check_positive(self, ("p",), minimum=-1.0)

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        m0, c, p = (self.params[k].value() for k in ("m0", "c", "p"))
        r = x / m0
        u = (1.0 - r) * (1.0 + r)  # 1 - r^2 without cancellation near the end point
        inside = u > 0.0
        safe = tf.where(inside, u, tf.ones_like(u))  # log(u) only where u > 0: finite gradients
        return tf.where(inside, x * tf.exp(p * tf.math.log(safe) + c * safe), tf.zeros_like(u))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limits(lower, upper)
        m0, c, p = (self.params[k].value() for k in ("m0", "c", "p"))
        ra = tf.clip_by_value(lower / m0, 0.0, 1.0)
        rb = tf.clip_by_value(upper / m0, 0.0, 1.0)
        u_hi = (1.0 - ra) * (1.0 + ra)  # u decreases with x
        u_lo = (1.0 - rb) * (1.0 + rb)
        return 0.5 * m0 * m0 * _power_exp_integral(u_lo, u_hi, c, p)


def _power_exp_integral(u1: tf.Tensor, u2: tf.Tensor, c: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    r""":math:`\int_{u_1}^{u_2} u^p e^{cu}\,du` for :math:`0 \le u_1 \le u_2 \le 1`, :math:`p > -1` (broadcasting).

    :math:`c < -1`: :math:`\Gamma(a) s^{-a} [P(a, s u_2) - P(a, s u_1)]`, :math:`a = p + 1`,
    :math:`s = -c`, with the upper regularized function :math:`Q` where both arguments exceed
    :math:`a` (no cancellation of two numbers near 1). :math:`c \ge -1`: the series
    :math:`\sum_k c^k (u_2^{a+k} - u_1^{a+k}) / (k!\,(a+k))`.
    """
    a = p + 1.0
    use_gamma = c < _ARGUS_SERIES_MIN_C
    s = tf.where(use_gamma, -c, tf.ones_like(c))  # a positive argument also in the unused branch
    x1, x2 = s * u1, s * u2
    upper_tail = x1 > a

    def regularized(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # P(a, x), Q(a, x), exactly 0 and 1 at x = 0 (the end point m0 inside the range): the
        # second derivative of P in x is infinite there, and times (dx/dc)^2 = u^2 = 0 it made
        # the exact Hessian NaN (MIGRAD's HESSE of an ARGUS fit was invalid).
        positive = x > 0.0
        safe = tf.where(positive, x, tf.ones_like(x))
        return (tf.where(positive, tf.math.igamma(a, safe), tf.zeros_like(x)),
                tf.where(positive, tf.math.igammac(a, safe), tf.ones_like(x)))

    (p1, q1), (p2, q2) = regularized(x1), regularized(x2)
    diff = tf.where(upper_tail, q1 - q2, p2 - p1)
    gamma_branch = tf.exp(tf.math.lgamma(a) - a * tf.math.log(s)) * diff
    # Series: term_k(u) = u^a (c u)^k / (k! (a + k)); (c u)^k / k! by a cumulative product.
    cs = tf.where(use_gamma, tf.zeros_like(c), c)
    k = tf.constant(np.arange(1.0, _ARGUS_SERIES_TERMS))
    kk = tf.constant(np.arange(0.0, _ARGUS_SERIES_TERMS))

    def primitive(u: tf.Tensor) -> tf.Tensor:
        u = u[..., None]
        ratios = cs * u / k  # (c u) / k, k = 1 .. K-1
        powers = tf.concat([tf.ones_like(u), tf.math.cumprod(ratios, axis=-1)], axis=-1)
        safe_u = tf.where(u > 0.0, u, tf.ones_like(u))
        ua = tf.where(u > 0.0, tf.exp(a * tf.math.log(safe_u)), tf.zeros_like(u))  # u^a, 0 at 0 (a > 0)
        return (ua * tf.reduce_sum(powers / (a + kk), axis=-1, keepdims=True))[..., 0]

    series_branch = primitive(u2) - primitive(u1)
    return tf.where(use_gamma, gamma_branch, series_branch)


class Voigtian(Model):
    r"""Voigt profile: a Breit-Wigner (Lorentzian, half width :math:`\gamma`) convolved with a Gaussian (:math:`\sigma`).

    :math:`V(x) = \operatorname{Re} w(z) / (\sigma\sqrt{2\pi})`,
    :math:`z = (x - \mu + i\gamma)/(\sigma\sqrt 2)`, with :func:`faddeeva` for :math:`w`:
    ``scipy.special.voigt_profile(x - mu, sigma, gamma)``. RooVoigtian's ``width`` is the full
    width :math:`2\gamma`. Relative accuracy about :math:`10^{-14}\sigma/\gamma` (1e-12 for
    :math:`\gamma = 0.01\sigma`, 1e-10 for :math:`\gamma = 10^{-4}\sigma`; see :func:`faddeeva`).

    The normalization is numerical: :math:`x = \mu + h\tan\theta`, :math:`h = \sigma + \gamma`,
    maps the range to a bounded :math:`\theta` interval where the integrand (Lorentzian tails
    included) is smooth, integrated by 16 panels of 16-point Gauss-Legendre (~1e-15 relative,
    for a peak of any width relative to the range, and for each bin of a binned fit).

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    mu : Parameter or float
        The peak position :math:`\mu`.
    sigma : Parameter or float
        The Gaussian width :math:`\sigma > 0`.
    gamma : Parameter or float
        The Lorentzian half width at half maximum :math:`\gamma > 0`.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space`.
    ParameterValueError
        ``sigma`` or ``gamma`` is not positive (for :math:`\gamma = 0` use a Gaussian).

    Examples
    --------
    >>> import numpy as np, scipy.special
    >>> from zcache.models import Space
    >>> from zcache.shapes import Voigtian
    >>> v = Voigtian(Space("m", 0.9, 1.1), mu=1.0195, sigma=0.002, gamma=0.00213)
    >>> x = np.array([1.0, 1.02, 1.05])
    >>> ratio = v.unnormalized_pdf(x).numpy() / scipy.special.voigt_profile(x - 1.0195, 0.002, 0.00213)
    >>> bool(np.allclose(ratio, 1.0, rtol=1e-12)), round(float(v.integrate()), 12)
    (True, 1.0)
    """

    def __init__(self, space: Space, mu: Any, sigma: Any, gamma: Any, *,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "Voigtian")
        super().__init__(space, {"mu": mu, "sigma": sigma, "gamma": gamma}, name=name, extended=extended)
        _check_positive(self, ("sigma", "gamma"))

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        mu, sigma, gamma = (self.params[k].value() for k in ("mu", "sigma", "gamma"))
        scale = sigma * _SQRT2
        z = tf.complex((x - mu) / scale, tf.broadcast_to(gamma / scale, tf.shape(x)))
        return tf.math.real(faddeeva(z)) / (sigma * _SQRT_2PI)

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limits(lower, upper)
        mu, sigma, gamma = (self.params[k].value() for k in ("mu", "sigma", "gamma"))
        h = sigma + gamma
        th1 = tf.atan((lower - mu) / h)[..., None]
        th2 = tf.atan((upper - mu) / h)[..., None]
        # nodes: (..., panels * 16), panel j of width (th2 - th1) / panels
        panel = (th2 - th1) / _V_PANELS
        offsets = (np.arange(_V_PANELS)[:, None] + 0.5 * (_V_T[None, :] + 1.0)).ravel()
        theta = th1 + panel * tf.constant(offsets, tf.float64)
        weights = tf.constant(np.tile(0.5 * _V_W, _V_PANELS), tf.float64)
        cos = tf.cos(theta)
        values = self._unnormalized_pdf(tf.reshape(mu + h * tf.tan(theta), [-1]))
        values = tf.reshape(values, tf.shape(theta))
        return tf.reduce_sum(weights * values * h / (cos * cos), axis=-1) * panel[..., 0]


class JohnsonSU(Model):
    r"""Johnson's :math:`S_U` distribution: a normal variable :math:`\gamma + \delta\sinh^{-1}((x-\mu)/\lambda)`.

    Density :math:`\frac{\delta}{\lambda\sqrt{2\pi}\sqrt{1+z^2}}\,e^{-\frac12(\gamma + \delta\sinh^{-1}z)^2}`,
    :math:`z = (x-\mu)/\lambda`: ``scipy.stats.johnsonsu(a=gamma, b=delta, loc=mu, scale=lambd)``
    (RooJohnson, ``zfit.pdf.JohnsonSU``). Analytic integral through its CDF
    :math:`\Phi(\gamma + \delta\sinh^{-1}z)`; exact sampling by the inverse CDF, truncated to the space.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    mu : Parameter or float
        The location :math:`\mu`.
    lambd : Parameter or float
        The scale :math:`\lambda > 0`.
    gamma : Parameter or float
        The shape :math:`\gamma` (skewness: positive skews to the left).
    delta : Parameter or float
        The shape :math:`\delta > 0` (tail weight: small is heavy-tailed).
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not a one-dimensional :class:`~zcache.models.Space`.
    ParameterValueError
        ``lambd`` or ``delta`` is not positive.

    Examples
    --------
    >>> import scipy.stats
    >>> from zcache.models import Space
    >>> from zcache.shapes import JohnsonSU
    >>> j = JohnsonSU(Space("x", -20.0, 20.0), mu=0.5, lambd=2.0, gamma=-0.4, delta=1.3)
    >>> ref = scipy.stats.johnsonsu(-0.4, 1.3, loc=0.5, scale=2.0)
    >>> truth = (ref.cdf(1.0) - ref.cdf(-1.0)) / (ref.cdf(20.0) - ref.cdf(-20.0))
    >>> bool(abs(float(j.integrate(-1.0, 1.0)) / truth - 1.0) < 1e-12)
    True
    """

    def __init__(self, space: Space, mu: Any, lambd: Any, gamma: Any, delta: Any, *,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "JohnsonSU")
        super().__init__(space, {"mu": mu, "lambd": lambd, "gamma": gamma, "delta": delta},
                         name=name, extended=extended)
        _check_positive(self, ("lambd", "delta"))

    def _normal(self, x: tf.Tensor) -> tf.Tensor:
        r"""The standard-normal variable :math:`\gamma + \delta \sinh^{-1}((x-\mu)/\lambda)`."""
        p = self.params
        return p["gamma"].value() + p["delta"].value() * tf.asinh((x - p["mu"].value()) / p["lambd"].value())

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        p = self.params
        lambd, delta = p["lambd"].value(), p["delta"].value()
        z = (x - p["mu"].value()) / lambd
        u = p["gamma"].value() + delta * tf.asinh(z)
        return delta / (lambd * _SQRT_2PI) * tf.exp(-0.5 * u * u) / tf.sqrt(1.0 + z * z)

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limits(lower, upper)
        return _gauss_integral(self._normal(lower), self._normal(upper)) / _SQRT_2PI

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # Inverse CDF in the normal variable on [Phi(ua), Phi(ub)], from the lower tail where Phi
        # and ndtri are accurate: a range above the median is mirrored first (as Gaussian._sample).
        p = self.params
        lo, hi = self.space.lower[0], self.space.upper[0]
        ua, ub = self._normal(tf.constant(lo, tf.float64)), self._normal(tf.constant(hi, tf.float64))
        above = ua > 0.0
        a = tf.where(above, -ub, ua)
        b = tf.where(above, -ua, ub)
        cdf_a = 0.5 * tf.math.erfc(-a / _SQRT2)
        cdf_b = 0.5 * tf.math.erfc(-b / _SQRT2)
        v = tf.math.ndtri(rng().uniform([n], dtype=tf.float64) * (cdf_b - cdf_a) + cdf_a)
        u = tf.where(above, -v, v)
        x = p["mu"].value() + p["lambd"].value() * tf.sinh((u - p["gamma"].value()) / p["delta"].value())
        return tf.clip_by_value(x, lo, hi)



leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
