r"""Statistical answers from a fit: significances, limits, intervals, scans and sWeights.

What to use when:

- **test statistics** (:func:`statistic`): the profile-likelihood ratios of Cowan et al.
  (arXiv:1007.1727) from a conditional and a free minimum.
- **sWeights** (:func:`sweights`, :class:`SWeights`): per-event weights of each species of an
  extended fit of a discriminating variable (sPlot), and :func:`sweighted_covariance`, the
  covariance of a fit to sWeighted events with the uncertainty of the weights themselves.
- **profile scans and contours** (:func:`profile_scan`, :func:`contour`): :math:`-2\Delta\ln L`
  along one parameter, or its closed curves in two, the others fitted at every point (all points
  in one batched fit for an unbinned loss); ``scan.interval(1.0)`` gives MINOS's interval;
  :func:`profile_grid` for the profile on a grid of two parameters.

Every tool takes a zcache loss and the parameter of interest by name; the loss's other floating
parameters are its nuisance parameters.
"""

from __future__ import annotations

from ._scans import Contour as Contour
from ._scans import ProfileGrid as ProfileGrid
from ._scans import ProfileScan as ProfileScan
from ._scans import contour as contour
from ._scans import profile_grid as profile_grid
from ._scans import profile_scan as profile_scan
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
    "Contour",
    "ProfileGrid",
    "ProfileScan",
    "contour",
    "profile_grid",
    "profile_scan",
]
