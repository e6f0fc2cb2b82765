"""Checks inside a traced graph that fail as zcache errors.

A check that fails while a graph runs raises TensorFlow's ``InvalidArgumentError``;
zcache marks each check's message with the name of the zcache error it stands for
(``[zcache:ParameterValueError] ...``), and ``zcache.function`` turns a failed call
back into that error (:func:`error_from`), with the same message as the eager check.
"""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf

from . import exceptions
from ._tf_internals import failed_assertion_text

__all__ = ["error_from", "marked", "require"]

_MARK = re.compile(r"\[zcache:(\w+)\] (.*?)(?:\] \[|\]?$)", re.MULTILINE)


def marked(error: type[Exception], message: str) -> str:
    """``message`` marked so that a failed in-graph check raises ``error``."""
    return f"[zcache:{error.__name__}] {message}"


def require(ok: Any, error: type[Exception], message: str) -> list[Any]:
    """Raise ``error`` eagerly if ``ok`` is False; inside a trace, return the check op.

    Parameters
    ----------
    ok : bool tensor
        The condition that must hold.
    error : type
        The zcache error raised when it does not.
    message : str
        What went wrong and what to do.

    Returns
    -------
    list
        The assertion op inside a trace (make the guarded writes depend on it), else ``[]``.

    Examples
    --------
    >>> import tensorflow as tf
    >>> from zcache.exceptions import ModelError
    >>> require(tf.constant(True), ModelError, "never raised")
    []
    """
    if tf.inside_function():
        return [tf.debugging.assert_equal(ok, tf.constant(True), message=marked(error, message))]
    if not bool(ok):
        raise error(message)
    return []


def error_from(err: tf.errors.InvalidArgumentError) -> Exception:
    """The zcache error a failed in-graph check stands for (``err`` itself if unmarked)."""
    match = _MARK.search(err.message)
    if match is None:
        return err
    cls = getattr(exceptions, match.group(1), exceptions.ZCacheError)
    return cls(failed_assertion_text(match.group(2)))
