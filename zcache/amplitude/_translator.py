"""The SymPy -> TensorFlow translator: an expression's nodes, their input sets and cache points.

:class:`Translator` walks a SymPy DAG once: it records each node's input set (the parameters it
reads, plus :data:`DATA` when it reads a data column), regroups sums and products by input set,
evaluates nodes to tensors through the op table (:mod:`._op_table`) and their jets through the
jet rules (:mod:`._jet_rules`). :func:`to_tensorflow` is the uncached translation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine import xla_ops
from .._engine.data import Data
from .._engine.tf_internals import leave_to_python
from ..exceptions import SymbolicError
from . import _jets as jets_
from ._jet_rules import abs2_jet, arg_jet, derivative_rules, jet_constants, power_rule, sqrt_jet
from ._op_table import (
    add,
    binary,
    div,
    fold,
    integer_power,
    is_complex,
    load_sympy,
    mul,
    op_table,
    real_sign,
    select,
    short,
    sqrt,
    to_tensor,
)

__all__ = ["to_tensorflow"]

# the marker of "reads a data column" in an input set
DATA = "<data>"
# a memo key: compute data-only sub-expressions inline (while filling their stacked cache)
_INLINE = "<inline>"
# a memo key: the stacked data-only cache, read once per evaluation
STACK = "<stack>"


class Translator:
    """The expression's nodes, their input sets and cache points; evaluates nodes to tensors.

    Its caches belong to ``owner`` (the model, whose cached methods call back here).
    """

    def __init__(self, roots: list[Any], params: dict[Any, Any], data_names: dict[Any, str], owner: Any,
                 cache: bool) -> None:
        self.sp = load_sympy()
        self.table = op_table()
        self.params = params
        self.data_names = data_names
        self.owner = owner
        self.cache = cache
        self._inputs: dict[Any, frozenset] = {}
        self._regrouped: dict[Any, Any] = {}
        self.roots = [self.regroup(r) for r in roots]
        parents: dict[Any, set] = {}
        order: dict[Any, int] = {}
        self._collect(self.roots, parents, order)
        self.index = order
        # the data-only sub-expressions that a node of other inputs reads (or that are roots):
        # one stacked cache per dataset holds them all
        only_data = frozenset([DATA])
        points = [node for node in order
                  if self.inputs(node) == only_data and isinstance(node, self.sp.Expr) and not node.is_Symbol
                  and (node in self.roots or any(self.inputs(p) != only_data for p in parents.get(node, ())))]
        self.data_points = {node: i for i, node in enumerate(points)}
        # each data point's first row in the stack and whether it is complex (two rows), set when
        # the stack is traced (stack_rows)
        self._stack_rows: dict[Any, tuple[int, bool]] = {}

    # -- analysis ---------------------------------------------------------------------
    def inputs(self, node: Any) -> frozenset:
        """The parameters a node reads, plus ``DATA`` when it reads a data column."""
        found = self._inputs.get(node)
        if found is not None:
            return found
        if node.is_Symbol:
            if node in self.params:
                found = frozenset([node])
            elif node in self.data_names:
                found = frozenset([DATA])
            else:
                raise SymbolicError(
                    f"the symbol '{node}' is neither a parameter nor a data column: give it a value in "
                    "parameters= or list it in data=."
                )
        else:
            found = frozenset().union(*(self.inputs(a) for a in node.args)) if node.args else frozenset()
        self._inputs[node] = found
        return found

    def regroup(self, node: Any) -> Any:
        """``node`` with the arguments of sums and products grouped by input set."""
        done = self._regrouped.get(node)
        if done is not None:
            return done
        if not node.args or node.is_number:
            out = node
        else:
            args = [self.regroup(a) for a in node.args]
            if node.is_Add or node.is_Mul:
                groups: dict[frozenset, list[Any]] = {}
                for a in args:
                    groups.setdefault(self.inputs(a), []).append(a)
                if len(groups) > 1:
                    args = [g[0] if len(g) == 1 else node.func(*g, evaluate=False) for g in groups.values()]
                out = node.func(*args, evaluate=False) if len(args) > 1 else args[0]
            elif any(a is not b for a, b in zip(args, node.args, strict=True)):
                try:
                    out = node.func(*args, evaluate=False)
                except TypeError:  # classes without an evaluate flag (ExprCondPair)
                    out = node.func(*args)
            else:
                out = node
        self._regrouped[node] = out
        return out

    def _collect(self, roots: list[Any], parents: dict[Any, set], order: dict[Any, int]) -> None:
        from sympy.functions.elementary.piecewise import ExprCondPair
        from sympy.logic.boolalg import BooleanAtom

        stack = [(r, None) for r in roots]
        while stack:
            node, parent = stack.pop()
            if parent is not None:
                parents.setdefault(node, set()).add(parent)
            if node in order:
                continue
            order[node] = len(order)
            self.inputs(node)
            if node.is_number or node.is_Symbol:
                continue
            supported = (node.is_Add or node.is_Mul or node.is_Pow or node.func in self.table
                         or isinstance(node, (ExprCondPair, BooleanAtom)))
            if not supported:
                raise SymbolicError(
                    f"the SymPy function '{node.func.__name__}' (in '{short(node)}') has no TensorFlow "
                    "translation; rewrite it (e.g. .doit() or .rewrite()) or substitute it before bridging."
                )
            stack.extend((a, node) for a in node.args)

    # -- evaluation -------------------------------------------------------------------
    def value(self, node: Any, data: Any, memo: dict[Any, Any]) -> Any:
        """The value of ``node`` on ``data`` (a zcache.Data or an (N, n_obs) tensor)."""
        if node in memo:
            return memo[node]
        i = self.data_points.get(node)
        if i is not None and _INLINE not in memo and (STACK in memo or (self.cache and isinstance(data, Data))):
            if STACK not in memo:  # one read (one tf.cond in a graph) per evaluation
                memo[STACK] = self.owner._data_stack(data)
            row, complex_ = self.stack_rows()[node]
            stacked = memo[STACK]
            out = tf.complex(stacked[row], stacked[row + 1]) if complex_ else stacked[row]
        else:
            out = self.compute(node, data, memo)
        memo[node] = out
        return out

    def stack(self, data: Data) -> tf.Tensor:
        """(M, N) float64: every data-only sub-expression a parameter-dependent node reads (the owner caches it).

        A real one is one row, a complex one two (its real and imaginary parts): the group programs
        that read the stack at every call of a fit are bound by memory, and a real value stored as
        complex was twice its bytes (all 12 of the D0 model's points are real, 9 of J/psi's 25).
        """
        memo: dict[Any, Any] = {_INLINE: True}
        n = tf.shape(self.column_named(self.owner.space.obs[0], data))
        rows: list[tf.Tensor] = []
        layout: dict[Any, tuple[int, bool]] = {}
        for node in self.data_points:
            v = self.compute(node, data, memo)
            memo[node] = v
            complex_ = is_complex(v)
            layout[node] = (len(rows), complex_)
            v = to_tensor(v, complex_)
            v = v + tf.zeros(n, v.dtype) if v.shape.rank == 0 else v
            rows.extend([tf.math.real(v), tf.math.imag(v)] if complex_ else [tf.cast(v, tf.float64)])
        self._stack_rows = layout
        return tf.stack(rows)

    def stack_rows(self) -> dict[Any, tuple[int, bool]]:
        """Each data point's first row in the stack and whether it is complex (two rows).

        Known once the owner's stack program is traced; traced here (not run) if it was not.
        """
        if len(self._stack_rows) != len(self.data_points):
            self.owner._stack_program().get_concrete_function()
        return self._stack_rows

    def compute(self, node: Any, data: Any, memo: dict[Any, Any]) -> Any:
        """The value of ``node`` from its children's (which may be caches)."""
        sp = self.sp
        inputs = self.inputs(node)
        if node.is_Symbol:
            if node in self.params:
                return self.params[node].value()
            return self.column(node, data)
        if node.is_number or not inputs:
            try:
                value = complex(node.evalf(17))
            except (TypeError, ValueError) as err:
                raise SymbolicError(f"the constant '{short(node)}' is not a number.") from err
            return value.real if value.imag == 0.0 else value
        child = lambda a: self.value(a, data, memo)  # noqa: E731
        if node.is_Add:
            return fold([child(a) for a in _numbers_first(node.args)], add)
        if node.is_Mul:
            return fold([child(a) for a in _numbers_first(node.args)], mul)
        if node.is_Pow:
            return self.power(node, child)
        entry = self.table.get(node.func)
        if entry is None:
            raise SymbolicError(
                f"the SymPy function '{node.func.__name__}' (in '{short(node)}') has no TensorFlow "
                "translation; rewrite it (e.g. .doit() or .rewrite()) or substitute it before bridging."
            )
        kind, fn = entry
        if kind == "unary":
            return fn(child(node.args[0]))
        if kind == "piecewise":
            return fn([(child(e), child(c) if c is not sp.true else True) for e, c in node.args])
        return fn(*[child(a) for a in node.args])

    def power(self, node: Any, child: Any) -> Any:
        base, exp = node.args
        if exp.is_Integer and base.func is self.sp.Abs and int(exp) % 2 == 0:  # |z|^2n without the sqrt
            z = child(base.args[0])
            if is_complex(z):
                sq = tf.square(xla_ops.real(z)) + tf.square(xla_ops.imag(z)) if isinstance(z, tf.Tensor) else abs(z) ** 2
            else:
                sq = z * z
            return integer_power(sq, int(exp) // 2)
        b = child(base)
        if exp.is_Integer:
            return integer_power(b, int(exp))
        if exp.is_Rational and exp.q == 2:
            if isinstance(b, (int, float, complex)):
                return b**float(exp) if not isinstance(b, complex) else b ** complex(float(exp))
            root = tf.sqrt(b)
            return integer_power(root, int(exp.p))
        e = child(exp)
        complex_ = is_complex(b) or is_complex(e)
        return tf.pow(to_tensor(b, complex_), to_tensor(e, complex_))

    def column(self, symbol: Any, data: Any) -> tf.Tensor:
        return self.column_named(self.data_names[symbol], data)

    def column_named(self, name: str, data: Any) -> tf.Tensor:
        """The column ``name`` of ``data``: a Data or tensor (the owner's), or a group program's arguments by name."""
        return data[name] if isinstance(data, dict) else self.owner.column(name, data)

    # -- second-order jets (exact Hessians) ------------------------------------------------
    @functools.cached_property
    def jet_rules(self) -> dict[Any, tuple[Any, Any]]:
        """The derivatives f' and f'' of each holomorphic function of the op table (built on first use)."""
        return derivative_rules(self.table)

    def jet(self, node: Any, data: Any, memo: dict[Any, Any], jets: dict[Any, jets_.Jet],
            index: dict[Any, int]) -> jets_.Jet:
        """``node``'s value with its first and second derivatives by the symbols of ``index`` (symbol -> position).

        A node that reads none of them is a constant jet of its value (:meth:`value`, so that
        the data-only stack and ``memo`` serve it); each node is visited once per ``jets`` memo.

        Raises
        ------
        zcache.amplitude._jets.NoJet
            A function without a derivative rule.
        """
        found = jets.get(node)
        if found is not None:
            return found
        n = len(index)
        if not (self.inputs(node) & index.keys()):
            out = jets_.constant(self.value(node, data, memo), n)
        elif node.is_Symbol:
            out = jets_.variable(self.value(node, data, memo), index[node], n)
        else:
            out = self._jet_of(node, data, memo, jets, index)
        jets[node] = out
        return out

    def has_jets(self, roots: Sequence[Any], symbols: set[Any]) -> bool:
        """Whether :meth:`jet` has a rule for every node of ``roots`` that reads one of ``symbols``."""
        sp = self.sp
        seen: set[Any] = set()
        stack = list(roots)
        rules = {sp.re, sp.im, sp.conjugate, sp.Abs, sp.arg, sp.Piecewise, sp.Min, sp.Max, sp.atan2, *jet_constants()}
        while stack:
            node = stack.pop()
            if node in seen or not (self.inputs(node) & symbols) or node.is_Symbol:
                continue
            seen.add(node)
            if not (node.is_Add or node.is_Mul or node.is_Pow or node.func in rules or node.func in self.jet_rules):
                return False
            if node.func in jet_constants():
                continue
            if node.func is sp.Piecewise:
                stack.extend(e for e, _ in node.args)
                continue
            stack.extend(node.args)
        return True

    def _jet_of(self, node: Any, data: Any, memo: dict[Any, Any], jets: dict[Any, jets_.Jet],
                index: dict[Any, int]) -> jets_.Jet:
        sp = self.sp
        child = lambda a: self.jet(a, data, memo, jets, index)  # noqa: E731
        if node.is_Add:
            return fold([child(a) for a in _numbers_first(node.args)], lambda a, b: jets_.add(a, b, add))
        if node.is_Mul:
            return fold([child(a) for a in _numbers_first(node.args)], lambda a, b: jets_.mul(a, b, mul))
        if node.is_Pow:
            return self._power_jet(node, child)
        f = node.func
        if f in jet_constants():  # piecewise constant: sign, steps, comparisons, logic
            return jets_.constant(self.value(node, data, memo), len(index))
        if f is sp.Piecewise:
            pieces = list(node.args)
            out = child(pieces[-1][0])
            for e, c in reversed(pieces[:-1]):
                out = jets_.where(self.value(c, data, memo), child(e), out, select)
            return out
        if f in (sp.Min, sp.Max):
            pick = tf.less if f is sp.Min else tf.greater
            return fold([child(a) for a in node.args],
                         lambda a, b: jets_.where(pick(to_tensor(a.v, False), to_tensor(b.v, False)), a, b, select))
        if f is sp.atan2:  # arg(x + i y)
            y, x = (child(a) for a in node.args)
            return arg_jet(jets_.add(x, jets_.mul(jets_.constant(1j, len(index)), y, mul), add), self.table[sp.log][1])
        if len(node.args) != 1:
            raise jets_.NoJet(f.__name__)
        a = child(node.args[0])
        if f in (sp.re, sp.im, sp.conjugate):
            return jets_.linear(a, self.table[f][1])
        if f is sp.Abs:
            if is_complex(a.v):
                return sqrt_jet(abs2_jet(a))
            return jets_.chain(a, tf.abs(a.v) if isinstance(a.v, tf.Tensor) else abs(a.v),
                               lambda: real_sign(a.v), lambda: None)
        if f is sp.arg:
            if is_complex(a.v):
                return arg_jet(a, self.table[sp.log][1])
            return jets_.constant(self.value(node, data, memo), len(index))
        rule = self.jet_rules.get(f)
        if rule is None:
            raise jets_.NoJet(f.__name__)
        value = self.table[f][1](a.v)
        d1, d2 = rule
        return jets_.chain(a, value, lambda: d1(a.v, value), lambda: d2(a.v, value))

    def _power_jet(self, node: Any, child: Any) -> jets_.Jet:
        base, exp = node.args
        if exp.is_Integer and base.func is self.sp.Abs and int(exp) % 2 == 0:  # |z|^2n as (|z|^2)^n
            z = child(base.args[0])
            return power_rule(abs2_jet(z) if is_complex(z.v) else jets_.mul(z, z, mul), int(exp) // 2)
        b = child(base)
        if not exp.is_number:  # b^e = exp(e log b)
            e = child(exp)
            log_b = jets_.chain(b, self.table[self.sp.log][1](b.v), lambda: div(1.0, b.v),
                                lambda: div(-1.0, mul(b.v, b.v)))
            z = jets_.mul(e, log_b, mul)
            value = self.table[self.sp.exp][1](z.v)
            return jets_.chain(z, value, lambda: value, lambda: value)
        if exp.is_Integer:
            return power_rule(b, int(exp))
        if exp.is_Rational and exp.q == 2:  # b^(p/2) from one square root, as the value path computes it
            p = int(exp.p)
            root = sqrt(b.v)
            value = integer_power(root, p)
            return jets_.chain(b, value, lambda: mul(p / 2.0, integer_power(root, p - 2)),
                               lambda: mul(p / 2.0 * (p / 2.0 - 1.0), integer_power(root, p - 4)))
        e = complex(exp.evalf(17))
        e = e.real if e.imag == 0.0 else e
        power = lambda k: binary(b.v, e - k, lambda x, y: tf.pow(x, y)) if isinstance(b.v, tf.Tensor) else b.v ** (e - k)  # noqa: E731
        return jets_.chain(b, power(0), lambda: mul(e, power(1)), lambda: mul(e * (e - 1), power(2)))


def _numbers_first(args: Sequence[Any]) -> list[Any]:
    return sorted(args, key=lambda a: 0 if a.is_number else 1)


def to_tensorflow(expression: Any, values: Mapping[Any, Any]) -> tf.Tensor:
    """Evaluate a SymPy expression with TensorFlow ops (no caches): the bridge's translation.

    Parameters
    ----------
    expression : sympy.Expr
        The expression (unevaluated ampform classes are evaluated with ``.doit()`` first).
    values : mapping
        Every free symbol (or its name) -> a number or array (float64 or complex128).

    Returns
    -------
    tf.Tensor
        float64 or complex128.

    Raises
    ------
    SymbolicError
        An unsupported function or a symbol without a value (named in the message).

    Examples
    --------
    >>> import sympy as sp
    >>> from zcache.amplitude import to_tensorflow
    >>> x = sp.Symbol("x")
    >>> [round(float(v), 6) for v in to_tensorflow(sp.sqrt(x) * sp.cos(x), {"x": [1.0, 2.0]})]
    [0.540302, -0.588521]
    """
    sp = load_sympy()
    expression = sp.sympify(expression).doit()
    by_name = {(k.name if hasattr(k, "name") else str(k)): v for k, v in values.items()}
    symbols = sorted(expression.free_symbols, key=lambda s: s.name)
    missing = [s.name for s in symbols if s.name not in by_name]
    if missing:
        raise SymbolicError(f"the symbol '{missing[0]}' has no value; give it one in values=.")
    tensors = {}
    for s in symbols:
        arr = np.asarray(by_name[s.name])
        tensors[s] = tf.constant(arr, tf.complex128 if np.iscomplexobj(arr) else tf.float64)

    class _Values:
        def __init__(self, t: tf.Tensor) -> None:
            self.t = t

        def value(self) -> tf.Tensor:
            return self.t

    translator = Translator([expression], {s: _Values(t) for s, t in tensors.items()}, {}, None, cache=False)
    out = translator.value(translator.roots[0], None, {})
    return to_tensor(out, is_complex(out)) if isinstance(out, (int, float, complex)) else out


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
