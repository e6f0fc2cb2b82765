r"""Fit plots: data with the fitted model, projections, likelihood profiles and toy pulls.

Needs matplotlib, an optional extra (``pip install zcache[plot]``); ``import zcache`` never
imports it. Nothing here calls ``plt.show()``: every function draws on the axes it is given
(or on a new figure) and returns them with the numbers it drew, so a plot can be checked,
restyled or saved (``result.figure.savefig(...)``).

- :func:`plot_fit`: a 1-D model on unbinned data (:class:`zcache.Data`) or on a histogram
  (a ``zcache.binned.BinnedData``, or any object with ``edges``, ``counts`` and
  ``variances``): the data with error bars, the model scaled to them, its components and
  a pull panel :math:`(n_i - \mu_i)/\sigma_i`;
- :func:`plot_projections`: the 1-D projections of a model of several observables (a
  Dalitz-plot :class:`zcache.amplitude.AmplitudePdf`, a :class:`zcache.models.ProductPdf`),
  with pulls;
- :func:`plot_profile`: the likelihood profile of a parameter from a
  :class:`zcache.minimize.FitResult`, with the HESSE parabola and the MINOS interval;
- :func:`plot_pulls`: the pull distribution of a toy study (:class:`zcache.toys.ToyResult`)
  with a Gaussian fitted to it;
- :func:`plot_scan`, :func:`plot_contour`: a profile scan with its intervals and the contours of
  two parameters (:func:`zcache.inference.profile_scan`, :func:`zcache.inference.contour`);
- :func:`plot_cls`: the "Brazil" plot of an upper limit: CLs (or the p-value) against the
  POI, the expected median with its ±1σ and ±2σ bands, and the CL line.

The expected count in bin :math:`i` is :math:`\mu_i = N\,P_i`, with :math:`N` the yield of
an extended model (else the number of events in the model's range) and :math:`P_i` the
model's probability of the bin: its integral over the bin for a 1-D model, the fraction of
a phase-space (Monte Carlo) sample's model weight for a projection. The smooth curve is
:math:`N\,w\,p(x)` for bins of width :math:`w`.

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import matplotlib.pyplot as plt
>>> import zcache
>>> from zcache.models import Space, Gaussian, Exponential, SumPdf
>>> from zcache.plot import plot_fit
>>> space = Space("m", 0.0, 10.0)
>>> model = SumPdf([Gaussian(space, 5.0, 0.5, name="signal"), Exponential(space, -0.3, name="background")],
...                fracs=[0.3])
>>> drawn = plot_fit(model, model.sample(2000), bins=40)
>>> float(drawn.counts.sum()), sorted(drawn.components), drawn.ax_pulls.get_ylabel()
(2000.0, ['background', 'signal'], 'pull')
>>> plt.close(drawn.figure)
"""

from __future__ import annotations

try:
    import matplotlib  # noqa: F401  (an optional extra: checked here, before any of the package's modules)
except ImportError as err:
    raise ImportError("zcache.plot needs matplotlib, which is not installed: pip install zcache[plot]") from err

from ._fit import FitPlot, plot_fit, plot_projections
from ._inference import CLsPlot, ContourPlot, ProfilePlot, ScanPlot, plot_cls, plot_contour, plot_profile, plot_scan
from ._toys import PullPlot, plot_pulls

__all__ = ["FitPlot", "ProfilePlot", "PullPlot", "plot_fit", "plot_projections", "plot_profile", "plot_pulls",
           "ScanPlot", "ContourPlot", "plot_scan", "plot_contour", "CLsPlot", "plot_cls"]
