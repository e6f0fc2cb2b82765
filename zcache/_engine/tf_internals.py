"""Every use of TensorFlow internals, in one place.

zcache needs a handful of things that TensorFlow's public API does not offer. Each is
wrapped here, listed in ``design/invariants.md`` ("TensorFlow internals") with why it
is needed and what breaks without it, and pinned by ``tests/test_tf_internals.py``, which
fails loudly when a TensorFlow upgrade moves or changes it. No other zcache module
imports ``tensorflow.python`` or reads a private TensorFlow attribute.

If an internal is missing at import, zcache still imports, warns once with
:class:`~zcache.exceptions.TensorFlowInternalsWarning` naming what no longer works, and
falls back to the plain behaviour (listed per item below).
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from ..exceptions import TensorFlowInternalsWarning, ZCacheError

__all__ = [
    "EAGER_TENSOR",
    "MISSING",
    "complex_gradient_converts_fast",
    "complex_gradients_fixed",
    "eager_variable",
    "failed_assertion_text",
    "forward_accumulator_watches",
    "graph_key",
    "in_zcache_graphs",
    "users_tape_may_record",
    "inside_control_flow",
    "built_inside",
    "inside_vectorized_loop",
    "is_second_order_cond_error",
    "is_xla_shape_error",
    "calls_without_body_shape_inference",
    "call_program",
    "can_reuse_programs",
    "can_resume_recording",
    "keep_conditional",
    "leave_to_python",
    "made_by_zcache",
    "program_bytes",
    "register_program",
    "may_take_higher_order_gradient",
    "recording_resumed",
    "separately_compiled",
    "stop_recording",
    "tape_may_record",
    "tie_gradient_to_graph",
    "without_grappler",
    "wrong_xla_gradient_ops",
    "xla_calling_graph",
    "zcache_graphs",
]

#: Names of the internals that could not be found (empty when all work).
MISSING: list[str] = []


def _missing(name: str, consequence: str) -> None:
    MISSING.append(name)
    warnings.warn(
        f"zcache could not find the TensorFlow internal {name} (TensorFlow {tf.__version__}); "
        f"{consequence} Please report this with your TensorFlow version.",
        TensorFlowInternalsWarning,
        stacklevel=3,
    )


# 1. Pausing gradient tapes -------------------------------------------------------------
# A cache's tf.cond is stop_gradient-ed (its gradient comes from a custom gradient); a tape
# that records the cond anyway (one open while a function is traced) makes TensorFlow build
# the cond's gradient, which fails on the shape-relaxed value Variable.
try:
    from tensorflow.python.eager import record as _record

    _STOP_RECORDING: Callable[[], Any] = _record.stop_recording
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _STOP_RECORDING = contextlib.nullcontext
    _missing("tensorflow.python.eager.record.stop_recording",
             "a GradientTape open while a function that reads a cache is traced may fail.")


def stop_recording() -> Any:
    """A context in which no gradient tape on this thread records operations."""
    return _STOP_RECORDING()


# 14. Resuming recording paused by item 1 --------------------------------------------------
# A fused group's backward program (zcache.amplitude._fused) differentiates its function with a
# GradientTape inside its own trace, and that trace can be made where every tape is paused (item 1:
# a gradient taken inside a cache's miss branch). A paused thread records for no tape (nor forward
# accumulator), even one opened afterwards, and the gradient then comes out as zeros: silently
# wrong. pywrap_tfe's TFE_Py_TapeSetIsStopped / RestartOnThread / StopOnThread are what
# record.stop_recording itself calls; no public API resumes recording.
try:
    from tensorflow.python import pywrap_tfe as _pywrap_tfe

    _TAPES_STOPPED: Callable[[], bool] = _pywrap_tfe.TFE_Py_TapeSetIsStopped
    _RESTART_TAPES: Callable[[], None] = _pywrap_tfe.TFE_Py_TapeSetRestartOnThread
    _STOP_TAPES: Callable[[], None] = _pywrap_tfe.TFE_Py_TapeSetStopOnThread
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _TAPES_STOPPED = None  # type: ignore[assignment]
    _missing("tensorflow.python.pywrap_tfe.TFE_Py_TapeSet{IsStopped,RestartOnThread,StopOnThread}",
             "fused amplitude programs cannot be used: SymbolicModel falls back to unfused groups.")


def can_resume_recording() -> bool:
    """Whether :func:`recording_resumed` works (the internals of item 14 were found)."""
    return _TAPES_STOPPED is not None


@contextlib.contextmanager
def recording_resumed() -> Iterator[None]:
    """A context in which tapes and forward accumulators record again, if :func:`stop_recording` paused them.

    Raises
    ------
    ZCacheError
        The internals are missing (check :func:`can_resume_recording` first).
    """
    if _TAPES_STOPPED is None:  # pragma: no cover - another TensorFlow layout
        raise ZCacheError("recording_resumed: TensorFlow's tape-set internals are missing.")
    stopped = _TAPES_STOPPED()
    if stopped:
        _RESTART_TAPES()
    try:
        yield
    finally:
        if stopped:
            _STOP_TAPES()


# 2. Weak gradient-registry entries -----------------------------------------------------
# Inside a trace tf.custom_gradient registers its backward function in a global registry and
# never removes it; the function holds the graph's tensors, so every graph that read a cache
# would stay alive for good (~0.5 MB per traced function; a toy loop grows without bound).
try:
    from tensorflow.python.framework import ops as _ops

    _GRADIENT_REGISTRY: dict[str, Any] | None = _ops._gradient_registry._registry
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _GRADIENT_REGISTRY = None
    _missing("tensorflow.python.framework.ops._gradient_registry",
             "every traced graph that reads a CachedTensor will be kept alive for good (memory grows "
             "when many losses are built and dropped, e.g. in toy studies).")


def tie_gradient_to_graph(result: tf.Tensor) -> None:
    """Make the gradient ``tf.custom_gradient`` registered for ``result`` die with its graph.

    The graph keeps the backward function, the registry only a weak reference, and the
    registry entry is removed when the graph is collected.

    Parameters
    ----------
    result : tf.Tensor
        The output of a ``tf.custom_gradient`` function inside a trace.
    """
    if _GRADIENT_REGISTRY is None:  # pragma: no cover - warned at import
        return
    name = result.op.get_attr("_gradient_op_type").decode()
    entry = _GRADIENT_REGISTRY[name]
    fn = entry["type"]
    graph = result.graph
    kept = getattr(graph, "_zcache_gradients", None)  # graphs allow new attributes (no __dict__)
    if kept is None:
        kept = []
        setattr(graph, "_zcache_gradients", kept)  # noqa: B010
    kept.append(fn)
    fn_ref = weakref.ref(fn)

    def weak_gradient(op: Any, *grads: Any) -> Any:
        return fn_ref()(op, *grads)

    entry["type"] = weak_gradient
    weakref.finalize(graph, _GRADIENT_REGISTRY.pop, name, None)


# 3. Autograph: leave zcache's code alone ------------------------------------------------
# A plain tf.function converts the Python it calls; zcache branches on Python state while
# tracing (as zcache.function, autograph off, does) and its code breaks when converted (e.g.
# on networkx's dispatch wrappers). autograph calls an entity unconverted when it carries the
# attribute "autograph_info__" (what autograph puts on code it generated; api.is_autograph_artifact),
# checked before anything else; a bound method finds it on its function, an object on its class.
# zcache marks its own functions, classes and their methods with it (leave_to_python): not
# autograph's global CONVERSION_RULES. Errors: autograph re-raises exceptions from converted code
# as StagingError unless the class carries `ag_pass_through`; zcache errors keep their type.
_AUTOGRAPH_MARK = "autograph_info__"
try:
    from tensorflow.python.autograph.impl import api as _ag_api

    _ag_api.is_autograph_artifact  # noqa: B018 - present in this TensorFlow
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _ag_api = None
    _missing("tensorflow.python.autograph.impl.api.is_autograph_artifact",
             "zcache code called from a plain tf.function (autograph on) may fail to convert.")


def leave_to_python(module_name: str) -> None:
    """Mark the functions and classes defined in module ``module_name`` (and the classes' methods) for autograph.

    A plain ``tf.function`` (autograph on) then calls them as Python, unconverted.

    Parameters
    ----------
    module_name : str
        A zcache module, already imported (its ``__name__``).
    """
    if _ag_api is None:  # pragma: no cover - warned at import
        return
    import sys

    def mark(obj: Any) -> None:
        try:
            setattr(obj, _AUTOGRAPH_MARK, None)
        except (AttributeError, TypeError):  # a builtin, a slotted object: nothing autograph converts
            pass

    for obj in list(vars(sys.modules[module_name]).values()):
        if getattr(obj, "__module__", None) != module_name:
            continue
        if isinstance(obj, type):
            if not getattr(obj, "_is_protocol", False):  # a mark on a Protocol would become one of its members
                mark(obj)
            for member in vars(obj).values():
                for fn in (member, getattr(member, "__func__", None), getattr(member, "fget", None),
                           getattr(member, "fset", None)):
                    if fn is not None and callable(fn) and getattr(fn, "__module__", None) == module_name:
                        mark(fn)
        elif callable(obj):
            mark(obj)


ZCacheError.ag_pass_through = True


# 4. A function that stays a separate function call inside every graph ------------------
# A cache's miss branch is traced once and called from every graph that reads the cache;
# inlined, each graph would copy the miss branches of every cache below, once per path.
_NOINLINE = {"_noinline": True}


def separately_compiled(fn: Callable[..., Any], jit_compile: bool = False) -> Any:
    """``tf.function(fn)`` (autograph off) that graphs call instead of inlining it.

    Also the compiled fit's value + gradient, called at several places of its program (each
    inlined copy is prepared again at the program's first call). With ``jit_compile`` the
    function is XLA's, which TensorFlow itself marks not inlined.
    """
    if jit_compile:
        return tf.function(fn, autograph=False, jit_compile=True)
    return tf.function(fn, autograph=False, experimental_attributes=_NOINLINE)


# 5. Variables created during a trace ----------------------------------------------------
def eager_variable(initial_value: Any, **kwargs: Any) -> tf.Variable:
    """Create a ``tf.Variable`` in the eager context, even while a function is traced.

    Lifting is disabled (``experimental_enable_variable_lifting``) so that creating a
    cache's storage during the first trace does not make ``tf.function`` trace twice.

    Parameters
    ----------
    initial_value : array_like
        The Variable's initial value.
    **kwargs
        Passed on to ``tf.Variable``.

    Returns
    -------
    tf.Variable
        The new Variable.
    """
    with tf.init_scope():
        variable = tf.Variable(initial_value, experimental_enable_variable_lifting=False, **kwargs)
    _ZCACHE_VARIABLES[id(variable)] = variable
    return variable


def assign_eagerly(variable: tf.Variable, value: Any) -> None:
    """``variable.assign(value)`` outside a trace: the one kernel ``assign`` runs, without its Python.

    ``ResourceVariable.assign`` wraps its ``AssignVariableOp`` in a shape check, a lazy read-back
    object and a tape notification, more than half of the time of an eager write of a scalar; a fit
    writes its parameters and caches' flags eagerly several times per fit. The values zcache writes
    are checked before, and the Variables are zcache's own (``eager_variable``). Public API
    (``tf.raw_ops``), kept here beside :func:`eager_variable`.

    Parameters
    ----------
    variable : tf.Variable
        The Variable (a resource variable, eager).
    value : array_like or tf.Tensor
        The new value, of the Variable's dtype.
    """
    tf.raw_ops.AssignVariableOp(resource=variable.handle, value=tf.convert_to_tensor(value, variable.dtype))


#: Every Variable zcache made, by id (weakly; a Variable is not hashable): the others a cached
#: function reads are the user's own.
_ZCACHE_VARIABLES: weakref.WeakValueDictionary[int, tf.Variable] = weakref.WeakValueDictionary()


def made_by_zcache(variable: tf.Variable) -> bool:
    """Whether ``variable`` was made by :func:`eager_variable` (a Parameter's, a Data's, a cache's)."""
    return _ZCACHE_VARIABLES.get(id(variable)) is variable


# 6. The type of an eager tensor -----------------------------------------------------------
#: ``tf.Tensor`` is an abstract base; a minimizer's hot path tests the concrete eager type.
EAGER_TENSOR = type(tf.constant(0.0))


def graph_key() -> int:
    """An id of the graph being built (the eager context has one too)."""
    return id(tf.compat.v1.get_default_graph())


# 7. TensorFlow's error texts ----------------------------------------------------------
# An in-graph check fails as tf.errors.InvalidArgumentError; TensorFlow wraps its message as
# "[msg]" (zcache's asserts; "[msg] [Condition x == y did not hold ...]" from tf.debugging.assert_*)
# or "msg : Tensor had NaN values".
_TF_SUFFIX = re.compile(r"\s*: Tensor had .*$")


def failed_assertion_text(text: str) -> str:
    """The user message of a failed ``tf.debugging`` assertion, without TensorFlow's wrapping."""
    return _TF_SUFFIX.sub("", text.replace("\\'", "'")).strip()


def is_second_order_cond_error(err: Exception) -> bool:
    """Whether ``err`` is TensorFlow refusing the second-order gradient of a shape-relaxed cond."""
    return isinstance(err, ValueError) and "partially known TensorShape" in str(err)


def is_xla_shape_error(err: Exception) -> bool:
    """Whether ``err`` is XLA refusing to change a Variable's shape inside a compiled function.

    A cache's first fill, or ``set_data`` to another number of events, assigns a Variable of a
    new shape; XLA cannot, and ``zcache.function`` runs that one call uncompiled. Matched on
    TensorFlow's message text (no public error type says it).
    """
    message = getattr(err, "message", str(err))
    return isinstance(err, tf.errors.OpError) and (
        "cannot be changed after initialization" in message or "Incompatible shapes" in message)


# 8. XLA keeps a cache's conditional -------------------------------------------------------
# XLA's ConditionalSimplifier turns a conditional whose branches hold only element-wise ops
# (after inlining the miss function: sin, exp, complex arithmetic, ... of every event) into a
# select, which computes both branches on every call: under XLA every cache hit would pay for
# its miss (a hit of an element-wise cache then costs what its computation costs). A
# loop whose trip count XLA cannot know at compile time is not element-wise, so a miss branch
# that holds one stays a conditional. It runs once, on scalars, on a miss only.
def keep_conditional(count: tf.Tensor) -> tf.Tensor:
    """``count`` (a non-negative integer scalar), passed through a one-step loop XLA cannot unroll.

    Used in a cache's miss branch (the miss counter goes through it) so that XLA compiles the
    cache read as a conditional, not as a select of both branches.
    """
    _, out = tf.while_loop(
        lambda i, c: tf.logical_and(i < 1, c >= 0),  # c >= 0 always: one step, unknown to XLA
        lambda i, c: (i + 1, c),
        (tf.zeros([], count.dtype), count),
    )
    return out


# 9. Which graph being built TensorFlow compiles with XLA ----------------------------------
# tf.function(jit_compile=True) traces its body inside an XLAControlFlowContext; XLA then
# drops every Assert op. zcache's checks are Asserts except in a body that zcache itself
# compiles (they become outputs there), so a cache read or a check in a graph that a
# *user's* jit_compile function compiles must be refused, not silently unchecked. No public
# API says whether a graph is being compiled with XLA.
try:
    from tensorflow.python.ops import control_flow_util as _cf_util

    _IN_XLA: Callable[[Any], bool] | None = _cf_util.InXlaContext
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _IN_XLA = None
    _missing("tensorflow.python.ops.control_flow_util.InXlaContext",
             "a cache read inside a user's tf.function(jit_compile=True) is not refused: XLA drops "
             "zcache's checks there (use zcache.set_jit_mode instead).")


def xla_calling_graph() -> Any:
    """The outermost graph in an XLA context, from the graph being built outwards, or None.

    None when no enclosing function is XLA-compiled.

    TensorFlow enters the XLA context on the graph that *calls* a ``jit_compile`` function
    (the eager context's graph too) when it is called, and on the function's body when
    ``get_concrete_function`` traces it: the walk goes from the graph being built (a
    ``tf.cond`` branch, a loop body, a function body) out through the graphs that contain
    it, up to the eager context's graph.
    """
    if _IN_XLA is None:  # pragma: no cover - warned at import
        return None
    found = None
    for graph in _enclosing_graphs():
        if _IN_XLA(graph):
            found = graph
    return found


def _enclosing_graphs() -> Iterator[Any]:
    """The graph being built, then each graph that contains it, out to the eager context's graph."""
    graph: Any = tf.compat.v1.get_default_graph()
    while graph is not None:
        yield graph
        graph = getattr(graph, "outer_graph", None) if graph.building_function else None


# 10. XLA's complex gradients of sqrt, rsqrt and reciprocal ---------------------------------
# TensorFlow differentiates Sqrt, Rsqrt and Reciprocal (and its old name Inv) with fused ops
# (SqrtGrad, RsqrtGrad, ReciprocalGrad) whose CPU/GPU kernels conjugate for complex inputs
# (0.5 dy / conj(y), -0.5 dy conj(y)^3, -dy conj(y^2)); XLA's kernels of the same ops do not
# (TensorFlow 2.21). Every gradient through a complex square root or 1/z (a Breit-Wigner's
# propagator, a breakup momentum below threshold) was therefore wrong in a compiled graph while
# values were right: a bridged ampform model with masses and widths floating had a compiled
# gradient off by O(1) and a Hessian off by factors up to ~2000 (issue 23). The gradient of a
# complex input is built from plain ops (Conj, Mul, Div) instead, which XLA compiles right; real
# inputs keep TensorFlow's own gradient. Always, not only inside an XLA context: a function's
# backward is built once, where the function was traced, and reused by every caller, compiled or
# not (the bridge's group programs, issue 26: their backward, built outside XLA, was compiled
# wrong inside a jit-compiled loss). The plain ops cost a few element-wise kernels more.
# Not a rewrite of TensorFlow's registry for the process: the entries are swapped in while a thread is
# inside zcache_graphs() (zcache's traces and gradients) and put back when the last one leaves; the
# swapped-in entry gives TensorFlow's own gradient on any thread that is not inside (see zcache_graphs).
#: op type -> the gradient, from y = op.outputs[0] and the incoming gradient, with conjugates spelled out
_CONJUGATED_GRADIENTS: dict[str, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = {
    "Sqrt": lambda y, grad: (tf.constant(0.5, y.dtype) * grad) / tf.math.conj(y),
    "Rsqrt": lambda y, grad: tf.constant(-0.5, y.dtype) * (grad * tf.math.conj(y)) * tf.math.conj(y * y),
    "Reciprocal": lambda y, grad: -grad * tf.math.conj(y * y),
    "Inv": lambda y, grad: -grad * tf.math.conj(y * y),
}


def _conjugating(op_type: str, tf_gradient: Callable[..., Any]) -> Callable[..., Any]:
    conjugated = _CONJUGATED_GRADIENTS[op_type]

    def gradient(op: Any, grad: Any) -> Any:
        y = op.outputs[0]
        if y.dtype.is_complex and in_zcache_graphs():
            return conjugated(y, grad)
        return tf_gradient(op, grad)

    gradient.tensorflow_gradient = tf_gradient  # type: ignore[attr-defined]
    return gradient


def complex_gradients_fixed() -> bool:
    """Whether the gradients of complex Sqrt, Rsqrt and Reciprocal are right inside XLA (see item 10).

    Returns
    -------
    bool
        False when TensorFlow's gradient registry or XLA context could not be found: a compiled
        graph that holds one of those gradient ops (:func:`wrong_xla_gradient_ops`) must then run
        uncompiled.
    """
    return _IN_XLA is not None and all(op_type in _ZCACHE_GRADIENTS for op_type in _CONJUGATED_GRADIENTS)


#: The fused gradient ops whose XLA kernels lack the conjugate for complex inputs.
_WRONG_UNDER_XLA = frozenset({"SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "InvGrad"})


def wrong_xla_gradient_ops(graph: Any) -> list[str]:
    """Names of the ops in ``graph`` (and every function it calls) that XLA computes wrong.

    The fused gradients of a complex Sqrt, Rsqrt or Reciprocal (item 10): their XLA kernels drop
    the conjugate. Empty whenever :func:`complex_gradients_fixed`, since the gradients built then
    inside an XLA context do not use them.

    Parameters
    ----------
    graph : tf.Graph
        A traced graph.

    Returns
    -------
    list of str
        ``function/op`` names; empty when there is none.
    """
    graph_def = graph.as_graph_def()
    complex_types = {tf.complex64.as_datatype_enum, tf.complex128.as_datatype_enum}

    def wrong(node: Any) -> bool:
        return node.op in _WRONG_UNDER_XLA and node.attr["T"].type in complex_types

    found = [node.name for node in graph_def.node if wrong(node)]
    for func in graph_def.library.function:
        found += [f"{func.signature.name}/{node.name}" for node in func.node_def if wrong(node)]
    return found


# 11. Calls of a function without Grappler -----------------------------------------------------
# TensorFlow passes each function call the calling thread's FunctionCallOptions, whose config
# decides whether Grappler rewrites the function when it is instantiated. On a compiled fit and on
# a bridged model's first value + gradient Grappler took a large part of the first call and made no
# later call faster (the compiled fit's slower) (design/decisions/0003-compiled-fit.md). The public
# switch, ``tf.config.optimizer.set_experimental_options``, is process-wide; the options of one
# thread are an eager-context attribute. Fallback: Grappler stays on.
try:
    from tensorflow.python.eager import context as _context

    _FunctionCallOptions = _context.FunctionCallOptions
    _context.context().function_call_options  # noqa: B018 - present in this TensorFlow
except (ImportError, AttributeError) as _err:  # pragma: no cover - depends on TensorFlow
    _FunctionCallOptions = None
    _missing(f"eager context function_call_options ({_err})",
             "compiled fits and traced calls run with Grappler (slower first calls).")


@contextlib.contextmanager
def without_grappler() -> Any:
    """Inside the block, functions called on this thread are instantiated without Grappler.

    A function instantiated this way is kept per option set: calling it again inside the
    block reuses that instantiation.

    Yields
    ------
    None
    """
    if _FunctionCallOptions is None:  # pragma: no cover - depends on TensorFlow
        yield
        return
    ctx = _context.context()
    saved = ctx.function_call_options
    config = _copy_config(saved)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    ctx.function_call_options = _FunctionCallOptions(executor_type=saved.executor_type, config_proto=config)
    try:
        yield
    finally:
        ctx.function_call_options = saved


def _copy_config(options: Any) -> Any:
    config = tf.compat.v1.ConfigProto()
    config.ParseFromString(options.config_proto_serialized)
    return config


# 12. Whether a graph being built is a branch of tf.cond or a loop body --------------------------
# The gradient of a tf.cond (or a loop) is built in a graph of its own that may capture only
# tensors of the forward graphs, not eager tensors: a cache's backward pass that reads its
# inputs' Variables there (capturing their eager handles) makes TensorFlow fail ("... is in
# list of internal_captures but not in internal_capture_to_output" for a loop, "Tensor.graph
# is undefined when eager execution is enabled" for a cond; TensorFlow 2.21). A cache read
# inside control flow therefore recomputes at its forward pass's values (cache_gradient). No
# public API says whether a graph is a control-flow branch.
try:
    from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph as _CONTROL_FLOW_GRAPH
except ImportError:  # pragma: no cover - another TensorFlow layout
    _CONTROL_FLOW_GRAPH = None
    _missing("tensorflow.python.ops.control_flow_v2_func_graphs.ControlFlowFuncGraph",
             "a gradient through a cache read inside tf.cond or a loop always recomputes its inputs' subtree.")


def inside_control_flow() -> bool:
    """Whether the graph being built is (inside) a ``tf.cond`` branch or a loop body.

    True also where TensorFlow's layout is unknown (the safe answer).
    """
    if _CONTROL_FLOW_GRAPH is None:  # pragma: no cover
        return True
    return any(isinstance(graph, _CONTROL_FLOW_GRAPH) for graph in _enclosing_graphs())


def built_inside(graph: Any) -> bool:
    """Whether the graph being built is ``graph`` or lies inside it (a branch or body of its control flow).

    A cache's backward pass asks this of the graph its forward pass was built in: a tape inside that
    trace builds the backward pass there, while a tape outside it (an eager tape around a call of the
    traced function) makes TensorFlow build a separate backward function, when the call is recorded
    (``cache_gradient``).
    """
    return any(g is graph for g in _enclosing_graphs())


# 13. Whether ops being built are the body of a vectorized loop (pfor) ----------------------------
# tape.jacobian (and batch_jacobian, tf.vectorized_map) builds its loop body once and vectorizes
# every op built there. A second derivative through a cache calls the cache's backward pass
# inside that body (when the loss is not linear in the cache: a log-likelihood's 1/pdf), and a
# backward pass that reads the caches below it builds their tf.cond with its store, which pfor
# cannot vectorize ("Attempting to slice scalar input" for AssignVariableOp; TensorFlow 2.21):
# an exact traced Hessian of a loss with valid caches on its path failed. There the backward pass
# recomputes at its forward pass's values, reading no cache (cache_gradient); a cache read in a
# user's tf.vectorized_map is computed there, as a bypassed cache is (cached_tensor). pfor builds its body
# under the name scope "loop_body" (parallel_for/control_flow_ops.py, _pfor_impl), made unique in
# its graph ("loop_body_1", ...); no public API says whether ops are being built for pfor.
_PFOR_BODY_SCOPE = re.compile(r"loop_body(_\d+)?")


def inside_vectorized_loop() -> bool:
    """Whether the ops being built are (inside) the body of a ``pfor`` loop (``tape.jacobian``)."""
    return tf.inside_function() and any(_PFOR_BODY_SCOPE.fullmatch(part)
                                        for part in tf.get_current_name_scope().split("/"))


# 15. Whether a second-order gradient may be taken of tensors being built ------------------------
# A traced cache read whose miss gives TensorFlow's own gradient (traced_cache.read_in_graph_
# differentiably) is recorded on tapes as a tf.cond. Its first-order gradient is right, but a
# second-order one (nested tapes; an exact Hessian through tape.jacobian, whose pfor cannot
# vectorize the cond gradient's optional intermediates: "Required handle data not set") must not
# go through it: such a read takes the custom gradient (cache_gradient) instead. TensorFlow asks
# the same question of the tapes before it records a function call (TFE_Py_TapeSetPossibleGradient
# Types, 2: higher order); no public API answers it.
try:
    _POSSIBLE_GRADIENT_TYPES: Callable[[list[Any]], int] | None = _pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes
except (NameError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _POSSIBLE_GRADIENT_TYPES = None
    _missing("tensorflow.python.pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes",
             "a cache miss with a gradient recomputes the cache's function in the backward pass.")


def may_take_higher_order_gradient(tensors: list[tf.Tensor]) -> bool:
    """Whether the tapes recording now may take a gradient of a gradient of ``tensors``.

    True also where TensorFlow's internals are missing (the safe answer).
    """
    if _POSSIBLE_GRADIENT_TYPES is None:  # pragma: no cover
        return True
    return _POSSIBLE_GRADIENT_TYPES(tensors) > 1


# 16. Function calls built without shape inference into the function's body ---------------------
# Building a call of a traced function in a graph (PartitionedCall, StatefulPartitionedCall) runs
# TensorFlow's C++ shape inference through the whole body of the function, and of every function it
# calls, once per call site: a compiled fit calls its value + gradient function at six places (start,
# seed Hessian, BFGS step, final Hessian, Newton step, flat directions), and for the J/psi amplitude
# model these ops took about half of the program's trace. Python sets every call output's
# static shape from the function's signature right after (atomic_function.call_flat), so the
# inference buys nothing there. The node attribute "_disable_call_shape_inference" (what TensorFlow's
# legacy Defun sets on its calls) skips it; the call op's attributes are fixed inside
# atomic_function.partitioned_call_op, so the attribute is added to the op it creates, on this thread
# and inside calls_without_body_shape_inference() only; the wrapper is TensorFlow's partitioned_call_op
# only while a thread is inside the block. Fallback: the inference runs (slower traces).
_SHAPE_INFERENCE_OFF = "_disable_call_shape_inference"
_CALLS_LOCAL = threading.local()
try:
    from tensorflow.core.framework import attr_value_pb2 as _attr_value_pb2
    from tensorflow.python.eager.polymorphic_function import atomic_function as _atomic_function
    from tensorflow.python.framework import ops as _ops

    _PARTITIONED_CALL_OP: Callable[..., Any] | None = _atomic_function.partitioned_call_op
    _ops.Graph.create_op  # noqa: B018 - present in this TensorFlow
except (ImportError, AttributeError) as _err:  # pragma: no cover - another TensorFlow layout
    _PARTITIONED_CALL_OP = None
    _missing(f"atomic_function.partitioned_call_op ({_err})",
             "compiled fits trace slower (shape inference through every function call).")


def _partitioned_call_op(*args: Any, **kwargs: Any) -> Any:
    """TensorFlow's ``partitioned_call_op``; inside the block the op skips inference into the body."""
    if not getattr(_CALLS_LOCAL, "active", 0):
        return _PARTITIONED_CALL_OP(*args, **kwargs)
    graph = _ops.get_default_graph()
    create = graph.create_op
    off = _attr_value_pb2.AttrValue(b=True)

    def create_op(op_type: Any, inputs: Any, dtypes: Any = None, input_types: Any = None, name: Any = None,
                  attrs: Any = None, *rest: Any, **options: Any) -> Any:
        return create(op_type, inputs, dtypes, input_types, name, {**(attrs or {}), _SHAPE_INFERENCE_OFF: off},
                      *rest, **options)

    graph.create_op = create_op  # an instance attribute: this graph only, until removed below
    try:
        return _PARTITIONED_CALL_OP(*args, **kwargs)
    finally:
        del graph.create_op


_CALLS_LOCK = threading.Lock()
_CALLS_INSIDE = [0]  # entries of calls_without_body_shape_inference() on all threads


@contextlib.contextmanager
def calls_without_body_shape_inference() -> Iterator[None]:
    """Inside the block, function calls this thread builds into graphs skip shape inference into the body.

    The calls' output shapes are still the functions' declared ones; only TensorFlow's C++
    inference through the called functions' bodies, repeated at every call site, is skipped.
    ``atomic_function.partitioned_call_op`` is zcache's wrapper only while some thread is inside
    the block (a count under a lock); TensorFlow's own is back when the last one leaves.

    Yields
    ------
    None
    """
    if _PARTITIONED_CALL_OP is None:  # pragma: no cover - warned at import
        yield
        return
    with _CALLS_LOCK:
        if _CALLS_INSIDE[0] == 0 and _atomic_function.partitioned_call_op is _PARTITIONED_CALL_OP:
            _atomic_function.partitioned_call_op = _partitioned_call_op
        _CALLS_INSIDE[0] += 1
    _CALLS_LOCAL.active = getattr(_CALLS_LOCAL, "active", 0) + 1
    try:
        yield
    finally:
        _CALLS_LOCAL.active -= 1
        with _CALLS_LOCK:
            _CALLS_INSIDE[0] -= 1
            if _CALLS_INSIDE[0] == 0 and _atomic_function.partitioned_call_op is _partitioned_call_op:
                _atomic_function.partitioned_call_op = _PARTITIONED_CALL_OP


# 17. The gradient of Complex under XLA -----------------------------------------------------------
# TensorFlow differentiates tf.complex(re, im) by the Real and the Imag of the incoming gradient,
# two ops that TensorFlow 2.21 converts to XLA through a per-op MLIR legalization, far slower
# than the others (zcache._engine.xla_ops). A bridged model's fused backward programs held dozens of them (a
# coupling, a Breit-Wigner's denominator, each real-to-complex promotion): most of their conversion
# time, paid at each program's first call in every process, compile cache or not. Inside an XLA
# context the gradient's parts are taken with Casts instead, whose conversion is direct: the real
# part by a Cast to the real type, the imaginary part as the real part of -i g (the same values to
# the last bit). Not Cast's public spelling tf.cast, which warns on every complex-to-real cast.
# Elsewhere TensorFlow's own gradient. Swapped into the registry only while zcache builds graphs, as
# item 10's (zcache_graphs). Fallback: TensorFlow's gradient everywhere (slower first
# calls of compiled programs, the same values).
def _complex_parts_for_xla(tf_gradient: Callable[..., Any]) -> Callable[..., Any]:
    def gradient(op: Any, grad: Any) -> Any:
        if not in_zcache_graphs() or xla_calling_graph() is None:
            return tf_gradient(op, grad)
        re, im = op.inputs
        g_re = tf.raw_ops.Cast(x=grad, DstT=re.dtype)
        g_im = tf.raw_ops.Cast(x=grad * tf.constant(-1j, grad.dtype), DstT=im.dtype)
        if re.shape.is_fully_defined() and im.shape.is_fully_defined() and re.shape == im.shape == grad.shape:
            return g_re, g_im
        s_re, s_im = tf.shape(re), tf.shape(im)
        r_re, r_im = tf.raw_ops.BroadcastGradientArgs(s0=s_re, s1=s_im)
        return (tf.reshape(tf.reduce_sum(g_re, r_re), s_re), tf.reshape(tf.reduce_sum(g_im, r_im), s_im))

    gradient.tensorflow_gradient = tf_gradient  # type: ignore[attr-defined]
    return gradient


def complex_gradient_converts_fast() -> bool:
    """Whether the gradient of ``tf.complex`` takes its parts with Casts inside an XLA context (item 17).

    Returns
    -------
    bool
        False when TensorFlow's gradient registry could not be found (the gradient is then
        TensorFlow's own everywhere: the same values, slower first calls of compiled programs).
    """
    return "Complex" in _ZCACHE_GRADIENTS


# 18. zcache's gradients, only in zcache's graphs -------------------------------------------------
# Items 10 and 17 need TensorFlow's gradient registry (global, keyed by op type: a graph-local
# gradient_override_map is not read by GradientTape, which zcache's traces use) to hold zcache's
# gradient of Sqrt, Rsqrt, Reciprocal, Inv and Complex (and of Cast: its complex-to-real gradient
# without TensorFlow's warning, _cast_without_warning). zcache changes nothing global for the
# process: the entries are swapped in when the first thread enters zcache_graphs() (a count under a
# lock) and TensorFlow's own put back when the last one leaves; while swapped in, each gives
# TensorFlow's own gradient on a thread that is not inside (in_zcache_graphs). zcache enters the
# block wherever it builds graphs or gradients: a zcache.function's trace, a compiled fit's call, a
# gradient zcache takes (zcache.gradient, a loss's value_gradient, the minimizers'), a fused program's
# backward. A gradient a user's own tape takes of a zcache.function's output outside those is
# TensorFlow's; a zcache.function compiled with XLA checks the graphs it traced for the fused ops
# XLA computes wrong (wrong_xla_gradient_ops) and runs uncompiled if it finds one.
_GRAPHS_LOCK = threading.Lock()
_GRAPHS = threading.local()
_GRAPHS_DEPTH = [0]  # threads inside zcache_graphs(), counted once per entry
#: op type -> zcache's gradient (a wrapper of TensorFlow's own), swapped in while zcache builds graphs
_ZCACHE_GRADIENTS: dict[str, Callable[..., Any]] = {}


def _cast_without_warning(tf_gradient: Callable[..., Any]) -> Callable[..., Any]:
    """Cast's gradient, where it takes the real part of a complex gradient, without TensorFlow's warning.

    The gradient of a real-to-complex ``tf.cast`` (a promotion in amplitude code) is a complex-to-real
    cast of the incoming gradient, which TensorFlow spells ``tf.cast`` and which logs "You are casting
    an input of type complex128 to an incompatible dtype float64" each time it is built (thousands of
    lines in a stress run). The same Cast op, built without the warning: the same values.
    """
    def gradient(op: Any, grad: Any) -> Any:
        source = op.inputs[0].dtype.base_dtype
        if in_zcache_graphs() and grad.dtype.is_complex and source.is_floating:
            return tf.raw_ops.Cast(x=grad, DstT=source)
        return tf_gradient(op, grad)

    gradient.tensorflow_gradient = tf_gradient  # type: ignore[attr-defined]
    return gradient


_WRAPPERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    **{op_type: (lambda t, op_type=op_type: _conjugating(op_type, t)) for op_type in _CONJUGATED_GRADIENTS},
    "Complex": _complex_parts_for_xla,
    "Cast": _cast_without_warning,
}
if _GRADIENT_REGISTRY is not None:
    for _op_type, _wrap in _WRAPPERS.items():
        _tf_gradient = (_GRADIENT_REGISTRY.get(_op_type) or {}).get("type")
        if callable(_tf_gradient):
            _ZCACHE_GRADIENTS[_op_type] = _wrap(_tf_gradient)
if _IN_XLA is not None and not complex_gradients_fixed():  # pragma: no cover - another TensorFlow layout
    _missing("the gradient registry entries of Sqrt, Rsqrt, Reciprocal and Inv",
             "gradients through a complex sqrt or 1/z cannot be compiled with XLA: such graphs run uncompiled.")
if _GRADIENT_REGISTRY is not None and "Complex" not in _ZCACHE_GRADIENTS:  # pragma: no cover - another layout
    _missing("the gradient registry entry of Complex",
             "gradients of complex numbers built inside XLA programs convert slower (the same values).")


try:
    _TAPE_SET_EMPTY: Callable[[], bool] | None = _pywrap_tfe.TFE_Py_TapeSetIsEmpty
except (NameError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _TAPE_SET_EMPTY = None
    _missing("tensorflow.python.pywrap_tfe.TFE_Py_TapeSetIsEmpty",
             "a compiled zcache.function called under a GradientTape always runs uncompiled.")


def users_tape_may_record() -> bool:
    """Whether a gradient tape outside zcache's own gradients may record a call made now on this thread.

    Such a tape builds the call's backward when the user asks for the gradient, outside
    :func:`zcache_graphs`: with TensorFlow's gradients, which XLA computes wrong for a complex sqrt or
    1/z. A compiled ``zcache.function`` then runs its uncompiled graph. True also where TensorFlow's
    internals are missing (the safe answer).
    """
    if in_zcache_graphs():
        return False
    return _TAPE_SET_EMPTY is None or not _TAPE_SET_EMPTY()


def in_zcache_graphs() -> bool:
    """Whether this thread is inside :func:`zcache_graphs` (zcache is building a graph or a gradient)."""
    return getattr(_GRAPHS, "depth", 0) > 0


# The same holds for pfor's conversion of a complex-to-real Cast (such as those of the gradients above), which
# an exact Hessian's tape.jacobian vectorizes: TensorFlow's converter spells the vectorized Cast tf.cast, which
# logs "You are casting an input of type complex128 ..." for every one it converts (thousands of lines in a
# stress run of exact Hessians of amplitude losses). zcache's converter builds the same Cast op without the
# warning; it is swapped into pfor's converter registry (a dict keyed by op type) with the gradients, on the
# same terms. Fallback: TensorFlow's converter (the same values, and the warning).
try:
    from tensorflow.python.ops.parallel_for import pfor as _pfor

    _PFOR_CONVERTERS: dict[str, Callable[..., Any]] | None = _pfor._pfor_converter_registry
    _PFOR_WRAP: Callable[..., Any] | None = _pfor.wrap
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _PFOR_CONVERTERS = _PFOR_WRAP = None
    _missing("tensorflow.python.ops.parallel_for.pfor._pfor_converter_registry",
             "an exact Hessian through complex numbers logs TensorFlow's 'casting complex' warning (the same values).")
#: op type -> zcache's pfor converter (a wrapper of TensorFlow's own), swapped in while zcache builds graphs
_ZCACHE_PFOR_CONVERTERS: dict[str, Callable[..., Any]] = {}


def _pfor_cast_without_warning(tf_converter: Callable[..., Any]) -> Callable[..., Any]:
    def converter(pfor_input: Any) -> Any:
        source, target = pfor_input.op.inputs[0].dtype.base_dtype, pfor_input.get_attr("DstT")
        if in_zcache_graphs() and source.is_complex and not tf.as_dtype(target).is_complex:
            return _PFOR_WRAP(tf.raw_ops.Cast(x=pfor_input.stacked_input(0), DstT=target), True)
        return tf_converter(pfor_input)

    converter.tensorflow_converter = tf_converter  # type: ignore[attr-defined]
    return converter


if _PFOR_CONVERTERS is not None and callable(_PFOR_CONVERTERS.get("Cast")):
    _ZCACHE_PFOR_CONVERTERS["Cast"] = _pfor_cast_without_warning(_PFOR_CONVERTERS["Cast"])


def _swap(table: dict[str, Any], key: str, ours: Callable[..., Any], theirs: Callable[..., Any], install: bool) -> None:
    """``table[key]`` becomes ``ours`` where it holds ``theirs`` (install), or back; only what zcache put there."""
    if install and table.get(key) is theirs:
        table[key] = ours
    elif not install and table.get(key) is ours:
        table[key] = theirs


def _swap_gradients(install: bool) -> None:
    for op_type, ours in _ZCACHE_GRADIENTS.items():
        entry = _GRADIENT_REGISTRY.get(op_type) if _GRADIENT_REGISTRY is not None else None
        if entry is not None:  # (None: removed by someone else)
            _swap(entry, "type", ours, ours.tensorflow_gradient, install)  # type: ignore[attr-defined]
    for op_type, ours in _ZCACHE_PFOR_CONVERTERS.items():
        _swap(_PFOR_CONVERTERS, op_type, ours, ours.tensorflow_converter, install)  # type: ignore[arg-type,attr-defined]


@contextlib.contextmanager
def zcache_graphs() -> Iterator[None]:
    """The block in which zcache builds graphs and gradients: zcache's gradients of items 10 and 17 apply.

    TensorFlow's gradient registry holds them only while some thread is inside; on leaving the
    last block TensorFlow's own entries are back, the same objects. Re-entrant and thread-safe.

    Yields
    ------
    None
    """
    depth = getattr(_GRAPHS, "depth", 0)
    if depth == 0:
        with _GRAPHS_LOCK:
            if _GRAPHS_DEPTH[0] == 0:
                _swap_gradients(True)
            _GRAPHS_DEPTH[0] += 1
    _GRAPHS.depth = depth + 1
    try:
        yield
    finally:
        _GRAPHS.depth = depth
        if depth == 0:
            with _GRAPHS_LOCK:
                _GRAPHS_DEPTH[0] -= 1
                if _GRAPHS_DEPTH[0] == 0:
                    _swap_gradients(False)


# 19. Whether a forward accumulator watches tensors ------------------------------------------------
# tf.autodiff.ForwardAccumulator pushes Jacobian-vector products through the ops it sees. A cache
# hit is a Variable read under a custom-gradient identity whose backward recomputes the cache:
# TensorFlow gave no JVP through it (eagerly: None, silently wrong), and a tf.function traced under
# an accumulator failed inside the cache's tf.cond. A read that an accumulator watches is therefore
# computed directly (bypassed), so its JVP is TensorFlow's own. No public API says whether an
# accumulator watches a tensor; forwardprop_util.pack_tangents (what function calls use to pass
# tangents on) returns a tangent for every active accumulator that watches one of them.
try:
    from tensorflow.python.eager import forwardprop_util as _forwardprop_util

    _PACK_TANGENTS: Callable[[list[Any]], Any] | None = _forwardprop_util.pack_tangents
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _PACK_TANGENTS = None
    _missing("tensorflow.python.eager.forwardprop_util.pack_tangents",
             "a cache read under tf.autodiff.ForwardAccumulator is always computed directly (uncached).")


def tape_may_record() -> bool:
    """Whether some gradient tape or forward accumulator is active on this thread (True if unknown)."""
    return _TAPE_SET_EMPTY is None or not _TAPE_SET_EMPTY()


def forward_accumulator_watches(variables: list[tf.Variable]) -> bool:
    """Whether an active ``tf.autodiff.ForwardAccumulator`` gives any of ``variables`` a tangent.

    False at once where no tape nor accumulator is active on this thread (the common case, no
    TensorFlow call). True where the internals are missing and some tape is active (the safe answer:
    the caller then computes without its cache). The variables' handles are asked first (no op
    runs); in a user's own trace their values are read too, because an accumulator opened inside
    the function watches the reads of its captured handles, not the handles.
    """
    if not tape_may_record():
        return False
    if _PACK_TANGENTS is None:  # pragma: no cover - another TensorFlow layout
        return True
    # The handles first (no op is built): they see every accumulator opened outside the graph
    # being built. Only an accumulator opened inside a user's own function sees the reads and not
    # the handles; zcache's own traces (zcache_graphs) hold none, so they build no reads for it.
    if _PACK_TANGENTS([v.handle for v in variables]).tangents:
        return True
    if not tf.inside_function() or in_zcache_graphs():
        return False
    return bool(_PACK_TANGENTS([v.value() for v in variables]).tangents)


# 20. A traced program's functions as bytes, and called by name ------------------------------------
# A compiled fit's program reused across processes (trace_store.py, issue 54): its FunctionDef and
# every function it calls are written as a FunctionDefLibrary, added to a later process's eager
# context under new names and called by name, as TensorFlow calls a traced function (nothing is
# traced). The public API offers this only through a SavedModel, whose loading rebuilds the graphs in
# Python (a trace's cost). Which functions a concrete function calls is its graph's library.
try:
    from tensorflow.core.framework import function_pb2 as _function_pb2
    from tensorflow.python.eager import context as _eager_context

    _eager_context.context().has_function  # noqa: B018 - the methods used below
    _eager_context.context().add_function_def  # noqa: B018
    _eager_context.context().call_function  # noqa: B018
    _FUNCTIONS_OK = True
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
    _FUNCTIONS_OK = False
    _missing("eager context add_function_def / call_function, FunctionDefLibrary",
             "compiled fits trace their program in every process (no reuse across processes).")

#: Node attributes that name a function (call ops, control flow); and list(func) ones.
_FUNC_ATTRS = ("f", "then_branch", "else_branch", "cond", "body", "branches")


def can_reuse_programs() -> bool:
    """Whether a traced program can be written as bytes and called from them in another process."""
    return _FUNCTIONS_OK


def program_bytes(concrete: Any) -> tuple[bytes, str, int]:
    """A concrete function as bytes: its FunctionDef and every function it calls.

    Returns
    -------
    data : bytes
        A serialized ``FunctionDefLibrary``.
    name : str
        The program's own function's name in it.
    outputs : int
        Its number of outputs.
    """
    library = _function_pb2.FunctionDefLibrary()
    library.function.extend(concrete.graph.as_graph_def().library.function)
    main = concrete.function_def
    if all(f.signature.name != main.signature.name for f in library.function):
        library.function.append(main)
    return library.SerializeToString(), main.signature.name, len(main.signature.output_arg)


def register_program(data: bytes, name: str, suffix: str) -> tuple[str, list[tf.DType], int]:
    """Add the functions of :func:`program_bytes`'s ``data`` to this process, each renamed with ``suffix``.

    Renamed (and every reference to them), a loaded function never meets a function of this process
    that happens to bear the same traced name. A name already added (the same entry loaded twice)
    is kept.

    Returns
    -------
    name : str
        The program's new name, for :func:`call_program`.
    inputs : list of tf.DType
        Its input types, in order.
    outputs : int
        Its number of outputs.

    Raises
    ------
    ZCacheError
        ``data`` is not such a library, or ``name`` is not in it.
    """
    library = _function_pb2.FunctionDefLibrary()
    try:
        library.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError: not a library
        raise ZCacheError(f"not a function library ({exc})") from exc
    renamed = {f.signature.name: f"{f.signature.name}{suffix}" for f in library.function}
    if name not in renamed:
        raise ZCacheError(f"the function {name!r} is not in the library")
    ctx = _eager_context.context()
    ctx.ensure_initialized()
    main = None
    for fdef in library.function:
        fdef.signature.name = renamed[fdef.signature.name]
        for node in fdef.node_def:
            if node.op in renamed:
                node.op = renamed[node.op]
            for key in _FUNC_ATTRS:
                if key in node.attr:
                    value = node.attr[key]
                    if value.HasField("func") and value.func.name in renamed:
                        value.func.name = renamed[value.func.name]
                    for func in value.list.func:
                        if func.name in renamed:
                            func.name = renamed[func.name]
        if fdef.signature.name == renamed[name]:
            main = fdef
    for fdef in library.function:
        if not ctx.has_function(fdef.signature.name):
            ctx.add_function_def(fdef)
    inputs = [tf.as_dtype(arg.type) for arg in main.signature.input_arg]
    return main.signature.name, inputs, len(main.signature.output_arg)


def call_program(name: str, inputs: list[Any], outputs: int) -> list[tf.Tensor]:
    """Call a function :func:`register_program` added, eagerly, as TensorFlow calls a traced one.

    With this thread's function call options (:func:`without_grappler` applies).
    """
    return _eager_context.context().call_function(name.encode(), list(inputs), outputs)
