"""The numerics under :class:`~zcache.models.Model`: Gauss-Legendre normalization and the accept-reject envelope."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

# Composite Gauss-Legendre rule for numerical normalization: 64 panels x 16 nodes is
# exact for polynomials of degree 31 per panel, ~1e-12 relative for smooth peaks >= 1/50 of the range.
_PANELS, _NODES = 64, 16
_GL_T, _GL_W = np.polynomial.legendre.leggauss(_NODES)
# Accept-reject envelope (see Model._fmax): the unnormalized density on a grid, the best
# FMAX_PEAKS local maxima of the grid each refined by FMAX_LEVELS zooms of a FMAX_ZOOM-point
# grid (each zoom shrinks the bracket 16x: a peak between two grid points is found to ~1e-5 of
# the spacing), times a safety factor. A proposal above the envelope during sampling raises it
# and restarts the sample, at most FMAX_RAISES times per sample() before ModelError.
FMAX_GRID = 4096
FMAX_PEAKS = 8
FMAX_ZOOM = 33
FMAX_LEVELS = 4
FMAX_SAFETY = 1.25
FMAX_RAISES = 16


def grid_maximum(func: Callable[[tf.Tensor], tf.Tensor], lower: float, upper: float) -> tf.Tensor:
    """The largest value of ``func`` found on ``[lower, upper]`` (NaN if any value is NaN).

    ``func`` on a grid of ``FMAX_GRID`` points; then around each of the ``FMAX_PEAKS``
    highest local maxima of the grid (an unresolved peak lies within one spacing of one),
    ``FMAX_LEVELS`` times: ``FMAX_ZOOM`` points across the bracket, and the bracket
    re-centred on the best of them, shrunk to one of its spacings. Always a value ``func``
    takes, so never above its true maximum.
    """
    def evaluate(x: tf.Tensor) -> tf.Tensor:  # a constant density may return a scalar
        return tf.broadcast_to(tf.convert_to_tensor(func(x), tf.float64), tf.shape(x))

    grid = np.linspace(lower, upper, FMAX_GRID)
    f = evaluate(tf.constant(grid))
    values = [f]
    ninf = tf.constant([-np.inf], tf.float64)
    safe = tf.where(tf.math.is_nan(f), -np.inf * tf.ones_like(f), f)
    padded = tf.concat([ninf, safe, ninf], 0)
    peak = tf.logical_and(safe >= padded[:-2], safe >= padded[2:])
    _, idx = tf.math.top_k(tf.where(peak, safe, -np.inf * tf.ones_like(safe)), k=min(FMAX_PEAKS, FMAX_GRID))
    center = tf.gather(tf.constant(grid), idx)
    half = grid[1] - grid[0]
    offsets = tf.constant(np.linspace(-1.0, 1.0, FMAX_ZOOM), tf.float64)
    for _ in range(FMAX_LEVELS):
        x = tf.clip_by_value(center[:, None] + half * offsets[None, :], lower, upper)
        fx = tf.reshape(evaluate(tf.reshape(x, [-1])), tf.shape(x))
        values.append(tf.reshape(fx, [-1]))
        fx = tf.where(tf.math.is_nan(fx), -np.inf * tf.ones_like(fx), fx)
        center = tf.gather(x, tf.argmax(fx, axis=1), batch_dims=1)
        half = half * 2.0 / (FMAX_ZOOM - 1)
    every = tf.concat(values, 0)
    return tf.where(tf.reduce_any(tf.math.is_nan(every)), tf.constant(np.nan, tf.float64), tf.reduce_max(every))


def gauss_legendre(func: Callable[[tf.Tensor], tf.Tensor], lower: float, upper: float) -> tf.Tensor:
    width = (upper - lower) / _PANELS
    starts = lower + width * np.arange(_PANELS)
    x = (starts[:, None] + 0.5 * width * (_GL_T[None, :] + 1.0)).ravel()
    w = np.tile(0.5 * width * _GL_W, _PANELS)
    return tf.reduce_sum(tf.constant(w) * func(tf.constant(x)))


def gauss_legendre_bins(func: Callable[[tf.Tensor], tf.Tensor], lower: np.ndarray, upper: np.ndarray,
                         span: float) -> tf.Tensor:
    """Integrals of ``func`` over every bin ``[lower_i, upper_i]`` in one call.

    Every bin is split into the same number of panels of ``_NODES`` Gauss-Legendre nodes, enough
    that no panel is wider than ``span / _PANELS`` (the normalization's panel width), so that a
    bin is integrated at least as accurately as the normalization.
    """
    widths = upper - lower
    panels = max(1, int(np.ceil(_PANELS * float(widths.max()) / span - 1e-9)))
    h = widths / panels
    starts = lower[:, None] + h[:, None] * np.arange(panels)[None, :]  # (nbins, panels)
    x = starts[..., None] + 0.5 * h[:, None, None] * (_GL_T + 1.0)  # (nbins, panels, nodes)
    w = np.broadcast_to(0.5 * h[:, None, None] * _GL_W, x.shape)
    values = tf.broadcast_to(tf.convert_to_tensor(func(tf.constant(x.ravel())), tf.float64), [x.size])
    return tf.reduce_sum(tf.reshape(tf.constant(w.ravel()) * values, [lower.size, -1]), axis=1)

