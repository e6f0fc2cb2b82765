r"""Three-body phase space: Dalitz-plot kinematics and a uniform phase-space generator.

A decay :math:`P \to 1\,2\,3` with masses :math:`M, m_1, m_2, m_3` has two degrees of
freedom once the decay plane's orientation is integrated out. zcache uses the Dalitz
variables :math:`x = (s_{12}, s_{13})`, the squared invariant masses of the pairs
(12) and (13); the third follows from

.. math:: s_{12} + s_{13} + s_{23} = M^2 + m_1^2 + m_2^2 + m_3^2 .

Phase space is flat in :math:`(s_{12}, s_{13})` inside the Dalitz boundary, so a
uniform sample of the plot is a phase-space sample (what an amplitude model's
normalization integral is averaged over).

For a resonance :math:`R \to a\,b` with spectator :math:`c`, in the rest frame of
:math:`R` (:math:`s = s_{ab}`):

.. math::
    q = \frac{\sqrt{\lambda(s, m_a^2, m_b^2)}}{2\sqrt s},\quad
    p = \frac{\sqrt{\lambda(M^2, s, m_c^2)}}{2\sqrt s},\quad
    \cos\theta = \frac{(s + m_a^2 - m_b^2)(M^2 - s - m_c^2) - 2s\,(s_{ac} - m_a^2 - m_c^2)}
                      {\sqrt{\lambda(s, m_a^2, m_b^2)\,\lambda(M^2, s, m_c^2)}},

with :math:`\lambda(x,y,z) = x^2+y^2+z^2-2xy-2yz-2zx`; :math:`\theta` is the angle
between :math:`a` and :math:`c` in that frame (the helicity angle). An event lies
inside the plot exactly when :math:`|\cos\theta| \le 1`.

Examples
--------
>>> from zcache.amplitude import DalitzKinematics
>>> kin = DalitzKinematics(1.86966, 0.493677, 0.13957, 0.13957)   # D+ -> K- pi+ pi+
>>> round(kin.s_range("12")[0], 6)                                # (m_K + m_pi)^2
0.401002
>>> sample = kin.sample(1000)
>>> bool(kin.inside(sample.value()).numpy().all())
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from scipy import integrate

from .._engine.data import Data
from .._engine.function import Function, function
from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError
from ..models import Space, accept_reject

__all__ = ["DalitzKinematics", "DalitzSpace", "kallen"]

_CHANNELS = {"12": (1, 2, 3), "13": (1, 3, 2), "23": (2, 3, 1)}


def kallen(x: Any, y: Any, z: Any) -> Any:
    r"""Källén function :math:`\lambda(x,y,z) = x^2+y^2+z^2-2xy-2yz-2zx` (numpy or TF).

    Parameters
    ----------
    x, y, z : float, ndarray or tf.Tensor
        Its arguments (squared masses).

    Returns
    -------
    float, ndarray or tf.Tensor
        Of the arguments' kind.

    Examples
    --------
    >>> from zcache.amplitude import kallen
    >>> kallen(9.0, 1.0, 1.0)          # (9 - 1 - 1)^2 - 4 * 1 * 1
    45.0
    """
    return x * x + y * y + z * z - 2.0 * (x * y + y * z + z * x)


class DalitzKinematics:
    r"""Kinematics of :math:`P \to 1\,2\,3`: ranges, invariants, momenta, helicity angles.

    Parameters
    ----------
    m_parent : float
        :math:`M`.
    m1, m2, m3 : float
        Final-state masses (all in the same unit, e.g. GeV).
    names : sequence of str
        Labels of the three final-state particles (for plots and reports).

    Raises
    ------
    ModelError
        Masses not finite and non-negative, :math:`M \le m_1+m_2+m_3`, or not three names.
    """

    def __init__(self, m_parent: float, m1: float, m2: float, m3: float, names: Sequence[str] = ("1", "2", "3")):
        masses = np.array([m_parent, m1, m2, m3], dtype=float)
        if not (np.isfinite(masses).all() and (masses[1:] >= 0).all() and masses[0] > 0):
            raise ModelError(f"DalitzKinematics needs finite masses >= 0, got {masses.tolist()}.")
        if masses[0] <= masses[1:].sum():
            raise ModelError(
                f"DalitzKinematics: the parent mass {masses[0]} must exceed the sum of the final-state "
                f"masses {masses[1:].sum()}; the decay is closed."
            )
        if len(names) != 3:
            raise ModelError(f"DalitzKinematics needs three particle names, got {names!r}.")
        self.m_parent = float(m_parent)
        self.masses = (float(masses[0]), float(m1), float(m2), float(m3))  # index 0 is the parent
        self.names = tuple(names)
        self.mass_sum_sq = float(np.sum(masses**2))
        self.space = DalitzSpace(self)
        self._sampler: Function | None = None

    def __repr__(self) -> str:
        m = self.masses
        return f"DalitzKinematics(M={m[0]:g} -> {self.names[0]}({m[1]:g}) {self.names[1]}({m[2]:g}) {self.names[2]}({m[3]:g}))"

    # -- ranges ---------------------------------------------------------------------------
    @staticmethod
    def _channel(channel: str) -> tuple[int, int, int]:
        try:
            return _CHANNELS[channel]
        except KeyError:
            raise ModelError(f"Unknown channel {channel!r}: use one of {sorted(_CHANNELS)}.") from None

    def s_range(self, channel: str) -> tuple[float, float]:
        r"""Kinematic range of :math:`s_{ab}`: :math:`[(m_a+m_b)^2, (M-m_c)^2]`.

        Parameters
        ----------
        channel : str
            '12', '13' or '23'.

        Returns
        -------
        (float, float)
            The lower and upper end.

        Raises
        ------
        ModelError
            An unknown channel.
        """
        a, b, c = self._channel(channel)
        m = self.masses
        return ((m[a] + m[b]) ** 2, (m[0] - m[c]) ** 2)

    def area(self) -> float:
        r"""Area of the Dalitz plot in :math:`(s_{12}, s_{13})`.

        :math:`\int ds\,\sqrt{\lambda(s,m_1^2,m_2^2)\lambda(M^2,s,m_3^2)}/s` (scipy ``quad``).

        Returns
        -------
        float
            In the unit of the masses to the fourth power.
        """
        lo, hi = self.s_range("12")
        m = self.masses

        def width(s: float) -> float:
            return math.sqrt(max(kallen(s, m[1] ** 2, m[2] ** 2), 0.0) * max(kallen(m[0] ** 2, s, m[3] ** 2), 0.0)) / s

        value, _ = integrate.quad(width, lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)
        return float(value)

    # -- invariants of events (TF; x has columns s12, s13) ----------------------------------
    def invariants(self, x: Any) -> dict[str, tf.Tensor]:
        """The three squared pair masses of events.

        Parameters
        ----------
        x : array_like
            Events (s12, s13), shape (N, 2).

        Returns
        -------
        dict of str to tf.Tensor
            ``{'12': s12, '13': s13, '23': s23}``, float64 of shape (N,) each.
        """
        x = tf.convert_to_tensor(x, tf.float64)
        s12, s13 = x[:, 0], x[:, 1]
        return {"12": s12, "13": s13, "23": self.mass_sum_sq - s12 - s13}

    def momenta(self, s: Any, channel: str) -> tuple[tf.Tensor, tf.Tensor]:
        """Breakup momentum ``q`` of a (and b) and spectator momentum ``p``, both in the (ab) rest frame.

        Parameters
        ----------
        s : float or tf.Tensor
            :math:`s_{ab}`.
        channel : str
            '12', '13' or '23'.

        Returns
        -------
        q : tf.Tensor
            float64, like ``s``; 0 outside the kinematic range.
        p : tf.Tensor
            float64, like ``s``; 0 outside the kinematic range.
        """
        a, b, c = self._channel(channel)
        m = self.masses
        s = tf.convert_to_tensor(s, tf.float64)
        q = tf.sqrt(tf.maximum(kallen(s, m[a] ** 2, m[b] ** 2), 0.0) / (4.0 * s))
        p = tf.sqrt(tf.maximum(kallen(m[0] ** 2, s, m[c] ** 2), 0.0) / (4.0 * s))
        return q, p

    def cos_theta(self, x: Any, channel: str) -> tf.Tensor:
        r"""Helicity angle's cosine for a resonance in ``channel`` ('12', '13' or '23').

        The angle between particle a and the spectator c in the (ab) rest frame, with
        (a, b, c) = (1, 2, 3), (1, 3, 2), (2, 3, 1) for '12', '13', '23'. Outside the
        Dalitz boundary :math:`|\cos\theta| > 1`.

        Parameters
        ----------
        x : array_like
            Events (s12, s13), shape (N, 2).
        channel : str
            '12', '13' or '23'.

        Returns
        -------
        tf.Tensor
            float64, shape (N,).
        """
        a, b, c = self._channel(channel)
        inv = self.invariants(x)
        m2 = [v * v for v in self.masses]
        s = inv[channel]
        s_ac = inv["".join(sorted(f"{a}{c}"))]
        num = (s + m2[a] - m2[b]) * (m2[0] - s - m2[c]) - 2.0 * s * (s_ac - m2[a] - m2[c])
        den = tf.sqrt(tf.maximum(kallen(s, m2[a], m2[b]) * kallen(m2[0], s, m2[c]), 1e-300))
        return num / den

    def inside(self, x: Any) -> tf.Tensor:
        """Per event, whether it lies inside the Dalitz boundary.

        Parameters
        ----------
        x : array_like
            Events (s12, s13), shape (N, 2).

        Returns
        -------
        tf.Tensor
            bool, shape (N,).
        """
        x = tf.convert_to_tensor(x, tf.float64)
        lo, hi = self.s_range("12")
        s12 = x[:, 0]
        in_s = tf.logical_and(s12 >= lo, s12 <= hi)
        cos = self.cos_theta(x, "12")
        return tf.logical_and(in_s, tf.abs(cos) <= 1.0)

    # -- phase-space sampling -------------------------------------------------------------
    def sample_tensor(self, n: Any) -> tf.Tensor:
        """``n`` events uniform in the Dalitz plot: for use inside traced samplers.

        Accept-reject in the bounding rectangle (:func:`zcache.models.accept_reject`;
        efficiency = area / rectangle, about 1/2), in batches of ``max(3 n, 1024)`` proposals.

        Parameters
        ----------
        n : int or int64 tensor
            The number of events.

        Returns
        -------
        tf.Tensor
            float64, shape (n, 2): columns s12, s13.
        """
        (lo12, hi12), (lo13, hi13) = self.s_range("12"), self.s_range("13")
        return accept_reject(n, (lo12, lo13), (hi12, hi13), inside=self.inside,
                             batch=lambda n, accepted, proposed: tf.maximum(3 * n, 1024))

    def sample(self, n: int, data: Data | None = None, name: str = "phasespace") -> Data:
        """``n`` phase-space events as a :class:`zcache.Data` with obs ('s12', 's13').

        Traced once (identifier 'sample'); seeded by :func:`zcache.models.set_seed`.

        Parameters
        ----------
        n : int
            The number of events.
        data : zcache.Data, optional
            Refilled in place (``set_data``) if given, so functions traced on it do not retrace.
        name : str
            The name of a new Data.

        Returns
        -------
        zcache.Data
            The events (``data`` itself if given).

        Raises
        ------
        ModelError
            ``n`` is not a whole number >= 1, or ``data`` has other observables.
        """
        if not float(n).is_integer() or n < 1:
            raise ModelError(f"sample(n) needs a whole number of events n >= 1, got {n!r}.")
        if data is not None and data.obs is not None and data.obs != self.space.obs:
            raise ModelError(f"sample(data=...): the data's obs {data.obs} differ from {self.space.obs}.")
        if self._sampler is None:
            self._sampler = function(self.sample_tensor, wraps="sample")
        values = self._sampler(tf.constant(int(n), tf.int64))
        if data is None:
            return Data(values, name=name, obs=self.space.obs)
        data.set_data(values)
        return data


class DalitzSpace(Space):
    """The Dalitz plot as a :class:`zcache.models.Space` with obs ('s12', 's13').

    Its rectangle is the bounding box; :meth:`inside` also checks the kinematic
    boundary, so a loss refuses events outside the plot (``DataRangeError``).

    Parameters
    ----------
    kinematics : DalitzKinematics
        The decay.
    """

    def __init__(self, kinematics: DalitzKinematics):
        (lo12, hi12), (lo13, hi13) = kinematics.s_range("12"), kinematics.s_range("13")
        super().__init__(("s12", "s13"), (lo12, lo13), (hi12, hi13))
        self.kinematics = kinematics

    @property
    def volume(self) -> float:
        """The Dalitz plot's area (not the bounding box's)."""
        return self.kinematics.area()

    def inside(self, x: Any) -> tf.Tensor:
        """Per event, whether it lies inside the Dalitz boundary.

        Parameters
        ----------
        x : array_like
            Events (s12, s13), shape (N, 2).

        Returns
        -------
        tf.Tensor
            bool, shape (N,).
        """
        return self.kinematics.inside(x)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DalitzSpace) and other.kinematics.masses == self.kinematics.masses

    def __hash__(self) -> int:
        return hash(("dalitz", self.kinematics.masses))


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
