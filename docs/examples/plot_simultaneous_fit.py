"""
A simultaneous fit of two samples
=================================

Two samples of the same decay, for example two trigger categories or two years, share the
signal's mass and width but each has its own yields and background shape. One likelihood,
the sum of the two, fits them together: the clean sample fixes the peak, and the noisy sample
gets its signal yield from a peak whose shape it did not have to determine alone.
"""

# %%
# Two samples
# -----------
# Sample A is clean (800 signal events on 1000 background), sample B is dominated by background
# (300 signal events on 5000) with a different slope. The same peak, at 5.28 with width 0.02,
# is in both.

import matplotlib.pyplot as plt
import numpy as np

import zcache
from zcache.loss import ExtendedUnbinnedNLL, SimultaneousLoss
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.plot import plot_fit

rng = np.random.default_rng(5)
space = Space("mass", 5.1, 5.5)


def falling(slope, n):
    """Draw ``n`` masses from exp(slope * (m - 5.1)) on the fit range (inverse of its CDF)."""
    u = rng.uniform(size=n)
    return 5.1 + np.log(1.0 + u * (np.exp(slope * 0.4) - 1.0)) / slope


sample_a = zcache.Data(np.r_[rng.normal(5.28, 0.02, 800), falling(-2.0, 1000)], name="sample A")
sample_b = zcache.Data(np.r_[rng.normal(5.28, 0.02, 300), falling(-6.0, 5000)], name="sample B")

# %%
# Shared and separate parameters
# ------------------------------
# A :class:`zcache.Parameter` used in two models is one parameter: ``mu`` and ``sigma`` enter
# both signal shapes, each sample has its own yields and background slope. Each sample has
# its own :class:`zcache.loss.ExtendedUnbinnedNLL`, and :class:`zcache.loss.SimultaneousLoss`
# adds them (``loss_a + loss_b`` does the same); its parameters are the union, each once.

mu = zcache.Parameter("mu", 5.27, lower=5.2, upper=5.35)
sigma = zcache.Parameter("sigma", 0.03, lower=0.005, upper=0.1)


def sample_model(tag, nsig, nbkg):
    """Gaussian signal (shared ``mu``, ``sigma``) + exponential background with this sample's slope and yields."""
    slope = zcache.Parameter(f"lam_{tag}", -1.0, lower=-20.0, upper=0.0)
    yields = [zcache.Parameter(f"nsig_{tag}", nsig, lower=0.0, upper=1e5),
              zcache.Parameter(f"nbkg_{tag}", nbkg, lower=0.0, upper=1e5)]
    return SumPdf([Gaussian(space, mu, sigma, name="signal"), Exponential(space, slope, name="background")],
                  yields=yields)


model_a, model_b = sample_model("A", 500.0, 1500.0), sample_model("B", 500.0, 4000.0)
loss = SimultaneousLoss([ExtendedUnbinnedNLL(model_a, sample_a), ExtendedUnbinnedNLL(model_b, sample_b)])
print([p.name for p in loss.params])

# %%
# The fit
# -------
# :class:`zcache.minimize.Minuit` minimizes the sum as any other loss. The errors of the
# yields of sample B include the uncertainty of the shared peak position and width, through the
# full covariance matrix.

result = Minuit().minimize(loss)
print(result)
assert result.valid
assert abs(result.values["mu"] - 5.28) < 5 * result.errors["mu"]
assert abs(result.values["nsig_B"] - 300) < 5 * result.errors["nsig_B"]

# %%
# Both samples
# ------------
# :func:`zcache.plot.plot_fit` draws each sample with its own model, on axes given to it
# (the pull panel is carved out of each).

fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
for ax, model, data, tag in ((axes[0], model_a, sample_a, "A"), (axes[1], model_b, sample_b, "B")):
    drawn = plot_fit(model, data, bins=40, ax=ax)
    drawn.ax.set_xlabel("")
    drawn.ax.set_title(rf"sample {tag}: $N_{{sig}}$ = {result.values[f'nsig_{tag}']:.0f} "
                       rf"$\pm$ {result.errors[f'nsig_{tag}']:.0f}", fontsize="medium")
    drawn.ax_pulls.set_xlabel("mass [GeV]")
    assert np.all(np.abs(drawn.pulls) < 5)
fig.tight_layout()
plt.show()
