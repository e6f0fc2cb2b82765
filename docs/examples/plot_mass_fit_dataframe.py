"""
A mass fit from a DataFrame
===========================

An extended unbinned fit of a Gaussian peak on an exponential background, read from a
``pandas.DataFrame`` with a range and a selection cut, and the usual fit plot: data with
errors, the fitted model, its components and the pulls.
"""

# %%
# The data
# --------
# A toy "ntuple": a mass column with 1000 signal events (a peak at 5.28) on 4000 background
# events (falling exponentially), and a transverse momentum column to cut on. In an analysis
# this DataFrame comes from your own files (``uproot``, ``pandas.read_parquet``, ...).

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import zcache
from zcache.loss import ExtendedUnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.plot import plot_fit

rng = np.random.default_rng(7)
signal_mass = rng.normal(5.28, 0.03, 1000)
background_mass = 5.0 + rng.exponential(1 / 2.5, 8000)  # slope -2.5 per GeV; many fall outside the fit range
df = pd.DataFrame({"mass": np.r_[signal_mass, background_mass], "pt": rng.exponential(3.0, 9000)})
print(df.describe())

# %%
# Range and selection
# -------------------
# :meth:`zcache.Data.from_pandas` keeps the events inside the :class:`zcache.models.Space`
# (the fit range) that pass ``cut``, a ``DataFrame.query`` expression over any column.
# Cutting on ``pt``, which does not depend on the mass here, keeps the mass shapes and lowers
# both yields by the same factor, :math:`e^{-1/3} \approx 0.72`.

space = Space("mass", 5.1, 5.6)
data = zcache.Data.from_pandas(df, obs="mass", space=space, cut="pt > 1")
print(f"{len(df)} rows, {data.numpy().shape[0]} events in the fit")

# %%
# The model and the fit
# ---------------------
# An extended :class:`zcache.models.SumPdf`: each component has its own yield, so the fit
# returns numbers of events with their errors. The loss is
# :class:`zcache.loss.ExtendedUnbinnedNLL`, and :class:`zcache.minimize.Minuit` minimizes it
# (one compiled program; MIGRAD and HESSE take over where it does not reach a valid minimum).

mu = zcache.Parameter("mu", 5.27, lower=5.2, upper=5.35)
sigma = zcache.Parameter("sigma", 0.04, lower=0.005, upper=0.1)
lam = zcache.Parameter("lam", -1.0, lower=-10.0, upper=0.0)
nsig = zcache.Parameter("nsig", 500.0, lower=0.0, upper=1e5)
nbkg = zcache.Parameter("nbkg", 2000.0, lower=0.0, upper=1e5)
model = SumPdf([Gaussian(space, mu, sigma, name="signal"), Exponential(space, lam, name="background")],
               yields=[nsig, nbkg])

result = Minuit().minimize(ExtendedUnbinnedNLL(model, data))
print(result)

# The fit must converge, and the peak must be found where it was generated.
assert result.valid
assert abs(result.values["mu"] - 5.28) < 5 * result.errors["mu"]
assert abs(result.values["sigma"] - 0.03) < 5 * result.errors["sigma"]

# %%
# The fit plot
# ------------
# :func:`zcache.plot.plot_fit` draws the data with :math:`\sqrt{n}` errors, the model scaled
# to the fitted yields (its integral over each bin), each component in the same units (they
# add up to the total), and the pulls :math:`(n_i - \mu_i)/\sqrt{\mu_i}` below. It returns
# what it drew, so the plot can be restyled or checked: no pull may be beyond 5.

drawn = plot_fit(model, data, bins=50)
drawn.ax.set_xlabel("")
drawn.ax_pulls.set_xlabel(r"$m$ [GeV]")
drawn.ax.set_title(rf"$N_{{sig}}$ = {result.values['nsig']:.0f} $\pm$ {result.errors['nsig']:.0f}", fontsize="medium")
assert np.all(np.abs(drawn.pulls) < 5)
plt.show()
