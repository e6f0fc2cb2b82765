"""Parameter: a float64 scalar input of every computation, backed by a ``tf.Variable``.

``set_value`` / ``set_values`` are the *only* mutation paths. Each writes the Variable and
invalidates every dependent cache before returning: eagerly with Python-side flag writes,
inside a trace with flag writes in the graph. Setting a parameter to the value it already has
invalidates nothing. Both return an object that, used as a ``with`` block, restores the
previous value on exit. :class:`zcache.Data`, the other input, lives in ``_data``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from ..exceptions import IllegalInGraphModeError, ParameterValueError
from .context import record_read, substitute
from .dependencies import GRAPH, PARAMETER
from .inputs import WRITES, input_changed, invalidate_in_graph, variable_name
from .restorer import Restorer
from .tensorlike import StandIn, TensorLike
from .tf_internals import assign_eagerly, eager_variable
from .trace import journal, note_mutation, require_managed_trace
from .traced_checks import checks_hold, require

__all__ = [
    "Parameter",
    "refresh_mirrors",
    "set_values",
    "set_vector_in_graph",
    "undo_parameter_writes",
]


class Parameter(TensorLike):
    r"""A float64 scalar, backed by a ``tf.Variable``, that caches depend on.

    Parameters
    ----------
    name : str
        A label for error messages, reports and the dependency graph.
    value : float
        The initial value.
    lower, upper : float, optional
        Limits; values outside raise :class:`zcache.exceptions.ParameterValueError`.
    floating : bool, default True
        Whether a fit (and :func:`zcache.precompute`) treats it as free.

    Raises
    ------
    ParameterValueError
        If a limit is NaN, ``lower >= upper``, or ``value`` is not a finite scalar inside the limits.

    Examples
    --------
    >>> import zcache
    >>> mu = zcache.Parameter("mu", 1.5, lower=0.0, upper=10.0)
    >>> float(mu.value())
    1.5
    >>> with mu.set_value(2.5):
    ...     float(mu.value())
    2.5
    >>> float(mu.value())   # restored on exit
    1.5
    """

    def __init__(
        self,
        name: str,
        value: float,
        lower: float | None = None,
        upper: float | None = None,
        floating: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"A Parameter needs a non-empty str name, got {name!r}.")
        self.name = name
        self.lower = None if lower is None else float(lower)
        self.upper = None if upper is None else float(upper)
        for label, limit in (("lower", self.lower), ("upper", self.upper)):
            if limit is not None and math.isnan(limit):
                raise ParameterValueError(f"Parameter '{name}': the {label} limit is NaN.")
        if self.lower is not None and self.upper is not None and not self.lower < self.upper:
            raise ParameterValueError(
                f"Parameter '{name}': lower limit {self.lower} must be below upper limit {self.upper}."
            )
        self.floating = bool(floating)
        initial = self._checked(value)
        self._var = eager_variable(np.float64(initial), name=variable_name(name))
        # Python copy of the value, saving a device read per set_value. Graphs write the
        # Variable only inside a zcache.function (see _trace.require_managed_trace), which
        # refreshes the mirror after each call from the graph's final values.
        self._mirror: float = initial
        self.node_id = GRAPH.add_node(self, PARAMETER, name)

    def __repr__(self) -> str:
        try:
            shown = f"{self._current():.6g}"
        except Exception:  # inside a trace there is no number to show
            shown = "<symbolic>"
        limits = f", lower={self.lower}, upper={self.upper}" if self.has_limits else ""
        return f"<zcache.Parameter '{self.name}' value={shown}{limits} floating={self.floating}>"

    @property
    def variable(self) -> tf.Variable:
        """The backing ``tf.Variable``; pass it to ``tf.GradientTape.gradient``. Never assign to it.

        Reading it counts as a read of the parameter (a cache whose function uses it depends
        on the parameter), as :meth:`value` does.
        """
        record_read(self)
        stand_in = substitute(self.node_id)  # a cache's backward pass: the forward pass's value
        return self._var if stand_in is None else StandIn(stand_in)

    @property
    def has_limits(self) -> bool:
        return self.lower is not None or self.upper is not None

    def value(self) -> tf.Tensor:
        """The current value as a float64 scalar tensor (recorded as a read)."""
        record_read(self)
        stand_in = substitute(self.node_id)  # a cache's backward pass: the forward pass's value
        return self._var.value() if stand_in is None else stand_in

    def _limit_problem(self, v: float) -> str | None:
        if not math.isfinite(v):
            return f"value {v} is not finite"
        if self.lower is not None and v < self.lower:
            return f"value {v} is below the lower limit {self.lower}"
        if self.upper is not None and v > self.upper:
            return f"value {v} is above the upper limit {self.upper}"
        return None

    def _checked(self, value: Any) -> float:
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if arr.shape != () or arr.dtype.kind not in "biuf":
            raise ParameterValueError(
                f"Parameter '{self.name}' takes a real scalar, got {value!r} "
                f"(shape {arr.shape}, dtype {arr.dtype})."
            )
        v = float(arr)
        problem = self._limit_problem(v)
        if problem:
            raise ParameterValueError(
                f"Parameter '{self.name}': {problem}; the value was left unchanged. "
                "Pass a finite value inside [lower, upper], or widen the limits."
            )
        return v

    def set_value(self, value: Any) -> Restorer:
        """Set a new value and invalidate every cache that depends on this parameter.

        Works eagerly and inside a trace (then the invalidation happens in the graph,
        when the assignment runs). Setting the current value invalidates nothing.

        Parameters
        ----------
        value : float or scalar tensor
            The new value.

        Returns
        -------
        Restorer
            Used as a context manager, it restores the previous value on exit.

        Raises
        ------
        ParameterValueError
            If the value is NaN/inf, outside the limits, or not a scalar; the value is unchanged.
        """
        if tf.inside_function():
            return self._set_value_in_graph(value)
        v = self._checked(value)
        with WRITES:
            old = self._current()
            changed = v != old
            if changed:
                journal(self, lambda: self.set_value(old))
                self._assign(v)
        if changed:
            input_changed(GRAPH.dependent_caches(self.node_id))
        return Restorer(lambda: self.set_value(old))

    def _current(self) -> float:
        return self._mirror

    def __float__(self) -> float:
        """The current value as a Python float (no device read; eager only)."""
        if tf.inside_function():
            raise IllegalInGraphModeError(
                f"float(Parameter '{self.name}') inside a trace would bake the current value into the "
                "graph; use param.value() (a tensor) there."
            )
        return self._mirror

    def _assign(self, v: float) -> None:
        assign_eagerly(self._var, v)  # v is checked (_checked)
        self._mirror = v

    def _set_value_in_graph(self, value: Any) -> Restorer:
        require_managed_trace(f"Parameter '{self.name}'.set_value")
        value = tf.convert_to_tensor(value, dtype=tf.float64)
        if value.shape.rank not in (None, 0):
            raise ParameterValueError(
                f"Parameter '{self.name}' takes a scalar, got a tensor of shape {value.shape}."
            )
        static = tf.get_static_value(value)
        if static is not None:  # a constant: refuse it now, with the eager message
            self._checked(static)
        mark = f"Parameter '{self.name}': "
        fix = " Pass a finite value within the limits, or widen them."
        checks = require(tf.math.is_finite(value), ParameterValueError, mark + "value is not finite; unchanged." + fix)
        if self.lower is not None:
            checks += require(value >= tf.constant(self.lower, tf.float64), ParameterValueError,
                              mark + f"value is below the lower limit {self.lower}; unchanged." + fix)
        if self.upper is not None:
            checks += require(value <= tf.constant(self.upper, tf.float64), ParameterValueError,
                              mark + f"value is above the upper limit {self.upper}; unchanged." + fix)
        return self._write_in_graph(value, checks)

    def _write_in_graph(self, value: tf.Tensor, checks: list[Any]) -> Restorer:
        require_managed_trace(f"Parameter '{self.name}'.set_value")
        # The Python mirror stays: the managed zcache.function refreshes it from the graph's
        # final values after each call (and restores the Variable from it if the call fails).
        GRAPH.input_changes += 1  # gradients taken across this write must not see it
        old = self._var.read_value()
        held = checks_hold(checks)  # compiled for XLA: the checks are values, not Assert ops
        if held is not None:
            value = tf.where(held, value, old)
        # Every write waits for the checks: a failed check leaves value and flags untouched.
        with tf.control_dependencies(checks):
            self._var.assign(value)
            unchanged = tf.equal(old, value)
            handled = tuple(c.node_id for c in invalidate_in_graph(self.node_id, unchanged))
        note_mutation(self.node_id, handled, unchanged)
        return Restorer(lambda: self.set_value(old))


def set_values(params: list[Parameter] | tuple[Parameter, ...], values: Any) -> Restorer:
    """Set several parameters at once, invalidating each dependent cache once.

    This is what a minimizer calls on every step. All values are checked before
    any is written, so a bad value leaves every parameter unchanged.

    Parameters
    ----------
    params : sequence of Parameter
        The parameters to set.
    values : sequence of float
        One value per parameter, in the same order.

    Returns
    -------
    Restorer
        Used as a context manager, it restores the previous values on exit.

    Raises
    ------
    ParameterValueError
        If the numbers of parameters and values differ, or a value is invalid; nothing is
        changed.

    Examples
    --------
    >>> import zcache
    >>> a, b = zcache.Parameter("a", 1.0), zcache.Parameter("b", 2.0)
    >>> _ = zcache.set_values([a, b], [3.0, 4.0])
    >>> float(a.value()), float(b.value())
    (3.0, 4.0)
    """
    params = list(params)
    if not tf.inside_function():
        try:
            array = np.asarray(values, dtype=float)
        except (TypeError, ValueError) as err:
            raise ParameterValueError(f"set_values takes one real number per parameter, got {values!r}.") from err
        if array.ndim != 1:
            raise ParameterValueError(
                f"set_values takes a flat sequence of numbers, got an array of shape {array.shape}."
            )
        values = list(array)
    else:
        values = list(values)
    if len(values) != len(params):
        raise ParameterValueError(f"set_values got {len(params)} parameters but {len(values)} values.")
    if tf.inside_function():
        setters = [p.set_value(v) for p, v in zip(params, values, strict=True)]
        return Restorer(lambda: [s.restore() for s in reversed(setters)])
    checked = [p._checked(v) for p, v in zip(params, values, strict=True)]
    dirty: set[int] = set()
    with WRITES:
        old = [p._current() for p in params]
        for p, v, o in zip(params, checked, old, strict=True):
            if v != o:
                journal(p, lambda p=p, o=o: p.set_value(o))
                p._assign(v)
                dirty.update(GRAPH.dependent_caches(p.node_id))
    input_changed(dirty)
    return Restorer(lambda: set_values(params, old))


def set_vector_in_graph(params: tuple[Parameter, ...], x: tf.Tensor) -> None:
    """Set ``params`` to the entries of the vector ``x`` inside a trace, with one check for all.

    What a minimizer's traced function call does: a single finiteness-and-limits check
    of the whole vector guards every write (instead of three assertions per parameter).
    """
    lower = tf.constant([-np.inf if p.lower is None else p.lower for p in params], tf.float64)
    upper = tf.constant([np.inf if p.upper is None else p.upper for p in params], tf.float64)
    ok = tf.reduce_all(tf.math.is_finite(x) & (x >= lower) & (x <= upper))
    names = ", ".join(p.name for p in params)
    checks = require(ok, ParameterValueError, f"a value for one of ({names}) is NaN or outside its limits; all unchanged.")
    for i, p in enumerate(params):
        p._write_in_graph(x[i], checks)


# -- the write protocol of zcache.function (engine use) ---------------------------------------
def refresh_mirrors(params: list[Parameter], values: list[float]) -> set[int]:
    """After a graph wrote ``params``: their final ``values``. Returns the ids of those that changed."""
    changed: set[int] = set()
    for p, v in zip(params, values, strict=True):
        if v != p._mirror:
            changed.add(p.node_id)
        with WRITES:
            p._mirror = v
    return changed


def undo_parameter_writes(params: list[Parameter]) -> set[int]:
    """After a failed ``zcache.function`` call: put back every parameter its graph may have written.

    Each gets its Python mirror (the value before the call). Returns the ids of the caches that
    depend on a parameter that had changed (now stale).
    """
    dirty: set[int] = set()
    for p in params:
        with WRITES:
            if float(p._var.numpy()) == p._mirror:
                continue
            p._var.assign(p._mirror)
        dirty.update(GRAPH.dependent_caches(p.node_id))
    return dirty
