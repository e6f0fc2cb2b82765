r"""Chunked evaluation: a likelihood over more events than one tensor should hold.

A :class:`ChunkedLoss` is an unbinned NLL whose events are split into :class:`Chunks`,
each its own :class:`zcache.Data`. Its value, gradient and Hessian are sums over the
chunks, evaluated **one chunk at a time**: each chunk has its own loss, its own traced
graph and its own caches (an amplitude's columns are cached per dataset, so per chunk),
so the memory one evaluation needs is one chunk's working set, not the whole sample's.
The chunks' events and caches stay resident between calls; a cache memory budget
(:func:`zcache.set_cache_budget`) bounds what the caches hold.

.. math::

    \mathrm{NLL}(\theta) = \sum_{k} \Big(-\sum_{i \in k} w_i \log p(x_i;\theta)\Big)
        \;[+\; \nu - N \log \nu]_{\text{extended, once}}
        \;+\; \text{constraints (once)}

Events come from arrays, from a ``.npy`` file read block by block (never whole, and not
memory-mapped, so the file's pages do not count towards the process's memory), from a ROOT
tree through ``uproot.iterate``, or from any iterable of blocks.

Design notes
------------
- **Sums in Python, in a fixed order.** Each chunk's result comes from its own
  :meth:`zcache.loss.BaseLoss.value_gradient_at` (one traced call, which sets the parameters
  inside it; the first chunk's call writes them, the others find them unchanged, so no cache
  is invalidated twice); the client adds them in float64, in chunk order, whatever the order
  of evaluation. Results equal the unchunked loss to rounding (1e-12 relative here).
- **Chunks are visited forwards, then backwards.** With a cache budget smaller than all the
  chunks' caches, least-recent-use eviction under a cyclic scan would evict exactly the chunk
  needed next (every read a miss); alternating the direction reuses the most recent half.
- **No compiled whole-fit program** (:attr:`ChunkedLoss.evaluates_in_parts`): it would put every chunk
  into one graph. :class:`zcache.minimize.Minuit` runs MIGRAD on the objective.
- The Hessian is the sum of the chunks' Hessians: central differences of each chunk's exact
  gradients (one gradient's memory), or with ``exact_hessian=True`` second-order autodiff per
  chunk, through its caches whether or not precompute bypassed them.
- **Freed memory goes back to the system after each chunk** (:func:`release_freed_memory`,
  glibc's ``malloc_trim``): TensorFlow's buffers of a few MiB come from glibc's heap once its
  mmap threshold has grown, and the pages a chunk's evaluation freed would stay in the
  process's resident set, fragmented, growing call after call.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.scale import Chunks, ChunkedLoss
>>> mu = zcache.Parameter("mu_chunks", 0.2)
>>> model = Gaussian(Space("x", -5.0, 5.0), mu, 1.0)
>>> events = np.random.default_rng(1).normal(0.3, 1.0, 1000)
>>> chunks = Chunks.from_array(events, 300)
>>> chunks.sizes, chunks.nevents
([300, 300, 300, 100], 1000)
>>> loss = ChunkedLoss(model, chunks)
>>> whole = UnbinnedNLL(model, zcache.Data(events))
>>> bool(abs(float(loss.value()) - float(whole.value())) < 1e-9)
True
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.budget import set_cache_budget
from .._engine.cached_tensor import CachedTensor
from .._engine.context import ENGINE_LOCK
from .._engine.data import Data
from .._engine.parameter import Parameter
from .._engine.tables import REAL_KINDS, dtype_advice
from .._engine.tf_internals import leave_to_python
from .._engine.trace import forbid_in_trace
from ..exceptions import DataDtypeError, DataError, DataShapeError, ModelError
from ..loss import BaseLoss, GaussianConstraint, UnbinnedNLL, model_parameters
from ..models import Model, unique_parameters

__all__ = ["Chunks", "ChunkedLoss", "npy_blocks", "release_freed_memory"]


# -- reading ------------------------------------------------------------------------------------
def npy_blocks(path: str | os.PathLike, size: int, *, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
    """The rows of a ``.npy`` file, ``size`` at a time, read with plain file reads.

    Only one block is in memory at a time, and the file is not memory-mapped (the pages of a
    mapping count towards the process's resident memory while it is mapped).

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy`` file (C order; integers or floats), events along the first axis.
    size : int
        Rows per block (the last block may be shorter).
    start, stop : int, optional
        The rows to read, ``start <= row < stop`` (default: all).

    Yields
    ------
    ndarray
        The next block, shape ``(rows, *event_shape)``.

    Raises
    ------
    DataError
        The file is not a C-ordered ``.npy`` array, or ``size`` / ``start`` / ``stop`` are out of range.
    DataDtypeError
        The array does not hold real numbers (complex, bool, text, ...), found from the header
        before any row is read.

    Examples
    --------
    >>> import tempfile, os, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.arange(10.0).reshape(5, 2))
    >>> [b[:, 0].tolist() for b in npy_blocks(path, 2)]
    [[0.0, 2.0], [4.0, 6.0], [8.0]]
    """
    size = _positive(size, "size")
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = header(f)
        except ValueError as err:
            raise DataError(f"{path} is not a .npy file ({err}).") from err
        if fortran and len(shape) > 1:
            raise DataError(f"{path} holds a Fortran-ordered array; save it in C order (np.ascontiguousarray).")
        if dtype.hasobject or not shape:
            raise DataError(f"{path} must hold a numeric array with an events axis, got dtype {dtype}, shape {shape}.")
        if dtype.kind not in REAL_KINDS:
            raise DataDtypeError(f"{path} holds dtype {dtype}; events must be real numbers (integers or floats): "
                                 f"{dtype_advice(dtype)}; nothing read.")
        n = shape[0]
        stop = n if stop is None else int(stop)
        if not 0 <= start <= stop <= n:
            raise DataError(f"rows {start}..{stop} are outside the {n} rows of {path}.")
        row = int(np.prod(shape[1:], dtype=np.int64))
        offset = f.tell()
        for first in range(start, stop, size):
            rows = min(size, stop - first)
            f.seek(offset + first * row * dtype.itemsize)
            block = np.fromfile(f, dtype=dtype, count=rows * row)
            if block.size != rows * row:
                raise DataError(f"{path} ended early: expected {n} rows.")
            yield block.reshape((rows, *shape[1:]))


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or value != int(value) or value < 1:
        raise DataError(f"{what} must be a positive whole number of events, got {value!r}.")
    return int(value)


# -- memory ---------------------------------------------------------------------------------------
def _find_malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc (Linux); absent elsewhere
    except (AttributeError, OSError):
        return None


_MALLOC_TRIM = _find_malloc_trim()


def release_freed_memory() -> bool:
    """Return the heap memory the process has freed to the operating system (glibc's ``malloc_trim(0)``).

    :class:`ChunkedLoss` calls it after each chunk. Where the C library has no such call (not
    glibc) it does nothing.

    Returns
    -------
    bool
        Whether the C library has the call (glibc), not whether memory was released.

    Examples
    --------
    >>> from zcache.scale import release_freed_memory
    >>> isinstance(release_freed_memory(), bool)
    True
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


# -- the chunks -----------------------------------------------------------------------------------
class Chunks:
    """Events split into datasets of at most ``size`` events, each a :class:`zcache.Data`.

    Build them with :meth:`from_array`, :meth:`from_npy`, :meth:`from_root` or
    :meth:`from_batches`, or from datasets you made. Every chunk has the same event shape,
    column names and weighting.

    Parameters
    ----------
    datasets : sequence of zcache.Data
        The chunks, in order.
    name : str, optional
        A label (default ``'chunks'``).

    Raises
    ------
    DataError
        No datasets, something that is not a Data, or chunks that differ in event shape,
        column names or whether they are weighted.
    """

    def __init__(self, datasets: Sequence[Data], *, name: str | None = None) -> None:
        datasets = list(datasets)
        if not datasets:
            raise DataError("Chunks needs at least one dataset (no events to split).")
        if not all(isinstance(d, Data) for d in datasets):
            raise DataError(f"Chunks holds zcache.Data objects, got {[type(d).__name__ for d in datasets]}.")
        first = datasets[0]
        for d in datasets[1:]:
            if (d.event_shape, d.obs, d.is_weighted) != (first.event_shape, first.obs, first.is_weighted):
                raise DataShapeError(
                    f"chunk '{d.name}' differs from '{first.name}' in event shape, columns or weights "
                    f"({d.event_shape}, {d.obs}, weighted={d.is_weighted} vs {first.event_shape}, {first.obs}, "
                    f"weighted={first.is_weighted}); every chunk must be alike."
                )
        self.datasets: list[Data] = datasets
        self.name = name or "chunks"

    def __repr__(self) -> str:
        return f"<Chunks '{self.name}': {len(self)} chunks, {self.nevents} events>"

    def __len__(self) -> int:
        return len(self.datasets)

    def __getitem__(self, k: Any) -> Any:
        return self.datasets[k]

    def __iter__(self) -> Iterator[Data]:
        return iter(self.datasets)

    @property
    def sizes(self) -> list[int]:
        """Events per chunk (padding not counted)."""
        return [int(d.nevents) for d in self.datasets]

    @property
    def nevents(self) -> int:
        """Events in all chunks."""
        return sum(self.sizes)

    @property
    def is_weighted(self) -> bool:
        """Whether the chunks carry event weights."""
        return self.datasets[0].is_weighted

    def numpy(self) -> np.ndarray:
        """All events as one array (for small samples: plots, checks).

        Returns
        -------
        ndarray
        """
        return np.concatenate([d.numpy() for d in self.datasets])

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_batches(cls, batches: Iterable[Any], *, name: str | None = None, obs: Any = None) -> Chunks:
        """One chunk per block of an iterable: arrays, or ``(events, weights)`` pairs.

        The iterable is consumed one block at a time, so a generator that reads a file keeps one
        block in memory besides the chunks made so far.

        Parameters
        ----------
        batches : iterable
            Arrays of events (events first), or ``(events, weights)`` pairs.
        name : str, optional
            Label; chunk ``k`` is named ``f"{name}[{k}]"``.
        obs : str or sequence of str, optional
            Column names (as for :class:`zcache.Data`).

        Returns
        -------
        Chunks

        Raises
        ------
        DataError
            No blocks, an empty block, or blocks that differ (see :class:`Chunks`); the Data
            checks of each block (finite values, dtypes, weights).
        """
        name = name or "chunks"
        datasets = []
        for k, batch in enumerate(batches):
            events, weights = batch if isinstance(batch, tuple) else (batch, None)
            datasets.append(Data(events, name=f"{name}[{k}]", obs=obs, weights=weights))
        return cls(datasets, name=name)

    @classmethod
    def from_array(cls, array: Any, size: int, *, name: str | None = None, obs: Any = None,
                   weights: Any = None) -> Chunks:
        """``array`` in chunks of ``size`` events (the last may be smaller).

        Parameters
        ----------
        array : array_like
            Events, first axis (a ``np.memmap`` is read one chunk at a time).
        size : int
            Events per chunk.
        name, obs : optional
            As for :meth:`from_batches`.
        weights : array_like, optional
            One weight per event.

        Returns
        -------
        Chunks

        Raises
        ------
        DataError
            ``size`` not a positive whole number, no events, weights of another length, and
            the checks of :class:`zcache.Data`.
        """
        size = _positive(size, "size")
        n = len(array)
        if weights is not None and len(weights) != n:
            raise DataShapeError(f"{len(weights)} weights for {n} events; give one weight per event.")

        def blocks() -> Iterator[Any]:
            for a in range(0, n, size):
                block = np.array(array[a:a + size])  # a copy: a memmap's pages are read once
                yield block if weights is None else (block, np.array(weights[a:a + size]))

        return cls.from_batches(blocks(), name=name, obs=obs)

    @classmethod
    def from_npy(cls, path: str | os.PathLike, size: int, *, name: str | None = None, obs: Any = None,
                 start: int = 0, stop: int | None = None) -> Chunks:
        """The events of a ``.npy`` file, read ``size`` rows at a time (:func:`npy_blocks`).

        Parameters
        ----------
        path : str or os.PathLike
            The file (C-ordered array, events first).
        size : int
            Events per chunk.
        name, obs : optional
            As for :meth:`from_batches` (default name: the file's stem).
        start, stop : int, optional
            Read only these rows (a part of the file: what one worker of a distributed fit holds).

        Returns
        -------
        Chunks

        Raises
        ------
        DataError
            As for :func:`npy_blocks` and :class:`zcache.Data`.
        """
        return cls.from_batches(npy_blocks(path, size, start=start, stop=stop),
                                name=name or os.path.splitext(os.path.basename(path))[0], obs=obs)

    @classmethod
    def from_root(cls, path: str | os.PathLike, tree: str, obs: str | Sequence[str], size: int, *,
                  weights: str | None = None, name: str | None = None) -> Chunks:
        """Branches of a ROOT tree, ``size`` entries at a time (``uproot.iterate``; the ``root`` extra).

        Parameters
        ----------
        path : str or os.PathLike
            The ROOT file.
        tree : str
            The tree's name.
        obs : str or sequence of str
            The branches to read, in column order.
        size : int
            Entries per chunk.
        weights : str, optional
            A branch of event weights.
        name : str, optional
            Label (default: the tree's name).

        Returns
        -------
        Chunks

        Raises
        ------
        ImportError
            uproot is not installed (``pip install zcache[root]``).
        DataError
            A missing tree or branch, and the checks of :class:`zcache.Data`.
        """
        try:
            import uproot
        except ImportError as err:
            raise ImportError("Chunks.from_root reads ROOT files with uproot: pip install zcache[root]") from err
        size = _positive(size, "size")
        names = [obs] if isinstance(obs, str) else list(obs)
        branches = [*names, *([weights] if weights else [])]
        with uproot.open(path) as file:
            if tree not in file:
                raise DataError(f"Chunks.from_root: no tree '{tree}' in {path}; it holds {list(file.keys(cycle=False))}.")
            missing = [b for b in branches if b not in file[tree].keys()]
            if missing:
                raise DataError(f"Chunks.from_root: tree '{tree}' of {path} has no branch {missing}.")

        def blocks() -> Iterator[Any]:
            for arrays in uproot.iterate({os.fspath(path): tree}, branches, step_size=size, library="np"):
                events = np.column_stack([arrays[b] for b in names]) if len(names) > 1 else arrays[names[0]]
                yield events if weights is None else (events, arrays[weights])

        return cls.from_batches(blocks(), name=name or tree, obs=names if len(names) > 1 else names[0])


# -- the loss -----------------------------------------------------------------------------------
class _FactorizedPart(UnbinnedNLL):
    r"""One chunk's :math:`-\sum_i w_i \log f(x_i)` of a model whose density is :math:`f / Z`: no normalization."""

    def _events_term(self) -> tuple[tf.Tensor, tf.Tensor]:
        log_f = self.model.log_unnormalized(self.data)
        weights = self.data.weights  # padded data have weights (0 on the padding rows)
        if weights is None:
            return -tf.reduce_sum(log_f), tf.cast(self.data.nevents, tf.float64)
        return -tf.reduce_sum(weights * log_f), tf.reduce_sum(weights)


class _OnceTerms(BaseLoss):
    r"""What a chunked loss adds once, not per chunk: :math:`W \log Z`, the extended term, the constraints."""

    def __init__(self, model: Model, chunks: Chunks, extended: bool, normalization: bool,
                 constraints: Sequence[GaussianConstraint] | None) -> None:
        self.model = model
        self.extended = extended
        self.normalization = normalization
        super().__init__(constraints)
        if extended or normalization:  # N (or the sum of weights) over all chunks: a data-only cache, computed once
            def count() -> tf.Tensor:
                return tf.add_n([tf.reduce_sum(d.weights) if d.is_weighted else tf.cast(d.nevents, tf.float64)
                                 for d in chunks])
            self._count = CachedTensor(count, name=f"{chunks.name}.events")

    def _loss_params(self) -> list[Parameter]:
        yield_parameter = [self.model.yield_parameter] if self.extended else []
        shape = self.model.get_params(floating=None) if self.normalization else []
        return unique_parameters([p for p in [*yield_parameter, *shape, *(q for c in self.constraints for q in c.params)]
                                  if p is not None])

    def _value(self) -> tf.Tensor:
        value = tf.constant(0.0, tf.float64)
        if self.normalization:  # sum_i w_i log Z: the chunks left it out
            value = value + self._count.value() * tf.math.log(self.model.normalization())
        if self.extended:
            nu = self.model.get_yield()
            value = value + nu - self._count.value() * tf.math.log(nu)
        return value


class ChunkedLoss(BaseLoss):
    r"""The unbinned NLL of ``model`` on events in :class:`Chunks`, evaluated a chunk at a time.

    A fit calls it as it calls :class:`zcache.loss.UnbinnedNLL` (through
    :meth:`~zcache.loss.BaseLoss.objective`): each value, gradient or Hessian is the sum over
    the chunks of one traced call per chunk (see the module's documentation).

    Parameters
    ----------
    model : zcache.models.Model
        The density.
    chunks : Chunks
        The events.
    extended : bool
        Add the Poisson term :math:`\nu - N \log \nu` of the model's yield, once (``N``: the
        events, or the sum of weights, of all chunks).
    constraints : sequence of GaussianConstraint, optional
        Penalties, added once.
    exact_hessian : bool
        ``False`` (default): the Hessian is central differences of each chunk's exact gradients,
        whose memory is one gradient's. ``True``: second-order autodiff, through the caches,
        faster but holding about one gradient's memory per fitted parameter (vectorized over them).

    Attributes
    ----------
    parts : list of zcache.loss.UnbinnedNLL
        One loss per chunk.
    factorized : bool
        The model :attr:`~zcache.models.Model.factorizes`: each chunk computes
        :math:`-\sum_i w_i \log f(x_i)` and :math:`\sum_i w_i \log Z` is added once per evaluation
        (an amplitude model's integral over its phase-space sample is then computed once, not once
        per chunk). Otherwise each chunk evaluates the normalized density.

    Raises
    ------
    ModelError
        ``model`` is not a Model, ``chunks`` not a :class:`Chunks`, or ``extended`` with a
        model that has no yield.
    DataRangeError
        A chunk has events outside the model's space.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.scale import Chunks, ChunkedLoss
    >>> mu = zcache.Parameter("mu_chunked", 0.0)
    >>> loss = ChunkedLoss(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), Chunks.from_array([0.5, 1.0, 1.5], 2))
    >>> value, grad = loss.value_gradient_at([0.0])
    >>> grad.numpy().round(12).tolist()          # -(sum x - n mu)
    [-3.0]
    """

    #: Never one program over all chunks (see :attr:`zcache.loss.BaseLoss.evaluates_in_parts`).
    evaluates_in_parts = True

    def __init__(self, model: Model, chunks: Chunks, *, extended: bool = False,
                 constraints: Sequence[GaussianConstraint] | None = None, exact_hessian: bool = False) -> None:
        if not isinstance(model, Model):
            raise ModelError(f"ChunkedLoss needs a zcache.models.Model, got {model!r}.")
        if not isinstance(chunks, Chunks):
            raise ModelError(f"ChunkedLoss needs its events as zcache.scale.Chunks, got {type(chunks).__name__}.")
        if extended and not model.is_extended:
            raise ModelError(f"{model!r} is not extended: give it a yield (extended=...), or use extended=False.")
        self.model = model
        self.chunks = chunks
        self.extended = bool(extended)
        #: Whether the normalization is added once per evaluation (:attr:`zcache.models.Model.factorizes`).
        self.factorized = bool(model.factorizes)
        part = _FactorizedPart if self.factorized else UnbinnedNLL
        self.parts: list[UnbinnedNLL] = [part(model, d) for d in chunks]
        self._once = _OnceTerms(model, chunks, self.extended, self.factorized, constraints)
        self.exact_hessian = bool(exact_hessian)
        super().__init__(constraints)
        self._backwards = False

    def __repr__(self) -> str:
        return f"<ChunkedLoss of '{self.model.name}' on {self.chunks!r}>"

    def _loss_params(self) -> list[Parameter]:
        return model_parameters(self.model, self.constraints, with_yield=self.extended)

    def datasets(self) -> list[Data]:
        """Every chunk (and its weights, for weighted events).

        Returns
        -------
        list of zcache.Data
        """
        return [d for part in self.parts for d in part.datasets()]

    def weighted_event_terms(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """The weighted per-event terms of every chunk (see :meth:`zcache.loss.UnbinnedNLL.weighted_event_terms`).

        Returns
        -------
        list of (tf.Tensor, tf.Tensor)
        """
        if not self.chunks.is_weighted:
            return []
        log_nu = tf.math.log(self.model.get_yield()) if self.extended else None
        terms = []
        for part in self.parts:
            for ell, w in part.weighted_event_terms():
                terms.append((ell if log_nu is None else ell + log_nu, w))
        return terms

    def whole_sample_terms(self) -> list[Callable[[], tf.Tensor]]:
        r"""The expected yield :math:`\nu` (``extended``) and the constraints: what is not a sum over events.

        The normalization :math:`W \log Z` a factorized loss adds once is :math:`w_i \log Z` per
        event, so part of the sum over events.

        Returns
        -------
        list of callable
            See :meth:`zcache.loss.BaseLoss.whole_sample_terms`.
        """
        return [*([self.model.get_yield] if self.extended else []), *super().whole_sample_terms()]

    # -- one program over everything: for value() and precompute's discovery ----------------------
    def _value(self) -> tf.Tensor:
        return tf.add_n([part._total() for part in self.parts]) + self._once._total()

    def _total_unscoped(self) -> tf.Tensor:
        return self._value()  # the constraints are in the once-terms

    def __zcache_evaluate__(self) -> tuple[()]:
        """The precompute protocol: each chunk's loss, one after another, keeping no cache's value.

        Precompute classifies the caches only after this evaluation: every cache it computes is
        stored until then, those a floating parameter reaches too (an amplitude model's (N, K)
        matrix). For all chunks at once that was the peak of a 1e8-event fit (about twice its data
        and fixed columns), so the values are evicted as they are stored (a budget
        of 0 bytes for the evaluation): the structure is what precompute needs, and the first
        call fills the caches that stay.
        """
        with set_cache_budget(0):
            for part in self.parts:
                part.__zcache_evaluate__()
                release_freed_memory()  # as after each chunk of a call
            self._once.__zcache_evaluate__()
        return ()

    # -- chunk by chunk -----------------------------------------------------------------------------
    def _each(self, call: Callable[[BaseLoss], Any]) -> list[Any]:
        """``call(part)`` for every chunk and the once-terms, in chunk order (visited alternately forwards and backwards)."""
        # Python sums of per-chunk calls: inside a trace there would be no numbers to add.
        forbid_in_trace("ChunkedLoss evaluation (it calls each chunk's traced function from Python)")
        once = self.extended or self.factorized or self.constraints
        parts: list[BaseLoss] = [*self.parts, *([self._once] if once else [])]
        results: list[Any] = [None] * len(parts)
        # Each chunk's call sets the parameters: no other thread may move them between two chunks.
        with ENGINE_LOCK:
            order = range(len(parts) - 1, -1, -1) if self._backwards else range(len(parts))
            self._backwards = not self._backwards
            for k in order:
                results[k] = call(parts[k])
                release_freed_memory()  # else the chunks' freed buffers stay resident, fragmented
        return results

    def value(self) -> tf.Tensor:
        """The loss at the current parameter values, summed chunk by chunk.

        Returns
        -------
        tf.Tensor
            float64 scalar.

        Raises
        ------
        FitError
            A chunk's value is NaN or infinite.
        """
        # tf.add_n, not a Python sum: a user's GradientTape around this call sees each chunk's call
        return tf.add_n(self._each(lambda part: part.value()))

    def value_gradient(self, params: Sequence[Parameter] | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """The loss and its gradient, summed chunk by chunk.

        Parameters
        ----------
        params : sequence of Parameter, optional
            The parameters to differentiate by; default :attr:`zcache.loss.BaseLoss.params`.

        Returns
        -------
        value : tf.Tensor
            float64 scalar.
        gradient : tf.Tensor
            float64, one entry per parameter.
        """
        params = self._param_list(params)
        return self._summed(self._each(lambda part: part.value_gradient(params)), len(params), 0.0)

    def value_at(self, x: Any, params: Sequence[Parameter] | None = None, offset: float | None = None) -> tf.Tensor:
        """Set ``params`` to ``x`` and return the loss minus ``offset``, summed chunk by chunk.

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : sequence of Parameter, optional
            Default: :attr:`zcache.loss.BaseLoss.params` (the floating parameters now).
        offset : float, optional
            Subtracted once; default :attr:`zcache.loss.BaseLoss.offset`.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        params, x, offset = self._param_list(params), np.asarray(x, dtype=np.float64), self._offset_value(offset)
        values = self._each(lambda part: part.value_at(x, params, offset=0.0))
        return tf.constant(sum(float(v) for v in values) - offset, tf.float64)

    def value_gradient_at(self, x: Any, params: Sequence[Parameter] | None = None,
                          offset: float | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Like :meth:`value_at`, with the gradient.

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : sequence of Parameter, optional
            Default: :attr:`zcache.loss.BaseLoss.params` (the floating parameters now).
        offset : float, optional
            Subtracted once; default :attr:`zcache.loss.BaseLoss.offset`.

        Returns
        -------
        value : tf.Tensor
            float64 scalar, the loss minus ``offset``.
        gradient : tf.Tensor
            float64, one entry per parameter.
        """
        params, x, offset = self._param_list(params), np.asarray(x, dtype=np.float64), self._offset_value(offset)
        results = self._each(lambda part: part.value_gradient_at(x, params, offset=0.0))
        return self._summed(results, len(params), offset)

    def hessian_at(self, x: Any, params: Sequence[Parameter] | None = None, *, exact: bool | None = None) -> tf.Tensor:
        """Set ``params`` to ``x`` and return the Hessian of the loss, summed chunk by chunk.

        Parameters
        ----------
        x : array_like
            One value per parameter; the parameters are left there.
        params : sequence of Parameter, optional
            Default: :attr:`zcache.loss.BaseLoss.params` (the floating parameters now).
        exact : bool, optional
            As for :meth:`zcache.loss.BaseLoss.hessian_at`; by default ``exact_hessian``:
            second-order autodiff per chunk, else central differences of each chunk's exact
            gradients.

        Returns
        -------
        tf.Tensor
            float64, shape (n, n), symmetric.
        """
        params, x = self._param_list(params), np.asarray(x, dtype=np.float64)
        if exact is None:
            exact = self.exact_hessian
        hessians = self._each(lambda part: part.hessian_at(x, params, exact=exact).numpy())
        return tf.constant(np.sum(hessians, axis=0))

    def _offset_value(self, offset: float | None) -> float:
        return self.offset if offset is None else float(offset)

    @staticmethod
    def _summed(results: list[tuple[Any, Any]], n: int, offset: float) -> tuple[tf.Tensor, tf.Tensor]:
        value = sum(float(v) for v, _ in results) - offset
        gradient = np.sum([g.numpy() for _, g in results], axis=0) if results else np.zeros(n)
        return tf.constant(value, tf.float64), tf.constant(gradient, tf.float64)


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
