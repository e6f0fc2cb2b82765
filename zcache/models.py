r"""Models: probability densities normalized over an observable space.

A model is a density :math:`f(x;\theta)/\int_\Omega f\,dx` over a rectangular
:class:`Space` :math:`\Omega`. A subclass defines only the unnormalized density
and, where one exists, its analytic integral; everything else (normalization,
per-dataset caching, sampling, extended yields) comes from :class:`Model`:

.. code-block:: python

    class Linear(zcache.models.Model):
        def __init__(self, space, slope):
            super().__init__(space, {"slope": slope})

        def _unnormalized_pdf(self, x):
            return 1.0 + self.params["slope"].value() * x

What is cached, and why:

- ``normalization()`` depends on parameters only, so it is computed once and
  reused across datasets (toys) until a shape parameter changes;
- ``pdf(data)`` is cached per dataset, so a sum recomputes only the components
  whose parameters moved (Minuit's numerical gradient moves one at a time), and a
  component with fixed parameters is computed once per dataset.

:func:`zcache.precompute` (which :class:`zcache.minimize.Minuit` applies) bypasses
the caches of nodes that change on every call of a fit, so they cost nothing.

Sampling is exact (inverse CDF) where a model defines ``_sample(n)``, else accept-reject
(:func:`zcache.sampling.accept_reject`) under an adaptive envelope (``Model._fmax``).

Examples
--------
>>> import zcache
>>> from zcache.models import Space, Gaussian, Exponential, SumPdf
>>> space = Space("x", 0.0, 10.0)
>>> mu, sigma = zcache.Parameter("mu_m", 5.0), zcache.Parameter("sigma_m", 1.0, lower=0.1)
>>> model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, -0.3)], fracs=[0.4])
>>> round(float(model.integrate(0.0, 10.0)), 12)
1.0
>>> data = model.sample(1000)
>>> data.nevents, data.obs
(1000, ('x',))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ._engine.cachable import Cachable, cached, caches_of
from ._engine.cached_tensor import CachedTensor
from ._engine.data import Data
from ._engine.function import Function, function
from ._engine.parameter import Parameter
from ._engine.traced_checks import require
from .exceptions import DataDtypeError, DensityError, ModelError, ParameterValueError
from .sampling import accept_reject, rng, truncated_normal

__all__ = [
    "Space",
    "Model",
    "Gaussian",
    "Exponential",
    "FunctionPdf",
    "SumPdf",
    "ProductPdf",
    "as_parameter",
    "one_dimensional",
    "unique_parameters",
]

_SQRT2 = math.sqrt(2.0)
# Composite Gauss-Legendre rule for numerical normalization: 64 panels x 16 nodes is
# exact for polynomials of degree 31 per panel, ~1e-12 relative for smooth peaks >= 1/50 of the range.
_PANELS, _NODES = 64, 16
_GL_T, _GL_W = np.polynomial.legendre.leggauss(_NODES)
# Accept-reject envelope (see Model._fmax): the unnormalized density on a grid, the best
# _FMAX_PEAKS local maxima of the grid each refined by _FMAX_LEVELS zooms of a _FMAX_ZOOM-point
# grid (each zoom shrinks the bracket 16x: a peak between two grid points is found to ~1e-5 of
# the spacing), times a safety factor. A proposal above the envelope during sampling raises it
# and restarts the sample, at most _FMAX_RAISES times per sample() before ModelError.
_FMAX_GRID = 4096
_FMAX_PEAKS = 8
_FMAX_ZOOM = 33
_FMAX_LEVELS = 4
_FMAX_SAFETY = 1.25
_FMAX_RAISES = 16


class Space:
    """Named observables with a rectangular range :math:`[l_i, u_i]` per observable.

    Parameters
    ----------
    obs : str or sequence of str
        An observable name, or a sequence of distinct names.
    lower, upper : float or sequence of float
        The limits, a number per observable (finite, ``lower < upper``).

    Raises
    ------
    ModelError
        Names empty or repeated, limits not numbers, not one per observable, or not finite
        with ``lower < upper``.

    Examples
    --------
    >>> from zcache.models import Space
    >>> s = Space("x", 0.0, 1.0) * Space("y", -1.0, 1.0)
    >>> s.obs, s.volume
    (('x', 'y'), 2.0)
    """

    def __init__(self, obs: str | Sequence[str], lower: float | Sequence[float], upper: float | Sequence[float]):
        self.obs = (obs,) if isinstance(obs, str) else tuple(obs)
        if not self.obs or not all(isinstance(o, str) and o for o in self.obs) or len(set(self.obs)) != len(self.obs):
            raise ModelError(f"Space needs distinct non-empty observable names, got {obs!r}.")
        try:
            lo = np.atleast_1d(np.asarray(lower, dtype=float))
            hi = np.atleast_1d(np.asarray(upper, dtype=float))
        except (TypeError, ValueError) as err:
            raise ModelError(f"Space {self.obs}: limits must be numbers, got {lower!r} and {upper!r}.") from err
        if lo.shape != (len(self.obs),) or hi.shape != (len(self.obs),):
            raise ModelError(f"Space {self.obs}: give one lower and one upper limit per observable.")
        if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
            raise ModelError(f"Space {self.obs}: limits must be finite with lower < upper, got {lo} and {hi}.")
        self.lower = tuple(float(v) for v in lo)
        self.upper = tuple(float(v) for v in hi)

    @property
    def n_obs(self) -> int:
        """Number of observables."""
        return len(self.obs)

    @property
    def volume(self) -> float:
        """Product of the ranges' widths."""
        return float(np.prod(np.subtract(self.upper, self.lower)))

    def __mul__(self, other: Space) -> Space:
        if not isinstance(other, Space):
            return NotImplemented
        if set(self.obs) & set(other.obs):
            raise ModelError(f"Cannot multiply spaces sharing observables {set(self.obs) & set(other.obs)}.")
        return Space(self.obs + other.obs, self.lower + other.lower, self.upper + other.upper)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and (self.obs, self.lower, self.upper) == (other.obs, other.lower, other.upper)

    def __hash__(self) -> int:
        return hash((self.obs, self.lower, self.upper))

    def __repr__(self) -> str:
        ranges = ", ".join(f"{o} in [{lo:g}, {hi:g}]" for o, lo, hi in zip(self.obs, self.lower, self.upper, strict=True))
        return f"Space({ranges})"

    def inside(self, x: Any) -> tf.Tensor:
        """Per event, whether it lies inside the range.

        Parameters
        ----------
        x : array_like or zcache.Data
            Events, shape (N,) or (N, n_obs), columns in this space's order.

        Returns
        -------
        tf.Tensor
            bool, shape (N,): one per event (padded data: the padding rows left out).
        """
        data = x if isinstance(x, Data) else None
        x = tf.convert_to_tensor(x, tf.float64)
        lo, hi = tf.constant(self.lower, tf.float64), tf.constant(self.upper, tf.float64)
        if x.shape.rank == 1:
            out = tf.logical_and(x >= lo[0], x <= hi[0])
        else:
            out = tf.reduce_all(tf.logical_and(x >= lo, x <= hi), axis=-1)
        return out if data is None else data.unpadded(out)

    def select(self, data: Any) -> tf.Tensor:
        """The columns of ``data`` for this space's observables, in its order.

        Parameters
        ----------
        data : zcache.Data or array_like
            A :class:`zcache.Data` (columns matched by ``data.obs`` when set) or a tensor
            whose columns are already in this order.

        Returns
        -------
        tf.Tensor
            float64; shape (N,) for one observable, (N, n_obs) for several: one row per row of
            ``data.value()``, which models compute on (padded data: the padding rows included;
            :meth:`zcache.Data.unpadded` leaves them out).

        Raises
        ------
        ModelError
            The data lack a column of this space, or have the wrong number of unnamed columns.
        DataDtypeError
            Complex data (``zcache.Data(..., dtype=complex)``): an observable is real.
        """
        data_obs = data.obs if isinstance(data, Data) else None
        values = data.value() if isinstance(data, Data) else tf.convert_to_tensor(data, tf.float64)
        if values.dtype.is_complex:  # a cast would drop the imaginary part without a word
            raise DataDtypeError(
                f"{self!r} reads real observables; the data '{getattr(data, 'name', '?')}' are complex: take "
                ".real or abs() explicitly, or split them into two observables (two columns).")
        if values.dtype != tf.float64:
            values = tf.cast(values, tf.float64)
        ncols = 1 if values.shape.rank == 1 else values.shape[-1]
        if data_obs is None or data_obs == self.obs:
            if ncols != self.n_obs:
                raise ModelError(
                    f"{self!r} needs {self.n_obs} column(s), the data have {ncols}; name the data's "
                    "columns with zcache.Data(..., obs=[...]) so that they can be matched."
                )
            return values[:, 0] if values.shape.rank == 2 and self.n_obs == 1 else values
        missing = [o for o in self.obs if o not in data_obs]
        if missing:
            raise ModelError(f"The data (obs {data_obs}) have no column for observable(s) {missing} of {self!r}.")
        if values.shape.rank == 1:
            return values
        cols = tf.gather(values, [data_obs.index(o) for o in self.obs], axis=1)
        return cols[:, 0] if self.n_obs == 1 else cols


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
        loss (:class:`zcache.chunks.ChunkedLoss`) then adds :math:`\sum_i w_i \log Z` once per
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
        return _gauss_legendre(self._unnormalized_pdf, lower[0], upper[0])

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
            return _gauss_legendre_bins(self._unnormalized_pdf, lower, upper, self.space.upper[0] - self.space.lower[0])
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
        :func:`zcache.sampling.set_seed`.

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

        ``_FMAX_SAFETY`` times the largest value found by :func:`_grid_maximum`. Sampling
        checks every proposal against it: see ``_accept_reject``.
        """
        return _FMAX_SAFETY * _grid_maximum(self._unnormalized_pdf, self.space.lower[0], self.space.upper[0])

    def _accept_reject(self, n: tf.Tensor) -> tf.Tensor:
        """``n`` events by accept-reject under ``_fmax()``, with an adaptive envelope.

        A batch with a proposal whose density exceeds the envelope is discarded with every
        event accepted so far, the envelope becomes ``_FMAX_SAFETY`` times the largest density
        seen, and the sample starts again (as RooFit's accept-reject generator does): events
        are kept only from proposals all under the final envelope, so none is biased by a
        peak the envelope cut. After ``_FMAX_RAISES`` raises sampling stops with ModelError.
        """
        if self.space.n_obs != 1:
            raise ModelError(f"{self!r}: accept-reject sampling is implemented for one observable; define _sample(n).")
        fmax = tf.convert_to_tensor(self._fmax(), tf.float64)
        checks = require(
            tf.logical_and(tf.math.is_finite(fmax), fmax > 0.0), ModelError,
            f"sampling '{self.name}' by accept-reject: the maximum of its unnormalized density over "
            f"{self.space!r} (from a grid of {_FMAX_GRID} points, refined) is not positive and finite; "
            "it must be finite and non-negative over the whole range, and not zero everywhere.",
        )
        with tf.control_dependencies(checks):
            fmax = tf.identity(fmax)
        return accept_reject(
            n, self.space.lower[0], self.space.upper[0], self._unnormalized_pdf, fmax,
            raise_factor=_FMAX_SAFETY,
            max_raises=_FMAX_RAISES,
            nonfinite_message=(
                f"sampling '{self.name}' by accept-reject: its unnormalized density is NaN or infinite at "
                f"points of {self.space!r}; it must be finite and non-negative over the whole range."
            ),
            over_message=(
                f"sampling '{self.name}' by accept-reject: the unnormalized density exceeded the envelope "
                f"({_FMAX_SAFETY:g} x its maximum on a grid of {_FMAX_GRID} points over {self.space!r}, refined "
                f"around the grid's highest peaks) {_FMAX_RAISES + 1} times in one sample, although each time "
                f"the envelope was raised to {_FMAX_SAFETY:g} x the largest value seen. Its peaks are too "
                "narrow for the grid (or it is unbounded): override _fmax() of the model with an upper bound "
                "of the unnormalized density, give it an exact _sample(n), or split the range."
            ),
        )


def _grid_maximum(func: Callable[[tf.Tensor], tf.Tensor], lower: float, upper: float) -> tf.Tensor:
    """The largest value of ``func`` found on ``[lower, upper]`` (NaN if any value is NaN).

    ``func`` on a grid of ``_FMAX_GRID`` points; then around each of the ``_FMAX_PEAKS``
    highest local maxima of the grid (an unresolved peak lies within one spacing of one),
    ``_FMAX_LEVELS`` times: ``_FMAX_ZOOM`` points across the bracket, and the bracket
    re-centred on the best of them, shrunk to one of its spacings. Always a value ``func``
    takes, so never above its true maximum.
    """
    def evaluate(x: tf.Tensor) -> tf.Tensor:  # a constant density may return a scalar
        return tf.broadcast_to(tf.convert_to_tensor(func(x), tf.float64), tf.shape(x))

    grid = np.linspace(lower, upper, _FMAX_GRID)
    f = evaluate(tf.constant(grid))
    values = [f]
    ninf = tf.constant([-np.inf], tf.float64)
    safe = tf.where(tf.math.is_nan(f), -np.inf * tf.ones_like(f), f)
    padded = tf.concat([ninf, safe, ninf], 0)
    peak = tf.logical_and(safe >= padded[:-2], safe >= padded[2:])
    _, idx = tf.math.top_k(tf.where(peak, safe, -np.inf * tf.ones_like(safe)), k=min(_FMAX_PEAKS, _FMAX_GRID))
    center = tf.gather(tf.constant(grid), idx)
    half = grid[1] - grid[0]
    offsets = tf.constant(np.linspace(-1.0, 1.0, _FMAX_ZOOM), tf.float64)
    for _ in range(_FMAX_LEVELS):
        x = tf.clip_by_value(center[:, None] + half * offsets[None, :], lower, upper)
        fx = tf.reshape(evaluate(tf.reshape(x, [-1])), tf.shape(x))
        values.append(tf.reshape(fx, [-1]))
        fx = tf.where(tf.math.is_nan(fx), -np.inf * tf.ones_like(fx), fx)
        center = tf.gather(x, tf.argmax(fx, axis=1), batch_dims=1)
        half = half * 2.0 / (_FMAX_ZOOM - 1)
    every = tf.concat(values, 0)
    return tf.where(tf.reduce_any(tf.math.is_nan(every)), tf.constant(np.nan, tf.float64), tf.reduce_max(every))


def _gauss_legendre(func: Callable[[tf.Tensor], tf.Tensor], lower: float, upper: float) -> tf.Tensor:
    width = (upper - lower) / _PANELS
    starts = lower + width * np.arange(_PANELS)
    x = (starts[:, None] + 0.5 * width * (_GL_T[None, :] + 1.0)).ravel()
    w = np.tile(0.5 * width * _GL_W, _PANELS)
    return tf.reduce_sum(tf.constant(w) * func(tf.constant(x)))


def _gauss_legendre_bins(func: Callable[[tf.Tensor], tf.Tensor], lower: np.ndarray, upper: np.ndarray,
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


def one_dimensional(space: Any, what: str) -> Space:
    """``space`` if it is a :class:`Space` of one observable; a ModelError naming ``what`` otherwise.

    Every one-dimensional model checks its space with it.

    Parameters
    ----------
    space : Space
        The space to check.
    what : str
        The model, for the message.

    Returns
    -------
    Space

    Raises
    ------
    ModelError
        Not a Space, or more than one observable.

    Examples
    --------
    >>> from zcache.models import Space, one_dimensional
    >>> one_dimensional(Space("x", 0.0, 1.0), "Gaussian").obs
    ('x',)
    """
    if not isinstance(space, Space):
        raise ModelError(f"{what} needs a zcache.models.Space, got {space!r}.")
    if space.n_obs != 1:
        raise ModelError(f"{what} is one-dimensional; got {space!r}. Combine 1-D models with ProductPdf.")
    return space


class Gaussian(Model):
    r"""Gaussian :math:`\exp(-(x-\mu)^2 / 2\sigma^2)`, truncated to the space.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    mu : Parameter or float
        The mean :math:`\mu` (a number: fixed).
    sigma : Parameter or float
        The width :math:`\sigma > 0` (a number: fixed).
    name : str, optional
        A label for reports.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional.
    ParameterValueError
        The width is not positive.

    Examples
    --------
    >>> from zcache.models import Space, Gaussian
    >>> g = Gaussian(Space("x", -1.0, 1.0), mu=0.0, sigma=1.0)
    >>> round(float(g.integrate(-1.0, 0.0)), 12)
    0.5
    """

    def __init__(self, space: Space, mu: Any, sigma: Any, *, name: str | None = None, extended: Any = None):
        one_dimensional(space, "Gaussian")
        super().__init__(space, {"mu": mu, "sigma": sigma}, name=name, extended=extended)
        width = self.params["sigma"]
        if not float(width.value()) > 0.0:
            raise ParameterValueError(
                f"Gaussian '{self.name}': the width '{width.name}' is {float(width.value())}; it must be "
                "positive. Give it a positive value and a positive lower limit (lower=1e-3, say)."
            )

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        z = (x - self.params["mu"].value()) / self.params["sigma"].value()
        return tf.exp(-0.5 * z * z)

    def _integral(self, lower: float, upper: float) -> tf.Tensor:
        mu, sigma = self.params["mu"].value(), self.params["sigma"].value()
        a, b = (lower - mu) / (sigma * _SQRT2), (upper - mu) / (sigma * _SQRT2)
        # erf(b) - erf(a) cancels in a tail: there use erfc on the side away from the mean.
        diff = tf.where(a >= 0.0, tf.math.erfc(a) - tf.math.erfc(b),
                        tf.where(b <= 0.0, tf.math.erfc(-b) - tf.math.erfc(-a), tf.math.erf(b) - tf.math.erf(a)))
        return 0.5 * math.sqrt(2.0 * math.pi) * sigma * diff

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        mu, sigma = self.params["mu"].value(), self.params["sigma"].value()
        return truncated_normal(n, mu, sigma, self.space.lower[0], self.space.upper[0])


class Exponential(Model):
    r"""Exponential :math:`e^{\lambda x}`, truncated to the space.

    Evaluated as :math:`e^{\lambda (x - s)}` with :math:`s` the end of the range
    where the exponential is largest, so it cannot overflow.

    Parameters
    ----------
    space : Space
        A one-dimensional space.
    lam : Parameter or float
        The slope :math:`\lambda` (a number: fixed).
    name : str, optional
        A label for reports.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        The space is not one-dimensional.

    Examples
    --------
    >>> from zcache.models import Space, Exponential
    >>> e = Exponential(Space("x", 0.0, 1.0), lam=-1.0)
    >>> round(float(e.integrate(0.0, 1.0)), 12)
    1.0
    """

    def __init__(self, space: Space, lam: Any, *, name: str | None = None, extended: Any = None):
        one_dimensional(space, "Exponential")
        super().__init__(space, {"lam": lam}, name=name, extended=extended)

    def _shift(self, lam: tf.Tensor) -> tf.Tensor:
        return tf.where(lam > 0.0, tf.constant(self.space.upper[0], tf.float64), tf.constant(self.space.lower[0], tf.float64))

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        lam = self.params["lam"].value()
        return tf.exp(lam * (x - self._shift(lam)))

    def _integral(self, lower: float, upper: float) -> tf.Tensor:
        # Anchored at the end where the integrand is largest, so nothing overflows:
        # lam <= 0: e^{lam (a - s)} E(lam, w);  lam > 0: e^{lam (b - s)} E(-lam, w);  w = b - a.
        lam = self.params["lam"].value()
        shift = self._shift(lam)
        positive = lam > 0.0
        anchor = tf.where(positive, upper - shift, lower - shift)
        return tf.exp(lam * anchor) * _expm1_ratio(tf.where(positive, -lam, lam), upper - lower)

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # Inverse CDF from the end where the density is largest: x = end + log1p(u * expm1(-|lam| w)) / (-+|lam|).
        lam = self.params["lam"].value()
        lo, hi = self.space.lower[0], self.space.upper[0]
        w = hi - lo
        u = rng().uniform([n], dtype=tf.float64)
        neg = -tf.abs(lam)  # the rate away from the anchor
        small = tf.abs(lam * w) < 1e-8
        safe = tf.where(small, -tf.ones_like(lam), neg)
        depth = tf.where(small, u * w, tf.math.log1p(u * tf.math.expm1(safe * w)) / safe)  # distance from anchor
        x = tf.where(lam > 0.0, hi - depth, lo + depth)
        return tf.clip_by_value(x, lo, hi)


def _expm1_ratio(lam: tf.Tensor, w: float) -> tf.Tensor:
    r"""$E(\lambda, w) = (e^{\lambda w} - 1)/\lambda$, with its Taylor series near 0 (exact gradient there too)."""
    small = tf.abs(lam * w) < 1e-5
    safe = tf.where(small, tf.ones_like(lam), lam)
    series = w * (1.0 + lam * w / 2.0 + (lam * w) ** 2 / 6.0)
    return tf.where(small, series, tf.math.expm1(safe * w) / safe)


class FunctionPdf(Model):
    """A model from a plain function ``func(x, **params)`` (unnormalized density).

    Parameters
    ----------
    func : callable
        ``func(x, **params) -> tensor`` with ``x`` of shape (N,) (or (N, n_obs)),
        parameters passed as scalar tensors by name.
    space : Space
        The observables and their range.
    params : dict of str to Parameter or float, optional
        Name -> Parameter or number.
    integral : callable, optional
        The analytic ``integral(lower, upper, **params)`` of ``func`` (1-D); without it the
        normalization is numerical.
    name : str, optional
        A label for reports; default the function's name.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        ``func`` is not callable.

    Examples
    --------
    >>> import tensorflow as tf, zcache
    >>> from zcache.models import Space, FunctionPdf
    >>> slope = zcache.Parameter("slope_f", 0.5)
    >>> lin = FunctionPdf(lambda x, slope: 1.0 + slope * x, Space("x", 0.0, 1.0), {"slope": slope})
    >>> round(float(lin.pdf([0.0, 1.0])[1]), 10)      # (1 + 0.5) / 1.25
    1.2
    """

    def __init__(
        self,
        func: Callable[..., Any],
        space: Space,
        params: dict[str, Any] | None = None,
        *,
        integral: Callable[..., Any] | None = None,
        name: str | None = None,
        extended: Any = None,
    ):
        if not callable(func):
            raise ModelError(f"FunctionPdf needs a callable, got {func!r}.")
        super().__init__(space, params, name=name or getattr(func, "__name__", "FunctionPdf"), extended=extended)
        self._func = func
        self._analytic = integral

    def _values(self) -> dict[str, tf.Tensor]:
        return {key: p.value() for key, p in self.params.items()}

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return tf.convert_to_tensor(self._func(x, **self._values()), tf.float64)

    def _integral(self, lower: Any, upper: Any) -> Any:
        if self._analytic is None:
            return NotImplemented
        return self._analytic(lower, upper, **self._values())


class SumPdf(Model):
    r"""A mixture :math:`\sum_k f_k\, p_k(x)` of models over the same space.

    Give either ``fracs`` (K-1 fractions; the last is :math:`1-\sum f_k`) or
    ``yields`` (K yields; the sum is extended with yield :math:`\sum_k N_k`). With
    neither, extended components lend their yields.

    Each component's ``pdf(data)`` is its own cache, so moving one component's
    parameter recomputes only that component.

    Parameters
    ----------
    pdfs : sequence of Model
        At least two models over the same space.
    fracs : sequence of Parameter or float, optional
        K-1 fractions; the last is one minus their sum.
    yields : sequence of Parameter or float, optional
        K yields; the sum is then extended.
    name : str, optional
        A label for reports; default ``'Sum'``.

    Raises
    ------
    ModelError
        Fewer than two models, different spaces, both or neither of ``fracs`` and ``yields``
        (unless every component is extended), or the wrong number of them.

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import Space, Gaussian, SumPdf
    >>> s = Space("x", -5.0, 5.0)
    >>> n1, n2 = zcache.Parameter("n1_s", 300.0), zcache.Parameter("n2_s", 100.0)
    >>> m = SumPdf([Gaussian(s, -1.0, 0.5), Gaussian(s, 1.0, 0.5)], yields=[n1, n2])
    >>> m.is_extended, float(m.get_yield())
    (True, 400.0)
    """

    def __init__(
        self,
        pdfs: Sequence[Model],
        fracs: Sequence[Any] | None = None,
        yields: Sequence[Any] | None = None,
        *,
        name: str | None = None,
    ):
        pdfs = list(pdfs)
        if len(pdfs) < 2 or not all(isinstance(p, Model) for p in pdfs):
            raise ModelError("SumPdf needs at least two zcache models.")
        space = pdfs[0].space
        if any(p.space != space for p in pdfs):
            raise ModelError(f"SumPdf components must share one space; got {[p.space for p in pdfs]}.")
        if fracs is not None and yields is not None:
            raise ModelError("SumPdf takes fracs or yields, not both.")
        name = name or "Sum"
        if fracs is None and yields is None:
            if not all(p.is_extended for p in pdfs):
                raise ModelError("SumPdf needs fracs (K-1 fractions) or yields (K), or extended components.")
            # Each component lends its yield: its Parameter, or (a SumPdf with yields) its sum.
            coefs = [p.yield_parameter if p.yield_parameter is not None else _ComponentYield(p) for p in pdfs]
        elif yields is not None:
            if len(yields) != len(pdfs):
                raise ModelError(f"SumPdf got {len(pdfs)} models but {len(yields)} yields; give one per model.")
            coefs = [as_parameter(y, f"{name}_yield{k}") for k, y in enumerate(yields)]
        else:
            if len(fracs) != len(pdfs) - 1:
                raise ModelError(
                    f"SumPdf got {len(pdfs)} models and {len(fracs)} fractions; give K-1 = {len(pdfs) - 1} "
                    "fractions (the last one is 1 minus their sum)."
                )
            coefs = [as_parameter(f, f"{name}_frac{k}") for k, f in enumerate(fracs)]
        super().__init__(space, {p.name: p for p in coefs if isinstance(p, Parameter)}, name=name)
        self.pdfs = pdfs
        self._coefs = coefs
        self._yields = fracs is None
        if self._yields:
            self._yield = _SumOfYields(coefs)

    def _own_params(self) -> list[Parameter]:
        return [c for c in self._coefs if isinstance(c, Parameter)]

    def _submodels(self) -> list[Model]:
        return list(self.pdfs)

    @property
    def component_yields(self) -> list[Parameter | None] | None:
        """The yield of each component, in the order of ``pdfs`` (None for a sum with fractions).

        A component that lends a yield that is no single Parameter (itself a SumPdf with
        yields) gives None in its place.
        """
        if not self._yields:
            return None
        return [c if isinstance(c, Parameter) else None for c in self._coefs]

    def get_yield(self) -> tf.Tensor:
        """The sum of the yields (SumPdf with yields; else the model's own yield).

        Returns
        -------
        tf.Tensor
            float64 scalar.

        Raises
        ------
        ModelError
            The sum is not extended.
        """
        if not self._yields:
            return super().get_yield()
        return tf.add_n([c.value() for c in self._coefs])

    def fractions(self) -> tf.Tensor:
        """The K mixture fractions.

        Returns
        -------
        tf.Tensor
            float64, shape (K,); they sum to one.
        """
        values = [c.value() for c in self._coefs]
        if self._yields:
            total = tf.add_n(values)
            return tf.stack([v / total for v in values])
        return tf.stack([*values, 1.0 - tf.add_n(values)])

    def _pdf(self, data: Any) -> tf.Tensor:
        fr = self.fractions()
        return tf.add_n([fr[k] * p.pdf(data, raw=True) for k, p in enumerate(self.pdfs)])

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return self._pdf(x)

    def normalization(self) -> tf.Tensor:
        """1: a mixture of normalized densities.

        Returns
        -------
        tf.Tensor
            float64 scalar 1.
        """
        return tf.constant(1.0, tf.float64)

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        fr = self.fractions()
        return tf.add_n([fr[k] * p.integrate(lower, upper) for k, p in enumerate(self.pdfs)])

    def _integrate_bins(self, edges: tuple[float, ...]) -> tf.Tensor:
        # Each component's bin probabilities are its own cache: moving one component's
        # parameter recomputes only that component's bins.
        fr = self.fractions()
        return tf.add_n([fr[k] * p.integrate_bins(edges) for k, p in enumerate(self.pdfs)])

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # Each event picks its component by the fractions; every component draws n
        # candidates (K x n work, fixed shapes, a single trace).
        cum = tf.cumsum(self.fractions())
        u = rng().uniform([n], dtype=tf.float64) * cum[-1]
        idx = tf.minimum(tf.searchsorted(cum, u, side="right"), len(self.pdfs) - 1)
        candidates = tf.stack([p._sample_tensor(n) for p in self.pdfs], axis=1)  # (n, K, ...)
        return tf.gather(candidates, idx, axis=1, batch_dims=1)


class _ComponentYield:
    """A component's yield that is no single Parameter (a SumPdf with yields), as a coefficient."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def value(self) -> tf.Tensor:
        return self.model.get_yield()


class _SumOfYields:
    """Stands in for a yield Parameter of an extended SumPdf (``is_extended`` only)."""

    def __init__(self, coefs: list[Parameter]) -> None:
        self.coefs = coefs

    def value(self) -> tf.Tensor:
        return tf.add_n([c.value() for c in self.coefs])


class ProductPdf(Model):
    r"""A product :math:`\prod_k p_k` of models.

    Over disjoint observables (e.g. mass x decay time) the product is normalized
    when its factors are, and samples factor by factor. Over one shared
    one-dimensional space the product is normalized numerically.

    Parameters
    ----------
    pdfs : sequence of Model
        At least two models, over disjoint observables or all over one 1-D space.
    name : str, optional
        A label for reports; default ``'Product'``.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        Fewer than two models, or observables neither disjoint nor one shared 1-D space.

    Examples
    --------
    >>> from zcache.models import Space, Gaussian, Exponential, ProductPdf
    >>> m = ProductPdf([Gaussian(Space("m", 0.0, 2.0), 1.0, 0.2), Exponential(Space("t", 0.0, 5.0), -1.0)])
    >>> m.space.obs, round(float(m.integrate()), 12)
    (('m', 't'), 1.0)
    """

    def __init__(self, pdfs: Sequence[Model], *, name: str | None = None, extended: Any = None):
        pdfs = list(pdfs)
        if len(pdfs) < 2 or not all(isinstance(p, Model) for p in pdfs):
            raise ModelError("ProductPdf needs at least two zcache models.")
        obs = [o for p in pdfs for o in p.space.obs]
        self._disjoint = len(set(obs)) == len(obs)
        if self._disjoint:
            space = pdfs[0].space
            for p in pdfs[1:]:
                space = space * p.space
        elif all(p.space == pdfs[0].space for p in pdfs) and pdfs[0].space.n_obs == 1:
            space = pdfs[0].space
        else:
            raise ModelError(
                "ProductPdf factors must have disjoint observables, or all share one 1-D space; got "
                f"{[p.space for p in pdfs]}."
            )
        super().__init__(space, {}, name=name or "Product", extended=extended)
        self.pdfs = pdfs

    def _submodels(self) -> list[Model]:
        return list(self.pdfs)

    def _split(self, x: tf.Tensor) -> list[tf.Tensor]:
        """The columns of each factor, from a tensor in this model's observable order."""
        out, start = [], 0
        for p in self.pdfs:
            width = p.space.n_obs
            cols = x[:, start:start + width] if x.shape.rank == 2 else x
            out.append(cols[:, 0] if width == 1 and cols.shape.rank == 2 else cols)
            start += width
        return out

    def _pdf(self, data: Any) -> tf.Tensor:
        if self._disjoint and isinstance(data, Data) and data.obs is not None:  # each factor caches its columns
            return _product([p.pdf(data, raw=True) for p in self.pdfs])
        if self._disjoint:
            return self._unnormalized_pdf(self.space.select(data))
        return density(_product([p.pdf(data, raw=True) for p in self.pdfs]), self.normalization())

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        if self._disjoint:
            return _product([p.pdf(c, raw=True) for p, c in zip(self.pdfs, self._split(x), strict=True)])
        return _product([p.pdf(x, raw=True) for p in self.pdfs])

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        if not self._disjoint:
            return super()._raw_integral(lower, upper)
        out, start = [], 0
        for p in self.pdfs:
            width = p.space.n_obs
            out.append(p.integrate(lower[start:start + width], upper[start:start + width]))
            start += width
        return _product(out)

    @cached
    def normalization(self) -> tf.Tensor:
        """1 over disjoint observables; else the numerical integral of the product.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        if self._disjoint:
            return tf.constant(1.0, tf.float64)
        return super()._raw_integral(self.space.lower, self.space.upper)

    def _sample(self, n: tf.Tensor) -> Any:
        if not self._disjoint:
            return NotImplemented
        cols = []
        for p in self.pdfs:
            s = p._sample_tensor(n)
            cols.append(s[:, None] if s.shape.rank == 1 else s)
        return tf.concat(cols, axis=1)


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


def _product(parts: list[tf.Tensor]) -> tf.Tensor:
    out = parts[0]
    for part in parts[1:]:
        out = out * part
    return out
