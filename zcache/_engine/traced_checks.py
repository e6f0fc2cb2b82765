"""Checks inside a traced graph that fail as zcache errors.

Every in-graph check of zcache goes through :func:`require`. In an ordinary graph a check
is an Assert op; when it fails while the graph runs TensorFlow raises
``InvalidArgumentError``, whose message zcache marks with the name of the zcache error it
stands for (``[zcache:ParameterValueError] ...``), and ``zcache.function`` turns the failed
call back into that error (:func:`error_from`), with the same message as the eager check.

XLA drops Assert ops ("Ignoring Assert operator"). So while the body of an XLA-compiled
``zcache.function`` is traced (:func:`collecting`), a check made in that body's own graph
adds no op: its condition is collected and becomes a boolean *output* of the compiled
function, which the function's call inspects after the graph ran (:func:`failed_check`);
the input writes it guards keep the old value where it fails (:func:`checks_hold`).
A check made in a nested graph (a ``tf.cond`` branch, a loop body, a cache's miss
branch) cannot be an output; it stays an Assert, and ``zcache.function`` refuses to compile
a graph that contains one (:func:`assertion_ops`).

A graph that a *user's* ``tf.function(jit_compile=True)`` compiles is not zcache's to
change: there a check, or a cache read (whose miss branch holds checks), raises
``UnmanagedTraceError`` at trace time (:func:`refuse_unmanaged_xla`) rather than let XLA
drop the check and return a number computed from refused input. zcache's own compiled
calls are told apart by ``CONTEXT.calling_jit``, set around them (``zcache.function``
calls them from eager code only).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from .. import exceptions
from .context import CONTEXT
from .tf_internals import failed_assertion_text, graph_key, xla_calling_graph

__all__ = ["assertion_ops", "calling_jit", "checks_hold", "collecting", "error_from", "failed_check", "marked",
           "refuse_unmanaged_xla", "require"]

_MARK = re.compile(r"\[zcache:(\w+)\] (.*?)(?:\] \[|\]?$)", re.MULTILINE)

#: Op types that check values at run time and that XLA drops.
_ASSERTION_OPS = frozenset({"Assert", "CheckNumerics", "CheckNumericsV2"})


def marked(error: type[Exception], message: str) -> str:
    """``message`` marked so that a failed in-graph check raises ``error``."""
    return f"[zcache:{error.__name__}] {message}"


def require(ok: Any, error: type[Exception], message: str) -> list[Any]:
    """Raise ``error`` eagerly if ``ok`` is False; inside a trace, check it in the graph.

    The one helper for every in-graph check of zcache (so that each also holds under XLA).

    Parameters
    ----------
    ok : bool tensor
        The condition that must hold (every element, for a non-scalar).
    error : type
        The zcache error raised when it does not.
    message : str
        What went wrong and what to do.

    Returns
    -------
    list
        The assertion op inside an ordinary trace (make the guarded writes depend on it);
        the condition itself where it is an output of an XLA-compiled function (guarded
        writes select with :func:`checks_hold`); ``[]`` eagerly and for a check known at
        trace time.

    Raises
    ------
    error
        Eagerly, or at trace time for a condition known then, when ``ok`` is False.

    Examples
    --------
    >>> import tensorflow as tf
    >>> from zcache.exceptions import ModelError
    >>> require(tf.constant(True), ModelError, "never raised")
    []
    >>> try:
    ...     require(tf.constant([True, False]), ModelError, "one is False")
    ... except ModelError as err:
    ...     print(err)
    one is False
    """
    ok = tf.reduce_all(tf.convert_to_tensor(ok, tf.bool))
    static = tf.get_static_value(ok)
    if static is not None:
        if not bool(static):
            raise error(message)
        return []
    if not tf.inside_function():  # pragma: no cover -- an eager tensor always has a static value
        return []
    stack = CONTEXT.jit_checks
    if stack and stack[-1][0] == graph_key():
        stack[-1][1].append((ok, error, message))
        return [ok]  # a value: guarded writes use it (checks_hold), control dependencies accept it
    refuse_unmanaged_xla(f"a zcache check ({error.__name__}: {message})")
    # An Assert whose data are strings only is one op; tf.debugging.assert_equal's data hold the
    # compared tensors, which TensorFlow guards with a tf.cond (two branch functions traced per
    # check, most of the trace of a small setter). The failed check's error and message are the same.
    return [tf.debugging.Assert(ok, [marked(error, message)])]


def refuse_unmanaged_xla(what: str) -> None:
    """Raise if the graph being built is compiled by XLA in a function zcache does not compile.

    zcache compiles with XLA only through ``zcache.set_jit_mode``, which turns its checks into
    outputs of the compiled function. In any other XLA-compiled graph (a user's
    ``tf.function(jit_compile=True)``, also around a ``zcache.function``) XLA would drop the
    checks, and a refused value would give a wrong number instead of an error.

    Parameters
    ----------
    what : str
        What needs the checks, for the message.

    Raises
    ------
    UnmanagedTraceError
        Inside such a graph.

    Examples
    --------
    >>> refuse_unmanaged_xla("a cache read")  # eagerly: nothing to refuse
    """
    graph = xla_calling_graph()
    if graph is None:
        return
    # TensorFlow enters the XLA context on the calling graph (a call) or on the body itself
    # (get_concrete_function). zcache calls its compiled functions from eager code only
    # (inside a trace a zcache.function is inlined): the context on the eager graph during
    # such a call, or on a body zcache is tracing for XLA, is zcache's.
    if (not graph.building_function and CONTEXT.calling_jit) or any(key == id(graph) for key, _ in CONTEXT.jit_checks):
        return
    raise exceptions.UnmanagedTraceError(
        f"{what} inside a tf.function(jit_compile=True) that zcache does not compile: XLA drops "
        "zcache's checks (NaN and limits of parameters, data ranges, finite losses), so bad input "
        "would return a wrong number instead of an error, and a cache cannot size its storage "
        "there. Decorate the function with @zcache.function(wraps='loss') and compile it with "
        "zcache.set_jit_mode(True) (or 'auto', or {'loss': True}), which keeps every check; or drop "
        "jit_compile=True."
    )


def checks_hold(checks: list[Any]) -> Any:
    """Whether every check of ``checks`` that is an output of an XLA-compiled trace holds.

    XLA runs a write whatever its control dependencies: a guarded write writes
    ``tf.where(checks_hold(checks), new, old)`` instead, so a refused value changes neither
    the input nor a cache flag.

    Parameters
    ----------
    checks : list
        What :func:`require` returned.

    Returns
    -------
    bool tensor or None
        None outside such a trace, or when ``checks`` holds none of its checks.

    Examples
    --------
    >>> checks_hold([]) is None
    True
    """
    stack = CONTEXT.jit_checks
    if not checks or not stack or stack[-1][0] != graph_key():
        return None
    collected = {id(ok) for ok, _, _ in stack[-1][1]}
    oks = [c for c in checks if id(c) in collected]
    return tf.reduce_all(tf.stack(oks)) if oks else None


@contextlib.contextmanager
def collecting() -> Iterator[list[tuple[Any, type[Exception], str]]]:
    """While the body of an XLA-compiled function is traced: its checks, as ``(ok, error, message)``.

    Only checks made in the graph being built when the block opens are collected.
    """
    checks: list[tuple[Any, type[Exception], str]] = []
    CONTEXT.jit_checks.append((graph_key(), checks))
    try:
        yield checks
    finally:
        CONTEXT.jit_checks.pop()


@contextlib.contextmanager
def calling_jit(may_compile: bool) -> Iterator[None]:
    """Mark what XLA compiles on this thread meanwhile as zcache's (if ``may_compile``).

    Used around an eager call of a ``zcache.function`` that may compile with XLA (see
    :func:`refuse_unmanaged_xla`).
    """
    if not may_compile:
        yield
        return
    CONTEXT.calling_jit += 1
    try:
        yield
    finally:
        CONTEXT.calling_jit -= 1


def failed_check(oks: Any, checks: list[tuple[type[Exception], str]]) -> Exception | None:
    """The error of the first failed check, given the outputs ``oks`` of the collected checks.

    Parameters
    ----------
    oks : bool tensor
        One entry per check, in the order they were made while tracing.
    checks : list of (type, str)
        The error and message of each.

    Returns
    -------
    Exception or None
        The error to raise, or None when every check held.

    Examples
    --------
    >>> import tensorflow as tf
    >>> from zcache.exceptions import FitError
    >>> failed_check(tf.constant([True, False]), [(FitError, "a"), (FitError, "b")])
    FitError('b')
    """
    values = oks.numpy()
    if values.all():
        return None
    error, message = checks[int((~values).argmax())]
    return error(message)


def assertion_ops(graph: Any) -> list[str]:
    """Names of the run-time checks (Assert, CheckNumerics) in ``graph`` and every function it calls.

    Parameters
    ----------
    graph : tf.Graph
        A graph (a ``FuncGraph`` being built is fine).

    Returns
    -------
    list of str
        ``"function/op"`` names (``"/op"`` for the graph itself); empty when there is none.

    Examples
    --------
    >>> import tensorflow as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     _ = tf.debugging.assert_equal(tf.compat.v1.placeholder(tf.bool), True)
    >>> [name.split("/")[-1] for name in assertion_ops(g)]
    ['Assert']
    """
    graph_def = graph.as_graph_def()
    found = [f"/{node.name}" for node in graph_def.node if node.op in _ASSERTION_OPS]
    for func in graph_def.library.function:
        found += [f"{func.signature.name}/{node.name}" for node in func.node_def if node.op in _ASSERTION_OPS]
    return found


def error_from(err: tf.errors.InvalidArgumentError) -> Exception:
    """The zcache error a failed in-graph check stands for (``err`` itself if unmarked)."""
    match = _MARK.search(err.message)
    if match is None:
        return err
    cls = getattr(exceptions, match.group(1), exceptions.ZCacheError)
    return cls(failed_assertion_text(match.group(2)))
