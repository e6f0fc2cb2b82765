"""
A template fit with Barlow-Beeston
==================================

A binned fit of a histogram (here a classifier output) by a sum of templates taken from a
limited simulation. The templates' own statistical uncertainty is part of the likelihood
(Barlow-Beeston lite), so the fitted yields' errors include it.
"""

# %%
# Data and templates
# ------------------
# The signal peaks at high classifier output, the background at low output. The templates come
# from 500 simulated events each, fewer than the 1500 data events: their fluctuations are not
# negligible, which is when a plain template fit underestimates its errors.

import matplotlib.pyplot as plt
import numpy as np

import zcache
from zcache.binned import BinnedData, Template
from zcache.minimize import Minuit

rng = np.random.default_rng(3)
edges = np.linspace(0.0, 1.0, 21)
signal_mc, _ = np.histogram(rng.beta(5, 2, 500), edges)
background_mc, _ = np.histogram(rng.beta(2, 5, 500), edges)
true_nsig, true_nbkg = 300, 1200
data = BinnedData.from_numpy(np.r_[rng.beta(5, 2, true_nsig), rng.beta(2, 5, true_nbkg)], bins=edges, name="data")

# %%
# The fit
# -------
# :class:`zcache.binned.Template` fits :math:`\mu_i = \sum_k y_k a_{ki}` (normalized templates
# :math:`a_k` times yields :math:`y_k`) and profiles one nuisance parameter per bin in closed
# form (Conway's method, ``method="jsc"``). A template given as counts has Poisson variances;
# a ``hist`` histogram or a :class:`zcache.binned.BinnedData` brings its own.

nsig = zcache.Parameter("nsig", 700.0, lower=0.0, upper=5000.0)
nbkg = zcache.Parameter("nbkg", 700.0, lower=0.0, upper=5000.0)
fit = Template(data, [signal_mc, background_mc], yields=[nsig, nbkg])
result = Minuit().minimize(fit)
print(result)

assert result.valid
assert abs(result.values["nsig"] - true_nsig) < 5 * result.errors["nsig"]
assert abs(result.values["nbkg"] - true_nbkg) < 5 * result.errors["nbkg"]

# %%
# The same fit with exact templates
# ---------------------------------
# Giving the templates zero variance pins every nuisance parameter to 1: this is the plain
# Poisson template fit, which treats the simulation as exact. Its yield errors are smaller,
# and too small: they leave out the templates' fluctuations.

exact = [BinnedData(t, edges, variances=np.zeros(len(t))) for t in (signal_mc, background_mc)]
nsig_plain = zcache.Parameter("nsig_plain", 700.0, lower=0.0, upper=5000.0)
nbkg_plain = zcache.Parameter("nbkg_plain", 700.0, lower=0.0, upper=5000.0)
plain = Minuit().minimize(Template(data, exact, yields=[nsig_plain, nbkg_plain]))
print(f"signal yield, Barlow-Beeston: {result.values['nsig']:.0f} +- {result.errors['nsig']:.1f}")
print(f"signal yield, exact templates: {plain.values['nsig_plain']:.0f} +- {plain.errors['nsig_plain']:.1f}")
assert plain.valid and plain.errors["nsig_plain"] < result.errors["nsig"]

# %%
# Data and the fitted templates
# -----------------------------
# The fitted templates stacked (each normalized template times its fitted yield), with the
# band of the prediction's uncertainty from the templates' finite size
# (:meth:`~zcache.binned.Template.prediction`), and the data with :math:`\sqrt{n}` errors.

shapes = [t / t.sum() for t in (signal_mc, background_mc)]
background_part = result.values["nbkg"] * shapes[1]
signal_part = result.values["nsig"] * shapes[0]
mu, std = (v.numpy() for v in fit.prediction())

fig, ax = plt.subplots()
ax.stairs(background_part, edges, fill=True, color="C1", alpha=0.6, label="background template")
ax.stairs(background_part + signal_part, edges, baseline=background_part, fill=True, color="C0", alpha=0.6,
          label="signal template")
ax.stairs(mu + std, edges, baseline=mu - std, fill=True, color="none", hatch="////", edgecolor="0.3", lw=0,
          label="template uncertainty")
ax.errorbar(data.centers, data.counts, yerr=np.sqrt(data.counts), fmt="o", color="k", ms=3, label="data")
ax.set_xlabel("classifier output")
ax.set_ylabel(f"events / {edges[1] - edges[0]:.2f}")
ax.set_xlim(edges[0], edges[-1])
ax.legend(frameon=False, loc="upper right")
plt.show()
