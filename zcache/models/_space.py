"""The observable space: :class:`~zcache.models.Space` and the check of one-dimensional models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.data import Data
from ..exceptions import DataDtypeError, ModelError


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
        if x.shape.rank == 1:
            # the limits as scalars, not slices of a vector: an eager slice is an op of its own (the
            # range check of a loss's data runs eagerly after every set_data)
            lo, hi = tf.constant(self.lower[0], tf.float64), tf.constant(self.upper[0], tf.float64)
            out = tf.logical_and(x >= lo, x <= hi)
        else:
            lo, hi = tf.constant(self.lower, tf.float64), tf.constant(self.upper, tf.float64)
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

