"""
Discovery and upper limit on a signal yield
===========================================

A narrow peak is searched for on a falling background. An extended unbinned fit with the signal
yield as the parameter of interest (POI) answers the two questions an analysis publishes: how
significant is the excess (:func:`zcache.inference.discovery`), and, if it is not, up to which
yield is the signal excluded at 95 % CL (:func:`zcache.inference.upper_limit`, CLs). Both come
from the asymptotic formulae of Cowan, Cranmer, Gross and Vitells
(:class:`zcache.inference.AsymptoticCalculator`), with the background yield and slope as nuisance
parameters, profiled in every fit.
"""

# %%
# The data and the model
# ----------------------
# 1000 background events on an exponential slope and 12 signal events at 5.28: too few to be a
# discovery.

import matplotlib.pyplot as plt
import numpy as np

import zcache
from zcache.inference import AsymptoticCalculator, discovery, upper_limit
from zcache.loss import ExtendedUnbinnedNLL
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.plot import plot_cls

rng = np.random.default_rng(12)
space = Space("mass", 5.0, 5.6)
u = rng.uniform(size=1000)
background = 5.0 + np.log(1.0 + u * (np.exp(-3.0 * 0.6) - 1.0)) / -3.0  # exp(-3 (m - 5)) on the range
data = zcache.Data(np.r_[rng.normal(5.28, 0.015, 12), background], name="candidates")

nsig = zcache.Parameter("nsig", 10.0, lower=0.0, upper=200.0)
nbkg = zcache.Parameter("nbkg", 900.0, lower=0.0, upper=5000.0)
slope = zcache.Parameter("slope", -2.0, lower=-10.0, upper=0.0)
model = SumPdf([Gaussian(space, 5.28, 0.015, name="signal"), Exponential(space, slope, name="background")],
               yields=[nsig, nbkg])
loss = ExtendedUnbinnedNLL(model, data)

# %%
# Discovery
# ---------
# The calculator fits the data with the POI free and at each tested value; the widths of the
# asymptotic distributions come from Asimov data (the background-only expectation, as weighted
# events on a fine binning of the mass). ``signal_value`` sets the signal hypothesis of the
# expected significance. The user's parameters are never moved.

calc = AsymptoticCalculator(loss, "nsig", signal_value=20.0)
d = discovery(calc)
print(f"observed significance {d.significance:.2f} sigma (p0 = {d.p0:.3g}); "
      f"expected for 20 signal events {d.expected_significance:.2f} sigma")
assert 0.0 <= d.significance < 5.0
assert float(nsig) == 10.0 and nsig.floating

# %%
# Upper limit and the Brazil plot
# -------------------------------
# CLs at 95 % CL, observed and expected under the background-only hypothesis with its
# +-1 sigma and +-2 sigma bands, interpolated between the tested values.

limit = upper_limit(calc, np.linspace(0.0, 60.0, 13), cl=0.95)
print(f"observed limit {limit.observed:.1f} events; expected {limit.expected[2]:.1f} "
      f"(+1 sigma {limit.expected[3]:.1f}, -1 sigma {limit.expected[1]:.1f})")
assert limit.expected[0] < limit.expected[2] < limit.expected[4]

drawn = plot_cls(limit)
drawn.ax.set_xlabel("signal yield")
plt.show()
