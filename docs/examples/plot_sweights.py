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
mass_fit = Minuit().minimize(ExtendedUnbinnedNLL(mass_model, mass_data))
print(mass_fit)
assert mass_fit.valid

mass_plot = plot_fit(mass_model, mass_data, bins=40)
mass_plot.ax.set_xlabel("")
mass_plot.ax_pulls.set_xlabel("mass [GeV]")

# %%
# The sWeights
# ------------
# With :math:`f_s, f_b` the normalized signal and background densities at event :math:`e` and
# :math:`N_s, N_b` the fitted yields, the sWeight of the signal is
#
# .. math::
#
#    w_s(e) = \frac{V_{ss} f_s(e) + V_{sb} f_b(e)}{N_s f_s(e) + N_b f_b(e)}, \qquad
#    (V^{-1})_{ij} = \sum_e \frac{f_i(e) f_j(e)}{(N_s f_s(e) + N_b f_b(e))^2}.
#
# zcache has no sPlot function: it is these few lines of numpy on the component densities
# (:meth:`zcache.models.Model.pdf`). At the fit's minimum the sWeights add up to :math:`N_s`.

f = np.stack([signal.pdf(mass_data).numpy(), background.pdf(mass_data).numpy()])
yields = np.array([mass_fit.values["nsig"], mass_fit.values["nbkg"]])
total = yields @ f
V = np.linalg.inv((f / total**2) @ f.T)
sweights = (V[0] @ f) / total
print(f"sum of sWeights {sweights.sum():.1f}, fitted signal yield {yields[0]:.1f}")
assert abs(sweights.sum() - yields[0]) < 1e-3 * yields[0]

# %%
# A weighted fit of the decay time
# --------------------------------
# :class:`zcache.Data` takes the sWeights as event weights (negative ones included) and every
# loss uses them, :math:`-\sum_e w_e \log p(t_e)`. ``Minuit(weightcorr="asymptotic")`` (the
# default) corrects the errors for the weights, as RooFit's ``AsymptoticError`` does (the
# uncertainty of the sWeights themselves is left out).

lam_t = zcache.Parameter("lam_t", -1.0, lower=-10.0, upper=-0.01)
time_model = Exponential(time_space, lam_t, name="signal (sWeighted fit)")
time_data = zcache.Data(time, weights=sweights, name="sWeighted time")
time_fit = Minuit(weightcorr="asymptotic").minimize(UnbinnedNLL(time_model, time_data))
print(time_fit)
tau, tau_error = -1.0 / time_fit.values["lam_t"], time_fit.errors["lam_t"] / time_fit.values["lam_t"] ** 2
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
