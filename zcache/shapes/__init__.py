r"""The common line shapes: peaks and thresholds, polynomials, data-driven densities.

What to use when:

- **a mass peak with a radiative (low-side) tail**: :class:`CrystalBall` (one tail, either side by the
  sign of ``alpha``); tails on both sides (resolution plus radiation): :class:`DoubleCrystalBall`.
- **a peak of natural width seen through a Gaussian resolution**: :class:`Voigtian`
  (:func:`faddeeva` is the complex function under it); **an asymmetric peak with long tails**:
  :class:`JohnsonSU`. A plain Gaussian peak is :class:`zcache.models.Gaussian`.
- **combinatorial background falling to a kinematic end point** (B-factory beam-constrained mass):
  :class:`ARGUS`. A plain exponential background is :class:`zcache.models.Exponential`.
- **a smooth background of unknown form**: :class:`Chebyshev` (RooChebychev's convention, the
  constant term fixed to 1) or :class:`Bernstein` (non-negative coefficients give a non-negative
  polynomial; fix one of them).
- **a shape taken from simulation or a control sample**: :class:`KDE1D` (smooth, from the events
  themselves) or :class:`HistogramPdf` (piecewise constant, from a histogram; a binned fit of
  templates with their statistical uncertainty is :mod:`zcache.binned`).

Every shape here is one-dimensional; combine them with :class:`zcache.models.SumPdf` and
:class:`zcache.models.ProductPdf`.

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

from ._histogram import HistogramPdf
from ._kde import KDE1D
from ._physics import ARGUS, CrystalBall, DoubleCrystalBall, JohnsonSU, Voigtian, faddeeva
from ._polynomials import Bernstein, Chebyshev

__all__ = [
    "CrystalBall", "DoubleCrystalBall", "ARGUS", "Voigtian", "JohnsonSU", "faddeeva",
    "Chebyshev", "Bernstein", "KDE1D", "HistogramPdf",
]
