"""Reliability of the core engine (issue 5): a stale cache value is a wrong physics result.

1. Bad input, everywhere: a table of bad inputs x the zcache exception each must raise. Every
   case checks that the message names the object and says what to do, and that the state is
   exactly as before: parameter values (Variable and Python mirror), data, which caches are
   valid and what they hold, hit/miss counts, the dependency graph's nodes and edges, the
   modes and the trace counts. Cases run eagerly and, where they can happen there, inside a
   traced ``zcache.function``; afterwards every cache still equals its uncached formula.
2. A function that returns another shape on recompute: dtype and rank are fixed at the first
   computation (``CachedValueError``); a shape may change only where every traced static
   shape leaves it open, e.g. the events axis of a data-dependent cache.
3. Weak references: dropped Parameters, Data, CachedTensors and ``@cached`` instances leave
   ``zcache.dependency_graph()``, also after they were used in traced functions (TensorFlow's
   gradient registry kept them alive: fixed), and the garbage collector may drop them in the
   middle of a graph traversal (``dictionary changed size during iteration``: fixed).
4. A toy loop on the core only (new data of other sizes, new values, a few gradient-descent
   steps in a traced function): no retrace after the first toy, no growth of live Variables,
   traced graphs or dependency-graph nodes, bounded RSS; a loop that builds a new model and
   function per toy keeps the number of live graphs bounded.
5. Threads: four threads on shared and separate caches never see a stale or torn value.
6. Regression tests of the other bugs these checks found (design/reliability.md lists them):
   plain ``tf.function`` with autograph, tapes outside traced functions, a NaN constant in a
   trace, a traced setter keeping dropped caches alive.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
import pytest
import tensorflow as tf
from helpers import save_modes
from tensorflow.python.framework.func_graph import FuncGraph

import zcache
from zcache._engine.dependencies import GRAPH
from zcache.exceptions import (
    CachedValueError,
    DataDtypeError,
    DataShapeError,
    DependencyCycleError,
    EmptyDataError,
    GraphModeError,
    IllegalInGraphModeError,
    InvalidDataError,
    InvalidDependencyError,
    ParameterValueError,
    UncacheableArgumentError,
    UnknownIdentifierError,
    UnmanagedTraceError,
    ZCacheError,
)


# == the world: parameters, data, caches of every kind, traced functions ==================
class Shape(zcache.Cachable):
    def __init__(self, a: zcache.Parameter) -> None:
        self.a = a
        self.factor = 2.0

    @zcache.cached
    def pdf(self, x: zcache.Data) -> tf.Tensor:
        return tf.tanh(x.value() * self.a.value())


X0 = np.linspace(-1.0, 1.0, 11)
XY0 = np.arange(16.0).reshape(8, 2) / 8.0


class World:
    """Objects under test, traced functions that use them, and their uncached formulas."""

    def __init__(self) -> None:
        self.mu = zcache.Parameter("mu", 0.5, lower=-2.0, upper=2.0)
        self.sigma = zcache.Parameter("sigma", 1.0, lower=0.1)
        self.x = zcache.Data(X0, name="x")
        self.xy = zcache.Data(XY0, name="xy")
        self.k = zcache.Data(np.arange(5), name="k")  # integer data
        mu, sigma, x, xy = self.mu, self.sigma, self.x, self.xy
        self.gauss = zcache.CachedTensor(
            lambda: tf.exp(-0.5 * ((x.value() - mu.value()) / sigma.value()) ** 2), name="gauss")
        gauss = self.gauss
        self.norm = zcache.CachedTensor(lambda: tf.reduce_sum(gauss.value()) * sigma.value(),
                                        deps=[gauss, sigma], name="norm")
        self.angular = zcache.CachedTensor(lambda: tf.reduce_sum(xy.value() ** 2, axis=1), name="angular")
        self.shape = Shape(mu)
        shape = self.shape
        self.shape.pdf(x)
        self.pdf_cache = next(iter(shape._zcache_caches.values()))
        self.caches = [self.gauss, self.norm, self.angular, self.pdf_cache]
        self.params = [mu, sigma]
        self.data = [x, xy, self.k]

        def total() -> tf.Tensor:
            return (tf.reduce_sum(gauss.value()) + self.norm.value() + tf.reduce_sum(self.angular.value())
                    + tf.reduce_sum(shape.pdf(x)))

        def set_mu(v: tf.Tensor) -> tf.Tensor:
            mu.set_value(v)
            return mu.value()

        def set_x(t: tf.Tensor) -> tf.Tensor:
            x.set_data(t)
            return x.nevents

        self.total = zcache.function(total, wraps="loss")
        self.set_mu = zcache.function(set_mu)
        self.set_x = zcache.function(set_x)
        self.functions = [self.total, self.set_mu, self.set_x]
        self.reset()

    def reset(self) -> None:
        """The state every case starts from: known values, some caches valid, one stale."""
        self.set_mu(tf.constant(0.5, tf.float64))  # traces the setters (once per module)
        self.set_x(tf.constant(X0))
        zcache.set_values(self.params, [0.5, 1.0])
        self.xy.set_data(XY0)
        self.k.set_data(np.arange(5))
        self.total()
        self.angular.invalidate()

    def ids(self) -> set[int]:
        return {o.node_id for o in [*self.params, *self.data, *self.caches]}

    def reference(self) -> dict[str, np.ndarray]:
        mu, sigma = float(self.mu.variable.numpy()), float(self.sigma.variable.numpy())
        x, xy = self.x.variable.numpy(), self.xy.variable.numpy()
        gauss = np.exp(-0.5 * ((x - mu) / sigma) ** 2)
        return {"gauss": gauss, "norm": np.sum(gauss) * sigma, "angular": np.sum(xy ** 2, axis=1),
                "pdf": np.tanh(x * mu)}

    def check(self) -> None:
        """Every cache equals its uncached formula (eager and traced); no function retraced."""
        traces = [f.trace_count for f in self.functions]
        ref = self.reference()
        for cache, key in zip(self.caches, ["gauss", "norm", "angular", "pdf"]):
            np.testing.assert_allclose(cache.value().numpy(), ref[key], rtol=1e-12, err_msg=cache.name)
        expected = sum(float(np.sum(v)) for v in ref.values())
        np.testing.assert_allclose(float(self.total()), expected, rtol=1e-12)
        assert [f.trace_count for f in self.functions] == traces, "a function retraced"


def graph_view(ids: set[int]) -> tuple[set[tuple[int, int]], int]:
    """Edges among ``ids`` and the newest node id, read under the graph's lock.

    (Objects of earlier tests may be collected at any time, so edges to them are not compared;
    edges to nodes newer than the snapshot are: ``live_nodes_after``.)
    """
    g = zcache.dependency_graph()
    with GRAPH.lock:
        edges = {(a, b) for a, b in g.edges() if a in ids and b in ids}
        newest = max(g.nodes, default=0)
    return edges, newest


def live_nodes_after(newest: int) -> list[str]:
    """Nodes created after ``newest`` whose objects are still alive."""
    g = zcache.dependency_graph()
    with GRAPH.lock:
        return [a["name"] for n, a in g.nodes(data=True) if n > newest and a["ref"]() is not None]


def snapshot(w: World, extra: list[Any]) -> dict[str, Any]:
    """Everything a refused input must leave as it was."""
    objs = [*w.params, *w.data, *w.caches, *extra]
    caches = [o for o in objs if isinstance(o, zcache.CachedTensor)]
    edges, newest = graph_view({o.node_id for o in objs})
    return {
        "values": {p.name: (float(p.variable.numpy()), p._current()) for p in w.params},
        "data": {d.name: d.variable.numpy().tolist() for d in w.data},
        "valid": {c.name: c.is_valid for c in caches},
        "stored": {c.name: c.state.stored.numpy().tolist() for c in caches if c.is_valid},
        "stats": {c.name: c.stats for c in w.caches},  # the cases' own caches may be read
        "edges": edges,
        "newest": newest,
        "modes": (zcache.get_graph_mode(), zcache.get_autograd_mode(), tf.config.functions_run_eagerly()),
        "traces": [f.trace_count for f in w.functions],
        "instance caches": {k: id(v) for k, v in w.shape._zcache_caches.items()},
    }


# == the table of bad inputs ===============================================================
@dataclass
class Case:
    """One bad input: ``setup(world)`` returns the action, or (action, objects it made, to watch)."""

    id: str
    setup: Callable[[World], Any]
    error: type[Exception]
    hints: tuple[str, ...]
    where: tuple[str, ...] = ("eager", "traced")


def _in_function(action: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``action`` inside a fresh traced zcache.function."""
    @zcache.function
    def traced() -> tf.Tensor:
        action()
        return tf.constant(0)

    return traced


def _param(value: Any) -> Callable[[World], Any]:
    return lambda w: (lambda: w.mu.set_value(value))


def _param_arg(value: float) -> Callable[[World], Any]:
    """The pre-traced setter with a bad tensor of the same signature: a failed runtime check."""
    return lambda w: (lambda: w.set_mu(tf.constant(value, tf.float64)))


def _data(attr: str, make: Callable[[], Any]) -> Callable[[World], Any]:
    return lambda w: (lambda: getattr(w, attr).set_data(make()))


def _data_tensor(attr: str, make: Callable[[], Any]) -> Callable[[World], Any]:
    """set_data from a tensor argument of a fresh traced function."""
    def setup(w: World) -> Any:
        target = getattr(w, attr)

        @zcache.function
        def set_data(t: tf.Tensor) -> tf.Tensor:
            target.set_data(t)
            return target.nevents

        return lambda: set_data(make())

    return setup


def _cycle_self(w: World) -> Any:
    holder: dict[str, Any] = {}
    a = zcache.CachedTensor(lambda: holder["b"].value() + w.mu.value(), name="cyc_a")
    b = zcache.CachedTensor(lambda: a.value() * 2.0, name="cyc_b")
    holder["b"] = b
    return (lambda: a.value()), [a, b]


def _cycle_graph(w: World) -> Any:
    """b reads a; then a's function starts to read b: the new edge would close a cycle."""
    reads = {"b": False}
    holder: dict[str, Any] = {}
    a = zcache.CachedTensor(lambda: w.mu.value() * 2.0 + (holder["b"].value() if reads["b"] else 0.0), name="cyc_a")
    b = zcache.CachedTensor(lambda: a.value() + 1.0, name="cyc_b")
    holder["b"] = b
    b.value()
    reads["b"] = True
    a.invalidate()
    return (lambda: a.value()), [a, b]


def _shape_change(change: str) -> Callable[[World], Any]:
    """A cache whose function changes its output between computations (via Python state)."""
    def setup(w: World) -> Any:
        state = {"kind": "base"}
        mu = w.mu

        def f() -> Any:
            kind = state["kind"]
            if kind == "rank":
                return tf.reshape(tf.fill([2], mu.value()), [1, 2])
            if kind == "dtype":
                return tf.fill([2], tf.cast(mu.value(), tf.float32))
            if kind == "none":
                return None
            if kind == "length":
                return tf.fill([3], mu.value())
            return tf.fill([2], mu.value())

        c = zcache.CachedTensor(f, name="shapeshifter")
        zcache.function(lambda: c.value())()  # a trace fixes the static shape (2,)
        c.value()
        state["kind"] = change
        c.invalidate()
        return (lambda: c.value()), [c]

    return setup


def _cached_class(deps: Any) -> type:
    class Model:
        def __init__(self, mu: zcache.Parameter) -> None:
            self.mu = mu
            self.width = 2.0

        @zcache.cached(deps=deps)
        def f(self) -> tf.Tensor:
            return self.mu.value() * 2.0

    return Model


def _bad_cached_deps(deps: Any) -> Callable[[World], Any]:
    def setup(w: World) -> Any:
        model = _cached_class(deps)(w.mu)
        return (lambda: model.f()), []

    return setup


def _uncacheable(arg: Any) -> Callable[[World], Any]:
    return lambda w: (lambda: w.shape.pdf(arg))


def _mode_call(call: Callable[[], Any]) -> Callable[[World], Any]:
    return lambda w: call


FIX = ("finite", "limit")  # ParameterValueError: "Pass a finite value inside [lower, upper], or widen the limits."
CASES: list[Case] = [
    # -- parameter values ------------------------------------------------------------------
    Case("nan", _param(np.nan), ParameterValueError, ("'mu'", "not finite", *FIX)),
    Case("inf", _param(np.inf), ParameterValueError, ("'mu'", "not finite")),
    Case("-inf", _param(-np.inf), ParameterValueError, ("'mu'", "not finite")),
    Case("below lower limit", _param(-2.5), ParameterValueError, ("'mu'", "below the lower limit -2.0", *FIX)),
    Case("above upper limit", _param(np.nextafter(2.0, 3.0)), ParameterValueError, ("'mu'", "above the upper limit 2.0")),
    Case("vector value", _param([0.1, 0.2]), ParameterValueError, ("'mu'", "scalar")),
    Case("string value", _param("0.3"), ParameterValueError, ("'mu'", "real scalar"), ("eager",)),
    Case("None value", _param(None), ParameterValueError, ("'mu'", "real scalar"), ("eager",)),
    Case("complex value", _param(1 + 1j), ParameterValueError, ("'mu'", "real scalar"), ("eager",)),
    Case("nan tensor, traced setter", _param_arg(np.nan), ParameterValueError, ("'mu'", "not finite", *FIX), ("eager",)),
    Case("inf tensor, traced setter", _param_arg(np.inf), ParameterValueError, ("'mu'", "not finite"), ("eager",)),
    Case("below tensor, traced setter", _param_arg(-3.0), ParameterValueError, ("'mu'", "below the lower limit"),
         ("eager",)),
    Case("above tensor, traced setter", _param_arg(3.0), ParameterValueError, ("'mu'", "above the upper limit", *FIX),
         ("eager",)),
    Case("set_values: one bad of two", lambda w: (lambda: zcache.set_values([w.sigma, w.mu], [2.0, np.nan])),
         ParameterValueError, ("'mu'", "not finite")),
    Case("set_values: too few values", lambda w: (lambda: zcache.set_values([w.sigma, w.mu], [2.0])),
         ParameterValueError, ("2 parameters but 1 values",)),
    Case("set_values: ragged", lambda w: (lambda: zcache.set_values([w.sigma, w.mu], [2.0, [1.0, 2.0]])),
         ParameterValueError, ("one real number per parameter",), ("eager",)),
    Case("Parameter(nan)", lambda w: (lambda: zcache.Parameter("p_new", np.nan)), ParameterValueError,
         ("'p_new'", "not finite")),
    Case("Parameter(lower > upper)", lambda w: (lambda: zcache.Parameter("p_new", 0.0, lower=1.0, upper=-1.0)),
         ParameterValueError, ("'p_new'", "must be below upper limit")),
    Case("Parameter(nan limit)", lambda w: (lambda: zcache.Parameter("p_new", 0.0, upper=np.nan)),
         ParameterValueError, ("'p_new'", "upper limit is NaN")),
    # -- data ------------------------------------------------------------------------------
    Case("data with nan", _data("x", lambda: np.where(np.arange(7) == 3, np.nan, 0.5)), InvalidDataError,
         ("'x'", "1 value(s) are NaN or infinite", "Remove or fix")),
    Case("data with inf", _data("x", lambda: np.array([1.0, -np.inf])), InvalidDataError, ("'x'", "Remove or fix")),
    Case("empty data", _data("x", lambda: np.zeros(0)), EmptyDataError, ("'x'", "no events", "skip the empty sample")),
    Case("empty 2-d data", _data("xy", lambda: np.zeros((0, 2))), EmptyDataError, ("'xy'", "no events")),
    Case("rank 2 for 1-d data", _data("x", lambda: np.zeros((4, 2))), DataShapeError,
         ("'x'", "shape (4, 2)", "Create a new zcache.Data")),
    Case("rank 1 for 2-d data", _data("xy", lambda: np.zeros(4)), DataShapeError, ("'xy'", "events of shape (2,)")),
    Case("other event shape", _data("xy", lambda: np.zeros((4, 3))), DataShapeError, ("'xy'", "(4, 3)")),
    Case("scalar data", _data("x", lambda: 1.0), DataShapeError, ("'x'", "shape ()")),
    Case("complex into float data", _data("x", lambda: np.ones(3) * 1j), DataDtypeError,
         ("'x'", "cannot be cast safely")),
    Case("strings", _data("x", lambda: np.array(["a", "b"])), DataDtypeError, ("'x'", "cannot be cast safely")),
    Case("objects", _data("x", lambda: np.array([1.0, None])), DataDtypeError, ("'x'", "cannot be cast safely")),
    Case("float into integer data", _data("k", lambda: np.array([0.5, 1.5])), DataDtypeError,
         ("'k'", "cannot be cast safely")),
    Case("ragged rows", _data("xy", lambda: [[1.0, 2.0], [3.0]]), DataShapeError, ("'xy'", "rectangular"), ("eager",)),
    Case("traced: nan tensor", _data_tensor("x", lambda: tf.constant([0.0, np.nan], tf.float64)), InvalidDataError,
         ("'x'", "NaN or infinite", "Remove or fix"), ("eager",)),
    Case("traced: empty tensor", _data_tensor("x", lambda: tf.zeros([0], tf.float64)), EmptyDataError,
         ("'x'", "no events", "skip the empty sample"), ("eager",)),
    Case("traced: rank 2 tensor", _data_tensor("x", lambda: tf.zeros([3, 2], tf.float64)), DataShapeError,
         ("'x'", "(3, 2)", "Create a new zcache.Data"), ("eager",)),
    Case("traced: other event shape", _data_tensor("xy", lambda: tf.zeros([3, 3], tf.float64)), DataShapeError,
         ("'xy'", "(3, 3)"), ("eager",)),
    Case("traced: string tensor", _data_tensor("x", lambda: tf.constant(["a"])), DataDtypeError,
         ("'x'", "dtype"), ("eager",)),
    Case("Data([])", lambda w: (lambda: zcache.Data([], name="d_new")), EmptyDataError, ("'d_new'", "no events")),
    Case("Data(nan)", lambda w: (lambda: zcache.Data([np.nan], name="d_new")), InvalidDataError, ("'d_new'",)),
    Case("Data(scalar)", lambda w: (lambda: zcache.Data(3.0, name="d_new")), DataShapeError,
         ("'d_new'", "wrap single values in a list")),
    Case("Data(strings)", lambda w: (lambda: zcache.Data(["a"], name="d_new")), DataDtypeError, ("numeric",)),
    Case("Data(ragged)", lambda w: (lambda: zcache.Data([[1.0], [1.0, 2.0]], name="d_new")), DataShapeError,
         ("'d_new'", "rectangular")),
    # -- cycles ----------------------------------------------------------------------------
    Case("cache reads itself", _cycle_self, DependencyCycleError, ("cyc_a -> cyc_b -> cyc_a", "Break the cycle")),
    Case("new read closes a cycle", _cycle_graph, DependencyCycleError, ("cyc_a", "cyc_b", "shared part")),
    # -- dependencies that are not zcache objects -----------------------------------------
    Case("deps=[float]", lambda w: (lambda: zcache.CachedTensor(lambda: w.mu.value(), deps=[1.0])),
         InvalidDependencyError, ("got 1.0", "Wrap", "deps=None")),
    Case("deps=[array]", lambda w: (lambda: zcache.CachedTensor(lambda: w.mu.value(), deps=[np.ones(2)])),
         InvalidDependencyError, ("ndarray", "zcache.Data")),
    Case("deps=[tf.Variable]", lambda w: (lambda: zcache.CachedTensor(lambda: w.mu.value(), deps=[w.mu.variable])),
         InvalidDependencyError, ("ResourceVariable", "zcache.Parameter")),
    Case("deps=Parameter (no list)", lambda w: (lambda: zcache.CachedTensor(lambda: w.mu.value(), deps=w.mu)),
         InvalidDependencyError, ("list of zcache objects",)),
    Case("@cached(deps='mu')", lambda w: (lambda: _cached_class("mu")), InvalidDependencyError, ("deps=['mu']",)),
    Case("@cached(deps=[missing])", _bad_cached_deps(["nu"]), InvalidDependencyError, ("['nu']", "deps=None")),
    Case("@cached(deps=[float attribute])", _bad_cached_deps(["width"]), InvalidDependencyError,
         ("got 2.0", "Wrap")),
    Case("@cached(deps=callable -> number)", _bad_cached_deps(lambda self: 5), InvalidDependencyError,
         ("must return a list",)),
    Case("cache_value(deps=[int])", lambda w: (lambda: w.shape.cache_value(lambda: w.mu.value(), deps=[3])),
         InvalidDependencyError, ("got 3", "Wrap")),
    Case("@cached argument: tensor", _uncacheable(tf.constant([1.0])), UncacheableArgumentError,
         ("Shape.pdf", "zcache.Data")),
    Case("@cached argument: array", _uncacheable(np.ones(2)), UncacheableArgumentError, ("ndarray", "zcache.Data")),
    Case("@cached argument: set", _uncacheable({1, 2}), UncacheableArgumentError, ("not hashable", "tuple")),
    # -- modes and identifiers ---------------------------------------------------------------
    Case("graph mode 'fast'", _mode_call(lambda: zcache.set_graph_mode("fast")), GraphModeError,
         ("'fast'", "Use True"), ("eager",)),
    Case("graph mode None", _mode_call(lambda: zcache.set_graph_mode(None)), GraphModeError,
         ("True, False, 'auto'",), ("eager",)),
    Case("graph mode dict: unknown key", _mode_call(lambda: zcache.set_graph_mode({"lossy": True})),
         UnknownIdentifierError, ("'lossy'", "known identifiers"), ("eager",)),
    Case("graph mode dict: not a bool", _mode_call(lambda: zcache.set_graph_mode({"loss": "yes"})),
         GraphModeError, ("True/False",), ("eager",)),
    Case("set_backend='yes'", _mode_call(lambda: zcache.set_graph_mode(False, set_backend="yes")), GraphModeError,
         ("set_backend",), ("eager",)),
    Case("autograd mode 'numerical'", _mode_call(lambda: zcache.set_autograd_mode("numerical")), GraphModeError,
         ("True (automatic) or False (numerical)",), ("eager",)),
    Case("wraps='lossy'", _mode_call(lambda: zcache.function(lambda: 1.0, wraps="lossy")), UnknownIdentifierError,
         ("'lossy'", "use one of")),
    Case("wraps=['loss']", _mode_call(lambda: zcache.function(lambda: 1.0, wraps=["loss"])), UnknownIdentifierError,
         ("use one of",)),
    Case("set_graph_mode in a trace", _mode_call(lambda: zcache.set_graph_mode(False)), IllegalInGraphModeError,
         ("set_graph_mode", "eager code"), ("traced",)),
    Case("graph-mode block in a trace", _mode_call(lambda: zcache.set_graph_mode(True).__enter__()),
         IllegalInGraphModeError, ("set_graph_mode",), ("traced",)),
    Case("set_autograd_mode in a trace", _mode_call(lambda: zcache.set_autograd_mode(False)), IllegalInGraphModeError,
         ("set_autograd_mode", "eager code"), ("traced",)),
    Case("clear_graph_cache in a trace", _mode_call(zcache.clear_graph_cache), IllegalInGraphModeError,
         ("clear_graph_cache",), ("traced",)),
    Case("is_valid in a trace", lambda w: (lambda: w.gauss.is_valid), IllegalInGraphModeError, ("eagerly",),
         ("traced",)),
    Case("zcache.run in a trace", lambda w: (lambda: zcache.run(w.gauss)), IllegalInGraphModeError,
         ("return the tensors",), ("traced",)),
    # -- a function that returns another shape on recompute ------------------------------------
    # Eager only: a traced read runs the cache's miss branch, traced once per cache (revision 3),
    # so Python state read by func is frozen there until clear_graph_cache (see the test below).
    Case("recompute: other rank", _shape_change("rank"), CachedValueError, ("'shapeshifter'", "keep its dtype and rank"),
         ("eager",)),
    Case("recompute: other dtype", _shape_change("dtype"), CachedValueError, ("'shapeshifter'", "dtype float32"),
         ("eager",)),
    Case("recompute: not a tensor", _shape_change("none"), CachedValueError, ("'shapeshifter'", "not a tensor"),
         ("eager",)),
    Case("recompute: length a trace fixed", _shape_change("length"), CachedValueError,
         ("'shapeshifter'", "static shape (2,)", "not on Python state"), ("eager",)),
]

PAIRS = [(case, where) for case in CASES for where in case.where]


@pytest.fixture(autouse=True)
def _restore_modes():
    """conftest's fixture without clear_graph_cache: the module's world is traced once (speed)."""
    restore = save_modes()
    yield
    restore()


@pytest.fixture(scope="module")
def world():
    return World()


@pytest.mark.parametrize("case, where", PAIRS, ids=[f"{c.id}-{w}" for c, w in PAIRS])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_bad_input_raises_named_error_and_changes_nothing(case, where, world):
    w = world
    w.reset()
    made = case.setup(w)
    action, extra = made if isinstance(made, tuple) else (made, [])
    run = action if where == "eager" else _in_function(action)
    before = snapshot(w, extra)
    with pytest.raises(case.error) as raised:
        run()
    assert isinstance(raised.value, ZCacheError)
    message = str(raised.value)
    for hint in case.hints:
        assert hint in message, f"message lacks {hint!r}: {message}"
    assert "[zcache:" not in message and "Traceback" not in message
    after = snapshot(w, extra)
    assert not live_nodes_after(before["newest"]), "a refused input left a live node in the graph"
    after["newest"] = before["newest"]
    assert after == before
    w.check()


def test_the_table_covers_every_category():
    """At least one case per category of the issue, each eager and traced where it can be."""
    errors = {c.error for c in CASES}
    assert {ParameterValueError, InvalidDataError, EmptyDataError, DataShapeError, DataDtypeError,
            DependencyCycleError, InvalidDependencyError, GraphModeError, UnknownIdentifierError,
            IllegalInGraphModeError, CachedValueError, UncacheableArgumentError} <= errors
    assert len(PAIRS) >= 100


# == shapes on recompute: what may change ==================================================
def test_events_axis_of_a_data_dependent_cache_may_change(graph_mode):
    """The events axis follows the data, eagerly and traced, with no retrace and no error."""
    x = zcache.Data(np.arange(3.0), name="x")
    y = zcache.Data(np.arange(2.0), name="y")
    p = zcache.Parameter("p", 2.0)
    scaled = zcache.CachedTensor(lambda: x.value() * p.value(), name="scaled")
    outer = zcache.CachedTensor(lambda: x.value()[:, None] * y.value()[None, :], name="outer")
    read = zcache.function(lambda: (scaled.value(), outer.value()))
    for n, m in [(3, 2), (5, 2), (1, 4), (7, 7)]:
        x.set_data(np.arange(float(n)))
        y.set_data(np.arange(float(m)) + 1.0)
        for got in (read(), (scaled.value(), outer.value())):
            np.testing.assert_array_equal(got[0].numpy(), np.arange(float(n)) * 2.0)
            np.testing.assert_array_equal(got[1].numpy(), np.outer(np.arange(float(n)), np.arange(float(m)) + 1.0))
    assert read.trace_count <= 1


def test_traced_static_shape_with_an_open_axis_allows_any_length():
    """A length computed from data is open (None) in the trace: it may change, eagerly and traced."""
    p = zcache.Parameter("p", 1.0)
    n_var = zcache.Data(np.zeros(2), name="n")
    c = zcache.CachedTensor(lambda: tf.fill(tf.shape(n_var.value()), p.value()), name="fill")
    f = zcache.function(lambda: c.value())
    assert f().shape == (2,)
    n_var.set_data(np.zeros(4))
    assert c.value().shape == (4,) and f().shape == (4,)


def test_shape_error_in_a_trace_is_consistent_with_eager():
    """A second trace that gives the cache another static length is refused like an eager recompute."""
    state = {"n": 2}
    p = zcache.Parameter("p", 1.0)
    c = zcache.CachedTensor(lambda: tf.fill([state["n"]], p.value()), name="fixed_length")
    zcache.function(lambda: c.value())()
    state["n"] = 3
    c.invalidate()
    # a new graph reuses the cache's compiled miss branch, traced with n = 2 (Python state is frozen)
    assert zcache.function(lambda: c.value())().shape == (2,)
    c.invalidate()
    with pytest.raises(CachedValueError, match="static shape \\(2,\\)"):
        c.value()
    zcache.clear_graph_cache()  # retraces the miss branch: now refused like the eager recompute
    with pytest.raises(CachedValueError, match="static shape \\(2,\\)"):
        zcache.function(lambda: c.value())()
    state["n"] = 2
    np.testing.assert_array_equal(c.value().numpy(), [1.0, 1.0])


# == regression tests for the messages and conversions fixed here ==========================
def test_constant_nan_in_a_trace_says_not_finite():
    """Regression: a NaN constant inside a trace was reported as 'below the lower limit'."""
    p = zcache.Parameter("p", 0.5, lower=0.0, upper=1.0)
    with pytest.raises(ParameterValueError, match="not finite"):
        _in_function(lambda: p.set_value(np.nan))()
    assert float(p.value()) == 0.5


def test_plain_tf_function_with_autograph_can_use_zcache():
    """Regression: autograph converted zcache's internals and crashed on networkx's wrappers."""
    p = zcache.Parameter("p", 1.0)
    x = zcache.Data(np.arange(3.0), name="x")
    c = zcache.CachedTensor(lambda: x.value() * p.value(), name="c")

    @tf.function  # autograph on, as users write it
    def f():
        return tf.reduce_sum(c.value()), zcache.gradient(lambda: tf.reduce_sum(c.value()), [p])

    p.set_value(2.0)
    x.set_data(x.numpy() + 1.0)
    value, grad = f()
    assert float(value) == 12.0 and grad.numpy().tolist() == [6.0]


def test_set_value_in_a_plain_tf_function_is_refused_by_name():
    """Regression (issue 10, symptom 1): a plain tf.function that set a parameter and read a cache
    returned the value of its first call (the cache was valid after the parameter changed). It
    is refused with UnmanagedTraceError, also through autograph (which would otherwise turn it
    into a StagingError), and leaves the state unchanged; zcache.function does it right."""
    x = zcache.Data(np.linspace(0.0, 1.0, 5), name="x")
    mu = zcache.Parameter("mu", 0.2)
    c = zcache.CachedTensor(lambda: tf.reduce_sum(tf.exp(x.value() * mu.value()) ** 2), name="c")
    xs = x.numpy()
    for autograph in (True, False):
        def body(v):
            mu.set_value(v)
            return c.value()

        def body_data(t):
            x.set_data(t)
            return c.value()

        for fn, arg in ((body, 0.7), (body_data, [1.0, 2.0])):
            with pytest.raises(UnmanagedTraceError, match="zcache.function"):
                tf.function(fn, autograph=autograph)(tf.constant(arg, tf.float64))
        assert float(mu.value()) == 0.2 and np.array_equal(x.numpy(), xs)
    managed = zcache.function(body, wraps="loss")
    for v in (0.7, 1.3, 0.7):
        np.testing.assert_allclose(float(managed(tf.constant(v, tf.float64))), np.sum(np.exp(xs * v) ** 2), rtol=1e-12)


def test_outer_tape_around_a_traced_function_with_caches_of_caches():
    """Regression: the backward pass of a cache of caches built a tf.cond TensorFlow could not
    differentiate when a tape outside the traced function asked for the gradient."""
    p = zcache.Parameter("p", 1.5)
    x = zcache.Data(np.linspace(0.0, 1.0, 5), name="x")
    inner = zcache.CachedTensor(lambda: tf.sin(x.value() * p.value()), name="inner")
    outer = zcache.CachedTensor(lambda: inner.value() * p.value(), name="outer")
    f = zcache.function(lambda: tf.reduce_sum(outer.value()))
    xs = x.numpy()
    for value in (1.5, 1.5, 0.7):  # miss, hit, miss
        p.set_value(value)
        with tf.GradientTape() as tape:
            y = f()
        expected = np.sum(np.sin(xs * value) + value * xs * np.cos(xs * value))
        np.testing.assert_allclose(float(tape.gradient(y, p.variable)), expected, rtol=1e-12)
        np.testing.assert_allclose(float(y), np.sum(value * np.sin(xs * value)), rtol=1e-12)
    assert f.trace_count == 1


def test_gradient_through_a_cache_reads_its_data_only_caches():
    """The backward pass recomputes a cache's function, which reads the caches it depends on:
    a data-only cache (an angular term) is read, not recomputed, on every gradient."""
    calls = {"angular": 0}
    p = zcache.Parameter("p", 1.5)
    x = zcache.Data(np.linspace(0.0, 1.0, 5), name="x")

    def angular() -> tf.Tensor:
        calls["angular"] += 1
        return tf.cos(x.value())

    inner = zcache.CachedTensor(angular, name="angular")
    outer = zcache.CachedTensor(lambda: inner.value() * p.value(), name="outer")
    for value in (1.5, 1.5, 0.7):  # outer: miss, hit, miss
        p.set_value(value)
        grad = zcache.gradient(lambda: tf.reduce_sum(outer.value()), [p])
        np.testing.assert_allclose(grad.numpy(), [np.sum(np.cos(x.numpy()))], rtol=1e-14)
    assert calls["angular"] == 1


@pytest.mark.parametrize("persistent", [False, True], ids=["tape", "persistent tape"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_tape_open_while_a_function_is_first_traced(persistent):
    """Regression: a persistent tape open during the first call (the trace) made TensorFlow build
    the gradient of the cache's tf.cond, which failed (SecondOrderGradientError)."""
    p = zcache.Parameter("p", 1.5)
    x = zcache.Data(np.linspace(0.0, 1.0, 5), name="x")
    inner = zcache.CachedTensor(lambda: tf.sin(x.value() * p.value()), name="inner")
    outer = zcache.CachedTensor(lambda: inner.value() * p.value(), name="outer")
    f = zcache.function(lambda: tf.reduce_sum(outer.value()))
    with tf.GradientTape(persistent=persistent) as tape:
        y = f()
    xs = x.numpy()
    np.testing.assert_allclose(float(tape.gradient(y, p.variable)),
                               np.sum(np.sin(xs * 1.5) + 1.5 * xs * np.cos(xs * 1.5)), rtol=1e-12)


# == weak references =======================================================================
def _collect() -> None:
    for _ in range(2):
        gc.collect()


def _count(cls: type) -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, cls))


class Toy(zcache.Cachable):
    """A small model with a reference cycle (as models often have)."""

    def __init__(self, seed: int) -> None:
        self.me = self
        self.mu = zcache.Parameter("mu", 0.1 * seed)
        self.x = zcache.Data(np.random.default_rng(seed).normal(size=20), name="x")
        self.shifted = zcache.CachedTensor(lambda: self.x.value() - self.mu.value(), name="shifted")

    @zcache.cached
    def density(self) -> tf.Tensor:
        return tf.exp(-0.5 * self.shifted.value() ** 2)

    def nodes(self) -> list[int]:
        return [self.mu.node_id, self.x.node_id, self.shifted.node_id,
                *[c.node_id for c in self._zcache_caches.values()]]


USES: dict[str, Callable[[Toy], Any]] = {
    "eager": lambda m: m.density(),
    "zcache.function": lambda m: zcache.function(lambda: tf.reduce_sum(m.density()))(),
    "traced gradient": lambda m: zcache.function(
        lambda: zcache.gradient(lambda: tf.reduce_sum(m.density()), [m.mu]))(),
    "tf.function (autograph)": lambda m: tf.function(lambda: tf.reduce_sum(m.density()))(),
    "argument of a kept zcache.function": lambda m: kept_function(m),
    "outer tape": lambda m: _outer_tape(m),
    "numerical gradient, traced": lambda m: _numerical(m),
}


@zcache.function
def kept_function(m: Toy) -> tf.Tensor:
    """A module-level traced function that outlives the models passed to it."""
    return tf.reduce_sum(m.density())


def _outer_tape(m: Toy) -> Any:
    f = zcache.function(lambda: tf.reduce_sum(m.density()))
    with tf.GradientTape() as tape:
        y = f()
    return tape.gradient(y, m.mu.variable)


def _numerical(m: Toy) -> Any:
    with zcache.set_autograd_mode(False):
        return zcache.function(lambda: zcache.gradient(lambda: tf.reduce_sum(m.density()), [m.mu]))()


@pytest.mark.slow  # 1.9 s
def test_dropped_objects_leave_the_dependency_graph():
    """One model per way of using it; after dropping them, no object and no node is left."""
    g = zcache.dependency_graph()

    def run(use: str) -> tuple[list[int], weakref.ref]:
        m = Toy(3)
        USES[use](m)
        assert all(n in g for n in m.nodes())
        return m.nodes(), weakref.ref(m)

    made = {use: run(use) for use in USES}
    _collect()
    kept = [use for use, (_, ref) in made.items() if ref() is not None]
    assert not kept, f"models kept alive after: {kept}"
    left = [use for use, (nodes, _) in made.items() if any(n in g for n in nodes)]
    assert not left, f"nodes of dropped objects stayed after: {left}"


def test_a_traced_setter_does_not_keep_caches_created_after_its_trace():
    """Regression (found by the stateful machine): a traced setter remembered, as objects, the
    caches it invalidates from Python after each call, and so kept dropped caches alive."""
    p = zcache.Parameter("p", 1.0)

    @zcache.function
    def setter(v: tf.Tensor) -> tf.Tensor:
        p.set_value(v)
        return p.value()

    setter(tf.constant(1.0, tf.float64))  # traced before the cache exists

    def make() -> tuple[weakref.ref, int]:
        c = zcache.CachedTensor(lambda: p.value() * 2.0, name="late")
        c.value()
        setter(tf.constant(2.0, tf.float64))  # invalidates c from Python, after the call
        assert not c.is_valid and float(c.value()) == 4.0
        return weakref.ref(c), c.node_id

    ref, uid = make()
    assert ref() is None, "the traced setter keeps the dropped cache alive"
    assert uid not in zcache.dependency_graph()


class Acyclic(zcache.Cachable):
    """A model without a reference cycle of its own: freed when its last reference goes."""

    def __init__(self, seed: int) -> None:
        self.mu = zcache.Parameter("mu", 0.1 * seed)
        self.x = zcache.Data(np.random.default_rng(seed).normal(size=20), name="x")

    @zcache.cached
    def density(self) -> tf.Tensor:
        return tf.exp(-0.5 * (self.x.value() - self.mu.value()) ** 2)


@pytest.mark.slow  # about 1.6 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_a_dropped_zcache_function_is_freed_without_the_collector():
    """Issue 51: a zcache.function held its tf.functions, whose traced wrapper held the zcache.function back:
    a cycle, so a dropped function, its graphs and everything its body closes over (a model, its caches, its
    data) lived until the collector's next full pass (a notebook's loop that builds a model and a traced function
    per fit kept them all; the stateful machine's teardown paid a full pass per sequence). Counted over cycles
    with the collector off: nothing of a dropped cycle is left, the dependency graph does not grow."""
    from zcache._engine.function import _FUNCTIONS

    uses = {
        "value": lambda m: zcache.function(lambda: tf.reduce_sum(m.density())),
        "gradient": lambda m: zcache.function(lambda: zcache.gradient(lambda: tf.reduce_sum(m.density()), [m.mu])),
        "setter": lambda m: zcache.function(lambda v: (m.mu.set_value(v), tf.reduce_sum(m.density()))[1]),
    }

    def run(seed: int, use: str) -> list[weakref.ref]:
        m = Acyclic(seed)
        f = uses[use](m)
        y = f(tf.constant(0.2, tf.float64)) if use == "setter" else f()
        assert np.isfinite(float(tf.reduce_sum(y)))
        return [weakref.ref(m), weakref.ref(f), weakref.ref(m.mu), weakref.ref(m.x)]

    run(0, "value")
    _collect()
    functions, nodes = len(_FUNCTIONS), zcache.dependency_graph().number_of_nodes()
    enabled = gc.isenabled()
    gc.disable()
    try:
        refs = {(seed, use): run(seed, use) for seed in range(1, 3) for use in uses}
        kept = sorted(key for key, rs in refs.items() if any(r() is not None for r in rs))
        assert not kept, f"dropped models and functions kept alive until a collection: {kept}"
        assert len(_FUNCTIONS) == functions
        assert zcache.dependency_graph().number_of_nodes() == nodes
    finally:
        if enabled:
            gc.enable()


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_no_node_of_a_collected_object_survives_in_the_graph():
    """Every node's weak reference is alive (the invariant the stateful machine also checks)."""
    for seed in range(3):
        Toy(seed).density()
    _collect()
    g = zcache.dependency_graph()
    with GRAPH.lock:
        assert all(attrs["ref"]() is not None for _, attrs in g.nodes(data=True))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_garbage_collection_during_a_graph_traversal_is_safe():
    """Regression: a finalizer removing a node while set_value traversed the graph raised
    'RuntimeError: dictionary changed size during iteration'."""
    p = zcache.Parameter("p", 1.0)

    class Cyclic:
        def __init__(self) -> None:
            self.me = self
            self.caches = [zcache.CachedTensor(lambda k=k: p.value() * k, deps=[p]) for k in range(3)]

    thresholds = gc.get_threshold()
    gc.set_threshold(50, 5, 5)  # a busy program: collections at any allocation
    try:
        for i in range(150):
            Cyclic()  # cyclic garbage with nodes downstream of p
            p.set_value(1.0 + i % 5)
            assert float(p.value()) == 1.0 + i % 5
    finally:
        gc.set_threshold(*thresholds)
    _collect()
    assert GRAPH.dependent_caches(p.node_id) == ()


@pytest.mark.slow  # 2.2 s
def test_a_kept_function_does_not_keep_its_graphs_after_reset():
    """Traced graphs are released by clear_graph_cache (TensorFlow's gradient registry held them)."""
    zcache.clear_graph_cache()
    _collect()
    graphs = _count(FuncGraph)
    m = Toy(1)
    f = zcache.function(lambda: zcache.value_and_gradient(lambda: tf.reduce_sum(m.density()), [m.mu]))
    f()
    _collect()
    assert _count(FuncGraph) > graphs
    zcache.clear_graph_cache()
    _collect()
    assert _count(FuncGraph) == graphs
    f()  # traces again and still works
    assert f.trace_count == 2


# == toy loops: no retrace, bounded memory =================================================
def _live() -> dict[str, int]:
    _collect()
    return {
        "tf.Variable": _count(tf.Variable),
        "FuncGraph": _count(FuncGraph),
        "graph nodes": zcache.dependency_graph().number_of_nodes(),
        "zcache objects": _count(zcache.Parameter) + _count(zcache.Data) + _count(zcache.CachedTensor),
    }


class CoreFit:
    """A Gaussian fit with cached parts on the core only: what a toy study runs per toy."""

    def __init__(self, n: int = 300) -> None:
        rng = np.random.default_rng(1)
        self.mu = zcache.Parameter("mu", 0.0, lower=-3.0, upper=3.0)
        self.sigma = zcache.Parameter("sigma", 1.0, lower=0.2, upper=5.0)
        self.x = zcache.Data(rng.normal(size=n), name="x")
        mu, sigma, x = self.mu, self.sigma, self.x
        self.z = zcache.CachedTensor(lambda: (x.value() - mu.value()) / sigma.value(), name="z")  # parameters + data
        self.x2 = zcache.CachedTensor(lambda: tf.reduce_mean(x.value() ** 2), name="x2")  # data only
        self.lognorm = zcache.CachedTensor(lambda: tf.math.log(sigma.value() * np.sqrt(2.0 * np.pi)),
                                           name="lognorm")  # parameter only
        z, lognorm, x2 = self.z, self.lognorm, self.x2

        def nll() -> tf.Tensor:
            return tf.reduce_mean(0.5 * z.value() ** 2) + lognorm.value()

        @zcache.function(wraps="gradient")
        def step(rate: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            value, grad = zcache.value_and_gradient(nll, [mu, sigma])
            zcache.set_values([mu, sigma], [tf.clip_by_value(mu.value() - rate * grad[0], -3.0, 3.0),
                                            tf.clip_by_value(sigma.value() - rate * grad[1], 0.2, 5.0)])
            return value, grad

        @zcache.function(wraps="loss")
        def loss() -> tuple[tf.Tensor, tf.Tensor]:
            return nll(), x2.value()

        self.nll, self.step, self.loss = nll, step, loss

    def toy(self, i: int, steps: int = 5) -> tuple[float, float]:
        """New data (another size), start values, a few gradient-descent steps; (start, end) loss."""
        rng = np.random.default_rng(100 + i)
        n = 200 + (37 * i) % 150
        self.x.set_data(rng.normal(0.3, 1.4, size=n))
        zcache.set_values([self.mu, self.sigma], [0.0, 1.0])
        start = float(self.loss()[0])
        for _ in range(steps):
            self.step(tf.constant(0.5, tf.float64))
        return start, float(self.loss()[0])

    def reference_nll(self) -> float:
        x = self.x.numpy()
        mu, sigma = float(self.mu.numpy()), float(self.sigma.numpy())
        return float(np.mean(0.5 * ((x - mu) / sigma) ** 2) + np.log(sigma * np.sqrt(2.0 * np.pi)))


@pytest.mark.slow  # memory growth, 3 s
def test_toy_loop_never_retraces_and_memory_stays_bounded():
    fit = CoreFit()
    for i in range(3):  # warm up: the traces, TensorFlow's caches, the allocator
        fit.toy(i)
    traces = (fit.step.trace_count, fit.loss.trace_count)
    assert traces == (1, 1)
    live = _live()
    rss = psutil.Process().memory_info().rss
    for i in range(3, 153):
        start, end = fit.toy(i)
        assert end < start, f"toy {i}: the fit did not descend"
    np.testing.assert_allclose(float(fit.loss()[0]), fit.reference_nll(), rtol=1e-12)
    np.testing.assert_allclose(float(fit.x2.value()), np.mean(fit.x.numpy() ** 2), rtol=1e-12)
    assert (fit.step.trace_count, fit.loss.trace_count) == traces, "a toy retraced"
    assert _live() == live, "live TensorFlow objects or graph nodes grew over 150 toys"
    growth = (psutil.Process().memory_info().rss - rss) / 2**20
    assert growth < 25.0, f"RSS grew by {growth:.1f} MiB over 150 toys"


# exhaustive: make test keeps the superset with a new loss and a Minuit fit per toy
# (test_new_fitted_model_per_toy_keeps_memory_bounded) and the toy-loop memory tests
@pytest.mark.exhaustive
def test_new_model_per_toy_keeps_memory_bounded():
    """The zfit #624 pattern: a new model, data and traced function per toy, all dropped."""
    def toy(i: int) -> None:
        fit = CoreFit(n=50)
        fit.toy(i, steps=2)

    for i in range(2):
        toy(i)
    live = _live()
    for i in range(2, 5):
        toy(i)
    assert _live() == live, "dropped models left objects, graphs or nodes behind"


# == threads ===============================================================================
@contextlib.contextmanager
def _fast_switching():
    """Let threads switch after (almost) every bytecode, to provoke races."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _run_threads(targets: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as err:  # noqa: BLE001 - reported by the test
                errors.append(err)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_threads_on_separate_caches_never_see_a_stale_value(traced):
    def worker(k: int) -> Callable[[], None]:
        def run() -> None:
            p = zcache.Parameter(f"p{k}", 0.0)
            x = zcache.Data(np.ones(3), name=f"x{k}")
            c = zcache.CachedTensor(lambda: x.value() * p.value() + 1.0, name=f"c{k}")
            read = zcache.function(lambda: c.value()) if traced else c.value
            for i in range(60):
                p.set_value(float(i))
                if i % 3 == 0:
                    x.set_data(np.full(1 + i % 5, 2.0))
                got = read().numpy()
                n = 1 + (i - i % 3) % 5  # the size set at the last multiple of 3
                expected = np.full(n, 2.0 * i + 1.0)
                assert got.shape == expected.shape and np.array_equal(got, expected), (k, i, got)
        return run

    with _fast_switching():
        assert _run_threads([worker(k) for k in range(4)]) == []


def test_threads_shared_cache_reads_are_never_stale_or_torn():
    """One writer, three readers: a read returns the value of a write that was current at some
    moment during the read (never one overwritten before the read began), and never a mix."""
    p = zcache.Parameter("p", 0.0)
    x = zcache.Data(np.zeros(1), name="x")
    c = zcache.CachedTensor(lambda: x.value() + 1000.0 * p.value(), name="shared")
    progress = {"started": 0, "done": 0}
    writes = 150

    def writer() -> None:
        for j in range(1, writes + 1):
            progress["started"] = j
            if j % 2:
                p.set_value(float(j))
            else:
                x.set_data(np.full(1 + j % 7, float(j)))
            progress["done"] = j

    def expected(j: int) -> np.ndarray:
        """The cache after write j: p is the last odd write, x the last even one."""
        last_p = j if j % 2 else j - 1
        last_x = j - 1 if j % 2 else j
        xs = np.full(1 + last_x % 7, float(last_x)) if last_x > 0 else np.zeros(1)
        return xs + 1000.0 * max(last_p, 0)

    def reader() -> None:
        while progress["done"] < writes:
            lo = progress["done"]
            got = c.value().numpy()
            hi = progress["started"]
            assert any(np.array_equal(got, expected(j)) for j in range(lo, hi + 1)), (lo, hi, got)

    with _fast_switching():
        assert _run_threads([writer, reader, reader, reader]) == []
    np.testing.assert_array_equal(c.value().numpy(), expected(writes))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_threads_setting_one_parameter_keep_variable_and_mirror_equal():
    """Regression: two threads setting one parameter could leave its Python mirror differing from
    the Variable; a later set_value of the mirrored value was then skipped (a stale parameter)."""
    p = zcache.Parameter("p", 0.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0, name="doubled")
    with _fast_switching():
        for trial in range(300):
            barrier = threading.Barrier(2)

            def write(v: float, barrier: threading.Barrier = barrier) -> Callable[[], None]:
                def run() -> None:
                    barrier.wait()
                    p.set_value(v)
                return run

            assert _run_threads([write(2.0 * trial + 1.0), write(2.0 * trial + 2.0)]) == []
            assert float(p.variable.numpy()) == p._current(), f"trial {trial}: mirror differs"
    for v in (1.0, 2.0, 1.0):
        p.set_value(v)
        assert float(p.value()) == v and float(c.value()) == 2.0 * v


def test_threads_many_writers_and_readers_on_one_parameter():
    """Four threads set one parameter and read its cache without any lock of their own: each
    read is the cache of some written value, and at the end all agree on the last write."""
    p = zcache.Parameter("p", 0.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0, name="doubled")
    written = {0.0} | {float(1000 * k + i) for k in range(4) for i in range(80)}

    def worker(k: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(80):
                p.set_value(float(1000 * k + i))
                got = float(c.value())
                assert got / 2.0 in written, got
        return run

    with _fast_switching():
        assert _run_threads([worker(k) for k in range(4)]) == []
    final = float(p.variable.numpy())
    assert p._current() == final and float(c.value()) == 2.0 * final


# == the fitting layer in toy loops ========================================================
def _fit_world(n: int = 300):
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma", 0.6, lower=0.1, upper=2.0)
    lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01, floating=False)
    nsig = zcache.Parameter("nsig", 0.4 * n, lower=0.0, upper=10.0 * n)
    nbkg = zcache.Parameter("nbkg", 0.6 * n, lower=0.0, upper=10.0 * n)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    return model, ExtendedUnbinnedNLL(model, model.sample(n))


@pytest.mark.slow  # memory growth, 5 s
def test_fit_toy_loop_never_retraces_and_memory_stays_bounded():
    """run_toys (generate, precomputed Minuit fit with gradient and Hessian): no retrace, nothing kept."""
    from zcache.toys import run_toys

    model, loss = _fit_world()
    run_toys(model, loss, n_toys=3, seed=1, progress=False)  # warm up: traces, precompute, allocator
    traces = [f.trace_count for f in [*loss.functions(), model._sampler]]
    live = _live()
    rss = psutil.Process().memory_info().rss
    toys = run_toys(model, loss, n_toys=60, seed=2, progress=False)
    assert toys.table["valid"].all()
    assert [f.trace_count for f in [*loss.functions(), model._sampler]] == traces, "a toy retraced"
    assert _live() == live, "live TensorFlow objects or graph nodes grew over 60 fitted toys"
    growth = (psutil.Process().memory_info().rss - rss) / 2**20
    assert growth < 25.0, f"RSS grew by {growth:.1f} MiB over 60 fitted toys"


@pytest.mark.slow  # memory growth, 6 s
def test_new_fitted_model_per_toy_keeps_memory_bounded():
    """zfit #624 with the fitting layer: a new model, loss and Minuit fit per toy, all dropped."""
    from zcache.minimize import Minuit

    def toy() -> None:
        model, loss = _fit_world(n=100)
        assert Minuit().minimize(loss).valid

    toy()
    live = _live()
    for _ in range(2):
        toy()
    assert _live() == live, "dropped models and losses left objects, graphs or nodes behind"


def test_traced_miss_branch_is_traced_once_until_clear_graph_cache():
    """A cache's miss branch is one function for all graphs: Python state its func reads is frozen
    there (like in any traced function) until clear_graph_cache, whose retrace sees the change."""
    state = {"kind": "base"}
    mu = zcache.Parameter("mu_frozen", 1.5)

    def f():
        if state["kind"] == "rank":
            return tf.reshape(tf.fill([2], mu.value()), [1, 2])
        return tf.fill([2], mu.value())

    c = zcache.CachedTensor(f, name="frozen")
    first = zcache.function(lambda: c.value())
    np.testing.assert_array_equal(first().numpy(), [1.5, 1.5])
    state["kind"] = "rank"
    mu.set_value(2.0)
    second = zcache.function(lambda: c.value())  # a new graph reuses the compiled miss branch
    np.testing.assert_array_equal(second().numpy(), [2.0, 2.0])  # fresh in its dependencies
    zcache.clear_graph_cache()
    with pytest.raises(CachedValueError, match="keep its dtype and rank"):
        second()


@pytest.mark.slow  # 2.4 s
def test_fits_of_separate_models_in_threads_leave_the_modes_alone():
    """Regression (issue 10, symptom 8): two threads fitting their own models could leave the
    process-wide graph mode at eager (precompute flipped it with set_graph_mode(False)); every
    fit equals the same fit run alone."""
    from zcache.minimize import Minuit
    from zcache.models import set_seed

    set_seed(7)
    worlds = [_fit_world(n=400) for _ in range(2)]
    alone = []
    for _model, loss in worlds:
        start = [p._current() for p in loss.params]
        alone.append(Minuit().minimize(loss).values)
        zcache.set_values(loss.params, start)
    results: list[dict[str, float]] = [{}, {}]

    def fit(k: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(3):
                results[k] = Minuit().minimize(worlds[k][1]).values
        return run

    assert _run_threads([fit(0), fit(1)]) == []
    assert zcache.get_graph_mode() == "auto" and not tf.config.functions_run_eagerly()
    for got, want in zip(results, alone, strict=True):
        for name in want:
            assert abs(got[name] - want[name]) < 1e-3 * max(1.0, abs(want[name])), (name, got, want)


def test_traced_reads_while_another_thread_sets_values_are_never_stale():
    """A zcache.function called in one thread while another thread changes its inputs: every
    result is the formula at some value that was set, and the cache is fresh at the end."""
    p = zcache.Parameter("p", 0.0)
    x = zcache.Data(np.linspace(0.0, 1.0, 50), name="x")
    c = zcache.CachedTensor(lambda: tf.reduce_sum(tf.sin(x.value() * p.value())), name="c")
    f = zcache.function(lambda: c.value())
    written = [float(i) / 7.0 for i in range(200)]
    xs = x.numpy()
    allowed = {round(float(np.sum(np.sin(xs * v))), 9) for v in [0.0, *written]}
    bad: list[float] = []

    def writer() -> None:
        for v in written:
            p.set_value(v)

    def reader() -> None:
        for _ in range(300):
            got = round(float(f()), 9)
            if got not in allowed:
                bad.append(got)

    with _fast_switching():
        assert _run_threads([writer, reader, reader]) == []
    assert bad == []
    np.testing.assert_allclose(float(f()), np.sum(np.sin(xs * written[-1])), rtol=1e-12)
