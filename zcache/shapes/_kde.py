"""The Gaussian kernel density estimate :class:`~zcache.shapes.KDE1D`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.data import Data
from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError, ParameterValueError
from ..models import Model, Space, one_dimensional, rng, truncated_normal
from ._common import erf_difference, limit_tensors, np_erf_difference

_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
# KDE1D evaluates events in blocks of at most this many (event, kernel) pairs, so that memory
# stays ~ 3 x 8 bytes x 2^22 = 100 MB whatever the numbers of events and kernels.
_KDE_BLOCK_PAIRS = 1 << 22



# -- kernel density -------------------------------------------------------------------------------
def _kde_points(space: Space, data: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The data as a 1-D float array, and the weights of a weighted zcache.Data (else None)."""
    if isinstance(data, Data):
        points = space.select(data).numpy()[: data.nevents]  # padded data: the events only
        weights = data.weights_data.numpy() if data.is_weighted else None
    else:
        try:
            points = np.asarray(data, dtype=float)
        except (TypeError, ValueError) as err:
            raise ModelError(f"KDE1D needs a numpy array or a zcache.Data of events, got {data!r}.") from err
        weights = None
    if points.ndim == 2 and points.shape[1] == 1:
        points = points[:, 0]
    if points.ndim != 1:
        raise ModelError(f"KDE1D needs one-dimensional data (shape (N,) or (N, 1)), got shape {points.shape}.")
    if points.size == 0:
        raise ModelError("KDE1D got no data points; give at least one event (two for the 'scott'/'silverman' rules).")
    if not np.all(np.isfinite(points)):
        raise ModelError(f"KDE1D: {int(np.sum(~np.isfinite(points)))} data point(s) are NaN or infinite; remove them.")
    return np.array(points, dtype=np.float64), weights


def _kde_weights(weights: Any, n: int) -> np.ndarray:
    """Weights normalized to sum 1 (uniform when None)."""
    if weights is None:
        return np.full(n, 1.0 / n)
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError) as err:
        raise ModelError(f"KDE1D: weights must be numbers, got {weights!r}.") from err
    if w.shape != (n,):
        raise ModelError(f"KDE1D: give one weight per data point ({n}), got shape {w.shape}.")
    if not np.all(np.isfinite(w)):
        raise ModelError("KDE1D: some weights are NaN or infinite; give finite weights.")
    if np.any(w < 0.0):
        raise ModelError(
            "KDE1D: some weights are negative (sWeights?); a kernel density needs non-negative weights. "
            "Drop or clip the negative ones."
        )
    total = w.sum()
    if not total > 0.0:
        raise ModelError("KDE1D: the weights sum to 0; give at least one positive weight.")
    return w / total


def _kde_bandwidth(rule: Any, points: np.ndarray, w: np.ndarray) -> float:
    """The kernel's standard deviation: scipy.stats.gaussian_kde's rule x weighted std, or a number."""
    if isinstance(rule, str):
        neff = 1.0 / np.sum(w * w)
        if rule == "scott":
            factor = neff ** (-1.0 / 5.0)
        elif rule == "silverman":
            factor = (0.75 * neff) ** (-1.0 / 5.0)
        else:
            raise ModelError(f"KDE1D: unknown bandwidth rule {rule!r}; use 'scott', 'silverman' or a positive number.")
        # numpy.cov(points, aweights=w) with ddof=1, as gaussian_kde computes it
        mean = np.sum(w * points)
        denominator = 1.0 - np.sum(w * w)
        var = np.sum(w * (points - mean) ** 2) / denominator if denominator > 0.0 else 0.0
        if not var > 0.0:
            raise ParameterValueError(
                f"KDE1D: the data have no spread (one distinct point with positive weight), so the "
                f"{rule!r} bandwidth is 0; give bandwidth=<a positive number> (the kernel's standard deviation)."
            )
        return float(math.sqrt(var) * factor)
    if isinstance(rule, bool):
        raise ModelError(f"KDE1D: bandwidth must be 'scott', 'silverman' or a positive number, got {rule!r}.")
    try:
        value = float(rule)
    except (TypeError, ValueError) as err:
        raise ModelError(f"KDE1D: bandwidth must be 'scott', 'silverman' or a positive number, got {rule!r}.") from err
    if not (math.isfinite(value) and value > 0.0):
        raise ParameterValueError(
            f"KDE1D: the bandwidth is {value}; it must be a positive finite number (the kernel's standard "
            "deviation, in units of the observable)."
        )
    return value


class KDE1D(Model):
    r"""Gaussian kernel density estimate of fixed data, truncated to the space and renormalized.

    :math:`f(x) = \sum_k w_k\, \phi((x - x_k)/h)/h` over the data points :math:`x_k` (weights
    :math:`w_k` normalized to 1, uniform by default), divided by its integral over the space.
    Every data point contributes, also one outside the space (its kernel's tail), which is the
    KDE of all the data restricted to the space: ``scipy.stats.gaussian_kde(points, weights=w)``
    over the space, divided by its integral there.

    The bandwidth :math:`h` (the kernel's standard deviation) is ``"scott"`` or ``"silverman"``
    as ``scipy.stats.gaussian_kde`` computes them: a factor :math:`n_\mathrm{eff}^{-1/5}` (Scott)
    or :math:`(3 n_\mathrm{eff}/4)^{-1/5}` (Silverman), :math:`n_\mathrm{eff} = 1/\sum w_k^2`,
    times the weighted standard deviation of the data (``numpy.cov`` with ``aweights``); or a
    positive number, taken as :math:`h` itself in units of the observable (not a factor, unlike
    a number passed to scipy's ``bw_method``).

    The model has no parameters: the data and the bandwidth are fixed when it is built (a later
    ``set_data`` of a :class:`zcache.Data` passed in does not change it), so its normalization
    is computed once. The integral is analytic (a sum of erf differences over the kernels) and
    sampling is exact: a kernel is chosen with probability proportional to :math:`w_k` times its
    mass inside the space, and the event drawn from that kernel truncated to the space by its
    inverse CDF (no loop, no rejection).

    Evaluation costs :math:`O(N_\mathrm{events} \times N_\mathrm{kernels})`: events are evaluated
    in blocks of at most :math:`2^{22}` (event, kernel) pairs (``tf.map_fn``), so memory stays
    around 100 MB for any sizes, but time grows with the product: a few nanoseconds per pair on
    a CPU (about 1 s for :math:`2\cdot 10^4` events times :math:`2\cdot 10^4` kernels, 20 s for
    :math:`10^5 \times 10^5`). A fit computes the pdf of its dataset once and reads it from the
    cache afterwards, as the KDE has no parameters. ``_integral`` builds an (n_limits, n_kernels)
    matrix, which is small for the edges of a binned fit.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    data : numpy.ndarray or zcache.Data
        The data points, shape (N,) or (N, 1), at least one, all finite; a :class:`zcache.Data`
        gives its column of the space's observable (and its weights, unless ``weights`` is given).
    bandwidth : {"scott", "silverman"} or float, default "scott"
        The rule, or the kernel's standard deviation (> 0).
    weights : array_like, optional
        One non-negative weight per data point, not all zero.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional; the data are empty, not 1-D, NaN or infinite; the
        weights are the wrong length, negative, NaN or sum to 0; the bandwidth rule is unknown;
        or the kernels put no probability inside the space.
    ParameterValueError
        The bandwidth is not a positive finite number, or a rule gives 0 (the data have no spread).

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.models import Space
    >>> from zcache.shapes import KDE1D
    >>> kde = KDE1D(Space("x", -3.0, 3.0), np.array([-1.0, 0.0, 0.5, 2.0]), bandwidth=0.4)
    >>> kde.bandwidth, round(float(kde.integrate()), 12)
    (0.4, 1.0)
    >>> x = kde.sample(200).numpy()
    >>> bool(x.min() >= -3.0 and x.max() <= 3.0)
    True
    """

    def __init__(self, space: Space, data: Any, *, bandwidth: str | float = "scott", weights: Any = None,
                 name: str | None = None, extended: Any = None) -> None:
        one_dimensional(space, "KDE1D")
        points, data_weights = _kde_points(space, data)
        w = _kde_weights(data_weights if weights is None else weights, points.size)
        h = _kde_bandwidth(bandwidth, points, w)
        lo, hi = space.lower[0], space.upper[0]
        # Each kernel's probability inside the space (for sampling, and to refuse a KDE with none).
        mass = 0.5 * np_erf_difference((lo - points) / (h * _SQRT2), (hi - points) / (h * _SQRT2))
        choose = w * mass
        if not choose.sum() > 0.0:
            raise ModelError(
                f"KDE1D: the kernels (bandwidth {h:g}) put no probability inside {space!r}: the data lie "
                "too far from it. Give data inside the space, or a larger bandwidth."
            )
        super().__init__(space, {}, name=name, extended=extended)
        self._h = h
        self._points = points
        self._weights = w
        self._choose = np.cumsum(choose)
        self._block = max(1, _KDE_BLOCK_PAIRS // points.size)

    @property
    def bandwidth(self) -> float:
        """The kernel's standard deviation :math:`h`, in units of the observable."""
        return self._h

    @property
    def n_kernels(self) -> int:
        """The number of data points (kernels)."""
        return int(self._points.size)

    def _kernel_sum(self, x: tf.Tensor) -> tf.Tensor:
        points = tf.constant(self._points[None, :])
        weights = tf.constant(self._weights[:, None])
        z = (x[:, None] - points) * (1.0 / self._h)
        return tf.linalg.matmul(tf.exp(-0.5 * z * z), weights)[:, 0]

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.convert_to_tensor(x, tf.float64)
        shape = tf.shape(x)
        flat = tf.reshape(x, [-1])
        n = tf.size(flat)
        # Blocks of `block` events (at most _KDE_BLOCK_PAIRS pairs each), the last one padded.
        block = tf.minimum(tf.constant(self._block), tf.maximum(n, 1))
        count = (n + block - 1) // block
        padded = tf.pad(flat, [[0, count * block - n]])
        blocks = tf.reshape(padded, tf.stack([count, block]))
        values = tf.map_fn(self._kernel_sum, blocks, fn_output_signature=tf.TensorSpec([None], tf.float64))
        out = tf.reshape(values, [-1])[:n]
        return tf.reshape(out, shape) * (1.0 / (self._h * _SQRT_2PI))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = limit_tensors(lower, upper)
        points = tf.constant(self._points)
        scale = 1.0 / (self._h * _SQRT2)
        a = (lower[..., None] - points) * scale
        b = (upper[..., None] - points) * scale
        return 0.5 * tf.reduce_sum(tf.constant(self._weights) * erf_difference(a, b), axis=-1)

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # The kernel by its weight x mass inside the space; then the inverse CDF of that kernel
        # on [lo, hi], from the lower tail (a range above the kernel's centre is mirrored first),
        # where the normal CDF and its inverse are accurate.
        cum = tf.constant(self._choose)
        u = rng().uniform([n], dtype=tf.float64) * cum[-1]
        k = tf.minimum(tf.searchsorted(cum, u, side="right"), self.n_kernels - 1)
        mu = tf.gather(tf.constant(self._points), k)
        return truncated_normal(n, mu, self._h, self.space.lower[0], self.space.upper[0])


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
