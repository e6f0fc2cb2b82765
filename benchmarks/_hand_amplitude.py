r"""Hand-written amplitude-fit losses, the baselines of ``bench_amplitude.py``.

What an amplitude fitter writes by hand when the line shapes are fixed and only the
complex couplings float: the per-event amplitude matrix :math:`A_{ik} = A_k(x_i)` of the
data and the :math:`K\times K` integral matrix :math:`I_{jk} = \langle A_j A_k^*\rangle_{MC}`
are computed once, and every evaluation computes

.. math:: \mathrm{NLL}(c) = -\sum_i \log |(A c)_i|^2 + N \log\big(V\, c^T I\, c^*\big)

(the same value as zcache's ``UnbinnedNLL(AmplitudePdf(...))``: the log of the ratio, split)
and its gradient with respect to the real coupling parameters, the magnitude
:math:`r_k` and phase :math:`\phi_k` of every floating :math:`c_k = r_k e^{i\phi_k}`.
The leading ``len(fixed)`` couplings are fixed (the reference component).

Two baselines:

- :class:`HandTF`: the matrices in ``tf.Variable`` s, a ``tf.function`` computing the NLL
  and its gradient with a ``tf.GradientTape`` (TensorFlow's automatic gradient);
- :class:`HandNumpy`: numpy with the analytic gradient, single-threaded (the two
  :math:`N\times K` products are ``einsum`` loops, not BLAS: in a process where
  TensorFlow's thread pools are alive, a multi-threaded OpenBLAS product competes with
  them for the cores and its time becomes erratic). With :math:`u = A c`,
  :math:`G = A^T (1/u)` and :math:`h = I c^*`,

  .. math:: \frac{\partial\,\mathrm{NLL}}{\partial\theta}
      = \sum_k \mathrm{Re}\Big[\frac{\partial c_k}{\partial\theta}
        \Big(-2 G_k + \frac{2N}{c^T I c^*} h_k\Big)\Big],
      \qquad \frac{\partial c_k}{\partial r_k} = e^{i\phi_k},\;
      \frac{\partial c_k}{\partial\phi_k} = i c_k .

Neither knows anything about zcache: they take numpy arrays.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

__all__ = ["HandTF", "HandNumpy", "couplings_from_x"]


def couplings_from_x(x: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """The complex coupling vector: ``fixed`` first, then ``x = (r_1, phi_1, r_2, phi_2, ...)``."""
    x = np.asarray(x, dtype=float)
    return np.concatenate([np.asarray(fixed, complex), x[0::2] * np.exp(1j * x[1::2])])


class HandTF:
    """NLL and gradient in one ``tf.function``, from precomputed matrices held in Variables.

    Parameters
    ----------
    a_data : numpy.ndarray
        (N, K) complex128: :math:`A_k(x_i)` of the data events.
    integrals : numpy.ndarray
        (K, K) complex128: :math:`I_{jk}`.
    area : float
        :math:`V`, the Dalitz plot's area.
    fixed : sequence of complex
        Values of the leading fixed couplings.
    jit : bool
        Compile the function with XLA (``jit_compile=True``).
    """

    def __init__(self, a_data: np.ndarray, integrals: np.ndarray, area: float, fixed: np.ndarray,
                 jit: bool = False) -> None:
        self.a = tf.Variable(np.asarray(a_data, np.complex128), trainable=False, name="hand_A")
        self.i = tf.Variable(np.asarray(integrals, np.complex128), trainable=False, name="hand_I")
        self.fixed = tf.constant(np.asarray(fixed, np.complex128))
        self.n = float(a_data.shape[0])
        self.log_area = float(np.log(area))
        self.nbytes = int(a_data.nbytes + integrals.nbytes)
        self._fn = tf.function(self._value_gradient, autograph=False, jit_compile=jit)

    def _nll(self, x: tf.Tensor) -> tf.Tensor:
        r, phi = x[0::2], x[1::2]
        c = tf.concat([self.fixed, tf.complex(r * tf.cos(phi), r * tf.sin(phi))], axis=0)
        u = tf.linalg.matvec(self.a, c)
        intensity = tf.math.real(u) ** 2 + tf.math.imag(u) ** 2
        norm = tf.math.real(tf.reduce_sum(c[:, None] * self.i * tf.math.conj(c)[None, :]))
        return -tf.reduce_sum(tf.math.log(intensity)) + self.n * (tf.math.log(norm) + self.log_area)

    def _value_gradient(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            value = self._nll(x)
        return value, tape.gradient(value, x)

    def value_gradient(self, x: np.ndarray | tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """NLL and its gradient at ``x = (r_1, phi_1, ...)`` (one traced call)."""
        return self._fn(tf.constant(x, tf.float64))


class HandNumpy:
    """NLL and its analytic gradient in numpy (see the module docstring).

    Parameters are those of :class:`HandTF`.
    """

    def __init__(self, a_data: np.ndarray, integrals: np.ndarray, area: float, fixed: np.ndarray) -> None:
        self.a = np.ascontiguousarray(a_data, np.complex128)
        self.i = np.asarray(integrals, np.complex128)
        self.fixed = np.asarray(fixed, np.complex128)
        self.n = float(a_data.shape[0])
        self.log_area = float(np.log(area))
        self.nbytes = int(self.a.nbytes + self.i.nbytes)

    def value_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """NLL and its gradient at ``x = (r_1, phi_1, ...)``."""
        x = np.asarray(x, dtype=float)
        c = couplings_from_x(x, self.fixed)
        u = np.einsum("ik,k->i", self.a, c)
        intensity = u.real ** 2 + u.imag ** 2
        h = self.i @ np.conj(c)
        norm = float(np.real(c @ h))
        value = -float(np.sum(np.log(intensity))) + self.n * (np.log(norm) + self.log_area)
        per_coupling = -2.0 * np.einsum("ik,i->k", self.a, 1.0 / u) + (2.0 * self.n / norm) * h  # d NLL / d c_k
        k0 = len(self.fixed)
        free = c[k0:]
        d_mag = np.exp(1j * x[1::2])  # dc / dr
        d_phase = 1j * free  # dc / dphi
        grad = np.empty_like(x)
        grad[0::2] = np.real(d_mag * per_coupling[k0:])
        grad[1::2] = np.real(d_phase * per_coupling[k0:])
        return value, grad
