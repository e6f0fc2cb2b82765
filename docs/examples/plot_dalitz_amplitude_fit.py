r"""
A Dalitz-plot amplitude fit
===========================

Generate a small :math:`D^+ \to K^-\pi^+\pi^+` sample from a three-component isobar model, fit the
complex couplings, and look at the result: the Dalitz plot, the invariant-mass projections of the data
with the fitted model and its components, and the fit fractions with their errors.

The model is the one of ``python -m demos.amplitude`` (``make demo``), cut down to three
components and 5,000 events so that the page builds in seconds.
"""

# %%
# The model
# ---------
# :class:`zcache.amplitude.DalitzKinematics` holds the masses and draws phase-space events, uniform in
# the Dalitz plot (:math:`s_{12}, s_{13}`). Each :class:`zcache.amplitude.Resonance` is a relativistic
# Breit-Wigner with Blatt-Weisskopf factors and the angular term of its spin, symmetrised over the two
# identical pions (channels ``"12"`` and ``"13"``). The non-resonant coupling is fixed: it sets the
# overall phase and scale, so the fit has four free numbers (magnitude and phase of two couplings).
import matplotlib.pyplot as plt
import numpy as np

from zcache.amplitude import (
    AmplitudePdf,
    CoherentSum,
    ComplexParameter,
    DalitzKinematics,
    NonResonant,
    Resonance,
    fit_fractions_with_errors,
)
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import set_seed
from zcache.plot import plot_projections

set_seed(2026)  # zcache's generator: phase space and accept-reject sampling
M_D, M_K, M_PI = 1.86966, 0.493677, 0.13957039
kin = DalitzKinematics(M_D, M_K, M_PI, M_PI, names=("K-", "pi+", "pi+"))
phsp = kin.sample(50_000, name="phsp")  # the integration (normalization) sample

truth = {"c_kstar": 0.21 * np.exp(-0.9j), "c_k0": 0.55 * np.exp(1.2j)}
kstar = Resonance(kin, ("12", "13"), mass=0.89555, width=0.0473, spin=1, name="K*(892)")
k0 = Resonance(kin, ("12", "13"), mass=1.425, width=0.270, spin=0, name="K0*(1430)")
couplings = [ComplexParameter("NR", 1.0, floating=False),
             ComplexParameter("c_kstar", truth["c_kstar"]),
             ComplexParameter("c_k0", truth["c_k0"])]
amp = CoherentSum(list(zip(couplings, [NonResonant(kin), kstar, k0], strict=True)))
pdf = AmplitudePdf(amp, phsp, name="D+ -> K- pi+ pi+")

# %%
# Generate and fit
# ----------------
# :meth:`~zcache.models.Model.sample` draws events by accept-reject on :math:`|A|^2`. We then
# move the couplings away from the truth and fit. :class:`zcache.minimize.Minuit` first runs
# :func:`zcache.precompute`: the per-event amplitude columns :math:`A_k(x_i)` and the :math:`K\times K`
# phase-space integrals depend on no free parameter, so they are computed once and every call of the fit
# costs :math:`O(NK)` for the data and :math:`O(K^2)` for the normalization.
data = pdf.sample(5_000)
couplings[1].set_value(0.3 * np.exp(-0.5j))
couplings[2].set_value(0.4 * np.exp(0.8j))
loss = UnbinnedNLL(pdf, data)
result = Minuit().minimize(loss)
print(result)
assert result.valid

# %%
# Every fitted coupling should lie within a few standard deviations of the value it was generated with.
# The parameters are the magnitude and phase of each coupling (``<name>_mag``, ``<name>_phase``).
for name, c in truth.items():
    for part, true in (("mag", abs(c)), ("phase", np.angle(c))):
        label = f"{name}_{part}"
        value, error = result.values[label], result.errors[label]
        print(f"{label:<14} fit {value:+.4f} ± {error:.4f}   truth {true:+.4f}   pull {(value - true) / error:+.2f}")
        assert abs(value - true) < 5 * error

# %%
# The Dalitz plot
# ---------------
# The two pions are identical, so we plot the lower against the higher :math:`K\pi` mass squared (the
# plot is folded along the diagonal). The :math:`K^*(892)` shows as a band with a node from its P-wave
# angular term; the broad :math:`K_0^*(1430)` interferes with the non-resonant part across the plot.
events = data.numpy()
low, high = events.min(axis=1), events.max(axis=1)
fig, ax = plt.subplots(figsize=(5.6, 4.8))
ax.hist2d(low, high, bins=60, cmap="viridis", cmin=1)
ax.set_xlabel(r"$m^2_{K\pi,\ \mathrm{low}}$ [GeV$^2$]")
ax.set_ylabel(r"$m^2_{K\pi,\ \mathrm{high}}$ [GeV$^2$]")
ax.set_title(rf"$D^+\to K^-\pi^+\pi^+$: {len(events):,} generated events")
fig.tight_layout()

# %%
# Projections with the fitted model
# ---------------------------------
# :func:`zcache.plot.plot_projections` projects the model by weighting a phase-space sample with
# :math:`|A|^2`, so any function of the two invariants can be a projection. We give it a fresh sample 40
# times the data (an array: nothing is cached for it), so that the curves fluctuate much less than the data.
# The dashed curves are the components :math:`|c_k A_k|^2` on the same scale; their sum differs from the
# total by the interference terms.
projections = {
    r"$m^2_{K\pi,\ \mathrm{low}}$ [GeV$^2$]": lambda v: np.minimum(v[:, 0], v[:, 1]),
    r"$m^2_{K\pi,\ \mathrm{high}}$ [GeV$^2$]": lambda v: np.maximum(v[:, 0], v[:, 1]),
    r"$m^2_{\pi\pi}$ [GeV$^2$]": lambda v: M_D**2 + M_K**2 + 2 * M_PI**2 - v[:, 0] - v[:, 1],
}
plot_sample = kin.sample_tensor(200_000).numpy()
drawn = plot_projections(pdf, data, bins=40, mc=plot_sample, variables=projections)
drawn[0].figure.suptitle(r"$D^+\to K^-\pi^+\pi^+$: data and fitted model")
# The model describes the data: the pulls of every projection have a spread near one.
for d in drawn:
    assert 0.5 < np.std(d.pulls[np.isfinite(d.pulls)]) < 1.6

# %%
# Fit fractions
# -------------
# :func:`zcache.amplitude.fit_fractions_with_errors` integrates each component and each pair over the
# phase-space sample at the fitted couplings and propagates the fit's covariance to them (the Jacobian by
# automatic differentiation). The fractions and the interference terms add up to one.
fractions = fit_fractions_with_errors(pdf, result=result)
print(fractions)
assert abs(fractions.total - 1.0) < 1e-9

plt.show()
