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

A resonance :math:`R \to a\,b` (spin :math:`L`, spectator :math:`c`) contributes

.. math::
    A_R(x) = \frac{F_L(q)}{F_L(q_0)}\,\frac{F_L(p)}{F_L(p_0)}\,P_L(\cos\theta)\,
             \frac{1}{m_0^2 - s - i\,m_0\,\Gamma(s)},\qquad
    \Gamma(s) = \Gamma_0 \left(\frac{q}{q_0}\right)^{2L+1}\frac{m_0}{\sqrt s}
                \frac{B_L(q)^2}{B_L(q_0)^2},

with Blatt-Weisskopf factors :math:`F_L(z=(qd)^2)`: :math:`F_0^2 = 1`,
:math:`F_1^2 = 2z/(1+z)`, :math:`F_2^2 = 13z^2/((z-3)^2+9z)`, and
:math:`B_L^2 = F_L^2/z^L`; :math:`q, p, \theta` from :mod:`zcache.phasespace`. For
identical particles give several channels (e.g. ``("12", "13")`` in
:math:`D^+\to K^-\pi^+\pi^+`); their amplitudes are added (Bose symmetry).

Examples
--------
>>> import zcache
>>> from zcache.phasespace import DalitzKinematics
>>> from zcache.amplitudes import Resonance, NonResonant, CoherentSum, ComplexParameter, AmplitudePdf
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

import cmath
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ._engine.cachable import Cachable, cached
from ._engine.data import Data
from ._engine.parameter import Parameter, set_values
from ._engine.tf_internals import leave_to_python
from ._engine.traced_checks import require
from ._fitting.coherent import CoherentIntensity, box_mean, sum_log_normalized
from .exceptions import ModelError
from .fractions import FitFractions, fit_fractions_with_errors
from .models import Model, as_parameter, unique_parameters
from .phasespace import DalitzKinematics
from .sampling import accept_reject

__all__ = [
    "ComplexParameter",
    "coupling_derivatives",
    "blatt_weisskopf_sq",
    "relativistic_breit_wigner",
    "legendre",
    "wigner_small_d",
    "Amplitude",
    "Resonance",
    "NonResonant",
    "CoherentSum",
    "AmplitudePdf",
    "fit_fractions",
    "FitFractions",
    "fit_fractions_with_errors",
]

# the sampling envelope: this factor times |A|^2's maximum over the phase-space sample (quoted
# by the error raised when an event exceeds it)
_FMAX_SAFETY = 1.5


def _name_of(data: Any) -> str:
    return data.name if isinstance(data, Data) else "tensor"


# ---------------------------------------------------------------------------------------
# complex couplings
# ---------------------------------------------------------------------------------------
class ComplexParameter:
    r"""A complex coupling made of two real :class:`zcache.Parameter` objects.

    ``polar=True``: :math:`c = r e^{i\phi}` with ``mag`` (:math:`r \ge 0`) and ``phase``;
    ``polar=False``: :math:`c = a + i b` with ``real`` and ``imag``.

    Parameters
    ----------
    name : str
        The coupling's name; its parameters are ``<name>_mag`` / ``<name>_phase`` (polar)
        or ``<name>_re`` / ``<name>_im``.
    value : complex
        The starting value (finite).
    polar : bool
        Magnitude and phase (True) or real and imaginary part (False).
    floating : bool
        Whether both parameters float.

    Raises
    ------
    ModelError
        ``value`` is not a finite complex number.

    Examples
    --------
    >>> from zcache.amplitudes import ComplexParameter
    >>> c = ComplexParameter("c1", 1j)
    >>> [p.name for p in c.params], round(float(c.mag.value()), 12)
    (['c1_mag', 'c1_phase'], 1.0)
    >>> abs(complex(c) - 1j) < 1e-15
    True
    """

    def __init__(self, name: str, value: complex, *, polar: bool = True, floating: bool = True):
        try:
            value = complex(value)
        except (TypeError, ValueError) as err:
            raise ModelError(f"ComplexParameter '{name}': the value must be a complex number, got {value!r}.") from err
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise ModelError(f"ComplexParameter '{name}': the value must be finite, got {value!r}.")
        self.name = name
        self.polar = bool(polar)
        if self.polar:
            self.mag = Parameter(f"{name}_mag", abs(value), lower=0.0, floating=floating)
            self.phase = Parameter(f"{name}_phase", cmath.phase(value), floating=floating)
            self.params = [self.mag, self.phase]
        else:
            self.real = Parameter(f"{name}_re", value.real, floating=floating)
            self.imag = Parameter(f"{name}_im", value.imag, floating=floating)
            self.params = [self.real, self.imag]

    def __repr__(self) -> str:
        return f"<ComplexParameter '{self.name}' {complex(self):.6g}>"

    def __complex__(self) -> complex:
        a, b = (float(p) for p in self.params)
        return cmath.rect(a, b) if self.polar else complex(a, b)

    def value(self) -> tf.Tensor:
        """The coupling as a tensor.

        Returns
        -------
        tf.Tensor
            complex128 scalar.
        """
        a, b = (p.value() for p in self.params)
        if self.polar:
            return tf.complex(a * tf.cos(b), a * tf.sin(b))
        return tf.complex(a, b)

    def set_value(self, value: complex) -> None:
        """Set both real parameters from a complex number (checked as one step).

        Parameters
        ----------
        value : complex
            The new coupling.
        """
        value = complex(value)
        set_values(self.params, [abs(value), cmath.phase(value)] if self.polar else [value.real, value.imag])


def coupling_derivatives(couplings: Sequence[ComplexParameter]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    r"""Couplings :math:`c_k` with their first and second derivatives by their two parameters each.

    Parameters
    ----------
    couplings : sequence of ComplexParameter
        Polar (:math:`r e^{i\phi}`) or Cartesian (:math:`a + ib`), mixed as they come.

    Returns
    -------
    c : tf.Tensor
        complex128 (K,), as each :meth:`ComplexParameter.value`.
    first : tf.Tensor
        complex128 (K, 2): :math:`\partial c_k / \partial p_{kj}` for ``params`` :math:`p_{k0}, p_{k1}`.
    second : tf.Tensor
        complex128 (K, 3): :math:`\partial^2 c_k` by :math:`(p_{k0}, p_{k0})`, :math:`(p_{k0}, p_{k1})`,
        :math:`(p_{k1}, p_{k1})`.

    Examples
    --------
    >>> c, first, second = coupling_derivatives([ComplexParameter("c_d", 2j), ComplexParameter("c_e", 1 + 1j, polar=False)])
    >>> (np.round(first.numpy(), 12) + 0.0).tolist()    # e^{i phi}, i c; then 1, i
    [[1j, (-2+0j)], [(1+0j), 1j]]
    >>> (np.round(second.numpy()[0], 12) + 0.0).tolist()   # 0, i e^{i phi}, -c
    [0j, (-1+0j), -2j]
    """
    values = tf.reshape(tf.stack([p.value() for cp in couplings for p in cp.params]), [-1, 2])
    a, b = tf.unstack(values, 2, axis=1)
    polar = tf.constant([cp.polar for cp in couplings])
    rotation = tf.complex(tf.cos(b), tf.sin(b))
    c = tf.where(polar, tf.complex(a, tf.zeros_like(a)) * rotation, tf.complex(a, b))
    one, zero = tf.ones_like(c), tf.zeros_like(c)
    first = tf.stack([tf.where(polar, rotation, one), tf.where(polar, 1j * c, 1j * one)], axis=1)
    second = tf.stack([zero, tf.where(polar, 1j * rotation, zero), tf.where(polar, -c, zero)], axis=1)
    return c, first, second


# ---------------------------------------------------------------------------------------
# line shapes and angular functions (pure TF)
# ---------------------------------------------------------------------------------------
def blatt_weisskopf_sq(spin: int, z: Any) -> tf.Tensor:
    r"""Blatt-Weisskopf :math:`F_L^2(z)`, :math:`z = (q d)^2`, for :math:`L \le 2` (von Hippel-Quigg).

    Parameters
    ----------
    spin : int
        :math:`L`: 0, 1 or 2.
    z : float or tf.Tensor
        :math:`(q d)^2`.

    Returns
    -------
    tf.Tensor
        float64, like ``z``.

    Raises
    ------
    ModelError
        Spin above 2.
    """
    z = tf.convert_to_tensor(z, tf.float64)
    if spin == 0:
        return tf.ones_like(z)
    if spin == 1:
        return 2.0 * z / (1.0 + z)
    if spin == 2:
        return 13.0 * z * z / ((z - 3.0) * (z - 3.0) + 9.0 * z)
    raise ModelError(f"Blatt-Weisskopf factors are implemented for spin 0, 1, 2; got {spin!r}.")


def relativistic_breit_wigner(
    s: Any, mass: Any, width: Any, q: Any, q0: Any, spin: int, radius: float
) -> tf.Tensor:
    r"""Relativistic Breit-Wigner :math:`1/(m_0^2 - s - i m_0 \Gamma(s))` with a mass-dependent width.

    At :math:`s = m_0^2` the value is :math:`i/(m_0\Gamma_0)`.

    Parameters
    ----------
    s : float or tf.Tensor
        Squared invariant mass of the pair.
    mass, width : float or tf.Tensor
        :math:`m_0, \Gamma_0`.
    q, q0 : float or tf.Tensor
        Breakup momentum at :math:`s` and at :math:`m_0^2`.
    spin : int
        :math:`L`.
    radius : float
        :math:`d` of the Blatt-Weisskopf factor (1/GeV when momenta are in GeV).

    Returns
    -------
    tf.Tensor
        complex128, like ``s``.
    """
    s = tf.convert_to_tensor(s, tf.float64)
    q = tf.convert_to_tensor(q, tf.float64)
    mass = tf.convert_to_tensor(mass, tf.float64)
    width = tf.convert_to_tensor(width, tf.float64)
    q0 = tf.convert_to_tensor(q0, tf.float64)
    # (q/q0)^(2L+1) B_L(q)^2/B_L(q0)^2 = (q/q0) F_L(q)^2/F_L(q0)^2: no powers, finite at q -> 0
    ratio = q / q0
    if spin:
        ratio = ratio * blatt_weisskopf_sq(spin, (q * radius) * (q * radius)) / blatt_weisskopf_sq(
            spin, (q0 * radius) * (q0 * radius))
    gamma = width * ratio * (mass / tf.sqrt(s))
    # 1/(a - ib) = (a + ib)/(a^2 + b^2), from real parts (cheaper than a complex division)
    a, b = mass * mass - s, mass * gamma
    d = a * a + b * b
    return tf.complex(a / d, b / d)


def legendre(spin: int, x: Any) -> tf.Tensor:
    r"""Legendre polynomial :math:`P_L(x) = d^L_{00}(\arccos x)`, :math:`L \le 2`.

    Parameters
    ----------
    spin : int
        :math:`L`: 0, 1 or 2.
    x : float or tf.Tensor
        :math:`\cos\theta`.

    Returns
    -------
    tf.Tensor
        float64, like ``x``.

    Raises
    ------
    ModelError
        Spin above 2.
    """
    x = tf.convert_to_tensor(x, tf.float64)
    if spin == 0:
        return tf.ones_like(x)
    if spin == 1:
        return x
    if spin == 2:
        return 1.5 * x * x - 0.5
    raise ModelError(f"Angular terms are implemented up to spin 2; got {spin!r}.")


def wigner_small_d(j: float, m1: float, m2: float, theta: Any) -> tf.Tensor:
    r"""Wigner's small-d :math:`d^j_{m_1 m_2}(\theta)` (integer or half-integer :math:`j`).

    Wigner's sum formula,

    .. math:: d^j_{m'm}(\theta) = \sum_s \frac{(-1)^{m'-m+s}\sqrt{(j+m')!(j-m')!(j+m)!(j-m)!}}
              {(j+m-s)!\,s!\,(m'-m+s)!\,(j-m'-s)!}
              \cos^{2j+m-m'-2s}\tfrac{\theta}{2}\,\sin^{m'-m+2s}\tfrac{\theta}{2}.

    Parameters
    ----------
    j : float
        The spin (integer or half-integer, >= 0).
    m1, m2 : float
        :math:`m'` and :math:`m`, with :math:`|m| \le j` and :math:`j - m` integer.
    theta : float or tf.Tensor
        The angle.

    Returns
    -------
    tf.Tensor
        float64, like ``theta``.

    Raises
    ------
    ModelError
        Indices that are not (half-)integers or not a valid combination.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.amplitudes import wigner_small_d
    >>> round(float(wigner_small_d(1, 0, 0, np.pi / 3)), 12)      # cos(theta)
    0.5
    """
    for v in (j, m1, m2):
        if not float(2 * v).is_integer():
            raise ModelError(f"wigner_small_d: j, m1, m2 must be integers or half-integers, got {(j, m1, m2)}.")
    if j < 0 or abs(m1) > j or abs(m2) > j or not float(j - m1).is_integer() or not float(j - m2).is_integer():
        raise ModelError(f"wigner_small_d: need j >= 0, |m| <= j and j - m integer; got {(j, m1, m2)}.")
    theta = tf.convert_to_tensor(theta, tf.float64)
    c, s_ = tf.cos(theta / 2.0), tf.sin(theta / 2.0)
    jp, jm = round(j + m1), round(j - m1)
    kp, km = round(j + m2), round(j - m2)
    d = round(m1 - m2)
    pref = math.sqrt(math.factorial(jp) * math.factorial(jm) * math.factorial(kp) * math.factorial(km))
    total = tf.zeros_like(theta)
    for k in range(max(0, -d), min(kp, jm) + 1):
        coef = (-1) ** (d + k) * pref / (
            math.factorial(kp - k) * math.factorial(k) * math.factorial(d + k) * math.factorial(jm - k)
        )
        total = total + coef * c ** (round(2 * j) - d - 2 * k) * s_ ** (d + 2 * k)
    return total


# ---------------------------------------------------------------------------------------
# per-event amplitudes
# ---------------------------------------------------------------------------------------
class Amplitude(Cachable):
    """One component :math:`A_k(x)` of a coherent sum: complex, per event.

    Subclasses implement ``_compute(x)`` (``x``: (N, 2) tensor of Dalitz variables,
    returning a complex128 (N,) tensor) and set ``params`` (name -> Parameter).
    :meth:`column` caches the result per :class:`zcache.Data`.

    Parameters
    ----------
    kinematics : zcache.phasespace.DalitzKinematics
        The decay.
    params : dict of str to Parameter
        The amplitude's parameters by name.
    name : str
        A label (caches and reports); distinct within a :class:`CoherentSum`.

    Raises
    ------
    ModelError
        ``kinematics`` is not a DalitzKinematics.
    """

    def __init__(self, kinematics: DalitzKinematics, params: dict[str, Parameter], name: str):
        if not isinstance(kinematics, DalitzKinematics):
            raise ModelError(f"{type(self).__name__} needs a zcache.phasespace.DalitzKinematics, got {kinematics!r}.")
        self.kinematics = kinematics
        self.params = params
        self.name = name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}'>"

    def column(self, data: Any) -> tf.Tensor:
        """:math:`A_k` at each event: cached per :class:`zcache.Data`, computed for tensors.

        Parameters
        ----------
        data : zcache.Data or array_like
            Events (s12, s13).

        Returns
        -------
        tf.Tensor
            complex128, shape (N,).
        """
        if isinstance(data, Data):
            return self._cached_column(data)
        return self._compute(tf.convert_to_tensor(data, tf.float64))

    @cached(name=lambda self, data: f"{self.name}[{data.name}]")
    def _cached_column(self, data: Data) -> tf.Tensor:
        return self._compute(self.kinematics.space.select(data))

    def _compute(self, x: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _compute(x).")


class NonResonant(Amplitude):
    """A constant amplitude, :math:`A(x) = 1` (non-resonant three-body decay).

    Parameters
    ----------
    kinematics : zcache.phasespace.DalitzKinematics
        The decay.
    name : str
        A label.
    """

    def __init__(self, kinematics: DalitzKinematics, *, name: str = "NR"):
        super().__init__(kinematics, {}, name)

    def _compute(self, x: tf.Tensor) -> tf.Tensor:
        return tf.complex(tf.ones_like(x[:, 0]), tf.zeros_like(x[:, 0]))


class Resonance(Amplitude):
    r"""A resonance in one or more two-body channels: barrier factors x angular term x Breit-Wigner.

    Parameters
    ----------
    kinematics : zcache.phasespace.DalitzKinematics
        The decay.
    channel : str or sequence of str
        '12', '13' or '23', or several (added: Bose symmetry for identical particles).
    mass, width : Parameter or float
        :math:`m_0, \Gamma_0` (Parameters, or numbers: fixed).
    spin : int
        0, 1 or 2.
    radius : float
        Blatt-Weisskopf radius of the resonance's decay vertex (default 1.5 /GeV).
    parent_radius : float
        The same for the parent's decay vertex (default 5 /GeV).
    name : str, optional
        Label (caches and reports); default ``'R<channel>'``.

    Raises
    ------
    ModelError
        Spin above 2, unknown channel, or a pole mass outside the channel's kinematic range
        (then :math:`q_0` or :math:`p_0` does not exist).
    """

    def __init__(
        self,
        kinematics: DalitzKinematics,
        channel: str | Sequence[str],
        mass: Any,
        width: Any,
        spin: int,
        *,
        radius: float = 1.5,
        parent_radius: float = 5.0,
        name: str | None = None,
    ):
        name = name or f"R{channel}"
        if spin not in (0, 1, 2):
            raise ModelError(f"Resonance '{name}': spin must be 0, 1 or 2, got {spin!r}.")
        channels = (channel,) if isinstance(channel, str) else tuple(channel)
        if not channels:
            raise ModelError(f"Resonance '{name}': give at least one channel.")
        if not isinstance(kinematics, DalitzKinematics):
            raise ModelError(f"Resonance '{name}' needs a zcache.phasespace.DalitzKinematics, got {kinematics!r}.")
        ranges = [tuple(math.sqrt(v) for v in kinematics.s_range(ch)) for ch in channels]
        # the pole must stay inside every channel's range (q0, p0 exist): the mass's limits
        self._mass_range = (max(r[0] for r in ranges), min(r[1] for r in ranges))
        m0 = float(mass) if isinstance(mass, Parameter) else mass
        lo, hi = self._mass_range
        try:
            inside = lo < float(m0) < hi
        except (TypeError, ValueError) as err:
            raise ModelError(f"Resonance '{name}': the mass must be a zcache.Parameter or a number, got {mass!r}.") from err
        if not inside:
            raise ModelError(
                f"Resonance '{name}': its mass {m0} lies outside the range ({lo:g}, {hi:g}) of channel(s) "
                f"{', '.join(channels)}, where the breakup momenta at the pole are undefined. Pick a mass inside it."
            )
        super().__init__(
            kinematics,
            # a fixed mass given as a number: limits just inside the open range
            {"mass": as_parameter(mass, f"{name}_mass", lower=math.nextafter(lo, hi), upper=math.nextafter(hi, lo)),
             "width": as_parameter(width, f"{name}_width", lower=0.0)},
            name,
        )
        self.channels = channels
        self.spin = int(spin)
        self.radius = float(radius)
        self.parent_radius = float(parent_radius)
    @property
    def mass(self) -> Parameter:
        """:math:`m_0`."""
        return self.params["mass"]

    @property
    def width(self) -> Parameter:
        r""":math:`\Gamma_0`."""
        return self.params["width"]

    def _compute(self, x: tf.Tensor) -> tf.Tensor:
        kin = self.kinematics
        m0, g0 = self.mass.value(), self.width.value()
        lo, hi = self._mass_range
        mass = self.mass
        # Limits strictly inside the range guarantee the check (a Parameter never leaves its limits):
        # then it is left out, which also keeps an XLA-compiled loss free of a check it would drop.
        guaranteed = (mass.lower is not None and mass.upper is not None and mass.lower > lo and mass.upper < hi)
        checks = [] if guaranteed else require(
            tf.logical_and(m0 > lo, m0 < hi), ModelError,
            f"Resonance '{self.name}': its mass left the channels' range ({lo:g}, {hi:g}), where the "
            "breakup momenta at the pole are undefined; give the mass Parameter limits inside this range.",
        )
        if checks:
            with tf.control_dependencies(checks):
                m0 = tf.identity(m0)
        inv = kin.invariants(x)
        total = None
        for ch in self.channels:
            s = inv[ch]
            q, p = kin.momenta(s, ch)
            q0, p0 = kin.momenta(m0 * m0, ch)
            bw = relativistic_breit_wigner(s, m0, g0, q, q0, self.spin, self.radius)
            real = legendre(self.spin, kin.cos_theta(x, ch))
            if self.spin:
                r, rp = self.radius, self.parent_radius
                fq = blatt_weisskopf_sq(self.spin, (q * r) * (q * r))
                fq0 = blatt_weisskopf_sq(self.spin, (q0 * r) * (q0 * r))
                fp = blatt_weisskopf_sq(self.spin, (p * rp) * (p * rp))
                fp0 = blatt_weisskopf_sq(self.spin, (p0 * rp) * (p0 * rp))
                real = real * tf.sqrt(fq / fq0 * fp / fp0)
            term = tf.complex(real, tf.zeros_like(real)) * bw
            total = term if total is None else total + term
        return total


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
    :class:`zcache.models.Model` on a :class:`~zcache.phasespace.DalitzSpace`). Sampling is
    accept-reject (:func:`zcache.sampling.accept_reject`) under ``_FMAX_SAFETY`` times the
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
    amplitude : CoherentSum or zcache.symbolic.SymbolicModel
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
