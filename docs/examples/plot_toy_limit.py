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
from zcache.inference import ToyCalculator
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint
from zcache.models import Exponential, Gaussian, Space, SumPdf, set_seed

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
# 200 toys per tested value and 200 background-only toys, fitted 200 at a time. ``qtilde`` is
# the upper-limit statistic of Cowan et al.; CLs divides the signal hypothesis's p-value by the
# background-only one. The expected band is the CLs the background-only toys would have seen.

calc = ToyCalculator(loss, "nsig", n_toys=200, seed=1, batch=200)
values = np.array([2.0, 5.0, 8.0, 11.0, 15.0])
pv = calc.p_values(values, statistic="qtilde")
for v, cls, err in zip(values, pv.cls, pv.cls_err, strict=True):
    print(f"nsig = {v:5.1f}: CLs = {cls:.3f} +- {err:.3f}")

# %%
# The limit is where CLs crosses 0.05 (interpolated linearly between the tested values).


def crossing(cls: np.ndarray) -> float:
    """The tested value where ``cls`` first falls below 0.05, interpolated linearly."""
    k = np.flatnonzero(cls < 0.05)[0]
    return float(values[k - 1] + (0.05 - cls[k - 1]) / (cls[k] - cls[k - 1]) * (values[k] - values[k - 1]))


observed = crossing(pv.cls)
expected = crossing(pv.expected_cls[2])
print(f"95 % CL upper limit: {observed:.1f} signal events (median expected {expected:.1f})")
assert 2.0 < observed < 15.0 and 2.0 < expected < 15.0
assert float(nsig) == 0.0 and nsig.floating  # the calculator put everything back

# %%
# The CLs curve and its expected band
# -----------------------------------

fig, ax = plt.subplots(figsize=(6, 4))
ax.fill_between(values, pv.expected_cls[0], pv.expected_cls[4], color="gold", label=r"expected $\pm 2\sigma$")
ax.fill_between(values, pv.expected_cls[1], pv.expected_cls[3], color="limegreen", label=r"expected $\pm 1\sigma$")
ax.plot(values, pv.expected_cls[2], "k--", label="expected")
ax.errorbar(values, pv.cls, yerr=pv.cls_err, fmt="ko-", label="observed")
ax.axhline(0.05, color="r", lw=1)
ax.set_xlabel("signal events")
ax.set_ylabel("CLs")
ax.legend()
plt.show()
