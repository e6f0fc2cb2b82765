r"""Fit fractions and interference terms of a coherent sum, with errors from a fit's covariance.

For a coherent sum :math:`\sum_h |\sum_k c_k A_{kh}|^2` whose couplings come in *components*
(the couplings that share a line shape: one amplitude of a :class:`zcache.amplitude.CoherentSum`,
one resonance's helicity couplings in a :class:`zcache.amplitude.SymbolicModel`), the fit fraction
of component :math:`a` is its coherent sum alone over the whole, and the interference term of a
pair :math:`a \ne b` is twice the real part of their cross term (see
``zcache.amplitude._coherent.CoherentIntensity.fraction_matrix``); the fractions and the
interference terms add up to one. The errors are the linear propagation
:math:`\mathrm{cov}_F = J C J^T` of a fit's covariance :math:`C`, with the Jacobian
:math:`J = \partial F / \partial x` by automatic differentiation (exact also for floating masses
and widths, through the integral caches).

Examples
--------
>>> import zcache
>>> from zcache.amplitude import DalitzKinematics
>>> from zcache.amplitude import CoherentSum, ComplexParameter, NonResonant, Resonance
>>> from zcache.amplitude import fit_fractions_with_errors
>>> kin = DalitzKinematics(1.86966, 0.493677, 0.13957, 0.13957)
>>> amp = CoherentSum([(1.0, NonResonant(kin)),
...                    (ComplexParameter("c_kst_ff", 0.3 + 0.2j), Resonance(kin, ("12", "13"), 0.8955, 0.0473, 1,
...                                                                         name="Kst"))])
>>> ff = fit_fractions_with_errors(amp, kin.sample(5000, name="mc_ff"))
>>> ff.names
('NR', 'Kst')
>>> value, error = ff.fraction("Kst")
>>> 0.0 < value < 1.0, error     # no fit result given: no errors
(True, nan)
>>> round(ff.total, 12)
1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.data import Data
from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python
from ..exceptions import FitError, IllegalInGraphModeError, ModelError
from ._coherent import CoherentIntensity

__all__ = ["FitFractions", "fit_fractions_with_errors"]


@dataclass(frozen=True, eq=False)
class FitFractions:
    r"""Fit fractions and interference terms of the components of a coherent sum, with errors.

    The arrays are read-only. ``values[a, a]`` is the fit fraction of component ``a``,
    ``values[a, b]`` (:math:`a \ne b`) the interference term of the pair, mirrored:
    ``values[a, b] == values[b, a]``; the sum rule is ``np.triu(values).sum() == 1``.

    Attributes
    ----------
    names : tuple of str
        The components' labels (amplitude names of a CoherentSum; a resonance label for the
        SymPy bridge, see :attr:`zcache.amplitude.SymbolicModel.component_names`).
    values : ndarray
        float64, shape (G, G), symmetric.
    errors : ndarray
        float64, shape (G, G), symmetric: :math:`\sqrt{\mathrm{Var}(F_{ab})}`; NaN without a
        fit result.
    covariance : ndarray
        float64, shape (G, G, G, G): ``covariance[a, b, c, d]`` is
        :math:`\mathrm{Cov}(F_{ab}, F_{cd})` (``covariance[a, a, b, b]``: of the fractions of
        ``a`` and ``b``); NaN without a fit result.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.amplitude import FitFractions
    >>> ff = FitFractions(("A", "B"), np.array([[0.7, 0.1], [0.1, 0.2]]), np.full((2, 2), 0.01),
    ...                   np.zeros((2, 2, 2, 2)))
    >>> ff.interference("B", "A"), round(ff.total, 12)
    ((0.1, 0.01), 1.0)
    >>> print(ff)
    fit fractions
      A      0.70000 ± 0.01000
      B      0.20000 ± 0.01000
    interference terms
      A × B  0.10000 ± 0.01000
    """

    names: tuple[str, ...]
    values: np.ndarray
    errors: np.ndarray
    covariance: np.ndarray

    def __post_init__(self) -> None:
        g = len(self.names)
        for what, shape in (("values", (g, g)), ("errors", (g, g)), ("covariance", (g,) * 4)):
            array = np.array(getattr(self, what), dtype=np.float64)
            if array.shape != shape:
                raise ModelError(f"FitFractions: {what} must have shape {shape} for {g} names, got {array.shape}.")
            array.setflags(write=False)
            object.__setattr__(self, what, array)
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise ModelError(f"FitFractions: no component '{name}'; the components are {list(self.names)}.")
        return self.names.index(name)

    @property
    def total(self) -> float:
        """The sum of the fractions and the interference terms: one, up to rounding."""
        return float(np.triu(self.values).sum())

    def fraction(self, name: str) -> tuple[float, float]:
        """The fit fraction of one component and its error.

        Parameters
        ----------
        name : str
            A component's label (one of ``names``).

        Returns
        -------
        tuple of float
            ``(value, error)``; the error is NaN without a fit result.

        Raises
        ------
        ModelError
            An unknown name.
        """
        a = self._index(name)
        return float(self.values[a, a]), float(self.errors[a, a])

    def interference(self, a: str, b: str) -> tuple[float, float]:
        """The interference term of two different components and its error (symmetric in a, b).

        Parameters
        ----------
        a, b : str
            Two different components' labels.

        Returns
        -------
        tuple of float
            ``(value, error)``; the error is NaN without a fit result.

        Raises
        ------
        ModelError
            An unknown name, or ``a == b`` (use :meth:`fraction`).
        """
        i, j = self._index(a), self._index(b)
        if i == j:
            raise ModelError(f"FitFractions.interference('{a}', '{b}'): give two different components; "
                             f"the fraction of '{a}' alone is fraction('{a}').")
        return float(self.values[i, j]), float(self.errors[i, j])

    def table(self, digits: int = 5) -> str:
        """The fractions, then the interference terms, one ``name  value ± error`` line each.

        Parameters
        ----------
        digits : int
            Digits after the decimal point.

        Returns
        -------
        str
        """
        g = len(self.names)
        pairs = [(a, b) for a in range(g) for b in range(a + 1, g)]
        labels = [*self.names, *(f"{self.names[a]} × {self.names[b]}" for a, b in pairs)]
        width = max(len(s) for s in labels)

        def line(label: str, a: int, b: int) -> str:
            return f"  {label:<{width}}  {self.values[a, b]:.{digits}f} ± {self.errors[a, b]:.{digits}f}"

        lines = ["fit fractions", *(line(n, a, a) for a, n in enumerate(self.names))]
        if pairs:
            lines += ["interference terms", *(line(labels[g + i], a, b) for i, (a, b) in enumerate(pairs))]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def fit_fractions_with_errors(amplitude: Any, mc: Data | None = None, result: Any = None) -> FitFractions:
    r"""Fit fractions and interference terms per component, with errors from a fit's covariance.

    The values are taken at the parameters' **current** values: call it after the fit, which
    leaves the parameters at the minimum (or set them to ``result.values`` first). The
    errors propagate ``result.covariance`` linearly, :math:`J C J^T`, with the Jacobian of the
    fractions w.r.t. the fit's parameters by automatic differentiation. The result's
    parameters are matched to the model's by identity (by name for an unpickled result, which
    keeps no Parameter objects); parameters the fractions do not read (a yield, another
    model's) and parameters not in the result (fixed in the fit) add no error.

    Parameters
    ----------
    amplitude : CoherentSum, SymbolicModel or AmplitudePdf
        A coherent sum (a :class:`zcache.amplitude.SymbolicModel` whose intensity is one; a
        model whose ``amplitude`` is one, as :class:`zcache.amplitude.AmplitudePdf`).
    mc : zcache.Data, optional
        The integration (phase-space) sample; default the model's ``phasespace``.
    result : zcache.minimize.FitResult, optional
        The fit whose covariance gives the errors; without it the errors are NaN.

    Returns
    -------
    FitFractions

    Raises
    ------
    ModelError
        ``amplitude`` is not a coherent sum, or no phase-space sample is given or known.
    IllegalInGraphModeError
        Called while a graph is traced.
    FitError
        ``result`` has no covariance, is not a fit result, or fitted none of the model's
        parameters (a fit of another model).
    """
    if tf.inside_function():
        raise IllegalInGraphModeError("fit_fractions_with_errors returns numpy arrays: call it from eager code (after "
                                      "the fit), not inside a zcache.function or tf.function.")
    intensity, mc = _coherent_of(amplitude, mc)
    names = tuple(intensity.component_names)
    g = len(names)
    values = intensity.fraction_matrix(mc).numpy()  # from the caches (and their checks of mc)
    if result is None:
        return FitFractions(names, values, np.full((g, g), np.nan), np.full((g,) * 4, np.nan))
    covariance, fitted = _fitted(result, intensity)
    owned = [i for i, p in enumerate(fitted) if p is not None]
    _, jac = intensity.fraction_jacobian(mc, [fitted[i] for i in owned])
    jacobian = np.zeros((g, g, len(fitted)))
    jacobian[:, :, owned] = jac.numpy()
    flat = jacobian.reshape(g * g, -1)
    cov = (flat @ covariance @ flat.T).reshape((g,) * 4)
    variances = np.einsum("abab->ab", cov)
    return FitFractions(names, values, np.sqrt(np.maximum(variances, 0.0)), cov)


def _coherent_of(amplitude: Any, mc: Data | None) -> tuple[CoherentIntensity, Data]:
    """The coherent sum of ``amplitude`` (itself or its ``.amplitude``) and the phase-space sample."""
    intensity = amplitude
    if not isinstance(intensity, CoherentIntensity) and isinstance(getattr(amplitude, "amplitude", None),
                                                                    CoherentIntensity):
        intensity = amplitude.amplitude
    if not isinstance(intensity, CoherentIntensity) or not getattr(intensity, "is_coherent_sum", True):
        raise ModelError(
            f"fit fractions need a coherent sum of couplings x amplitudes (a zcache.amplitude.CoherentSum, "
            f"an AmplitudePdf, or a zcache.amplitude.SymbolicModel whose intensity is sum_h |sum_k c_k A_kh|^2 "
            f"with complex couplings as linear factors), got {amplitude!r}."
        )
    mc = getattr(amplitude, "phasespace", None) if mc is None else mc
    if not isinstance(mc, Data):
        raise ModelError(f"fit fractions of {amplitude!r}: pass the phase-space (integration) sample as mc= "
                         f"(a zcache.Data), got {mc!r}.")
    return intensity, mc


def _fitted(result: Any, intensity: Any) -> tuple[np.ndarray, list[Parameter | None]]:
    """The result's covariance and, per fitted parameter (in its order), the model's Parameter or None."""
    if not (hasattr(result, "covariance") and hasattr(result, "names")):
        raise FitError(f"fit fractions: result= must be the zcache FitResult of a fit (Minuit().minimize(loss)), "
                       f"got {result!r}.")
    if result.covariance is None:
        raise FitError(
            "fit fractions: the fit result has no covariance (the fit ran without HESSE, e.g. Minuit(hesse=False), "
            "or HESSE failed); refit with HESSE for errors, or pass result=None for the values alone."
        )
    covariance = np.asarray(result.covariance, dtype=np.float64)
    names = list(result.names)
    if covariance.shape != (len(names), len(names)):
        raise FitError(f"fit fractions: the result's covariance has shape {covariance.shape} for {len(names)} "
                       "parameters.")
    own = intensity.get_params(None)
    given = getattr(result, "params", None)
    if given is not None:  # identity: a parameter of an equal model built again is another parameter
        ids = {id(p) for p in own}
        fitted = [p if id(p) in ids else None for p in given]
    else:  # unpickled: names only
        by_name = {p.name: p for p in own}
        fitted = [by_name.get(n) for n in names]
    if not any(p is not None for p in fitted):
        same_names = sorted(set(names) & {p.name for p in own})
        hint = (f" (it has parameters named {same_names[:3]}, but other Parameter objects: a model built again?)"
                if same_names else "")
        raise FitError(
            f"fit fractions: the fit result fitted none of the model's parameters{hint}; pass the FitResult of a "
            f"fit of this model (its parameters: {[p.name for p in own][:6]}), or result=None for the values alone."
        )
    return covariance, fitted


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
