"""The exact Hessian of :class:`~._symbolic_model.SymbolicModel`'s coherent sum, from jets of its groups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from .._engine.compile_cache import run_program
from .._engine.data import Data
from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python
from . import _jets as jets_
from ._couplings import ComplexParameter, coupling_derivatives
from ._translator import STACK


class ExactHessian:
    """Mixin of :class:`~._symbolic_model.SymbolicModel`: the coherent-sum core's Hessian hooks."""

    def _supports_nll_hessian(self, params: Sequence[Parameter]) -> bool:
        return self.cache and self.is_coherent_sum and self._hessian_plan(params) is not None

    def _nll_hessian_block(self, params: Sequence[Parameter]) -> list[int]:
        return self._coupling_block(params) if self.cache and self.is_coherent_sum else []

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
            memo: dict[Any, Any] = {STACK: stack, **dict(zip(symbols, values, strict=True))}
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


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
