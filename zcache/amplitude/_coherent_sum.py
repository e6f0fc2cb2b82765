r"""Amplitude (partial-wave) analysis: resonances, coherent sums and amplitude PDFs.

A three-body decay's amplitude is a coherent sum of :math:`K` components with complex
couplings :math:`c_k`,

.. math:: A(x) = \sum_k c_k A_k(x), \qquad p(x) = \frac{|A(x)|^2}{\int |A|^2 \, d\Phi},

and the normalization comes from a phase-space (integration) sample
:math:`\{y_i\}_{i=1}^{N_{MC}}` through the :math:`K\times K` matrix of integrals

.. math:: \int |A|^2 d\Phi = V\, c^T I\, c^*, \qquad
          I_{jk} = \frac{1}{N_{MC}}\sum_i A_j(y_i)\,A_k^*(y_i)

(:math:`V` the Dalitz plot's area). What is cached, and why (the engine does what
amplitude fitters do by hand):

- each component's per-event column :math:`A_k(x)`, per dataset: it changes only with
  that component's line-shape parameters (mass, width), never with a coupling;
- the stacked :math:`N\times K` matrix, so a coupling change costs one matrix-vector
  product over the events;
- each entry :math:`I_{jk}` separately and the matrix :math:`I`: a coupling change
  costs :math:`O(K^2)`, and moving one resonance's mass recomputes its column and the
  :math:`K` entries that involve it, not the other :math:`K(K-1)/2`.

:func:`zcache.precompute` finds all of this from the dependency graph: with only
couplings floating every column and integral is cached; a floating mass makes that
resonance's columns and entries always dirty and leaves the rest cached.


Examples
--------
>>> import zcache
>>> from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance
>>> kin = DalitzKinematics(1.86966, 0.493677, 0.13957, 0.13957, names=("K-", "pi+", "pi+"))
>>> kstar = Resonance(kin, ("12", "13"), mass=0.8955, width=0.0473, spin=1, name="K*(892)")
>>> amp = CoherentSum([(ComplexParameter("c_nr", 1.0, floating=False), NonResonant(kin)),
...                    (ComplexParameter("c_kst", 0.3 + 0.2j), kstar)])
>>> pdf = AmplitudePdf(amp, kin.sample(20_000, name="mc"))
>>> data = pdf.sample(500)
>>> data.nevents, data.obs
(500, ('s12', 's13'))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.cachable import cached
from .._engine.data import Data
from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError
from ..models import Model, accept_reject, unique_parameters
from ._coherent import CoherentIntensity, box_mean, sum_log_normalized
from ._couplings import ComplexParameter
from ._phasespace import DalitzKinematics
from ._resonances import Amplitude

__all__ = ["CoherentSum", "AmplitudePdf", "fit_fractions"]

# the sampling envelope: this factor times |A|^2's maximum over the phase-space sample (quoted
# by the error raised when an event exceeds it)
_FMAX_SAFETY = 1.5


# ---------------------------------------------------------------------------------------
# the coherent sum
# ---------------------------------------------------------------------------------------
class CoherentSum(CoherentIntensity):
    r""":math:`A(x) = \sum_k c_k A_k(x)` with complex couplings, and its intensity :math:`|A|^2`.

    The columns, integrals, normalization and fit fractions are those of the coherent-sum core
    (one group per amplitude, one helicity): each amplitude caches its column per dataset, the
    sum the stacked (K, N) matrix ``A_k[data]``, each entry ``I[R_j,R_k]`` and the matrix.

    Parameters
    ----------
    components : sequence of (ComplexParameter or complex, Amplitude)
        ``(coupling, amplitude)`` pairs; a coupling is a :class:`ComplexParameter` or a
        complex number (fixed).
    cache : bool
        ``False`` builds the same sum with no caches at all (the uncached reference: every
        evaluation recomputes every column and integral).

    Raises
    ------
    ModelError
        No components, a component that is not a pair, amplitudes of different kinematics,
        or repeated amplitude names.
    """

    _caches_groups = False  # each Amplitude caches its own column (shared by every sum it is in)
    _stacks_groups = True  # a coupling change costs one (K, N) product over the events

    def __init__(self, components: Sequence[tuple[Any, Amplitude]], *, cache: bool = True):
        if not components:
            raise ModelError("CoherentSum needs at least one (coupling, amplitude) pair.")
        couplings, amplitudes = [], []
        for i, pair in enumerate(components):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], Amplitude)):
                raise ModelError(f"CoherentSum: component {i} must be a (coupling, Amplitude) pair, got {pair!r}.")
            c, a = pair
            if not isinstance(c, ComplexParameter):
                c = ComplexParameter(f"c_{a.name}", complex(c), floating=False)
            couplings.append(c)
            amplitudes.append(a)
        kins = {a.kinematics for a in amplitudes}
        if len(kins) != 1:
            raise ModelError("CoherentSum: all amplitudes must share one DalitzKinematics object.")
        names = [a.name for a in amplitudes]
        if len(set(names)) != len(names):
            raise ModelError(f"CoherentSum: amplitude names must be distinct, got {names}.")
        self.couplings: list[ComplexParameter] = couplings
        self.amplitudes: list[Amplitude] = amplitudes
        self.kinematics: DalitzKinematics = kins.pop()
        self.cache = bool(cache)
        self._set_groups([1] * len(amplitudes))

    def __len__(self) -> int:
        return len(self.amplitudes)

    def get_params(self, floating: bool | None = True) -> list[Parameter]:
        """Couplings' and amplitudes' parameters, each once.

        Parameters
        ----------
        floating : bool or None
            ``True`` only floating ones, ``False`` only fixed ones, ``None`` all.

        Returns
        -------
        list of Parameter
        """
        return unique_parameters([*(q for c in self.couplings for q in c.params),
                                  *(q for a in self.amplitudes for q in a.params.values())], floating)

    def coupling_vector(self) -> tf.Tensor:
        """:math:`c`, the couplings.

        Returns
        -------
        tf.Tensor
            complex128, shape (K,).
        """
        if all(c.polar for c in self.couplings):  # one cos and one sin for all (fewer scalar ops)
            mag = tf.stack([c.mag.value() for c in self.couplings])
            phase = tf.stack([c.phase.value() for c in self.couplings])
            return tf.complex(mag * tf.cos(phase), mag * tf.sin(phase))
        return tf.stack([c.value() for c in self.couplings])

    @property
    def component_names(self) -> list[str]:
        """The amplitudes' names: the components of :func:`fit_fractions_with_errors`.

        Returns
        -------
        list of str
        """
        return [a.name for a in self.amplitudes]

    # -- the core's hooks: one group per amplitude, one helicity ----------------------------
    def _group_now(self, g: int, data: Any) -> tf.Tensor:
        amplitude = self.amplitudes[g]
        if isinstance(data, Data):
            column = amplitude.column(data) if self.cache else amplitude._compute(self.kinematics.space.select(data))
        else:
            column = amplitude._compute(tf.convert_to_tensor(data, tf.float64))
        return column[None, None, :]

    def _block_name(self, a: int, b: int, mc: Data) -> str:
        return f"I[{self.amplitudes[a].name},{self.amplitudes[b].name}]"

    def _group_uncached(self, g: int, data: Data) -> tf.Tensor:
        return self.amplitudes[g]._compute(self.kinematics.space.select(data))[None, None, :]

    # -- per event ----------------------------------------------------------------------
    def amplitude_matrix(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        r"""The matrix :math:`A_k(x_i)`: cached per :class:`zcache.Data` (unless ``cache=False``).

        Parameters
        ----------
        data : zcache.Data or array_like
            Events (s12, s13).
        raw : bool, optional
            ``False`` (default): one row per event (the padding rows of padded data,
            ``capacity=``, left out: :meth:`zcache.Data.unpadded`). ``True``: one row per row of
            ``data.value()``, padding included, what the models and losses compute on (as
            :meth:`zcache.models.Model.pdf`'s ``raw``).

        Returns
        -------
        tf.Tensor
            complex128, shape (N, K).
        """
        rows = tf.transpose(self._columns(data)[0])
        return rows if raw or not isinstance(data, Data) else data.unpadded(rows)

    def amplitude(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        r""":math:`A(x_i) = \sum_k c_k A_k(x_i)`.

        Parameters
        ----------
        data : zcache.Data or array_like
            Events (s12, s13).
        raw : bool, optional
            ``False`` (default): one row per event (the padding rows of padded data,
            ``capacity=``, left out: :meth:`zcache.Data.unpadded`). ``True``: one row per row of
            ``data.value()``, padding included, what the models and losses compute on (as
            :meth:`zcache.models.Model.pdf`'s ``raw``).

        Returns
        -------
        tf.Tensor
            complex128, shape (N,).
        """
        rows = self._amplitudes(data)[0]
        return rows if raw or not isinstance(data, Data) else data.unpadded(rows)

    # -- integrals over a phase-space sample ----------------------------------------------
    def integral_matrix(self, mc: Data) -> tf.Tensor:
        r""":math:`I_{jk} = \langle A_j A_k^* \rangle` over ``mc``, Hermitian (K, K).

        Each entry is a cache of its own, and so is the matrix: moving one component's
        parameters recomputes its column and its K entries only.

        Parameters
        ----------
        mc : zcache.Data
            The phase-space (integration) sample.

        Returns
        -------
        tf.Tensor
            complex128, shape (K, K).

        Raises
        ------
        ModelError
            ``mc`` is not a :class:`zcache.Data`, or it is padded.
        """
        if not isinstance(mc, Data):
            raise ModelError(f"integral_matrix needs the phase-space sample as a zcache.Data, got {type(mc).__name__}.")
        _refuse_padded(mc)
        return super().integral_matrix(mc)


# ---------------------------------------------------------------------------------------
# the PDF
# ---------------------------------------------------------------------------------------
class AmplitudePdf(Model):
    r"""The density :math:`|A(x)|^2 / (V\,\langle|A|^2\rangle_{MC})` over the Dalitz plot.

    Works with every loss, minimizer and toy loop of zcache (it is a
    :class:`zcache.models.Model` on a :class:`~zcache.amplitude.DalitzSpace`). Sampling is
    accept-reject (:func:`zcache.models.accept_reject`) under ``_FMAX_SAFETY`` times the
    intensity's maximum over the phase-space sample; an event above it raises ModelError.

    Parameters
    ----------
    amplitude : CoherentSum
        The amplitude.
    phasespace : zcache.Data
        The integration sample (uniform in the Dalitz plot, e.g. ``kinematics.sample(n)``).
    name : str, optional
        Label; default ``'AmplitudePdf'``.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        ``amplitude`` is not a CoherentSum, or ``phasespace`` not a Data inside the plot.
    """

    def __init__(self, amplitude: CoherentSum, phasespace: Data, *, name: str | None = None, extended: Any = None):
        if not isinstance(amplitude, CoherentSum):
            raise ModelError(f"AmplitudePdf needs a CoherentSum, got {amplitude!r}.")
        if not isinstance(phasespace, Data):
            raise ModelError(
                f"AmplitudePdf needs the phase-space sample as a zcache.Data (kinematics.sample(n)), got "
                f"{type(phasespace).__name__}."
            )
        _refuse_padded(phasespace)
        super().__init__(amplitude.kinematics.space, name=name or "AmplitudePdf", extended=extended)
        self.amplitude = amplitude
        self.phasespace = phasespace
        self.area = amplitude.kinematics.area()
        self.space.select(phasespace)  # columns must match now
        if not bool(tf.reduce_all(self.space.inside(self.space.select(phasespace)))):
            raise ModelError(f"AmplitudePdf: the phase-space sample '{phasespace.name}' has events outside the Dalitz plot.")

    def _own_params(self) -> list[Parameter]:
        return [*self.amplitude.get_params(None), *super()._own_params()]  # Model's: the yield

    # densities
    def pdf(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        """The normalized density per event (cached per dataset unless ``cache=False``).

        Parameters
        ----------
        data : zcache.Data or array_like
            Events (s12, s13).
        raw : bool, optional
            As for :meth:`zcache.models.Model.pdf` (what a loss reads: padding rows included).

        Returns
        -------
        tf.Tensor
            float64, shape (N,): one value per event (padded data: the padding rows left out).

        Raises
        ------
        DensityError
            As for :meth:`zcache.models.Model.pdf`.
        """
        return super().pdf(data, raw=raw)

    def _rows_pdf(self, data: Any) -> tf.Tensor:
        if isinstance(data, Data) and not self.amplitude.cache:
            return self._pdf(data)
        return super()._rows_pdf(data)

    def _pdf(self, data: Any) -> tf.Tensor:
        if not isinstance(data, Data):
            data = self.space.select(data)
        return self.amplitude.intensity(data, raw=True) / self.normalization()

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return self.amplitude.intensity(x, raw=True)

    @property
    def factorizes(self) -> bool:
        r""":math:`|A|^2 / (V \langle|A|^2\rangle)`: one normalization for every event.

        See :attr:`zcache.models.Model.factorizes`.
        """
        return True

    def log_unnormalized(self, data: Data) -> tf.Tensor:
        r""":math:`\log |A(x)|^2` per row of ``data``, through the amplitude's per-dataset caches.

        Parameters
        ----------
        data : zcache.Data
            Events (s12, s13).

        Returns
        -------
        tf.Tensor
            float64, one value per row of ``data.value()``.
        """
        return tf.math.log(self.amplitude.intensity(data, raw=True))

    def sum_log_pdf(self, data: Any) -> tf.Tensor:
        r""":math:`\sum_i \log|A(x_i)|^2 - N \log(V \langle|A|^2\rangle)`: no per-event division.

        Parameters
        ----------
        data : zcache.Data or array_like
            Events (s12, s13).

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        intensity = self.amplitude.intensity(data if isinstance(data, Data) else self.space.select(data), raw=True)
        return sum_log_normalized(intensity, data, self.normalization())

    def normalization(self) -> tf.Tensor:
        r""":math:`V \langle |A|^2 \rangle_{MC}` (through the cached integral matrix).

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        if not self.amplitude.cache:
            return self._norm()
        return self._cached_norm()

    @cached(name=lambda self: f"{self.name}.normalization")
    def _cached_norm(self) -> tf.Tensor:
        return self._norm()

    def _norm(self) -> tf.Tensor:
        return self.area * self.amplitude.norm(self.phasespace)

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        if tuple(lower) == self.space.lower and tuple(upper) == self.space.upper:
            return self._norm()
        # a box inside the plot: Monte Carlo over the phase-space sample
        return self.area * box_mean(self.space.select(self.phasespace), self.amplitude.intensity(self.phasespace, raw=True),
                                    lower, upper)

    # sampling
    @cached(name=lambda self: f"{self.name}.fmax")
    def _fmax(self) -> tf.Tensor:
        return _FMAX_SAFETY * tf.reduce_max(self.amplitude.intensity(self.phasespace, raw=True))

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        kin = self.amplitude.kinematics
        (lo12, hi12), (lo13, hi13) = kin.s_range("12"), kin.s_range("13")
        # an event above the envelope would be under-sampled: refuse rather than bias (no raises)
        return accept_reject(
            n, (lo12, lo13), (hi12, hi13), self.amplitude.intensity, self._fmax(),
            inside=kin.inside,
            batch=lambda n, accepted, proposed: tf.maximum(8 * n, 8192),
            over_message=(
                f"sampling '{self.name}': |A|^2 exceeded the envelope ({_FMAX_SAFETY:g} x its maximum over the "
                f"phase-space sample '{self.phasespace.name}'); use a larger phase-space sample."
            ),
        )


def fit_fractions(amplitude: CoherentSum, mc: Data) -> np.ndarray:
    r"""Fit fractions :math:`|c_k|^2 I_{kk} / c^T I c^*` of each component.

    Parameters
    ----------
    amplitude : CoherentSum or zcache.amplitude.SymbolicModel
        The amplitude (any coherent sum), at the couplings to evaluate.
    mc : zcache.Data
        The phase-space (integration) sample.

    Returns
    -------
    ndarray
        float64, shape (K,); they sum to one without interference.

    See Also
    --------
    fit_fractions_with_errors : per component, with the interference terms and errors.
    """
    return amplitude.fractions(mc)


def _refuse_padded(mc: Data) -> None:
    """Phase-space integrals are means over the sample: padding rows would enter them."""
    if mc.capacity is not None:
        raise ModelError(
            f"The phase-space sample '{mc.name}' is padded (capacity={mc.capacity}); its integrals are "
            "means over every row. Create the phase-space sample without capacity= (only the fitted "
            "data need a shape bucket)."
        )


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
