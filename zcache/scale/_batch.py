r"""Fitting many datasets at once: a loss along a toy axis, and a batched minimizer.

A toy study fits one loss to many datasets. :class:`BatchedLoss` evaluates the loss and its
gradient for ``B`` parameter points on ``B`` datasets in one XLA-compiled call, and
:meth:`BatchedLoss.minimize` fits all ``B`` in one compiled program:

- **one toy = one substitution.** Each toy's parameter values and events stand in for the
  loss's Parameters and Data (``zcache._engine.context.substituted``, the mechanism a cache's
  backward pass uses), so the loss is the user's own code, traced once for one toy;
  ``tf.vectorized_map`` turns that graph into a batched one. A model built from zcache's
  building blocks needs no change; one whose ops TensorFlow cannot vectorize is refused with
  :class:`zcache.exceptions.BatchingError`, naming the op.
- **padding.** Datasets of different sizes are padded to one capacity with weight 0 (the
  shape-bucket rule of :class:`zcache.Data`): the loss sums ``w_i log p_i`` and counts
  :math:`\sum w_i` events, so padding rows count for nothing.
- **caches.** A cache that no toy input reaches (a normalization over fixed parameters, a
  phase-space integral) has one value for every toy: it is read once, eagerly, through its
  own cache (a hit when valid), and stands in for itself inside the batch. Every other cache
  is recomputed per toy, as its inputs differ per toy; nothing is stored.
- **checks.** Every zcache check of the loss (event ranges, finite values) becomes a per-toy
  flag: a toy that fails one is reported, not raised, and its fit is not valid.
- **minimizer.** :meth:`BatchedLoss.minimize` compiles its batched value and gradient with
  the lockstep BFGS of ``zcache._fitting.batched_bfgs`` (BFGS for every toy in one
  ``tf.while_loop``, then HESSE by differences of exact gradients, one Newton step, MIGRAD's
  EDM criterion) into one program; the covariance is :math:`2\,\mathrm{errordef}\,H^{-1}`.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.scale import BatchedLoss
>>> mu = zcache.Parameter("mu_batch", 0.0, lower=-1.0, upper=1.0)
>>> model = Gaussian(Space("x", -4.0, 4.0), mu, 1.0)
>>> rng = np.random.default_rng(1)
>>> loss = UnbinnedNLL(model, zcache.Data(rng.normal(size=300), obs="x"))
>>> toys = rng.normal(0.2, 1.0, size=(4, 300))           # four datasets of 300 events
>>> fit = BatchedLoss(loss, [mu]).minimize(np.zeros((4, 1)), toys)
>>> bool(fit.converged.all()), np.allclose(fit.values[:, 0], toys.mean(axis=1), atol=1e-2)
(True, True)
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.compile_cache import call_key, first_call
from .._engine.context import ENGINE_LOCK, finding_invariants, run_eagerly, substituted
from .._engine.dependencies import GRAPH
from .._engine.parameter import Parameter, set_values
from .._engine.tables import real_numbers
from .._engine.tf_internals import zcache_graphs
from .._engine.trace import forbid_in_trace
from .._engine.traced_checks import calling_jit, collecting
from .._fitting.batched_bfgs import EDM_MAX_FACTOR, covariances, lockstep_bfgs
from .._fitting.per_loss import alive, kept
from ..exceptions import BatchingError, DataDtypeError, ModelError, WeightSumError
from ..loss import UnbinnedNLL

__all__ = ["BatchedFit", "BatchedLoss", "padded_toys"]

#: BatchedLoss.of: per loss (weakly), per parameter tuple.
_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], BatchedLoss]] = weakref.WeakKeyDictionary()



@dataclass
class BatchedFit:
    r"""The results of :meth:`BatchedLoss.minimize`, one row per toy.

    Attributes
    ----------
    values, errors : ndarray
        (B, n): the minimum and the HESSE errors :math:`\\sqrt{C_{jj}}` (with ``hesse=False``,
        MIGRAD's estimates from BFGS's inverse Hessian).
    covariance : ndarray
        (B, n, n): :math:`2\\,\\mathrm{errordef}\\,H^{-1}` (NaN where H is not positive definite;
        with ``hesse=False``, H is the inverse of BFGS's estimate).
    fmin, edm : ndarray
        (B,): the loss at the minimum and the estimated distance to it (with the final Hessian;
        with ``hesse=False``, BFGS's own).
    converged : ndarray
        (B,) bool: EDM below MIGRAD's bound, H positive definite, every check held, no
        parameter at a limit. A toy that is not converged should be refitted (``run_toys``
        refits it with MIGRAD and flags it).
    checks_ok : ndarray
        (B,) bool: every zcache check of the loss held for this toy (events in range, finite values).
    nfcn : ndarray
        (B,) int: gradient evaluations spent on this toy (all toys run in lockstep).
    """

    values: np.ndarray
    errors: np.ndarray
    covariance: np.ndarray
    fmin: np.ndarray
    edm: np.ndarray
    converged: np.ndarray
    checks_ok: np.ndarray
    nfcn: np.ndarray


def padded_toys(datasets: Sequence[np.ndarray], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Datasets of different sizes as one batch: events padded to ``rows``, and weights 0 on the padding.

    Padding repeats each dataset's last event (a valid event, so no check fails on it); its weight 0
    makes it count for nothing in :meth:`BatchedLoss.value_and_gradient` and :meth:`BatchedLoss.minimize`.

    Parameters
    ----------
    datasets : sequence of ndarray
        Each toy's events, (n_b, ...), every n_b between 1 and ``rows``.
    rows : int
        The common number of rows.

    Returns
    -------
    events : ndarray
        (B, rows, ...).
    weights : ndarray
        (B, rows): 1 on events, 0 on padding.

    Examples
    --------
    >>> import numpy as np
    >>> from zcache.scale import padded_toys
    >>> events, weights = padded_toys([np.array([1.0, 2.0]), np.array([3.0])], 3)
    >>> events.tolist(), weights.tolist()
    ([[1.0, 2.0, 2.0], [3.0, 3.0, 3.0]], [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    """
    events = np.empty((len(datasets), rows, *datasets[0].shape[1:]), dtype=datasets[0].dtype)
    weights = np.zeros((len(datasets), rows))
    for b, d in enumerate(datasets):
        events[b, : len(d)] = d
        events[b, len(d):] = d[-1]
        weights[b, : len(d)] = 1.0
    return events, weights


def _batched_map(fn: Any, elems: tuple[Any, ...]) -> Any:
    """``tf.vectorized_map`` with no silent fallback to a loop; refusals become BatchingError."""
    try:
        return tf.vectorized_map(fn, elems, fallback_to_while_loop=False)
    except (ValueError, NotImplementedError, TypeError) as err:
        if isinstance(err, (BatchingError, ModelError)):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BatchingError(
            f"the loss cannot be evaluated for many toys at once: TensorFlow could not vectorize it "
            f"({first}). Models built from zcache.models, zcache.shapes and zcache.amplitude "
            "vectorize; a model with Python-side control flow on tensor values, py_function or "
            "stateful ops does not. Run the toys one by one (run_toys(..., batch=None))."
        ) from err


class BatchedLoss:
    """An unbinned loss evaluated for ``B`` datasets and parameter points at once.

    Parameters
    ----------
    loss : zcache.loss.UnbinnedNLL
        The loss (or an ExtendedUnbinnedNLL); its dataset is the one each toy replaces.
    params : sequence of Parameter
        The parameters each toy has its own value of (the fitted ones). Every other parameter
        keeps its current value, read at each call (no recompile when it changes).

    Raises
    ------
    ModelError
        ``loss`` is not an UnbinnedNLL, or ``params`` is empty or holds a parameter twice.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_bl", 0.0)
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.zeros(3), obs="x"))
    >>> f, g, ok = BatchedLoss(loss, [mu]).value_and_gradient(np.array([[0.0], [1.0]]), np.zeros((2, 3)))
    >>> np.round(g[:, 0], 3).tolist(), ok.tolist()    # about d/dmu of sum (x - mu)^2 / 2 at x = 0
    ([0.0, 3.0], [True, True])
    """

    def __init__(self, loss: UnbinnedNLL, params: Sequence[Parameter]) -> None:
        if not isinstance(loss, UnbinnedNLL):
            raise ModelError(
                f"BatchedLoss needs a single-dataset loss (UnbinnedNLL or ExtendedUnbinnedNLL), got "
                f"{type(loss).__name__}."
            )
        params = list(params)
        if not params or len({id(p) for p in params}) != len(params):
            raise ModelError("BatchedLoss needs at least one parameter, each once.")
        # Held weakly: a study keeps its BatchedLoss (and compiled programs) for as long as the
        # loss lives (``BatchedLoss.of``), and that cache must not keep the loss alive.
        self._loss = weakref.ref(loss)
        self.params = params
        ids = {id(p) for p in params}
        #: The loss's other parameters: their current values are passed in at each call.
        self.fixed = [p for p in loss.get_params(floating=None) if id(p) not in ids]
        self._lower = np.array([-np.inf if p.lower is None else p.lower for p in params])
        self._upper = np.array([np.inf if p.upper is None else p.upper for p in params])
        self._programs: dict[Any, Any] = {}
        self._compiled_calls: set[Any] = set()  # (program, shapes) whose first call ran (compile_cache)
        self._invariants: tuple[tuple[int, frozenset[int]], list[Any]] | None = None

    @classmethod
    def of(cls, loss: UnbinnedNLL, params: Sequence[Parameter]) -> BatchedLoss:
        """The BatchedLoss of ``loss`` and ``params``, made once and kept while the loss lives.

        Its compiled programs are kept with it: a second study on the same loss compiles nothing.

        Parameters
        ----------
        loss : zcache.loss.UnbinnedNLL
            The loss.
        params : sequence of Parameter
            The toys' parameters.

        Returns
        -------
        BatchedLoss
        """
        return kept(_KEPT, loss, params, cls)

    @property
    def loss(self) -> UnbinnedNLL:
        """The loss (raises ModelError once it has been garbage collected)."""
        return alive(self._loss, "BatchedLoss", ModelError)

    @property
    def served_caches(self) -> list[Any]:
        """The caches that no toy input reaches, read once per call through their own caches.

        Found at the first call, and again after the dependency graph changed.
        """
        if self._invariants is None:
            return []
        return [c for c in (ref() for ref in self._invariants[1]) if c is not None]

    # -- the per-toy graph ------------------------------------------------------------------
    def _substitutes(self, x: tf.Tensor, events: tf.Tensor, weights: tf.Tensor, fixed: tf.Tensor,
                     served: dict[int, tf.Tensor]) -> dict[Any, Any]:
        data = self.loss.data
        out: dict[Any, Any] = dict(served)
        out.update({p.node_id: x[j] for j, p in enumerate(self.params)})
        out.update({p.node_id: fixed[j] for j, p in enumerate(self.fixed)})
        out[data.node_id] = events
        if data.weights_data is not None:
            out[data.weights_data.node_id] = weights
        else:
            out[("weights", data.node_id)] = weights
        return out

    def _per_toy(self, x: tf.Tensor, events: tf.Tensor, weights: tf.Tensor, fixed: tf.Tensor,
                 served: dict[int, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The loss, its gradient and whether every check held, for one toy (traced once)."""
        with zcache_graphs():  # zcache's gradients (tf_internals items 10, 17)
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(x)
                with substituted(self._substitutes(x, events, weights, fixed, served)), collecting() as checks:
                    f = self.loss.value()
            g = tape.gradient(f, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        ok = tf.math.is_finite(f) & tf.reduce_all(tf.math.is_finite(g))
        if checks:
            ok = ok & tf.reduce_all(tf.stack([c for c, _, _ in checks]))
        return f, g, ok

    def _vg(self, x: tf.Tensor, events: tf.Tensor, weights: tf.Tensor, fixed: tf.Tensor,
            served: dict[int, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        # ``fixed`` has one row per toy: a pinned parameter (``pinned=``) differs between toys
        return _batched_map(lambda a: self._per_toy(a[0], a[1], a[2], a[3], served), (x, events, weights, fixed))

    # -- inputs -----------------------------------------------------------------------------
    def _fixed_values(self, toys: int, pinned: Mapping[Parameter, Any] | None = None) -> tf.Tensor:
        """(toys, k): the other parameters' values, one row per toy (passed in: a change recompiles nothing).

        A parameter in ``pinned`` takes its given value in each toy (a scalar, or one per toy);
        every other one its current value in all.
        """
        rows = np.tile(np.array([float(p) for p in self.fixed], dtype=np.float64), (toys, 1))
        for j, values in self._pinned_columns(toys, pinned).items():
            rows[:, j] = values
        return tf.constant(rows.reshape(toys, len(self.fixed)))

    def _pinned_columns(self, toys: int, pinned: Mapping[Parameter, Any] | None) -> dict[int, np.ndarray]:
        """Column of ``self.fixed`` -> (toys,) values, checked against each parameter's limits."""
        if not pinned:
            return {}
        where = {id(p): j for j, p in enumerate(self.fixed)}
        out = {}
        for p, values in pinned.items():
            if not isinstance(p, Parameter) or id(p) not in where:
                fitted = isinstance(p, Parameter) and any(p is q for q in self.params)
                raise ModelError(
                    f"pinned: {getattr(p, 'name', p)!r} is "
                    + ("one of the fitted parameters: leave it out of params to pin it." if fitted
                       else "not a parameter of the loss.")
                )
            values = real_numbers(values, f"BatchedLoss: the values pinned for '{p.name}'").astype(np.float64)
            if values.shape not in ((), (1,), (toys,)):
                raise ModelError(f"pinned: '{p.name}' takes a scalar or one value per toy ({toys}), "
                                 f"got shape {values.shape}.")
            values = np.broadcast_to(values, (toys,)).copy()
            low = -np.inf if p.lower is None else p.lower
            high = np.inf if p.upper is None else p.upper
            bad = ~((values >= low) & (values <= high))  # NaN is outside too
            if bad.any():
                raise ModelError(
                    f"pinned: '{p.name}' = {values[bad][:3].tolist()} is outside its limits [{low}, {high}] "
                    "(or not finite); give values within them."
                )
            out[where[id(p)]] = values
        return out

    def _pinned_ids(self, pinned: Mapping[Parameter, Any] | None) -> frozenset[int]:
        return frozenset(id(p) for p in (pinned or ()))

    def _inputs(self, x: Any, events: Any, weights: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        data = self.loss.data
        x = real_numbers(x, "BatchedLoss: the parameter values x").astype(np.float64)
        # the dtype rule of Data.set_data: a cast would drop an imaginary part or read a mask as values
        events = real_numbers(events, f"BatchedLoss: the events for '{data.name}'")
        if not np.can_cast(events.dtype, data.np_dtype, "same_kind"):
            raise DataDtypeError(f"BatchedLoss: '{data.name}' has dtype {data.np_dtype}; events of dtype "
                                 f"{events.dtype} cannot be cast safely; nothing was evaluated.")
        events = events.astype(data.np_dtype, copy=False)
        if x.ndim != 2 or x.shape[1] != len(self.params):
            raise ModelError(f"x must have shape (toys, {len(self.params)}), got {x.shape}.")
        if events.ndim != 2 + len(data.event_shape) or events.shape[2:] != data.event_shape:
            raise ModelError(
                f"events must have shape (toys, rows{''.join(', ' + str(d) for d in data.event_shape)}) "
                f"like '{data.name}', got {events.shape}."
            )
        if events.shape[0] != x.shape[0]:
            raise ModelError(f"x has {x.shape[0]} toys, events {events.shape[0]}.")
        weights = np.ones(events.shape[:2]) if weights is None else \
            real_numbers(weights, "BatchedLoss: the weights").astype(np.float64)
        if weights.shape != events.shape[:2]:
            raise ModelError(f"weights must have shape {events.shape[:2]}, got {weights.shape}.")
        bad = np.flatnonzero(~(weights.sum(axis=1) > 0.0))  # padding rows have weight 0: the events' sum
        if bad.size:
            raise WeightSumError(
                f"the weights of toy(s) {bad[:5].tolist()} sum to zero or less: a likelihood of them is undefined "
                "(all 0 is flat, a negative sum unbounded); nothing was evaluated.")
        return x, events, weights

    def _served(self, x0: np.ndarray, events0: np.ndarray, weights0: np.ndarray, fixed0: tf.Tensor,
                pinned: frozenset[int] = frozenset()) -> dict[int, tf.Tensor]:
        """The caches no toy input reaches, each read through its cache (a hit when valid).

        Which caches they are is found once (and again after the dependency graph changed, or
        another set of parameters is pinned per toy) by running the loss's Python code eagerly
        for toy 0 with its inputs substituted. A pinned parameter is a toy input: a cache that
        reads it is recomputed per toy.
        """
        if self._invariants is None or self._invariants[0] != (GRAPH.version, pinned):
            sub = self._substitutes(tf.constant(x0), tf.constant(events0), tf.constant(weights0), fixed0, {})
            # The loss's own Python code, run eagerly (a traced graph would read the Variables).
            data = self.loss.data
            varying = {p.node_id for p in self.params} | {data.node_id} | \
                {p.node_id for p in self.fixed if id(p) in pinned}
            if data.weights_data is not None:
                varying.add(data.weights_data.node_id)
            with run_eagerly(), substituted(sub), finding_invariants(varying) as found, collecting():
                self.loss.value()
            self._invariants = ((GRAPH.version, pinned),
                                [weakref.ref(c) for c in {c.node_id: c for c in found}.values()])
        return {c.node_id: c.value() for c in self.served_caches}

    # -- public ----------------------------------------------------------------------------
    def value_and_gradient(self, x: Any, events: Any, weights: Any = None, *,
                           pinned: Mapping[Parameter, Any] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The loss and its gradient for each toy: parameters ``x[b]`` on events ``events[b]``.

        Parameters
        ----------
        x : array_like
            (B, n): one row of parameter values per toy (in the order of ``params``).
        events : array_like
            (B, rows, ...): each toy's events, padded to a common number of rows.
        weights : array_like, optional
            (B, rows): event weights; 0 on padding rows. Default: all 1.
        pinned : mapping of Parameter to array_like, optional
            Parameters of the loss that are not fitted (not in ``params``) with a value per toy
            (or one for all): a profile scan's tested values, a hypothesis test's POI. Every
            other parameter keeps its current value.

        Returns
        -------
        value : ndarray
            (B,) the loss of each toy.
        gradient : ndarray
            (B, n).
        ok : ndarray
            (B,) bool: every zcache check held and the values are finite.

        Raises
        ------
        ModelError
            Inputs of the wrong shape; a pinned parameter that is fitted, not the loss's, or
            given values outside its limits.
        DataDtypeError
            ``x``, events or weights that are not real numbers (complex, bool, text...); nothing
            was evaluated.
        WeightSumError
            A toy's weights sum to zero or less.
        BatchingError
            The loss cannot be vectorized.
        IllegalInGraphModeError
            Called while a graph is traced (it runs compiled programs itself: call it eagerly).
        """
        forbid_in_trace("BatchedLoss.value_and_gradient")
        x, events, weights = self._inputs(x, events, weights)
        fixed = self._fixed_values(len(x), pinned)
        served = self._served(x[0], events[0], weights[0], fixed[0], self._pinned_ids(pinned))
        fn = self._program("vg", served)
        x, events, weights = tf.constant(x), tf.constant(events), tf.constant(weights)
        # The first call per program and shapes compiles: the compile cache checks before, records after.
        shapes = call_key((x, events, weights, fixed, *served.values()))
        with ENGINE_LOCK, calling_jit(True), first_call(self._compiled_calls,
                                                        None if shapes is None else (tuple(served), shapes)):
            f, g, ok = fn(x, events, weights, fixed, served)
        return f.numpy(), g.numpy(), ok.numpy()

    def minimize(self, start: Any, events: Any, weights: Any = None, *, hinv: Any = None,
                 maxiter: int = 200, edm_max: float | None = None,
                 pinned: Mapping[Parameter, Any] | None = None, hesse: bool = True) -> BatchedFit:
        """Fit every toy: BFGS in lockstep, then a Hessian (HESSE) and one Newton step per toy.

        The starting inverse Hessian is shared by every toy: ``hinv``, or the inverse of the
        loss's own Hessian (:meth:`zcache.loss.BaseLoss.hessian_at`) on toy 0 at its start (the
        loss's dataset is set to toy 0 for it, and restored).

        Parameters
        ----------
        start : array_like
            (B, n) or (n,): starting values (clipped into the limits).
        events, weights : array_like
            As in :meth:`value_and_gradient`.
        hinv : array_like, optional
            (n, n): the starting inverse Hessian, shared by every toy.
        maxiter : int
            Bound on BFGS steps (each is one batched gradient evaluation).
        edm_max : float, optional
            Convergence bound on the EDM; default MIGRAD's ``0.002 * 0.1 * errordef``.
        pinned : mapping of Parameter to array_like, optional
            As in :meth:`value_and_gradient`: conditional fits, each toy with its own values of
            these parameters (all the points of a profile scan, or toys x tested values, in one
            program).
        hesse : bool
            True (default): the final Hessian by differences of exact gradients (HESSE), one
            Newton step, and the EDM and errors from that Hessian. False, for minima without
            errors (the points of a profile scan): as MIGRAD before HESSE, a toy has converged
            when the EDM from BFGS's own inverse-Hessian estimate ``V`` is below ``edm_max``;
            ``edm`` is that EDM, ``covariance`` ``2 errordef V`` (an estimate,
            as MIGRAD's), and each toy takes ``n + 1`` evaluations fewer (and fewer BFGS steps).

        Returns
        -------
        BatchedFit

        Raises
        ------
        ModelError
            Inputs of the wrong shape, ``maxiter`` < 1, a bad ``pinned`` (as in
            :meth:`value_and_gradient`).
        DataDtypeError
            Start values, events or weights that are not real numbers (complex, bool, text...).
        WeightSumError
            A toy's weights sum to zero or less.
        BatchingError
            The loss cannot be vectorized.
        IllegalInGraphModeError
            Called while a graph is traced.
        """
        forbid_in_trace("BatchedLoss.minimize")
        events = np.asarray(events)
        start = real_numbers(start, "BatchedLoss.minimize: start").astype(np.float64)
        if start.ndim == 1:
            start = np.tile(start, (events.shape[0] if events.ndim >= 2 else 1, 1))
        x0, events, weights = self._inputs(start, events, weights)
        if int(maxiter) < 1:
            raise ModelError(f"maxiter must be >= 1, got {maxiter!r}.")
        x0 = np.clip(x0, self._lower, self._upper)
        fixed = self._fixed_values(len(x0), pinned)
        served = self._served(x0[0], events[0], weights[0], fixed[0], self._pinned_ids(pinned))
        errordef = float(self.loss.errordef)
        if hinv is None:
            with set_values(self.fixed, fixed[0].numpy()) if pinned else contextlib.nullcontext():
                hinv = self.start_hinv(x0[0], events[0], weights[0])
        hinv = np.asarray(hinv, dtype=np.float64)
        if hinv.shape != (len(self.params),) * 2:
            raise ModelError(f"hinv must have shape {(len(self.params),) * 2}, got {hinv.shape}.")
        edm_max = EDM_MAX_FACTOR * errordef if edm_max is None else float(edm_max)
        kind = "fit" if hesse else "fit_without_hesse"
        fn = self._program(kind, served)
        shapes = (kind, tuple(served), np.shape(x0), np.shape(events), np.shape(weights))
        # A new program or shapes may compile (or load an entry): the compile cache checks its folder
        # then, as for value_and_gradient; a later call runs the program TensorFlow holds in memory
        # and pays nothing (a scan calls one program per chunk, each only two evaluations).
        with ENGINE_LOCK, calling_jit(True), first_call(self._compiled_calls, shapes):
            out = fn(tf.constant(x0), tf.constant(events), tf.constant(weights), fixed, served,
                     tf.constant(np.broadcast_to(hinv, (len(x0), *hinv.shape)).copy()),
                     tf.constant(self._lower), tf.constant(self._upper), tf.constant(int(maxiter), tf.int32),
                     tf.constant(edm_max, tf.float64))
        x, f, hess, edm, ok, converged, nfcn = (t.numpy() for t in out)
        cov, errors, posdef = covariances(hess, errordef)
        converged = converged & posdef
        near = np.isclose(x, self._lower, rtol=0, atol=1e-10) | np.isclose(x, self._upper, rtol=0, atol=1e-10)
        at_limit = np.any(near, axis=1)
        converged = converged & ok & ~at_limit & np.isfinite(errors).all(axis=1)
        return BatchedFit(values=x, errors=errors, covariance=cov, fmin=f, edm=edm, converged=converged,
                          checks_ok=ok, nfcn=nfcn)

    def scan_fits(self, start: Any, events: Any, weights: Any, pinned: Mapping[Parameter, Any], *, hinv: Any,
                  edm_max: float, chunk: int, capacity: int, maxiter: int = 200) -> BatchedFit:
        """Conditional fits of many rows on one dataset (a scan's points): one program over all of them.

        What :meth:`minimize` with ``hesse=False`` does for ``B`` toys, for ``R`` rows that share one
        dataset and differ in their start and ``pinned`` values: the dataset is passed once (not once
        per row), so what depends only on it (the events' range checks) is computed once per
        evaluation, and the rows run in chunks of ``chunk`` rows (lockstep BFGS per chunk: a chunk
        waits for its slowest row, and a chunk's event values stay in the CPU's caches) inside one
        compiled call, a loop over the chunks, with no Python between them. The program's shape is
        ``capacity`` rows: every call with up to ``capacity`` rows (a scan's passes, a contour's
        rounds) runs the same compiled program, and only the chunks that hold rows are fitted.

        Parameters
        ----------
        start : array_like
            (R, n) starting values (clipped into the limits).
        events, weights : array_like
            The one dataset, (rows, ...) and (rows,) (0 on padding rows).
        pinned : mapping of Parameter to array_like
            As in :meth:`minimize`, one value per row (or one for all).
        hinv : array_like
            (n, n) the starting inverse Hessian of every row.
        edm_max : float
            A row has converged when the EDM from BFGS's inverse Hessian is below it (MIGRAD's rule).
        chunk : int
            Rows per lockstep BFGS.
        capacity : int
            The most rows (rounded up to whole chunks): the compiled program's shape.
        maxiter : int
            Bound on BFGS steps per chunk; 0: no step (a row converges only at its start, one
            evaluation each).

        Returns
        -------
        BatchedFit
            As :meth:`minimize`'s with ``hesse=False``.

        Raises
        ------
        ModelError
            Inputs of the wrong shape; ``chunk`` < 1, more rows than ``capacity``, ``maxiter`` < 0;
            a bad ``pinned``.
        DataDtypeError, WeightSumError, BatchingError, IllegalInGraphModeError
            As :meth:`minimize`.
        """
        forbid_in_trace("BatchedLoss.scan_fits")
        start = real_numbers(start, "BatchedLoss.scan_fits: start").astype(np.float64)
        if start.ndim != 2 or not len(start):
            raise ModelError(f"scan_fits: start must have shape (rows, {len(self.params)}), got {start.shape}.")
        chunk = int(chunk)
        if chunk < 1 or int(maxiter) < 0:
            raise ModelError(f"scan_fits: chunk must be >= 1 and maxiter >= 0, got {chunk!r} and {maxiter!r}.")
        capacity = -(-max(int(capacity), 1) // chunk) * chunk
        rows = len(start)
        if rows > capacity:
            raise ModelError(f"scan_fits: {rows} rows is more than the capacity {capacity}.")
        # one dataset, checked as toy 0 of a batch (the checks of value_and_gradient)
        x0, ev, wt = self._inputs(start[:1], np.asarray(events)[None], None if weights is None else
                                  np.asarray(weights)[None])
        x0 = np.clip(start, self._lower, self._upper)
        fixed = self._fixed_values(rows, pinned).numpy()
        served = self._served(x0[0], ev[0], wt[0], tf.constant(fixed[0]), self._pinned_ids(pinned))
        hinv = np.asarray(hinv, dtype=np.float64)
        if hinv.shape != (len(self.params),) * 2:
            raise ModelError(f"hinv must have shape {(len(self.params),) * 2}, got {hinv.shape}.")
        # rows past the last one repeat it: each chunk is whole, and chunks past the rows are not run
        pad = np.concatenate([np.arange(rows), np.full(capacity - rows, rows - 1)])
        kind = ("scan", chunk)
        fn = self._program(kind, served)
        shapes = (kind, tuple(served), (capacity, len(self.params)), ev.shape[1:])
        with ENGINE_LOCK, calling_jit(True), first_call(self._compiled_calls, shapes):
            out = fn(tf.constant(x0[pad]), tf.constant(ev[0]), tf.constant(wt[0]), tf.constant(fixed[pad]), served,
                     tf.constant(hinv), tf.constant(self._lower), tf.constant(self._upper),
                     tf.constant(int(maxiter), tf.int32), tf.constant(float(edm_max), tf.float64),
                     tf.constant(-(-rows // chunk), tf.int32))
        x, f, hess, edm, ok, converged, nfcn = (t.numpy()[:rows] for t in out)
        cov, errors, posdef = covariances(hess, float(self.loss.errordef))
        near = np.isclose(x, self._lower, rtol=0, atol=1e-10) | np.isclose(x, self._upper, rtol=0, atol=1e-10)
        converged = converged & posdef & ok & ~np.any(near, axis=1) & np.isfinite(errors).all(axis=1)
        return BatchedFit(values=x, errors=errors, covariance=cov, fmin=f, edm=edm, converged=converged,
                          checks_ok=ok, nfcn=nfcn)

    def start_hinv(self, start: Any, events: Any, weights: Any = None) -> np.ndarray:
        """The inverse of the loss's own Hessian at ``start`` on one dataset: a BFGS start for every toy.

        :meth:`zcache.loss.BaseLoss.hessian_at` on ``events`` (the loss's dataset is set to them and
        restored). Eigenvalues are taken by magnitude, so the result is positive definite even
        away from a minimum.

        Parameters
        ----------
        start : array_like
            (n,) parameter values.
        events : array_like
            One toy's events (rows, ...).
        weights : array_like, optional
            Its weights (rows where the weight is 0 are dropped for unweighted data).

        Returns
        -------
        ndarray
            (n, n), symmetric positive definite (the identity if the Hessian is not finite).
        """
        data = self.loss.data
        events = np.asarray(events)
        before = data.numpy(), (data.weights_data.numpy() if data.is_weighted else None)
        try:
            if data.is_weighted:
                data.set_data(events, weights=np.ones(len(events)) if weights is None else weights)
            else:
                data.set_data(events if weights is None else events[np.asarray(weights) != 0])
            hess = np.asarray(self.loss.hessian_at(np.asarray(start, dtype=np.float64), self.params))
        finally:
            data.set_data(before[0], weights=before[1])
        w, v = np.linalg.eigh(0.5 * (hess + hess.T))
        if not np.all(np.isfinite(w)) or np.max(np.abs(w)) == 0.0:
            return np.eye(len(self.params))
        w = np.maximum(np.abs(w), 1e-12 * np.max(np.abs(w)))  # a descent direction even off a minimum
        return (v / w) @ v.T

    # -- the compiled programs ------------------------------------------------------------
    def _program(self, kind: Any, served: dict[int, tf.Tensor]) -> Any:
        key = (kind, tuple(served))
        fn = self._programs.get(key)
        if fn is None:
            if isinstance(kind, tuple):  # ("scan", chunk)
                body = functools.partial(self._scan_body, chunk=kind[1])
            else:
                body = {"vg": self._vg, "fit": self._fit_body, "fit_without_hesse": self._fit_without_hesse_body}[kind]
            fn = self._programs[key] = tf.function(body, jit_compile=True, autograph=False, reduce_retracing=True)
        return fn

    def _fit_body(self, x0: tf.Tensor, events: tf.Tensor, weights: tf.Tensor, fixed: tf.Tensor,
                  served: dict[int, tf.Tensor], hinv0: tf.Tensor, lower: tf.Tensor, upper: tf.Tensor,
                  maxiter: tf.Tensor, edm_max: tf.Tensor, hesse: bool = True) -> tuple[tf.Tensor, ...]:
        # A toy whose minimum lies beyond a limit (a signal yield >= 0 fitted to a background-only
        # toy) stops once the others have converged: without the active set it stepped into the
        # limit until its line search stalled, and its whole batch with it.
        return lockstep_bfgs(lambda x: self._vg(x, events, weights, fixed, served), x0, hinv0, lower, upper, maxiter,
                             edm_max, active_set=True, hesse=hesse)

    def _fit_without_hesse_body(self, *args: Any) -> tuple[tf.Tensor, ...]:
        return self._fit_body(*args, hesse=False)

    def _scan_body(self, x0: tf.Tensor, events: tf.Tensor, weights: tf.Tensor, fixed: tf.Tensor,
                   served: dict[int, tf.Tensor], hinv0: tf.Tensor, lower: tf.Tensor, upper: tf.Tensor,
                   maxiter: tf.Tensor, edm_max: tf.Tensor, chunks: tf.Tensor, *, chunk: int) -> tuple[tf.Tensor, ...]:
        capacity, n = x0.shape
        count = capacity // chunk
        xs = tf.reshape(x0, (count, chunk, n))
        fs = tf.reshape(fixed, (count, chunk, fixed.shape[1]))
        hinv = tf.broadcast_to(hinv0, (chunk, n, n))

        def fit(i: tf.Tensor) -> tuple[tf.Tensor, ...]:
            rows_fixed = fs[i]
            # the events are not mapped: one tensor for every row, what depends on it alone computed once
            def vg(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
                return _batched_map(lambda a: self._per_toy(a[0], events, weights, a[1], served), (x, rows_fixed))
            return lockstep_bfgs(vg, xs[i], hinv, lower, upper, maxiter, edm_max, active_set=True, hesse=False)

        # the results of every chunk, filled in as the loop runs (chunks past ``chunks`` stay zero)
        init = (tf.zeros((count, chunk, n), tf.float64), tf.zeros((count, chunk), tf.float64),
                tf.zeros((count, chunk, n, n), tf.float64), tf.zeros((count, chunk), tf.float64),
                tf.zeros((count, chunk), tf.bool), tf.zeros((count, chunk), tf.bool),
                tf.zeros((count, chunk), tf.int32))

        def body(i: tf.Tensor, *acc: tf.Tensor) -> tuple[tf.Tensor, ...]:
            out = fit(i)
            return (i + 1, *(tf.tensor_scatter_nd_update(a, [[i]], o[None]) for a, o in zip(acc, out, strict=True)))

        _, *acc = tf.while_loop(lambda i, *_: i < chunks, body, (tf.constant(0), *init))
        return tuple(tf.reshape(a, (capacity, *a.shape[2:])) for a in acc)
