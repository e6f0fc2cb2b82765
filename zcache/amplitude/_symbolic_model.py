r"""A bridge from SymPy expressions (and ampform models) to cached zcache models.

``pip install zcache[sympy]``. Give :class:`SymbolicModel` an intensity written in SymPy, the
symbols that are parameters (with values) and the symbols that are data columns, and a
phase-space sample; it builds a :class:`zcache.models.Model` whose caches sit where the
expression's inputs change. :func:`from_helicity_model` does the same for an ampform
``HelicityModel``, with its kinematics: it takes four-momenta (or a number of fresh phase-space
events to draw) and computes the kinematic columns with ampform's own expressions
(:class:`zcache.kinematics.HelicityKinematics`, the model's ``kinematics``), for the phase-space
sample, for data (``to_data(momenta)``) and for generated events alike.

How the expression becomes a cached graph (each rule in one sentence):

- **inputs**: every sub-expression has an input set, the parameters it reads plus "data" when
  it reads a data column;
- **grouping**: the arguments of a sum or product are grouped by input set (``a*x*b*y`` with
  ``a, b`` data-only becomes ``(a*b) * (x*y)``), so that each maximal sub-expression over one
  input set is one node; identical sub-expressions are one node (SymPy hashes structurally), so
  shared parts are computed once per evaluation;
- **data-only caches**: every maximal data-only sub-expression that a parameter-dependent one
  reads (kinematics, breakup momenta, Wigner-D terms) is stored in one stacked
  :class:`zcache.CachedTensor` per dataset, real (float64) rows, a complex sub-expression as two
  (its real and imaginary parts): only ``set_data`` on that dataset recomputes it;
- **coherent sums**: an intensity :math:`\sum_h |\sum_k c_k A_{kh}|^2` whose couplings
  :math:`c_k` are complex parameters appearing as linear factors (ampform's form) is split into
  the coupling-free amplitudes :math:`A_{kh}`, grouped by the parameters they read (one group
  per resonance, typically); per dataset each group is one cached (H, K_g, N) tensor that only
  its own parameters (mass, width, radius) invalidate, and the normalization uses cached blocks
  of :math:`I_{jk} = \sum_h \langle A_{jh} A_{kh}^*\rangle` over the phase-space sample, one
  cache per pair of groups: a coupling change costs :math:`O(N K)` on the data and
  :math:`O(K^2)` for the normalization, a changed width recomputes its group and its blocks only
  (the coherent-sum core that :class:`zcache.amplitudes.CoherentSum` builds on too; the bridge
  gives it the translated amplitudes and their grouping);
- every cache is the model's own (``@zcache.cached`` methods): ``invalidate_caches()`` reaches them;
- **anything else** is normalized by the mean of the intensity over the phase-space sample,
  cached per dataset until a parameter changes (``SymbolicModel.is_coherent_sum`` says
  which was found); sub-expressions over parameters only are scalars, recomputed inline.

Complex parameters (those with a complex value: ampform's couplings) become two real
parameters, real and imaginary part (:class:`zcache.amplitudes.ComplexParameter` with
``polar=False``, named ``<symbol>_re`` / ``<symbol>_im``), as tensorwaves' optimizers split
them. Data columns are real (float64).

The density is :math:`I(x) / (V \langle I\rangle_{MC})` with the phase-space sample's mean and
``phasespace_volume`` :math:`V` (default 1, as tensorwaves' ``UnbinnedNLL``): a density with
respect to the phase-space measure. Sampling draws independent events: by accept-reject on fresh
phase-space events when the model has a ``generator``, else on the phase-space sample without
replacement (each of its events at most once per sample; a sample it cannot fill raises
:class:`~zcache.exceptions.SymbolicError`, and two samples drawn from one phase-space sample
share events). Fresh events must follow the phase-space sample's distribution, so
:func:`from_helicity_model` gives a three-body model the phase-space generator by default only
when it drew the phase-space sample itself or was given four-momenta of the reaction's phase
space; columns computed elsewhere keep the pool unless the user says ``generator="phasespace"``.

Examples
--------
>>> import numpy as np, sympy as sp, zcache
>>> from zcache.symbolic import SymbolicModel
>>> x, m, g, c = sp.symbols("x m g c")
>>> expr = sp.Abs(1 + c * g / (m**2 - x**2 - sp.I * m * g)) ** 2
>>> phsp = np.random.default_rng(0).uniform(0.5, 1.5, 10_000)
>>> model = SymbolicModel(expr, {m: 1.0, g: 0.1, c: 0.5 + 0.5j}, ["x"], {"x": phsp})
>>> model.is_coherent_sum, [p.name for p in model.get_params()]
(False, ['c_re', 'c_im'])
>>> data = model.sample(500)
>>> data.nevents, data.obs
(500, ('x',))
"""

from __future__ import annotations

import cmath
import difflib
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np
import tensorflow as tf

from ._engine import xla_ops
from ._engine.cachable import cached, caches_of
from ._engine.cached_tensor import CachedTensor, once_per_evaluation
from ._engine.compile_cache import run_program
from ._engine.context import substituting
from ._engine.data import Data
from ._engine.parameter import Parameter
from ._engine.tables import real_numbers
from ._engine.tf_internals import can_resume_recording, leave_to_python
from ._fitting import jets as jets_
from ._fitting.coherent import CoherentIntensity, box_mean, sum_log_normalized
from ._fitting.fused import fused_program
from .amplitudes import ComplexParameter, coupling_derivatives
from .exceptions import DataDtypeError, SymbolicError
from .fractions import FitFractions, fit_fractions_with_errors
from .kinematics import HelicityKinematics, phasespace_generator
from .models import Model, Space
from .sampling import accept_reject, accept_reject_pool

# sampling with a generator: the envelope is this times the largest intensity over the
# phase-space sample, raised (and the sample restarted) up to _ENVELOPE_RAISES times when a
# fresh event exceeds it
_ENVELOPE_SAFETY, _ENVELOPE_RAISES = 1.25, 16
# the start of the in-graph message of a pool that accepts too few events (sample() adds numbers)
_POOL_TOO_SMALL = "too few phase-space events accepted"

__all__ = ["SymbolicModel", "from_helicity_model", "phasespace_generator", "to_tensorflow"]

# the marker of "reads a data column" in an input set
_DATA = "<data>"
# a memo key: compute data-only sub-expressions inline (while filling their stacked cache)
_INLINE = "<inline>"
# a memo key: the stacked data-only cache, read once per evaluation
_STACK = "<stack>"
# integer exponents up to this are computed by multiplications (numpy's x**n does the same)
_MAX_MUL_POWER = 8


def _sympy() -> Any:
    try:
        import sympy
    except ImportError as err:  # pragma: no cover - [sympy] is part of [dev]
        raise SymbolicError("zcache.symbolic needs SymPy: pip install zcache[sympy].") from err
    return sympy


def _short(node: Any, limit: int = 60) -> str:
    text = str(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------
# values: Python numbers (constants) or float64 / complex128 tensors
# ---------------------------------------------------------------------------------------
def _is_complex(v: Any) -> bool:
    return isinstance(v, complex) or (isinstance(v, tf.Tensor) and v.dtype.is_complex)


def _tensor(v: Any, complex_: bool) -> tf.Tensor:
    if isinstance(v, (int, float, complex)):
        return tf.constant(complex(v) if complex_ else float(v), tf.complex128 if complex_ else tf.float64)
    if complex_ and not v.dtype.is_complex:
        return tf.complex(v, tf.zeros_like(v))
    return v


def _binary(a: Any, b: Any, op: Any) -> Any:
    if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)):
        return op(a, b)
    c = _is_complex(a) or _is_complex(b)
    return op(_tensor(a, c), _tensor(b, c))


def _mul(a: Any, b: Any) -> Any:
    return _binary(a, b, lambda x, y: x * y)


def _add(a: Any, b: Any) -> Any:
    return _binary(a, b, lambda x, y: x + y)


def _integer_power(x: Any, n: int) -> Any:
    if isinstance(x, (int, float, complex)):
        return x**n
    if n == 0:
        return tf.ones_like(x)
    if abs(n) > _MAX_MUL_POWER:
        return tf.pow(x, tf.constant(float(n), x.dtype) if not x.dtype.is_complex else tf.constant(complex(n), x.dtype))
    out, base, k = None, x, abs(n)
    while k:  # binary exponentiation
        if k & 1:
            out = base if out is None else out * base
        k >>= 1
        if k:
            base = base * base
    return xla_ops.reciprocal(out) if n < 0 else out


def _real_fn(name: str, tf_fn: Any, np_fn: Any) -> Any:
    def apply(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(np_fn(complex(x))) if isinstance(x, complex) else float(np_fn(float(x)))
        return tf_fn(x)

    apply.__name__ = name
    return apply


# ---------------------------------------------------------------------------------------
# the translation of one node, given its children's values
# ---------------------------------------------------------------------------------------
def _op_table() -> dict[Any, Any]:
    sp = _sympy()

    def re_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(x).real
        return xla_ops.real(x) if x.dtype.is_complex else x

    def im_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(x).imag
        return xla_ops.imag(x) if x.dtype.is_complex else tf.zeros_like(x)

    def conj_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return complex(x).conjugate() if isinstance(x, complex) else x
        return tf.math.conj(x) if x.dtype.is_complex else x

    def abs_(x: Any) -> Any:
        return abs(x) if isinstance(x, (int, float, complex)) else tf.abs(x)

    def arg_(x: Any) -> Any:
        if isinstance(x, (int, float, complex)):
            return cmath.phase(complex(x))
        return tf.math.angle(x) if x.dtype.is_complex else tf.math.angle(tf.complex(x, tf.zeros_like(x)))

    def where_(pieces: list[tuple[Any, Any]]) -> Any:
        complex_ = any(_is_complex(v) for v, _ in pieces)
        out = None
        for value, cond in reversed(pieces):
            value = _tensor(value, complex_)
            if out is None:
                out = value
            else:
                cond = tf.convert_to_tensor(cond)
                value, rest = value + tf.zeros_like(out), out + tf.zeros_like(value)  # broadcast
                out = tf.where(cond, value, rest)
        return out

    def rel(tf_op: Any, py_op: Any) -> Any:
        def apply(a: Any, b: Any) -> Any:
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                return py_op(a, b)
            return tf_op(_tensor(a, False), _tensor(b, False))
        return apply

    def heaviside(x: Any, h0: Any = 0.5) -> Any:
        x = _tensor(x, False)
        return tf.where(x > 0.0, tf.ones_like(x), tf.where(x < 0.0, tf.zeros_like(x), h0 * tf.ones_like(x)))

    unary = {
        sp.exp: _real_fn("exp", tf.exp, cmath.exp),
        sp.log: _real_fn("log", tf.math.log, cmath.log),
        sp.sin: _real_fn("sin", tf.sin, cmath.sin),
        sp.cos: _real_fn("cos", tf.cos, cmath.cos),
        sp.tan: _real_fn("tan", tf.tan, cmath.tan),
        sp.asin: _real_fn("asin", tf.asin, cmath.asin),
        sp.acos: _real_fn("acos", tf.acos, cmath.acos),
        sp.atan: _real_fn("atan", tf.atan, cmath.atan),
        sp.sinh: _real_fn("sinh", tf.sinh, cmath.sinh),
        sp.cosh: _real_fn("cosh", tf.cosh, cmath.cosh),
        sp.tanh: _real_fn("tanh", tf.tanh, cmath.tanh),
        sp.re: re_,
        sp.im: im_,
        sp.conjugate: conj_,
        sp.Abs: abs_,
        sp.arg: arg_,
        sp.sign: lambda x: tf.sign(_tensor(x, False)),
    }
    table: dict[Any, Any] = {f: ("unary", fn) for f, fn in unary.items()}
    table[sp.atan2] = ("nary", lambda y, x: tf.atan2(_tensor(y, False), _tensor(x, False)))
    table[sp.Min] = ("nary", lambda *a: _fold(a, lambda x, y: tf.minimum(_tensor(x, False), _tensor(y, False))))
    table[sp.Max] = ("nary", lambda *a: _fold(a, lambda x, y: tf.maximum(_tensor(x, False), _tensor(y, False))))
    table[sp.Heaviside] = ("nary", heaviside)
    table[sp.StrictLessThan] = ("nary", rel(tf.less, lambda a, b: a < b))
    table[sp.LessThan] = ("nary", rel(tf.less_equal, lambda a, b: a <= b))
    table[sp.StrictGreaterThan] = ("nary", rel(tf.greater, lambda a, b: a > b))
    table[sp.GreaterThan] = ("nary", rel(tf.greater_equal, lambda a, b: a >= b))
    table[sp.Equality] = ("nary", rel(tf.equal, lambda a, b: a == b))
    table[sp.Unequality] = ("nary", rel(tf.not_equal, lambda a, b: a != b))
    table[sp.And] = ("nary", lambda *a: _fold(a, tf.logical_and))
    table[sp.Or] = ("nary", lambda *a: _fold(a, tf.logical_or))
    table[sp.Not] = ("unary", tf.logical_not)
    table[sp.Piecewise] = ("piecewise", where_)
    return table


def _fold(args: Sequence[Any], op: Any) -> Any:
    out = args[0]
    for a in args[1:]:
        out = op(out, a)
    return out


class _Translator:
    """The expression's nodes, their input sets and cache points; evaluates nodes to tensors.

    Its caches belong to ``owner`` (the model, whose cached methods call back here).
    """

    def __init__(self, roots: list[Any], params: dict[Any, Any], data_names: dict[Any, str], owner: Any,
                 cache: bool) -> None:
        self.sp = _sympy()
        self.table = _op_table()
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
        only_data = frozenset([_DATA])
        points = [node for node in order
                  if self.inputs(node) == only_data and isinstance(node, self.sp.Expr) and not node.is_Symbol
                  and (node in self.roots or any(self.inputs(p) != only_data for p in parents.get(node, ())))]
        self.data_points = {node: i for i, node in enumerate(points)}
        # each data point's first row in the stack and whether it is complex (two rows), set when
        # the stack is traced (stack_rows)
        self._stack_rows: dict[Any, tuple[int, bool]] = {}

    # -- analysis ---------------------------------------------------------------------
    def inputs(self, node: Any) -> frozenset:
        """The parameters a node reads, plus ``_DATA`` when it reads a data column."""
        found = self._inputs.get(node)
        if found is not None:
            return found
        if node.is_Symbol:
            if node in self.params:
                found = frozenset([node])
            elif node in self.data_names:
                found = frozenset([_DATA])
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
                    f"the SymPy function '{node.func.__name__}' (in '{_short(node)}') has no TensorFlow "
                    "translation; rewrite it (e.g. .doit() or .rewrite()) or substitute it before bridging."
                )
            stack.extend((a, node) for a in node.args)

    # -- evaluation -------------------------------------------------------------------
    def value(self, node: Any, data: Any, memo: dict[Any, Any]) -> Any:
        """The value of ``node`` on ``data`` (a zcache.Data or an (N, n_obs) tensor)."""
        if node in memo:
            return memo[node]
        i = self.data_points.get(node)
        if i is not None and _INLINE not in memo and (_STACK in memo or (self.cache and isinstance(data, Data))):
            if _STACK not in memo:  # one read (one tf.cond in a graph) per evaluation
                memo[_STACK] = self.owner._data_stack(data)
            row, complex_ = self.stack_rows()[node]
            stacked = memo[_STACK]
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
            complex_ = _is_complex(v)
            layout[node] = (len(rows), complex_)
            v = _tensor(v, complex_)
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
                raise SymbolicError(f"the constant '{_short(node)}' is not a number.") from err
            return value.real if value.imag == 0.0 else value
        child = lambda a: self.value(a, data, memo)  # noqa: E731
        if node.is_Add:
            return _fold([child(a) for a in _numbers_first(node.args)], _add)
        if node.is_Mul:
            return _fold([child(a) for a in _numbers_first(node.args)], _mul)
        if node.is_Pow:
            return self.power(node, child)
        entry = self.table.get(node.func)
        if entry is None:
            raise SymbolicError(
                f"the SymPy function '{node.func.__name__}' (in '{_short(node)}') has no TensorFlow "
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
            if _is_complex(z):
                sq = tf.square(xla_ops.real(z)) + tf.square(xla_ops.imag(z)) if isinstance(z, tf.Tensor) else abs(z) ** 2
            else:
                sq = z * z
            return _integer_power(sq, int(exp) // 2)
        b = child(base)
        if exp.is_Integer:
            return _integer_power(b, int(exp))
        if exp.is_Rational and exp.q == 2:
            if isinstance(b, (int, float, complex)):
                return b**float(exp) if not isinstance(b, complex) else b ** complex(float(exp))
            root = tf.sqrt(b)
            return _integer_power(root, int(exp.p))
        e = child(exp)
        complex_ = _is_complex(b) or _is_complex(e)
        return tf.pow(_tensor(b, complex_), _tensor(e, complex_))

    def column(self, symbol: Any, data: Any) -> tf.Tensor:
        return self.column_named(self.data_names[symbol], data)

    def column_named(self, name: str, data: Any) -> tf.Tensor:
        """The column ``name`` of ``data``: a Data or tensor (the owner's), or a group program's arguments by name."""
        return data[name] if isinstance(data, dict) else self.owner.column(name, data)

    # -- second-order jets (exact Hessians) ------------------------------------------------
    @functools.cached_property
    def jet_rules(self) -> dict[Any, tuple[Any, Any]]:
        """The derivatives f' and f'' of each holomorphic function of the op table (built on first use)."""
        return _jet_rules(self.table)

    def jet(self, node: Any, data: Any, memo: dict[Any, Any], jets: dict[Any, jets_.Jet],
            index: dict[Any, int]) -> jets_.Jet:
        """``node``'s value with its first and second derivatives by the symbols of ``index`` (symbol -> position).

        A node that reads none of them is a constant jet of its value (:meth:`value`, so that
        the data-only stack and ``memo`` serve it); each node is visited once per ``jets`` memo.

        Raises
        ------
        zcache._fitting.jets.NoJet
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
        rules = {sp.re, sp.im, sp.conjugate, sp.Abs, sp.arg, sp.Piecewise, sp.Min, sp.Max, sp.atan2, *_jet_constants()}
        while stack:
            node = stack.pop()
            if node in seen or not (self.inputs(node) & symbols) or node.is_Symbol:
                continue
            seen.add(node)
            if not (node.is_Add or node.is_Mul or node.is_Pow or node.func in rules or node.func in self.jet_rules):
                return False
            if node.func in _jet_constants():
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
            return _fold([child(a) for a in _numbers_first(node.args)], lambda a, b: jets_.add(a, b, _add))
        if node.is_Mul:
            return _fold([child(a) for a in _numbers_first(node.args)], lambda a, b: jets_.mul(a, b, _mul))
        if node.is_Pow:
            return self._power_jet(node, child)
        f = node.func
        if f in _jet_constants():  # piecewise constant: sign, steps, comparisons, logic
            return jets_.constant(self.value(node, data, memo), len(index))
        if f is sp.Piecewise:
            pieces = list(node.args)
            out = child(pieces[-1][0])
            for e, c in reversed(pieces[:-1]):
                out = jets_.where(self.value(c, data, memo), child(e), out, _select)
            return out
        if f in (sp.Min, sp.Max):
            pick = tf.less if f is sp.Min else tf.greater
            return _fold([child(a) for a in node.args],
                         lambda a, b: jets_.where(pick(_tensor(a.v, False), _tensor(b.v, False)), a, b, _select))
        if f is sp.atan2:  # arg(x + i y)
            y, x = (child(a) for a in node.args)
            return _arg_jet(jets_.add(x, jets_.mul(jets_.constant(1j, len(index)), y, _mul), _add), self.table[sp.log][1])
        if len(node.args) != 1:
            raise jets_.NoJet(f.__name__)
        a = child(node.args[0])
        if f in (sp.re, sp.im, sp.conjugate):
            return jets_.linear(a, self.table[f][1])
        if f is sp.Abs:
            if _is_complex(a.v):
                return _sqrt_jet(_abs2_jet(a))
            return jets_.chain(a, tf.abs(a.v) if isinstance(a.v, tf.Tensor) else abs(a.v),
                               lambda: _real_sign(a.v), lambda: None)
        if f is sp.arg:
            if _is_complex(a.v):
                return _arg_jet(a, self.table[sp.log][1])
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
            return _power_rule(_abs2_jet(z) if _is_complex(z.v) else jets_.mul(z, z, _mul), int(exp) // 2)
        b = child(base)
        if not exp.is_number:  # b^e = exp(e log b)
            e = child(exp)
            log_b = jets_.chain(b, self.table[self.sp.log][1](b.v), lambda: _div(1.0, b.v),
                                lambda: _div(-1.0, _mul(b.v, b.v)))
            z = jets_.mul(e, log_b, _mul)
            value = self.table[self.sp.exp][1](z.v)
            return jets_.chain(z, value, lambda: value, lambda: value)
        if exp.is_Integer:
            return _power_rule(b, int(exp))
        if exp.is_Rational and exp.q == 2:  # b^(p/2) from one square root, as the value path computes it
            p = int(exp.p)
            root = _sqrt(b.v)
            value = _integer_power(root, p)
            return jets_.chain(b, value, lambda: _mul(p / 2.0, _integer_power(root, p - 2)),
                               lambda: _mul(p / 2.0 * (p / 2.0 - 1.0), _integer_power(root, p - 4)))
        e = complex(exp.evalf(17))
        e = e.real if e.imag == 0.0 else e
        power = lambda k: _binary(b.v, e - k, lambda x, y: tf.pow(x, y)) if isinstance(b.v, tf.Tensor) else b.v ** (e - k)  # noqa: E731
        return jets_.chain(b, power(0), lambda: _mul(e, power(1)), lambda: _mul(e * (e - 1), power(2)))


def _select(cond: Any, x: Any, y: Any) -> Any:
    if isinstance(cond, (bool, np.bool_)):
        return x if cond else y
    c = _is_complex(x) or _is_complex(y)
    x, y = _tensor(x, c), _tensor(y, c)
    x, y = x + tf.zeros_like(y), y + tf.zeros_like(x)
    cond = tf.convert_to_tensor(cond)
    return tf.where(cond, x, y)


def _div(a: Any, b: Any) -> Any:
    return _binary(a, b, lambda x, y: x / y)


def _sqrt(x: Any) -> Any:
    if isinstance(x, (int, float, complex)):
        return cmath.sqrt(x) if isinstance(x, complex) or x < 0 else x**0.5
    return tf.sqrt(x)


def _real_sign(x: Any) -> Any:
    return (1.0 if x > 0 else -1.0 if x < 0 else 0.0) if isinstance(x, (int, float)) else tf.sign(x)


def _power_rule(b: jets_.Jet, n: int) -> jets_.Jet:
    """``b ** n`` for an integer ``n``, by multiplications as the value path."""
    if n == 0:
        return jets_.constant(1.0, len(b.d))
    if n == 1:
        return b
    return jets_.chain(b, _integer_power(b.v, n), lambda: _mul(float(n), _integer_power(b.v, n - 1)),
                       lambda: _mul(float(n * (n - 1)), _integer_power(b.v, n - 2)))


def _abs2_jet(z: jets_.Jet) -> jets_.Jet:
    r""":math:`|z|^2 = \mathrm{Re}(z)^2 + \mathrm{Im}(z)^2` (not holomorphic: through the real parts)."""
    re = jets_.linear(z, lambda x: xla_ops.real(x) if isinstance(x, tf.Tensor) else complex(x).real)
    im = jets_.linear(z, lambda x: xla_ops.imag(x) if isinstance(x, tf.Tensor) else complex(x).imag)
    return jets_.add(jets_.mul(re, re, _mul), jets_.mul(im, im, _mul), _add)


def _sqrt_jet(a: jets_.Jet) -> jets_.Jet:
    root = _sqrt(a.v)
    return jets_.chain(a, root, lambda: _div(0.5, root), lambda: _div(-0.25, _mul(a.v, root)))


def _arg_jet(z: jets_.Jet, log: Any) -> jets_.Jet:
    r""":math:`\arg z = \mathrm{Im} \log z` (the principal branch, as ``tf.math.angle``), ``log`` the op table's."""
    log_z = jets_.chain(z, log(z.v), lambda: _div(1.0, z.v), lambda: _div(-1.0, _mul(z.v, z.v)))
    return jets_.linear(log_z, lambda x: xla_ops.imag(x) if isinstance(x, tf.Tensor) else complex(x).imag)


def _jet_rules(table: dict[Any, Any]) -> dict[Any, tuple[Any, Any]]:
    """The derivatives f' and f'' from (x, f(x)) per holomorphic function of the op ``table`` (whose functions they call)."""
    sp = _sympy()
    cos, sin, cosh, sinh = (table[f][1] for f in (sp.cos, sp.sin, sp.cosh, sp.sinh))

    def one_minus_sq(x: Any) -> Any:
        return _add(1.0, _mul(-1.0, _mul(x, x)))

    return {
        sp.exp: (lambda x, f: f, lambda x, f: f),
        sp.log: (lambda x, f: _div(1.0, x), lambda x, f: _div(-1.0, _mul(x, x))),
        sp.sin: (lambda x, f: cos(x), lambda x, f: _mul(-1.0, f)),
        sp.cos: (lambda x, f: _mul(-1.0, sin(x)), lambda x, f: _mul(-1.0, f)),
        sp.tan: (lambda x, f: _add(1.0, _mul(f, f)), lambda x, f: _mul(_mul(2.0, f), _add(1.0, _mul(f, f)))),
        sp.sinh: (lambda x, f: cosh(x), lambda x, f: f),
        sp.cosh: (lambda x, f: sinh(x), lambda x, f: f),
        sp.tanh: (lambda x, f: _add(1.0, _mul(-1.0, _mul(f, f))),
                  lambda x, f: _mul(_mul(-2.0, f), _add(1.0, _mul(-1.0, _mul(f, f))))),
        sp.asin: (lambda x, f: _div(1.0, _sqrt(one_minus_sq(x))),
                  lambda x, f: _div(x, _mul(one_minus_sq(x), _sqrt(one_minus_sq(x))))),
        sp.acos: (lambda x, f: _div(-1.0, _sqrt(one_minus_sq(x))),
                  lambda x, f: _div(_mul(-1.0, x), _mul(one_minus_sq(x), _sqrt(one_minus_sq(x))))),
        sp.atan: (lambda x, f: _div(1.0, _add(1.0, _mul(x, x))),
                  lambda x, f: _div(_mul(-2.0, x), _mul(_add(1.0, _mul(x, x)), _add(1.0, _mul(x, x))))),
    }


@functools.lru_cache(maxsize=1)
def _jet_constants() -> frozenset:
    sp = _sympy()
    return frozenset([sp.sign, sp.Heaviside, sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan, sp.GreaterThan,
                      sp.Equality, sp.Unequality, sp.And, sp.Or, sp.Not])


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
    >>> from zcache.symbolic import to_tensorflow
    >>> x = sp.Symbol("x")
    >>> [round(float(v), 6) for v in to_tensorflow(sp.sqrt(x) * sp.cos(x), {"x": [1.0, 2.0]})]
    [0.540302, -0.588521]
    """
    sp = _sympy()
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

    translator = _Translator([expression], {s: _Values(t) for s, t in tensors.items()}, {}, None, cache=False)
    out = translator.value(translator.roots[0], None, {})
    return _tensor(out, _is_complex(out)) if isinstance(out, (int, float, complex)) else out


# ---------------------------------------------------------------------------------------
# the coherent-sum structure
# ---------------------------------------------------------------------------------------
def _coherent_terms(expression: Any, couplings: set[Any]) -> list[dict[Any, Any]] | None:
    r"""``[{c_k: A_kh}]`` per :math:`h` when ``expression`` is :math:`\sum_h |\sum_k c_k A_{kh}|^2`, else None."""
    sp = _sympy()
    if not couplings:
        return None
    out = []
    for term in sp.Add.make_args(expression):
        if not (term.is_Pow and term.exp == 2 and term.base.func is sp.Abs):
            return None
        amplitudes: dict[Any, list[Any]] = {}
        for part in sp.Add.make_args(term.base.args[0]):
            factors = sp.Mul.make_args(part)
            found = [f for f in factors if f in couplings]
            rest = [f for f in factors if f not in couplings]
            if len(found) != 1 or any(f.free_symbols & couplings for f in rest):
                return None
            amplitudes.setdefault(found[0], []).append(sp.Mul(*rest))
        out.append({c: sp.Add(*parts) for c, parts in amplitudes.items()})
    return out


# ---------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------
class SymbolicModel(Model, CoherentIntensity):
    r"""A zcache model from a SymPy intensity: caches where the inputs change (see the module docstring).

    Parameters
    ----------
    expression : sympy.Expr
        The (unnormalized) intensity, real and non-negative; unevaluated classes (ampform's)
        are evaluated with ``.doit()`` unless ``doit=False``.
    parameters : mapping
        Symbol (or its name) -> its value (a number; a complex number makes a complex
        parameter), a ``dict(value=..., lower=..., upper=..., floating=...)``, a
        :class:`zcache.Parameter` or a :class:`zcache.amplitudes.ComplexParameter` (used as is).
    data : sequence of sympy.Symbol or str
        The data columns (kinematic variables); those the expression does not read are ignored.
    phasespace : zcache.Data or mapping of str to array_like
        The phase-space (integration) sample: a Data with ``obs`` naming the columns, or
        name -> array.
    floating : iterable of sympy.Symbol or str, optional
        The parameters that float (the others are fixed). Default: the complex parameters
        (couplings), except the first one of a coherent sum (the reference, which fixes the
        overall phase and scale). Parameters passed as zcache objects keep their own flag.
    name : str, optional
        A label; default ``'SymbolicModel'``.
    cache : bool
        ``False`` builds the same model without any cache (the reference the tests compare with).
    doit : bool
        Whether to call ``expression.doit()`` first.
    phasespace_volume : float
        :math:`V` of the normalization :math:`V \langle I \rangle_{MC}`.
    limits : mapping of str to (float, float), optional
        The range of a data column (default: the phase-space sample's range, widened by 10 %).
    extended : Parameter or float, optional
        A yield makes the model extended.
    generator : callable, optional
        ``generator(n)`` for an int64 scalar tensor ``n``: ``n`` fresh phase-space events,
        a mapping of column name -> float64 tensor of shape (n,), distributed as the
        phase-space sample is (the density is relative to it) and drawn from
        :func:`zcache.sampling.rng` (so that :func:`zcache.sampling.set_seed` reproduces them and the
        sampler traces). With it :meth:`sample` draws fresh events by accept-reject; without
        it, from the phase-space sample without replacement (see :meth:`sample`).
    kinematics : zcache.kinematics.HelicityKinematics, optional
        Turns four-momenta into the data columns: ``phasespace`` and :meth:`to_data` then accept
        four-momenta too (:func:`from_helicity_model` gives it).
    fused : bool or "auto"
        How each group's amplitudes run. ``False``: one plain ``tf.function``. ``True``: one XLA
        program forward and one that recomputes and differentiates them backward
        (:mod:`zcache._fitting.fused`), with exact first and second derivatives; nothing but the
        inputs is kept for the backward pass. ``"auto"`` (default): fused for a group with a
        floating parameter when its program is first built (the first evaluation), plain for a
        group whose line shapes are fixed (computed once and cached: XLA's compile would cost
        about a second and save nothing). Measured with masses and widths floating on 2 cores,
        against plain programs: first fit 1.6x to 2.1x (J/psi -> gamma pi0 pi0) and 1.2x to 1.4x
        (D0 -> K pi pi0) faster at 2e3, 2e4 and 1e5 events, about half the peak memory, warm fit
        faster too except J/psi at 1e5 (0.92x) (``benchmarks/RESULTS.md``, "Fused line shapes:
        fits"). :attr:`fused_groups` says which groups are fused.

    Raises
    ------
    SymbolicError
        An unsupported SymPy function, a free symbol that is neither parameter nor data, a
        parameter that is also a data column, a parameter name the expression does not hold
        (close matches named), or a phase-space sample without a needed column.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from zcache.symbolic import SymbolicModel
    >>> x, a, c = sp.symbols("x a c")
    >>> model = SymbolicModel(sp.Abs(c * sp.exp(sp.I * a * x) + 1) ** 2, {a: 2.0, c: 0.5j}, ["x"],
    ...                       {"x": np.linspace(0.0, 1.0, 1001)})
    >>> round(float(model.unnormalized_pdf(np.array([[0.0]]))[0]), 12)   # |0.5i + 1|^2
    1.25
    """

    def __init__(self, expression: Any, parameters: Mapping[Any, Any], data: Sequence[Any], phasespace: Any, *,
                 floating: Iterable[Any] | None = None, name: str | None = None, cache: bool = True,
                 doit: bool = True, phasespace_volume: float = 1.0,
                 limits: Mapping[str, tuple[float, float]] | None = None, extended: Any = None,
                 generator: Any = None, kinematics: HelicityKinematics | None = None, fused: bool | str = "auto") -> None:
        sp = _sympy()
        expression = sp.sympify(expression)
        if doit:
            expression = expression.doit()
        symbols = {s.name: s for s in expression.free_symbols}
        data_names = [d.name if hasattr(d, "name") else str(d) for d in data]
        by_name = {(k.name if hasattr(k, "name") else str(k)): v for k, v in parameters.items()}
        both = sorted(set(by_name) & set(data_names))
        if both:
            raise SymbolicError(f"the symbol '{both[0]}' is given both as a parameter and as a data column.")
        # a misspelt name would otherwise be ignored and its symbol keep another value
        _refuse_unknown(by_name, symbols, "parameters=", "a symbol of the expression")
        if generator is not None and not callable(generator):
            raise SymbolicError(f"generator= must be a callable n -> columns, got {generator!r}.")
        for s in sorted(symbols):
            if s not in by_name and s not in data_names:
                raise SymbolicError(
                    f"the symbol '{s}' is neither a parameter nor a data column: give it a value in "
                    "parameters= or list it in data=."
                )
        self.expression = expression
        self.cache = bool(cache)
        if not (isinstance(fused, (bool, np.bool_)) or (isinstance(fused, str) and fused == "auto")):
            raise SymbolicError(f"fused= must be True, False or 'auto', got {fused!r}.")
        self.fused: bool | str = "auto" if isinstance(fused, str) else bool(fused)
        self.generator = generator
        self.kinematics = kinematics
        self.phasespace_volume = float(phasespace_volume)
        used = [d for d in data_names if d in symbols]
        if not used:
            raise SymbolicError("the expression reads none of the data columns given in data=.")
        if kinematics is not None and kinematics.is_momenta(phasespace):
            phasespace = kinematics.columns(phasespace, "the phase-space sample")
        self.phasespace = self._as_data(phasespace, used, "phasespace")
        space = self._space(used, limits)
        super().__init__(space, name=name or "SymbolicModel", extended=extended)
        # parameters: real ones and complex ones (real and imaginary part)
        complex_symbols = [symbols[n] for n in by_name if n in symbols and _is_complex_value(by_name[n])]
        self.symbol_params: dict[Any, Any] = {}
        for n, value in by_name.items():
            if n in symbols:
                self.symbol_params[symbols[n]] = _make_parameter(n, value)
        terms = _coherent_terms(expression, set(complex_symbols))
        self.is_coherent_sum = terms is not None
        # the traced programs of the data-only columns and of each group (_stack_program, _group_program)
        self._stack_fn: Any = None
        self._group_programs: dict[int, tuple[list[Any], Any]] = {}
        self._program_calls: set[Any] = set()  # (program, shapes) first called eagerly (the compile cache's checks)
        self._times_programs: dict[int, Any] = {}
        self._fused_groups: set[int] = set()
        self._jet_programs: dict[Any, Any] = {}
        self._set_floating(floating, symbols, by_name, complex_symbols, terms)
        self.params = {}
        for obj in self.symbol_params.values():
            for p in (obj.params if isinstance(obj, ComplexParameter) else [obj]):
                self.params[p.name] = p
        data_symbols = {symbols[d]: d for d in used}
        if terms is None:
            self._translator = _Translator([expression], self.symbol_params, data_symbols, self, self.cache)
            self._root = self._translator.roots[0]
            return
        # a coherent sum: couplings grouped by the parameters of their amplitudes
        self._helicities = len(terms)
        translator = _Translator([a for t in terms for a in t.values()], self.symbol_params, data_symbols, self,
                                 self.cache)
        self._translator = translator
        regrouped = [{c: translator.regroup(a) for c, a in t.items()} for t in terms]
        keys: dict[Any, frozenset] = {}
        for t in regrouped:
            for c, a in t.items():
                keys[c] = keys.get(c, frozenset()) | (translator.inputs(a) - {_DATA})
        groups: dict[frozenset, list[Any]] = {}
        for c in sorted(keys, key=lambda s: complex_symbols.index(s)):
            groups.setdefault(keys[c], []).append(c)
        self._groups = list(groups.items())  # [(input set, [coupling symbols])]
        self.couplings = [self.symbol_params[c] for _, cs in self._groups for c in cs]
        self._terms = regrouped
        self._set_groups([len(cs) for _, cs in self._groups])

    # -- construction helpers -------------------------------------------------------------
    def _as_data(self, sample: Any, used: list[str], what: str) -> Data:
        if isinstance(sample, Data):
            missing = [u for u in used if sample.obs is None or u not in sample.obs]
            if missing:
                raise SymbolicError(f"the {what} sample '{sample.name}' has no column '{missing[0]}' (obs {sample.obs}).")
            return sample
        missing = [u for u in used if u not in sample]
        if missing:
            raise SymbolicError(f"the {what} sample has no column '{missing[0]}'.")
        return Data(np.stack([_real_column(sample[u], f"the {what} sample's column '{u}'") for u in used], axis=1),
                    name=what, obs=used)

    def _space(self, used: list[str], limits: Mapping[str, tuple[float, float]] | None) -> Space:
        values = self.phasespace.numpy()
        cols = [values[:, self.phasespace.obs.index(u)] for u in used]
        lower, upper = [], []
        for u, col in zip(used, cols, strict=True):
            if limits and u in limits:
                lo, hi = limits[u]
            else:
                lo, hi = float(np.min(col)), float(np.max(col))
                pad = 0.1 * (hi - lo) + 1e-6 * (abs(lo) + abs(hi) + 1.0)
                lo, hi = lo - pad, hi + pad
            lower.append(lo)
            upper.append(hi)
        return Space(used, lower, upper)

    def _set_floating(self, floating: Iterable[Any] | None, symbols: dict[str, Any], by_name: dict[str, Any],
                      complex_symbols: list[Any], terms: Any) -> None:
        if floating is None:
            chosen = set(complex_symbols[1:] if terms is not None else complex_symbols)
        else:
            names = {f.name if hasattr(f, "name") else str(f) for f in floating}
            _refuse_unknown(names, by_name, "floating=", "a parameter")
            chosen = {symbols[n] for n in names if n in symbols}
        for symbol, obj in self.symbol_params.items():
            given = by_name[symbol.name]
            if isinstance(given, (Parameter, ComplexParameter)) or (isinstance(given, Mapping) and "floating" in given):
                continue  # the user's own objects and explicit flags are kept
            for p in (obj.params if isinstance(obj, ComplexParameter) else [obj]):
                p.floating = symbol in chosen

    # -- per-event values ----------------------------------------------------------------
    def column(self, name: str, data: Any) -> tf.Tensor:
        """One data column of ``data`` (a zcache.Data or a tensor in the space's column order).

        Parameters
        ----------
        name : str
            The column (an observable of ``space``).
        data : zcache.Data or tf.Tensor
            The events.

        Returns
        -------
        tf.Tensor
            float64, shape (N,).
        """
        if isinstance(data, Data):
            values = data.value()
            return values if values.shape.rank == 1 else values[:, data.obs.index(name)]
        data = tf.convert_to_tensor(data, tf.float64)
        return data[:, self.space.obs.index(name)] if data.shape.rank == 2 else data

    def _events(self, data: Any) -> tf.Tensor:
        """(N, columns): ``data``'s events with the space's columns in order, the group programs' input.

        The programs take the matrix as stored and slice their columns inside: in an XLA program
        the slices are read in the loops that use them. Sliced outside, each column of the (N, 7)
        D0 data was a strided copy: 1 ms per dataset and value + gradient call at 1e5 events, a
        tenth of a warm fit. Reordered (a Data whose columns are in another order, or more of
        them) once per evaluation.
        """
        if not isinstance(data, Data):  # a tensor in the space's column order (see column)
            data = tf.convert_to_tensor(data, tf.float64)
            return data if data.shape.rank == 2 else data[:, None]
        values = data.value()
        if values.shape.rank == 1:
            return values[:, None]
        obs = list(self.space.obs)
        if list(data.obs) == obs:
            return values
        return once_per_evaluation(("events", data.node_id, tuple(obs)),
                                   lambda: tf.gather(values, [data.obs.index(n) for n in obs], axis=1),
                                   reads=(data,))

    def _named_columns(self, events: tf.Tensor) -> dict[str, tf.Tensor]:
        """The space's columns (N,) of a program's ``events`` (N, columns), by name."""
        obs = list(self.space.obs)
        return dict(zip(obs, tf.unstack(events, len(obs), axis=1), strict=True))

    def to_data(self, columns: Any, name: str = "data") -> Data:
        """A :class:`zcache.Data` with this model's observables from ``name -> array`` columns (or four-momenta).

        Parameters
        ----------
        columns : mapping of str to array_like, or four-momenta
            At least the model's observables (others are ignored); with ``kinematics`` (a
            bridged ampform model) also four-momenta, ``{"p0": (n, 4), "p1": ..., ...}`` or a
            sequence of (n, 4) arrays in final-state order, whose columns it computes.
        name : str
            The Data's name.

        Returns
        -------
        zcache.Data

        Raises
        ------
        SymbolicError
            A missing column, or four-momenta that are missing, of the wrong shape or not finite.
        """
        if self.kinematics is not None and self.kinematics.is_momenta(columns):
            columns = self.kinematics.columns(columns, f"the sample '{name}'")
        return self._as_data(columns, list(self.space.obs), name)

    # -- the coherent-sum core's hooks: the translated amplitudes of each group -------------------
    def _group_now(self, g: int, data: Any) -> tf.Tensor:
        """(H, K_g, N): the coupling-free amplitudes of group ``g`` (zero where a coupling is absent).

        On a cached model and a :class:`zcache.Data`, one call of the group's program
        (:meth:`_group_program`): the parameters and the stacked data-only columns are read
        here (so that reads are recorded, substituted and cached as everywhere else) and passed in.
        """
        if not (self.cache and isinstance(data, Data)):
            return self._group_terms(g, data, {})
        symbols, program = self._group_program(g)
        values = [self.symbol_params[s].value() for s in symbols]
        out = run_program(self._program_calls, id(program), program, self._data_stack(data), self._events(data),
                          values)  # (H K_g, N) when fused
        return tf.reshape(out, [len(self._terms), len(self._groups[g][1]), -1])

    def _group_program(self, g: int) -> tuple[list[Any], Any]:
        """Group ``g``'s amplitudes as one ``tf.function`` of (data-only stack, events, parameter values).

        Traced once for every dataset (the events axis is left open) and every caller: the
        value, the gradient (TensorFlow differentiates the call with the function's own
        backward, built once), compiled fits and batched toys (a call vectorizes). Without it
        each group's few hundred element-wise ops were traced once per dataset, again in each
        cache's backward pass and again in every program that recomputes the group.
        """
        found = self._group_programs.get(g)
        if found is not None:
            return found
        symbols = sorted(self._groups[g][0], key=lambda s: s.name)
        specs = [tf.TensorSpec([], tf.complex128 if isinstance(self.symbol_params[s], ComplexParameter) else tf.float64)
                 for s in symbols]
        signature = self._program_signature(specs)

        def group(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor], fused: bool = False) -> Any:
            return self._group_rows(g, symbols, stack, events, values, fused)

        # fused: XLA forward and backward programs (zcache._fitting.fused); real parameters only (its
        # backward pass returns real cotangents), and not where TensorFlow's tape internals are missing.
        # "auto": only a group that a floating parameter moves (a fixed group is computed once and cached)
        wanted = self.fused is True or (self.fused == "auto" and any(self.symbol_params[s].floating for s in symbols))
        if wanted and symbols and all(spec.dtype == tf.float64 for spec in specs) and can_resume_recording():
            program = fused_program(functools.partial(group, fused=True), signature, len(symbols))
            self._fused_groups.add(g)
        else:
            program = tf.function(group, input_signature=signature, autograph=False)
        found = self._group_programs[g] = (symbols, program)
        return found

    def _program_signature(self, value_specs: list[tf.TensorSpec]) -> list[Any]:
        """A group program's input signature: the data-only stack, the events (:meth:`_events`), then ``value_specs``."""
        height = sum(2 if complex_ else 1 for _, complex_ in self._translator.stack_rows().values())
        return [tf.TensorSpec([height, None], tf.float64),
                tf.TensorSpec([None, len(self.space.obs)], tf.float64), list(value_specs)]

    def _group_rows(self, g: int, symbols: list[Any], stack: tf.Tensor, events: tf.Tensor,
                    values: list[tf.Tensor], fused: bool) -> Any:
        """Group ``g``'s amplitudes from a program's inputs (``values`` in the order of ``symbols``).

        ``fused``: the parameters widened over the events and the H K_g rows returned as a list (an
        XLA program's outputs, which ``fused_program`` stacks outside XLA); else (H, K_g, N).
        """
        if fused:
            # each parameter as a per-event vector: in reverse mode a scalar that enters many
            # element-wise ops is reduced over the events once per use (~40 reductions in the
            # J/psi model's spin-2 group), a widened one once. Measured on that group's XLA
            # backward program at 1e5 events: 25.6 ms -> 9.6 ms. Fused programs only: in plain
            # TensorFlow the parameter-only sub-expressions (m**2, m**7) would become kernels
            # over the events.
            zeros = tf.zeros_like(events[:, 0])
            values = [v + zeros for v in values]
        memo: dict[Any, Any] = {_STACK: stack, **dict(zip(symbols, values, strict=True))}
        return self._group_terms(g, self._named_columns(events), memo, rows=fused)

    def _group_parameters(self, g: int) -> list[Any]:
        return [self.symbol_params[s] for s in self._groups[g][0]]

    def _moved(self, g: int, data: Any) -> bool:
        """Also outside a substitution: a fused group with a floating parameter (see the class docstring).

        In a fit every call moves such a group, so its columns would be recomputed at every call all
        the same; computed as the couplings' sums directly (:meth:`_group_times`), the first call traces
        the program a compiled fit then reuses, and no integral block is traced or stored.
        """
        if substituting():
            return super()._moved(g, data)
        if not (self.cache and isinstance(data, Data)):
            return False
        params = self._group_parameters(g)
        if not any(getattr(p, "floating", False) for p in params):
            return False
        self._group_program(g)  # decides whether the group is fused
        return g in self._fused_groups

    def _group_times(self, g: int, c: tf.Tensor, data: Any) -> tf.Tensor:
        """(H, N): group ``g``'s amplitudes times its couplings ``c`` (K_g,).

        Where the group is recomputed at every call (:meth:`_moved`: its line shape floats, or a
        fitted parameter moves it inside a compiled fit's program) and fused, one XLA program makes
        the amplitudes and multiplies the couplings in (:meth:`_times_program`): the (H, K_g, N)
        columns are never written, nor read back by a product, nor their cotangents summed in the
        backward pass.
        """
        if self._moved(g, data):
            program = self._times_program(g)
            if program is not None:
                symbols, _ = self._group_program(g)
                parts = tf.unstack(c, len(self._groups[g][1]))
                values = ([self.symbol_params[s].value() for s in symbols]
                          + [xla_ops.real(ck) for ck in parts] + [xla_ops.imag(ck) for ck in parts])
                return run_program(self._program_calls, id(program), program, self._data_stack(data),
                                   self._events(data), values)
        return super()._group_times(g, c, data)

    def _times_program(self, g: int) -> Any:
        """Group ``g``'s (H, N) amplitudes times couplings as one fused program (None unless the group is fused).

        Called as the group's program, with the couplings' real and imaginary parts appended to the
        parameter values (``fused_program`` differentiates real values).
        """
        symbols, _ = self._group_program(g)
        if g not in self._fused_groups:
            return None
        found = self._times_programs.get(g)
        if found is not None:
            return found
        n_sym, n_c, n_h = len(symbols), len(self._groups[g][1]), len(self._terms)
        signature = self._program_signature([tf.TensorSpec([], tf.float64)] * (n_sym + 2 * n_c))

        def times(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor]) -> list[tf.Tensor]:
            rows = self._group_rows(g, symbols, stack, events, values[:n_sym], True)  # row h K_g + k
            zeros = tf.zeros_like(events[:, 0])  # the couplings widened over the events too
            parts = [v + zeros for v in values[n_sym:]]
            c = [tf.complex(re, im) for re, im in zip(parts[:n_c], parts[n_c:], strict=True)]
            return [functools.reduce(tf.add, [c[k] * rows[h * n_c + k] for k in range(n_c)]) for h in range(n_h)]

        found = self._times_programs[g] = fused_program(times, signature, n_sym + 2 * n_c)
        return found

    def _group_terms(self, g: int, data: Any, memo: dict[Any, Any], rows: bool = False) -> Any:
        """(H, K_g, N), or with ``rows`` its H K_g rows as a list (an XLA program's outputs: see ``fused_program``)."""
        _, couplings = self._groups[g]
        n = tf.shape(self._translator.column_named(self.space.obs[0], data))
        out = []
        for t in self._terms:
            for c in couplings:
                a = t.get(c)
                v = tf.zeros(n, tf.complex128) if a is None else self._translator.value(a, data, memo)
                v = _tensor(v, True)
                out.append(v + tf.zeros(n, tf.complex128) if v.shape.rank == 0 else v)
        if rows:
            return out
        return tf.reshape(tf.stack(out), [len(self._terms), len(couplings), -1])

    # -- the exact Hessian (the coherent-sum core's hooks) -------------------------------------------
    def _supports_nll_hessian(self, params: Sequence[Parameter]) -> bool:
        return self.cache and self.is_coherent_sum and self._hessian_plan(params) is not None

    def _nll_hessian_block(self, params: Sequence[Parameter]) -> list[int]:
        return self._coupling_block(params) if self.cache and self.is_coherent_sum else []

    def nll_hessian(self, data: Data, params: Sequence[Parameter]) -> tf.Tensor | None:
        r"""The exact Hessian of :math:`-\sum_i w_i \log p(x_i)` by ``params``, from the coherent sum's structure.

        About two passes over the data and the phase-space sample (amplitudes, then each moved
        group's value, first and second derivatives as one ``tf.function``), where differences of
        gradients cost one gradient per parameter.

        Parameters
        ----------
        data : zcache.Data
            The events (their weights count).
        params : sequence of Parameter
            The parameters, in the Hessian's order.

        Returns
        -------
        tf.Tensor or None
            float64 (n, n); None where :meth:`zcache.models.Model.supports_nll_hessian` is False.

        Examples
        --------
        >>> import numpy as np, sympy as sp, zcache
        >>> from zcache.symbolic import SymbolicModel
        >>> from zcache.loss import UnbinnedNLL
        >>> x, m, c1, c2 = sp.symbols("x m c1 c2")
        >>> ps = {"x": np.linspace(0.0, 2.0, 201)}
        >>> model = SymbolicModel(sp.Abs(c1 / (m**2 - x**2 - 0.1j) + c2 * x) ** 2, {m: 1.0, c1: 1 + 0j, c2: 0.3 + 0.1j},
        ...                       ["x"], ps, floating=["m", "c2"])
        >>> data = model.to_data({"x": np.linspace(0.1, 1.9, 50)})
        >>> params = model.get_params()
        >>> [p.name for p in params]
        ['m', 'c2_re', 'c2_im']
        >>> model.nll_hessian_block(params)  # the coupling's parts: their block needs no derivative of a line shape
        [1, 2]
        >>> h = model.nll_hessian(data, params).numpy()
        >>> loss = UnbinnedNLL(model, data)      # against central differences of its exact gradient
        >>> d = loss.hessian_at([float(p) for p in params], params, exact=False).numpy()
        >>> bool(np.abs(h - d).max() < 1e-6 * np.abs(d).max())
        True
        """
        if not (isinstance(data, Data) and self.supports_nll_hessian(params)):
            return None
        return self.coherent_nll_hessian(data, self.phasespace, params)

    def _coupling_parameters(self, k: int) -> list[Parameter] | None:
        coupling = self.couplings[k]
        return list(coupling.params) if isinstance(coupling, ComplexParameter) else None

    def _coupling_derivatives(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        return coupling_derivatives(self.couplings)

    def _line_symbols(self, g: int, params: Sequence[Parameter]) -> tuple[Any, ...]:
        by_id = {obj.node_id: s for s, obj in self.symbol_params.items() if isinstance(obj, Parameter)}
        return tuple(by_id[p.node_id] for p in params)

    def _group_jets_supported(self, g: int, params: Sequence[Parameter]) -> bool:
        roots = [t[c] for t in self._terms for c in self._groups[g][1] if c in t]
        return self._translator.has_jets(roots, set(self._line_symbols(g, params)))

    def _group_jets(self, g: int, data: Data, w: tf.Tensor, c: tf.Tensor,
                    params: Sequence[Parameter]) -> tuple[tf.Tensor, ...]:
        symbols, _ = self._group_program(g)
        program = self._jet_program(g, self._line_symbols(g, params))
        values = [self.symbol_params[s].value() for s in symbols]
        return run_program(self._program_calls, id(program), program, self._data_stack(data), self._events(data), values,
                           c, w)

    def _jet_program(self, g: int, diff: tuple[Any, ...]) -> Any:
        """Group ``g``'s columns, first and second derivatives by ``diff``, contracted (one ``tf.function`` per group)."""
        key = (g, diff)
        found = self._jet_programs.get(key)
        if found is not None:
            return found
        symbols, _ = self._group_program(g)
        couplings = self._groups[g][1]
        n_h, n_k, n_l = len(self._terms), len(couplings), len(diff)
        pair_list = jets_.pairs(n_l)
        signature = [*self._program_signature([tf.TensorSpec([], tf.float64)] * len(symbols)),
                     tf.TensorSpec([n_k], tf.complex128), tf.TensorSpec([n_h, None], tf.complex128)]

        def jets(stack: tf.Tensor, events: tf.Tensor, values: list[tf.Tensor], c: tf.Tensor,
                 w: tf.Tensor) -> tuple[tf.Tensor, ...]:
            memo: dict[Any, Any] = {_STACK: stack, **dict(zip(symbols, values, strict=True))}
            data = self._named_columns(events)
            index = {s: j for j, s in enumerate(diff)}
            like = tf.zeros_like(events[:, 0], tf.complex128)
            cs, ws = tf.unstack(c, n_k), tf.unstack(w, n_h)
            memo_jets: dict[Any, jets_.Jet] = {}
            rows, d_rows, t, u = [], [[like] * n_h for _ in range(n_l)], [[0.0] * n_l for _ in range(n_k)], [0.0] * len(pair_list)
            for h, term in enumerate(self._terms):
                for k, coupling in enumerate(couplings):
                    a = term.get(coupling)
                    if a is None:
                        rows.append(like)
                        continue
                    jet = self._translator.jet(a, data, memo, memo_jets, index)
                    rows.append(jets_.dense(jet.v, like))
                    for j in range(n_l):
                        if jet.d[j] is not None:
                            da = jets_.dense(jet.d[j], like)
                            d_rows[j][h] = d_rows[j][h] + cs[k] * da
                            t[k][j] = t[k][j] + tf.reduce_sum(ws[h] * da)
                    for p in range(len(pair_list)):
                        if jet.dd[p] is not None:
                            u[p] = u[p] + tf.reduce_sum(ws[h] * cs[k] * jets_.dense(jet.dd[p], like))
            zero = tf.zeros([], tf.complex128)
            as_tensor = lambda v: v if isinstance(v, tf.Tensor) else zero  # noqa: E731
            return (tf.reshape(tf.stack(rows), [n_h, n_k, -1]), tf.stack([tf.stack(r) for r in d_rows]),
                    tf.stack([tf.stack([as_tensor(v) for v in row]) for row in t]),
                    tf.stack([as_tensor(v) for v in u]))

        found = self._jet_programs[key] = tf.function(jets, input_signature=signature, autograph=False)
        return found

    # -- the translator's caches (the model's, so that caches_of and invalidate_caches see them) --
    @cached(name=lambda self, data: f"data-only sub-expressions[{data.name}]")
    def _data_stack(self, data: Data) -> tf.Tensor:
        return self._stack_program()([self.column(name, data) for name in self.space.obs])

    def _stack_program(self) -> Any:
        """The data-only sub-expressions as one ``tf.function`` of the columns, traced once for every dataset."""
        program = self._stack_fn
        if program is None:
            obs = list(self.space.obs)

            def stack(columns: list[tf.Tensor]) -> tf.Tensor:
                return self._translator.stack(dict(zip(obs, columns, strict=True)))

            signature = [[tf.TensorSpec([None], tf.float64) for _ in obs]]
            program = self._stack_fn = tf.function(stack, input_signature=signature, autograph=False)
        return program

    @cached(name=lambda self, data: f"intensity[{data.name}]")
    def _cached_root(self, data: Data) -> tf.Tensor:
        return self._translator.value(self._root, data, {})

    def coupling_vector(self) -> tf.Tensor:
        """:math:`c`, the couplings of the coherent sum, in the order of ``couplings``.

        Returns
        -------
        tf.Tensor
            complex128, shape (K,).

        Raises
        ------
        SymbolicError
            The intensity is not a coherent sum.
        """
        self._require_coherent("coupling_vector")
        return tf.stack([c.value() for c in self.couplings])

    def _require_coherent(self, what: str) -> None:
        if not self.is_coherent_sum:
            raise SymbolicError(f"{what}: the intensity of '{self.name}' is not a coherent sum of couplings x amplitudes.")

    def intensity(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        r"""The unnormalized intensity :math:`I(x_i)` of each event.

        Parameters
        ----------
        data : zcache.Data or array_like
            Events: a Data (cached per dataset) or an (N, n_obs) array in the space's order.
        raw : bool, optional
            ``False`` (default): one row per event (the padding rows of padded data,
            ``capacity=``, left out: :meth:`zcache.Data.unpadded`). ``True``: one row per row of
            ``data.value()``, padding included, what the models and losses compute on (as
            :meth:`zcache.models.Model.pdf`'s ``raw``).

        Returns
        -------
        tf.Tensor
            float64, shape (N,).
        """
        if not isinstance(data, Data):
            data = tf.convert_to_tensor(data, tf.float64)
        if self.is_coherent_sum:
            return super().intensity(data, raw=raw)
        tr = self._translator
        if self.cache and isinstance(data, Data) and tr.inputs(self._root) - {_DATA}:
            out = self._cached_root(data)
        else:
            out = tr.value(self._root, data, {})
        out = xla_ops.real(out) if _is_complex(out) else out
        rows = _tensor(out, False) + tf.zeros_like(self.column(self.space.obs[0], data))
        return rows if raw or not isinstance(data, Data) else data.unpadded(rows)

    # -- normalization ------------------------------------------------------------------
    def integral_matrix(self, mc: Data | None = None) -> tf.Tensor:
        r""":math:`I_{jk} = \sum_h \langle A_{jh} A_{kh}^* \rangle_{MC}`, Hermitian (K, K).

        Cached per block of coupling groups (a changed line shape recomputes its group's
        blocks only), and as a whole.

        Parameters
        ----------
        mc : zcache.Data, optional
            The integration sample; default the model's phase-space sample.

        Returns
        -------
        tf.Tensor
            complex128, shape (K, K).

        Raises
        ------
        SymbolicError
            The intensity is not a coherent sum.
        """
        self._require_coherent("integral_matrix")
        return super().integral_matrix(self.phasespace if mc is None else mc)

    def normalization(self) -> tf.Tensor:
        r""":math:`V \langle I \rangle_{MC}`: :math:`V\,\mathrm{Re}(c^T I c^*)` for a coherent sum.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        return self._cached_normalization() if self.cache else self._norm()

    @cached(name=lambda self: f"{self.name}.normalization")
    def _cached_normalization(self) -> tf.Tensor:
        return self._norm()

    def _norm(self) -> tf.Tensor:
        if not self.is_coherent_sum:
            return self.phasespace_volume * tf.reduce_mean(self.intensity(self.phasespace, raw=True))
        return self.phasespace_volume * self.norm(self.phasespace)

    def fit_fractions(self) -> dict[str, float]:
        r"""Fit fractions :math:`|c_k|^2 I_{kk} / c^T I c^*` per coupling, at the current values.

        Returns
        -------
        dict of str to float
            Coupling symbol name -> fraction.

        Raises
        ------
        SymbolicError
            The intensity is not a coherent sum.
        """
        fractions = self.fractions(self.phasespace)
        return {cp.name: float(f) for cp, f in zip(self.couplings, fractions, strict=True)}

    def fit_fractions_with_errors(self, result: Any = None) -> FitFractions:
        r"""Fit fractions per component (resonance) and interference terms per pair, with errors.

        :func:`zcache.fractions.fit_fractions_with_errors` over the model's phase-space sample, at
        the current parameter values (after a fit: the minimum); components are the coupling
        groups, labelled by :attr:`component_names`.

        Parameters
        ----------
        result : zcache.minimize.FitResult, optional
            The fit whose covariance gives the errors; without it the errors are NaN.

        Returns
        -------
        zcache.fractions.FitFractions

        Raises
        ------
        ModelError
            The intensity is not a coherent sum (a :class:`zcache.exceptions.SymbolicError`).
        FitError
            ``result`` has no covariance or fitted none of this model's parameters.
        """
        return fit_fractions_with_errors(self, self.phasespace, result)

    @property
    def component_names(self) -> list[str]:
        r"""One label per coupling group (component), in the order of :attr:`coupling_groups`.

        A group of one coupling is named by the coupling; a group of several (one resonance's
        helicity couplings) by what most of its line-shape parameter names share after their
        first underscore (``m_{K^{*}(892)^{0}}``, ``\Gamma_{K^{*}(892)^{0}}`` -> ``K^{*}(892)^{0}``),
        else by its couplings joined with ``+``. Repeated labels get `` (group g)`` appended.
        Empty when the intensity is not a coherent sum.
        """
        labels = [_group_label(params, couplings) for params, couplings in self.coupling_groups]
        return [f"{label} (group {g})" if labels.count(label) > 1 else label for g, label in enumerate(labels)]

    # -- Model hooks ---------------------------------------------------------------------
    def _pdf(self, data: Any) -> tf.Tensor:
        return self.intensity(data, raw=True) / self.normalization()

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return self.intensity(tf.reshape(x, [-1, self.space.n_obs]), raw=True)

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        if tuple(lower) == self.space.lower and tuple(upper) == self.space.upper:
            return self._norm()
        return self.phasespace_volume * box_mean(self.space.select(self.phasespace), self.intensity(self.phasespace, raw=True),
                                                 lower, upper)

    def sum_log_pdf(self, data: Any) -> tf.Tensor:
        r""":math:`\sum_i \log I(x_i) - N \log(V\langle I\rangle_{MC})`.

        Parameters
        ----------
        data : zcache.Data or array_like
            The events.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        return sum_log_normalized(self.intensity(data, raw=True), data, self.normalization())

    @property
    def coupling_groups(self) -> list[tuple[list[str], list[str]]]:
        """The coherent sum's groups: (names of the parameters their amplitudes read, names of the couplings).

        Empty when the intensity is not a coherent sum. Each group's amplitudes are one cache per
        dataset, and each pair of groups one block of the integral matrix.
        """
        if not self.is_coherent_sum:
            return []
        return [(sorted(s.name for s in key), [c.name for c in cs]) for key, cs in self._groups]

    @property
    def fused_groups(self) -> list[int]:
        """Indices into :attr:`coupling_groups` of the groups whose programs are fused (see ``fused``).

        A group's program is chosen when it is first built (the first evaluation that needs it),
        so this lists the groups built so far. A group fixed then and floated later stays plain
        (exact all the same); build a new model with ``fused=True`` to fuse it.
        """
        return sorted(self._fused_groups)

    @property
    def node_caches(self) -> list[CachedTensor]:
        """Every cache the bridge has built so far (sub-expressions, group matrices, integrals, normalization).

        They are the model's own caches (``zcache._engine.cachable.caches_of`` lists them with the
        ``pdf`` caches every model has).
        """
        bridge = (self._data_stack, self._cached_root, self._cached_group, self._cached_block,
                  self._cached_integral_matrix, self._cached_normalization)
        return caches_of(self, methods=bridge)

    def sample(self, n: int | None = None, data: Data | None = None) -> Data:
        r"""Draw ``n`` independent events of the density :math:`I` (extended: ``n=None`` draws a Poisson number).

        With a ``generator`` (see :class:`SymbolicModel`): accept-reject on fresh phase-space
        events, under an envelope of 1.25 times the largest intensity over the phase-space
        sample, raised (and the sample restarted) when a fresh event exceeds it. Without one:
        accept-reject on the phase-space sample itself, each of its events kept with
        probability :math:`I/\max I` and used at most once per sample
        (:func:`zcache.sampling.accept_reject_pool`), so a sample holds no repeated event;
        about :math:`N \langle I\rangle / \max I` of its :math:`N` events are usable, and two
        samples (two toys) drawn from one phase-space sample share events: give toy studies a
        generator. Traced once (identifier 'sample'); seeded by :func:`zcache.sampling.set_seed`.

        Parameters
        ----------
        n : int, optional
            Number of events (``None``: extended models draw a Poisson number).
        data : zcache.Data, optional
            Filled in place (``set_data``) instead of a new Data.

        Returns
        -------
        zcache.Data
            The events (``data`` itself if given).

        Raises
        ------
        SymbolicError
            Without a generator: the phase-space sample accepts fewer than ``n`` events (the
            message gives its acceptance and the size it needs); ``data`` is unchanged.
        ModelError
            ``n`` is not a whole number >= 1, or the intensity is not finite or exceeds every
            raised envelope.

        Examples
        --------
        >>> import numpy as np, sympy as sp, zcache
        >>> from zcache.symbolic import SymbolicModel
        >>> x, a = sp.symbols("x a")
        >>> pool = np.random.default_rng(0).uniform(0.0, 1.0, 20_000)
        >>> model = SymbolicModel(1 + a * x, {a: 1.0}, ["x"], {"x": pool})
        >>> zcache.sampling.set_seed(1)
        >>> events = model.sample(5000).numpy()
        >>> len(np.unique(events)), bool(abs(events.mean() - 5 / 9) < 0.01)     # E[x] = 5/9
        (5000, True)
        """
        try:
            return super().sample(n, data)
        except SymbolicError as err:
            if self.generator is not None or _POOL_TOO_SMALL not in str(err):
                raise
            raise SymbolicError(self._pool_message(n)) from None

    def _pool_message(self, n: int | None) -> str:
        weights = self.intensity(self.phasespace, raw=True).numpy()
        size = weights.size
        acceptance = float(weights.mean() / weights.max()) if size and weights.max() > 0 else 0.0
        asked = "the events asked" if n is None else f"{int(n)} events"
        need = "" if n is None or acceptance <= 0.0 else f" (at least {math.ceil(1.2 * int(n) / acceptance)} events)"
        return (
            f"sampling '{self.name}': {_POOL_TOO_SMALL} for {asked}. Without a generator the sample is "
            f"drawn from the phase-space sample '{self.phasespace.name}' without replacement (repeated "
            f"events would make a toy's variance wrong): each of its {size} events is kept with "
            f"probability I / max I, about {acceptance:.3g} of them at these parameter values, "
            f"{acceptance * size:.0f} events. Give a larger phase-space sample{need}, or generator= "
            "(fresh phase-space events) to the model."
        )

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        weights = self.intensity(self.phasespace, raw=True)
        if self.generator is None:
            # each phase-space event at most once: an independent sample, or a named error
            idx = accept_reject_pool(n, weights, f"sampling '{self.name}': {_POOL_TOO_SMALL}.", SymbolicError)
            return tf.gather(self.space.select(self.phasespace), idx)
        obs = list(self.space.obs)
        envelope = _ENVELOPE_SAFETY * tf.reduce_max(weights)
        return accept_reject(
            n, [0.0] * len(obs), [1.0] * len(obs), lambda x: self.intensity(x, raw=True), envelope,
            propose=self._propose,
            raise_factor=_ENVELOPE_SAFETY,
            max_raises=_ENVELOPE_RAISES,
            nonfinite_message=f"sampling '{self.name}': its intensity is NaN or infinite at generated events.",
            over_message=(
                f"sampling '{self.name}': the intensity of generated events exceeded the envelope "
                f"({_ENVELOPE_SAFETY:g} x the largest value seen) {_ENVELOPE_RAISES + 1} times in one sample; "
                "the phase-space sample misses the intensity's peaks: give a larger one."
            ),
        )

    def _propose(self, size: tf.Tensor) -> tf.Tensor:
        """``size`` fresh phase-space events from the generator, (size, n_obs) in the space's order."""
        columns = self.generator(size)
        missing = [u for u in self.space.obs if u not in columns]
        if missing:
            raise SymbolicError(f"generator= of '{self.name}' returned no column '{missing[0]}' "
                                f"(it must return every data column read: {list(self.space.obs)}).")
        return tf.stack([tf.reshape(tf.cast(columns[u], tf.float64), [-1]) for u in self.space.obs], axis=1)


def _group_label(params: Sequence[str], couplings: Sequence[str]) -> str:
    """A component's label: its coupling, or the resonance its parameter names share (see ``component_names``)."""
    if len(couplings) == 1:
        return couplings[0]
    parts = [n.split("_", 1)[1] for n in params if "_" in n]
    counts = sorted(((parts.count(p), p) for p in set(parts)), reverse=True)
    if counts and counts[0][0] >= 2 and (len(counts) == 1 or counts[1][0] < counts[0][0]):
        label = counts[0][1]
        return label[1:-1] if label.startswith("{") and label.endswith("}") else label
    return " + ".join(couplings)


def _refuse_unknown(names: Iterable[str], known: Iterable[str], where: str, what: str) -> None:
    """SymbolicError for the first name of ``names`` not in ``known``, naming its close matches."""
    known = sorted(known)
    unknown = sorted(set(names) - set(known))
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], known, n=3, cutoff=0.6)
    hint = f" Close matches: {', '.join(repr(c) for c in close)}." if close else ""
    raise SymbolicError(f"{where} names '{unknown[0]}', which is not {what}.{hint}")


def _is_complex_value(value: Any) -> bool:
    if isinstance(value, ComplexParameter):
        return True
    if isinstance(value, Parameter):
        return False
    if isinstance(value, Mapping):
        value = value.get("value")
    return isinstance(value, complex) or (hasattr(value, "is_real") and value.is_real is False)


def _make_parameter(name: str, value: Any) -> Any:
    if isinstance(value, (Parameter, ComplexParameter)):
        return value
    spec = dict(value) if isinstance(value, Mapping) else {"value": value}
    unknown = sorted(set(spec) - {"value", "lower", "upper", "floating"})
    if unknown:
        raise SymbolicError(f"parameter '{name}': unknown key '{unknown[0]}' (value, lower, upper, floating).")
    number = spec["value"]
    if _is_complex_value(spec):
        return ComplexParameter(name, complex(number), polar=False, floating=bool(spec.get("floating", True)))
    try:
        number = float(number)
    except (TypeError, ValueError) as err:
        raise SymbolicError(f"parameter '{name}': the value must be a number, got {number!r}.") from err
    if not math.isfinite(number):
        raise SymbolicError(f"parameter '{name}': the value must be finite, got {number!r}.")
    return Parameter(name, number, lower=spec.get("lower"), upper=spec.get("upper"),
                     floating=bool(spec.get("floating", False)))


def from_helicity_model(model: Any, phasespace: Any, *, expression: Any = None, parameters: Mapping[Any, Any] | None = None,
                        floating: Iterable[Any] | None = None, name: str | None = None, cache: bool = True,
                        generator: Any = "auto", **kwargs: Any) -> SymbolicModel:
    r"""A :class:`SymbolicModel` from an ampform ``HelicityModel``, with its kinematics.

    Parameters are ``model.parameter_defaults`` (complex couplings: real and imaginary part),
    updated by ``parameters``; masses (``m_{...}``) and widths (``\Gamma_{...}``) get a lower
    limit of 0 unless given one (a negative value then raises ParameterValueError). By default
    the couplings float except the first one.

    The data columns are the keys of ``model.kinematic_variables``, sorted by name (the model's
    ``space.obs``). The model's
    ``SymbolicModel.kinematics`` (a :class:`zcache.kinematics.HelicityKinematics`) computes
    them from four-momenta with ampform's own expressions, for the phase-space sample and for
    :meth:`~SymbolicModel.to_data` alike, so that data, phase space and generated events go
    through one path; columns computed elsewhere (tensorwaves' ``SympyDataTransformer``) are
    accepted too.

    Sampling draws independent events. The rule for the default ``generator="auto"``: the
    density is relative to the phase-space sample, so fresh events must follow its
    distribution. When the bridge drew the phase-space sample itself (``phasespace`` a number of
    events) or was given four-momenta of the reaction's phase space (parent mass and rest frame,
    final-state masses: checked), and the reaction is a three-body decay, generated events are
    fresh phase space (:func:`phasespace_generator`); four-momenta of another phase space raise
    (say ``generator=None`` or give your own). Columns computed elsewhere, or a reaction that is
    not three-body, keep drawing from the phase-space sample without replacement (see
    :meth:`SymbolicModel.sample`; a sample it cannot fill raises): the bridge cannot tell what
    distribution they follow.

    Parameters
    ----------
    model : ampform.helicity.HelicityModel
        The model.
    phasespace : int, four-momenta, zcache.Data or mapping of str to array_like
        The phase-space sample: a number of fresh uniform phase-space events to draw (three-body
        decays; from :func:`zcache.sampling.rng`, so :func:`zcache.sampling.set_seed` reproduces
        them), four-momenta (``{"p0": (n, 4), "p1": ..., ...}``, ampform's names, or a sequence
        of (n, 4) arrays (E, px, py, pz) in final-state order, in the parent's rest frame), or
        the kinematic columns.
    expression : sympy.Expr, optional
        ``model.expression.doit()`` when already computed (it takes seconds for large models).
    parameters : mapping, optional
        Overrides of ``parameter_defaults`` (see :class:`SymbolicModel`).
    floating : iterable of sympy.Symbol or str, optional
        The floating parameters (see :class:`SymbolicModel`).
    name : str, optional
        A label.
    cache : bool
        ``False``: no caches (a reference).
    generator : "auto", "phasespace", callable or None
        ``"auto"``: the rule above. ``"phasespace"``: fresh phase space
        (:func:`phasespace_generator`) whatever the phase-space sample is (you say that your
        columns are uniform phase space). A callable: fresh events of your own (see
        :class:`SymbolicModel`). ``None``: draw from the phase-space sample without replacement.
    **kwargs
        Passed to :class:`SymbolicModel` (``phasespace_volume``, ``limits``, ``extended``).

    Returns
    -------
    SymbolicModel

    Raises
    ------
    SymbolicError
        A name in ``parameters`` or ``floating`` that is not a parameter of the model (close
        matches named); four-momenta that miss a particle, are not (n, 4) or not finite;
        four-momenta that are not the reaction's phase space with ``generator="auto"``; a number
        of events, or ``generator="phasespace"``, for a reaction that is not a three-body decay;
        and as :class:`SymbolicModel`.
    ParameterValueError
        A negative mass or width (outside the limits given).

    Examples
    --------
    >>> import ampform, numpy as np, qrules, zcache
    >>> from zcache.symbolic import from_helicity_model
    >>> reaction = qrules.generate_transitions(
    ...     initial_state="D0", final_state=["K-", "pi+", "pi0"], formalism="helicity",
    ...     allowed_intermediate_particles=["K*(892)0", "rho(770)+"], allowed_interaction_types=["strong", "weak"])
    >>> model = ampform.get_builder(reaction).formulate()
    >>> zcache.sampling.set_seed(0)
    >>> bridged = from_helicity_model(model, 5000)           # 5000 fresh phase-space events
    >>> bridged.is_coherent_sum, len(bridged.couplings), bridged.space.obs
    (True, 2, ('theta_0^01', 'theta_1^12'))
    >>> momenta = bridged.kinematics.sample_momenta(200)   # or your data's four-momenta
    >>> data = bridged.to_data(momenta)                     # columns by ampform's kinematics
    >>> events = bridged.sample(8000)                       # fresh phase space: more than the 5000
    >>> data.nevents, events.nevents, len({tuple(row) for row in events.numpy()})
    (200, 8000, 8000)

    Columns computed elsewhere are taken as they are (and sampled from without replacement):

    >>> rng = np.random.default_rng(0)
    >>> columns = {"theta_0^01": np.arccos(rng.uniform(-1, 1, 2000)), "theta_1^12": np.arccos(rng.uniform(-1, 1, 2000))}
    >>> from_helicity_model(model, columns).generator is None
    True
    """
    kinematics = HelicityKinematics(model)
    phasespace, generator = _phasespace_and_generator(kinematics, phasespace, generator)
    expr = model.expression.doit() if expression is None else expression
    read = {s.name for s in expr.free_symbols}
    values: dict[str, Any] = {}
    for symbol, value in model.parameter_defaults.items():
        values[symbol.name] = complex(value) if isinstance(value, complex) else float(value)
    overrides = {(k.name if hasattr(k, "name") else str(k)): v for k, v in (parameters or {}).items()}
    # a misspelt name would otherwise leave its parameter at the default, silently
    _refuse_unknown(overrides, values, "parameters=", "a parameter of the model")
    values = {key: _with_physical_limit(key, overrides.get(key, value)) for key, value in values.items()}
    if floating is not None:
        floating = [f.name if hasattr(f, "name") else str(f) for f in floating]
        _refuse_unknown(floating, values, "floating=", "a parameter of the model")
        floating = [f for f in floating if f in read]
    # parameters the expression does not read (e.g. the meson radius of a spin-0 resonance)
    values = {k: v for k, v in values.items() if k in read}
    # sorted (kinematics.names): ampform's kinematic_variables come out in an order that changes with Python's
    # string hashing (PYTHONHASHSEED), and the columns' order is the group programs' argument order: unsorted,
    # each new process traced other XLA programs and missed the compile cache (every first call compiled again)
    return SymbolicModel(expr, values, list(kinematics.names), phasespace,
                         floating=floating, name=name or "HelicityModel", cache=cache, doit=False,
                         generator=generator, kinematics=kinematics, **kwargs)


def _phasespace_and_generator(kinematics: HelicityKinematics, phasespace: Any, generator: Any) -> tuple[Any, Any]:
    """The phase-space sample's columns and the generator, by from_helicity_model's rule."""
    if isinstance(generator, str) and generator not in ("auto", "phasespace"):
        raise SymbolicError(f"generator= must be 'auto', 'phasespace', a callable n -> columns or None, "
                            f"got {generator!r}.")
    why_not = "the phase-space sample is kinematic columns computed outside the bridge"
    if isinstance(phasespace, Integral) and not isinstance(phasespace, bool):
        if not kinematics.is_three_body:
            raise SymbolicError(f"phasespace={phasespace!r}: a number of fresh phase-space events is drawn for "
                                f"three-body decays only; this reaction's final state is {list(kinematics.momenta)}. "
                                "Give four-momenta or kinematic columns.")
        phasespace = kinematics.columns(kinematics.sample_momenta(int(phasespace)), "the phase-space sample")
        why_not = None
    elif kinematics.is_momenta(phasespace):
        four = kinematics.four_momenta(phasespace, "the phase-space sample")
        phasespace = kinematics.columns(four, "the phase-space sample")
        why_not = kinematics.matches_reaction(four) if kinematics.is_three_body else "not a three-body decay"
        if why_not is not None and generator == "auto" and kinematics.is_three_body:
            raise SymbolicError(
                f"the phase-space four-momenta are not the reaction's phase space: {why_not}. Fresh events "
                "(generator='auto') would follow another distribution than the phase-space sample, to which "
                "the density is relative: give generator=None (draw from the phase-space sample without "
                "replacement) or a generator= of your own."
            )
    if generator == "phasespace" or (generator == "auto" and why_not is None):
        return phasespace, kinematics.generator()
    return phasespace, None if generator == "auto" else generator


def _with_physical_limit(name: str, value: Any) -> Any:
    r"""An ampform mass (``m_{...}``) or width (``\Gamma_{...}``) with lower limit 0 unless given one."""
    if not (name.startswith("m_{") or name.startswith("\\Gamma_{")):
        return value
    if isinstance(value, (Parameter, ComplexParameter)):
        return value
    spec = dict(value) if isinstance(value, Mapping) else {"value": value}
    if "lower" not in spec:
        spec["lower"] = 0.0
    return spec


def _real_column(values: Any, what: str) -> np.ndarray:
    """A column of an observable as float64: complex only with a zero imaginary part, else DataDtypeError.

    Columns computed with complex arithmetic (ampform's kinematic expressions, a tensorwaves data
    set) come as complex numbers whose imaginary part is 0 (or rounding): their real part is the
    observable. A larger imaginary part is not an observable's value: dropping it would fit other
    numbers than the user's without a word (issue 51).
    """
    arr = np.asarray(values.numpy() if hasattr(values, "numpy") and not isinstance(values, np.ndarray) else values)
    if arr.dtype.kind != "c":
        return real_numbers(arr, what).astype(np.float64)
    off = np.abs(arr.imag) > 1e-12 * np.maximum(np.abs(arr.real), 1.0)
    if off.any():
        raise DataDtypeError(
            f"{what} is complex with a non-zero imaginary part ({int(off.sum())} value(s), e.g. {arr[off][0]}): an "
            "observable is real. Take .real or abs() explicitly, or split it into two observables (two columns).")
    return arr.real.astype(np.float64)


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
