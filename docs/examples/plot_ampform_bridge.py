r"""
An ampform model through the SymPy bridge
=========================================

Build a helicity model of :math:`D^0 \to K^-\pi^+\pi^0` with `qrules <https://qrules.readthedocs.io>`_ and
`ampform <https://ampform.readthedocs.io>`_, hand it to :func:`zcache.amplitude.from_helicity_model`, generate
2,000 events, fit the complex coupling, and show a projection and the fit fractions.

Two resonances, :math:`K^*(892)^0 \to K^-\pi^+` and :math:`\rho(770)^+ \to \pi^+\pi^0`, keep the model
small, so that qrules finds its transitions in seconds and the page builds quickly. Larger reactions work the
same way; qrules, ``expression.doit()`` and the first trace of the fit take longer.
"""

# %%
# The ampform model
# -----------------
# qrules enumerates the allowed decay chains; ampform writes the intensity as a SymPy expression
# :math:`\sum_h |\sum_k C_k A_{kh}|^2` with one complex coupling :math:`C_k` per chain, and relativistic
# Breit-Wigner line shapes. This is plain ampform code, nothing zcache-specific.
import logging

import ampform
import matplotlib.pyplot as plt
import numpy as np
import qrules
from ampform.dynamics.builder import RelativisticBreitWignerBuilder

from zcache.amplitude import FitFractions, from_helicity_model
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import set_seed
from zcache.plot import plot_projections

# qrules shows a progress bar unless its transition module logs above WARNING.
logging.getLogger("qrules.transition").setLevel(logging.ERROR)
logging.getLogger("ampform").setLevel(logging.ERROR)

reaction = qrules.generate_transitions(
    initial_state="D0",
    final_state=["K-", "pi+", "pi0"],
    allowed_intermediate_particles=["K*(892)0", "rho(770)+"],
    allowed_interaction_types=["strong", "weak"],
    formalism="helicity",
)
builder = ampform.get_builder(reaction)
for particle in reaction.get_intermediate_particles().names:
    builder.dynamics.assign(particle, RelativisticBreitWignerBuilder(energy_dependent_width=True, form_factor=True))
model = builder.formulate()
expression = model.expression.doit()

# %%
# The bridge
# ----------
# :func:`~zcache.amplitude.from_helicity_model` translates the expression into TensorFlow operations and places
# the caches: the data-only terms (kinematics, Wigner-d functions) and each resonance's amplitudes in one
# cache per dataset, and the normalization from cached blocks :math:`\langle A_j A_k^*\rangle` over the
# phase-space sample, so that a coupling change costs :math:`O(K^2)`. Given a number of events, it draws that
# phase-space sample itself (``20_000`` here) and uses fresh phase space to generate data.
#
# By default the couplings float except the first, which fixes the overall phase and scale: here the
# :math:`\rho^+` coupling is the reference and the :math:`K^{*0}` coupling has two free parts, ``_re`` and
# ``_im``.
set_seed(1)
bridged = from_helicity_model(model, 20_000, expression=expression, name="D0 -> K- pi+ pi0")
print("observables:", bridged.space.obs)
print("free parameters:", [p.name for p in bridged.get_params()])
kstar = bridged.couplings[1]

# %%
# Generate and fit
# ----------------
# Generate 2,000 events with the :math:`K^{*0}` coupling at :math:`0.6 + 0.4i`, start the fit from
# :math:`1`, and fit with :class:`zcache.minimize.Minuit`, as for any zcache model.
true = 0.6 + 0.4j
kstar.set_value(true)
data = bridged.sample(2_000)
kstar.set_value(1.0 + 0.0j)
result = Minuit().minimize(UnbinnedNLL(bridged, data))
fitted = complex(kstar)
errors = [result.errors[p.name] for p in kstar.params]
print(f"K*0 coupling: fitted {fitted:.3f}  (errors {errors[0]:.3f}, {errors[1]:.3f}), generated with {true}")
assert result.valid
assert abs(fitted.real - true.real) < 5 * errors[0] and abs(fitted.imag - true.imag) < 5 * errors[1]

# %%
# A projection
# ------------
# The model's observables are ampform's kinematic variables: invariant masses ``m_01`` (:math:`K^-\pi^+`),
# ``m_12`` (:math:`\pi^+\pi^0`) and helicity angles. :func:`zcache.plot.plot_projections` projects the model
# by weighting a phase-space sample with the fitted intensity, so any function of the columns can be
# plotted: here the two invariant masses squared. The fit's phase-space sample would do, but a larger one
# gives smoother curves: 50,000 fresh events, whose columns the model's ``kinematics``
# (:class:`zcache.amplitude.HelicityKinematics`, ampform's expressions) computes from four-momenta.
obs = list(bridged.space.obs)
projections = {
    r"$m^2(K^-\pi^+)$ [GeV$^2$]": lambda v: v[:, obs.index("m_01")] ** 2,
    r"$m^2(\pi^+\pi^0)$ [GeV$^2$]": lambda v: v[:, obs.index("m_12")] ** 2,
}
plot_sample = bridged.to_data(bridged.kinematics.sample_momenta(50_000), name="plot sample")
drawn = plot_projections(bridged, data, bins=40, mc=plot_sample, variables=projections)
drawn[0].figure.suptitle(r"$D^0\to K^-\pi^+\pi^0$ (ampform model): data and fit")
for d in drawn:  # the fitted model describes the data
    assert 0.5 < np.std(d.pulls[np.isfinite(d.pulls)]) < 1.6

# %%
# Fit fractions
# -------------
# :meth:`~zcache.amplitude.SymbolicModel.fit_fractions_with_errors` gives the fraction of each component and
# the interference term of each pair, with errors from the fit's covariance. ampform names a component by its
# coupling's LaTeX symbol, which is long; we relabel the table for print.
fractions = bridged.fit_fractions_with_errors(result)
labels = tuple("rho(770)+" if "rho" in name else "K*(892)0" for name in fractions.names)
print(FitFractions(labels, fractions.values, fractions.errors, fractions.covariance))
assert abs(fractions.total - 1.0) < 1e-9
plt.show()
