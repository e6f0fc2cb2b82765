"""The base class :class:`~zcache.models.Model` and what every model uses: parameters, the density check."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.cachable import Cachable, cached, caches_of
from .._engine.cached_tensor import CachedTensor
from .._engine.data import Data
from .._engine.function import Function, function
from .._engine.parameter import Parameter
from .._engine.traced_checks import require
from ..exceptions import DensityError, ModelError
from ._numerics import FMAX_GRID, FMAX_RAISES, FMAX_SAFETY, gauss_legendre, gauss_legendre_bins, grid_maximum
from ._sampling import accept_reject, rng
from ._space import Space


def as_parameter(value: Any, name: str, **limits: Any) -> Parameter:
    """A Parameter as is; a number becomes a fixed (non-floating) Parameter.

    What model constructors do with their parameter arguments, so that a number may stand
    for a fixed parameter.

    Parameters
    ----------
    value : Parameter or float
        A :class:`zcache.Parameter` (returned unchanged) or a number.
    name : str
        The name of the Parameter made from a number (and of ``value`` in the error).
    **limits
        ``lower=`` / ``upper=`` of the Parameter made from a number.

    Returns
    -------
    Parameter
        ``value`` itself, or a new fixed Parameter (``floating=False``) holding it.

    Raises
    ------
    ModelError
        ``value`` is neither a Parameter nor a number.

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import as_parameter
    >>> p = as_parameter(2.5, "width_fixed", lower=0.0)
    >>> p.name, float(p), p.floating, as_parameter(p, "ignored") is p
    ('width_fixed', 2.5, False, True)
    """
    if isinstance(value, Parameter):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise ModelError(f"'{name}' must be a zcache.Parameter or a number, got {value!r}.") from err
    return Parameter(name, number, floating=False, **limits)


class Model(Cachable):
    r"""Base class of all models: a density normalized over ``space``.

    Subclasses implement ``_unnormalized_pdf(x)`` (``x``: (N,) for one observable,
    (N, n_obs) for several) and, optionally, ``_integral(lower, upper)`` (the
    analytic integral of the unnormalized density, 1-D) and ``_sample(n)`` (exact
    sampling inside a trace). Without ``_integral`` the normalization is numerical
    (composite Gauss-Legendre, 1-D); without ``_sample`` sampling is accept-reject
    (1-D) under an envelope found by ``_fmax()``: the maximum of the density on a grid,
    refined around the grid's highest local maxima, times a safety factor. A proposal
    above the envelope raises it and restarts the sample; when that repeats, sampling
    raises :class:`zcache.exceptions.ModelError`. A density with structure narrower than the grid can
    override ``_fmax()`` with a true upper bound, or define ``_sample(n)``.

    A model is a :class:`zcache.Cachable`, and :func:`zcache.precompute` takes it as a
    target (``__zcache_evaluate__``: its normalization and every cache it owns).

    Parameters
    ----------
    space : Space
        The observables and their range.
    params : dict of str to Parameter or float, optional
        Name -> Parameter (or number: a fixed parameter, see :func:`as_parameter`).
    name : str, optional
        A label for reports; default the class name.
    extended : Parameter or float, optional
        A yield (Parameter or number) makes the model extended.

    Raises
    ------
    ModelError
        ``space`` is not a :class:`Space`, or a parameter is neither a Parameter nor a number.
    """

    def __init__(
        self,
        space: Space,
        params: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        extended: Any = None,
    ) -> None:
        if not isinstance(space, Space):
            raise ModelError(f"A model needs a zcache.models.Space, got {space!r}.")
        self.space = space
        self.name = name or type(self).__name__
        self.params: dict[str, Parameter] = {
            key: as_parameter(value, f"{self.name}_{key}") for key, value in (params or {}).items()
        }
        self._yield = None if extended is None else as_parameter(extended, f"{self.name}_yield")
        self._sampler: Function | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}' {self.space!r} params={list(self.params)}>"

    # -- parameters and yields ---------------------------------------------------------
    @property
    def is_extended(self) -> bool:
        """Whether the model has a yield (an expected number of events)."""
        return self._yield is not None

    @property
    def yield_parameter(self) -> Parameter | None:
        """The yield as one Parameter (``extended=``); None when not extended or a sum of yields.

        A :class:`SumPdf` built with ``yields=`` is extended with the sum of its components'
        yields, which is no single Parameter.
        """
        return self._yield if isinstance(self._yield, Parameter) else None

    @property
    def sampler(self) -> Function | None:
        """The traced function behind :meth:`sample` (identifier 'sample'); None before the first sample.

        Its ``trace_count`` shows that new sizes and parameter values do not retrace.
        """
        return self._sampler

    def get_yield(self) -> tf.Tensor:
        """The expected number of events (extended models only).

        Returns
        -------
        tf.Tensor
            float64 scalar.

        Raises
        ------
        ModelError
            The model is not extended.
        """
        if self._yield is None:
            raise ModelError(f"{self!r} is not extended: pass extended=<yield> or build a SumPdf with yields.")
        return self._yield.value()

    def _submodels(self) -> list[Model]:
        return []

    def __zcache_evaluate__(self) -> list[CachedTensor]:
        """The precompute protocol (:class:`zcache.types.Precomputable`).

        Computes the normalization (of this model and its components) and returns every
        cache they own: what a fit of this model reads (its per-dataset ``pdf`` caches
        included), without computing them for datasets that may have changed.
        """
        self.normalization()
        caches = caches_of(self)
        for sub in self._submodels():
            caches.extend(sub.__zcache_evaluate__())
        return caches

    def get_params(self, floating: bool | None = True) -> list[Parameter]:
        """Parameters of this model and its components (and yields), each once, in order.

        Parameters
        ----------
        floating : bool or None
            ``True`` only floating ones, ``False`` only fixed ones, ``None`` all.

        Returns
        -------
        list of Parameter
        """
        return unique_parameters([*self._own_params(), *(p for sub in self._submodels() for p in sub.get_params(None))],
                                 floating)

    def _own_params(self) -> list[Parameter]:
        return [*self.params.values(), *([self._yield] if self._yield is not None else [])]

    # -- densities ---------------------------------------------------------------------
    def pdf(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        """The normalized density at each event of ``data``.

        A density that is not a probability density at the current parameter values (negative,
        NaN or infinite at an event, or a normalization that is not positive: a polynomial that
        dips below zero) raises :class:`~zcache.exceptions.DensityError`, eagerly and in a
        ``zcache.function`` (XLA-compiled too, under ``zcache.set_jit_mode``); in a plain
        ``tf.function`` the failed check raises ``InvalidArgumentError`` naming it. It is never
        clipped. A loss reads the raw values instead, where such a density is NaN, so a
        minimizer that steps there sees a NaN loss and steps back (a loss of your own that
        should behave so reads ``log_pdf(data, raw=True)`` and weights out padding rows).

        Parameters
        ----------
        data : zcache.Data or array_like
            A :class:`zcache.Data` (the result is cached per dataset) or an array/tensor of
            events (computed, not cached).
        raw : bool, optional
            What a loss reads (zcache's losses pass ``True``): one value per row of
            ``data.value()``, the padding rows of padded data (``capacity=``) included for the
            loss to weight them out, and unchecked: NaN where the density is impossible.

        Returns
        -------
        tf.Tensor
            float64, shape (N,): one value per event, also for padded data (the padding rows
            left out, see :meth:`zcache.Data.unpadded`); ``raw=True``: one per row of
            ``data.value()``.

        Raises
        ------
        DensityError
            (Not raw.) The density is negative, NaN or infinite at an event, or its
            normalization is not positive and finite.

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> g = Gaussian(Space("x", -5.0, 5.0), 0.0, 1.0)
        >>> padded = zcache.Data(np.array([0.0, 1.0, 2.0]), capacity=16)
        >>> g.pdf(padded).shape, g.pdf(padded, raw=True).shape
        (TensorShape([3]), TensorShape([16]))
        """
        values = self._rows_pdf(data)
        return values if raw else self._checked_density(data, values)

    def log_pdf(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        """``log(pdf(data))``.

        Parameters
        ----------
        data : zcache.Data or array_like
            As for :meth:`pdf`.
        raw : bool, optional
            As for :meth:`pdf` (NaN where the density is impossible).

        Returns
        -------
        tf.Tensor
            float64, shape (N,): one value per event (``raw=True``: per row of ``data.value()``).

        Raises
        ------
        DensityError
            As for :meth:`pdf`.
        """
        return tf.math.log(self.pdf(data, raw=raw))

    def sum_log_pdf(self, data: Any) -> tf.Tensor:
        r""":math:`\sum_i \log p(x_i)`, what an NLL needs (models may compute it more cheaply).

        Parameters
        ----------
        data : zcache.Data or array_like
            As for :meth:`pdf`; the padding rows of padded data (``capacity=``) are left out.

        Returns
        -------
        tf.Tensor
            float64 scalar; NaN where the density is impossible (see :meth:`pdf`), as in a loss.
        """
        terms = self.log_pdf(data, raw=True)
        mask = data.mask if isinstance(data, Data) else None
        return tf.reduce_sum(terms if mask is None else mask * terms)

    def supports_nll_hessian(self, params: Sequence[Parameter]) -> bool:
        """Whether :meth:`nll_hessian` gives the exact Hessian for ``params`` rather than None.

        True for a cached coherent sum of :class:`zcache.amplitude.SymbolicModel` whose fitted
        parameters are couplings and line-shape parameters (and parameters it does not read),
        every function on their path with a derivative rule; no other model offers one yet.

        Parameters
        ----------
        params : sequence of Parameter
            The parameters to differentiate by.

        Returns
        -------
        bool
            False by default; a model that knows its second derivatives says where.
        """
        return self._supports_nll_hessian(params)

    def _supports_nll_hessian(self, params: Sequence[Parameter]) -> bool:
        return False

    def nll_hessian_block(self, params: Sequence[Parameter]) -> list[int]:
        """Positions of ``params`` whose block of :meth:`nll_hessian` costs about one pass over the data.

        For a cached coherent sum of :class:`zcache.amplitude.SymbolicModel`: the couplings' parts
        (the amplitudes are linear in them) and the parameters it does not read, where no line
        shape is differentiated. A compiled fit takes that block exactly and differences the other
        parameters' gradients only (:class:`zcache.minimize.Minuit`'s ``structured_hessian``).

        Parameters
        ----------
        params : sequence of Parameter
            The fitted parameters, in the Hessian's order.

        Returns
        -------
        list of int
            Positions in ``params`` (sorted); empty by default.
        """
        return self._nll_hessian_block(params)

    def _nll_hessian_block(self, params: Sequence[Parameter]) -> list[int]:
        return []

    def nll_hessian(self, data: Data, params: Sequence[Parameter]) -> tf.Tensor | None:
        r"""The Hessian of :math:`-\sum_i w_i \log p(x_i)` by ``params``, where the model's structure gives it cheaply.

        A model that knows its second derivatives (a coherent sum of amplitudes:
        :meth:`zcache.amplitude.SymbolicModel.nll_hessian`) returns them exactly, for a few passes
        over the data; the default returns None, and callers differentiate the loss instead.

        Parameters
        ----------
        data : zcache.Data
            The events.
        params : sequence of Parameter
            The parameters, in the Hessian's order.

        Returns
        -------
        tf.Tensor or None
            float64 (n, n), or None.
        """
        return None

    def _rows_pdf(self, data: Any) -> tf.Tensor:
        """The density per row of ``data`` (padding included), NaN where impossible: what pdf checks."""
        if isinstance(data, Data):
            return self._cached_pdf(data)
        return self._pdf(tf.convert_to_tensor(data, tf.float64))

    def _checked_density(self, data: Any, values: tf.Tensor) -> tf.Tensor:
        """``values`` with one row per event, or DensityError where one is not a probability density."""
        if isinstance(data, Data):
            values = data.unpadded(values)
        checks = require(
            tf.logical_and(tf.math.is_finite(values), values >= 0.0), DensityError,
            f"the density of '{self.name}' ({type(self).__name__}) is negative, NaN or infinite at some "
            "events, or its normalization is not positive, at the current parameter values: it is not a "
            "probability density there. Change the parameters (a polynomial shape needs coefficients that "
            "keep it non-negative over its whole space, see zcache.shapes) or give them limits.",
        )
        if checks:
            with tf.control_dependencies(checks):
                return tf.identity(values)
        return values

    @cached
    def _cached_pdf(self, data: Data) -> tf.Tensor:
        return self._pdf(data)

    def _pdf(self, data: Any) -> tf.Tensor:
        # Composite models override this to route datasets to their components' caches.
        return density(self._unnormalized_pdf(self.space.select(data)), self.normalization())

    @property
    def factorizes(self) -> bool:
        r"""Whether :math:`p(x) = f(x) / Z` with one normalization :math:`Z` = :meth:`normalization` for every event.

        True for a model that does not override how its density is put together (a single shape);
        False for mixtures and products, whose components are normalized one by one. A chunked
        loss (:class:`zcache.scale.ChunkedLoss`) then adds :math:`\sum_i w_i \log Z` once per
        evaluation instead of once per chunk.
        """
        return type(self)._pdf is Model._pdf

    def log_unnormalized(self, data: Data) -> tf.Tensor:
        r""":math:`\log f(x)` per row of ``data`` (padding rows included), for a model that :attr:`factorizes`.

        Parameters
        ----------
        data : zcache.Data
            Events.

        Returns
        -------
        tf.Tensor
            float64, one value per row of ``data.value()``: :math:`\log p = \log f - \log Z`
            (NaN where :math:`f < 0`).
        """
        return tf.math.log(self._unnormalized_pdf(self.space.select(data)))

    def unnormalized_pdf(self, x: Any) -> tf.Tensor:
        """The unnormalized density at ``x`` (unchecked: it may be negative where the model is).

        Parameters
        ----------
        x : zcache.Data or array_like
            Events; a tensor's columns in this model's observable order.

        Returns
        -------
        tf.Tensor
            float64, shape (N,): one value per event (padded data: the padding rows left out).
        """
        values = self._unnormalized_pdf(self.space.select(x))
        return x.unpadded(values) if isinstance(x, Data) else values

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _unnormalized_pdf(x).")

    def _integral(self, lower: Any, upper: Any) -> Any:
        return NotImplemented

    @cached
    def normalization(self) -> tf.Tensor:
        r""":math:`\int_\Omega f(x;\theta)\,dx`, cached: it depends on parameters only.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        return self._raw_integral(self.space.lower, self.space.upper)

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        analytic = self._integral(lower[0], upper[0]) if self.space.n_obs == 1 else self._integral(lower, upper)
        if analytic is not NotImplemented:
            return tf.convert_to_tensor(analytic, tf.float64)
        if self.space.n_obs != 1:
            raise ModelError(
                f"{self!r}: numerical normalization is implemented for one observable; give the "
                "model an analytic _integral(lower, upper) or build it as a ProductPdf of 1-D models."
            )
        return gauss_legendre(self._unnormalized_pdf, lower[0], upper[0])

    def integrate(self, lower: Any = None, upper: Any = None) -> tf.Tensor:
        """Probability of the box ``[lower, upper]`` (intersected with the space).

        Parameters
        ----------
        lower, upper : float or sequence of float, optional
            A limit per observable; default: the space's (the probability is then 1).

        Returns
        -------
        tf.Tensor
            float64 scalar; 0 for a box outside the space.

        Raises
        ------
        ModelError
            Not one lower and one upper limit per observable.
        """
        lo = self.space.lower if lower is None else tuple(np.atleast_1d(np.asarray(lower, float)))
        hi = self.space.upper if upper is None else tuple(np.atleast_1d(np.asarray(upper, float)))
        if len(lo) != self.space.n_obs or len(hi) != self.space.n_obs:
            raise ModelError(
                f"integrate on {self.space!r} needs {self.space.n_obs} lower and upper limit(s), got {lower!r}, {upper!r}."
            )
        lo = tuple(max(a, b) for a, b in zip(lo, self.space.lower, strict=True))
        hi = tuple(min(a, b) for a, b in zip(hi, self.space.upper, strict=True))
        if any(a >= b for a, b in zip(lo, hi, strict=True)):
            return tf.constant(0.0, tf.float64)
        return self._raw_integral(lo, hi) / self.normalization()

    # -- binned probabilities ----------------------------------------------------------
    def integrate_bins(self, edges: Sequence[float]) -> tf.Tensor:
        r"""Probabilities of the bins between consecutive ``edges``, as one cached tensor.

        Bin :math:`i` is :math:`[e_i, e_{i+1}]` intersected with the space, and its probability
        is :math:`\int_{e_i}^{e_{i+1}} f\,dx \,/\, \int_\Omega f\,dx`: the part of a bin outside
        the space has probability 0, so the probabilities sum to 1 when the bins cover the space.
        All bins come from one vectorized call of the model's analytic ``_integral(lower, upper)``
        with tensors of bin limits (an ``_integral`` written for numbers only is called once per
        bin), or, without one, from Gauss-Legendre quadrature of every bin at once (16 nodes per
        panel, panels no wider than 1/64 of the range, as for the normalization). A
        :class:`SumPdf` adds its components' ``integrate_bins`` weighted by its fractions (each
        component's bins are a cache of its own); a :class:`ProductPdf` over one shared 1-D
        space is integrated numerically. One observable only (a ProductPdf over disjoint
        observables is not supported).

        The result depends on parameters only, so it is cached per edges (as a tuple of floats)
        and recomputed only after a parameter of the model changed.

        Parameters
        ----------
        edges : sequence of float
            The bin edges (list, tuple or 1-D array): at least two finite, strictly increasing
            numbers; bins may reach beyond the space.

        Returns
        -------
        tf.Tensor
            float64, shape ``(len(edges) - 1,)``, every entry >= 0.

        Raises
        ------
        ModelError
            The model has more than one observable, or ``edges`` is not a 1-D sequence of at
            least two finite, strictly increasing numbers.

        Examples
        --------
        >>> from zcache.models import Space, Gaussian
        >>> g = Gaussian(Space("x", -1.0, 1.0), mu=0.0, sigma=1.0)
        >>> [round(float(p), 6) for p in g.integrate_bins([-2.0, -1.0, 0.0, 0.5, 3.0])]
        [0.0, 0.5, 0.280453, 0.219547]
        """
        if self.space.n_obs != 1:
            raise ModelError(
                f"{self!r}: integrate_bins is implemented for one observable; bin each 1-D factor "
                "of a ProductPdf separately."
            )
        try:
            e = np.asarray(edges, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ModelError(f"integrate_bins needs bin edges as a sequence of numbers, got {edges!r}.") from err
        if e.ndim != 1 or e.size < 2 or not np.isfinite(e).all() or not (np.diff(e) > 0.0).all():
            raise ModelError(
                "integrate_bins needs a 1-D sequence of at least two finite, strictly increasing bin "
                f"edges, got {edges!r}."
            )
        # A tuple of Python floats keys the cache (arrays cannot: see zcache.cached).
        return self._bin_probabilities(tuple(float(v) for v in e))

    @cached(name=lambda self, edges: f"{self.name}.integrate_bins")
    def _bin_probabilities(self, edges: tuple[float, ...]) -> tf.Tensor:
        # Round-off (a difference of erfc values) can leave a tiny negative; a probability is not.
        return tf.maximum(self._integrate_bins(edges), 0.0)

    def _integrate_bins(self, edges: tuple[float, ...]) -> tf.Tensor:
        """The bin probabilities, uncached; composite models route them to their components."""
        clipped = np.clip(np.asarray(edges), self.space.lower[0], self.space.upper[0])
        lower, upper = clipped[:-1], clipped[1:]
        raw = self._bin_integrals(lower, upper)
        inside = tf.constant(upper > lower)  # bins wholly outside the space have width 0 here
        return tf.where(inside, raw, tf.zeros_like(raw)) / self.normalization()

    def _bin_integrals(self, lower: np.ndarray, upper: np.ndarray) -> tf.Tensor:
        """Integrals of the unnormalized density over ``[lower_i, upper_i]`` (inside the space)."""
        nbins = lower.size
        try:
            analytic = self._integral(tf.constant(lower), tf.constant(upper))
        except (TypeError, ValueError, tf.errors.InvalidArgumentError):
            analytic = None  # an _integral written for numbers (Python branches): once per bin below
        if analytic is NotImplemented:
            return gauss_legendre_bins(self._unnormalized_pdf, lower, upper, self.space.upper[0] - self.space.lower[0])
        if analytic is not None:
            out = tf.convert_to_tensor(analytic, tf.float64)
            if out.shape == (nbins,):
                return out
        zero = tf.constant(0.0, tf.float64)
        return tf.stack([
            tf.convert_to_tensor(self._integral(float(a), float(b)), tf.float64) if b > a else zero
            for a, b in zip(lower, upper, strict=True)
        ])

    # -- sampling ----------------------------------------------------------------------
    def sample(self, n: int | None = None, data: Data | None = None) -> Data:
        """Draw ``n`` events (extended models: ``n=None`` draws a Poisson number).

        Sampling runs in a function traced under the 'sample' identifier, once per
        model (:attr:`sampler`): new sizes and parameter values do not retrace. Seeded by
        :func:`zcache.models.set_seed`.

        Parameters
        ----------
        n : int, optional
            Number of events; ``None`` (extended models only) draws a Poisson number around
            the yield.
        data : zcache.Data, optional
            Fill this :class:`zcache.Data` in place (``set_data``) instead of creating a
            new one, so functions traced on it are not retraced.

        Returns
        -------
        zcache.Data
            The events, obs the model's observables (``data`` itself if given).

        Raises
        ------
        ModelError
            ``n`` is not a whole number >= 1 (or missing for a model that is not extended),
            ``data`` has other observables, or accept-reject sampling failed (see
            ``_accept_reject``).
        """
        if n is None:
            if not self.is_extended:
                raise ModelError(f"{self!r} is not extended: give the number of events n.")
            seed = rng().make_seeds(1)[:, 0]
            n = int(tf.random.stateless_poisson([], seed, self.get_yield(), dtype=tf.int64))
        if not float(n).is_integer() or n < 1:
            raise ModelError(f"sample(n) needs a whole number of events n >= 1, got {n!r}.")
        n = int(n)
        if data is not None and data.obs is not None and data.obs != self.space.obs:
            raise ModelError(f"sample(data=...): the data's obs {data.obs} differ from the model's {self.space.obs}.")
        if self._sampler is None:
            self._sampler = function(self._sample_tensor, wraps="sample")
        values = self._sampler(tf.constant(n, tf.int64))
        if data is None:
            return Data(values, name=f"{self.name}_sample", obs=self.space.obs)
        data.set_data(values)
        return data

    def _sample_tensor(self, n: tf.Tensor) -> tf.Tensor:
        out = self._sample(n)
        return self._accept_reject(n) if out is NotImplemented else out

    def _sample(self, n: tf.Tensor) -> Any:
        return NotImplemented

    @cached
    def _fmax(self) -> tf.Tensor:
        """The accept-reject envelope: an upper bound of the unnormalized density (1-D).

        ``FMAX_SAFETY`` times the largest value found by ``_numerics.grid_maximum``. Sampling
        checks every proposal against it: see ``_accept_reject``.
        """
        return FMAX_SAFETY * grid_maximum(self._unnormalized_pdf, self.space.lower[0], self.space.upper[0])

    def _accept_reject(self, n: tf.Tensor) -> tf.Tensor:
        """``n`` events by accept-reject under ``_fmax()``, with an adaptive envelope.

        A batch with a proposal whose density exceeds the envelope is discarded with every
        event accepted so far, the envelope becomes ``FMAX_SAFETY`` times the largest density
        seen, and the sample starts again (as RooFit's accept-reject generator does): events
        are kept only from proposals all under the final envelope, so none is biased by a
        peak the envelope cut. After ``FMAX_RAISES`` raises sampling stops with ModelError.
        """
        if self.space.n_obs != 1:
            raise ModelError(f"{self!r}: accept-reject sampling is implemented for one observable; define _sample(n).")
        fmax = tf.convert_to_tensor(self._fmax(), tf.float64)
        checks = require(
            tf.logical_and(tf.math.is_finite(fmax), fmax > 0.0), ModelError,
            f"sampling '{self.name}' by accept-reject: the maximum of its unnormalized density over "
            f"{self.space!r} (from a grid of {FMAX_GRID} points, refined) is not positive and finite; "
            "it must be finite and non-negative over the whole range, and not zero everywhere.",
        )
        with tf.control_dependencies(checks):
            fmax = tf.identity(fmax)
        return accept_reject(
            n, self.space.lower[0], self.space.upper[0], self._unnormalized_pdf, fmax,
            raise_factor=FMAX_SAFETY,
            max_raises=FMAX_RAISES,
            nonfinite_message=(
                f"sampling '{self.name}' by accept-reject: its unnormalized density is NaN or infinite at "
                f"points of {self.space!r}; it must be finite and non-negative over the whole range."
            ),
            over_message=(
                f"sampling '{self.name}' by accept-reject: the unnormalized density exceeded the envelope "
                f"({FMAX_SAFETY:g} x its maximum on a grid of {FMAX_GRID} points over {self.space!r}, refined "
                f"around the grid's highest peaks) {FMAX_RAISES + 1} times in one sample, although each time "
                f"the envelope was raised to {FMAX_SAFETY:g} x the largest value seen. Its peaks are too "
                "narrow for the grid (or it is unbounded): override _fmax() of the model with an upper bound "
                "of the unnormalized density, give it an exact _sample(n), or split the range."
            ),
        )



def unique_parameters(params: Iterable[Parameter], floating: bool | None = None) -> list[Parameter]:
    """``params`` each once (first occurrence kept, by identity), filtered by their ``floating`` flag now.

    Every ``get_params`` of a model, amplitude or loss lists its parameters with it.

    Parameters
    ----------
    params : iterable of Parameter
        Parameters, maybe repeated (a parameter shared by two components).
    floating : bool or None
        ``True`` only floating ones, ``False`` only fixed ones, ``None`` all.

    Returns
    -------
    list of Parameter

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import unique_parameters
    >>> a, b = zcache.Parameter("a_up", 1.0), zcache.Parameter("b_up", 2.0, floating=False)
    >>> [p.name for p in unique_parameters([a, b, a])], [p.name for p in unique_parameters([a, b, a], True)]
    (['a_up', 'b_up'], ['a_up'])
    """
    once = {id(p): p for p in params}.values()  # a repeated key keeps its first position
    return [p for p in once if floating is None or p.floating == floating]



def density(unnormalized: Any, norm: Any) -> tf.Tensor:
    """``unnormalized / norm``, NaN wherever that is no probability density.

    Negative (or NaN) unnormalized values, and every value when the normalization is not
    positive (a negative density divided by a negative integral would look positive), become
    NaN: a loss of such a density is NaN, so a minimizer steps back, and ``Model.pdf`` raises
    :class:`~zcache.exceptions.DensityError` instead of returning it. Never clipped.

    Parameters
    ----------
    unnormalized : tf.Tensor
        The unnormalized density per event (or a scalar, for a constant density).
    norm : tf.Tensor
        Its integral over the space.

    Returns
    -------
    tf.Tensor
        float64.

    Examples
    --------
    >>> import tensorflow as tf
    >>> density(tf.constant([1.0, -1.0], tf.float64), tf.constant(2.0, tf.float64)).numpy().tolist()
    [0.5, nan]
    """
    unnormalized = tf.convert_to_tensor(unnormalized, tf.float64)
    norm = tf.convert_to_tensor(norm, tf.float64)
    ok = tf.logical_and(unnormalized >= 0.0, norm > 0.0)
    return tf.where(ok, unnormalized / norm, tf.constant(np.nan, tf.float64))

