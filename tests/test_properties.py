"""Property-based tests (hypothesis) of zcache's invariants.

Every test builds a *world*: Parameters (with limits), Data (1-D, 1..50 events), caches
built from random expression templates over 1-3 dependencies (declared or discovered,
caches of caches) and ``@zcache.cached`` methods of a small model class, together with
an independent reference model: the values this file set itself, and each cache's
formula evaluated without any cache (numpy for values, TensorFlow on constants for
gradients).

1. Never stale: after random sequences of set_value / set_data / invalidate (eager, inside
   a traced function, set_values, ``with`` blocks), every cache equals its reference
   (rtol 1e-12), read eagerly and inside a traced ``zcache.function``.
2. Exact gradients: ``zcache.gradient`` and a ``tf.GradientTape`` on ``p.variable`` equal
   the uncached gradient (rtol 1e-10) on misses and hits, eagerly and traced; numerical mode
   equals the same central differences on the reference; numdifftools agrees (1e-6).
3. No retrace: set_value / set_data (other sizes) never increase ``trace_count`` after the
   first call (``Traced`` checks this after every call of every traced function here).
4. ``CacheMachine``: a RuleBasedStateMachine over the public API (including graph and
   autograd modes, as plain setters and as ``with`` blocks, and clear_graph_cache), checked
   against the reference after every step; the dependency graph stays acyclic. Gradients are
   also taken by a tape outside a traced function and compared with 4-point finite
   differences of zcache's own values (1e-6); temporary models (a ``@cached`` model, a cache
   of its cache, traced functions) are used and dropped, and their nodes must leave the
   dependency graph, which never holds a node of a collected object. User paths beyond
   ``zcache.function``:

   - a *plain* ``tf.function`` (autograph on and off) reading caches and taking a tape's
     gradient: reference values and gradients, at most one trace (``PlainTraced``);
   - caches read inside a ``tf.function(jit_compile=True)`` (refused: XLA drops checks);
   - set_value / set_values / set_data inside a plain ``tf.function`` (also through a
     zcache.function inlined into it) raise ``UnmanagedTraceError`` when traced, state unchanged;
   - guarded caches (``tf.debugging.assert_less`` under ``tf.control_dependencies``, or a Python
     ``raise`` eagerly) read while the guard fails, eagerly, in a zcache.function, in a plain
     tf.function, or in a zcache.function that set parameters first: the read raises, the
     cache and the caches above it are not valid, the failed zcache.function put its inputs
     back, and the next read after a good value is fresh;
   - persistent (and nested) tapes that span a set_value (eager, or in the graph of a
     zcache.function): gradient and Hessian are the reference's at the forward point;
   - caches that read parameters as ``p.variable`` (must be recorded like ``p.value()``);
   - ``zcache.hessian`` within one step of a limit (clipped, parameters unchanged) and a
     numerical ``zcache.gradient`` whose function raises (parameters unchanged);
   - once per sequence, two threads on separate small worlds (set_value and traced reads),
     after which the graph mode and ``tf.config.functions_run_eagerly()`` are unchanged.
5. Bad input (NaN/inf/out-of-limit values, malformed data; eager and traced) raises the
   documented error and leaves values, data and every cache's validity unchanged.

Hypothesis profiles (tests/conftest.py): ``ci`` (``make test``, about 25 s), ``dev`` (with
``-m "not slow"``, seconds) and ``stress`` (``HYPOTHESIS_PROFILE=stress``, many minutes);
``make stress`` runs ``CacheMachine`` and the fitting layer's ``FitMachine`` for 10,000 sequences
in parallel worker processes (tests/stress.py).
Trace time grows quickly with how deeply caches nest (each read traces its dependencies
again inside its tf.cond, each gradient traces them again in the backward pass), so the
worlds keep nesting shallow.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import operator
import sys
import threading
import weakref

import networkx as nx
import numdifftools as nd
import numpy as np
import pytest
import tensorflow as tf
from helpers import save_modes
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

import zcache
from zcache._engine.dependencies import GRAPH
from zcache.exceptions import (
    DataDtypeError,
    DataError,
    DataShapeError,
    EmptyDataError,
    InvalidDataError,
    ParameterValueError,
    UnmanagedTraceError,
    ZCacheError,
)


def _examples(fraction: float) -> settings:
    """Settings for a heavier test: a fraction of the active profile's max_examples (conftest.py)."""
    return settings(max_examples=max(2, int(settings.default.max_examples * fraction)))


# == expression templates, evaluated by zcache (TensorFlow) or by the reference (numpy) ===
class _Backend:
    def __init__(self, name, sin, cos, tanh, exp, mean):
        self.name, self.sin, self.cos, self.tanh, self.exp, self.mean = name, sin, cos, tanh, exp, mean


NP = _Backend("np", np.sin, np.cos, np.tanh, np.exp, np.mean)
TF = _Backend("tf", tf.sin, tf.cos, tf.tanh, tf.exp, tf.reduce_mean)

UNARY = {
    "id": lambda M, x: x,
    "sin": lambda M, x: M.sin(x),
    "cos": lambda M, x: M.cos(x),
    "tanh": lambda M, x: M.tanh(x),
    "bump": lambda M, x: 1.0 / (1.0 + x * x),
    "gauss": lambda M, x: M.exp(-0.5 * x * x),
    "affine": lambda M, x: 0.5 * x + 0.25,
    "mean": lambda M, x: M.mean(x),
}
BOUNDED = ("sin", "cos", "tanh", "bump", "gauss")  # the last op of a cache: values in [-1, 1]
BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def make_plan(unary, binary, reduce, domains):
    """Fold ``u_0(d_0) op_1 u_1(d_1) ...``; a vector over another dataset is averaged first.

    A *domain* is None for a scalar or the uid of the dataset a vector runs over.
    Returns the plan (unary, binary, average-first) per dependency and the result's domain.
    """
    steps, dom = [], None
    for i, (u, d) in enumerate(zip(unary, domains)):
        d = None if u == "mean" else d
        force_mean = dom is not None and d is not None and d != dom
        if force_mean:
            d = None
        steps.append((u, binary[i - 1] if i else None, force_mean))
        if dom is None:
            dom = d
    return tuple(steps), (None if reduce else dom)


def run_plan(plan, final, reduce, leaves, M):
    acc = None
    for (u, op, force_mean), leaf in zip(plan, leaves):
        term = UNARY[u](M, leaf)
        if force_mean:
            term = M.mean(term)
        acc = term if acc is None else BINARY[op](acc, term)
    out = UNARY[final](M, acc)
    return M.mean(out) if reduce else out


def templates(n):
    """(unary per dependency, binary ops, final bounded op, reduce to a scalar)."""
    return st.tuples(
        st.tuples(*[st.sampled_from(sorted(UNARY))] * n),
        st.tuples(*[st.sampled_from(sorted(BINARY))] * (n - 1)),
        st.sampled_from(BOUNDED),
        st.booleans(),
    )


# == a model class with @zcache.cached methods; formulas shared with the reference ==========
def _profile(M, x, a):
    return M.tanh(x * a)


def _norm(M, a, b, k):
    # not a * k: with k = 1 and a is b that is x * 1.0 + x, which TensorFlow 2.21's graph optimizer
    # compiles wrong inside a tf.cond of a separately built backward function (an empty float32
    # gradient; test_tf_internals.py::test_tensorflow_still_miscompiles_x_times_one_plus_x_in_a_backward_cond)
    return M.cos(a * (k + 0.5) + b)


def _weight(M, x, b):
    return 1.0 / (1.0 + (x * b) * (x * b))


def _total(M, profile, norm, weight):
    return M.mean(profile) * norm + weight


def _events(x):
    """What a model reads of a dataset: the events, times their weights for weighted data."""
    return x.value() * x.weights if x.is_weighted else x.value()


class Lineshape(zcache.Cachable):
    def __init__(self, a, b):
        self.a, self.b = a, b

    @zcache.cached  # x (Data argument) is a dependency, self.a is discovered
    def profile(self, x):
        return _profile(TF, _events(x), self.a.value())

    @zcache.cached(deps=["a", "b"])  # declared by attribute name, keyed by the int k
    def norm(self, k):
        return _norm(TF, self.a.value(), self.b.value(), float(k))

    @zcache.cached(deps=lambda self: [self.b])  # declared by a callable, plus the argument x
    def weight(self, x):
        return _weight(TF, _events(x), self.b.value())

    @zcache.cached  # a cache of caches
    def total(self, x, k):
        return _total(TF, self.profile(x), self.norm(k), self.weight(x))


# == the world: zcache objects plus an independent reference model ==========================
class Node:
    """A Parameter, Data or cache, with how zcache reads it and how the reference computes it."""

    def __init__(self, uid, kind, label, *, obj=None, read=None, ref=None, domain=None,
                 leaf_ids=frozenset(), model=None, depth=0, below=frozenset(), guard=None, weighted=False):
        self.uid, self.kind, self.label = uid, kind, label
        self.weighted = weighted  # weighted Data: read as values * weights (see AutoWeighted)
        self.below = below  # uids of the caches it reads, transitively
        self.guard = guard  # a guarded cache: the guard parameter's Node (see World.add_cache)
        self.depth = depth  # 0 for inputs, 1 + the deepest dependency for caches
        self.obj = obj  # the zcache object (None for a @cached method)
        self.read = read  # () -> tensor through zcache
        self.ref = ref  # (env, backend) -> value, without any cache
        self.domain = domain
        self.leaf_ids = leaf_ids  # node_ids of all Parameters and Data it depends on
        self.model = model

    def __repr__(self):
        return self.label

    def value_in(self, env, M):
        if self.uid not in env:
            env[self.uid] = self.ref(env, M)
        value = env[self.uid]
        return value * (1.0 + 0.5 * M.sin(value)) if self.weighted else value


def _auto_weights(array):
    """AutoWeighted's weights for ``array`` (None where the array is malformed: set_data's own
    checks of the events then raise the error a malformed array must raise)."""
    if isinstance(array, (tf.Tensor, tf.Variable)):
        if array.shape.rank != 1 or not array.dtype.is_floating:
            return None
        return 1.0 + 0.5 * tf.sin(tf.cast(array, tf.float64))
    arr = np.asarray(array)
    if arr.ndim != 1 or arr.dtype.kind not in "biuf":
        return None
    arr = arr.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return 1.0 + 0.5 * np.sin(arr)


class AutoWeighted(zcache.Data):
    """Weighted Data whose weights are always ``1 + sin(x)/2`` of its events, so the reference
    knows them: every set_data of the machine (eager, traced, ``with`` blocks, failing calls)
    then also writes, invalidates, snapshots and restores the weights, and a cache reads the
    weighted events ``x * w`` (a stale or unrestored weight shows as a wrong value)."""

    def __init__(self, array, name):
        super().__init__(array, name=name, weights=_auto_weights(array))

    def set_data(self, array, weights=None):
        return super().set_data(array, weights=_auto_weights(array))


class Traced:
    """A zcache.function plus the trace count it must have: one per clear_graph_cache epoch,
    autograd mode and jit (a zcache.function keeps one graph per autograd mode and jit). Under a
    jit policy a call may run the uncompiled graph (the first call for new data shapes) or the
    compiled one, so a graph is expected once it exists; any retrace of it fails the check."""

    def __init__(self, world, fn):
        self.world, self.fn, self.expected, self.seen = world, fn, 0, set()

    def __call__(self, *args):
        try:
            out = self.fn(*args)
        finally:  # a call that raised (a refused value) may have traced its graph too
            if self.fn.traced:
                for autograd, jit in list(self.fn._tf_functions):
                    key = (self.world.epoch, autograd, jit)
                    if key not in self.seen:
                        self.expected += 1
                        self.seen.add(key)
        assert self.fn.trace_count == self.expected, (
            f"{self.fn!r} retraced: trace_count {self.fn.trace_count}, expected {self.expected}"
        )
        return out


class PlainTraced:
    """A plain ``tf.function`` (not zcache.function) that counts its Python-side traces: one at
    most for its whole life, whatever values, data and modes change (with the graph mode False,
    TensorFlow runs it eagerly and it does not trace)."""

    def __init__(self, body, autograph):
        self.traces = 0

        def counted(*args):
            if tf.inside_function():
                self.traces += 1
            return body(*args)

        self.autograph = autograph
        self.fn = tf.function(counted, autograph=autograph)

    def __call__(self, *args):
        out = self.fn(*args)
        assert self.traces <= 1, f"a plain tf.function (autograph {self.autograph}) retraced: {self.traces} traces"
        return out


class GuardError(ValueError):
    """Raised by a guarded cache's function, eagerly, when its guard parameter is too large."""


#: A guarded cache's function fails when its guard parameter is >= GUARD_LIMIT (the machine keeps
#: guards in [-1, 1] except inside the rule that makes them fail).
GUARD_LIMIT = 1.5
#: Exceptions a failing guard may raise: eagerly the assertion's or GuardError, traced TensorFlow's
#: InvalidArgumentError or a zcache error made from it.
GUARD_FAILURES = (tf.errors.InvalidArgumentError, GuardError, ZCacheError)

_EPS = float(np.finfo(np.float64).eps)
_REL_STEP = _EPS ** (1.0 / 3.0)


def _to_np(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _grads(grads, variables):
    return tf.stack([tf.zeros((), tf.float64) if g is None else tf.cast(g, tf.float64)
                     for g, v in zip(grads, variables)]) if variables else tf.zeros([0], tf.float64)


def _sum_all(values):
    return tf.add_n([tf.reduce_sum(v) for v in values]) if values else tf.constant(0.0, tf.float64)


def _log_sum(values):
    """A sum that is not linear in the caches' values (as a log-likelihood is not in the density's)."""
    return tf.add_n([tf.reduce_sum(tf.math.log1p(v * v)) for v in values]) if values else tf.constant(0.0, tf.float64)


class World:
    def __init__(self):
        self.uids = itertools.count()
        self.nodes, self.params, self.data, self.caches, self.models = [], [], [], [], []
        self.guards, self.guarded = [], []  # guard parameters (not in params), guarded caches
        self.values = {}  # uid -> the value this file set (the reference state)
        self.epoch = 0
        self._checkers = {}
        self._setters = {}
        self._reference = (None, None)  # (state, the uncached gradient there)

    # -- building ------------------------------------------------------------------------
    @classmethod
    def build(cls, recipe, pretrace_setters=False):
        """Build a world; ``pretrace_setters`` traces an in-graph setter per parameter first,
        so that every cache is created after the setters' traces."""
        w = cls()
        for step in recipe:
            if step[0] == "param":
                p = w.add_param(*step[1:])
                if pretrace_setters:
                    w.set_value(p, w.values[p.uid], "graph")
            elif step[0] == "data":
                w.add_data(step[1])
            elif step[0] == "model":
                _, a, b, x, k = step
                w.add_model(w.nodes[a], w.nodes[b], w.nodes[x], k)
            else:
                _, deps, tpl, declared = step
                w.add_cache([w.nodes[i] for i in deps], tpl, declared)
        note(f"world: {w.nodes}")
        return w

    def _add(self, node):
        self.nodes.append(node)
        {"param": self.params, "data": self.data, "cache": self.caches}[node.kind].append(node)
        return node

    def add_param(self, value, lower=None, upper=None):
        uid = next(self.uids)
        p = zcache.Parameter(f"p{uid}", value, lower=lower, upper=upper)
        self.values[uid] = float(value)
        return self._add(Node(uid, "param", f"p{uid}", obj=p, read=p.value,
                              leaf_ids=frozenset({p.node_id})))

    def add_data(self, array):
        uid = next(self.uids)
        self.values[uid] = np.array(array, dtype=np.float64)
        if len(array) % 2:  # odd sizes: weighted (AutoWeighted), read as x * w
            x = AutoWeighted(array, name=f"x{uid}")
            return self._add(Node(uid, "data", f"x{uid}[{len(array)}]w", obj=x, domain=uid, weighted=True,
                                  read=lambda: x.value() * x.weights,
                                  leaf_ids=frozenset({x.node_id, x.weights_data.node_id})))
        x = zcache.Data(array, name=f"x{uid}")
        return self._add(Node(uid, "data", f"x{uid}[{len(array)}]", obj=x, read=x.value, domain=uid,
                              leaf_ids=frozenset({x.node_id})))

    def add_guard(self, value):
        """A guard parameter: read by one guarded cache, kept out of ``params`` (the other rules
        never set it), in [-1, 1] except while a rule makes its cache fail."""
        uid = next(self.uids)
        g = zcache.Parameter(f"g{uid}", value)
        self.values[uid] = float(value)
        node = Node(uid, "param", f"g{uid}", obj=g, read=g.value, leaf_ids=frozenset({g.node_id}))
        self.guards.append(node)
        return node

    def add_cache(self, deps, tpl, declared, via_variable=False, guard=None):
        """A CachedTensor of the template over ``deps``.

        ``via_variable``: its function reads the Parameters among ``deps`` as ``p.variable`` (the
        public attribute) instead of ``p.value()``. ``guard``: (guard Node, kind); the cache adds
        ``0.25 * g`` and fails while ``g >= GUARD_LIMIT``: kind 'assert' with
        ``tf.debugging.assert_less`` under ``tf.control_dependencies`` (eager and traced), kind
        'python' with a Python ``raise`` eagerly (and the assertion when traced).
        """
        unary, binary, final, reduce = tpl
        plan, domain = make_plan(unary, binary, reduce, [d.domain for d in deps])
        declared = declared and all(d.obj is not None for d in deps)
        via_variable = via_variable and any(d.kind == "param" for d in deps)
        reads = [(lambda d=d: d.obj.variable) if via_variable and d.kind == "param" else d.read for d in deps]
        gnode, kind = guard if guard is not None else (None, None)
        uid = next(self.uids)

        def func():
            out = run_plan(plan, final, reduce, [r() for r in reads], TF)
            if gnode is None:
                return out
            g = gnode.obj.value()
            if kind == "python" and not tf.inside_function():
                if float(g) >= GUARD_LIMIT:
                    raise GuardError(f"c{uid}: guard g{gnode.uid} = {float(g)} >= {GUARD_LIMIT}")
                return out + 0.25 * g
            check = tf.debugging.assert_less(g, tf.constant(GUARD_LIMIT, tf.float64),
                                             message=f"c{uid}: guard g{gnode.uid} too large")
            with tf.control_dependencies([check]):
                return tf.identity(out + 0.25 * g)

        dep_objs = [d.obj for d in deps] + ([gnode.obj] if gnode is not None else [])
        cache = zcache.CachedTensor(func, deps=dep_objs if declared else None, name=f"c{uid}")
        terms = [f"{u}({d.label.split('=')[0]}{'.variable' if via_variable and d.kind == 'param' else ''})"
                 + (".mean" if fm else "") for (u, _, fm), d in zip(plan, deps)]
        expr = terms[0]
        for (_, op, _), t in zip(plan[1:], terms[1:]):
            expr = f"{op}({expr}, {t})"
        label = f"c{uid}={final}({expr}){'.mean' if reduce else ''}"
        if gnode is not None:
            label += f" + 0.25*g{gnode.uid} [guard {kind}: g{gnode.uid} < {GUARD_LIMIT}]"
        label += " [declared]" if declared else ""

        def ref(env, M):
            out = run_plan(plan, final, reduce, [d.value_in(env, M) for d in deps], M)
            return out if gnode is None else out + 0.25 * gnode.value_in(env, M)

        leaves = frozenset().union(*[d.leaf_ids for d in deps], gnode.leaf_ids if gnode else frozenset())
        node = self._add(Node(
            uid, "cache", label, obj=cache, read=cache.value, domain=domain, ref=ref, leaf_ids=leaves,
            depth=1 + max(d.depth for d in deps), guard=gnode,
            below=frozenset().union(*[d.below | ({d.uid} if d.kind == "cache" else set()) for d in deps]),
        ))
        if gnode is not None:
            self.guarded.append(node)
        return node

    def add_model(self, a, b, x, k):
        m = Lineshape(a.obj, b.obj)
        self.models.append(m)
        i = len(self.models) - 1
        leaves_ab = a.leaf_ids | b.leaf_ids
        specs = [
            ("profile", lambda: m.profile(x.obj), x.uid, a.leaf_ids | x.leaf_ids,
             lambda env, M: _profile(M, x.value_in(env, M), a.value_in(env, M))),
            ("norm", lambda: m.norm(k), None, leaves_ab,
             lambda env, M: _norm(M, a.value_in(env, M), b.value_in(env, M), float(k))),
            ("weight", lambda: m.weight(x.obj), x.uid, b.leaf_ids | x.leaf_ids,
             lambda env, M: _weight(M, x.value_in(env, M), b.value_in(env, M))),
        ]
        nodes = []
        for name, read, domain, leaves, ref in specs:
            nodes.append(self._add(Node(next(self.uids), "cache", f"m{i}.{name}", read=read, ref=ref,
                                        domain=domain, leaf_ids=leaves, model=m, depth=1)))
        prof, norm, weight = nodes
        nodes.append(self._add(Node(
            next(self.uids), "cache", f"m{i}.total", read=lambda: m.total(x.obj, k), domain=x.uid,
            leaf_ids=leaves_ab | x.leaf_ids, model=m, depth=2,
            ref=lambda env, M: _total(M, prof.value_in(env, M), norm.value_in(env, M),
                                      weight.value_in(env, M)),
        )))
        return nodes

    # -- mutations (the only places that change self.values) -----------------------------
    def setter(self, p):
        """A traced function that sets ``p`` inside the graph from a tensor argument."""
        if p.uid not in self._setters:
            def body(v):
                p.obj.set_value(v)
                return p.obj.value()

            self._setters[p.uid] = Traced(self, zcache.function(body, wraps="tensor"))
        return self._setters[p.uid]

    def set_value(self, p, v, how="eager"):
        if how == "eager":
            p.obj.set_value(v)
        elif how == "graph":
            out = self.setter(p)(tf.constant(v, tf.float64))
            assert float(out) == float(v)
        elif how == "set_values":
            zcache.set_values([p.obj], [v])
        else:  # pragma: no cover
            raise AssertionError(how)
        self.values[p.uid] = float(v)

    def data_setter(self, x):
        """A traced function that replaces ``x`` inside the graph from a tensor argument."""
        if x.uid not in self._setters:
            def body(t):
                x.obj.set_data(t)
                return x.obj.nevents

            self._setters[x.uid] = Traced(self, zcache.function(body, wraps="tensor"))
        return self._setters[x.uid]

    def set_data(self, x, array, how="eager"):
        if how == "graph":  # always GRAPH_EVENTS events: another shape would be another trace
            assert int(self.data_setter(x)(tf.constant(array, tf.float64))) == len(array)
        else:
            x.obj.set_data(array)
        self.values[x.uid] = np.array(array, dtype=np.float64)
        x.label = f"x{x.uid}[{len(array)}]"

    def invalidate(self, c):
        if c.model is not None:
            c.model.invalidate_caches()
        else:
            c.obj.invalidate()

    def invalidate_all(self):
        for c in self.caches:
            self.invalidate(c)

    def clear_graph_cache(self):
        # Scoped to this world: every graph that reads its inputs, every cache below them. Clearing the
        # whole process also wiped the FitMachine's compiled programs in `make stress` (issue 51).
        zcache.clear_graph_cache(depending_on=[n.obj for n in self.params + self.data + self.guards])
        self.epoch += 1

    # -- observations ------------------------------------------------------------------
    def my_caches(self):
        """Every CachedTensor downstream of this world's inputs (including @cached ones)."""
        graph = zcache.dependency_graph()
        for _ in range(5):  # the graph may shrink under us when the GC drops old objects
            try:
                ids = set()
                for n in self.params + self.data + self.guards:
                    ids |= nx.descendants(graph, n.obj.node_id)
                out = {}
                for uid in ids:
                    attrs = graph.nodes[uid]
                    obj = attrs["ref"]() if attrs["kind"] == "cache" else None
                    if obj is not None:
                        out[uid] = obj
                return out
            except (RuntimeError, KeyError):
                continue
        raise AssertionError("could not read the dependency graph")

    def validity(self):
        return {uid: (c.is_valid, c.state.evictions) for uid, c in self.my_caches().items()}

    def validity_changed(self, before):
        """Caches whose validity differs from ``before`` (caches collected since are skipped: a
        dropped temporary model may be garbage-collected at any allocation; so are caches the
        cache memory budget evicted since: an eviction may clear a flag after any call)."""
        after = self.validity()
        assert after.keys() <= before.keys(), "new caches appeared"
        return {uid for uid in after if after[uid][0] != before[uid][0] and after[uid][1] == before[uid][1]}

    def assert_validity_kept(self, before, p, how):
        """After setting ``p`` to its current value, no cache may have been invalidated."""
        assert not self.validity_changed(before), f"setting {p} to its current value ({how}) invalidated caches"

    def assert_inputs_unchanged(self):
        for p in self.params + self.guards:
            assert float(p.obj.numpy()) == self.values[p.uid], f"{p} changed"
        for x in self.data:
            np.testing.assert_array_equal(x.obj.numpy(), self.values[x.uid], err_msg=f"{x} changed")

    def check_graph(self):
        graph = zcache.dependency_graph()
        assert nx.is_directed_acyclic_graph(graph)
        for c in self.caches:
            if c.obj is not None:
                missing = c.leaf_ids - nx.ancestors(graph, c.obj.node_id)
                assert not missing, f"{c}: inputs {missing} are not ancestors in the dependency graph"

    # -- the reference -----------------------------------------------------------------
    def _env(self, overrides=None):
        env = dict(self.values)
        env.update(overrides or {})
        return env

    def reference_values(self):
        env = self._env()
        return [np.asarray(c.value_in(env, NP), dtype=np.float64) for c in self.caches]

    def reference_gradient(self, overrides=None):
        if overrides is None:
            # The invariant asks after every step; many steps change no value, cache or parameter (modes,
            # budgets, invalidations), so the reference is kept per state (issue 51: a sixth of the invariants).
            key = self._state()
            if self._reference[0] != key:
                self._reference = (key, self._reference_gradient())
            return self._reference[1].copy()
        return self._reference_gradient(overrides)

    def _state(self):
        """What the reference depends on: the caches, the parameters and every value this file set (exact bits)."""
        return (tuple(c.uid for c in self.caches), tuple(p.uid for p in self.params),
                tuple((uid, np.asarray(v, np.float64).tobytes()) for uid, v in sorted(self.values.items())))

    def _reference_gradient(self, overrides=None):
        consts = {uid: tf.constant(v, tf.float64) for uid, v in self._env(overrides).items()}
        watched = [consts[p.uid] for p in self.params]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            total = _sum_all([c.value_in(consts, TF) for c in self.caches])
        return _grads(tape.gradient(total, watched), watched).numpy()

    def reference_numerical(self):
        """zcache's documented finite differences, taken on the reference model.

        Returns the gradient and, per parameter, the absolute rounding tolerance.
        """
        def total(over):
            env = self._env(over)
            vals = [np.asarray(c.value_in(env, NP)) for c in self.caches]
            return float(sum(np.sum(v) for v in vals)), float(sum(np.sum(np.abs(v)) for v in vals))

        grads, tols = [], []
        for p in self.params:
            x0 = self.values[p.uid]
            h = _REL_STEP * max(abs(x0), 1.0)
            up = x0 + h if p.obj.upper is None else min(x0 + h, p.obj.upper)
            down = x0 - h if p.obj.lower is None else max(x0 - h, p.obj.lower)
            (f_up, a_up), (f_down, a_down) = total({p.uid: up}), total({p.uid: down})
            grads.append((f_up - f_down) / (up - down))
            tols.append(1e-11 * (1.0 + a_up + a_down) / (up - down))
        return np.array(grads), np.array(tols)

    def reference_hessian_differences(self):
        """zcache.hessian's documented rule on the reference: differences of exact gradients,
        the steps clipped into the limits (one-sided there). Returns it and a rounding tolerance."""
        rows, tol = [], 0.0
        for p in self.params:
            x0 = self.values[p.uid]
            h = _REL_STEP * max(abs(x0), 1.0)
            up = x0 + h if p.obj.upper is None else min(x0 + h, p.obj.upper)
            down = x0 - h if p.obj.lower is None else max(x0 - h, p.obj.lower)
            g_up, g_down = self.reference_gradient({p.uid: up}), self.reference_gradient({p.uid: down})
            rows.append((g_up - g_down) / (up - down))
            tol = max(tol, 1e-10 * (1.0 + float(np.max(np.abs(g_up), initial=0.0))) / (up - down))
        hess = np.array(rows).reshape(len(self.params), len(self.params))
        return 0.5 * (hess + hess.T), tol

    def reference_hessian(self, nonlinear=False):
        """The Hessian of the sum of all caches (``nonlinear``: of :func:`_log_sum`) w.r.t. ``params``:
        nested tapes on constants."""
        consts = {uid: tf.constant(v, tf.float64) for uid, v in self.values.items()}
        watched = [consts[p.uid] for p in self.params]
        combine = _log_sum if nonlinear else _sum_all
        with tf.GradientTape(persistent=True) as outer:
            outer.watch(watched)
            with tf.GradientTape() as inner:
                inner.watch(watched)
                total = combine([c.value_in(dict(consts), TF) for c in self.caches])
            g = _grads(inner.gradient(total, watched), watched)
            rows = [g[i] for i in range(len(watched))]
        return np.array([_grads(outer.gradient(r, watched), watched).numpy() for r in rows]).reshape(
            len(watched), len(watched))

    # -- reading through zcache and comparing ------------------------------------------
    def _key(self, *extra):
        return (*extra, tuple(c.uid for c in self.caches), tuple(p.uid for p in self.params))

    def plain_reader(self, autograph, gradients):
        """A plain ``tf.function`` (not zcache.function) reading every cache, with a tape inside."""
        key = self._key("plain", autograph, gradients)
        if key not in self._checkers:
            caches, params = list(self.caches), list(self.params)
            variables = [p.obj.variable for p in params]

            def body():
                if not gradients:
                    return [c.read() for c in caches], tf.zeros([0], tf.float64)
                with tf.GradientTape(watch_accessed_variables=False) as tape:
                    tape.watch(variables)
                    values = [c.read() for c in caches]
                    total = _sum_all(values)
                return values, _grads(tape.gradient(total, variables), variables)

            self._checkers[key] = PlainTraced(body, autograph)
        return self._checkers[key]

    def plain_control_flow_reader(self, kind):
        """A plain ``tf.function`` whose tape reads every cache inside a ``tf.cond`` branch (once, or
        twice in the other branch), a ``tf.while_loop`` body (twice) or a ``tf.vectorized_map`` (twice)."""
        key = self._key("control flow", kind)
        if key not in self._checkers:
            caches, params = list(self.caches), list(self.params)
            variables = [p.obj.variable for p in params]

            def total():
                return _sum_all([c.read() for c in caches])

            def body(flag):
                with tf.GradientTape(watch_accessed_variables=False) as tape:
                    tape.watch(variables)
                    if kind == "cond":
                        y = tf.cond(flag, total, lambda: 2.0 * total())
                    elif kind == "vectorized_map":
                        y = tf.reduce_sum(tf.vectorized_map(lambda s: s * total(), tf.ones([2], tf.float64)))
                    else:
                        y = tf.while_loop(lambda i, acc: i < 2, lambda i, acc: (i + 1, acc + total()),
                                          (tf.constant(0), tf.constant(0.0, tf.float64)))[1]
                return y, _grads(tape.gradient(y, variables), variables)

            self._checkers[key] = PlainTraced(body, autograph=False)
        return self._checkers[key]

    def plain_jacobian_hessian(self, pfor):
        """A plain ``tf.function`` taking a user's Hessian of :func:`_log_sum` of every cache: nested tapes,
        the outer one's ``jacobian`` (vectorized with pfor, or a while loop)."""
        key = self._key("jacobian", pfor)
        if key not in self._checkers:
            caches, params = list(self.caches), list(self.params)
            variables = [p.obj.variable for p in params]

            def body():
                with tf.GradientTape(persistent=not pfor, watch_accessed_variables=False) as outer:
                    outer.watch(variables)
                    with tf.GradientTape(watch_accessed_variables=False) as inner:
                        inner.watch(variables)
                        y = _log_sum([c.read() for c in caches])
                    g = _grads(inner.gradient(y, variables), variables)
                rows = outer.jacobian(g, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO,
                                      experimental_use_pfor=pfor)
                return tf.stack([tf.cast(r, tf.float64) for r in rows], axis=1)

            self._checkers[key] = PlainTraced(body, autograph=False)
        return self._checkers[key]

    def tape_across_set_value(self, p, nested):
        """``body(v)``: read every cache under a persistent tape (two nested ones if ``nested``),
        then ``p.set_value(v)``, then take the gradient (and the Hessian) of what was read."""
        caches, params = list(self.caches), list(self.params)

        def body(v):
            variables = [q.obj.variable for q in params]
            with (tf.GradientTape(persistent=True, watch_accessed_variables=False) if nested
                  else contextlib.nullcontext()) as outer:
                if nested:
                    outer.watch(variables)
                with tf.GradientTape(persistent=True, watch_accessed_variables=False) as inner:
                    inner.watch(variables)
                    values = [c.read() for c in caches]
                    total = _sum_all(values)
                p.obj.set_value(v)
                g = _grads(inner.gradient(total, variables), variables)
                rows = [g[i] for i in range(len(variables))] if nested else []
            if not nested:
                return values, g, tf.zeros([0, 0], tf.float64)
            return values, g, tf.stack([_grads(outer.gradient(r, variables), variables) for r in rows])

        return body

    def traced_tape_across_set_value(self, p, nested):
        """The same inside a zcache.function: the set_value is in the graph, between the tapes."""
        key = self._key("across", p.uid, nested)
        if key not in self._checkers:
            self._checkers[key] = Traced(self, zcache.function(self.tape_across_set_value(p, nested),
                                                               wraps="gradient"))
        return self._checkers[key]

    def failing_reader(self, c, how):
        """A traced function reading ``c`` (a zcache.function or a plain tf.function)."""
        key = ("failing", c.uid, how)
        if key not in self._checkers:
            if how == "plain":
                self._checkers[key] = PlainTraced(lambda: c.read(), autograph=True)
            else:
                self._checkers[key] = Traced(self, zcache.function(lambda: c.read(), wraps="tensor"))
        return self._checkers[key]

    def failing_setter(self, c, g, p):
        """A zcache.function that sets ``p`` (a regular parameter, or None) and the guard ``g`` in
        its graph, then reads ``c``: with a bad guard value the read fails after the writes."""
        key = ("failing setter", c.uid, g.uid, None if p is None else p.uid)
        if key not in self._checkers:
            def body(vg, vp):
                if p is not None:
                    p.obj.set_value(vp)
                g.obj.set_value(vg)
                return c.read()

            self._checkers[key] = Traced(self, zcache.function(body, wraps="tensor"))
        return self._checkers[key]

    def _checker(self, gradients):
        """One traced function reading every cache (rebuilt when caches or parameters are added)."""
        caches, params = list(self.caches), list(self.params)
        # without gradients the body reads no parameter: a new parameter is no reason to trace again
        key = (gradients, tuple(c.uid for c in caches), tuple(p.uid for p in params) if gradients else ())
        if key not in self._checkers:
            variables = [p.obj.variable for p in params]
            objs = [p.obj for p in params]
            mode = {}

            def body():
                if not gradients:
                    return [c.read() for c in caches], None, None
                # zcache.gradient first (a miss where the caches are stale), then the tape (hits)
                g_z = zcache.gradient(lambda: _sum_all([c.read() for c in caches]), objs)
                if tf.inside_function():
                    # zcache.gradient reads the autograd mode when traced: the graph keeps it;
                    # remember which one this trace baked in (read_traced checks it).
                    mode["traced"] = zcache.get_autograd_mode()
                with tf.GradientTape(watch_accessed_variables=False) as tape:
                    tape.watch(variables)
                    values = [c.read() for c in caches]
                    total = _sum_all(values)
                return values, _grads(tape.gradient(total, variables), variables), g_z

            fn = Traced(self, zcache.function(body, wraps="gradient"))
            self._checkers[key] = (fn, mode)
        return self._checkers[key]

    def read_traced(self, gradients=True):
        fn, mode = self._checker(gradients)
        traces = fn.fn.trace_count
        values, g_tape, g_z = fn()
        # A zcache.function keeps one graph per autograd mode, so the gradient follows the
        # current mode (found by make stress: checking the mode of the last trace compared a
        # numerical gradient with the exact one after traces in both modes).
        autograd = zcache.get_autograd_mode()
        if gradients and fn.fn.traced and fn.fn.trace_count > traces:
            assert mode["traced"] == autograd, "the graph traced for one autograd mode ran under the other"
        return values, g_tape, g_z, autograd

    def read_eager(self, gradients=True, zgrad_first=False):
        params = self.params
        variables = [p.obj.variable for p in params]
        g_z = None
        if gradients and zgrad_first:
            g_z = zcache.gradient(lambda: _sum_all([c.read() for c in self.caches]), [p.obj for p in params])
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            values = [c.read() for c in self.caches]
            total = _sum_all(values)
        g_tape = _grads(tape.gradient(total, variables), variables) if gradients else None
        if gradients and not zgrad_first:
            g_z = zcache.gradient(lambda: _sum_all([c.read() for c in self.caches]), [p.obj for p in params])
        return values, g_tape, g_z, zcache.get_autograd_mode()

    def check(self, traced, gradients=True, zgrad_first=False):
        """Read every cache through zcache and compare with the reference."""
        if not self.caches:
            return
        if traced:
            values, g_tape, g_z, autograd = self.read_traced(gradients)
        else:
            values, g_tape, g_z, autograd = self.read_eager(gradients, zgrad_first)
        self.assert_values(values, "traced" if traced else "eager")
        if gradients:
            exact = self.reference_gradient()
            self.assert_gradient(g_tape, exact, "tf.GradientTape on p.variable", traced)
            if autograd:
                self.assert_gradient(g_z, exact, "zcache.gradient", traced)
            else:
                numerical, tol = self.reference_numerical()
                np.testing.assert_allclose(
                    _to_np(g_z), numerical, rtol=1e-9, atol=float(np.max(tol)),
                    err_msg=f"numerical zcache.gradient ({'traced' if traced else 'eager'}) differs from "
                            f"the same finite differences on the reference; params {self.params}",
                )
        self.check_graph()

    def assert_values(self, values, how):
        expected = self.reference_values()
        assert len(values) == len(expected)
        for c, v, e in zip(self.caches, values, expected):
            v = _to_np(v)
            assert v.shape == e.shape, f"{c} ({how}): shape {v.shape}, expected {e.shape}"
            np.testing.assert_allclose(v, e, rtol=1e-12, atol=1e-12,
                                       err_msg=f"{c} ({how}) is stale: it differs from its function")

    def assert_gradient(self, actual, expected, what, traced):
        scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
        # 1e-9: sums over events in another order (a cached part read, not recomputed) differ by
        # round-off; the stress run saw 3.4e-10 once in 3,353 sequences. A stale value is O(1) off.
        np.testing.assert_allclose(
            _to_np(actual), expected, rtol=1e-9, atol=1e-9 * scale,
            err_msg=f"{what} ({'traced' if traced else 'eager'}) differs from the uncached gradient; "
                    f"params {self.params}",
        )


# == strategies ============================================================================
FLOATS = dict(allow_nan=False, allow_infinity=False, allow_subnormal=False)
VALUES = st.floats(-2.0, 2.0, **FLOATS)
LIMITS = st.tuples(st.none() | st.floats(-3.0, -2.0, **FLOATS), st.none() | st.floats(2.0, 3.0, **FLOATS))
ARRAYS = hnp.arrays(np.float64, st.integers(1, 50), elements=st.floats(-2.0, 2.0, **FLOATS))
GRAPH_EVENTS = 5
GRAPH_ARRAYS = hnp.arrays(np.float64, GRAPH_EVENTS, elements=st.floats(-2.0, 2.0, **FLOATS))
INDEX = st.integers(0, 1000)
MAX_DEPTH = 3


def valid_values(p):
    lo = -3.0 if p.obj.lower is None else p.obj.lower
    hi = 3.0 if p.obj.upper is None else p.obj.upper
    return st.floats(lo, hi, **FLOATS)


@st.composite
def recipes(draw, max_caches=4, max_depth=MAX_DEPTH, limits=True, models=True):
    """Instructions for World.build: parameters, data, maybe a model, then caches over them.

    Caches nest at most ``max_depth`` deep: tracing a cache traces its dependencies again
    inside its tf.cond branch (and its gradient again in the backward pass), so trace
    time grows quickly with the nesting depth.
    """
    n_p, n_d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    steps = [("param", draw(VALUES), *(draw(LIMITS) if limits else (None, None))) for _ in range(n_p)]
    steps += [("data", draw(ARRAYS)) for _ in range(n_d)]
    depths = [0] * (n_p + n_d)
    if models and max_depth >= 2 and draw(st.booleans()):
        steps.append(("model", draw(st.integers(0, n_p - 1)), draw(st.integers(0, n_p - 1)),
                      draw(st.integers(n_p, n_p + n_d - 1)), draw(st.integers(1, 3))))
        depths += [1, 1, 1, 2]
    for _ in range(draw(st.integers(1, max_caches))):
        allowed = [i for i, d in enumerate(depths) if d < max_depth]
        deps = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=3, unique=True))
        nested = [i for i in allowed if depths[i] > 0]
        if nested and draw(st.booleans()):  # favour caches of caches: read the newest allowed cache
            deps = [nested[-1]] + [i for i in deps if i != nested[-1]][:2]
        steps.append(("cache", tuple(deps), draw(templates(len(deps))), draw(st.booleans())))
        depths.append(1 + max(depths[i] for i in deps))
    return steps


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("set_value"), INDEX, VALUES, st.sampled_from(["eager", "graph", "set_values"])),
        st.tuples(st.just("same_value"), INDEX, st.sampled_from(["eager", "graph"])),
        st.tuples(st.just("set_data"), INDEX, ARRAYS),
        st.tuples(st.just("set_data_graph"), INDEX, GRAPH_ARRAYS),
        st.tuples(st.just("invalidate"), INDEX),
        st.tuples(st.just("read"), st.sampled_from(["eager", "traced"])),
    ),
    min_size=1,
    max_size=12,
)


def apply_operation(w, op):
    """Apply one operation of OPERATIONS; True if it was a read."""
    kind = op[0]
    if kind == "set_value":
        w.set_value(w.params[op[1] % len(w.params)], op[2], op[3])
    elif kind == "same_value":
        p = w.params[op[1] % len(w.params)]
        before = w.validity()
        w.set_value(p, w.values[p.uid], op[2])
        w.assert_validity_kept(before, p, op[2])
    elif kind in ("set_data", "set_data_graph"):
        w.set_data(w.data[op[1] % len(w.data)], op[2], "graph" if kind == "set_data_graph" else "eager")
    elif kind == "invalidate":
        w.invalidate(w.caches[op[1] % len(w.caches)])
    else:
        return True
    return False


# == 1. never stale ========================================================================
@given(recipe=recipes(), ops=OPERATIONS, pretrace_setters=st.booleans())
def test_never_stale(recipe, ops, pretrace_setters):
    w = World.build(recipe, pretrace_setters)
    for op in ops:
        note(f"op {op[:2]}")
        if apply_operation(w, op):
            w.check(traced=op[1] == "traced", gradients=False)
    w.check(traced=False, gradients=False)
    w.check(traced=True, gradients=False)


@given(recipe=recipes(), changes=st.lists(st.tuples(INDEX, VALUES, st.booleans()), min_size=1, max_size=4))
def test_setters_traced_before_the_caches_still_invalidate_them(recipe, changes):
    """An in-graph setter traced before a cache existed must invalidate it on a change, and only then."""
    w = World.build(recipe, pretrace_setters=True)
    w.check(traced=False, gradients=False)
    for i, v, same in changes:
        p = w.params[i % len(w.params)]
        before = w.validity()
        w.set_value(p, w.values[p.uid] if same else v, "graph")
        if same:
            w.assert_validity_kept(before, p, "graph")
        w.check(traced=False, gradients=False)


def test_same_value_in_graph_keeps_caches_created_after_the_trace():
    """Regression (found by test_never_stale): a traced setter invalidated caches created after its trace."""
    p = zcache.Parameter("p_same", 1.0)

    @zcache.function
    def setter(v):
        p.set_value(v)
        return p.value()

    setter(tf.constant(1.0, tf.float64))  # traced before the cache exists
    cache = zcache.CachedTensor(lambda: tf.sin(p.value()), name="c_same")
    cache.value()
    setter(tf.constant(1.0, tf.float64))  # the current value again
    assert cache.is_valid


# == 2. exact gradients ====================================================================
@pytest.mark.slow  # about 7 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
@_examples(0.6)
@given(recipe=recipes(max_caches=2, max_depth=2, limits=False), zgrad_first=st.booleans())
def test_gradients_exact_on_hit_and_miss(recipe, zgrad_first):
    w = World.build(recipe)
    w.invalidate_all()
    w.check(traced=False, zgrad_first=zgrad_first)  # eager: misses
    w.check(traced=False, zgrad_first=not zgrad_first)  # eager: hits
    w.invalidate_all()
    w.check(traced=True)  # traced: zcache.gradient on misses, then the tape on hits
    w.check(traced=True)  # traced: all hits
    with zcache.set_autograd_mode(False):  # zcache's own central differences
        w.invalidate_all()
        w.check(traced=False)
        w.check(traced=False)

    # numdifftools on a numpy wrapper that sets the values and evaluates (traced, no retrace)
    params = [p.obj for p in w.params]
    x0 = np.array([w.values[p.uid] for p in w.params])
    fn, _ = w._checker(False)

    def loss(xs):
        for p, v in zip(params, np.atleast_1d(xs)):
            p.set_value(float(v))
        return float(sum(np.sum(_to_np(v)) for v in fn()[0]))

    try:
        step = nd.MaxStepGenerator(base_step=1e-2, num_steps=4)  # Richardson-extrapolated, ~8 calls per parameter
        numeric = np.atleast_1d(nd.Gradient(loss, step=step)(x0))
    finally:
        for p, v in zip(params, x0):
            p.set_value(float(v))
    exact = w.reference_gradient()
    scale = max(1.0, float(np.max(np.abs(exact))))
    np.testing.assert_allclose(numeric, exact, rtol=1e-6, atol=1e-6 * scale,
                               err_msg="numdifftools disagrees with the exact gradient")
    w.check(traced=True)


# == 3. no retrace =========================================================================
CHANGES = st.lists(
    st.one_of(
        st.tuples(st.just("set_value"), INDEX, VALUES, st.sampled_from(["eager", "graph", "set_values"])),
        st.tuples(st.just("same_value"), INDEX, st.sampled_from(["eager", "graph"])),
        st.tuples(st.just("set_data"), INDEX, ARRAYS),
        st.tuples(st.just("set_data_graph"), INDEX, GRAPH_ARRAYS),
        st.tuples(st.just("with_value"), INDEX, VALUES),
        st.tuples(st.just("with_data"), INDEX, ARRAYS),
    ),
    min_size=1,
    max_size=8,
)


@pytest.mark.slow  # about 6 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
@_examples(0.6)
@given(recipe=recipes(max_caches=3, max_depth=2, models=False), changes=CHANGES)
def test_changing_values_and_data_never_retraces(recipe, changes):
    w = World.build(recipe)
    w.check(traced=True)  # traces once (Traced asserts trace_count after every call)
    for change in changes:
        note(f"change {change[:2]}")
        if change[0] == "with_value":
            p = w.params[change[1] % len(w.params)]
            old = w.values[p.uid]
            with p.obj.set_value(change[2]):
                w.values[p.uid] = change[2]
                w.check(traced=True)
            w.values[p.uid] = old
        elif change[0] == "with_data":
            x = w.data[change[1] % len(w.data)]
            old = w.values[x.uid]
            with x.obj.set_data(change[2]):
                w.values[x.uid] = change[2]
                w.check(traced=True)
            w.values[x.uid] = old
        else:
            apply_operation(w, change)
        w.check(traced=True)
    for fn, _ in w._checkers.values():
        assert fn.fn.trace_count == 1
    for setter in w._setters.values():
        assert setter.fn.trace_count == 1


# == 5. bad input leaves the state unchanged ===============================================
BAD_VALUES = st.sampled_from(["nan", "inf", "-inf", "below", "just_below", "above", "just_above", "vector"])


def bad_value(p, kind):
    lower, upper = p.obj.lower, p.obj.upper
    if kind in ("below", "just_below") and lower is not None:
        return lower - 1.0 if kind == "below" else float(np.nextafter(lower, -np.inf))
    if kind in ("above", "just_above") and upper is not None:
        return upper + 1.0 if kind == "above" else float(np.nextafter(upper, np.inf))
    if kind == "vector":
        return [0.0, 1.0]
    return {"inf": np.inf, "-inf": -np.inf}.get(kind, np.nan)


def prepare_validity(w, invalidate):
    """Fill every cache, then invalidate some: a random pattern of valid and stale caches."""
    w.check(traced=False, gradients=False)
    for i in invalidate:
        w.invalidate(w.caches[i % len(w.caches)])


@given(recipe=recipes(max_caches=3), pick=INDEX, kind=BAD_VALUES, invalidate=st.lists(INDEX, max_size=3),
       how=st.sampled_from(["eager", "graph", "set_values", "set_values_pair"]))
def test_bad_parameter_value_leaves_state_unchanged(recipe, pick, kind, invalidate, how):
    w = World.build(recipe)
    p = w.params[pick % len(w.params)]
    bad = bad_value(p, kind)
    if how == "graph" and kind == "vector":
        how = "eager"  # a vector argument would be a different trace signature, not a value
    # set_values converts its list with numpy first: a ragged list raises numpy's ValueError
    # (ParameterValueError is a ValueError too); the state must be unchanged all the same.
    error = ValueError if (how == "set_values_pair" and kind == "vector") else ParameterValueError
    prepare_validity(w, invalidate)
    valid = w.validity()
    with pytest.raises(error):
        if how == "eager":
            p.obj.set_value(bad)
        elif how == "graph":
            w.setter(p)(tf.constant(bad, tf.float64))
        elif how == "set_values":
            zcache.set_values([p.obj], [bad])
        else:  # one good and one bad value: neither is written
            others = [q for q in w.params if q is not p]
            if others:
                zcache.set_values([others[0].obj, p.obj], [0.5 * w.values[others[0].uid] + 0.1, bad])
            else:
                zcache.set_values([p.obj], [bad])
    w.assert_inputs_unchanged()
    assert w.validity() == valid, "a refused value changed the validity of caches"
    w.check(traced=False, gradients=False)
    if how == "graph":
        w.set_value(p, w.values[p.uid] * 0.5, "graph")  # the same setter still works afterwards
        w.check(traced=False, gradients=False)


BAD_DATA = {
    "rank2": (lambda n: np.zeros((n, 2)), DataShapeError),
    "scalar": (lambda n: np.float64(1.0), DataShapeError),
    "empty": (lambda n: np.zeros(0), EmptyDataError),
    "nan": (lambda n: np.where(np.arange(n) == n // 2, np.nan, 1.0), InvalidDataError),
    "inf": (lambda n: np.where(np.arange(n) == 0, -np.inf, 1.0), InvalidDataError),
    "complex": (lambda n: np.ones(n) * (1 + 1j), DataDtypeError),
    "string": (lambda n: np.array(["a"] * n), DataDtypeError),
}


@given(recipe=recipes(max_caches=3), pick=INDEX, kind=st.sampled_from(sorted(BAD_DATA)),
       size=st.integers(1, 50), invalidate=st.lists(INDEX, max_size=3))
def test_bad_data_leaves_state_unchanged(recipe, pick, kind, size, invalidate):
    w = World.build(recipe)
    x = w.data[pick % len(w.data)]
    make, error = BAD_DATA[kind]
    prepare_validity(w, invalidate)
    valid = w.validity()
    with pytest.raises(error) as raised:
        x.obj.set_data(make(size))
    assert isinstance(raised.value, DataError)
    w.assert_inputs_unchanged()
    assert w.validity() == valid, "refused data changed the validity of caches"
    w.check(traced=False, gradients=False)


BAD_TENSORS = {  # set_data inside a traced function, from a tensor argument
    "nan": (lambda: tf.constant([1.0, np.nan, 2.0], tf.float64), InvalidDataError),
    "inf": (lambda: tf.constant([np.inf], tf.float64), InvalidDataError),
    "empty": (lambda: tf.zeros([0], tf.float64), EmptyDataError),
    "rank2": (lambda: tf.zeros([3, 2], tf.float64), DataShapeError),
    "complex": (lambda: tf.constant([1 + 1j], tf.complex128), DataDtypeError),
}


@given(recipe=recipes(max_caches=3), pick=INDEX, kind=st.sampled_from(sorted(BAD_TENSORS)),
       invalidate=st.lists(INDEX, max_size=3))
def test_bad_data_in_graph_leaves_state_unchanged(recipe, pick, kind, invalidate):
    w = World.build(recipe)
    x = w.data[pick % len(w.data)]
    make, error = BAD_TENSORS[kind]

    @zcache.function
    def set_in_graph(t):
        x.obj.set_data(t)
        return x.obj.nevents

    prepare_validity(w, invalidate)
    valid = w.validity()
    with pytest.raises(error) as raised:
        set_in_graph(make())
    assert isinstance(raised.value, DataError)
    w.assert_inputs_unchanged()
    assert w.validity() == valid, "refused data changed the validity of caches"
    w.check(traced=False, gradients=False)


def test_empty_data_in_graph_raises_empty_data_error():
    """Regression: traced, an empty tensor raised InvalidDataError (eagerly: EmptyDataError)."""
    x = zcache.Data(np.array([1.0, 2.0]), name="x_empty")

    @zcache.function
    def set_in_graph(t):
        x.set_data(t)
        return x.nevents

    with pytest.raises(EmptyDataError):
        x.set_data(np.zeros(0))
    with pytest.raises(EmptyDataError):
        set_in_graph(tf.zeros([0], tf.float64))


# == 4. the state machine ==================================================================
GRAPH_MODES = st.sampled_from([True, False, "auto", {"gradient": False}, {"tensor": False}])
MAX_CACHES = 5
MACHINE_DEPTH = 2  # see recipes(): traced gradients of deeper nests are slow to trace


def _indices(n, most):
    """1 to ``most`` distinct indices below ``n``. (Drawing the objects with sampled_from would
    let hypothesis's strategy cache keep up to 1024 finished worlds alive in a long stress run.)"""
    return st.lists(st.integers(0, n - 1), min_size=1, max_size=most, unique=True)


class CacheMachine(RuleBasedStateMachine):
    """Random programs over the public API, checked against the reference after every step."""

    params = Bundle("params")
    data = Bundle("data")
    caches = Bundle("caches")

    def __init__(self):
        super().__init__()
        self.world = World()
        self.check_traced = False
        self.steps = 0
        self.dropped = []  # (weak references, node ids) of temporary models
        self.thread_runs = 0
        self._restore_modes = save_modes()

    def teardown(self):
        self._restore_modes()
        zcache.set_cache_budget(None)
        if self.dropped:
            # Collected only where one is still alive, the young generations first (a full pass over a worker's
            # heap costs about a second): since issue 51 a dropped zcache.function no longer holds its body (and
            # so the model) in a reference cycle, and the models are mostly freed when the rule returns
            for generation in (1, 2):
                if any(r() is not None for refs, _ in self.dropped for r in refs):
                    gc.collect(generation)
            g = zcache.dependency_graph()
            for refs, nodes in self.dropped:
                assert all(r() is None for r in refs), "a dropped temporary model is still alive"
                assert not any(n in g for n in nodes), "a dropped temporary model left nodes in the graph"

    # -- inputs --------------------------------------------------------------------------
    @initialize(target=params, value=VALUES, limits=LIMITS)
    def first_param(self, value, limits):
        p = self.world.add_param(value, *limits)
        self.world.set_value(p, value, "graph")  # trace an in-graph setter before any cache exists
        return p

    @initialize(target=data, array=ARRAYS)
    def first_data(self, array):
        return self.world.add_data(array)

    @precondition(lambda self: len(self.world.params) < 4)
    @rule(target=params, value=VALUES, limits=LIMITS)
    def add_param(self, value, limits):
        return self.world.add_param(value, *limits)

    @precondition(lambda self: len(self.world.data) < 3)
    @rule(target=data, array=ARRAYS)
    def add_data(self, array):
        return self.world.add_data(array)

    # -- caches --------------------------------------------------------------------------
    @precondition(lambda self: len(self.world.caches) < MAX_CACHES)
    @rule(target=caches, data=st.data(), declared=st.booleans(), via_variable=st.booleans())
    def add_cache(self, data, declared, via_variable):
        """A cache over 1-3 dependencies; ``via_variable``: it reads parameters as ``p.variable``."""
        nodes = [n for n in self.world.nodes if n.depth < MACHINE_DEPTH]
        deps = [nodes[i] for i in data.draw(_indices(len(nodes), 3), label="deps")]
        tpl = data.draw(templates(len(deps)), label="template")
        return self.world.add_cache(deps, tpl, declared, via_variable=via_variable)

    @precondition(lambda self: len(self.world.caches) < MAX_CACHES and len(self.world.guarded) < 2)
    @rule(target=caches, data=st.data(), declared=st.booleans(), kind=st.sampled_from(["assert", "python"]),
          g=st.floats(-1.0, 1.0, **FLOATS))
    def add_guarded_cache(self, data, declared, kind, g):
        """A cache whose function raises while its own guard parameter is >= GUARD_LIMIT."""
        nodes = [n for n in self.world.nodes if n.depth < MACHINE_DEPTH]
        deps = [nodes[i] for i in data.draw(_indices(len(nodes), 2), label="deps")]
        tpl = data.draw(templates(len(deps)), label="template")
        return self.world.add_cache(deps, tpl, declared, guard=(self.world.add_guard(g), kind))

    @precondition(lambda self: len(self.world.models) < 1 and len(self.world.caches) < MAX_CACHES)
    @rule(target=caches, a=params, b=params, x=data, k=st.integers(1, 3))
    def add_model(self, a, b, x, k):
        return multiple(*self.world.add_model(a, b, x, k))

    # -- mutations -----------------------------------------------------------------------
    @rule(p=params, data=st.data(), same=st.booleans(),
          how=st.sampled_from(["eager", "graph", "set_values", "with"]))
    def set_value(self, p, data, same, how):
        w = self.world
        old = w.values[p.uid]
        v = old if same else data.draw(valid_values(p), label="value")
        before = w.validity() if same else None
        if how == "with":
            with p.obj.set_value(v):
                w.values[p.uid] = v
                if same:
                    w.assert_validity_kept(before, p, how)
                w.check(traced=self.check_traced, gradients=False)
            w.values[p.uid] = old
        else:
            w.set_value(p, v, how)
            if same:
                w.assert_validity_kept(before, p, how)

    @rule(x=data, array=ARRAYS, how=st.sampled_from(["eager", "graph", "with"]))
    def set_data(self, x, array, how):
        w = self.world
        if how == "graph":
            w.set_data(x, array[:GRAPH_EVENTS].tolist() + [0.5] * (GRAPH_EVENTS - len(array)), "graph")
        elif how == "with":
            old = w.values[x.uid]
            with x.obj.set_data(array):
                w.values[x.uid] = np.array(array)
                w.check(traced=self.check_traced, gradients=False)
            w.values[x.uid] = old
        else:
            w.set_data(x, array)

    @rule(c=caches)
    def invalidate(self, c):
        self.world.invalidate(c)

    # Hypothesis draws the first rule in its order (no target, fewest arguments, then by name)
    # far more often than the others: that rule should be cheap. clear_graph_cache was first
    # (40 % of all steps, each forcing retraces); invalidate_all is first now.
    @rule()
    def invalidate_all(self):
        self.world.invalidate_all()

    @rule(fraction=st.sampled_from([None, 0.0, 0.5]))
    def shrink_budget(self, fraction):
        """Set the cache memory budget mid-sequence (None, 0, or half of what caches hold now).

        It stays for the steps that follow: evictions between calls must never leave a stale
        value or a wrong gradient (the invariants after every step).
        """
        held = zcache.cache_budget_info().held_bytes
        zcache.set_cache_budget(None if fraction is None else int(held * fraction))
        assert fraction is None or zcache.cache_budget_info().held_bytes <= int(held * fraction)

    @rule(read_first=st.booleans())
    def clear_graph_cache(self, read_first):
        if read_first:  # drop graphs whose caches are valid
            self.world.check(traced=True, gradients=False)
        self.world.clear_graph_cache()

    # -- bad input ---------------------------------------------------------------------
    @rule(p=params, kind=BAD_VALUES, how=st.sampled_from(["eager", "graph", "set_values"]))
    def bad_value(self, p, kind, how):
        w = self.world
        bad = bad_value(p, kind)
        if how == "graph" and kind == "vector":
            how = "eager"
        valid = w.validity()
        with pytest.raises(ParameterValueError):
            if how == "eager":
                p.obj.set_value(bad)
            elif how == "graph":
                w.setter(p)(tf.constant(bad, tf.float64))
            else:
                zcache.set_values([p.obj], [bad])
        w.assert_inputs_unchanged()
        assert not w.validity_changed(valid)

    @rule(x=data, kind=st.sampled_from(sorted(BAD_DATA)), size=st.integers(1, 50))
    def bad_data(self, x, kind, size):
        make, error = BAD_DATA[kind]
        valid = self.world.validity()
        with pytest.raises(error):
            x.obj.set_data(make(size))
        self.world.assert_inputs_unchanged()
        assert not self.world.validity_changed(valid)

    # -- modes ---------------------------------------------------------------------------
    @rule(mode=GRAPH_MODES)
    def set_graph_mode(self, mode):
        zcache.set_graph_mode(mode)
        assert zcache.get_graph_mode() == mode
        assert tf.config.functions_run_eagerly() is (mode is False)

    @rule(mode=GRAPH_MODES, traced=st.booleans())
    def graph_mode_block(self, mode, traced):
        before, backend = zcache.get_graph_mode(), tf.config.functions_run_eagerly()
        with zcache.set_graph_mode(mode):
            self.world.check(traced=traced)
        assert zcache.get_graph_mode() == before
        assert tf.config.functions_run_eagerly() is backend

    @rule(mode=st.booleans())
    def set_autograd_mode(self, mode):
        zcache.set_autograd_mode(mode)
        assert zcache.get_autograd_mode() is mode

    @rule(mode=st.booleans(), traced=st.booleans())
    def autograd_block(self, mode, traced):
        before = zcache.get_autograd_mode()
        with zcache.set_autograd_mode(mode):
            self.world.check(traced=traced)
        assert zcache.get_autograd_mode() is before

    @rule(mode=st.sampled_from([True, "auto", {"gradient": True}]), traced=st.booleans(), p=params,
          kind=BAD_VALUES)
    def jit_mode_block(self, mode, traced, p, kind):
        """Under XLA: exact values and gradients, and a refused in-graph write raises and changes nothing."""
        w = self.world
        before = zcache.get_jit_mode()
        with zcache.set_jit_mode(mode):
            w.check(traced=traced)
            if kind != "vector":
                valid = w.validity()
                with pytest.raises(ParameterValueError):
                    w.setter(p)(tf.constant(bad_value(p, kind), tf.float64))
                w.assert_inputs_unchanged()
                assert not w.validity_changed(valid)
                w.check(traced=traced)
        assert zcache.get_jit_mode() == before

    @rule(traced=st.booleans())
    def read_traced_or_eager(self, traced):
        """Choose how the invariant reads the caches: eagerly or inside a zcache.function."""
        self.check_traced = traced

    @rule(data=st.data())
    def set_several(self, data):
        """zcache.set_values on several parameters at once (what a minimizer does)."""
        w = self.world
        chosen = [w.params[i] for i in data.draw(_indices(len(w.params), len(w.params)), label="params")]
        values = [data.draw(valid_values(p), label=p.label) for p in chosen]
        zcache.set_values([p.obj for p in chosen], values)
        for p, v in zip(chosen, values):
            w.values[p.uid] = float(v)

    # -- gradients taken from outside and by finite differences ----------------------------
    @precondition(lambda self: self.world.caches)
    @rule()
    def outer_tape_gradient(self):
        """A tf.GradientTape outside the traced function that reads every cache."""
        w = self.world
        variables = [p.obj.variable for p in w.params]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            values = w.read_traced(gradients=False)[0]
            total = _sum_all(values)
        w.assert_values(values, "traced, under an outer tape")
        w.assert_gradient(_grads(tape.gradient(total, variables), variables), w.reference_gradient(),
                          "a tape outside the traced function", traced=True)

    @precondition(lambda self: self.world.caches)
    @rule(data=st.data())
    def finite_differences(self, data):
        """zcache.gradient equals 4-point central differences of zcache's own values (1e-6)."""
        w = self.world
        p = w.params[data.draw(st.integers(0, len(w.params) - 1), label="param")]
        x0 = w.values[p.uid]
        h = 1e-3 * max(1.0, abs(x0))
        if (p.obj.lower is not None and x0 - 2 * h < p.obj.lower) or (
                p.obj.upper is not None and x0 + 2 * h > p.obj.upper):
            return  # no symmetric stencil inside the limits

        def total(v):
            p.obj.set_value(v)
            return sum(float(np.sum(_to_np(c.read()))) for c in w.caches)

        try:
            f = {k: total(x0 + k * h) for k in (-2, -1, 1, 2)}
        finally:
            p.obj.set_value(x0)
        numeric = (f[-2] - 8.0 * f[-1] + 8.0 * f[1] - f[2]) / (12.0 * h)
        with zcache.set_autograd_mode(True):
            exact = float(zcache.gradient(lambda: _sum_all([c.read() for c in w.caches]), [p.obj])[0])
        scale = sum(abs(v) for v in f.values())
        np.testing.assert_allclose(exact, numeric, rtol=1e-6, atol=1e-9 * (1.0 + scale),
                                   err_msg=f"d/d{p} differs from finite differences")

    # -- plain tf.function (a trace zcache does not manage) ---------------------------------
    @precondition(lambda self: self.world.caches)
    @rule(autograph=st.booleans(), gradients=st.booleans())
    def plain_tf_function(self, autograph, gradients):
        """Caches read (and a tape's gradient taken) inside a plain tf.function: reference values
        and gradients, and one trace at most whatever values change (PlainTraced asserts it)."""
        w = self.world
        values, g_tape = w.plain_reader(autograph, gradients)()
        how = f"plain tf.function, autograph {'on' if autograph else 'off'}"
        w.assert_values(values, how)
        if gradients:
            w.assert_gradient(g_tape, w.reference_gradient(), f"a tape in a {how}", traced=True)

    @precondition(lambda self: self.world.caches and self.world.params)
    @rule(kind=st.sampled_from(["cond", "while", "vectorized_map"]), flag=st.booleans())
    def plain_control_flow_gradient(self, kind, flag):
        """A tape in a plain tf.function reads the caches inside the user's tf.cond, tf.while_loop or
        tf.vectorized_map: value and gradient are the reference's times the factor, hit or miss (a loop's
        gradient, and any read in a vectorized map, failed to build before issue 26)."""
        w = self.world
        y, g = w.plain_control_flow_reader(kind)(tf.constant(flag))
        factor = 1.0 if kind == "cond" and flag else 2.0
        expected = sum(float(np.sum(v)) for v in w.reference_values())
        np.testing.assert_allclose(float(y), factor * expected, rtol=1e-12, atol=1e-12 * (1.0 + abs(expected)),
                                   err_msg=f"caches read inside a user's {kind}")
        w.assert_gradient(g, factor * w.reference_gradient(), f"a tape through a user's {kind}", traced=True)

    @precondition(lambda self: self.world.caches and self.world.params)
    @rule(pfor=st.booleans())
    def plain_jacobian_hessian(self, pfor):
        """A user's Hessian (nested tapes, jacobian) of a function not linear in the caches, in a plain
        tf.function: the reference's (vectorized, it failed to build through valid caches before issue 26)."""
        w = self.world
        got = w.plain_jacobian_hessian(pfor)()
        hess = w.reference_hessian(nonlinear=True)
        scale = max(1.0, float(np.max(np.abs(hess), initial=0.0)))
        np.testing.assert_allclose(_to_np(got), hess, rtol=1e-8, atol=1e-8 * scale,
                                   err_msg=f"a user's jacobian Hessian ({'pfor' if pfor else 'while loop'}) "
                                           f"differs from the reference; params {w.params}")

    @precondition(lambda self: self.world.caches)
    @rule(autograph=st.booleans(), through_zcache=st.booleans())
    def plain_jit_compile(self, autograph, through_zcache):
        """Caches read inside a user's tf.function(jit_compile=True) (directly, or through a
        zcache.function called in it): XLA would drop their checks, so the trace raises
        UnmanagedTraceError and changes nothing."""
        w = self.world

        def read_all():
            return _sum_all([c.read() for c in w.caches])

        inner = zcache.function(read_all)
        fn = tf.function(inner if through_zcache else read_all, autograph=autograph, jit_compile=True)
        valid = w.validity()
        with pytest.raises(UnmanagedTraceError, match="set_jit_mode"):
            fn.get_concrete_function()
        w.assert_inputs_unchanged()
        assert not w.validity_changed(valid), "a refused read in a jit_compile tf.function changed validity"

    @rule(data=st.data(), what=st.sampled_from(["set_value", "set_values", "set_data", "inlined zcache.function"]),
          autograph=st.booleans())
    def unmanaged_set(self, data, what, autograph):
        """set_value / set_values / set_data inside a plain tf.function (also through a zcache.function
        inlined into it) raise UnmanagedTraceError when traced and change nothing."""
        w = self.world
        p = w.params[data.draw(st.integers(0, len(w.params) - 1), label="param")]
        x = w.data[data.draw(st.integers(0, len(w.data) - 1), label="data")]
        inner = zcache.function(lambda t: (p.obj.set_value(t), p.obj.value())[1])

        def set_data(t):
            x.obj.set_data(t)
            return x.obj.nevents

        def set_value(t):
            p.obj.set_value(t)
            return p.obj.value()

        def set_values(t):
            zcache.set_values([p.obj], [t])
            return p.obj.value()

        def inlined(t):
            return inner(t)

        if what == "set_data":
            arg = tf.constant(data.draw(GRAPH_ARRAYS, label="array"), tf.float64)
        else:
            arg = tf.constant(data.draw(valid_values(p), label="value"), tf.float64)
        body = {"set_data": set_data, "set_value": set_value, "set_values": set_values}.get(what, inlined)
        valid = w.validity()
        fn = tf.function(body, autograph=autograph)
        with pytest.raises(UnmanagedTraceError):
            if tf.config.functions_run_eagerly():  # a call would not trace: trace explicitly
                fn.get_concrete_function(arg)
            else:
                fn(arg)
        w.assert_inputs_unchanged()
        assert not w.validity_changed(valid), f"a refused {what} in a plain tf.function changed validity"

    # -- caches whose function raises ------------------------------------------------------
    @precondition(lambda self: self.world.guarded)
    @rule(data=st.data(), how=st.sampled_from(["eager", "zcache.function", "plain tf.function", "set, then read"]),
          same=st.booleans())
    def guard_fails(self, data, how, same):
        """A guarded cache read while its guard fails: the read raises, the cache (and every cache
        above it) is not valid afterwards, inputs are as the reference says (a zcache.function that
        set parameters before the failure restored them), and after a good value the next read
        (the invariant) gives the fresh value, never the one from before the failure."""
        w = self.world
        c = w.guarded[data.draw(st.integers(0, len(w.guarded) - 1), label="guarded")]
        g = c.guard
        readers = [c] + [n for n in w.caches if c.uid in n.below]
        r = readers[data.draw(st.integers(0, len(readers) - 1), label="reader")]
        old = w.values[g.uid]
        bad = data.draw(st.floats(GUARD_LIMIT, GUARD_LIMIT + 1.0, **FLOATS), label="bad guard")
        if how == "set, then read":  # in one zcache.function (traced: in its graph)
            p = data.draw(st.none() | st.sampled_from(range(len(w.params))), label="also set")
            p = None if p is None else w.params[p]
            vp = 0.0 if p is None else data.draw(valid_values(p), label="value")
            fn = w.failing_setter(r, g, p)
            with pytest.raises(GUARD_FAILURES):
                fn(tf.constant(bad, tf.float64), tf.constant(vp, tf.float64))
            w.assert_inputs_unchanged()  # the failed call restored p and g
        else:
            g.obj.set_value(bad)
            w.values[g.uid] = bad
            with pytest.raises(GUARD_FAILURES):
                if how == "eager":
                    r.read()
                else:
                    w.failing_reader(r, "plain" if how == "plain tf.function" else "zcache").__call__()
        for n in (c, r):
            assert not n.obj.is_valid, f"{n} is valid after its function failed ({how})"
        new = old if same else data.draw(st.floats(-1.0, 1.0, **FLOATS), label="good guard")
        g.obj.set_value(new)
        w.values[g.uid] = new
        w.assert_values([n.read() for n in w.caches], f"eager, after a failed read ({how})")

    # -- tapes that span set_value ---------------------------------------------------------
    @precondition(lambda self: self.world.caches)
    @rule(p=params, data=st.data(), nested=st.booleans(), traced=st.booleans())
    def tape_spans_set_value(self, p, data, nested, traced):
        """Persistent tapes read the caches, p.set_value(v) follows (eager, or in the graph of a
        zcache.function), then the gradient (nested: the Hessian) is taken: it is the reference's
        at the forward point, where the values were read."""
        w = self.world
        v = data.draw(valid_values(p), label="value")
        expected, exact = w.reference_values(), w.reference_gradient()
        hess = w.reference_hessian() if nested else None
        if traced:
            values, g, h = w.traced_tape_across_set_value(p, nested)(tf.constant(v, tf.float64))
        else:
            values, g, h = w.tape_across_set_value(p, nested)(v)
        w.values[p.uid] = float(v)
        how = f"{'traced' if traced else 'eager'}, set_value between forward pass and gradient"
        for c, got, e in zip(w.caches, values, expected):
            np.testing.assert_allclose(_to_np(got), e, rtol=1e-12, atol=1e-12, err_msg=f"{c} ({how})")
        w.assert_gradient(g, exact, f"persistent tape ({how})", traced)
        if nested:
            scale = max(1.0, float(np.max(np.abs(hess), initial=0.0)))
            np.testing.assert_allclose(_to_np(h), hess, rtol=1e-8, atol=1e-8 * scale,
                                       err_msg=f"nested tapes ({how}) differ from the reference Hessian; "
                                               f"params {w.params}")

    @precondition(lambda self: self.world.caches)
    @rule(p=params, data=st.data())
    def outer_tape_spans_set_value(self, p, data):
        """A persistent eager tape around a call of the traced reader, then p.set_value(v), then the gradient: the
        reference's at the call's values (found by make stress: TensorFlow builds that backward pass once, when the
        first call is recorded, and it read the values set after the call)."""
        w = self.world
        v = data.draw(valid_values(p), label="value")
        expected, exact = w.reference_values(), w.reference_gradient()
        variables = [q.obj.variable for q in w.params]
        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
            tape.watch(variables)
            values = w.read_traced(gradients=False)[0]
            total = _sum_all(values)
        w.set_value(p, v)
        for c, got, e in zip(w.caches, values, expected):
            np.testing.assert_allclose(_to_np(got), e, rtol=1e-12, atol=1e-12, err_msg=f"{c} (a call under a tape)")
        w.assert_gradient(_grads(tape.gradient(total, variables), variables), exact,
                          "a persistent tape around a traced call, set_value before its gradient", traced=True)

    # -- Hessian at a limit, numerical gradient that raises --------------------------------
    @precondition(lambda self: self.world.caches and any(p.obj.has_limits for p in self.world.params))
    @rule(data=st.data(), frac=st.floats(0.0, 1.0, **FLOATS), traced=st.booleans())
    def hessian_near_limit(self, data, frac, traced):
        """zcache.hessian with a parameter within one step of its limit: clipped, no error, every
        parameter left at its value, and close to the reference Hessian (one-sided differences)."""
        w = self.world
        limited = [p for p in w.params if p.obj.has_limits]
        p = limited[data.draw(st.integers(0, len(limited) - 1), label="param")]
        upper = p.obj.upper is not None and (p.obj.lower is None or data.draw(st.booleans(), label="upper"))
        limit = p.obj.upper if upper else p.obj.lower
        h = _REL_STEP * max(abs(limit), 1.0)
        w.set_value(p, limit - frac * h if upper else limit + frac * h)
        objs = [q.obj for q in w.params]

        def total():
            return _sum_all([c.read() for c in w.caches])

        if traced:
            key = w._key("hessian")
            if key not in w._checkers:
                w._checkers[key] = Traced(w, zcache.function(lambda: zcache.hessian(total, objs), wraps="gradient"))
            got = w._checkers[key]()
        else:
            got = zcache.hessian(total, objs)
        w.assert_inputs_unchanged()
        # The same differences on the reference, not the exact Hessian: a one-sided difference
        # is off by O(h) times the third derivative there (0.5 % in two stress sequences).
        ref, tol = w.reference_hessian_differences()
        np.testing.assert_allclose(_to_np(got), ref, rtol=1e-6, atol=tol,
                                   err_msg=f"zcache.hessian at {p} near its limit ({'traced' if traced else 'eager'})")

    @precondition(lambda self: self.world.caches)
    @rule(data=st.data(), traced=st.booleans())
    def numerical_gradient_raises(self, data, traced):
        """A numerical zcache.gradient whose function raises at its k-th evaluation leaves every
        parameter at its value."""
        w = self.world
        k = data.draw(st.integers(1, 2 * len(w.params) + 1), label="raising call")
        calls = [0]

        def total():
            calls[0] += 1
            if calls[0] == k:
                raise GuardError(f"evaluation {k} fails")
            return _sum_all([c.read() for c in w.caches])

        objs = [p.obj for p in w.params]
        with zcache.set_autograd_mode(False), pytest.raises(GuardError):
            if traced:
                zcache.function(lambda: zcache.gradient(total, objs), wraps="gradient")()
            else:
                zcache.gradient(total, objs)
        w.assert_inputs_unchanged()

    # -- threads on separate worlds --------------------------------------------------------
    @precondition(lambda self: self.thread_runs < 1)
    @rule(recipes=st.lists(recipes(max_caches=2, max_depth=2, models=False), min_size=2, max_size=2),
          changes=st.lists(st.tuples(INDEX, VALUES), min_size=2, max_size=6))
    def threads_on_separate_worlds(self, recipes, changes):
        """Two threads, each with its own small world, doing set_value and traced reads (checked
        against the reference); afterwards the modes are what they were."""
        self.thread_runs += 1
        modes = (zcache.get_graph_mode(), tf.config.functions_run_eagerly())
        worlds = [World.build(r) for r in recipes]
        errors = []

        def work(w):
            try:
                for i, v in changes:
                    w.set_value(w.params[i % len(w.params)], v)
                    values = w.read_traced(gradients=False)[0]
                    w.assert_values(values, "traced, in a thread")
            except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
                errors.append(err)

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            threads = [threading.Thread(target=work, args=(w,)) for w in worlds]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        if errors:
            raise errors[0]
        assert (zcache.get_graph_mode(), tf.config.functions_run_eagerly()) == modes, "threads changed the modes"

    # -- temporary models, dropped ---------------------------------------------------------
    @precondition(lambda self: self.world.caches)
    @rule(data=st.data(), how=st.sampled_from(["eager", "zcache.function traced before"]))
    def forward_accumulator_jvp(self, data, how):
        """tf.autodiff.ForwardAccumulator around reads of every cache: the JVP is the uncached gradient . tangent.

        A hit once gave no JVP (silently wrong); the reads of this rule are hits or misses as the sequence left them.
        """
        w = self.world
        variables = [p.obj.variable for p in w.params]
        tangent = [data.draw(st.floats(-1.0, 1.0, **FLOATS), label=f"tangent {p.label}") for p in w.params]

        def total():
            return _sum_all([c.read() for c in w.caches])

        fn = total
        if how != "eager":
            fn = zcache.function(total)
            fn()  # traced outside the accumulator: its reads are known, so under one it runs eagerly
        with tf.autodiff.ForwardAccumulator(variables, [tf.constant(t, tf.float64) for t in tangent]) as acc:
            out = fn()
        jvp = acc.jvp(out)
        exact = w.reference_gradient()
        expected = float(np.dot(exact, tangent))
        assert jvp is not None or not np.any(exact), f"no JVP through the caches ({how}); params {w.params}"
        got = 0.0 if jvp is None else float(jvp)
        scale = max(1.0, float(np.sum(np.abs(exact))))
        assert abs(got - expected) <= 1e-9 * scale, f"JVP {got} != {expected} ({how}); params {w.params}"

    @rule(a=params, b=params, x=data, how=st.sampled_from(["eager", "traced", "traced gradient"]))
    def temporary_model(self, a, b, x, how):
        """A model and a cache of its cache, used eagerly or traced, then dropped (a toy loop)."""
        m = Lineshape(a.obj, b.obj)
        extra = zcache.CachedTensor(lambda: m.profile(x.obj) * b.obj.value(), name="temporary")
        params = [a.obj] if a is b else [a.obj, b.obj]
        if how == "eager":
            got = extra.value()
        elif how == "traced":
            got = zcache.function(lambda: extra.value())()
        else:
            got = zcache.function(lambda: zcache.gradient(lambda: tf.reduce_sum(extra.value()), params))()
        consts = {n.uid: tf.constant(self.world.values[n.uid], tf.float64) for n in (a, b, x)}
        with tf.GradientTape() as tape:
            tape.watch([consts[a.uid], consts[b.uid]])
            ref = _profile(TF, x.value_in(consts, TF), consts[a.uid]) * consts[b.uid]
            total = tf.reduce_sum(ref)
        rtol = 1e-10
        if how == "traced gradient":
            ref = _grads(tape.gradient(total, [consts[n.uid] for n in ([a] if a is b else [a, b])]), params)
            if not zcache.get_autograd_mode():  # the same clipped differences on the reference
                ref, rtol = tf.constant(self._numerical_reference(a, b, x)), 1e-6
        np.testing.assert_allclose(_to_np(got), ref.numpy(), rtol=rtol, atol=rtol * 1e-2, err_msg=f"temporary model ({how})")
        nodes = [extra.node_id, *[c.node_id for c in m._zcache_caches.values()]]
        self.dropped.append(([weakref.ref(m), weakref.ref(extra)], nodes))

    def _numerical_reference(self, a, b, x):
        """zcache's central differences (clipped into the limits) of the temporary model's sum.

        Next to a limit they are one-sided, O(h) off the exact gradient (a parameter left there
        by hessian_near_limit failed a comparison with the exact one at 1e-6 once)."""
        values = self.world.values

        def total(over):
            env = {**values, **over}
            return float(np.sum(_profile(NP, x.value_in(env, NP), env[a.uid]) * env[b.uid]))

        grads = []
        for n in [a] if a is b else [a, b]:
            x0 = values[n.uid]
            h = _REL_STEP * max(abs(x0), 1.0)
            up = x0 + h if n.obj.upper is None else min(x0 + h, n.obj.upper)
            down = x0 - h if n.obj.lower is None else max(x0 - h, n.obj.lower)
            grads.append((total({n.uid: up}) - total({n.uid: down})) / (up - down))
        return np.array(grads)

    # -- invariants ----------------------------------------------------------------------
    @rule(x=data, kind=st.sampled_from(["complex", "bool", "object", "string", "datetime"]),
          door=st.sampled_from(["Data", "Data weights", "set_data", "set_data weights", "set_data graph",
                                "BinnedData"]),
          size=st.integers(1, 20))
    def refused_dtype(self, x, kind, door, size):
        """Issue 51: a value that is not a real number, at a drawn door: DataDtypeError, and nothing changes
        (the values, the caches' flags, the world's traced functions' trace counts, the dependency graph)."""
        from zcache.binned import BinnedData

        w = self.world
        real = np.linspace(0.5, 1.5, size)
        bad = {"complex": real + 0.5j, "bool": real > 1.0, "object": real.astype(object),
               "string": real.astype(str), "datetime": np.arange(size).astype("datetime64[s]")}[kind]
        tensor = {"complex": tf.constant(real + 0.5j), "bool": tf.constant(real > 1.0),
                  "string": tf.constant(real.astype(str))}.get(kind)
        if door == "set_data graph" and tensor is None:
            door = "set_data"  # tensors have no object or datetime dtypes
        valid = w.validity()
        traced = [*w._setters.values(), *w._checkers.values()]

        def trace_counts():
            return [t.fn.trace_count if isinstance(t, Traced) else t.traces for t in traced
                    if isinstance(t, (Traced, PlainTraced))]

        counts = trace_counts()
        nodes = GRAPH.nx.number_of_nodes()
        with pytest.raises(DataDtypeError):
            if door == "Data":
                zcache.Data(bad, name="refused")
            elif door == "Data weights":
                zcache.Data(real, name="refused", weights=bad)
            elif door == "set_data":
                x.obj.set_data(bad)
            elif door == "set_data weights":
                if x.weighted:  # Data's own set_data: AutoWeighted's would replace the weights
                    zcache.Data.set_data(x.obj, real, weights=bad)
                else:
                    zcache.Data(real, name="refused", weights=bad)
            elif door == "set_data graph":
                @zcache.function
                def write(t):
                    x.obj.set_data(t)
                    return x.obj.nevents

                write(tensor)
            else:
                BinnedData(bad, np.arange(size + 1.0), name="refused")
        for generation in (1, 2):
            if GRAPH.nx.number_of_nodes() > nodes:
                # a refused constructor's half-made object may be garbage in a cycle, not a node: collected
                # only then, the young generations first (a full pass over a worker's heap costs about a second)
                gc.collect(generation)
        assert GRAPH.nx.number_of_nodes() <= nodes, "a refused dataset left a node in the dependency graph"
        w.assert_inputs_unchanged()
        assert not w.validity_changed(valid)
        assert trace_counts() == counts, "a refused write retraced the world's functions"

    @invariant()
    def caches_equal_reference(self):
        self.steps += 1
        w = self.world
        w.assert_inputs_unchanged()
        if self.check_traced:  # values in a trace; traced gradients are checked by the *_block rules
            w.check(traced=True, gradients=False)
        w.check(traced=False, zgrad_first=self.steps % 2 == 0)

    @invariant()
    def dependency_graph_is_acyclic(self):
        assert nx.is_directed_acyclic_graph(zcache.dependency_graph())

    @invariant()
    def dependency_graph_holds_live_objects_only(self):
        g = zcache.dependency_graph()
        with GRAPH.lock:
            dead = [attrs["name"] for _, attrs in g.nodes(data=True) if attrs["ref"]() is None]
        assert not dead, f"nodes of collected objects: {dead}"
        for refs, nodes in self.dropped:
            if all(r() is None for r in refs):
                assert not any(n in g for n in nodes), "a collected temporary model left nodes in the graph"


TestCacheMachine = CacheMachine.TestCase
