r"""The common line shapes: peaks and thresholds, polynomials, data-driven densities.

Peaks and thresholds: Crystal Ball, double Crystal Ball, ARGUS, Voigtian, Johnson SU; polynomials:
Chebyshev, Bernstein; data-driven: a Gaussian KDE and a histogram template.

Each shape is a one-dimensional :class:`zcache.models.Model` (space first, then its parameters,
each a :class:`zcache.Parameter` or a number for a fixed value), so normalization caching,
per-dataset pdf caches, sampling and extended yields come from the base class. Every shape
has an ``_integral(lower, upper)`` that broadcasts over arrays of limits (all bins of a binned
fit in one call):

================================  ==============================  ==========================================
class                             integral                        sampling
================================  ==============================  ==========================================
:class:`CrystalBall`              analytic (erf + power law)      accept-reject
:class:`DoubleCrystalBall`        analytic                        accept-reject
:class:`ARGUS`                    analytic (incomplete gamma)     accept-reject
:class:`Voigtian`                 Gauss-Legendre (tan map)        accept-reject
:class:`JohnsonSU`                analytic (normal CDF)           exact (inverse CDF)
:class:`Chebyshev`                analytic (antiderivative)       accept-reject
:class:`Bernstein`                analytic (antiderivative)       accept-reject
:class:`KDE1D`                    analytic (erf differences)      exact (kernel, then inverse CDF)
:class:`HistogramPdf`             analytic (piecewise linear)     exact (bin, then uniform)
================================  ==============================  ==========================================

:func:`faddeeva` is the Faddeeva function :math:`w(z) = e^{-z^2}\operatorname{erfc}(-iz)` in
TensorFlow (differentiable), which the Voigtian needs.

Notes
-----
Conventions:

- Crystal Ball: with :math:`t = (x-\mu)/\sigma`, the tail replaces the Gaussian for
  :math:`t < -\alpha` when ``alpha > 0`` (a **left** tail, as ``scipy.stats.crystalball(beta=alpha,
  m=n)``, RooCrystalBall / RooCBShape and ``zfit.pdf.CrystalBall``), and for :math:`t > -\alpha =
  |\alpha|` when ``alpha < 0`` (a **right** tail: zfit's convention). The peak value of the
  unnormalized density is 1.
- Double Crystal Ball: a left tail at :math:`t < -\alpha_L` and a right tail at :math:`t >
  \alpha_R`, both ``alphal`` and ``alphar`` non-negative (``zfit.pdf.DoubleCB``, RooCrystalBall
  with one sigma).
- ARGUS: RooArgusBG, :math:`x\,(1-(x/m_0)^2)^p\,e^{c(1-(x/m_0)^2)}` below the end point
  :math:`m_0` and 0 above; ``scipy.stats.argus(chi, scale=m0)`` is ``p = 0.5`` with
  :math:`\chi^2 = -2c`.
- Voigtian: ``scipy.special.voigt_profile(x - mu, sigma, gamma)`` (``gamma`` the Lorentzian's half
  width at half maximum; RooVoigtian's ``width`` is the full width :math:`2\gamma`).
- Johnson SU: ``scipy.stats.johnsonsu(a=gamma, b=delta, loc=mu, scale=lambd)`` (RooJohnson with
  ``lambda = lambd``, ``zfit.pdf.JohnsonSU``).
- Chebyshev: :math:`1 + \sum_{i=1}^n c_i T_i(x')` with :math:`x' = (2x - l - u)/(u - l) \in
  [-1, 1]` over the space :math:`[l, u]`; the constant term is fixed to 1 (RooChebychev,
  ``zfit.pdf.Chebyshev``). Evaluated by Clenshaw's recurrence.
- Bernstein: :math:`\sum_{i=0}^n b_i \binom{n}{i} t^i (1-t)^{n-i}` with :math:`t = (x - l)/(u - l)
  \in [0, 1]` (RooBernstein, ``zfit.pdf.Bernstein``), evaluated by de Casteljau's algorithm.
  Every coefficient is a parameter; the overall scale cancels in the normalization, so fix one
  of them in a fit (else the likelihood has a flat direction).
- Neither polynomial is forced to be non-negative: a Chebyshev series or a Bernstein polynomial
  with a negative coefficient can dip below zero. It is never clipped: at such coefficients
  (negative at one of 1025 evenly spaced points of the space, or an integral that is not
  positive) the normalization is NaN, so ``pdf`` and ``log_pdf`` raise
  :class:`~zcache.exceptions.DensityError` and a loss is NaN, from which MIGRAD steps back (a fit
  that runs into the region ends invalid at its edge, never valid inside it). Non-negative
  Bernstein coefficients guarantee a non-negative density: give them ``lower=0`` limits.
- KDE1D: the Gaussian kernel density of fixed data, truncated to the space and renormalized;
  the bandwidth rules are ``scipy.stats.gaussian_kde``'s. The data are copied when the model is
  built; a later ``set_data`` of the :class:`zcache.Data` does not change it.
- HistogramPdf: a piecewise-constant density from ``numpy.histogram``'s ``counts, edges`` or a
  1-D ``hist.Hist`` / ``boost_histogram.Histogram``; 0 outside its edges.

Width-like parameters (sigma, n, lambd, delta, gamma of the Voigtian, m0) must be positive when
the model is built (:class:`zcache.exceptions.ParameterValueError` otherwise); give them
positive lower limits so that a fit keeps them so. Every density is finite, and so is its
gradient, everywhere in the space: tails are computed in logarithmic form, and each branch of a
``tf.where`` is evaluated at safe arguments.

References
----------
RooFit: RooCrystalBall, RooCBShape, RooArgusBG, RooVoigtian, RooJohnson, RooChebychev,
RooBernstein, RooKeysPdf (an adaptive KDE), RooHistPdf. zfit: ``zfit.pdf.CrystalBall``,
``DoubleCB``, ``JohnsonSU``, ``Chebyshev``, ``Bernstein``, ``KDE1DimExact``, ``HistogramPDF``. scipy:
``scipy.stats.crystalball``, ``argus``, ``johnsonsu``, ``gaussian_kde``, ``scipy.special.voigt_profile``,
``wofz``, ``numpy.polynomial.chebyshev``, ``scipy.interpolate.BPoly``. J. A. C. Weideman,
"Computation of the complex error function", SIAM J. Numer. Anal. 31 (1994) 1497.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space
>>> from zcache.shapes import CrystalBall
>>> space = Space("m", 5.0, 5.6)
>>> mu = zcache.Parameter("mu_cb_doc", 5.28, lower=5.2, upper=5.35)
>>> sigma = zcache.Parameter("sigma_cb_doc", 0.02, lower=1e-3)
>>> cb = CrystalBall(space, mu, sigma, alpha=1.5, n=3.0)       # left tail
>>> round(float(cb.integrate()), 12)
1.0
>>> data = cb.sample(500)
>>> data.nevents, bool(cb.pdf(data).numpy().min() > 0.0)
(500, True)
>>> from zcache.shapes import Chebyshev, HistogramPdf
>>> space = Space("m", 0.0, 10.0)
>>> c1 = zcache.Parameter("c1_extra_doc", -0.3, lower=-1.0, upper=1.0)
>>> bkg = Chebyshev(space, [c1, 0.05])
>>> round(float(bkg.integrate()), 12)
1.0
>>> counts, edges = np.histogram(np.random.default_rng(1).uniform(0.0, 10.0, 1000), bins=20, range=(0.0, 10.0))
>>> h = HistogramPdf(space, counts, edges)
>>> bool(abs(float(h.integrate(0.0, 5.0)) - counts[:10].sum() / 1000.0) < 1e-12)
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.special
import tensorflow as tf

from ._engine.cachable import cached
from ._engine.data import Data
from ._engine.parameter import Parameter
from ._engine.tf_internals import leave_to_python
from .exceptions import ModelError, ParameterValueError
from .models import Model, Space, one_dimensional
from .sampling import rng, truncated_normal

__all__ = [
    "CrystalBall", "DoubleCrystalBall", "ARGUS", "Voigtian", "JohnsonSU", "faddeeva",
    "Chebyshev", "Bernstein", "KDE1D", "HistogramPdf",
]

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


# == polynomials and data-driven shapes ==========================================================
# KDE1D evaluates events in blocks of at most this many (event, kernel) pairs, so that memory
# stays ~ 3 x 8 bytes x 2^22 = 100 MB whatever the numbers of events and kernels.
_KDE_BLOCK_PAIRS = 1 << 22
# Histogram edges must meet the space's limits to this fraction of its width (rounding only).
_EDGE_RTOL = 1e-12


# -- checks and helpers -------------------------------------------------------------------------
def _limit_tensors(lower: Any, upper: Any) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.convert_to_tensor(lower, tf.float64), tf.convert_to_tensor(upper, tf.float64)


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


def _erf_difference(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """``erf(b) - erf(a)`` for ``a <= b``, with erfc on the side away from 0 (no cancellation in a tail)."""
    return tf.where(a >= 0.0, tf.math.erfc(a) - tf.math.erfc(b),
                    tf.where(b <= 0.0, tf.math.erfc(-b) - tf.math.erfc(-a), tf.math.erf(b) - tf.math.erf(a)))


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
        lower, upper = _limit_tensors(lower, upper)
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
        lower, upper = _limit_tensors(lower, upper)
        b = [self.params[k].value() for k in self._keys]
        # Antiderivative (degree n + 1): d_0 = 0, d_j = (b_0 + ... + b_{j-1}) / (n + 1).
        scale = 1.0 / len(b)
        d: list[Any] = [0.0]
        for coeff in b:
            d.append(d[-1] + scale * coeff)
        return self._width * (_de_casteljau(d, self._mapped(upper)) - _de_casteljau(d, self._mapped(lower)))


# -- kernel density -------------------------------------------------------------------------------
def _kde_points(space: Space, data: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The data as a 1-D float array, and the weights of a weighted zcache.Data (else None)."""
    if isinstance(data, Data):
        points = space.select(data).numpy()[: data.nevents]  # padded data: the events only
        weights = data.weights_data.numpy() if data.is_weighted else None
    else:
        try:
            points = np.asarray(data, dtype=float)
        except (TypeError, ValueError) as err:
            raise ModelError(f"KDE1D needs a numpy array or a zcache.Data of events, got {data!r}.") from err
        weights = None
    if points.ndim == 2 and points.shape[1] == 1:
        points = points[:, 0]
    if points.ndim != 1:
        raise ModelError(f"KDE1D needs one-dimensional data (shape (N,) or (N, 1)), got shape {points.shape}.")
    if points.size == 0:
        raise ModelError("KDE1D got no data points; give at least one event (two for the 'scott'/'silverman' rules).")
    if not np.all(np.isfinite(points)):
        raise ModelError(f"KDE1D: {int(np.sum(~np.isfinite(points)))} data point(s) are NaN or infinite; remove them.")
    return np.array(points, dtype=np.float64), weights


def _kde_weights(weights: Any, n: int) -> np.ndarray:
    """Weights normalized to sum 1 (uniform when None)."""
    if weights is None:
        return np.full(n, 1.0 / n)
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError) as err:
        raise ModelError(f"KDE1D: weights must be numbers, got {weights!r}.") from err
    if w.shape != (n,):
        raise ModelError(f"KDE1D: give one weight per data point ({n}), got shape {w.shape}.")
    if not np.all(np.isfinite(w)):
        raise ModelError("KDE1D: some weights are NaN or infinite; give finite weights.")
    if np.any(w < 0.0):
        raise ModelError(
            "KDE1D: some weights are negative (sWeights?); a kernel density needs non-negative weights. "
            "Drop or clip the negative ones."
        )
    total = w.sum()
    if not total > 0.0:
        raise ModelError("KDE1D: the weights sum to 0; give at least one positive weight.")
    return w / total


def _kde_bandwidth(rule: Any, points: np.ndarray, w: np.ndarray) -> float:
    """The kernel's standard deviation: scipy.stats.gaussian_kde's rule x weighted std, or a number."""
    if isinstance(rule, str):
        neff = 1.0 / np.sum(w * w)
        if rule == "scott":
            factor = neff ** (-1.0 / 5.0)
        elif rule == "silverman":
            factor = (0.75 * neff) ** (-1.0 / 5.0)
        else:
            raise ModelError(f"KDE1D: unknown bandwidth rule {rule!r}; use 'scott', 'silverman' or a positive number.")
        # numpy.cov(points, aweights=w) with ddof=1, as gaussian_kde computes it
        mean = np.sum(w * points)
        denominator = 1.0 - np.sum(w * w)
        var = np.sum(w * (points - mean) ** 2) / denominator if denominator > 0.0 else 0.0
        if not var > 0.0:
            raise ParameterValueError(
                f"KDE1D: the data have no spread (one distinct point with positive weight), so the "
                f"{rule!r} bandwidth is 0; give bandwidth=<a positive number> (the kernel's standard deviation)."
            )
        return float(math.sqrt(var) * factor)
    if isinstance(rule, bool):
        raise ModelError(f"KDE1D: bandwidth must be 'scott', 'silverman' or a positive number, got {rule!r}.")
    try:
        value = float(rule)
    except (TypeError, ValueError) as err:
        raise ModelError(f"KDE1D: bandwidth must be 'scott', 'silverman' or a positive number, got {rule!r}.") from err
    if not (math.isfinite(value) and value > 0.0):
        raise ParameterValueError(
            f"KDE1D: the bandwidth is {value}; it must be a positive finite number (the kernel's standard "
            "deviation, in units of the observable)."
        )
    return value


class KDE1D(Model):
    r"""Gaussian kernel density estimate of fixed data, truncated to the space and renormalized.

    :math:`f(x) = \sum_k w_k\, \phi((x - x_k)/h)/h` over the data points :math:`x_k` (weights
    :math:`w_k` normalized to 1, uniform by default), divided by its integral over the space.
    Every data point contributes, also one outside the space (its kernel's tail), which is the
    KDE of all the data restricted to the space: ``scipy.stats.gaussian_kde(points, weights=w)``
    over the space, divided by its integral there.

    The bandwidth :math:`h` (the kernel's standard deviation) is ``"scott"`` or ``"silverman"``
    as ``scipy.stats.gaussian_kde`` computes them: a factor :math:`n_\mathrm{eff}^{-1/5}` (Scott)
    or :math:`(3 n_\mathrm{eff}/4)^{-1/5}` (Silverman), :math:`n_\mathrm{eff} = 1/\sum w_k^2`,
    times the weighted standard deviation of the data (``numpy.cov`` with ``aweights``); or a
    positive number, taken as :math:`h` itself in units of the observable (not a factor, unlike
    a number passed to scipy's ``bw_method``).

    The model has no parameters: the data and the bandwidth are fixed when it is built (a later
    ``set_data`` of a :class:`zcache.Data` passed in does not change it), so its normalization
    is computed once. The integral is analytic (a sum of erf differences over the kernels) and
    sampling is exact: a kernel is chosen with probability proportional to :math:`w_k` times its
    mass inside the space, and the event drawn from that kernel truncated to the space by its
    inverse CDF (no loop, no rejection).

    Evaluation costs :math:`O(N_\mathrm{events} \times N_\mathrm{kernels})`: events are evaluated
    in blocks of at most :math:`2^{22}` (event, kernel) pairs (``tf.map_fn``), so memory stays
    around 100 MB for any sizes, but time grows with the product: a few nanoseconds per pair on
    a CPU (about 1 s for :math:`2\cdot 10^4` events times :math:`2\cdot 10^4` kernels, 20 s for
    :math:`10^5 \times 10^5`). A fit computes the pdf of its dataset once and reads it from the
    cache afterwards, as the KDE has no parameters. ``_integral`` builds an (n_limits, n_kernels)
    matrix, which is small for the edges of a binned fit.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    data : numpy.ndarray or zcache.Data
        The data points, shape (N,) or (N, 1), at least one, all finite; a :class:`zcache.Data`
        gives its column of the space's observable (and its weights, unless ``weights`` is given).
    bandwidth : {"scott", "silverman"} or float, default "scott"
        The rule, or the kernel's standard deviation (> 0).
    weights : array_like, optional
        One non-negative weight per data point, not all zero.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional; the data are empty, not 1-D, NaN or infinite; the
        weights are the wrong length, negative, NaN or sum to 0; the bandwidth rule is unknown;
        or the kernels put no probability inside the space.
    ParameterValueError
        The bandwidth is not a positive finite number, or a rule gives 0 (the data have no spread).

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.models import Space
    >>> from zcache.shapes import KDE1D
    >>> kde = KDE1D(Space("x", -3.0, 3.0), np.array([-1.0, 0.0, 0.5, 2.0]), bandwidth=0.4)
    >>> kde.bandwidth, round(float(kde.integrate()), 12)
    (0.4, 1.0)
    >>> x = kde.sample(200).numpy()
    >>> bool(x.min() >= -3.0 and x.max() <= 3.0)
    True
    """

    def __init__(self, space: Space, data: Any, *, bandwidth: str | float = "scott", weights: Any = None,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "KDE1D")
        points, data_weights = _kde_points(space, data)
        w = _kde_weights(data_weights if weights is None else weights, points.size)
        h = _kde_bandwidth(bandwidth, points, w)
        lo, hi = space.lower[0], space.upper[0]
        # Each kernel's probability inside the space (for sampling, and to refuse a KDE with none).
        mass = 0.5 * _np_erf_difference((lo - points) / (h * _SQRT2), (hi - points) / (h * _SQRT2))
        choose = w * mass
        if not choose.sum() > 0.0:
            raise ModelError(
                f"KDE1D: the kernels (bandwidth {h:g}) put no probability inside {space!r}: the data lie "
                "too far from it. Give data inside the space, or a larger bandwidth."
            )
        super().__init__(space, {}, name=name, extended=extended)
        self._h = h
        self._points = points
        self._weights = w
        self._choose = np.cumsum(choose)
        self._block = max(1, _KDE_BLOCK_PAIRS // points.size)

    @property
    def bandwidth(self) -> float:
        """The kernel's standard deviation :math:`h`, in units of the observable."""
        return self._h

    @property
    def n_kernels(self) -> int:
        """The number of data points (kernels)."""
        return int(self._points.size)

    def _kernel_sum(self, x: tf.Tensor) -> tf.Tensor:
        points = tf.constant(self._points[None, :])
        weights = tf.constant(self._weights[:, None])
        z = (x[:, None] - points) * (1.0 / self._h)
        return tf.linalg.matmul(tf.exp(-0.5 * z * z), weights)[:, 0]

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.convert_to_tensor(x, tf.float64)
        shape = tf.shape(x)
        flat = tf.reshape(x, [-1])
        n = tf.size(flat)
        # Blocks of `block` events (at most _KDE_BLOCK_PAIRS pairs each), the last one padded.
        block = tf.minimum(tf.constant(self._block), tf.maximum(n, 1))
        count = (n + block - 1) // block
        padded = tf.pad(flat, [[0, count * block - n]])
        blocks = tf.reshape(padded, tf.stack([count, block]))
        values = tf.map_fn(self._kernel_sum, blocks, fn_output_signature=tf.TensorSpec([None], tf.float64))
        out = tf.reshape(values, [-1])[:n]
        return tf.reshape(out, shape) * (1.0 / (self._h * _SQRT_2PI))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limit_tensors(lower, upper)
        points = tf.constant(self._points)
        scale = 1.0 / (self._h * _SQRT2)
        a = (lower[..., None] - points) * scale
        b = (upper[..., None] - points) * scale
        return 0.5 * tf.reduce_sum(tf.constant(self._weights) * _erf_difference(a, b), axis=-1)

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # The kernel by its weight x mass inside the space; then the inverse CDF of that kernel
        # on [lo, hi], from the lower tail (a range above the kernel's centre is mirrored first),
        # where the normal CDF and its inverse are accurate.
        cum = tf.constant(self._choose)
        u = rng().uniform([n], dtype=tf.float64) * cum[-1]
        k = tf.minimum(tf.searchsorted(cum, u, side="right"), self.n_kernels - 1)
        mu = tf.gather(tf.constant(self._points), k)
        return truncated_normal(n, mu, self._h, self.space.lower[0], self.space.upper[0])


def _np_erf_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The numpy twin of :func:`_erf_difference`."""
    erf, erfc = scipy.special.erf, scipy.special.erfc
    return np.where(a >= 0.0, erfc(a) - erfc(b), np.where(b <= 0.0, erfc(-b) - erfc(-a), erf(b) - erf(a)))


# -- histogram ------------------------------------------------------------------------------------
def _histogram_arrays(counts: Any, edges: Any) -> tuple[np.ndarray, np.ndarray]:
    """``counts, edges`` as float arrays, from numpy.histogram's pair or a 1-D hist / boost-histogram object."""
    if edges is None:
        if not (callable(getattr(counts, "values", None)) and hasattr(counts, "axes")):
            raise ModelError(
                "HistogramPdf needs counts and edges (as numpy.histogram returns them), or a 1-D hist.Hist / "
                f"boost_histogram.Histogram; got {type(counts).__name__} without edges."
            )
        if len(counts.axes) != 1:
            raise ModelError(f"HistogramPdf needs a 1-D histogram, got one with {len(counts.axes)} axes.")
        edges = counts.axes[0].edges
        counts = counts.values()
    elif hasattr(counts, "axes") and callable(getattr(counts, "values", None)):
        raise ModelError("HistogramPdf: a histogram object carries its own edges; do not pass edges too.")
    try:
        c = np.array(counts, dtype=float)
        e = np.array(edges, dtype=float)
    except (TypeError, ValueError) as err:
        raise ModelError(f"HistogramPdf: counts and edges must be numbers, got {counts!r} and {edges!r}.") from err
    if c.ndim != 1 or c.size == 0:
        raise ModelError(f"HistogramPdf needs 1-D counts with at least one bin, got shape {c.shape}.")
    if e.shape != (c.size + 1,):
        raise ModelError(
            f"HistogramPdf: {c.size} bins need {c.size + 1} edges (as numpy.histogram returns), got shape {e.shape}."
        )
    if not np.all(np.isfinite(c)):
        raise ModelError("HistogramPdf: some counts are NaN or infinite; give finite counts.")
    if not np.all(np.isfinite(e)):
        raise ModelError("HistogramPdf: some edges are NaN or infinite; give finite edges.")
    if np.any(c < 0.0):
        raise ModelError(
            f"HistogramPdf: {int(np.sum(c < 0.0))} bin(s) have negative counts; a density needs counts >= 0 "
            "(clip them to 0, or merge bins)."
        )
    if not c.sum() > 0.0:
        raise ModelError("HistogramPdf: all counts are 0; give a histogram with at least one positive count.")
    if not np.all(np.diff(e) > 0.0):
        raise ModelError("HistogramPdf: the edges must be strictly increasing; sort them and remove duplicates.")
    return c, e


class HistogramPdf(Model):
    r"""A piecewise-constant density from a histogram: :math:`c_i / (w_i \sum_j c_j)` in bin :math:`i`.

    From ``counts, edges`` as ``numpy.histogram`` returns them, or from a 1-D ``hist.Hist`` /
    ``boost_histogram.Histogram`` (its ``.values()`` without flow bins, and ``.axes[0].edges``;
    a weighted histogram gives its sums of weights). The edges must cover the space exactly.
    Bins are half-open :math:`[e_i, e_{i+1})` except the last, which includes its upper edge (as
    ``numpy.histogram``); the density is 0 outside the edges. The histogram is copied when the
    model is built, which has no parameters. The integral is analytic (the CDF is piecewise
    linear, sub-ranges too) and sampling exact (a bin by its probability, then uniform inside).

    Parameters
    ----------
    space : Space
        A one-dimensional space; the first and last edges must equal its limits.
    counts : array_like or hist.Hist
        The bin contents (non-negative, finite, not all zero), or a 1-D histogram object (then
        ``edges`` must be None).
    edges : array_like, optional
        The ``len(counts) + 1`` bin edges, strictly increasing.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional; the counts are negative, all zero, NaN or not 1-D;
        the edges are missing, the wrong number, not strictly increasing, or do not start and
        end at the space's limits; or a histogram object has more than one axis.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.models import Space
    >>> from zcache.shapes import HistogramPdf
    >>> h = HistogramPdf(Space("x", 0.0, 4.0), [1.0, 3.0, 0.0, 4.0], [0.0, 1.0, 2.0, 3.0, 4.0])
    >>> h.pdf(np.array([0.5, 1.0, 2.5, 4.0])).numpy().tolist()
    [0.125, 0.375, 0.0, 0.5]
    >>> float(h.integrate(0.5, 1.5))
    0.25
    """

    def __init__(self, space: Space, counts: Any, edges: Any = None, *, name: str | None = None,
                 extended: Any = None) -> None:
        one_dimensional(space, "HistogramPdf")
        c, e = _histogram_arrays(counts, edges)
        lo, hi = space.lower[0], space.upper[0]
        tolerance = _EDGE_RTOL * (hi - lo)
        if abs(e[0] - lo) > tolerance or abs(e[-1] - hi) > tolerance:
            raise ModelError(
                f"HistogramPdf: the edges span [{e[0]:g}, {e[-1]:g}] but the space is {space!r}; the edges must "
                "cover the space exactly: build the histogram with range=(lower, upper) of the space, or "
                "build the space from the first and last edges."
            )
        e[0], e[-1] = lo, hi  # rounding only (checked above)
        super().__init__(space, {}, name=name, extended=extended)
        self._counts = c
        self._edges = e
        self._widths = np.diff(e)
        self._cumulative = np.concatenate([[0.0], np.cumsum(c)])

    @property
    def counts(self) -> np.ndarray:
        """A copy of the bin contents."""
        return self._counts.copy()

    @property
    def edges(self) -> np.ndarray:
        """A copy of the bin edges."""
        return self._edges.copy()

    def _bin(self, x: tf.Tensor) -> tf.Tensor:
        """The bin of each value of the 1-D ``x`` (0 below the first inner edge, the last bin above)."""
        return tf.searchsorted(tf.constant(self._edges[1:-1]), x, side="right")

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.convert_to_tensor(x, tf.float64)
        flat = tf.reshape(x, [-1])
        density = tf.gather(tf.constant(self._counts / self._widths), self._bin(flat))
        inside = tf.logical_and(flat >= self._edges[0], flat <= self._edges[-1])
        return tf.reshape(tf.where(inside, density, tf.zeros_like(density)), tf.shape(x))

    def _cdf(self, x: tf.Tensor) -> tf.Tensor:
        """The unnormalized CDF (counts below ``x``), piecewise linear, for any shape of ``x``."""
        flat = tf.clip_by_value(tf.reshape(x, [-1]), self._edges[0], self._edges[-1])
        i = self._bin(flat)
        start = tf.gather(tf.constant(self._edges[:-1]), i)
        inside = tf.gather(tf.constant(self._counts), i) * (flat - start) / tf.gather(tf.constant(self._widths), i)
        return tf.reshape(tf.gather(tf.constant(self._cumulative[:-1]), i) + inside, tf.shape(x))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = _limit_tensors(lower, upper)
        return self._cdf(upper) - self._cdf(lower)

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        cum = tf.constant(self._cumulative[1:])
        u = rng().uniform([n], dtype=tf.float64) * cum[-1]
        i = tf.minimum(tf.searchsorted(cum, u, side="right"), self._counts.size - 1)
        start = tf.gather(tf.constant(self._edges[:-1]), i)
        x = start + rng().uniform([n], dtype=tf.float64) * tf.gather(tf.constant(self._widths), i)
        return tf.clip_by_value(x, self._edges[0], self._edges[-1])


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
