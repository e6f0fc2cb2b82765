r"""
A toy study with pull plots, in batches
=======================================

Is the fit unbiased, and are its errors right? Generate many datasets from the model at known
parameter values, fit each, and look at the pulls :math:`(\hat\theta - \theta_0)/\sigma_{\hat\theta}`:
for an unbiased fit with correct errors they follow a unit Gaussian. Here 200 toys are fitted
100 at a time, in one compiled program per batch.
"""

# %%
# The model
# ---------
# A Gaussian peak on an exponential background, extended, with about 300 signal and 600
# background events per toy. The values of the parameters when the study starts are the
# truth the toys are generated from; the background slope is fixed.

import matplotlib.pyplot as plt

import zcache
from zcache.loss import ExtendedUnbinnedNLL
from zcache.models import Exponential, Gaussian, Space, SumPdf, set_seed
from zcache.plot import plot_pulls
from zcache.toys import run_toys

set_seed(2)  # zcache's own sampling: the dataset the loss is built on is reproducible
space = Space("x", 0.0, 10.0)
mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
sigma = zcache.Parameter("sigma", 0.5, lower=0.05, upper=2.0)
lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01, floating=False)
nsig = zcache.Parameter("nsig", 300.0, lower=0.0, upper=1e4)
nbkg = zcache.Parameter("nbkg", 600.0, lower=0.0, upper=1e4)
model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
loss = ExtendedUnbinnedNLL(model, model.sample())  # the loss's dataset is refilled for each toy

# %%
# The study
# ---------
# :func:`zcache.toys.run_toys` draws each toy's number of events from a Poisson distribution
# (the model is extended) and its events from the model. With ``batch=100`` the loss is traced
# for one toy and vectorized over 100 (:class:`zcache.scale.BatchedLoss`), BFGS runs for all
# of them in lockstep, then each gets HESSE errors. A toy that does not converge there is
# refitted with MIGRAD (column ``refit``). The seed fixes every toy's dataset, whatever the
# batch size: ``batch`` changes only the time taken.

toys = run_toys(model, loss, n_toys=200, seed=1, batch=100)
print(toys)
print(toys.to_pandas().head())

# %%
# Most of that time was tracing and compiling the batched program, once. A second study of
# the same loss and parameters (another seed) reuses it: its time is that of the fits.

again = run_toys(model, loss, n_toys=200, seed=2, batch=100)
print(f"first study {toys.info['wall_s']:.1f} s, second study {again.info['wall_s']:.1f} s")

# %%
# Pull plots
# ----------
# :func:`zcache.plot.plot_pulls` histograms the pulls of one parameter and overlays the
# Gaussian fitted to them (unbinned: their mean and standard deviation, with errors) and the
# unit Gaussian for reference. With 200 toys the mean is known to about 0.07 and the width to
# about 0.05; each must agree with 0 and 1 within 5 of those errors.

names = ["mu", "sigma", "nsig", "nbkg"]
fig, axes = plt.subplots(2, 2, figsize=(10, 8))
for ax, name in zip(axes.flat, names, strict=True):
    drawn = plot_pulls(toys, name, bins=16, ax=ax)
    assert abs(drawn.mean) < 5 * drawn.mean_error, name
    assert abs(drawn.width - 1.0) < 5 * drawn.width_error, name
fig.tight_layout()

# %%
# Coverage
# --------
# :meth:`~zcache.toys.ToyResult.coverage` says how often :math:`\hat\theta \pm k\sigma` held
# the truth; for Gaussian errors it is 68.3 % for :math:`k = 1` and 95.4 % for :math:`k = 2`.

for name, row in toys.coverage().items():
    print(name, {k: f"{100 * frac:.1f} +- {100 * err:.1f} %" for k, (frac, err) in row.items()})
plt.show()
