"""The histogram template :class:`~zcache.shapes.HistogramPdf`."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.tf_internals import leave_to_python
from ..exceptions import ModelError
from ..models import Model, Space, one_dimensional, rng
from ._common import limit_tensors

# Histogram edges must meet the space's limits to this fraction of its width (rounding only).
_EDGE_RTOL = 1e-12


# -- histogram ------------------------------------------------------------------------------------
def _histogram_arrays(counts: Any, edges: Any) -> tuple[np.ndarray, np.ndarray]:
    """``counts, edges`` as float arrays, from numpy.histogram's pair or a 1-D hist / boost-histogram object."""
    if edges is None:
        if not (callable(getattr(counts, "values", None)) and hasattr(counts, "axes")):
            raise ModelError(
                "HistogramPdf needs counts and edges (as numpy.histogram returns them), or a 1-D hist.Hist / "
                f"boost_histogram.Histogram; got {type(counts).__name__} without edges."
            )
        if len(counts.axes) != 1:
            raise ModelError(f"HistogramPdf needs a 1-D histogram, got one with {len(counts.axes)} axes.")
        edges = counts.axes[0].edges
        counts = counts.values()
    elif hasattr(counts, "axes") and callable(getattr(counts, "values", None)):
        raise ModelError("HistogramPdf: a histogram object carries its own edges; do not pass edges too.")
    try:
        c = np.array(counts, dtype=float)
        e = np.array(edges, dtype=float)
    except (TypeError, ValueError) as err:
        raise ModelError(f"HistogramPdf: counts and edges must be numbers, got {counts!r} and {edges!r}.") from err
    if c.ndim != 1 or c.size == 0:
        raise ModelError(f"HistogramPdf needs 1-D counts with at least one bin, got shape {c.shape}.")
    if e.shape != (c.size + 1,):
        raise ModelError(
            f"HistogramPdf: {c.size} bins need {c.size + 1} edges (as numpy.histogram returns), got shape {e.shape}."
        )
    if not np.all(np.isfinite(c)):
        raise ModelError("HistogramPdf: some counts are NaN or infinite; give finite counts.")
    if not np.all(np.isfinite(e)):
        raise ModelError("HistogramPdf: some edges are NaN or infinite; give finite edges.")
    if np.any(c < 0.0):
        raise ModelError(
            f"HistogramPdf: {int(np.sum(c < 0.0))} bin(s) have negative counts; a density needs counts >= 0 "
            "(clip them to 0, or merge bins)."
        )
    if not c.sum() > 0.0:
        raise ModelError("HistogramPdf: all counts are 0; give a histogram with at least one positive count.")
    if not np.all(np.diff(e) > 0.0):
        raise ModelError("HistogramPdf: the edges must be strictly increasing; sort them and remove duplicates.")
    return c, e


class HistogramPdf(Model):
    r"""A piecewise-constant density from a histogram: :math:`c_i / (w_i \sum_j c_j)` in bin :math:`i`.

    From ``counts, edges`` as ``numpy.histogram`` returns them, or from a 1-D ``hist.Hist`` /
    ``boost_histogram.Histogram`` (its ``.values()`` without flow bins, and ``.axes[0].edges``;
    a weighted histogram gives its sums of weights). The edges must cover the space exactly.
    Bins are half-open :math:`[e_i, e_{i+1})` except the last, which includes its upper edge (as
    ``numpy.histogram``); the density is 0 outside the edges. The histogram is copied when the
    model is built, which has no parameters. The integral is analytic (the CDF is piecewise
    linear, sub-ranges too) and sampling exact (a bin by its probability, then uniform inside).

    Parameters
    ----------
    space : Space
        A one-dimensional space; the first and last edges must equal its limits.
    counts : array_like or hist.Hist
        The bin contents (non-negative, finite, not all zero), or a 1-D histogram object (then
        ``edges`` must be None).
    edges : array_like, optional
        The ``len(counts) + 1`` bin edges, strictly increasing.
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional; the counts are negative, all zero, NaN or not 1-D;
        the edges are missing, the wrong number, not strictly increasing, or do not start and
        end at the space's limits; or a histogram object has more than one axis.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.models import Space
    >>> from zcache.shapes import HistogramPdf
    >>> h = HistogramPdf(Space("x", 0.0, 4.0), [1.0, 3.0, 0.0, 4.0], [0.0, 1.0, 2.0, 3.0, 4.0])
    >>> h.pdf(np.array([0.5, 1.0, 2.5, 4.0])).numpy().tolist()
    [0.125, 0.375, 0.0, 0.5]
    >>> float(h.integrate(0.5, 1.5))
    0.25
    """

    def __init__(self, space: Space, counts: Any, edges: Any = None, *, name: str | None = None,
                 extended: Any = None) -> None:
        one_dimensional(space, "HistogramPdf")
        c, e = _histogram_arrays(counts, edges)
        lo, hi = space.lower[0], space.upper[0]
        tolerance = _EDGE_RTOL * (hi - lo)
        if abs(e[0] - lo) > tolerance or abs(e[-1] - hi) > tolerance:
            raise ModelError(
                f"HistogramPdf: the edges span [{e[0]:g}, {e[-1]:g}] but the space is {space!r}; the edges must "
                "cover the space exactly: build the histogram with range=(lower, upper) of the space, or "
                "build the space from the first and last edges."
            )
        e[0], e[-1] = lo, hi  # rounding only (checked above)
        super().__init__(space, {}, name=name, extended=extended)
        self._counts = c
        self._edges = e
        self._widths = np.diff(e)
        self._cumulative = np.concatenate([[0.0], np.cumsum(c)])

    @property
    def counts(self) -> np.ndarray:
        """A copy of the bin contents."""
        return self._counts.copy()

    @property
    def edges(self) -> np.ndarray:
        """A copy of the bin edges."""
        return self._edges.copy()

    def _bin(self, x: tf.Tensor) -> tf.Tensor:
        """The bin of each value of the 1-D ``x`` (0 below the first inner edge, the last bin above)."""
        return tf.searchsorted(tf.constant(self._edges[1:-1]), x, side="right")

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.convert_to_tensor(x, tf.float64)
        flat = tf.reshape(x, [-1])
        density = tf.gather(tf.constant(self._counts / self._widths), self._bin(flat))
        inside = tf.logical_and(flat >= self._edges[0], flat <= self._edges[-1])
        return tf.reshape(tf.where(inside, density, tf.zeros_like(density)), tf.shape(x))

    def _cdf(self, x: tf.Tensor) -> tf.Tensor:
        """The unnormalized CDF (counts below ``x``), piecewise linear, for any shape of ``x``."""
        flat = tf.clip_by_value(tf.reshape(x, [-1]), self._edges[0], self._edges[-1])
        i = self._bin(flat)
        start = tf.gather(tf.constant(self._edges[:-1]), i)
        inside = tf.gather(tf.constant(self._counts), i) * (flat - start) / tf.gather(tf.constant(self._widths), i)
        return tf.reshape(tf.gather(tf.constant(self._cumulative[:-1]), i) + inside, tf.shape(x))

    def _integral(self, lower: Any, upper: Any) -> tf.Tensor:
        lower, upper = limit_tensors(lower, upper)
        return self._cdf(upper) - self._cdf(lower)

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        cum = tf.constant(self._cumulative[1:])
        u = rng().uniform([n], dtype=tf.float64) * cum[-1]
        i = tf.minimum(tf.searchsorted(cum, u, side="right"), self._counts.size - 1)
        start = tf.gather(tf.constant(self._edges[:-1]), i)
        x = start + rng().uniform([n], dtype=tf.float64) * tf.gather(tf.constant(self._widths), i)
        return tf.clip_by_value(x, self._edges[0], self._edges[-1])


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
