"""
sWeights: a control variable without its background
====================================================

The sPlot method: a fit of a discriminating variable (the mass) gives every event a weight
such that the weighted distribution of another variable (here the decay time) is that of
the signal alone, provided the two variables are independent for each species. The weighted
events are then fitted with a weighted likelihood.
"""

# %%
# Two variables per event
# -----------------------
# Signal: a mass peak and a decay time with lifetime 1.5 (ps, say). Background: a falling mass
# spectrum and short decay times (lifetime 0.4). Within each species mass and time are drawn
# independently, which is what sWeights require.

import matplotlib.pyplot as plt
import numpy as np

import zcache
from zcache.inference import sweighted_covariance, sweights
from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.plot import plot_fit

rng = np.random.default_rng(11)
n_signal, n_background, tau_signal = 1000, 3000, 1.5
mass_space, time_space = Space("mass", 5.1, 5.5), Space("time", 0.0, 8.0)


def truncated_exponential(scale, lower, upper, n):
    """Draw ``n`` values from exp(-x / scale) on [lower, upper] (inverse of its CDF)."""
    u = rng.uniform(size=n)
    return lower - scale * np.log(1.0 - u * (1.0 - np.exp(-(upper - lower) / scale)))


mass = np.r_[rng.normal(5.28, 0.02, n_signal), truncated_exponential(0.3, 5.1, 5.5, n_background)]
time = np.r_[truncated_exponential(tau_signal, 0.0, 8.0, n_signal), truncated_exponential(0.4, 0.0, 8.0, n_background)]

# %%
# The discriminating fit
# ----------------------
# An extended fit of the mass alone: a Gaussian signal and an exponential background, each
# with its yield. The sWeights need the fitted yields and the normalized component densities
# at each event.

mu = zcache.Parameter("mu", 5.27, lower=5.2, upper=5.35)
sigma = zcache.Parameter("sigma", 0.03, lower=0.005, upper=0.1)
lam = zcache.Parameter("lam", -1.0, lower=-20.0, upper=0.0)
nsig = zcache.Parameter("nsig", 800.0, lower=0.0, upper=1e5)
nbkg = zcache.Parameter("nbkg", 3000.0, lower=0.0, upper=1e5)
signal = Gaussian(mass_space, mu, sigma, name="signal")
background = Exponential(mass_space, lam, name="background")
mass_model = SumPdf([signal, background], yields=[nsig, nbkg])
mass_data = zcache.Data(mass, name="mass")
mass_loss = ExtendedUnbinnedNLL(mass_model, mass_data)
mass_fit = Minuit().minimize(mass_loss)
print(mass_fit)
assert mass_fit.valid

mass_plot = plot_fit(mass_model, mass_data, bins=40)
mass_plot.ax.set_xlabel("")
mass_plot.ax_pulls.set_xlabel("mass [GeV]")

# %%
# The sWeights
# ------------
# With :math:`g_s, g_b` the normalized signal and background densities at event :math:`e` and
# :math:`N_s, N_b` the fitted yields, the sWeight of the signal is
#
# .. math::
#
#    w_s(e) = \frac{V_{ss} g_s(e) + V_{sb} g_b(e)}{N_s g_s(e) + N_b g_b(e)}, \qquad
#    (V^{-1})_{ij} = \sum_e \frac{g_i(e) g_j(e)}{(N_s g_s(e) + N_b g_b(e))^2}.
#
# :func:`zcache.inference.sweights` computes them from the fit (and refuses a fit that is not at
# its minimum). The sWeights of a species add up to its yield.

sw = sweights(mass_loss, mass_fit)
print(f"sum of sWeights {sw.sums['nsig']:.1f}, fitted signal yield {mass_fit.values['nsig']:.1f}")
assert sw.sums_match()
yields = sw.yields

# %%
# A weighted fit of the decay time
# --------------------------------
# :class:`zcache.Data` takes the sWeights as event weights (negative ones included) and every
# loss uses them, :math:`-\sum_e w_e \log p(t_e)`. ``Minuit(weightcorr="asymptotic")`` (the
# default) corrects the errors for the weights, as RooFit's ``AsymptoticError`` does, treating them
# as known numbers; :func:`zcache.inference.sweighted_covariance` adds the uncertainty of the
# sWeights themselves, estimated from the same events (Langenbruch, arXiv:1911.01303; with the mass
# shapes floating, as here, the sandwich of the whole estimate, shapes included).

lam_t = zcache.Parameter("lam_t", -1.0, lower=-10.0, upper=-0.01)
time_model = Exponential(time_space, lam_t, name="signal (sWeighted fit)")
time_data = zcache.Data(time, weights=sw["nsig"], name="sWeighted time")
time_loss = UnbinnedNLL(time_model, time_data)
time_fit = Minuit().minimize(time_loss)
covariance = sweighted_covariance(time_fit, time_loss, sw)
lam_error = float(np.sqrt(covariance[0, 0]))
print(f"error of lam_t: {time_fit.errors['lam_t']:.4f} (weights as known), {lam_error:.4f} (sWeights' own too)")
tau, tau_error = -1.0 / time_fit.values["lam_t"], lam_error / time_fit.values["lam_t"] ** 2
print(f"signal lifetime {tau:.3f} +- {tau_error:.3f} (generated: {tau_signal})")
assert time_fit.valid
assert abs(tau - tau_signal) < 5 * tau_error

# %%
# The sWeighted decay time
# ------------------------
# :func:`zcache.plot.plot_fit` draws weighted data with :math:`\sqrt{\sum w^2}` errors. The
# dashed line is the signal's true distribution, scaled to the fitted signal yield: the
# sWeighted histogram follows it, with no trace of the short-lived background.

drawn = plot_fit(time_model, time_data, bins=32, label="weighted fit", data_label="sWeighted data")
grid = np.linspace(0.0, 8.0, 400)
width = drawn.edges[1] - drawn.edges[0]
truth = yields[0] * width * np.exp(-grid / tau_signal) / (tau_signal * (1.0 - np.exp(-8.0 / tau_signal)))
drawn.ax.plot(grid, truth, color="C3", ls="--", lw=1.5, label="true signal", zorder=4)
drawn.ax.legend(frameon=False)
drawn.ax.set_xlabel("")
drawn.ax_pulls.set_xlabel("decay time [ps]")
plt.show()
