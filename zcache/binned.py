r"""Binned fits: histograms, binned likelihoods, a chi-square and template fits.

A histogram is a :class:`BinnedData`: ``nbins + 1`` edges :math:`e_0 < \dots < e_B`, counts
:math:`n_i` and variances :math:`\sigma_i^2` (the counts when none were given). Counts and
variances live in two :class:`zcache.Data` (``BinnedData.counts_data``,
``BinnedData.variances_data``), so :meth:`BinnedData.set_counts` (a toy loop) invalidates
exactly the caches that read them and never retraces a loss. One observable only.

The losses compare the counts with the model's bin probabilities
:math:`P_i(\theta)` = :meth:`zcache.models.Model.integrate_bins` over the histogram's edges
(cached per parameter values; the part of a bin outside the model's space has probability 0).
With :math:`N = \sum_i n_i`:

- :class:`BinnedNLL`, multinomial, :math:`p_i = P_i / \sum_j P_j` (renormalized over the bins,
  as ``iminuit.cost.BinnedNLL`` with a cdf normalized over the histogram), :math:`\mu_i = N p_i`:

  .. math:: L(\theta) = \sum_i n_i \log\frac{n_i}{\mu_i};

- :class:`ExtendedBinnedNLL`, Poisson, :math:`\mu_i = \nu(\theta) P_i` with :math:`\nu` the
  model's yield (expected events in the whole space):

  .. math:: L(\theta) = \sum_i \Big[\mu_i - n_i + n_i \log\frac{n_i}{\mu_i}\Big];

- :class:`BinnedChi2`, with :math:`\mu_i` as for :class:`ExtendedBinnedNLL` for an extended
  model, else as for :class:`BinnedNLL` (the model scaled to the histogram's total), summed over
  the bins with :math:`\sigma_i^2 > 0`:

  .. math:: \chi^2(\theta) = \sum_{i:\,\sigma_i^2 > 0} \frac{(n_i - \mu_i)^2}{\sigma_i^2};

- :class:`Template`, a histogram fitted by a sum of template histograms :math:`t_{ki}` with
  yields :math:`y_k`, the templates' statistical uncertainties treated by one nuisance parameter
  :math:`\beta_i` per bin, profiled analytically (Barlow-Beeston "lite"): :math:`a_{ki} = t_{ki}
  / \sum_j t_{kj}`, :math:`\mu_i = \sum_k y_k a_{ki}`, :math:`s_i^2 = \sum_k y_k^2 \,
  \mathrm{var}(t_{ki}) / (\sum_j t_{kj})^2`; for ``method="jsc"`` (Conway), with
  :math:`b_i = s_i^2/\mu_i^2`, :math:`q_i = (1 - \mu_i b_i)/2`,
  :math:`\beta_i = q_i + \sqrt{q_i^2 + n_i b_i}`,

  .. math:: L = \sum_{i:\,\mu_i > 0} \Big[\mu_i\beta_i - n_i + n_i\log\frac{n_i}{\mu_i\beta_i}
            + \frac{(\beta_i - 1)^2}{2 b_i}\Big],

  and for ``method="da"`` (Dembinski and Abdelmotteleb), with :math:`k_i = \mu_i^2 / s_i^2`,
  :math:`\beta_i = (n_i + k_i)/(\mu_i + k_i)`, the Poisson term above plus the same term for
  :math:`k_i` observed and :math:`k_i\beta_i` expected.

Conventions. The likelihood losses are :math:`-\log L` up to a constant: the saturated model is
subtracted (the terms :math:`n_i \log n_i`, zero for empty bins, so values are finite for empty
bins), so their minimum is half the Baker-Cousins :math:`\chi^2` (a goodness of fit); their
``errordef`` is 1/2 and they are exactly half of ``iminuit.cost``'s ``BinnedNLL``,
``ExtendedBinnedNLL`` and ``Template`` (which return :math:`-2\log L`, ``errordef`` 1): equal
minima and errors, and twice a difference of zcache values is iminuit's difference.
:class:`BinnedChi2` is a :math:`\chi^2`, ``errordef`` 1. The likelihoods read the counts as
Poisson counts (the variances are ignored: no Bohm-Zech scaling of weighted histograms) and
refuse negative counts; every model-based loss refuses counts in bins wholly outside the model's
space (:class:`zcache.exceptions.DataRangeError`). Like every zcache loss they are traced once
('loss' identifier), for any parameter values and counts, and take
:class:`zcache.loss.GaussianConstraint` penalties.

References: S. Baker and R. D. Cousins, NIM 221 (1984) 437; R. Barlow and C. Beeston, Comput.
Phys. Commun. 77 (1993) 219; J. S. Conway, PHYSTAT 2011, arXiv:1103.0354; H. P. Dembinski and
A. Abdelmotteleb, Eur. Phys. J. C 82 (2022) 1043, arXiv:2206.12346.

Examples
--------
A binned Gaussian + Exponential fit of a numpy histogram:

>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian, Exponential, SumPdf
>>> from zcache.binned import BinnedData, ExtendedBinnedNLL
>>> from zcache.minimize import Minuit
>>> rng = np.random.default_rng(7)
>>> x = np.concatenate([rng.normal(5.0, 0.5, 2000), rng.exponential(4.0, 8000)])
>>> hist = BinnedData.from_numpy(x, bins=50, range=(0.0, 10.0), name="mass", obs="x")
>>> hist.nbins, int(hist.counts.sum()) == np.count_nonzero(x <= 10.0).item()
(50, True)
>>> space = Space("x", 0.0, 10.0)
>>> mu = zcache.Parameter("mu_bin", 4.8, lower=4.0, upper=6.0)
>>> sigma = zcache.Parameter("sigma_bin", 0.6, lower=0.1, upper=2.0)
>>> lam = zcache.Parameter("lam_bin", -0.2, lower=-1.0, upper=-0.01)
>>> nsig = zcache.Parameter("nsig_bin", 1500.0, lower=0.0, upper=1e5)
>>> nbkg = zcache.Parameter("nbkg_bin", 7000.0, lower=0.0, upper=1e5)
>>> model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
>>> result = Minuit().minimize(ExtendedBinnedNLL(model, hist))
>>> result.valid, abs(result.values["nsig_bin"] - 2000.0) < 3.0 * result.errors["nsig_bin"]
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ._engine.cached_tensor import CachedTensor
from ._engine.data import Data
from ._engine.parameter import Parameter
from ._engine.tables import REAL_KINDS, dtype_advice, real_numbers
from ._engine.tf_internals import leave_to_python
from ._engine.traced_checks import require
from .exceptions import (
    DataDtypeError,
    DataError,
    DataRangeError,
    DataShapeError,
    EmptyDataError,
    InvalidDataError,
    ModelError,
    WholeSampleTermError,
)
from .loss import BaseLoss, GaussianConstraint, model_parameters
from .models import Model, as_parameter, unique_parameters
from .types import Restorer

__all__ = ["BinnedData", "BinnedNLL", "ExtendedBinnedNLL", "BinnedChi2", "Template"]

_TEMPLATE_METHODS = ("jsc", "da")


def _float_array(values: Any, what: str, where: str) -> np.ndarray:
    """``values`` as a float64 numpy array, or a named error (a DataDtypeError for complex, bool, text...)."""
    try:
        return real_numbers(values, f"{where}: {what}").astype(np.float64)
    except DataDtypeError:
        raise
    except (TypeError, ValueError) as err:  # a ragged nesting
        raise DataError(f"{where}: {what} must be numbers, got {values!r}.") from err


def _float_tensor(values: Any, what: str, where: str) -> tf.Tensor:
    """A tensor of real numbers as float64 (inside a trace), or a DataDtypeError (nothing written)."""
    values = tf.convert_to_tensor(values)
    if np.dtype(values.dtype.as_numpy_dtype).kind not in REAL_KINDS:
        raise DataDtypeError(f"{where}: {what} must be real numbers, got a tensor of dtype {values.dtype.name}: "
                             f"{dtype_advice(values.dtype.as_numpy_dtype)}; nothing changed.")
    return tf.cast(values, tf.float64)


def _checked_edges(edges: Any, where: str) -> np.ndarray:
    """Bin edges as a read-only float64 array: 1-D, at least two, finite, strictly increasing."""
    e = _float_array(edges, "the bin edges", where)
    if e.ndim != 1 or e.size < 2:
        raise DataShapeError(f"{where}: the bin edges must be a 1-D sequence of at least two numbers, got shape {e.shape}.")
    if not np.isfinite(e).all():
        raise InvalidDataError(f"{where}: the bin edges contain NaN or infinite values; give finite edges.")
    if not (np.diff(e) > 0.0).all():
        raise ModelError(f"{where}: the bin edges must be strictly increasing, got {e.tolist()}; sort them and "
                         "remove repeated edges.")
    e.flags.writeable = False
    return e


def _obs_name(obs: Any, where: str) -> str | None:
    """One observable name (a str, or a sequence of one str), or None."""
    if obs is None:
        return None
    if isinstance(obs, str) and obs:
        return obs
    if isinstance(obs, (list, tuple)) and len(obs) == 1 and isinstance(obs[0], str) and obs[0]:
        return obs[0]
    raise DataShapeError(f"{where}: binned data are one-dimensional: obs must be one observable name, got {obs!r}.")


class BinnedData:
    r"""A one-dimensional histogram: bin edges, counts and their variances.

    The counts and the variances are held in two :class:`zcache.Data` (``counts_data``,
    ``variances_data``), so that :meth:`set_counts` invalidates exactly the caches that read
    them and never retraces a loss built on this histogram. Counts need not be integers
    (weighted histograms); they may be negative (a background-subtracted histogram for
    :class:`BinnedChi2`), but the likelihood losses refuse negative counts.

    Parameters
    ----------
    counts : array_like
        One finite number per bin.
    edges : array_like
        The ``nbins + 1`` bin edges, finite and strictly increasing.
    variances : array_like, optional
        The variance of each count (finite, >= 0); default: the counts (Poisson counts).
    name : str, optional
        A label for reports and plots; default ``"binned"``.
    obs : str, optional
        The observable's name (checked against a model's space when a loss is built).

    Raises
    ------
    DataShapeError
        ``edges`` not 1-D with at least two entries, ``counts`` or ``variances`` not 1-D with
        one entry per bin, or ``obs`` not one name.
    InvalidDataError
        NaN or infinite edges, counts or variances.
    ModelError
        Edges not strictly increasing.
    DataError
        Values that are not numbers, negative variances, or negative counts without variances.

    Examples
    --------
    >>> from zcache.binned import BinnedData
    >>> h = BinnedData([3, 0, 5], [0.0, 1.0, 2.0, 4.0], name="h", obs="x")
    >>> h.nbins, h.counts.tolist(), h.widths.tolist(), h.centers.tolist()
    (3, [3.0, 0.0, 5.0], [1.0, 1.0, 2.0], [0.5, 1.5, 3.0])
    >>> _ = h.set_counts([1, 2, 3])
    >>> h.counts.tolist(), h.variances.tolist()
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    """

    def __init__(self, counts: Any, edges: Any, *, variances: Any = None, name: str | None = None,
                 obs: str | None = None) -> None:
        self.name = name or "binned"
        self.obs = _obs_name(obs, f"BinnedData '{self.name}'")
        self._edges = _checked_edges(edges, f"BinnedData '{self.name}'")
        c, v = self._checked(counts, variances)
        self.counts_data = Data(c, name=f"{self.name}:counts")
        self.variances_data = Data(v, name=f"{self.name}:variances")

    def __repr__(self) -> str:
        obs = f" obs='{self.obs}'" if self.obs else ""
        return (f"<zcache.binned.BinnedData '{self.name}'{obs} nbins={self.nbins} "
                f"range=[{self._edges[0]:g}, {self._edges[-1]:g}]>")

    # -- construction from histograms and samples ---------------------------------------------
    @classmethod
    def from_hist(cls, h: Any, *, name: str | None = None, obs: str | None = None) -> BinnedData:
        """A BinnedData from a one-dimensional ``hist.Hist`` or ``boost_histogram.Histogram``.

        The flow bins are left out. Variances come from ``h.variances()``: the sums of squared
        weights of a ``Weight`` storage; for an unweighted histogram they equal the counts, and
        a ``Double`` storage filled with weights has none (the counts are taken).

        Parameters
        ----------
        h : hist.Hist or boost_histogram.Histogram
            A histogram with one axis.
        name : str, optional
            Default: the histogram's ``name`` (hist), else ``"binned"``.
        obs : str, optional
            Default: the axis' ``name`` (hist), else None.

        Returns
        -------
        BinnedData

        Raises
        ------
        ModelError
            ``h`` is not a histogram.
        DataShapeError
            ``h`` has more than one axis.

        Examples
        --------
        >>> import hist
        >>> from zcache.binned import BinnedData
        >>> h = hist.Hist.new.Reg(4, 0.0, 2.0, name="m").Weight()
        >>> _ = h.fill([0.1, 0.2, 1.9], weight=[2.0, 1.0, 0.5])
        >>> b = BinnedData.from_hist(h)
        >>> b.obs, b.counts.tolist(), b.variances.tolist()
        ('m', [3.0, 0.0, 0.0, 0.5], [5.0, 0.0, 0.0, 0.25])
        """
        axes = getattr(h, "axes", None)
        if axes is None or not callable(getattr(h, "values", None)) or not callable(getattr(h, "variances", None)):
            raise ModelError(f"BinnedData.from_hist needs a hist.Hist or boost_histogram.Histogram, got {type(h).__name__}.")
        if len(axes) != 1:
            raise DataShapeError(f"BinnedData.from_hist: binned data are one-dimensional; the histogram has {len(axes)} "
                                 "axes. Project it first (h.project(0)).")
        variances = h.variances()
        return cls(  # the constructor checks the dtypes (a histogram object may be any duck type)
            np.asarray(h.values()),
            np.asarray(axes[0].edges),
            variances=None if variances is None else np.asarray(variances),
            name=name or getattr(h, "name", None) or None,
            obs=obs or getattr(axes[0], "name", None) or None,
        )

    @classmethod
    def from_numpy(cls, sample: Any, bins: Any, range: tuple[float, float] | None = None, *,  # noqa: A002
                   name: str | None = None, obs: str | None = None) -> BinnedData:
        """Histogram a 1-D sample with ``numpy.histogram``.

        Values outside the binning are left out (as numpy does). A weighted :class:`zcache.Data`
        is histogrammed with its weights, and the variances are the sums of squared weights.

        Parameters
        ----------
        sample : array_like or zcache.Data
            A 1-D array of values, or a :class:`zcache.Data` (one column, or the column ``obs``).
        bins : int or array_like
            The number of bins or the edges (``numpy.histogram``'s ``bins``).
        range : (float, float), optional
            The lower and upper edge for a number of bins (``numpy.histogram``'s ``range``).
        name : str, optional
            Default: the Data's name, else ``"binned"``.
        obs : str, optional
            The observable; for a Data with several columns, the column to histogram. Default:
            the Data's observable when it has one column.

        Returns
        -------
        BinnedData

        Raises
        ------
        DataShapeError
            The sample is not 1-D (or the Data's column is not found).
        InvalidDataError
            NaN or infinite values in the sample.
        DataError
            ``bins`` or ``range`` rejected by ``numpy.histogram``.

        Examples
        --------
        >>> import numpy as np
        >>> from zcache.binned import BinnedData
        >>> b = BinnedData.from_numpy(np.array([0.1, 0.4, 0.6, 2.0]), bins=2, range=(0.0, 1.0))
        >>> b.edges.tolist(), b.counts.tolist()
        ([0.0, 0.5, 1.0], [2.0, 1.0])
        """
        weights = None
        if isinstance(sample, Data):
            name = name or sample.name
            values = real_numbers(sample.numpy(), f"BinnedData.from_numpy: Data '{sample.name}'")
            if values.ndim == 2:
                columns = list(sample.obs or ())
                if obs is None and values.shape[1] == 1:
                    values = values[:, 0]
                elif obs in columns:
                    values = values[:, columns.index(obs)]
                else:
                    raise DataShapeError(f"BinnedData.from_numpy: Data '{sample.name}' has columns {sample.obs}; "
                                         "name the one to histogram with obs=.")
            if obs is None and sample.obs is not None and len(sample.obs) == 1:
                obs = sample.obs[0]
            if sample.is_weighted:
                weights = sample.weights_data.numpy()  # one per event (no padding)
        else:
            values = _float_array(sample, "the sample", "BinnedData.from_numpy")
        if values.ndim != 1:
            raise DataShapeError(f"BinnedData.from_numpy histograms a 1-D sample, got shape {values.shape}.")
        if not np.isfinite(values).all():
            raise InvalidDataError("BinnedData.from_numpy: the sample contains NaN or infinite values; remove them first.")
        try:
            counts, edges = np.histogram(values, bins=bins, range=range, weights=weights)
        except (TypeError, ValueError) as err:
            raise DataError(f"BinnedData.from_numpy: numpy.histogram rejected bins={bins!r}, range={range!r}: {err}") from err
        variances = None if weights is None else np.histogram(values, bins=edges, weights=weights**2)[0]
        return cls(counts, edges, variances=variances, name=name, obs=obs)

    # -- read-only views ------------------------------------------------------------------------
    @property
    def edges(self) -> np.ndarray:
        """The ``nbins + 1`` bin edges (float64, read-only)."""
        return self._edges

    @property
    def nbins(self) -> int:
        """The number of bins."""
        return self._edges.size - 1

    @property
    def centers(self) -> np.ndarray:
        """The bin centres (float64, ``nbins``)."""
        return 0.5 * (self._edges[1:] + self._edges[:-1])

    @property
    def widths(self) -> np.ndarray:
        """The bin widths (float64, ``nbins``)."""
        return np.diff(self._edges)

    @property
    def counts(self) -> np.ndarray:
        """The current counts (a float64 numpy copy, ``nbins``; eager only)."""
        return self.counts_data.numpy()

    @property
    def variances(self) -> np.ndarray:
        """The current variances of the counts (a float64 numpy copy, ``nbins``; eager only)."""
        return self.variances_data.numpy()

    # -- changes ----------------------------------------------------------------------------------
    def _checked(self, counts: Any, variances: Any) -> tuple[np.ndarray, np.ndarray]:
        """Counts and variances as float64 arrays, checked; nothing is written here."""
        where = f"BinnedData '{self.name}'"
        c = _float_array(counts, "the counts", where)
        if c.shape != (self.nbins,):
            raise DataShapeError(f"{where}: the counts must be 1-D with one entry per bin ({self.nbins} bins from "
                                 f"{self.nbins + 1} edges), got shape {c.shape}; nothing changed.")
        if not np.isfinite(c).all():
            raise InvalidDataError(f"{where}: the counts contain NaN or infinite values; nothing changed.")
        if variances is None:
            if (c < 0.0).any():
                raise DataError(f"{where}: negative counts need explicit variances (the default variances are the "
                                "counts); pass variances=...; nothing changed.")
            return c, c.copy()
        v = _float_array(variances, "the variances", where)
        if v.shape != (self.nbins,):
            raise DataShapeError(f"{where}: the variances must have one entry per bin ({self.nbins}), got shape "
                                 f"{v.shape}; nothing changed.")
        if not np.isfinite(v).all():
            raise InvalidDataError(f"{where}: the variances contain NaN or infinite values; nothing changed.")
        if (v < 0.0).any():
            raise DataError(f"{where}: variances must be >= 0, got {v.min()} in some bin; nothing changed.")
        return c, v

    def set_counts(self, counts: Any, variances: Any = None) -> Restorer:
        """Replace the counts (and variances) without retracing anything that reads them.

        Both are checked before either is written, so bad input changes nothing. Inside a
        traced ``zcache.function`` tensors are written with :class:`zcache.Data`'s in-graph
        checks (finite values); the losses check the rest when they are evaluated.

        Parameters
        ----------
        counts : array_like or tf.Tensor
            One count per bin.
        variances : array_like or tf.Tensor, optional
            One variance per bin; default: the counts (Poisson counts, as a toy drawn from a
            model has).

        Returns
        -------
        zcache.types.Restorer
            Used as a context manager (or :meth:`~zcache.types.Restorer.restore`), it puts back
            the previous counts and variances.

        Raises
        ------
        DataShapeError, InvalidDataError, DataError
            As for the constructor; nothing changed.

        Examples
        --------
        >>> from zcache.binned import BinnedData
        >>> h = BinnedData([1.0, 2.0], [0.0, 1.0, 2.0])
        >>> with h.set_counts([5.0, 6.0], variances=[1.0, 1.0]):
        ...     h.counts.tolist(), h.variances.tolist()
        ([5.0, 6.0], [1.0, 1.0])
        >>> h.counts.tolist(), h.variances.tolist()
        ([1.0, 2.0], [1.0, 2.0])
        """
        if tf.inside_function() and isinstance(counts, (tf.Tensor, tf.Variable)):
            where = f"BinnedData '{self.name}'"
            counts = _float_tensor(counts, "the counts", where)
            if counts.shape.rank is not None and not counts.shape.is_compatible_with([self.nbins]):
                raise DataShapeError(f"BinnedData '{self.name}': the counts must have shape ({self.nbins},), got "
                                     f"{counts.shape}; nothing changed.")
            var = counts if variances is None else _float_tensor(variances, "the variances", where)
            first = self.counts_data.set_data(counts)
            second = self.variances_data.set_data(var)
        else:
            c, v = self._checked(counts, variances)
            first = self.counts_data.set_data(c)
            second = self.variances_data.set_data(v)

        def restore() -> None:
            second.restore()
            first.restore()

        return Restorer(restore)


def _as_binned(data: Any, who: str) -> BinnedData:
    """A BinnedData as is, a histogram object converted; else ModelError."""
    if isinstance(data, BinnedData):
        return data
    if hasattr(data, "axes") and callable(getattr(data, "values", None)):
        return BinnedData.from_hist(data)
    raise ModelError(f"{who} needs a zcache.binned.BinnedData (BinnedData(counts, edges), BinnedData.from_hist(h) or "
                     f"BinnedData.from_numpy(x, bins)), got {type(data).__name__}.")


def _poisson_terms(n: tf.Tensor, mu: tf.Tensor) -> tf.Tensor:
    r""":math:`\mu - n + n\log(n/\mu)` per bin: 0 for ``n = 0`` (xlogy), +inf for ``mu = 0 < n``."""
    return mu - n + tf.math.xlogy(n, n) - tf.math.xlogy(n, mu)


class _CountChecks:
    """Whether the counts are >= 0, zero outside the space and (no yield) sum to more than 0: one cache.

    The sign is checked for likelihoods, the total where the model is scaled to the histogram's
    total (no yield in the loss).

    A cache of the counts only, so a fit pays nothing; evaluated once at construction, so a
    loss is never built on bad counts, and again (from the cache) on every evaluation, so
    counts changed by ``set_counts`` are checked too.
    """

    def __init__(self, data: BinnedData, who: str, outside: np.ndarray | None, nonnegative: bool,
                 positive_total: bool = False) -> None:
        self.nonnegative = nonnegative
        self.outside = outside if outside is not None and outside.any() else None
        self.negative_message = (
            f"{who}: the counts of '{data.name}' must be >= 0 for a likelihood fit (they are Poisson counts); "
            "fit a histogram with negative entries with BinnedChi2 and its variances."
        )
        self.outside_message = (
            f"{who}: '{data.name}' has counts in bins wholly outside the model's space, where the model "
            "predicts nothing; cut those bins from the histogram or widen the space."
        )
        # Without a yield the expected counts are the total times the bin probabilities: a total of 0
        # makes every expected count 0 and the loss a constant (a fit "converges" anywhere), a
        # negative one (BinnedChi2 of subtracted counts) an upside-down prediction.
        self.total_message = (
            f"{who}: the counts of '{data.name}' sum to zero or less, and without a yield the model is scaled "
            "to that total: the fit would be meaningless. Fill the histogram (an empty toy: skip it), or fit "
            "the number of events too (ExtendedBinnedNLL, or give the model a yield)."
        )
        mask = None if self.outside is None else tf.constant(self.outside)

        def compute() -> tf.Tensor:
            n = data.counts_data.value()
            ok_sign = tf.reduce_all(n >= 0.0) if nonnegative else tf.constant(True)
            ok_range = tf.constant(True) if mask is None else tf.reduce_all(tf.boolean_mask(n, mask) == 0.0)
            ok_total = tf.reduce_sum(n) > 0.0 if positive_total else tf.constant(True)
            return tf.stack([ok_sign, ok_range, ok_total])

        self.cache = CachedTensor(compute, deps=[data.counts_data], name=f"{data.name} counts valid")
        self.check()

    def check(self) -> list[Any]:
        """Raise eagerly (or, inside a trace, return the assertions) when the counts are bad."""
        ok = self.cache.value()
        return [*require(ok[0], ModelError, self.negative_message), *require(ok[1], DataRangeError, self.outside_message),
                *require(ok[2], EmptyDataError, self.total_message)]


def _not_a_sum_over_events(loss: BaseLoss) -> list[Callable[[], tf.Tensor]]:
    """A histogram's loss has no sum over events for parts of the events to add (see BaseLoss.whole_sample_terms)."""
    raise WholeSampleTermError(
        f"{type(loss).__name__} is a function of the whole histogram (each bin's expected count and, in a "
        "likelihood, the saturated term), not a sum over events plus whole-sample terms, so parts of its events "
        "cannot be added. A histogram is small: fill one histogram on the client and fit it in this process, or "
        "build the parts as unbinned losses (zcache.loss.UnbinnedNLL, ExtendedUnbinnedNLL)."
    )


class _BinnedModelLoss(BaseLoss):
    """What the model-based binned losses share: checks, parameters, datasets, expected counts."""

    extended = False  # whether the model's yield enters
    likelihood = True  # whether negative counts are refused

    def __init__(self, model: Model, data: Any, constraints: Sequence[GaussianConstraint] | None = None) -> None:
        who = type(self).__name__
        if not isinstance(model, Model):
            raise ModelError(f"{who} needs a zcache.models.Model, got {model!r}.")
        data = _as_binned(data, who)
        if model.space.n_obs != 1:
            raise ModelError(f"{who}: binned fits are one-dimensional; {model!r} has {model.space.n_obs} observables.")
        if data.obs is not None and (data.obs,) != model.space.obs:
            raise ModelError(f"{who}: the histogram '{data.name}' is of '{data.obs}', the model of {model.space.obs}; "
                             "bin the model's observable (or build the BinnedData with its obs).")
        if self.extended and not model.is_extended:
            raise ModelError(f"{model!r} is not extended: give it a yield (extended=...) or build a SumPdf with "
                             f"yields, or use BinnedNLL.")
        self.model = model
        self.data = data
        self._edges = tuple(float(e) for e in data.edges)
        lo, hi = model.space.lower[0], model.space.upper[0]
        outside = (data.edges[1:] <= lo) | (data.edges[:-1] >= hi)
        self._checks = _CountChecks(data, who, outside, nonnegative=self.likelihood,
                                    positive_total=not self._uses_yield())
        super().__init__(constraints)

    def _uses_yield(self) -> bool:
        return self.extended

    def whole_sample_terms(self) -> list[Callable[[], tf.Tensor]]:
        """Not offered: a histogram's loss is no sum over events.

        Raises
        ------
        WholeSampleTermError
            Always (see :meth:`zcache.loss.BaseLoss.whole_sample_terms`).
        """
        return _not_a_sum_over_events(self)

    def _loss_params(self) -> list[Parameter]:
        return model_parameters(self.model, self.constraints, with_yield=self._uses_yield())

    def datasets(self) -> list[Data]:
        """The datasets the loss reads: the histogram's counts and variances.

        Returns
        -------
        list of zcache.Data
            ``[data.counts_data, data.variances_data]``.
        """
        return [self.data.counts_data, self.data.variances_data]

    def _expected(self, n: tf.Tensor) -> tf.Tensor:
        """Expected counts: the yield times the bin probabilities, or the total scaled to the histogram."""
        probs = self.model.integrate_bins(self._edges)
        if self._uses_yield():
            return self.model.get_yield() * probs
        return tf.reduce_sum(n) * probs / tf.reduce_sum(probs)

    def expected_counts(self) -> tf.Tensor:
        r"""The counts the model predicts in each bin at the current parameter values.

        Returns
        -------
        tf.Tensor
            float64, ``nbins``: :math:`\nu P_i` where the model's yield enters the loss, else
            :math:`N P_i / \sum_j P_j` (the histogram's total :math:`N`).
        """
        return self._expected(self.data.counts_data.value())

    def _terms(self, n: tf.Tensor, mu: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def _value(self) -> tf.Tensor:
        checks = self._checks.check()
        with tf.control_dependencies(checks):
            n = self.data.counts_data.value()
        return self._terms(n, self._expected(n))


class BinnedNLL(_BinnedModelLoss):
    r"""Multinomial negative log-likelihood of a histogram: :math:`\sum_i n_i \log(n_i/\mu_i)`.

    :math:`\mu_i = N p_i`, with :math:`p_i` the model's bin probabilities
    (:meth:`zcache.models.Model.integrate_bins`) renormalized over the histogram's bins and
    :math:`N` the total count: only the shape is fitted. Equal to :math:`-\log L` up to a
    constant (the saturated model's), half of ``iminuit.cost.BinnedNLL``; ``errordef`` 1/2.
    Empty bins contribute 0. See :mod:`zcache.binned` for the conventions.

    Parameters
    ----------
    model : zcache.models.Model
        A one-dimensional model (its yield, if any, does not enter).
    data : BinnedData or histogram
        The histogram (a ``hist``/``boost_histogram`` object is converted with
        :meth:`BinnedData.from_hist`).
    constraints : sequence of zcache.loss.GaussianConstraint, optional
        Penalties added to the loss.

    Raises
    ------
    ModelError
        ``model`` not a 1-D Model, ``data`` not a histogram, the observables differ, or negative
        counts (now, or after ``set_counts`` when the loss is evaluated).
    DataRangeError
        Counts in bins wholly outside the model's space.
    EmptyDataError
        The counts sum to zero (the model is scaled to their total: nothing to fit; now, or
        after ``set_counts`` when the loss is evaluated).

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Exponential
    >>> from zcache.binned import BinnedData, BinnedNLL
    >>> h = BinnedData([10.0, 0.0, 30.0], [0.0, 1.0, 2.0, 3.0])
    >>> loss = BinnedNLL(Exponential(Space("x", 0.0, 3.0), 0.0), h)   # flat: mu = 40/3 per bin
    >>> ref = 10 * np.log(10 / (40 / 3)) + 30 * np.log(30 / (40 / 3))
    >>> bool(abs(float(loss.value()) - ref) < 1e-12), loss.errordef
    (True, 0.5)
    """

    def _terms(self, n: tf.Tensor, mu: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.math.xlogy(n, n) - tf.math.xlogy(n, mu))


class ExtendedBinnedNLL(_BinnedModelLoss):
    r"""Poisson negative log-likelihood of a histogram: :math:`\sum_i [\mu_i - n_i + n_i\log(n_i/\mu_i)]`.

    :math:`\mu_i = \nu P_i`, with :math:`\nu` the model's yield (the expected number of events
    in its whole space) and :math:`P_i` its bin probabilities. Equal to :math:`-\log L` up to a
    constant, half of ``iminuit.cost.ExtendedBinnedNLL``; ``errordef`` 1/2. Empty bins
    contribute :math:`\mu_i`.

    Parameters
    ----------
    model : zcache.models.Model
        An extended one-dimensional model.
    data : BinnedData or histogram
        The histogram.
    constraints : sequence of zcache.loss.GaussianConstraint, optional
        Penalties added to the loss.

    Raises
    ------
    ModelError
        As for :class:`BinnedNLL`, or the model is not extended.
    DataRangeError
        Counts in bins wholly outside the model's space.

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import Space, Exponential
    >>> from zcache.binned import BinnedData, ExtendedBinnedNLL
    >>> nu = zcache.Parameter("nu_ebn", 40.0)
    >>> loss = ExtendedBinnedNLL(Exponential(Space("x", 0.0, 2.0), 0.0, extended=nu),
    ...                          BinnedData([20.0, 20.0], [0.0, 1.0, 2.0]))
    >>> float(loss.value())     # mu = n in both bins: the saturated value
    0.0
    """

    extended = True

    def _terms(self, n: tf.Tensor, mu: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(_poisson_terms(n, mu))


class BinnedChi2(_BinnedModelLoss):
    r"""Chi-square of a histogram: :math:`\sum_i (n_i - \mu_i)^2 / \sigma_i^2` over bins with :math:`\sigma_i^2 > 0`.

    :math:`\sigma_i^2` are the histogram's variances (the counts for a plain histogram: Neyman's
    chi-square). :math:`\mu_i = \nu P_i` for an extended model (the yield is fitted), else
    :math:`N P_i / \sum_j P_j` (the model scaled to the histogram's total :math:`N`). Bins with
    zero variance (empty bins of a plain histogram) are left out, as a least-squares fit must:
    with many of them the fit is biased low, so prefer a binned likelihood there. ``errordef`` 1.
    Negative counts (with their variances) are allowed.

    Parameters
    ----------
    model : zcache.models.Model
        A one-dimensional model.
    data : BinnedData or histogram
        The histogram, with its variances.
    constraints : sequence of zcache.loss.GaussianConstraint, optional
        Penalties added to the loss (:math:`\tfrac12 z^2` each: add them twice, or use a
        likelihood, for a chi-square penalty :math:`z^2`).

    Raises
    ------
    ModelError
        ``model`` not a 1-D Model, ``data`` not a histogram, or the observables differ.
    DataRangeError
        Counts in bins wholly outside the model's space.
    EmptyDataError
        The model has no yield and the counts sum to zero or less (the model is scaled to
        their total; now, or after ``set_counts`` when the loss is evaluated).

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import Space, Exponential
    >>> from zcache.binned import BinnedData, BinnedChi2
    >>> h = BinnedData([12.0, 0.0, 8.0], [0.0, 1.0, 2.0, 3.0])
    >>> loss = BinnedChi2(Exponential(Space("x", 0.0, 3.0), 0.0), h)   # flat: mu = 20/3 per bin
    >>> round(float(loss.value()), 10) == round((12 - 20 / 3) ** 2 / 12 + (8 - 20 / 3) ** 2 / 8, 10), loss.errordef
    (True, 1.0)
    """

    errordef = 1.0  # a chi-square: one sigma is a change of 1
    likelihood = False

    def _uses_yield(self) -> bool:
        return self.model.is_extended

    def _terms(self, n: tf.Tensor, mu: tf.Tensor) -> tf.Tensor:
        var = self.data.variances_data.value()
        keep = var > 0.0
        safe = tf.where(keep, var, tf.ones_like(var))  # no 0/0 in the branch tf.where drops (its gradient)
        return tf.reduce_sum(tf.where(keep, tf.square(n - mu) / safe, tf.zeros_like(var)))


def _template_arrays(t: Any, k: int, data: BinnedData) -> tuple[np.ndarray, np.ndarray, str]:
    """Counts, variances and a name of template ``k`` (array, histogram object or BinnedData)."""
    where = f"Template: template {k}"
    if isinstance(t, BinnedData):
        counts, variances, name, edges = t.counts, t.variances, t.name, t.edges
    elif hasattr(t, "axes") and callable(getattr(t, "values", None)):
        b = BinnedData.from_hist(t)
        counts, variances, name, edges = b.counts, b.variances, getattr(t, "name", None), b.edges
    else:
        counts = _float_array(t, "the counts", where)
        variances, name, edges = counts, None, None
    if counts.shape != (data.nbins,):
        raise DataShapeError(f"{where} has shape {counts.shape}; the data have {data.nbins} bins. Templates must be "
                             "binned like the data.")
    if edges is not None and not np.allclose(edges, data.edges, rtol=1e-12, atol=0.0):
        raise ModelError(f"{where}: its bin edges differ from those of '{data.name}'; bin templates and data alike.")
    if not (np.isfinite(counts).all() and np.isfinite(variances).all()):
        raise InvalidDataError(f"{where} has NaN or infinite counts or variances.")
    if (variances < 0.0).any():
        raise DataError(f"{where} has negative variances.")
    if not counts.sum() > 0.0:
        raise DataError(f"{where}: its counts sum to {counts.sum()}; a template needs a positive total.")
    return counts, variances, name or f"template{k}"


class Template(BaseLoss):
    r"""Template fit of a histogram with the templates' statistical uncertainties (Barlow-Beeston lite).

    The data are fitted by :math:`\mu_i = \sum_k y_k a_{ki}`, the templates :math:`t_k`
    normalized to unit sum (:math:`a_{ki} = t_{ki}/\sum_j t_{kj}`) times their yields
    :math:`y_k`. The finite size of the templates is taken into account by one nuisance
    parameter :math:`\beta_i` per bin scaling :math:`\mu_i`, with variance
    :math:`s_i^2/\mu_i^2`, :math:`s_i^2 = \sum_k y_k^2\,\mathrm{var}(t_{ki})/(\sum_j t_{kj})^2`,
    profiled in closed form: ``method="jsc"`` constrains :math:`\beta_i` by a Gaussian
    (J. S. Conway, PHYSTAT 2011, arXiv:1103.0354, as in ``iminuit.cost.Template``, which cites
    Eq. 15 of arXiv:2206.12346 for the solution), ``method="da"`` by a scaled Poisson term
    (H. P. Dembinski and A. Abdelmotteleb, Eur. Phys. J. C 82 (2022) 1043, arXiv:2206.12346).
    The formulas are in :mod:`zcache.binned`. The value is half of ``iminuit.cost.Template``
    with the same method (:math:`-\log L` up to a constant), ``errordef`` 1/2; bins where
    :math:`\mu_i = 0` are left out (as iminuit does). The data's counts are read as Poisson
    counts (their variances are not used).

    Parameters
    ----------
    data : BinnedData or histogram
        The histogram to fit (counts >= 0).
    templates : sequence of array_like, histogram or BinnedData
        At least one template, binned like the data: counts (variances = counts), a
        ``hist``/``boost_histogram`` object (variances from ``.variances()``) or a
        :class:`BinnedData` (its variances).
    yields : sequence of Parameter or float, optional
        One yield per template (a number is a fixed yield). Default: new Parameters
        ``yield_<template name>`` (a BinnedData's or hist's name, else ``template<k>``) starting
        at the data's total over the number of templates, with lower limit 0.
    method : {"jsc", "da"}
        Conway's method (default) or Dembinski and Abdelmotteleb's.
    constraints : sequence of zcache.loss.GaussianConstraint, optional
        Penalties added to the loss.

    Raises
    ------
    ModelError
        No templates, an unknown method, the wrong number of yields, template edges unlike the
        data's, ``data`` not a histogram, or negative data counts.
    DataShapeError
        A template binned differently from the data.
    InvalidDataError, DataError
        A template with NaN, negative variances or a total that is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.binned import BinnedData, Template
    >>> data = BinnedData([12.0, 20.0, 9.0], [0.0, 1.0, 2.0, 3.0])
    >>> loss = Template(data, [np.array([10.0, 5.0, 1.0]), np.array([1.0, 6.0, 9.0])])
    >>> [p.name for p in loss.yields], [round(float(p), 2) for p in loss.yields], loss.errordef
    (['yield_template0', 'yield_template1'], [20.5, 20.5], 0.5)
    """

    def __init__(self, data: Any, templates: Sequence[Any], *, yields: Sequence[Any] | None = None,
                 method: str = "jsc", constraints: Sequence[GaussianConstraint] | None = None) -> None:
        data = _as_binned(data, "Template")
        if method not in _TEMPLATE_METHODS:
            raise ModelError(f"Template: method must be one of {_TEMPLATE_METHODS}, got {method!r}.")
        templates = list(templates)
        if not templates:
            raise ModelError("Template needs at least one template.")
        arrays = [_template_arrays(t, k, data) for k, t in enumerate(templates)]
        if yields is not None and len(yields) != len(arrays):
            raise ModelError(f"Template got {len(arrays)} templates but {len(yields)} yields; give one per template.")
        self.data = data
        self.method = method
        self._checks = _CountChecks(data, "Template", None, nonnegative=True)
        totals = np.array([c.sum() for c, _, _ in arrays])
        # Normalized templates and their variances, (K, nbins): constants of the loss.
        self._shapes = tf.constant(np.stack([c for c, _, _ in arrays]) / totals[:, None])
        self._shape_vars = tf.constant(np.stack([v for _, v, _ in arrays]) / totals[:, None] ** 2)
        if yields is None:
            start = max(float(data.counts.sum()) / len(arrays), 1.0)
            names = [f"yield_{name}" for _, _, name in arrays]
            names = [n if names.count(n) == 1 else f"{n}_{k}" for k, n in enumerate(names)]
            self.yields = [Parameter(n, start, lower=0.0) for n in names]
        else:
            self.yields = [as_parameter(y, f"yield_{name}") for y, (_, _, name) in zip(yields, arrays, strict=True)]
        super().__init__(constraints)

    def whole_sample_terms(self) -> list[Callable[[], tf.Tensor]]:
        """Not offered: a template fit is a function of the whole histogram.

        Raises
        ------
        WholeSampleTermError
            Always (see :meth:`zcache.loss.BaseLoss.whole_sample_terms`).
        """
        return _not_a_sum_over_events(self)

    def _loss_params(self) -> list[Parameter]:
        return unique_parameters([*self.yields, *(q for c in self.constraints for q in c.params)])

    def datasets(self) -> list[Data]:
        """The datasets the loss reads: the histogram's counts and variances.

        Returns
        -------
        list of zcache.Data
            ``[data.counts_data, data.variances_data]``.
        """
        return [self.data.counts_data, self.data.variances_data]

    def prediction(self) -> tuple[tf.Tensor, tf.Tensor]:
        r"""The templates' prediction :math:`\mu_i` and its standard deviation :math:`s_i`.

        Returns
        -------
        mu, std : tf.Tensor
            float64, ``nbins`` each, at the current yields (the uncertainty from the templates'
            finite size only).
        """
        y = tf.stack([p.value() for p in self.yields])
        mu = tf.linalg.matvec(self._shapes, y, transpose_a=True)
        var = tf.linalg.matvec(self._shape_vars, y * y, transpose_a=True)
        return mu, tf.sqrt(var)

    def _value(self) -> tf.Tensor:
        with tf.control_dependencies(self._checks.check()):
            n = self.data.counts_data.value()
        y = tf.stack([p.value() for p in self.yields])
        mu = tf.linalg.matvec(self._shapes, y, transpose_a=True)
        var = tf.linalg.matvec(self._shape_vars, y * y, transpose_a=True)
        one = tf.ones_like(mu)
        used = mu > 0.0  # as iminuit: bins the templates predict nothing in are left out
        # With s^2 = 0 the nuisance parameter is pinned: beta = 1 and no penalty. Safe values in
        # the branches tf.where drops keep their gradients finite.
        free = tf.logical_and(used, var > 0.0)
        mu_s = tf.where(used, mu, one)
        var_s = tf.where(free, var, one)
        if self.method == "jsc":
            b = var_s / tf.square(mu_s)
            q = 0.5 - 0.5 * mu_s * b
            root = tf.sqrt(tf.maximum(tf.square(q) + n * b, 1e-300))
            # beta = q + root, written without the cancellation for q < 0
            beta = tf.where(q >= 0.0, q + root, n * b / tf.where(q < 0.0, root - q, one))
            penalty = tf.square(beta - 1.0) / (2.0 * b)
        else:
            k = tf.square(mu_s) / var_s
            beta = (n + k) / (mu_s + k)
            penalty = _poisson_terms(k, k * beta)
        beta = tf.where(free, beta, one)
        penalty = tf.where(free, penalty, tf.zeros_like(mu))
        terms = _poisson_terms(n, mu_s * beta) + penalty
        return tf.reduce_sum(tf.where(used, terms, tf.zeros_like(mu)))


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
