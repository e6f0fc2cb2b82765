r"""
Profile scans and contours, all points in one batched fit
=========================================================

How well does the data fix the signal yield, and how do the yield and the peak width move
together? A profile-likelihood scan answers the first: :math:`-2\Delta\ln L` against the yield,
every other parameter fitted again at each value; where it crosses 1 is MINOS's interval. A
contour answers the second: the closed curve where the profile in two parameters reaches 2.30
(68 %) or 5.99 (95 %). :func:`zcache.inference.profile_scan` and :func:`zcache.inference.contour`
fit all the points of an unbinned loss at once, in one compiled program
(:class:`zcache.scale.BatchedLoss` with the tested values pinned per row).
"""

# %%
# The model
# ---------
# A Gaussian peak on an exponential background, extended, about 300 signal and 700 background
# events; all five parameters float.

import matplotlib.pyplot as plt
import numpy as np

import zcache
from zcache.inference import contour, profile_scan
from zcache.loss import ExtendedUnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf, set_seed
from zcache.plot import plot_contour, plot_scan

set_seed(3)
space = Space("x", 0.0, 10.0)
mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
sigma = zcache.Parameter("sigma", 0.6, lower=0.1, upper=2.0)
lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01)
nsig = zcache.Parameter("nsig", 300.0, lower=0.0, upper=5000.0)
nbkg = zcache.Parameter("nbkg", 700.0, lower=0.0, upper=5000.0)
model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
loss = ExtendedUnbinnedNLL(model, model.sample())

# %%
# A 1-D scan and its interval
# ---------------------------
# 21 values of the signal yield over the best fit :math:`\pm 2` HESSE errors, the four other
# parameters profiled, in one batched fit. The interval where the profile crosses 1 is MINOS's
# (here checked against :meth:`zcache.minimize.FitResult.minos`, iminuit's MINOS).

scan = profile_scan(loss, "nsig", bins=21, bound=2.0)
lower, upper = scan.interval(1.0)
print(f"{scan.path} scan: nsig = {scan.minimum:.1f} in [{lower:.2f}, {upper:.2f}] (68.3 %)")

result = Minuit().minimize(loss)
minos = result.minos("nsig")["nsig"]
print(f"MINOS:         [{result.values['nsig'] + minos.lower:.2f}, {result.values['nsig'] + minos.upper:.2f}]")
assert abs(lower - (result.values["nsig"] + minos.lower)) < 0.01 * scan.error
assert abs(upper - (result.values["nsig"] + minos.upper)) < 0.01 * scan.error

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
plot_scan(scan, ax=ax1, levels=(1.0, 4.0))

# %%
# A 2-D contour
# -------------
# The signal yield and the peak width are correlated (a wider peak holds more signal). The
# contour's points are found along 36 rays from the minimum, each round of the search one
# batched fit of every ray and both levels; each point's :math:`-2\Delta\ln L` is its level.

cont = contour(loss, ("nsig", "sigma"), levels=(2.30, 5.99), points=36)
for level in cont.levels:
    assert np.allclose(cont.delta[level], level, atol=1e-3) and cont.converged[level].all()
print(f"contour: {cont.steps} rounds of {2 * 36} batched fits")
plot_contour(cont, ax=ax2)
fig.tight_layout()
