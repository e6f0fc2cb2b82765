"""A compiled fit's traced program kept on disk and loaded by a later process instead of traced (issue 54).

The trace of a compiled fit's program is most of a small fit's first call in a fresh process
(``benchmarks/RESULTS.md``, "Traces reused across processes"). With ``ZCACHE_TRACE_STORE=1`` the program is
written after its trace, as a library of TensorFlow functions (``tf_internals`` item 20), into the
compile cache's folder (``compile_cache.write_trace``: the same folder checks, the writer's digest checked
before every load), and a later process whose loss has the same key adds those functions to its
runtime and calls them: nothing is traced.

**The key** is computed without tracing, from everything a trace reads (:func:`program_key`): the
format, zcache's version and a digest of its sources, TensorFlow's version and build; the program's
options (jit, the structured Hessian) and zcache's mode settings; the fitted parameters by position
(dtype, limits); the served values' dtypes and shapes (the events axis left open, as traced); and a
walk of the loss's object graph: every class met (its methods' code objects, their constants and
names, recursively, for classes outside zcache; zcache's own are in the source digest), every
attribute by value (numbers, strings, arrays, tensors' values), every function's code, defaults,
closure and the plain globals it names, each Parameter (dtype, limits, floating, fitted position)
and each Data (dtype, shape past the events axis) by what the trace sees of it; a SymPy expression by
``srepr`` and SymPy's version, TensorFlow's, NumPy's and SymPy's classes and functions by name and the
library's version. An object the walk does not know how to describe makes the key None: traced, as always.

**The variables** a program reads (its captured inputs: a Data's Variable, a fixed parameter's) are
stored as positions in the walk's order of Variables, and a loading process passes its own
Variables at those positions. A capture the walk does not reach: not stored.

**After loading**, the program's loss and gradient at the start (outputs) are compared with an eager
evaluation (:func:`agrees`), once per process and program: a mismatch (a key that missed something)
moves the entry to quarantine and the fit is traced.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache._fitting.compiled_fit import CompiledFit
>>> mu = zcache.Parameter("mu_ts", 0.5, lower=-2.0, upper=2.0)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(np.zeros(10)))
>>> fit = CompiledFit.of(loss, [mu])
>>> key = program_key(fit, {}, False, False)
>>> len(key), key == program_key(fit, {}, False, True)   # another option: another key
(64, False)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import marshal
import pathlib
import re
import sys
import types
import weakref
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine import compile_cache
from .._engine.data import Data
from .._engine.mode import get_autograd_mode, get_graph_mode, get_jit_mode
from .._engine.parameter import Parameter
from .._engine.tf_internals import call_program, can_reuse_programs, program_bytes, register_program

__all__ = ["FORMAT", "GRADIENT_RTOL", "VALUE_RTOL", "StoredProgram", "agrees", "forget", "load", "program_key", "save"]

#: The entry format; part of the key (2: the program's outputs end with the gradient at the start).
FORMAT = 2

_ZCACHE = pathlib.Path(__file__).resolve().parents[1]
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
#: Fields of zcache's objects that are sets in a list's clothes (a cache's dependencies, in the order its
#: reads were discovered): walked in the order their nodes were made, the same in every process.
_UNORDERED = frozenset({"_deps"})
#: Fields of zcache's objects that record what happened at run time (counters, validity, the storage
#: and shape a cache learned at its first computation), not what a trace reads; ``node_id`` (a
#: process-wide counter) is skipped on every zcache object. A Variable among them that a program
#: captured is then not found by the walk, and the program is not stored.
_RUNTIME = {
    "CacheState": frozenset({"py_hits", "py_misses", "py_valid", "traced", "held_bytes", "last_use", "evicted",
                             "graph_uses", "evictions", "stored", "dtype", "rank", "shape"}),
    # the bridge's programs, traced from the expression and its translation (both walked) at first use
    "SymbolicModel": frozenset({"_stack_fn", "_group_programs", "_program_calls", "_times_programs", "_fused_groups",
                                "_jet_programs"}),
}


#: Libraries whose classes are described by the library's version, not walked method by method.
_LIBRARIES = frozenset({"tensorflow", "numpy", "abc", "typing", "collections", "sympy"})


class _Doubt(Exception):
    """The walk met something it cannot describe: no key (the program is traced)."""


@functools.cache
def _source_digest() -> str:
    """SHA-256 of zcache's sources (every ``.py`` under the package, by relative path): zcache's code in the key."""
    h = hashlib.sha256()
    for path in sorted(_ZCACHE.rglob("*.py")):
        h.update(str(path.relative_to(_ZCACHE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _code_bytes(code: types.CodeType) -> bytes:
    # marshal holds co_code, co_consts (nested code objects too), co_names, co_varnames and the line
    # table: an edit anywhere in the code changes it (a moved line too: a spurious miss, never a stale hit)
    return marshal.dumps(code)


class _Walk:
    """The loss's object graph as a token stream, and its Variables in the order met."""

    def __init__(self, fitted: dict[int, int]) -> None:
        self.h = hashlib.sha256()
        self.fitted = fitted
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # ids stay unique while the walk lives
        self.variables: list[tf.Variable] = []
        self.classes: dict[type, None] = {}

    def emit(self, *parts: Any) -> None:
        self.h.update(repr(parts).encode() + b"\n")

    def variable(self, v: tf.Variable) -> None:
        self.variables.append(v)
        self.emit("var", v.dtype.name, tuple(v.shape.as_list()) if v.shape.rank is not None else None)

    def cls(self, c: type) -> None:
        self.emit("class", c.__module__, c.__qualname__)
        if c in self.classes:
            return
        self.classes[c] = None
        for base in c.__mro__:
            if base is object or base.__module__ == "builtins" or base.__module__.split(".")[0] in ("zcache",):
                continue  # zcache's code is in the source digest
            top = base.__module__.split(".")[0]
            if top in _LIBRARIES:
                # the library's version is in the key (TensorFlow's in "format"; the others' here)
                self.emit("library", top, getattr(sys.modules.get(top), "__version__", None))
                continue
            self.emit("base", base.__module__, base.__qualname__)
            for name, attr in sorted(vars(base).items()):
                if name in ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__", "__annotations__"):
                    continue
                self.emit("attr", name)
                self.walk(attr)

    def walk(self, obj: Any) -> None:  # noqa: C901 - one case per kind of object
        if isinstance(obj, _PLAIN) or obj is Ellipsis or obj is NotImplemented:
            self.emit("v", type(obj).__name__, obj)
            return
        if id(obj) in self.seen:
            self.emit("ref", self.seen[id(obj)])
            return
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)
        if isinstance(obj, Parameter):
            self.emit("param", obj.variable.dtype.name, obj.lower, obj.upper, obj.floating,
                      self.fitted.get(id(obj), -1))
            self.variable(obj.variable)
        elif isinstance(obj, Data):
            var = obj.variable
            self.emit("data", var.dtype.name, tuple(var.shape.as_list()[1:]) if var.shape.rank else None)
            self.variable(var)
        elif isinstance(obj, tf.Variable):
            self.variable(obj)
        elif isinstance(obj, (np.ndarray, np.generic)):
            arr = np.asarray(obj)
            if arr.dtype == object:
                raise _Doubt("an array of objects")
            self.emit("array", arr.dtype.str, arr.shape, hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest())
        elif isinstance(obj, tf.Tensor):
            if not hasattr(obj, "numpy"):
                raise _Doubt("a symbolic tensor")
            self.walk(obj.numpy())
        elif isinstance(obj, (tf.DType, tf.TensorShape, tf.TensorSpec)):
            self.emit("tf", repr(obj))
        elif isinstance(obj, (list, tuple)):
            self.emit(type(obj).__name__, len(obj))
            for item in obj:
                self.walk(item)
        elif isinstance(obj, dict):
            self.emit("dict", len(obj))
            for k, v in sorted(obj.items(), key=lambda kv: repr(kv[0])):
                self.walk(k)
                self.walk(v)
        elif isinstance(obj, (set, frozenset)):
            self.emit("set", sorted(repr(item) for item in obj))
        elif _sympy_basic(obj):
            # an expression by its exact structure (symbols with their assumptions), and SymPy's version
            sympy = sys.modules["sympy"]
            self.emit("sympy", sympy.__version__, sympy.srepr(obj))
        elif isinstance(obj, re.Pattern):
            self.emit("pattern", obj.pattern, obj.flags)
        elif isinstance(obj, types.ModuleType):
            self.emit("module", obj.__name__)
        elif isinstance(obj, type):
            self.cls(obj)
        elif isinstance(obj, (types.FunctionType, types.LambdaType)):
            self.function(obj)
        elif isinstance(obj, types.MethodType):
            self.emit("method")
            self.walk(obj.__func__)
            self.walk(obj.__self__)
        elif isinstance(obj, (staticmethod, classmethod)):
            self.emit(type(obj).__name__)
            self.walk(obj.__func__)
        elif isinstance(obj, property):
            self.emit("property")
            for f in (obj.fget, obj.fset, obj.fdel):
                self.walk(f)
        elif isinstance(obj, functools.partial):
            self.emit("partial")
            self.walk(obj.func)
            self.walk(obj.args)
            self.walk(obj.keywords)
        elif isinstance(obj, weakref.ref):
            self.emit("weakref")
            self.walk(obj())
        elif isinstance(obj, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                              types.MemberDescriptorType, types.GetSetDescriptorType, np.ufunc)):
            self.emit("builtin", getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj)))
        elif type(obj).__module__ in ("_thread", "threading"):
            self.emit("lock", type(obj).__qualname__)  # synchronization: nothing a trace reads
        elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
            self.instance(obj)
        else:
            raise _Doubt(f"an object of type {type(obj).__qualname__}")

    def instance(self, obj: Any) -> None:
        c = type(obj)
        top = c.__module__.split(".")[0]
        if top in ("tensorflow", "keras", "networkx"):
            raise _Doubt(f"a {c.__module__}.{c.__qualname__} object")
        self.cls(c)
        state = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
        for klass in c.__mro__:
            for slot in getattr(klass, "__slots__", ()):
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    state[slot] = getattr(obj, slot)
        self.emit("state", len(state))
        for name, value in sorted(state.items()):
            self.emit("field", name)
            if top == "zcache" and (name == "node_id" or name in _RUNTIME.get(c.__name__, ())):
                continue  # a process-wide counter, or a cache's run-time record: not what a trace reads
            if name in _UNORDERED and top == "zcache":
                # found in the order of a set's iteration (object addresses): walked by creation order
                value = sorted(value, key=lambda node: node.node_id)
            self.walk(value)

    def function(self, fn: types.FunctionType) -> None:
        self.emit("function", fn.__module__, fn.__qualname__)
        top = (fn.__module__ or "").split(".")[0]
        if top == "zcache":
            return  # in the source digest; its closure is walked where zcache stored it on an object
        if top in _LIBRARIES:
            # a library's function (tf.sin, say): by its name and the library's version
            self.emit("library", top, getattr(sys.modules.get(top), "__version__", None))
            return
        self.emit("code", hashlib.sha256(_code_bytes(fn.__code__)).hexdigest())
        self.walk(fn.__defaults__)
        self.walk(fn.__kwdefaults__)
        self.walk([cell.cell_contents for cell in fn.__closure__ or () if _filled(cell)])
        for name in _names(fn.__code__):
            if name in fn.__globals__:
                value = fn.__globals__[name]
                self.emit("global", name)
                self.walk(value)


def _sympy_basic(obj: Any) -> bool:
    """Whether ``obj`` is a SymPy expression (SymPy is not imported here: only the bridge imports it)."""
    sympy = sys.modules.get("sympy")
    return sympy is not None and type(obj).__module__.startswith("sympy.") and isinstance(obj, sympy.Basic)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_names(const))
    return sorted(set(names))


def _key_and_variables(fit: Any, served: dict[int, tf.Tensor], jit: bool,
                       structured: bool | str) -> tuple[str, list[tf.Variable]] | None:
    walk = _Walk({id(p): k for k, p in enumerate(fit.params)})
    try:
        walk.emit("format", FORMAT, _source_digest(), tf.__version__, tf.version.GIT_VERSION)
        walk.emit("options", jit, structured, repr(get_graph_mode()), repr(get_jit_mode()), get_autograd_mode())
        walk.emit("fitted", [(p.variable.dtype.name, p.lower, p.upper) for p in fit.params])
        rows = {int(d.value().shape[0]) for d in fit.loss.datasets() if d.value().shape.rank}
        walk.emit("served", [(v.dtype.name, [None, *v.shape[1:]] if v.shape.rank and v.shape[0] in rows
                              else v.shape.as_list()) for _, v in sorted(served.items())])
        for p in fit.params:
            walk.walk(p)
        walk.walk(fit.loss)
        # which caches are served, as the walk met them (their order is the program's argument order)
        met = {getattr(obj, "node_id", None): walk.seen[id(obj)] for obj in walk.keep}
        places = [met.get(k) for k in sorted(served)]
        if None in places:
            raise _Doubt("a served cache the walk did not meet")
        walk.emit("served at", places)
    except (_Doubt, RecursionError):
        return None
    return walk.h.hexdigest(), walk.variables


def program_key(fit: Any, served: dict[int, tf.Tensor], jit: bool, structured: bool | str) -> str | None:
    """The key of ``fit``'s program (a SHA-256, hex), None where the loss holds something the key cannot describe.

    Parameters
    ----------
    fit : CompiledFit
    served : dict
        The served values (:meth:`CompiledFit._served`).
    jit : bool
    structured : bool or "auto"
        The program's options.

    Returns
    -------
    str or None
    """
    found = _key_and_variables(fit, served, jit, structured)
    return None if found is None else found[0]


class StoredProgram:
    """A program loaded from the store, called as the traced ``tf.function`` is (``fn(x0, served, ...)``).

    Parameters
    ----------
    name : str
        The registered function's name.
    inputs, outputs : list of tf.DType, int
        Its signature.
    captures : list of tf.Variable
        The Variables it reads, in its order.
    entry : str
        The store's entry name.
    """

    def __init__(self, name: str, inputs: list[tf.DType], outputs: int, captures: list[tf.Variable],
                 entry: str) -> None:
        self.name, self.inputs, self.outputs, self.captures, self.entry = name, inputs, outputs, captures, entry
        #: Whether its first result passed the check against an eager evaluation (CompiledFit.run).
        self.checked = False

    def experimental_get_tracing_count(self) -> int:
        """1: loaded, so nothing is left to trace.

        Returns
        -------
        int
        """
        return 1

    def __call__(self, x0: tf.Tensor, served: dict[int, tf.Tensor], *rest: tf.Tensor) -> list[tf.Tensor]:
        """Call the program (the arguments of the traced program, flattened as TensorFlow flattens them).

        Returns
        -------
        list of tf.Tensor
        """
        flat = [x0, *(served[k] for k in sorted(served)), *rest, *(v.handle for v in self.captures)]
        return call_program(self.name, flat, self.outputs)


def _entry(key: str) -> str:
    return f"{key}.tfprogram"


def save(fit: Any, served: dict[int, tf.Tensor], jit: bool, structured: bool | str, concrete: Any) -> bool:
    """Write ``concrete`` (the program just traced) to the store, where its key and captures are known.

    Returns
    -------
    bool
        Whether an entry was written.
    """
    if compile_cache.trace_folder() is None or jit or not can_reuse_programs():
        return False
    found = _key_and_variables(fit, served, jit, structured)
    if found is None:
        return False
    key, variables = found
    positions = {id(v.handle): k for k, v in enumerate(variables)}
    try:
        captures = [positions[id(t)] for t in concrete.captured_inputs]
    except KeyError:  # a Variable the walk did not reach (a global one, say): not reusable
        return False
    data, name, outputs = program_bytes(concrete)
    head = json.dumps({"format": FORMAT, "name": name, "outputs": outputs, "captures": captures,
                       "served": len(served)}).encode()
    return compile_cache.write_trace(_entry(key), len(head).to_bytes(4, "big") + head + data)


def load(fit: Any, served: dict[int, tf.Tensor], jit: bool, structured: bool | str) -> StoredProgram | None:
    """The stored program of ``fit`` with these options, registered in this process; None if none is trusted.

    Returns
    -------
    StoredProgram or None
    """
    if compile_cache.trace_folder() is None or jit or not can_reuse_programs():
        return None
    found = _key_and_variables(fit, served, jit, structured)
    if found is None:
        return None
    key, variables = found
    entry = _entry(key)
    data = compile_cache.read_trace(entry)
    if data is None:
        return None
    try:
        size = int.from_bytes(data[:4], "big")
        head = json.loads(data[4:4 + size])
        if head["format"] != FORMAT or head["served"] != len(served):
            raise ValueError("another format")
        captures = [variables[int(k)] for k in head["captures"]]
        name, inputs, outputs = register_program(data[4 + size:], str(head["name"]), f"_zcache_{key[:16]}")
    except Exception:  # a record that matched bytes we cannot use: treated as damaged
        compile_cache.forget_trace(entry)
        return None
    if outputs != int(head["outputs"]) or len(inputs) != 5 + len(served) + len(captures):
        compile_cache.forget_trace(entry)
        return None
    return StoredProgram(name, inputs, outputs, captures, entry)


#: The check after loading: the loaded program's loss and gradient at the start against an eager
#: evaluation's. The same ops run in a graph and eagerly, equal but for the order of a parallel reduction:
#: the loss to ``VALUE_RTOL`` of its size, each gradient component to ``GRADIENT_RTOL`` of the gradient's
#: largest component (a component's rounding is that of the sum over events, not of its own size).
VALUE_RTOL = 1e-10
GRADIENT_RTOL = 1e-8


def agrees(f: float, g: np.ndarray, eager_f: float, eager_g: np.ndarray) -> bool:
    """Whether a loaded program's loss ``f`` and gradient ``g`` at the start are the eager ones.

    Parameters
    ----------
    f : float
    g : ndarray
        (n,) the loaded program's.
    eager_f : float
    eager_g : ndarray
        (n,) the loss's own, evaluated eagerly.

    Returns
    -------
    bool
        False also where a value is not finite or the shapes differ.

    Examples
    --------
    >>> import numpy as np
    >>> agrees(2.0, np.array([1.0, 0.0]), 2.0, np.array([1.0, 1e-12]))
    True
    >>> agrees(2.0, np.array([1.0, 0.0]), 2.0, np.array([1.0, 0.5]))   # the value alone agrees
    False
    """
    g, eager_g = np.asarray(g, dtype=np.float64), np.asarray(eager_g, dtype=np.float64)
    if g.shape != eager_g.shape or not (np.isfinite(f) and np.all(np.isfinite(g))):
        return False
    if not abs(f - eager_f) <= VALUE_RTOL * max(1.0, abs(eager_f)):
        return False
    scale = max(1.0, float(np.max(np.abs(eager_g), initial=0.0)))
    return bool(np.all(np.abs(g - eager_g) <= GRADIENT_RTOL * scale))


def forget(program: StoredProgram) -> None:
    """Drop ``program``'s entry from the store (it failed the check after loading).

    Parameters
    ----------
    program : StoredProgram
    """
    compile_cache.forget_trace(program.entry)

