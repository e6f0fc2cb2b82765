"""The coupling groups' programs of :class:`~._symbolic_model.SymbolicModel` (the coherent-sum core's hooks).

Each group of amplitudes runs as one traced program of (data-only stack, events, parameter
values): a plain ``tf.function``, or fused XLA programs forward and backward (:mod:`._fused`).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from .._engine import xla_ops
from .._engine.compile_cache import run_program
from .._engine.context import substituting
from .._engine.data import Data
from .._engine.tf_internals import can_resume_recording, leave_to_python
from ._couplings import ComplexParameter
from ._fused import fused_program
from ._op_table import to_tensor
from ._translator import STACK


class GroupPrograms:
    """Mixin of :class:`~._symbolic_model.SymbolicModel`: each coupling group's amplitudes as one program."""

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

        # fused: XLA forward and backward programs (zcache.amplitude._fused); real parameters only (its
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
            # J/psi model's spin-2 group), a widened one once (its XLA backward program took less
            # than half the time: design/decisions/0009). Fused programs only: in plain
            # TensorFlow the parameter-only sub-expressions (m**2, m**7) would become kernels
            # over the events.
            zeros = tf.zeros_like(events[:, 0])
            values = [v + zeros for v in values]
        memo: dict[Any, Any] = {STACK: stack, **dict(zip(symbols, values, strict=True))}
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
                v = to_tensor(v, True)
                out.append(v + tf.zeros(n, tf.complex128) if v.shape.rank == 0 else v)
        if rows:
            return out
        return tf.reshape(tf.stack(out), [len(self._terms), len(couplings), -1])

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


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
