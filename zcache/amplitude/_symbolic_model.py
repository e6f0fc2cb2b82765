r"""A bridge from SymPy expressions (and ampform models) to cached zcache models.

``pip install zcache[sympy]``. Give :class:`SymbolicModel` an intensity written in SymPy, the
symbols that are parameters (with values) and the symbols that are data columns, and a
phase-space sample; it builds a :class:`zcache.models.Model` whose caches sit where the
expression's inputs change. :func:`from_helicity_model` does the same for an ampform
``HelicityModel``, with its kinematics: it takes four-momenta (or a number of fresh phase-space
events to draw) and computes the kinematic columns with ampform's own expressions
(:class:`zcache.amplitude.HelicityKinematics`, the model's ``kinematics``), for the phase-space
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
  (the coherent-sum core that :class:`zcache.amplitude.CoherentSum` builds on too; the bridge
  gives it the translated amplitudes and their grouping);
- every cache is the model's own (``@zcache.cached`` methods): ``invalidate_caches()`` reaches them;
- **anything else** is normalized by the mean of the intensity over the phase-space sample,
  cached per dataset until a parameter changes (``SymbolicModel.is_coherent_sum`` says
  which was found); sub-expressions over parameters only are scalars, recomputed inline.

Complex parameters (those with a complex value: ampform's couplings) become two real
parameters, real and imaginary part (:class:`zcache.amplitude.ComplexParameter` with
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
>>> from zcache.amplitude import SymbolicModel
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

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine import xla_ops
from .._engine.cachable import cached, caches_of
from .._engine.cached_tensor import CachedTensor, once_per_evaluation
from .._engine.data import Data
from .._engine.parameter import Parameter
from .._engine.tables import real_numbers
from .._engine.tf_internals import leave_to_python
from ..exceptions import DataDtypeError, SymbolicError
from ..models import Model, Space, accept_reject, accept_reject_pool
from ._coherent import CoherentIntensity, box_mean, sum_log_normalized
from ._couplings import ComplexParameter
from ._fractions import FitFractions, fit_fractions_with_errors
from ._kinematics import HelicityKinematics
from ._op_table import is_complex, load_sympy, to_tensor
from ._symbolic_hessian import ExactHessian
from ._symbolic_programs import GroupPrograms
from ._translator import DATA, Translator

# sampling with a generator: the envelope is this times the largest intensity over the
# phase-space sample, raised (and the sample restarted) up to _ENVELOPE_RAISES times when a
# fresh event exceeds it
_ENVELOPE_SAFETY, _ENVELOPE_RAISES = 1.25, 16
# the start of the in-graph message of a pool that accepts too few events (sample() adds numbers)
_POOL_TOO_SMALL = "too few phase-space events accepted"

__all__ = ["SymbolicModel"]


# ---------------------------------------------------------------------------------------
# the coherent-sum structure
# ---------------------------------------------------------------------------------------
def _coherent_terms(expression: Any, couplings: set[Any]) -> list[dict[Any, Any]] | None:
    r"""``[{c_k: A_kh}]`` per :math:`h` when ``expression`` is :math:`\sum_h |\sum_k c_k A_{kh}|^2`, else None."""
    sp = load_sympy()
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
class SymbolicModel(GroupPrograms, ExactHessian, Model, CoherentIntensity):
    r"""A zcache model from a SymPy intensity: caches where the inputs change (see the module docstring).

    Parameters
    ----------
    expression : sympy.Expr
        The (unnormalized) intensity, real and non-negative; unevaluated classes (ampform's)
        are evaluated with ``.doit()`` unless ``doit=False``.
    parameters : mapping
        Symbol (or its name) -> its value (a number; a complex number makes a complex
        parameter), a ``dict(value=..., lower=..., upper=..., floating=...)``, a
        :class:`zcache.Parameter` or a :class:`zcache.amplitude.ComplexParameter` (used as is).
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
        :func:`zcache.models.rng` (so that :func:`zcache.models.set_seed` reproduces them and the
        sampler traces). With it :meth:`sample` draws fresh events by accept-reject; without
        it, from the phase-space sample without replacement (see :meth:`sample`).
    kinematics : zcache.amplitude.HelicityKinematics, optional
        Turns four-momenta into the data columns: ``phasespace`` and :meth:`to_data` then accept
        four-momenta too (:func:`from_helicity_model` gives it).
    fused : bool or "auto"
        How each group's amplitudes run. ``False``: one plain ``tf.function``. ``True``: one XLA
        program forward and one that recomputes and differentiates them backward
        (:mod:`zcache.amplitude._fused`), with exact first and second derivatives; nothing but the
        inputs is kept for the backward pass. ``"auto"`` (default): fused for a group with a
        floating parameter when its program is first built (the first evaluation), plain for a
        group whose line shapes are fixed (computed once and cached: XLA's compile would cost
        about a second and save nothing). With floating line shapes the fused programs make first
        fits faster and use less peak memory than plain ones (measurements in
        ``benchmarks/RESULTS.md``, "Fused line shapes: fits"). :attr:`fused_groups` says which
        groups are fused.

    Raises
    ------
    SymbolicError
        An unsupported SymPy function, a free symbol that is neither parameter nor data, a
        parameter that is also a data column, a parameter name the expression does not hold
        (close matches named), or a phase-space sample without a needed column.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from zcache.amplitude import SymbolicModel
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
        sp = load_sympy()
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
        refuse_unknown(by_name, symbols, "parameters=", "a symbol of the expression")
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
            self._translator = Translator([expression], self.symbol_params, data_symbols, self, self.cache)
            self._root = self._translator.roots[0]
            return
        # a coherent sum: couplings grouped by the parameters of their amplitudes
        self._helicities = len(terms)
        translator = Translator([a for t in terms for a in t.values()], self.symbol_params, data_symbols, self,
                                 self.cache)
        self._translator = translator
        regrouped = [{c: translator.regroup(a) for c, a in t.items()} for t in terms]
        keys: dict[Any, frozenset] = {}
        for t in regrouped:
            for c, a in t.items():
                keys[c] = keys.get(c, frozenset()) | (translator.inputs(a) - {DATA})
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
        return Data(np.stack([real_column(sample[u], f"the {what} sample's column '{u}'") for u in used], axis=1),
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
            refuse_unknown(names, by_name, "floating=", "a parameter")
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
        the slices are read in the loops that use them; sliced outside, each column was a strided
        copy per dataset and call. Reordered (a Data whose columns are in another order, or more of
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

    # -- the exact Hessian (its hooks: ExactHessian) ------------------------------------------------------
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
        >>> from zcache.amplitude import SymbolicModel
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

    # -- the translator's caches (the model's, so that caches_of and invalidate_caches see them) --
    @cached(name=lambda self, data: f"data-only sub-expressions[{data.name}]")
    def _data_stack(self, data: Data) -> tf.Tensor:
        return self._stack_program()([self.column(name, data) for name in self.space.obs])


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
        if self.cache and isinstance(data, Data) and tr.inputs(self._root) - {DATA}:
            out = self._cached_root(data)
        else:
            out = tr.value(self._root, data, {})
        out = xla_ops.real(out) if is_complex(out) else out
        rows = to_tensor(out, False) + tf.zeros_like(self.column(self.space.obs[0], data))
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

        :func:`zcache.amplitude.fit_fractions_with_errors` over the model's phase-space sample, at
        the current parameter values (after a fit: the minimum); components are the coupling
        groups, labelled by :attr:`component_names`.

        Parameters
        ----------
        result : zcache.minimize.FitResult, optional
            The fit whose covariance gives the errors; without it the errors are NaN.

        Returns
        -------
        zcache.amplitude.FitFractions

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
        (:func:`zcache.models.accept_reject_pool`), so a sample holds no repeated event;
        about :math:`N \langle I\rangle / \max I` of its :math:`N` events are usable, and two
        samples (two toys) drawn from one phase-space sample share events: give toy studies a
        generator. Traced once (identifier 'sample'); seeded by :func:`zcache.models.set_seed`.

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
        >>> from zcache.amplitude import SymbolicModel
        >>> x, a = sp.symbols("x a")
        >>> pool = np.random.default_rng(0).uniform(0.0, 1.0, 20_000)
        >>> model = SymbolicModel(1 + a * x, {a: 1.0}, ["x"], {"x": pool})
        >>> zcache.models.set_seed(1)
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


def refuse_unknown(names: Iterable[str], known: Iterable[str], where: str, what: str) -> None:
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


def real_column(values: Any, what: str) -> np.ndarray:
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
