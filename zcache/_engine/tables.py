"""Tables as events: the columns of a pandas DataFrame, a numpy structured array or a ROOT tree.

What ``Data.from_pandas`` / ``from_numpy`` / ``from_root`` do before a dataset exists: read
the columns a dataset needs, check their names, drop the events outside a range (anything
with ``obs``, ``lower`` and ``upper``, e.g. a ``zcache.models.Space``) and those that fail a
cut (a boolean mask or a ``DataFrame.query`` expression, evaluated with pandas). The result is
a :class:`Selection` of plain numpy arrays; every check runs before ``Data`` is created, so on
an error nothing is. No TensorFlow and no engine here; pandas and uproot are optional and
imported only where a table needs them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import DataDtypeError, DataError, DataShapeError, EmptyDataError

__all__ = ["REAL_KINDS", "Selection", "dtype_advice", "obs_names", "real_numbers", "select_numpy", "select_pandas",
           "select_root"]

#: numpy dtype kinds that are real numbers: signed and unsigned integers, floats. Everything
#: else (complex, bool, objects, text, records, dates, durations) is refused where an
#: observable, a weight or a count is read, because a cast to float64 would lose or invent
#: information silently (a complex number its imaginary part, a bool its meaning).
REAL_KINDS = "iuf"


def dtype_advice(dtype: Any) -> str:
    """What to do with values of ``dtype`` where real numbers are needed (one clause, no full stop).

    Examples
    --------
    >>> import numpy as np
    >>> dtype_advice(np.complex128)[:36]
    'complex numbers would lose their ima'
    """
    kind = np.dtype(dtype).kind
    if kind == "c":
        return ("complex numbers would lose their imaginary part: take .real or abs() explicitly, or split them "
                "into two observables (the real and the imaginary part as two columns)")
    if kind == "b":
        return ("booleans are a selection, not values: select events with them (events[mask], cut=mask), or "
                "pass mask.astype(float) for a 0/1 observable")
    if kind in "mM":
        return ("dates and durations are not numbers here: convert them explicitly, e.g. "
                "(t - t0) / np.timedelta64(1, 's')")
    return ("text, objects and records are not numbers: convert them to floats first (e.g. "
            "np.asarray(values, dtype=float)) or pick the numeric fields")


def real_numbers(values: Any, what: str) -> np.ndarray:
    """``values`` as a numpy array of real numbers (integers or floats, as given), else DataDtypeError.

    The one check of a dtype wherever zcache reads real numbers from a user (events of an
    observable, weights, bin counts and edges, starting values of toys): ``what`` names them in
    the message, e.g. ``"Data 'x'"``. A tensor is read with ``.numpy()``.

    Raises
    ------
    DataDtypeError
        The values are complex, boolean, objects, text, records, dates or durations; the
        message says what to do.

    Examples
    --------
    >>> real_numbers([1, 2], "counts").dtype.kind
    'i'
    >>> try:
    ...     real_numbers([1 + 0.5j], "Data 'x'")
    ... except DataDtypeError as err:
    ...     print(str(err)[:72])
    Data 'x' must be real numbers (integers or floats), got dtype complex128
    """
    arr = np.asarray(values.numpy() if hasattr(values, "numpy") and not isinstance(values, np.ndarray) else values)
    if arr.dtype.kind not in REAL_KINDS:
        raise DataDtypeError(f"{what} must be real numbers (integers or floats), got dtype {arr.dtype}: "
                             f"{dtype_advice(arr.dtype)}; nothing changed.")
    return arr

#: A column of a table by name, as an array with one entry per row.
Column = Callable[[str], Any]


class Selection(NamedTuple):
    """The events a table's selection keeps, as ``Data`` takes them."""

    events: np.ndarray
    obs: tuple[str, ...]
    weights: np.ndarray | None
    name: str


def select_pandas(df: Any, obs: str | Sequence[str], space: Any, cut: Any, name: str | None,
                  weights: Any) -> Selection:
    """The selection of ``Data.from_pandas`` from the columns of a ``pandas.DataFrame``."""
    if not hasattr(df, "columns") or not hasattr(df, "__getitem__"):
        raise TypeError(f"Data.from_pandas takes a pandas.DataFrame, got {type(df).__name__}.")
    lookup = {str(c): c for c in df.columns}
    available = list(lookup)
    n = len(df)

    def column(c: str) -> np.ndarray:
        return df[lookup[c]].to_numpy()

    return _select(available, n, column, obs, space, cut, name, "the DataFrame", weights)


def select_numpy(structured_array: Any, obs: str | Sequence[str], space: Any, cut: Any, name: str | None,
                 weights: Any) -> Selection:
    """The selection of ``Data.from_numpy`` from the fields of a 1-D structured array."""
    arr = np.asarray(structured_array)
    if arr.dtype.names is None or arr.ndim != 1:
        raise DataShapeError(
            f"Data.from_numpy takes a 1-D structured array (named fields), got dtype {arr.dtype} and "
            f"shape {arr.shape}; nothing created. For a plain array use zcache.Data(array, obs=[...])."
        )
    return _select(list(arr.dtype.names), len(arr), lambda c: arr[c], obs, space, cut, name,
                   "the structured array", weights)


def select_root(path: Any, tree: str, obs: str | Sequence[str], space: Any, cut: Any, name: str | None,
                weights: Any) -> Selection:
    """The selection of ``Data.from_root`` from a ROOT tree: only the branches it needs are read (uproot)."""
    try:
        import uproot
    except ImportError as err:
        raise ImportError(
            "Data.from_root reads ROOT files with uproot, which is not installed: pip install zcache[root]"
        ) from err
    with uproot.open(path) as file:
        try:
            ttree = file[tree]
        except KeyError as err:
            raise DataError(
                f"Data.from_root: no tree '{tree}' in {path}; the file holds {list(file.keys(cycle=False))}. "
                "Nothing created."
            ) from err
        if not hasattr(ttree, "arrays") or not hasattr(ttree, "num_entries"):
            raise DataError(f"Data.from_root: '{tree}' in {path} is not a TTree ({type(ttree).__name__}).")
        available = [str(k) for k in ttree.keys()]
        needed = list(dict.fromkeys([*_names(obs, "obs"), *_names(getattr(space, "obs", ()), "space.obs"),
                                     *_cut_columns(cut, available),
                                     *([weights] if isinstance(weights, str) else [])]))
        missing = [c for c in needed if c not in available]
        if missing:  # before reading anything
            _missing(missing, available, f"tree '{tree}' of {path}")
        arrays = ttree.arrays(needed, library="np") if needed else {}
        n = int(ttree.num_entries)
    return _select(needed, n, lambda c: arrays[c], obs, space, cut, name, f"tree '{tree}' of {path}", weights)


def obs_names(obs: Any, event_shape: tuple[int, ...], name: str) -> tuple[str, ...]:
    """``obs`` (a name, names, or a Space) as one distinct name per column of events of ``event_shape``."""
    # a Space (anything with ``obs`` names) stands for its names, as zfit users pass it
    names_of = getattr(obs, "obs", obs)
    try:
        names = (names_of,) if isinstance(names_of, str) else tuple(names_of)
    except TypeError:
        names = (obs,)  # not a sequence: refused below with the message
    ncols = 1 if not event_shape else event_shape[0]
    if len(event_shape) > 1 or len(names) != ncols or not all(isinstance(o, str) for o in names) \
            or len(set(names)) != len(names):
        raise DataShapeError(
            f"Data '{name}': obs={obs!r} must name each column once; the array has {ncols} "
            f"column(s) (event shape {event_shape}). Pass one distinct name per column."
        )
    return names


def _select(available: list[str], n: int, column: Column, obs: Any, space: Any, cut: Any,
            name: str | None, source: str, weights: Any = None) -> Selection:
    """The shared part of the ``select_*``: check names, select, stack the columns."""
    name = name or "data"
    obs_cols = _names(obs, "obs")
    if not obs_cols or len(set(obs_cols)) != len(obs_cols):
        raise DataShapeError(f"Data '{name}': obs={obs!r} must name at least one column, each once.")
    space_obs: tuple[str, ...] = ()
    if space is not None:
        if not all(hasattr(space, a) for a in ("obs", "lower", "upper")):
            raise TypeError(f"Data '{name}': space must have obs, lower and upper (a zcache.models.Space), "
                            f"got {space!r}.")
        space_obs = _names(space.obs, "space.obs")
    weight_column = [weights] if isinstance(weights, str) else []
    missing = [c for c in dict.fromkeys([*obs_cols, *space_obs, *_cut_columns(cut, available), *weight_column])
               if c not in available]
    if missing:
        _missing(missing, available, source)
    if space_obs and not set(space_obs) <= set(obs_cols):
        raise DataShapeError(
            f"Data '{name}': the space's observables {list(space_obs)} must be among obs={list(obs_cols)}."
        )
    keep = np.ones(n, dtype=bool) if space is None else _in_range(space, space_obs, n, column, name)
    in_range = int(keep.sum())
    if cut is not None:
        keep &= _cut_mask(cut, available, n, column, name)
    if not keep.any():
        steps = [f"{n} read"] + ([f"{in_range} inside the space's range"] if space is not None else []) \
            + (["0 after the cut"] if cut is not None else [])
        raise EmptyDataError(
            f"Data '{name}': no event of {source} is left ({', '.join(steps)}); nothing created. "
            "Check the range and the cut."
        )
    events = _events(obs_cols, column, keep, name)
    w = None
    if weights is not None:
        w = real_numbers(column(weights) if isinstance(weights, str) else weights, f"Data '{name}': the weights")
        if w.shape != (n,):
            raise DataShapeError(f"Data '{name}': weights need one entry per row ({n}), got shape {w.shape}; "
                                 "nothing created.")
        w = w[keep]
    return Selection(events, obs_cols, w, name)


def _in_range(space: Any, space_obs: tuple[str, ...], n: int, column: Column, name: str) -> np.ndarray:
    """Which rows lie inside ``space``'s limits (inclusive; a NaN fails them)."""
    keep = np.ones(n, dtype=bool)
    lower = np.broadcast_to(np.asarray(space.lower, dtype=float), (len(space_obs),))
    upper = np.broadcast_to(np.asarray(space.upper, dtype=float), (len(space_obs),))
    for o, lo, hi in zip(space_obs, lower, upper, strict=True):
        values = real_numbers(column(o), f"Data '{name}': column '{o}'")
        keep &= (values >= lo) & (values <= hi)
    return keep


def _events(obs: tuple[str, ...], column: Column, keep: np.ndarray, name: str) -> np.ndarray:
    """The kept rows of the columns ``obs``: one column as it is, several stacked (columns in this order)."""
    cols = []
    for o in obs:
        values = np.asarray(column(o))
        if values.ndim != 1:
            raise DataDtypeError(f"Data '{name}': column '{o}' is not one number per event (shape "
                                 f"{values.shape}); flatten it or pick one element first.")
        if values.dtype.kind == "O":
            raise DataDtypeError(f"Data '{name}': column '{o}' holds objects (a jagged or text column); "
                                 "load flat numeric columns.")
        real_numbers(values, f"Data '{name}': column '{o}'")
        cols.append(values[keep])
    return cols[0] if len(cols) == 1 else np.column_stack(cols)


def _missing(missing: list[str], available: list[str], source: str) -> None:
    raise DataShapeError(
        f"Column(s) {missing} not in {source}; nothing created. Available: {available}."
    )


def _names(obs: Any, what: str) -> tuple[str, ...]:
    """``obs`` (a name or a sequence of names) as a tuple of str."""
    names = (obs,) if isinstance(obs, str) else tuple(obs)
    if not all(isinstance(o, str) for o in names):
        raise DataShapeError(f"{what}={obs!r} must be a column name or a sequence of column names.")
    return names


_IDENTIFIER = re.compile(r"`([^`]+)`|\b([A-Za-z_][A-Za-z0-9_]*)\b")


def _cut_columns(cut: Any, available: list[str]) -> list[str]:
    """The columns a string cut names (identifiers that are columns, and back-quoted names)."""
    if not isinstance(cut, str):
        return []
    names = [quoted or plain for quoted, plain in _IDENTIFIER.findall(cut)]
    return [c for c in dict.fromkeys(names) if c in available]


def _cut_mask(cut: Any, available: list[str], n: int, column: Any, name: str) -> np.ndarray:
    """``cut`` (a mask or a ``DataFrame.query`` expression) as a boolean array of length ``n``."""
    if isinstance(cut, str):
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError(f"Data '{name}': a string cut is evaluated with pandas, which is not installed: "
                              "pip install zcache[pandas] (or pass a boolean mask).") from err
        frame = pd.DataFrame({c: column(c) for c in _cut_columns(cut, available)}, index=pd.RangeIndex(n))
        try:
            mask = frame.eval(cut)
        except NameError as err:  # pandas' UndefinedVariableError: a name that is no column
            raise DataShapeError(f"Data '{name}': the cut {cut!r} names a missing column ({err}); nothing "
                                 f"created. Available: {available}.") from err
        except Exception as err:  # noqa: BLE001 -- pandas raises many types for a bad expression
            raise DataError(f"Data '{name}': the cut {cut!r} cannot be evaluated ({type(err).__name__}: "
                            f"{err}); nothing created.") from err
        mask = np.asarray(mask)
    else:
        mask = np.asarray(cut)
    if mask.dtype != np.bool_:
        raise DataDtypeError(f"Data '{name}': the cut must be boolean (a mask or a condition), got dtype "
                             f"{mask.dtype}; nothing created.")
    if mask.shape != (n,):
        raise DataShapeError(f"Data '{name}': the cut mask has shape {mask.shape}, the table {n} rows; "
                             "nothing created.")
    return mask

