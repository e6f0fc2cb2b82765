r"""Models: probability densities normalized over an observable space.

What to use when:

- **the observables and their range**: :class:`Space` (``Space("x", 0.0, 10.0)``; ``space_x *
  space_y`` for two observables). Every model, and every loss's data check, works over one.
- **a peak or a falling background with nothing special**: :class:`Gaussian` and :class:`Exponential`
  (analytic integrals, exact sampling). For Crystal Ball, ARGUS, Voigtian, Johnson SU, polynomials,
  a KDE or a histogram template use :mod:`zcache.shapes`; for amplitude sums :mod:`zcache.amplitude`.
- **a density you can write as a formula**: :class:`FunctionPdf` (a plain function of ``x`` and the
  parameters, its integral given or numerical). Subclass :class:`Model` instead when the shape needs
  its own caches (:func:`zcache.cached` methods), sampling or analytic Hessian.
- **signal plus background**: :class:`SumPdf` with ``fracs=`` (a shape fit) or ``yields=`` (an
  extended fit: fit with :class:`zcache.loss.ExtendedUnbinnedNLL`).
- **independent observables**: :class:`ProductPdf` (a model over the product of its parts' spaces).
- **writing a model class**: :func:`as_parameter` (a number becomes a fixed Parameter),
  :func:`one_dimensional` (check the space), :func:`unique_parameters` (list parameters once).
- **random numbers**: every sampler of zcache (models, phase space, toys) draws from one generator,
  :func:`rng`, seeded by :func:`set_seed`; :func:`accept_reject` and :func:`accept_reject_pool` are
  the one accept-reject sampler (for a model without an exact one), :func:`truncated_normal` draws a
  normal inside limits, :func:`adaptive_batch` sizes accept-reject's batches.

A model is a density :math:`f(x;\theta)/\int_\Omega f\,dx` over a rectangular
:class:`Space` :math:`\Omega`. A subclass defines only the unnormalized density
and, where one exists, its analytic integral; everything else (normalization,
per-dataset caching, sampling, extended yields) comes from :class:`Model`:

.. code-block:: python

    class Linear(zcache.models.Model):
        def __init__(self, space, slope):
            super().__init__(space, {"slope": slope})

        def _unnormalized_pdf(self, x):
            return 1.0 + self.params["slope"].value() * x

What is cached, and why:

- ``normalization()`` depends on parameters only, so it is computed once and
  reused across datasets (toys) until a shape parameter changes;
- ``pdf(data)`` is cached per dataset, so a sum recomputes only the components
  whose parameters moved (Minuit's numerical gradient moves one at a time), and a
  component with fixed parameters is computed once per dataset.

:func:`zcache.precompute` (which :class:`zcache.minimize.Minuit` applies) bypasses
the caches of nodes that change on every call of a fit, so they cost nothing.

Sampling is exact (inverse CDF) where a model defines ``_sample(n)``, else accept-reject
(:func:`accept_reject`) under an adaptive envelope (``Model._fmax``).

Examples
--------
>>> import zcache
>>> from zcache.models import Space, Gaussian, Exponential, SumPdf
>>> space = Space("x", 0.0, 10.0)
>>> mu, sigma = zcache.Parameter("mu_m", 5.0), zcache.Parameter("sigma_m", 1.0, lower=0.1)
>>> model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, -0.3)], fracs=[0.4])
>>> round(float(model.integrate(0.0, 10.0)), 12)
1.0
>>> data = model.sample(1000)
>>> data.nevents, data.obs
(1000, ('x',))
"""


from ._base import Model, as_parameter, unique_parameters
from ._base import density as density  # not in __all__ (a helper of models), importable as before
from ._basic import Exponential, FunctionPdf, Gaussian
from ._composite import ProductPdf, SumPdf
from ._sampling import accept_reject, accept_reject_pool, adaptive_batch, rng, set_seed, truncated_normal
from ._space import Space, one_dimensional

__all__ = [
    "Space",
    "Model",
    "Gaussian",
    "Exponential",
    "FunctionPdf",
    "SumPdf",
    "ProductPdf",
    "as_parameter",
    "one_dimensional",
    "unique_parameters",
    # zcache's random generator and its samplers
    "rng",
    "set_seed",
    "accept_reject",
    "accept_reject_pool",
    "adaptive_batch",
    "truncated_normal",
]

