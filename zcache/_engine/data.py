"""Data: a dataset (events along the first axis), an input of every computation, backed by a ``tf.Variable``.

``set_data`` is the *only* mutation path: it writes the Variable and invalidates every
dependent cache before returning (eagerly with Python-side flag writes, inside a trace with
flag writes in the graph), and returns an object that, used as a ``with`` block, restores the
previous data on exit. Event weights are a second Data (``_Weights``); shape buckets pad the
events to a size class (:func:`size_class`). Reading tables (pandas, numpy structured arrays,
ROOT files) lives in ``_tables``; ``Data.from_*`` only build a dataset from its selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ..exceptions import (
    DataDtypeError,
    DataError,
    DataShapeError,
    EmptyDataError,
    InvalidDataError,
    WeightSumError,
)
from .context import CONTEXT, record_read, substitute
from .dependencies import DATA, GRAPH
from .inputs import WRITES, input_changed, invalidate_in_graph, variable_name
from .restorer import Restorer
from .tables import REAL_KINDS, Selection, dtype_advice, obs_names, real_numbers, select_numpy, select_pandas, select_root
from .tensorlike import StandIn, TensorLike
from .tf_internals import eager_variable
from .trace import journal, note_mutation, require_managed_trace
from .traced_checks import checks_hold, require

__all__ = [
    "Data",
    "data_snapshot",
    "size_class",
    "storage_rows",
    "undo_data_writes",
]


class Data(TensorLike):
    """A dataset (events along the first axis) backed by a shape-relaxed ``tf.Variable``.

    ``set_data`` may change the number of events without retracing any function.
    Floating data are stored as float64, integers as int64.

    **Dtypes.** Events are real numbers: floats (stored as float64) or integers (int64; a model
    reads them as float64). Complex, boolean, object, text, record, date and duration arrays are
    refused with a :class:`~zcache.exceptions.DataDtypeError` that says what to do, at every
    door (here, ``set_data``, the ``from_*`` readers, weights), because a cast to float64 would
    drop an imaginary part or turn a selection into values without a word. A model of one's own
    that takes complex inputs gets them with ``dtype=complex`` (never an observable of a
    zcache model: those refuse complex data).

    Parameters
    ----------
    array : array_like
        Rank >= 1, at least one event, all values finite.
    name : str, optional
        A label for reports and the dependency graph (default ``"data"``).
    obs : str, sequence of str or Space, optional
        Names of the observables, one per column (a single name for rank-1 data); models
        pick their columns by name. A :class:`zcache.models.Space` stands for its names (its
        range is not applied here: use :meth:`from_pandas` or :meth:`from_numpy` with
        ``space=`` to cut). ``None``: columns in the order of the model's observables.
    weights : array_like, optional
        One finite weight per event (sWeights, efficiency weights; negative allowed), with a
        positive sum (else :class:`~zcache.exceptions.WeightSumError`). They
        live in a second :class:`Data` (:attr:`weights_data`), so a change of weights
        invalidates exactly what reads them and never retraces; every zcache loss honours
        them (see :mod:`zcache.loss`). Without weights the dataset stays unweighted for life.
    dtype : {None, float, complex}, optional
        ``None`` (default): float64 for floating input, int64 for integers. ``float``: float64
        also for integers. ``complex``: complex128, for an input of a model of one's own that
        computes with complex numbers (integers, floats and complex numbers accepted).
    capacity : int or 'auto', optional
        Pad the events to a fixed number of rows (a *shape bucket*), so that ``set_data`` with
        another number of events keeps every shape: nothing is retraced and an XLA-compiled
        loss (``zcache.set_jit_mode``) is not recompiled — the toy-study case. ``'auto'``:
        the next size class above the number of events (8 classes per power of two, e.g.
        10,240 rows for 10,000 events: at most 12.5 % padding, and a Poisson-varying toy
        size stays in one or two classes); an int: at least that many rows. More events than
        the capacity grow it to their size class (one recompile under XLA); it never shrinks.
        Padding rows repeat the last event (valid input for every model) and have weight 0 in
        :attr:`weights`, which every loss honours; ``numpy()``, ``nevents`` and
        ``weights_data.numpy()`` give the events without the padding, as do the per-event
        results of models (``pdf``, ``log_pdf``: N rows, see :meth:`unpadded`), while
        :meth:`value` is the padded tensor (of ``capacity`` rows) that models compute on.
        Memory: the padded rows (at most 1/8 more with ``'auto'``) and a weight per row. ``None`` (default): no padding.

    Raises
    ------
    DataShapeError, DataDtypeError, EmptyDataError, InvalidDataError
        If ``array``, ``obs`` or ``weights`` is not usable as a dataset.
    WeightSumError
        The weights sum to zero or less (a likelihood of them is undefined).
    DataError
        For a ``capacity`` that is neither None, ``'auto'`` nor a positive int, or a ``dtype``
        that is neither None, float nor complex.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> x = zcache.Data(np.array([1.0, 2.0, 3.0]), name="x")
    >>> x.nevents
    3
    >>> _ = x.set_data(np.array([4.0, 5.0]))
    >>> x.numpy().tolist()
    [4.0, 5.0]
    >>> w = zcache.Data(np.array([1.0, 2.0]), name="m", weights=[0.5, -0.25])
    >>> w.is_weighted, w.weights.numpy().tolist()
    (True, [0.5, -0.25])
    >>> p = zcache.Data(np.array([1.0, 2.0, 3.0]), name="p", capacity=4)
    >>> p.value().numpy().tolist(), p.weights.numpy().tolist(), p.numpy().tolist()
    ([1.0, 2.0, 3.0, 3.0], [1.0, 1.0, 1.0, 0.0], [1.0, 2.0, 3.0])
    """

    _KINDS = {"f": np.float64, "i": np.int64, "u": np.int64}
    _DTYPES = {np.dtype(np.float64): np.dtype(np.float64), np.dtype(np.complex128): np.dtype(np.complex128)}
    #: What padding rows hold: copies of the last event (events) or zeros (weights).
    _ZERO_PADDING = False

    def __init__(self, array: Any, name: str | None = None, obs: str | tuple[str, ...] | list[str] | None = None,
                 weights: Any = None, capacity: int | str | None = None, dtype: Any = None) -> None:
        arr = _as_array(array, name or "data")
        self.name = name or "data"
        self.np_dtype = self._stored_dtype(arr, dtype)
        if arr.ndim < 1:
            raise DataShapeError(
                f"Data '{self.name}' needs at least one axis (events first), got a scalar; "
                "wrap single values in a list."
            )
        self.event_shape = tuple(arr.shape[1:])
        self.obs = None if obs is None else obs_names(obs, self.event_shape, self.name)
        arr = self._checked(arr)
        w = None if weights is None else _checked_weights(weights, arr.shape[0], self.name)  # before creating
        n = arr.shape[0]
        #: Rows of the padded storage (None: not padded).
        self.capacity: int | None = _capacity_for(capacity, n, self.name)
        stored = self._padded(arr)
        self._var = eager_variable(
            stored, shape=tf.TensorShape([None, *self.event_shape]), trainable=False, name=variable_name(self.name)
        )
        self._rows = stored.shape[0]  # rows stored after the last eager write (see storage_rows)
        # The number of events of padded data, written with the events (in a graph too).
        self._n_var = None if self.capacity is None else eager_variable(
            np.int64(n), shape=tf.TensorShape([]), trainable=False, name=variable_name(self.name) + "_n")
        self.node_id = GRAPH.add_node(self, DATA, self.name)
        self._user_weights = w is not None
        # Weights are a Data of their own: snapshots, stand-ins in backward passes, undo on a failed
        # call and invalidation then work for them with no code of their own. Padded data always
        # have them (1 per event, 0 per padding row): losses sum over events with them.
        if w is None and self.capacity is not None and not self._ZERO_PADDING:
            w = np.ones(n)
        self._weights = None if w is None else _Weights(w, name=f"{self.name}:weights", capacity=self.capacity)

    def __repr__(self) -> str:
        padded = "" if self.capacity is None else f" capacity={self.capacity}"
        return (f"<zcache.Data '{self.name}' shape=(?, {', '.join(map(str, self.event_shape))}) "
                f"dtype={self.np_dtype}{padded}>")

    def _stored_dtype(self, arr: np.ndarray, dtype: Any) -> np.dtype:
        """The dtype a new dataset stores ``arr`` in, or a named error (nothing created)."""
        if dtype is not None:
            try:
                wanted = self._DTYPES.get(np.dtype(dtype))
            except TypeError:
                wanted = None
            if wanted is None:
                raise DataError(f"Data '{self.name}': dtype must be None, float or complex, got {dtype!r}; "
                                "nothing created.")
            if arr.dtype.kind not in REAL_KINDS + wanted.kind:
                raise DataDtypeError(f"Data '{self.name}' (dtype={wanted}): got an array of dtype {arr.dtype}: "
                                     f"{dtype_advice(arr.dtype)}; nothing created.")
            return wanted
        if arr.dtype.kind not in self._KINDS:
            raise DataDtypeError(
                f"Data '{self.name}' must be numeric (integers or floats), got dtype {arr.dtype}: "
                f"{dtype_advice(arr.dtype)}; nothing created."
            )
        return np.dtype(self._KINDS[arr.dtype.kind])

    def _dtype_refusal(self, dtype: Any, what: str) -> str | None:
        """Why values of ``dtype`` cannot be written to this dataset (None: they can)."""
        dtype = np.dtype(dtype)
        allowed = REAL_KINDS + ("c" if self.np_dtype.kind == "c" else "")
        if dtype.kind not in allowed:
            return (f"Data '{self.name}' has dtype {self.np_dtype}; {what} of dtype {dtype} cannot be cast "
                    f"safely ({dtype_advice(dtype)}); data unchanged.")
        if not np.can_cast(dtype, self.np_dtype, "same_kind"):
            return (f"Data '{self.name}' has dtype {self.np_dtype}; {what} of dtype {dtype} cannot be cast "
                    f"safely; data unchanged. Pass values that cast safely to {self.np_dtype}.")
        return None

    def _padded(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` padded to the capacity (grown first if it holds more events)."""
        if self.capacity is None:
            return arr
        n = arr.shape[0]
        if n > self.capacity:
            self.capacity = size_class(n)
        out = np.zeros((self.capacity, *arr.shape[1:]), dtype=arr.dtype)
        out[:n] = arr
        if not self._ZERO_PADDING:
            out[n:] = arr[-1]
        return out

    def _padded_in_graph(self, tensor: tf.Tensor) -> tf.Tensor:
        """``tensor`` padded in a graph to the storage's current number of rows."""
        n = tf.shape(tensor)[0]
        rows = tf.range(tf.shape(self._var)[0])
        padded = tf.gather(tensor, tf.clip_by_value(rows, 0, tf.maximum(n - 1, 0)))
        if self._ZERO_PADDING:
            keep = tf.reshape(rows < n, [-1] + [1] * len(self.event_shape))
            padded = tf.where(keep, padded, tf.zeros_like(padded))
        return padded

    def numpy(self) -> np.ndarray:
        """The events as a numpy array (without the padding of padded data)."""
        arr = self.value().numpy()
        return arr if self.capacity is None else arr[: self.nevents]

    @property
    def variable(self) -> tf.Variable:
        """The backing ``tf.Variable``. Never assign to it: use :meth:`set_data`.

        Reading it counts as a read of the data (a cache whose function uses it depends on it).
        """
        record_read(self)
        stand_in = substitute(self.node_id)  # a cache's backward pass: the forward pass's data
        return self._var if stand_in is None else StandIn(stand_in)

    @property
    def nevents(self) -> Any:
        """Number of events (an int eagerly, a scalar tensor inside a trace); padding not counted."""
        n = self._count()
        return n if tf.inside_function() else int(n)

    def _count(self) -> tf.Tensor:
        """The number of events as an int64 tensor, recorded as a read of the data.

        A cache whose function counts events depends on the data as much as one that reads
        them: an extended loss's :math:`N` computed once and kept must be recomputed by
        ``set_data`` (it was not, before the read was recorded here).
        """
        record_read(self)
        if self._n_var is not None:
            return self._n_var.read_value()
        stand_in = substitute(self.node_id)  # a cache's backward pass: the forward pass's events
        return tf.shape(self._var if stand_in is None else stand_in, out_type=tf.int64)[0]

    @property
    def mask(self) -> tf.Tensor | None:
        """1.0 for each event and 0.0 for each padding row of padded data (float64); None if not padded."""
        if self._n_var is None:
            return None
        return tf.cast(tf.range(tf.shape(self._var, out_type=tf.int64)[0]) < self._count(), tf.float64)

    def value(self) -> tf.Tensor:
        """The stored data as a tensor (recorded as a read): of padded data, ``capacity`` rows.

        This is the input every model and cache computes on, padding included, so that its
        shape stays fixed from one ``set_data`` to the next (see ``capacity``). The rows past
        :attr:`nevents` of padded data repeat the last event: use :meth:`numpy` (events only),
        :meth:`unpadded` or :attr:`mask` to leave them out. Per-event results of the models
        (``pdf``, ``log_pdf``, ``unnormalized_pdf``) already have one row per event.
        """
        record_read(self)
        stand_in = substitute(self.node_id)  # a cache's backward pass: the forward pass's data
        out = self._var.value() if stand_in is None else stand_in
        return tf.stop_gradient(out) if CONTEXT.constant_data else out  # see context.constant_data

    def unpadded(self, values: Any) -> Any:
        """``values`` (one row per row of :meth:`value`) without the padding rows: one row per event.

        The one rule for every per-event result that reaches a user: sliced to :attr:`nevents`
        (eagerly, and inside a trace by the event count written with the data, so a traced or
        XLA-compiled function returns one row per event for every size). Unpadded data:
        ``values`` as they are.

        Parameters
        ----------
        values : tf.Tensor or array_like
            Rows along the first axis, as many as :meth:`value` has.

        Returns
        -------
        tf.Tensor or array_like
            The first :attr:`nevents` rows (``values`` itself for unpadded data).

        Examples
        --------
        >>> import numpy as np, zcache
        >>> p = zcache.Data(np.array([1.0, 2.0, 3.0]), name="u", capacity=4)
        >>> p.unpadded(p.value()).numpy().tolist()
        [1.0, 2.0, 3.0]
        """
        if self._n_var is None:
            return values
        return values[: self._count()]

    @property
    def is_weighted(self) -> bool:
        """Whether the dataset was created with ``weights=`` (fixed for its life)."""
        return self._user_weights

    @property
    def weights(self) -> tf.Tensor | None:
        """The event weights, a float64 tensor with one entry per row of :meth:`value`.

        None for unweighted data that are not padded. Padded data have 0 on every padding row
        (and 1 on the events of unweighted data), so a weighted sum over :meth:`value` is a sum
        over the events. Reading them is a read of :attr:`weights_data` (a cache that uses them
        depends on them).
        """
        if self._weights is None:  # a batched evaluation may stand in weights (padding) for each toy
            return substitute(("weights", self.node_id))
        return self._weights.value()

    @property
    def weights_data(self) -> Data | None:
        """The :class:`Data` that holds the weights (None for unweighted data that are not padded).

        Losses list it among their datasets, so fit results snapshot the weights with the events.
        Its ``numpy()`` holds one weight per event (no padding).
        """
        return self._weights

    # -- construction from tables ------------------------------------------------------------
    @classmethod
    def from_pandas(cls, df: Any, obs: str | Sequence[str], space: Any = None, cut: Any = None,
                    name: str | None = None, weights: Any = None) -> Data:
        """A dataset from columns of a ``pandas.DataFrame``, optionally cut to a range and a selection.

        Events outside ``space``'s range are dropped (as zfit does; the limits are inclusive,
        like ``Space.inside``, and a NaN fails them), as are events that fail ``cut``. Every
        check runs before the dataset is created: on an error nothing is created.

        Parameters
        ----------
        df : pandas.DataFrame
            The table, one row per event.
        obs : str or sequence of str
            The columns to load, in this order; they become the dataset's ``obs``.
        space : object, optional
            A range, e.g. a :class:`zcache.models.Space`: anything with ``obs`` (names, each
            among ``obs``) and ``lower`` / ``upper`` (a limit per observable).
        cut : str or array_like of bool, optional
            A selection: a boolean mask, one entry per row, or an expression in the syntax of
            ``pandas.DataFrame.query`` over any columns of ``df`` (e.g. ``"y > 0 and z < 1"``;
            ``@variable`` references are not supported).
        name : str, optional
            The dataset's name (default ``"data"``).
        weights : str or array_like, optional
            Event weights (e.g. sWeights): the name of a column, or one weight per row before
            the selection; the selected events keep theirs.

        Returns
        -------
        Data
            The selected events, columns in the order of ``obs``.

        Raises
        ------
        DataShapeError
            A column in ``obs``, ``space.obs`` or ``cut`` is missing (named in the message), or
            the mask has the wrong length.
        EmptyDataError
            No event is left after the range and the cut.
        DataError, DataDtypeError, InvalidDataError
            A cut that cannot be evaluated or is not boolean; columns that are not numeric or hold
            NaN / infinities among the selected events.

        Examples
        --------
        >>> import pandas as pd, zcache
        >>> from zcache.models import Space
        >>> df = pd.DataFrame({"x": [0.5, 1.5, 2.5, 3.5], "w": [1, 0, 1, 1]})
        >>> data = zcache.Data.from_pandas(df, "x", space=Space("x", 0.0, 3.0), cut="w == 1")
        >>> data.obs, data.numpy().tolist()
        (('x',), [0.5, 2.5])
        """
        return cls._from_selection(select_pandas(df, obs, space, cut, name, weights))

    @classmethod
    def from_numpy(cls, structured_array: Any, obs: str | Sequence[str], space: Any = None, cut: Any = None,
                   name: str | None = None, weights: Any = None) -> Data:
        """A dataset from fields of a numpy structured (record) array.

        Events outside ``space``'s range are dropped (as zfit does; limits inclusive), as are
        events that fail ``cut``; on an error nothing is created. For a plain 2-D array use
        ``zcache.Data(array, obs=[...])``.

        Parameters
        ----------
        structured_array : numpy.ndarray
            A 1-D array with named fields, one entry per event.
        obs : str or sequence of str
            The fields to load, in this order; they become the dataset's ``obs``.
        space : object, optional
            A range, e.g. a :class:`zcache.models.Space`: anything with ``obs`` (each among
            ``obs``) and ``lower`` / ``upper``.
        cut : str or array_like of bool, optional
            A boolean mask, or an expression in the syntax of ``pandas.DataFrame.query`` over any
            fields (needs pandas).
        name : str, optional
            The dataset's name (default ``"data"``).
        weights : str or array_like, optional
            Event weights (e.g. sWeights): the name of a column, or one weight per row before
            the selection; the selected events keep theirs.

        Returns
        -------
        Data
            The selected events, columns in the order of ``obs``.

        Raises
        ------
        DataShapeError
            Not a 1-D structured array, or a field in ``obs``, ``space.obs`` or ``cut`` is missing
            (named in the message).
        EmptyDataError
            No event is left after the range and the cut.
        DataError, DataDtypeError, InvalidDataError
            As for :meth:`from_pandas`.

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space
        >>> table = np.array([(0.5, 1.0), (1.5, -1.0), (9.0, 2.0)], dtype=[("x", "f8"), ("y", "f8")])
        >>> data = zcache.Data.from_numpy(table, ["y", "x"], space=Space("x", 0.0, 3.0), cut=table["y"] > 0)
        >>> data.obs, data.numpy().tolist()
        (('y', 'x'), [[1.0, 0.5]])
        """
        return cls._from_selection(select_numpy(structured_array, obs, space, cut, name, weights))

    @classmethod
    def from_root(cls, path: Any, tree: str, obs: str | Sequence[str], space: Any = None, cut: Any = None,
                  name: str | None = None, weights: Any = None) -> Data:
        """A dataset from branches of a ROOT ``TTree`` (read with uproot, ``pip install zcache[root]``).

        Only the branches in ``obs`` (and those a string ``cut`` names) are read. Events outside
        ``space``'s range are dropped (as zfit does; limits inclusive), as are events that fail
        ``cut``; on an error nothing is created.

        Parameters
        ----------
        path : str or os.PathLike
            The ROOT file.
        tree : str
            The tree's path inside the file (e.g. ``"events"`` or ``"dir/events"``).
        obs : str or sequence of str
            The branches to load (flat numeric branches), in this order; they become ``obs``.
        space : object, optional
            A range, e.g. a :class:`zcache.models.Space`: anything with ``obs`` (each among
            ``obs``) and ``lower`` / ``upper``.
        cut : str or array_like of bool, optional
            A boolean mask, or an expression in the syntax of ``pandas.DataFrame.query`` over any
            branches (needs pandas; not uproot's own cut syntax).
        name : str, optional
            The dataset's name (default ``"data"``).
        weights : str or array_like, optional
            Event weights (e.g. sWeights): the name of a column, or one weight per row before
            the selection; the selected events keep theirs.

        Returns
        -------
        Data
            The selected events, columns in the order of ``obs``.

        Raises
        ------
        ImportError
            uproot is not installed.
        DataError
            ``tree`` is not a tree in the file.
        DataShapeError
            A branch in ``obs``, ``space.obs`` or ``cut`` is missing (named in the message).
        EmptyDataError
            No event is left after the range and the cut.
        DataDtypeError, InvalidDataError
            A branch is jagged or not numeric, or holds NaN / infinities among the selected events.

        Examples
        --------
        >>> import os, tempfile, numpy as np, uproot, zcache
        >>> path = os.path.join(tempfile.mkdtemp(), "events.root")
        >>> with uproot.recreate(path) as f:
        ...     f["t"] = {"x": np.array([0.5, 1.5, 4.0]), "y": np.array([1.0, 2.0, 3.0])}
        >>> zcache.Data.from_root(path, "t", "x", cut="y < 2.5").numpy().tolist()
        [0.5, 1.5]
        """
        return cls._from_selection(select_root(path, tree, obs, space, cut, name, weights))

    @classmethod
    def _from_selection(cls, selection: Selection) -> Data:
        """The dataset of a table's selection (see ``_tables``)."""
        return cls(selection.events, name=selection.name, obs=selection.obs, weights=selection.weights)

    def _checked(self, arr: np.ndarray) -> np.ndarray:
        if arr.ndim != 1 + len(self.event_shape) or tuple(arr.shape[1:]) != self.event_shape:
            raise DataShapeError(
                f"Data '{self.name}' holds events of shape {self.event_shape} (array shape "
                f"(n, {', '.join(map(str, self.event_shape))})), got an array of shape {arr.shape}; "
                "data unchanged. Create a new zcache.Data for another layout."
            )
        refusal = self._dtype_refusal(arr.dtype, "an array")
        if refusal is not None:
            raise DataDtypeError(refusal)
        if arr.shape[0] == 0:
            raise EmptyDataError(
                f"Data '{self.name}': the array has no events; data unchanged. A likelihood "
                "over no events is undefined: skip the empty sample instead."
            )
        arr = arr.astype(self.np_dtype, copy=False)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise InvalidDataError(
                f"Data '{self.name}': {bad} value(s) are NaN or infinite; data unchanged. "
                "Remove or fix those events first."
            )
        return arr

    def set_data(self, array: Any, weights: Any = None) -> Restorer:
        """Replace the data (any number of events) and invalidate every dependent cache.

        Parameters
        ----------
        array : array_like or tf.Tensor
            The new events, with the event shape of the current data.
        weights : array_like or tf.Tensor, optional
            New event weights, one per event (weighted data only). ``None`` on weighted data
            sets every weight to 1 (as a sample drawn from a model is unweighted).

        Returns
        -------
        Restorer
            Used as a context manager, it restores the previous data (and weights) on exit.

        Raises
        ------
        DataShapeError, DataDtypeError, EmptyDataError, InvalidDataError
            If ``array`` or ``weights`` is not usable; the data are unchanged.
        WeightSumError
            The new weights sum to zero or less (eagerly, or when the traced call runs); the
            data, the weights and every cache stay as they were.
        DataError
            ``weights`` given for a dataset created without weights.
        """
        if weights is not None and not self._user_weights:
            raise DataError(
                f"Data '{self.name}' was created without weights; data unchanged. Create it with "
                "zcache.Data(..., weights=...) to fit weighted events."
            )
        if self._weights is not None:
            return self._set_weighted(array, weights)
        return self._set_events(array)

    def _set_events(self, array: Any) -> Restorer:
        """Write the events (not the weights) and invalidate their dependents."""
        if tf.inside_function():
            require_managed_trace(f"Data '{self.name}'.set_data")
            if isinstance(array, (tf.Tensor, tf.Variable)):
                return self._set_data_in_graph(array)
        arr = _as_array(array, self.name)
        arr = self._checked(arr)
        if tf.inside_function() and self.capacity is not None:  # padded in the graph, to the rows it has then
            return self._set_data_in_graph(tf.constant(arr))
        with WRITES:
            # keeps the old buffer alive, no copy (the events only, for padded data)
            old = self._var.read_value()
            if self._n_var is not None:
                old = old.numpy()[: int(self._n_var.numpy())]
            if not tf.inside_function():
                journal(self, lambda: self._set_events(old))
            stored = self._padded(arr)
            self._var.assign(stored)
            self._rows = stored.shape[0]
            if self._n_var is not None:
                self._n_var.assign(arr.shape[0])
        if tf.inside_function():
            GRAPH.input_changes += 1
            handled = tuple(c.node_id for c in invalidate_in_graph(self.node_id, None))
            note_mutation(self.node_id, handled)
        else:
            input_changed(GRAPH.dependent_caches(self.node_id))
        return Restorer(lambda: self._set_events(old))

    def _set_data_in_graph(self, tensor: Any) -> Restorer:
        tensor = tf.convert_to_tensor(tensor)
        if tensor.shape.rank is not None and (
            tensor.shape.rank != 1 + len(self.event_shape)
            or not tensor.shape[1:].is_compatible_with(self.event_shape)
        ):
            raise DataShapeError(
                f"Data '{self.name}' holds events of shape {self.event_shape}, got a tensor of "
                f"shape {tensor.shape}; data unchanged. Create a new zcache.Data for another layout."
            )
        refusal = self._dtype_refusal(tensor.dtype.as_numpy_dtype, "a tensor")
        if refusal is not None:
            raise DataDtypeError(refusal)
        tensor = tf.cast(tensor, self.np_dtype)
        where = f"Data '{self.name}': "
        checks = require(tf.shape(tensor)[0] > 0, EmptyDataError, where + "no events; data unchanged. "
                         "A likelihood over no events is undefined: skip the empty sample instead.")
        if self.np_dtype.kind in "fc":
            checks += require(tf.math.is_finite(tensor), InvalidDataError,
                              where + "NaN or infinite values; data unchanged. Remove or fix those events first.")
        n = tf.shape(tensor, out_type=tf.int64)[0]
        if self._n_var is not None:
            checks += require(n <= tf.shape(self._var, out_type=tf.int64)[0], DataShapeError, where + (
                "more events than the capacity; data unchanged. Inside a zcache.function the capacity "
                "cannot grow: call set_data outside it once (it grows the capacity), or create the Data "
                "with a larger capacity=."))
        GRAPH.input_changes += 1
        old = self._var.read_value()
        old_n = None if self._n_var is None else self._n_var.read_value()
        with tf.control_dependencies(checks):
            if self._n_var is not None:
                tensor = self._padded_in_graph(tensor)
        held = checks_hold(checks)  # compiled for XLA: the checks are values, not Assert ops
        if held is not None:
            tensor = tf.where(held, tensor, old)
            if old_n is not None:
                n = tf.where(held, n, old_n)
        with tf.control_dependencies(checks):
            self._var.assign(tensor)
            if self._n_var is not None:
                self._n_var.assign(n)
            refused = None if held is None else tf.logical_not(held)
            handled = tuple(c.node_id for c in invalidate_in_graph(self.node_id, refused))
        note_mutation(self.node_id, handled)
        before = old if old_n is None else old[:old_n]
        return Restorer(lambda: self._set_events(before))


    def _set_weighted(self, array: Any, weights: Any) -> Restorer:
        """``set_data`` of weighted data: events and weights checked together, then both written."""
        weights_data = self._weights
        assert weights_data is not None
        if tf.inside_function() and isinstance(array, (tf.Tensor, tf.Variable)):
            require_managed_trace(f"Data '{self.name}'.set_data")
            n = tf.shape(array)[0]
            if weights is not None:
                weights = tf.convert_to_tensor(weights)
                if np.dtype(weights.dtype.as_numpy_dtype).kind not in REAL_KINDS:
                    raise DataDtypeError(f"Data '{self.name}': weights must be real numbers, got a tensor of dtype "
                                         f"{weights.dtype.name} ({dtype_advice(weights.dtype.as_numpy_dtype)}); "
                                         "data unchanged.")
            w = tf.ones([n], tf.float64) if weights is None else tf.cast(weights, tf.float64)
            if w.shape.rank is not None and w.shape.rank != 1:
                raise DataShapeError(f"Data '{self.name}': weights must be 1-D, one per event; data unchanged.")
            check = require(tf.equal(tf.shape(w)[0], n), DataShapeError, f"Data '{self.name}': weights and "
                            "events differ in number; data unchanged. Give one weight per event.")
            # No events, or weights that are not finite: the events' and the weights' own checks
            # name that (EmptyDataError, InvalidDataError), not their sum.
            total = tf.reduce_sum(w)
            check += require((total > 0.0) | tf.equal(n, 0) | ~tf.math.is_finite(total), WeightSumError,
                             _weight_sum_message(self.name, "do not sum to a positive number"))
            with tf.control_dependencies(check):
                w = tf.identity(w)
        else:  # every check before either write
            array = self._checked(_as_array(array, self.name))
            w = np.ones(array.shape[0]) if weights is None else _checked_weights(weights, array.shape[0], self.name)
        with WRITES:  # re-entrant: both writes under one hold of the engine lock
            events = self._set_events(array)
            weights_restorer = weights_data.set_data(w)

        def restore() -> None:
            with WRITES:
                events.restore()
                weights_restorer.restore()

        return Restorer(restore)


class _Weights(Data):
    """The weights of a Data: padding rows hold 0 (and a padded one has no weights of its own)."""

    _ZERO_PADDING = True


def size_class(n: int) -> int:
    """The smallest capacity of the form ``m * 2**e`` (8 <= m <= 16) that holds ``n`` rows (at least 16).

    Eight classes per power of two: padding wastes at most 12.5 % of the rows, where a power of
    two wastes up to half (and padded rows cost as much as events in every per-event op).

    Examples
    --------
    >>> [size_class(n) for n in (3, 16, 17, 1000, 10_000, 10_241)]
    [16, 16, 18, 1024, 10240, 11264]
    """
    n = max(int(n), 16)
    e = n.bit_length() - 4
    return ((n + (1 << e) - 1) >> e) << e  # n rounded up to a multiple of 2**e


def _capacity_for(capacity: Any, n: int, name: str) -> int | None:
    """The starting capacity for ``n`` events, or a DataError for a setting that is not one."""
    if capacity is None:
        return None
    if isinstance(capacity, str) and capacity == "auto":
        return size_class(n)
    if isinstance(capacity, (int, np.integer)) and not isinstance(capacity, bool) and capacity >= 1:
        return int(capacity) if n <= capacity else size_class(n)
    raise DataError(f"Data '{name}': capacity must be None, 'auto' or a positive int, got {capacity!r}; "
                    "nothing created.")


def _checked_weights(weights: Any, n: int, name: str) -> np.ndarray:
    """``weights`` as a float64 array of shape (n,), finite, or a named error (nothing changed)."""
    w = real_numbers(weights, f"Data '{name}': the weights").astype(np.float64)
    if w.shape != (n,):
        raise DataShapeError(
            f"Data '{name}': {n} event(s) need weights of shape ({n},), got shape {w.shape}; data unchanged. "
            "Give one weight per event."
        )
    if not np.isfinite(w).all():
        raise InvalidDataError(
            f"Data '{name}': {int(np.size(w) - np.count_nonzero(np.isfinite(w)))} weight(s) are NaN or infinite; "
            "data unchanged. Fix or drop those events first."
        )
    total = float(w.sum())
    if not total > 0.0:
        raise WeightSumError(_weight_sum_message(name, f"sum to {total:g}"))
    return w


def _weight_sum_message(name: str, what: str) -> str:
    return (f"Data '{name}': the event weights {what}; data unchanged. A likelihood needs a positive "
            "sum of weights (all 0 is a flat likelihood, a negative sum is unbounded); single negative "
            "weights (sWeights) are fine.")


def _as_array(array: Any, name: str) -> np.ndarray:
    """``array`` as numpy; a ragged nesting is a :class:`DataShapeError`, not numpy's ValueError."""
    try:
        return np.asarray(array.numpy() if hasattr(array, "numpy") else array)
    except ValueError as err:
        raise DataShapeError(
            f"Data '{name}': the array is not rectangular ({err}); data unchanged. Give every event "
            "the same shape."
        ) from err


# -- the write protocol of zcache.function (engine use) ---------------------------------------
def undo_data_writes(data_before: dict[int, tuple[Data, Any]]) -> set[int]:
    """After a failed ``zcache.function`` call: put back every dataset its graph may have written.

    Each gets its snapshot in ``data_before`` (node id -> (data, :func:`data_snapshot`)).
    Returns the ids of the caches that depend on a dataset that had changed (now stale).
    """
    dirty: set[int] = set()
    for data, (before, before_n) in data_before.values():
        with WRITES:
            now = data._var.read_value()
            same_n = before_n is None or int(data._n_var.numpy()) == int(before_n)
            if same_n and now.shape == before.shape and bool(tf.reduce_all(tf.equal(now, before))):
                continue
            data._var.assign(before)
            data._rows = before.shape[0]
            if before_n is not None:
                data._n_var.assign(before_n)
        dirty.update(GRAPH.dependent_caches(data.node_id))
    return dirty


def storage_rows(data: Data) -> int:
    """The rows of ``data``'s storage after its last eager write (the padded capacity, or the events).

    ``zcache.function`` compares them between calls to know when XLA meets new shapes.
    """
    return data._rows


def data_snapshot(data: Data) -> tuple[tf.Tensor, tf.Tensor | None]:
    """What :func:`undo_data_writes` needs to put ``data`` back: its storage (and event count)."""
    return data._var.read_value(), None if data._n_var is None else data._n_var.read_value()
