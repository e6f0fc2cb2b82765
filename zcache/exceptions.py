"""Every error and warning zcache raises.

All errors derive from :class:`ZCacheError`; most also derive from the built-in
exception a Python user would expect (``ValueError`` for a bad value, ``TypeError``
for a wrong kind of object), so ``except ValueError`` keeps working.

Errors never steer control flow inside zcache: they are raised for misuse only,
and every raising path leaves the state (values, data, the dependency graph, the
mode policy) exactly as it was before the call.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = [
    "ZCacheError",
    "ParameterValueError",
    "DataError",
    "DataShapeError",
    "DataDtypeError",
    "InvalidDataError",
    "EmptyDataError",
    "WeightSumError",
    "DataRangeError",
    "DependencyCycleError",
    "InvalidDependencyError",
    "IllegalInGraphModeError",
    "UnmanagedTraceError",
    "GraphModeError",
    "UnknownIdentifierError",
    "CachedValueError",
    "CacheBudgetError",
    "UncacheableArgumentError",
    "SecondOrderGradientError",
    "ForwardModeError",
    "ModelError",
    "WholeSampleTermError",
    "DensityError",
    "FitError",
    "BatchingError",
    "ToyStudyError",
    "SymbolicError",
    "EnvironmentSettingError",
    "InferenceError",
    "SPlotError",

    "POIError",
    "AsimovError",
    "CrossingError",
    "ZCacheWarning",
    "RetracingWarning",
    "TensorFlowInternalsWarning",
    "CompileCacheWarning",
    "UndeclaredDependencyWarning",
    "UntrackedVariableWarning",
    "warn_at_user_code",
]


class ZCacheError(Exception):
    """Root of all zcache errors.

    Raised inside a plain ``tf.function`` (autograph on), a zcache error keeps its type
    (see ``zcache._engine.tf_internals``).
    """


class ParameterValueError(ZCacheError, ValueError):
    """A parameter value is NaN/inf, outside the limits, or not a scalar."""


class DataError(ZCacheError, ValueError):
    """Base class of the errors about datasets."""


class DataShapeError(DataError):
    """Data has the wrong rank or the wrong shape of the non-event axes."""


class DataDtypeError(DataError, TypeError):
    """Data cannot be cast safely to the dataset's dtype."""


class InvalidDataError(DataError):
    """Data contains NaN or infinite values."""


class EmptyDataError(DataError):
    """Data has no events."""


class WeightSumError(DataError):
    """The event weights of a dataset sum to zero or less.

    A likelihood of such weights is undefined (all 0: flat; a negative sum: unbounded below) and
    its fit would report meaningless errors. Single negative weights (sWeights) are fine.
    """


class DataRangeError(DataError):
    """Events lie outside the observable range of the model they are fitted with."""


class DependencyCycleError(ZCacheError):
    """Adding a dependency would make the dependency graph cyclic."""


class InvalidDependencyError(ZCacheError, TypeError):
    """A declared dependency is not a Parameter, Data or CachedTensor."""


class IllegalInGraphModeError(ZCacheError, RuntimeError):
    """The call is not allowed while a TensorFlow graph is being traced."""


class UnmanagedTraceError(IllegalInGraphModeError):
    """A write, cache read or check inside a trace that zcache does not manage.

    ``set_value`` / ``set_data`` inside a plain ``tf.function``; a cache read or an in-graph
    check inside a ``tf.function(jit_compile=True)`` that zcache does not compile.

    A plain ``tf.function`` (or a cached function) that changes an input cannot tell
    zcache, after each call, about caches created after it was traced: their values
    would go stale. Wrap the function with ``zcache.function`` or set values eagerly.
    XLA drops zcache's in-graph checks: compile with ``zcache.set_jit_mode`` instead of
    ``jit_compile=True``, which keeps them.
    """


class GraphModeError(ZCacheError, ValueError):
    """An unknown or malformed graph-mode / autograd-mode setting."""


class UnknownIdentifierError(GraphModeError):
    """A ``zcache.function(wraps=...)`` identifier that the policy does not know."""


class CachedValueError(ZCacheError, ValueError):
    """A cached function returned something that cannot be cached, or changed dtype/rank."""


class CacheBudgetError(ZCacheError, ValueError):
    """A cache memory budget that is not a non-negative number of bytes (an int) or None."""


class UncacheableArgumentError(ZCacheError, TypeError):
    """An argument of a ``@zcache.cached`` method cannot be tracked (e.g. a raw tensor)."""


class SecondOrderGradientError(ZCacheError, NotImplementedError):
    """Nested ``tf.GradientTape`` through a cache inside a traced function."""


class ForwardModeError(ZCacheError, NotImplementedError):
    """A ``tf.autodiff.ForwardAccumulator`` around a plain ``tf.function`` traced without one, through a cache."""


class ModelError(ZCacheError, ValueError):
    """A model or loss is built from inconsistent pieces (observables, fractions, extension)."""


class WholeSampleTermError(ModelError):
    """A loss cannot tell its whole-sample terms from its sum over events.

    A loss split into parts (:class:`zcache.scale.DistributedLoss`) adds its parts' sums
    over events and counts the terms of the whole sample (an extended likelihood's expected
    yield, constraints) once; a loss whose value is not such a sum (a histogram's likelihood or
    chi-square, a template fit) cannot be split so.
    """


class DensityError(ModelError):
    """A model's density is not a probability density at the current parameter values.

    Negative, NaN or infinite at an event, or its normalization not positive (e.g. a Chebyshev
    series or a Bernstein polynomial with a negative coefficient that dips below zero, or
    whose integral is 0). Raised by ``pdf`` and ``log_pdf``; a loss instead becomes NaN there,
    so a minimizer steps back from such values and never reports a valid minimum at one.
    """


class FitError(ZCacheError, RuntimeError):
    """A minimization could not be run (e.g. the loss is not finite at the starting point)."""


class BatchingError(ZCacheError, ValueError):
    """A loss cannot be evaluated for many toys at once (an op TensorFlow cannot vectorize)."""


class ToyStudyError(ZCacheError, ValueError):
    """A toy study cannot be run as asked (batch size, factory, cluster)."""


class SymbolicError(ModelError):
    """A SymPy expression cannot be bridged (:mod:`zcache.amplitude`).

    The message names the node or symbol: a function the bridge does not translate, a free
    symbol that is neither a parameter nor a data column, or a parameter given twice.
    """


class InferenceError(ZCacheError, ValueError):
    """A statistical question (:mod:`zcache.inference`) cannot be answered as asked.

    The message names what is wrong: an unknown parameter of interest, one that is not
    floating, a tested value outside its limits, a loss that the answer does not apply to.
    """


class EnvironmentSettingError(ZCacheError, ValueError):
    """A ``ZCACHE_*`` environment variable holds a value zcache does not take.

    The message names the variable and the values it takes (the table is in
    ``zcache._engine.environment``).
    """


class SPlotError(InferenceError):
    """sWeights (:func:`zcache.inference.sweights`) cannot be computed, or corrected for, as asked.

    The message names what is wrong: a loss that is not an extended fit of a sum of species with
    yields, a yield that is not floating, a fit that is not at its minimum (and how far), a
    weighted fit whose weights are not the given sWeights.
    """


class POIError(InferenceError):
    """The parameter of interest is unknown, not floating, or a tested value is outside its limits.

    The message lists the loss's parameters (an unknown name) or says what to change.
    """


class AsimovError(InferenceError):
    """The asymptotic calculator cannot make Asimov data for this loss, or its formulae do not apply.

    A loss evaluated in parts elsewhere (chunks, Dask workers), a multi-dimensional unbinned
    model, or weighted events (the asymptotic distributions assume a likelihood); the message
    names the part and suggests toys.
    """


class CrossingError(InferenceError):
    """The tested POI values do not bracket the crossing an upper limit or interval needs.

    The message says which way to extend the tested values.
    """


class ZCacheWarning(UserWarning):
    """Root of all zcache warnings."""


class RetracingWarning(ZCacheWarning):
    """A ``zcache.function`` traced more graphs than its bound; old graphs were dropped."""


class TensorFlowInternalsWarning(ZCacheWarning):
    """A TensorFlow internal that zcache relies on is missing (see ``design/invariants.md``)."""


class CompileCacheWarning(ZCacheWarning):
    """zcache's cache of compiled XLA programs is off (its folder is unsafe) or dropped damaged entries."""


class UndeclaredDependencyWarning(ZCacheWarning):
    """A cached function read a zcache object that is missing from its declared ``deps``."""


class UntrackedVariableWarning(ZCacheWarning):
    """A cached function read a ``tf.Variable`` that zcache does not track: assigning it leaves the cache stale."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _internal(filename: str) -> bool:
    """Whether a frame's file belongs to zcache or TensorFlow (not the user's code)."""
    return filename.startswith(_PACKAGE_DIR) or f"{os.sep}tensorflow{os.sep}" in filename \
        or filename.startswith("<frozen")


def warn_at_user_code(message: str, category: type[Warning]) -> None:
    """Issue a warning attributed to the first frame outside zcache and TensorFlow.

    A warning raised deep inside zcache (e.g. while a cache computes inside a traced
    function) then points at the line of the user's code that led to it.

    Parameters
    ----------
    message : str
        The warning text.
    category : type
        The warning class.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_at_user_code("look here", ZCacheWarning)
    >>> caught[0].filename.endswith("exceptions.py")
    False
    """
    frame = sys._getframe(1)  # noqa: SLF001 - the documented way to walk the caller's stack
    level = 2
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
