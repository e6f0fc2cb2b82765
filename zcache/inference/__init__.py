r"""Statistical answers from a fit: significances, limits, intervals, scans and sWeights.

What to use when:

- **the shared interface** (:func:`resolve_poi`, :func:`conditional_fit`, :func:`free_fit`,
  :class:`Calculator`): the POI by name, the fits on the observed data that every calculator
  makes (parameters put back), the answers' types (:class:`PValues`, :class:`Discovery`,
  :class:`UpperLimit`, :class:`Interval`).
- **asymptotic answers** (:class:`AsymptoticCalculator`): p-values, CLs with its expected band
  and discovery significances from the formulae of Cowan et al. and Asimov data, in
  seconds; for large samples of unweighted events (else toys).
- **the answers** (:func:`discovery`, :func:`upper_limit`, :func:`interval`): a significance,
  a CLs upper limit with its expected band, a two-sided interval, from any calculator's
  p-values (asymptotic: profile likelihood; toys: Feldman-Cousins for an interval).
- **toys** (:class:`ToyCalculator`): p-values, CLs, expected bands and discovery from toys
  thrown at the profiled point and fitted in batches (on Dask if asked); with ``statistic="t"``
  the Feldman-Cousins construction. Toys are kept in a :class:`ToyFits` table
  (``to_npz`` / ``from_npz``) and can be given to a later calculator.
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

from ._answers import discovery as discovery
from ._answers import interval as interval
from ._answers import upper_limit as upper_limit
from ._asymptotic import AsymptoticCalculator as AsymptoticCalculator
from ._core import Calculator as Calculator
from ._core import Discovery as Discovery
from ._core import Interval as Interval
from ._core import PValues as PValues
from ._core import UpperLimit as UpperLimit
from ._core import conditional_fit as conditional_fit
from ._core import default_null_value as default_null_value
from ._core import free_fit as free_fit
from ._core import resolve_poi as resolve_poi
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
from ._toy_calculator import ToyCalculator as ToyCalculator
from ._toys import ToyFits as ToyFits

__all__ = [
    "AsymptoticCalculator",
    "Calculator",
    "Discovery",
    "Interval",
    "PValues",
    "UpperLimit",
    "conditional_fit",
    "discovery",
    "default_null_value",
    "free_fit",
    "interval",
    "resolve_poi",
    "upper_limit",
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
    "ToyCalculator",
    "ToyFits",
]
