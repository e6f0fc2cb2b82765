r"""ampform's helicity kinematics: four-momenta to the kinematic columns of a ``HelicityModel``.

``pip install zcache[sympy]`` (with ampform). An ampform ``HelicityModel`` reads *kinematic
columns* (``model.kinematic_variables``: invariant masses and helicity angles), which ampform
defines as SymPy expressions of the final-state four-momenta ``p0, p1, ...`` (arrays of shape
(n, 4), :math:`(E, p_x, p_y, p_z)`, in the rest frame of the decaying particle).
:class:`zcache.amplitude.HelicityKinematics` lambdifies those expressions once per model (with numpy, shared
boosts and rotations computed once, matrix chains contracted pairwise) and turns four-momenta
into the real float64 columns, checking them first (every final-state momentum, shape (n, 4),
finite). :func:`phasespace_generator` draws fresh uniform three-body phase space and computes its
columns the same way.

The bridge (:func:`zcache.amplitude.from_helicity_model`) uses one such object per bridged
model, so that data, the phase-space sample and generated events go through one path.

Examples
--------
>>> import ampform, numpy as np, qrules
>>> from zcache.amplitude import HelicityKinematics
>>> reaction = qrules.generate_transitions(
...     initial_state="D0", final_state=["K-", "pi+", "pi0"], formalism="helicity",
...     allowed_intermediate_particles=["K*(892)0"], allowed_interaction_types=["strong", "weak"])
>>> kinematics = HelicityKinematics(ampform.get_builder(reaction).formulate())
>>> kinematics.momenta, kinematics.names[:4]
(('p0', 'p1', 'p2'), ('m_0', 'm_01', 'm_012', 'm_1'))
>>> momenta = kinematics.sample_momenta(3)          # fresh phase space (zcache.models.rng)
>>> columns = kinematics.columns(momenta)
>>> p = momenta["p0"] + momenta["p1"]
>>> bool(np.allclose(columns["m_01"], np.sqrt(p[:, 0] ** 2 - np.sum(p[:, 1:] ** 2, axis=1))))
True
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from numbers import Integral
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.tf_internals import leave_to_python
from ..exceptions import SymbolicError
from ..models import rng
from ._phasespace import DalitzKinematics

__all__ = ["HelicityKinematics"]

# ampform's names of the final-state four-momenta
_MOMENTUM = re.compile(r"p\d+")
# a phase-space sample of four-momenta matches the reaction when its parent mass agrees to this
# (relative; PDG editions differ by less) and its final-state m^2 to this times M^2 (m^2 = E^2 - p^2
# cancels digits for light particles; float32 momenta stay inside)
_MASS_TOLERANCE = 1e-4


def _sympy() -> Any:
    try:
        import sympy
    except ImportError as err:  # pragma: no cover - [sympy] is part of [dev]
        raise SymbolicError("zcache.amplitude's SymPy bridge needs SymPy: pip install zcache[sympy].") from err
    return sympy


class HelicityKinematics:
    r"""The kinematic columns of an ampform ``HelicityModel``, computed from four-momenta.

    ``model.kinematic_variables`` are lambdified once, when first needed (a second of SymPy for a
    three-body model).

    Parameters
    ----------
    model : ampform.helicity.HelicityModel
        The model; its ``reaction_info`` names the final state.

    Attributes
    ----------
    names : tuple of str
        The columns, the keys of ``model.kinematic_variables`` sorted by name.
    momenta : tuple of str
        ampform's names of the final-state four-momenta (``'p0', 'p1', ...``), in final-state order.
    parent_mass : float or None
        The decaying particle's mass (None when the reaction has more than one initial particle).
    final_masses : tuple of float
        The final-state masses, in final-state order.
    is_three_body : bool
        Whether the reaction is a decay of one particle into three (final-state ids 0, 1, 2): only
        then is fresh phase space drawn (:meth:`sample_momenta`, :meth:`generator`).

    Raises
    ------
    SymbolicError
        The kinematic variables read a symbol that is not a final-state four-momentum.
    """

    def __init__(self, model: Any) -> None:
        info = model.reaction_info
        initial, final = dict(info.initial_state), dict(info.final_state)
        ids = sorted(final)
        self.momenta = tuple(f"p{i}" for i in ids)
        # by name: ampform's order changes with PYTHONHASHSEED (the bridge's columns follow these names)
        variables = sorted(model.kinematic_variables.items(), key=lambda item: item[0].name)
        self.names = tuple(s.name for s, _ in variables)
        self.parent_mass = float(next(iter(initial.values())).mass) if len(initial) == 1 else None
        self.final_masses = tuple(float(final[i].mass) for i in ids)
        self.is_three_body = len(initial) == 1 and ids == [0, 1, 2]
        self._expressions = [e for _, e in variables]

    @cached_property
    def _lambdified(self) -> tuple[Any, list[int]]:
        sp = _sympy()
        expressions = [e.doit() for e in self._expressions]
        read = sorted({a for e in expressions for a in e.free_symbols}, key=lambda a: a.name)
        stray = [a.name for a in read if a.name not in self.momenta]
        if stray:
            raise SymbolicError(f"the kinematic variables read {stray}, which are not the final-state "
                                f"four-momenta {list(self.momenta)}.")
        # shared boosts and rotations once (cse), and matrix chains contracted pairwise: plain lambdify's
        # einsum over four operands loops over every index at once
        function = sp.lambdify(read, expressions, [{"einsum": _pairwise_einsum}, "numpy"], cse=True)
        return function, [self.momenta.index(a.name) for a in read]

    def is_momenta(self, sample: Any) -> bool:
        """Whether ``sample`` holds four-momenta rather than kinematic columns.

        Four-momenta: a mapping with ``p0``-like keys and none of ``names``, a sequence of
        two-dimensional arrays, or one (n_particles, n, 4) array.

        Parameters
        ----------
        sample : object
            A phase-space or data sample as given to the bridge.

        Returns
        -------
        bool
        """
        if isinstance(sample, Mapping):
            keys = [str(k) for k in sample]
            return not set(keys) & set(self.names) and any(_MOMENTUM.fullmatch(k) for k in keys)
        if isinstance(sample, np.ndarray):
            return sample.ndim == 3
        return isinstance(sample, Sequence) and not isinstance(sample, str) and len(sample) > 0 \
            and all(np.ndim(p) == 2 for p in sample)

    def four_momenta(self, momenta: Any, what: str = "four-momenta") -> list[np.ndarray]:
        """Checked four-momenta: float64 arrays of shape (n, 4), one per final-state particle, in final-state order.

        Parameters
        ----------
        momenta : mapping of str to array_like, or sequence of array_like
            ``{"p0": (n, 4), "p1": ..., ...}`` (ampform's names) or the arrays in final-state order.
        what : str
            The sample's name in error messages.

        Returns
        -------
        list of numpy.ndarray

        Raises
        ------
        SymbolicError
            A missing or extra momentum, a shape other than (n, 4), unequal n, no events, or a
            value that is NaN or infinite.
        """
        where = f"{what} (ampform's {', '.join(self.momenta)}: (n, 4) arrays (E, px, py, pz) in the parent's rest frame)"
        if isinstance(momenta, Mapping):
            keys = {str(k): v for k, v in momenta.items()}
            missing = [m for m in self.momenta if m not in keys]
            if missing:
                raise SymbolicError(f"{where} have no '{missing[0]}': give one four-momentum per final-state particle.")
            extra = sorted(set(keys) - set(self.momenta))
            if extra:
                raise SymbolicError(f"{where} have '{extra[0]}', which is no final-state particle of the reaction.")
            arrays = [keys[m] for m in self.momenta]
        else:
            arrays = list(momenta)
            if len(arrays) != len(self.momenta):
                raise SymbolicError(f"{where}: got {len(arrays)} arrays for {len(self.momenta)} final-state particles.")
        out = []
        for name, array in zip(self.momenta, arrays, strict=True):
            try:
                value = np.asarray(array, dtype=np.float64)
            except (TypeError, ValueError) as err:
                raise SymbolicError(f"{where}: '{name}' is not an array of real numbers ({err}).") from err
            if value.ndim != 2 or value.shape[1] != 4:
                raise SymbolicError(f"{where}: '{name}' has shape {value.shape}; give (n, 4) arrays, "
                                    "the energy first (four-momenta, not three-momenta).")
            if value.shape[0] == 0:
                raise SymbolicError(f"{where}: '{name}' holds no events.")
            if out and value.shape[0] != out[0].shape[0]:
                raise SymbolicError(f"{where}: '{name}' has {value.shape[0]} events, '{self.momenta[0]}' "
                                    f"{out[0].shape[0]}; give the same events for every particle.")
            bad = ~np.isfinite(value).all(axis=1)
            if bad.any():
                raise SymbolicError(f"{where}: '{name}' is NaN or infinite in {int(bad.sum())} events (the first "
                                    f"is row {int(np.argmax(bad))}); remove those events first.")
            out.append(value)
        return out

    def columns(self, momenta: Any, what: str = "four-momenta") -> dict[str, np.ndarray]:
        """The kinematic columns of the events: ampform's ``kinematic_variables`` of the four-momenta.

        Parameters
        ----------
        momenta : mapping of str to array_like, or sequence of array_like
            As :meth:`four_momenta` takes them.
        what : str
            The sample's name in error messages.

        Returns
        -------
        dict of str to numpy.ndarray
            Column name -> float64 array of shape (n,) (the real part, as tensorwaves' users take it).

        Raises
        ------
        SymbolicError
            As :meth:`four_momenta`, or a column that is NaN (unphysical four-momenta).
        """
        values = self._array(*self.four_momenta(momenta, what))
        bad = ~np.isfinite(values).all(axis=0)
        if bad.any():
            k = int(np.argmax(~np.isfinite(values).all(axis=1)))
            raise SymbolicError(f"{what}: the kinematic column '{self.names[k]}' is NaN or infinite in "
                                f"{int(bad.sum())} events (the first is row {int(np.argmax(bad))}): are they "
                                "physical four-momenta (E, px, py, pz) in the parent's rest frame?")
        return {name: values[k] for k, name in enumerate(self.names)}

    def _array(self, *four: np.ndarray) -> np.ndarray:
        """(n_columns, n) float64 from the checked four-momenta (also the generator's numpy function)."""
        function, order = self._lambdified
        n = four[0].shape[0]
        with np.errstate(invalid="ignore", divide="ignore"):  # the unused branch of ampform's ComplexSqrt
            values = function(*(four[i] for i in order))
        return np.stack([np.real(np.broadcast_to(np.asarray(v), (n,))).astype(np.float64) for v in values])

    def matches_reaction(self, momenta: Sequence[np.ndarray]) -> str | None:
        """Why checked four-momenta are not the reaction's phase space (masses, rest frame), or None when they are.

        Parameters
        ----------
        momenta : sequence of numpy.ndarray
            From :meth:`four_momenta`.

        Returns
        -------
        str or None
            A sentence naming the first mismatch.
        """
        total = np.sum(momenta, axis=0)
        big_m = self.parent_mass
        if big_m is None:
            return "the reaction has more than one initial particle"
        mass = np.sqrt(np.maximum(total[:, 0] ** 2 - np.sum(total[:, 1:] ** 2, axis=1), 0.0))
        worst = float(np.max(np.abs(mass - big_m)))
        if worst > _MASS_TOLERANCE * big_m:
            return f"their total mass differs from the parent's {big_m:.6g} by up to {worst:.3g}"
        moving = float(np.max(np.linalg.norm(total[:, 1:], axis=1)))
        if moving > _MASS_TOLERANCE * big_m:
            return f"their total momentum is up to {moving:.3g}, not 0 (the parent's rest frame)"
        for name, p, m in zip(self.momenta, momenta, self.final_masses, strict=True):
            worst = float(np.max(np.abs(p[:, 0] ** 2 - np.sum(p[:, 1:] ** 2, axis=1) - m * m)))
            if worst > _MASS_TOLERANCE * big_m**2:
                return f"the mass of '{name}' differs from the reaction's {m:.6g} (m^2 by up to {worst:.3g})"
        return None

    def sample_momenta(self, n: int) -> dict[str, np.ndarray]:
        """``n`` events of fresh uniform three-body phase space: four-momenta in the parent's rest frame.

        Parameters
        ----------
        n : int
            Number of events.

        Returns
        -------
        dict of str to numpy.ndarray
            ``{"p0", "p1", "p2"}``, float64 arrays of shape (n, 4).

        Raises
        ------
        SymbolicError
            The reaction is not a decay into three particles.
        """
        p = self._momenta_tensor(tf.constant(_count(n), tf.int64))
        return {name: v.numpy() for name, v in zip(self.momenta, p, strict=True)}

    def _momenta_tensor(self, n: tf.Tensor) -> list[tf.Tensor]:
        if not self.is_three_body:
            raise SymbolicError(
                f"phasespace_generator: only decays of one particle into three (final-state ids 0, 1, 2) are "
                f"generated; this reaction has final-state momenta {list(self.momenta)}. "
                "Give generator= your own function of n."
            )
        kinematics = self._dalitz
        return _three_body_momenta(kinematics, kinematics.sample_tensor(n))

    @cached_property
    def _dalitz(self) -> DalitzKinematics:
        return DalitzKinematics(self.parent_mass, *self.final_masses)

    def generator(self) -> Any:
        """``generator(n)``: the columns of ``n`` fresh phase-space events (see :func:`phasespace_generator`).

        Returns
        -------
        callable

        Raises
        ------
        SymbolicError
            The reaction is not a decay into three particles.
        """
        if not self.is_three_body:
            self._momenta_tensor(tf.constant(0, tf.int64))  # its named error
        self._lambdified  # noqa: B018 - lambdify now, not inside the first traced sample

        def generate(n: Any) -> dict[str, tf.Tensor]:
            p = self._momenta_tensor(tf.cast(n, tf.int64))
            values = tf.numpy_function(self._array, p, tf.float64, stateful=False)
            values = tf.reshape(values, [len(self.names), -1])
            return {name: values[k] for k, name in enumerate(self.names)}

        return generate


def _count(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise SymbolicError(f"the number of phase-space events must be a whole number >= 1, got {n!r}.")
    return int(n)


def _pairwise_einsum(*operands: Any) -> np.ndarray:
    return np.einsum(*operands, optimize="greedy")


def _three_body_momenta(kinematics: DalitzKinematics, x: tf.Tensor) -> list[tf.Tensor]:
    """Four-momenta (n, 4) (E, px, py, pz) of the three final-state particles, parent at rest, random orientation."""
    big_m, m1, m2, m3 = kinematics.masses
    s12, s13 = x[:, 0], x[:, 1]
    s23 = kinematics.mass_sum_sq - s12 - s13
    e1 = (big_m**2 + m1**2 - s23) / (2 * big_m)
    e2 = (big_m**2 + m2**2 - s13) / (2 * big_m)
    e3 = (big_m**2 + m3**2 - s12) / (2 * big_m)
    q1 = tf.sqrt(tf.maximum(e1 * e1 - m1**2, 0.0))
    q2 = tf.sqrt(tf.maximum(e2 * e2 - m2**2, 0.0))
    # s12 = m1^2 + m2^2 + 2 (E1 E2 - q1 q2 cos): the angle between particles 1 and 2
    cos12 = tf.clip_by_value((2 * e1 * e2 + m1**2 + m2**2 - s12) / tf.maximum(2 * q1 * q2, 1e-300), -1.0, 1.0)
    sin12 = tf.sqrt(1.0 - cos12 * cos12)
    zero = tf.zeros_like(q1)
    v1 = tf.stack([zero, zero, q1], axis=1)
    v2 = tf.stack([q2 * sin12, zero, q2 * cos12], axis=1)
    # a uniform orientation: R = Rz(alpha) Ry(beta) Rz(gamma)
    n = tf.shape(q1)
    gen = rng()
    alpha = gen.uniform(n, 0.0, 2 * math.pi, dtype=tf.float64)
    cos_b = gen.uniform(n, -1.0, 1.0, dtype=tf.float64)
    gamma = gen.uniform(n, 0.0, 2 * math.pi, dtype=tf.float64)
    sin_b = tf.sqrt(1.0 - cos_b * cos_b)
    ca, sa, cg, sg = tf.cos(alpha), tf.sin(alpha), tf.cos(gamma), tf.sin(gamma)
    rot = tf.stack([
        tf.stack([ca * cos_b * cg - sa * sg, -ca * cos_b * sg - sa * cg, ca * sin_b], axis=1),
        tf.stack([sa * cos_b * cg + ca * sg, -sa * cos_b * sg + ca * cg, sa * sin_b], axis=1),
        tf.stack([-sin_b * cg, sin_b * sg, cos_b], axis=1),
    ], axis=1)  # (n, 3, 3)
    r1, r2 = tf.linalg.matvec(rot, v1), tf.linalg.matvec(rot, v2)
    r3 = -(r1 + r2)
    return [tf.concat([e[:, None], r], axis=1) for e, r in ((e1, r1), (e2, r2), (e3, r3))]


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
