r"""Statistical answers from a fit: significances, limits, intervals, scans and sWeights.

What to use when:

- **test statistics** (:func:`statistic`): the profile-likelihood ratios of Cowan et al.
  (arXiv:1007.1727) from a conditional and a free minimum.
- **sWeights** (:func:`sweights`, :class:`SWeights`): per-event weights of each species of an
  extended fit of a discriminating variable (sPlot), and :func:`sweighted_covariance`, the
  covariance of a fit to sWeighted events with the uncertainty of the weights themselves.

Every tool takes a zcache loss and the parameter of interest by name; the loss's other floating
parameters are its nuisance parameters.
"""

from __future__ import annotations

from ._splot import SWeights as SWeights
from ._splot import sweighted_covariance as sweighted_covariance
from ._splot import sweights as sweights
from ._statistics import TEST_STATISTICS as TEST_STATISTICS
from ._statistics import statistic as statistic

__all__ = [
    "TEST_STATISTICS",
    "statistic",
    "SWeights",
    "sweights",
    "sweighted_covariance",
]
