r"""Amplitude (partial-wave) analysis: resonances, coherent sums, amplitude PDFs and the SymPy / ampform bridge.

What to use when:

- **a three-body decay written by hand** (Dalitz plot, Breit-Wigner resonances):
  :class:`DalitzKinematics` (masses, invariants, a phase-space sample), :class:`Resonance` and
  :class:`NonResonant` amplitudes, their couplings as :class:`ComplexParameter`, summed by
  :class:`CoherentSum` and normalized by :class:`AmplitudePdf` (a :class:`zcache.models.Model`:
  fit it with :class:`zcache.loss.UnbinnedNLL`); your own amplitude subclasses :class:`Amplitude`.
- **line shapes and angular terms as functions** (to build an :class:`Amplitude`):
  :func:`relativistic_breit_wigner`, :func:`blatt_weisskopf_sq`, :func:`legendre`,
  :func:`wigner_small_d`, :func:`kallen`.
- **fit fractions** of a fitted coherent sum (hand-written or bridged): :func:`fit_fractions`
  (the values), :func:`fit_fractions_with_errors` (a :class:`FitFractions` with the interference
  terms and their errors from the fit's covariance).
- **an intensity written in SymPy** (any expression; a coherent sum is found and cached by
  coupling group): :class:`SymbolicModel`; :func:`to_tensorflow` evaluates an expression with
  TensorFlow ops, uncached (to check a translation).
- **an ampform** ``HelicityModel`` (tensorwaves' users): :func:`from_helicity_model`, with the
  model's kinematics (:class:`HelicityKinematics`: four-momenta to its kinematic columns) and
  fresh three-body phase space (:func:`phasespace_generator`).
- :class:`DalitzSpace`: the Dalitz plot as a :class:`zcache.models.Space` (its kinematic
  boundary), for a model over a Dalitz plot that is not an amplitude sum.

The SymPy bridge needs the ``sympy`` extra (``pip install zcache[sympy]``, ampform for
:func:`from_helicity_model`); ``import zcache.amplitude`` does not import SymPy: the bridge's
modules import it when one of their functions is first called.

Examples
--------
>>> import zcache
>>> from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, Resonance
>>> kin = DalitzKinematics(1.86966, 0.493677, 0.13957, 0.13957, names=("K-", "pi+", "pi+"))
>>> kstar = Resonance(kin, ("12", "13"), mass=0.8955, width=0.0473, spin=1, name="K*(892)")
>>> pdf = AmplitudePdf(CoherentSum([(ComplexParameter("c", 1.0, floating=False), kstar)]), kin.sample(5_000, name="mc"))
>>> zcache.models.set_seed(1)
>>> data = pdf.sample(200)
>>> data.nevents, data.obs
(200, ('s12', 's13'))
"""

from ._ampform import from_helicity_model, phasespace_generator
from ._coherent_sum import AmplitudePdf, CoherentSum, fit_fractions
from ._couplings import ComplexParameter, coupling_derivatives
from ._fractions import FitFractions, fit_fractions_with_errors
from ._kinematics import HelicityKinematics
from ._phasespace import DalitzKinematics, DalitzSpace, kallen
from ._resonances import (
                          Amplitude,
                          NonResonant,
                          Resonance,
                          blatt_weisskopf_sq,
                          legendre,
                          relativistic_breit_wigner,
                          wigner_small_d,
)
from ._symbolic_model import SymbolicModel
from ._translator import to_tensorflow

__all__ = [
    # three-body kinematics
    "DalitzKinematics",
    "DalitzSpace",
    "kallen",
    # amplitudes and their coherent sum
    "ComplexParameter",
    "coupling_derivatives",
    "Amplitude",
    "Resonance",
    "NonResonant",
    "blatt_weisskopf_sq",
    "relativistic_breit_wigner",
    "legendre",
    "wigner_small_d",
    "CoherentSum",
    "AmplitudePdf",
    # fit fractions
    "fit_fractions",
    "FitFractions",
    "fit_fractions_with_errors",
    # the SymPy / ampform bridge (the sympy extra)
    "SymbolicModel",
    "to_tensorflow",
    "from_helicity_model",
    "HelicityKinematics",
    "phasespace_generator",
]
