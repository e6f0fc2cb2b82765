r"""
An upper limit from toys
========================

A search for a small peak on a falling background: how many signal events can the data exclude
at 95 % confidence? With few events the asymptotic formulae are rough; toys give the
distributions of the test statistic themselves. :class:`zcache.inference.ToyCalculator` throws
the toys of each tested signal yield at the profiled point (the background yield fitted to the
data with the signal held at the tested value), its constraint's observable drawn per toy, and
fits every toy twice (signal pinned and free) in batches: all tested values in one compiled
program.
"""

# %%
# The model and the data
# ----------------------
# A Gaussian peak of known mass and width on an exponential background; the background yield
# has a Gaussian constraint from a side band (60 ± 6 events). The data hold no signal.

import matplotlib.pyplot as plt
import numpy as np

import zcache
from zcache.inference import ToyCalculator, upper_limit
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint
from zcache.models import Exponential, Gaussian, Space, SumPdf, set_seed
from zcache.plot import plot_cls

space = Space("x", 0.0, 1.0)
nsig = zcache.Parameter("nsig", 0.0, lower=0.0, upper=100.0)
nbkg = zcache.Parameter("nbkg", 60.0, lower=0.0, upper=500.0)
model = SumPdf([Gaussian(space, 0.5, 0.04), Exponential(space, -1.5)], yields=[nsig, nbkg])
set_seed(5)
data = model.sample(60)
loss = ExtendedUnbinnedNLL(model, data, [GaussianConstraint([nbkg], [60.0], [6.0])])

# %%
# p-values from toys
# ------------------
# 400 toys per tested value and 400 background-only toys, fitted 128 at a time. ``qtilde`` is
# the upper-limit statistic of Cowan et al.; CLs divides the signal hypothesis's p-value by the
# background-only one. The expected band is the CLs the background-only toys would have seen.

calc = ToyCalculator(loss, "nsig", n_toys=400, seed=1, batch=128)
values = np.array([2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0, 13.0, 20.0])
pv = calc.p_values(values, statistic="qtilde")
for v, cls, err in zip(values, pv.cls, pv.cls_err, strict=True):
    print(f"nsig = {v:5.1f}: CLs = {cls:.3f} +- {err:.3f}")

# %%
# The limit
# ---------
# :func:`zcache.inference.upper_limit` reads the limit off the same calculator: it asks for the
# p-values of the values it is given (the toys above are reused, nothing is fitted again) and
# interpolates where CLs falls through 0.05, for the observed data and the expected band.

limit = upper_limit(calc, values, cl=0.95)
print(f"95 % CL upper limit: {limit.observed:.1f} signal events (median expected {limit.expected[2]:.1f})")
assert 2.0 < limit.observed < 12.0 and 2.0 < limit.expected[2] < 12.0
assert float(nsig) == 0.0 and nsig.floating  # the calculator put everything back

# %%
# The CLs curve and its expected band
# -----------------------------------
# :func:`zcache.plot.plot_cls` draws the "Brazil" plot; the error bars are the toys' binomial errors.

drawn = plot_cls(limit)
drawn.ax.errorbar(values, pv.cls, yerr=pv.cls_err, fmt="none", ecolor="k")
plt.show()
