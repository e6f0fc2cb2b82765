r"""Resonances and angular functions: the per-event amplitudes :math:`A_k(x)` of a three-body decay.

A resonance :math:`R \to a\,b` (spin :math:`L`, spectator :math:`c`) contributes

.. math::
    A_R(x) = \frac{F_L(q)}{F_L(q_0)}\,\frac{F_L(p)}{F_L(p_0)}\,P_L(\cos\theta)\,
             \frac{1}{m_0^2 - s - i\,m_0\,\Gamma(s)},\qquad
    \Gamma(s) = \Gamma_0 \left(\frac{q}{q_0}\right)^{2L+1}\frac{m_0}{\sqrt s}
                \frac{B_L(q)^2}{B_L(q_0)^2},

with Blatt-Weisskopf factors :math:`F_L(z=(qd)^2)`: :math:`F_0^2 = 1`,
:math:`F_1^2 = 2z/(1+z)`, :math:`F_2^2 = 13z^2/((z-3)^2+9z)`, and
:math:`B_L^2 = F_L^2/z^L`; :math:`q, p, \theta` from :mod:`zcache.amplitude`. For
identical particles give several channels (e.g. ``("12", "13")`` in
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from .._engine.cachable import Cachable, cached
from .._engine.data import Data
from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python
from .._engine.traced_checks import require
from ..exceptions import ModelError
from ..models import as_parameter
from ._phasespace import DalitzKinematics

__all__ = ["blatt_weisskopf_sq", "relativistic_breit_wigner", "legendre", "wigner_small_d", "Amplitude", "Resonance",
           "NonResonant"]


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
    >>> from zcache.amplitude import wigner_small_d
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
    kinematics : zcache.amplitude.DalitzKinematics
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
            raise ModelError(f"{type(self).__name__} needs a zcache.amplitude.DalitzKinematics, got {kinematics!r}.")
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
    kinematics : zcache.amplitude.DalitzKinematics
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
    kinematics : zcache.amplitude.DalitzKinematics
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
            raise ModelError(f"Resonance '{name}' needs a zcache.amplitude.DalitzKinematics, got {kinematics!r}.")
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


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
