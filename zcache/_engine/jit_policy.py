"""The jit policy of one ``zcache.function``: whether a call compiles with XLA, and what a failed call does next.

The jit mode (``zcache.set_jit_mode``) says which functions *may* compile; this module decides,
call by call, whether one *does*, and owns what that decision needs to remember:

- the function's fallback (:attr:`JitPolicy.fallback`): why it runs uncompiled for good (a
  check XLA would drop, or an error of XLA), until its graphs are dropped;
- the data row layouts some call has stored caches for (:data:`STORED_ROWS`, process-wide):
  XLA compiles per shape and cannot reshape a Variable, so a compiled graph runs only over data
  whose caches an uncompiled call already stored at their current number of rows.

One call is a :class:`JitCall`: its attempts (compiled or not) run until one succeeds; after a
failed attempt (its writes undone by the function) :meth:`JitCall.after_error` says whether to
run the graph again uncompiled, to rerun the call eagerly, or to give up (the function raises).
A call holds the engine lock throughout, which is what makes the process-wide registry and a
function's fallback safe to change (see ``_context``); no per-thread state lives here.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from .data import Data, storage_rows
from .dependencies import GRAPH
from .tf_internals import is_xla_shape_error

__all__ = ["STORED_ROWS", "JitCall", "JitPolicy", "JitRefused", "Retry", "Rows", "StoredRows"]

#: The data a graph reads, as it stands: (node id, rows of its storage) of each Data
#: ((-1, -1) for one collected since).
Rows = tuple[tuple[int, int], ...]


class JitRefused(Exception):
    """Raised while tracing for XLA: the graph holds what XLA would compile wrong (a check it drops)."""


class Retry(enum.Enum):
    """What a call does after a failed attempt, when it does not give up."""

    #: run the graph again, uncompiled (XLA refused it, or met a Variable of a new shape)
    PLAIN = "plain"
    #: run the Python function eagerly (a failed check surfaced as a cancellation)
    EAGERLY = "eagerly"


class StoredRows:
    """The data row layouts for which a call has run and stored the caches (the oldest dropped past ``kept``).

    XLA-compiled graphs over such data are safe to run. Changed only under the engine lock.
    """

    def __init__(self, kept: int = 256):
        self.kept = kept
        self._rows: dict[Rows, None] = {}  # insertion order: the oldest first

    def __contains__(self, rows: object) -> bool:
        return rows in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rows: Rows) -> None:
        """Remember ``rows`` (rows already known keep their place), dropping the oldest past the bound."""
        self._rows[rows] = None
        while len(self._rows) > self.kept:
            del self._rows[next(iter(self._rows))]


#: The process-wide registry every :class:`JitPolicy` shares by default: the value, gradient and
#: Hessian functions of one loss read the same data, and share the one uncompiled first call.
STORED_ROWS = StoredRows(kept=256)


class JitPolicy:
    """The jit decisions of one ``zcache.function`` (dropped with its graphs).

    Parameters
    ----------
    stored : StoredRows
        The registry of stored data layouts (the process-wide :data:`STORED_ROWS` by default).

    Attributes
    ----------
    fallback : str or None
        Why the function runs uncompiled although the jit mode compiles it; None while it compiles.
    traced : bool
        Whether the graph for XLA has been traced, so that which data it reads is known.
    """

    def __init__(self, stored: StoredRows = STORED_ROWS):
        self.stored = stored
        self.fallback: str | None = None
        self.traced = False
        self._rows_key: tuple[int, int] | None = None
        self._row_data: list[weakref.ref[Data]] = []

    def call(self, may_compile: bool, reads: set[int], trace: Callable[[], Any]) -> JitCall:
        """Plan one call (under the engine lock).

        New data shapes: one uncompiled call first, which stores every cache at its new shape;
        XLA cannot reshape a Variable, and would fail (and log) trying. Which data the graph
        reads is known once it is traced for XLA (``trace``, called once; tracing runs nothing).

        Parameters
        ----------
        may_compile : bool
            Whether the jit mode compiles the function.
        reads : set of int
            Node ids the function's traces read (filled by tracing).
        trace : callable
            Traces (does not run) the graph for XLA; may raise :class:`JitRefused`.

        Returns
        -------
        JitCall
            The call's attempts.
        """
        call = JitCall(self, may_compile, reads)
        if may_compile and self.fallback is None:
            if not self.traced:
                try:
                    trace()
                except JitRefused as err:
                    self.fallback = str(err)
                self.traced = True
            call.plain = self.fallback is not None or self.rows(reads) not in self.stored
        return call

    def rows(self, reads: set[int]) -> Rows:
        """(node id, rows) of every Data the graphs read, directly or through caches (XLA compiles per shape)."""
        key = (len(reads), GRAPH.version)
        if self._rows_key != key:
            ids: set[int] = set()
            for uid in reads:
                ids.add(uid)
                ids.update(GRAPH.ancestor_inputs(uid))
            self._row_data = [weakref.ref(o) for o in GRAPH.objects(sorted(ids)) if isinstance(o, Data)]
            self._rows_key = key
        return tuple((-1, -1) if (d := ref()) is None else (d.node_id, storage_rows(d)) for ref in self._row_data)


class JitCall:
    """The attempts of one call: iterate for whether the next attempt compiles (see :meth:`JitPolicy.call`).

    Parameters
    ----------
    policy : JitPolicy
        The function's policy.
    may_compile : bool
        Whether the jit mode compiles the function (read once per call).
    reads : set of int
        Node ids the function's traces read.

    Attributes
    ----------
    plain : bool
        This call runs uncompiled (new data shapes, or XLA met a Variable of a new shape).
    jit : bool
        Whether the current attempt compiles.
    """

    def __init__(self, policy: JitPolicy, may_compile: bool, reads: set[int]):
        self.policy = policy
        self.may_compile = may_compile
        self.reads = reads
        self.plain = False
        self.jit = False

    def __iter__(self) -> Iterator[bool]:
        # Unbounded: the caller stops at the first attempt that succeeds or gives up. Only a
        # compiled attempt is retried (uncompiled), so there are at most two.
        while True:
            self.jit = self.may_compile and not self.plain and self.policy.fallback is None
            yield self.jit

    def refused(self, err: JitRefused) -> None:
        """The attempt's trace for XLA was refused (nothing ran): this function runs uncompiled."""
        self.policy.fallback = str(err)

    def after_error(self, err: BaseException) -> Retry | None:
        """What to do after the attempt failed with ``err`` (its writes already undone).

        Parameters
        ----------
        err : BaseException
            What the attempt raised.

        Returns
        -------
        Retry or None
            How to try again; None to give up (the caller re-raises).
        """
        if self.jit and isinstance(err, tf.errors.OpError):  # XLA refused it: nothing ran
            if not is_xla_shape_error(err):
                self.policy.fallback = f"XLA failed: {type(err).__name__}: {err.message.splitlines()[0]}"
            # A Variable of another shape (a cache's first fill or new events, or set_data to
            # another number of events) cannot be reshaped inside XLA: this call runs
            # uncompiled, the next compiles for the new shapes.
            self.plain = True
            return Retry.PLAIN
        if isinstance(err, tf.errors.CancelledError):
            # A check that failed in one branch cancels the ops running beside it, and TensorFlow
            # may report a cancellation instead of the check. Everything is undone: the call
            # runs eagerly, which raises the check's own error.
            return Retry.EAGERLY
        return None

    def succeeded(self) -> None:
        """The call succeeded: the caches now hold values of these shapes, so XLA may compile for them."""
        if self.may_compile:
            self.policy.stored.add(self.policy.rows(self.reads))
