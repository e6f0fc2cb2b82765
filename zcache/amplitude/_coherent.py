r"""The coherent-sum core of the fitting layer: :math:`I(x) = \sum_h |\sum_k c_k A_{kh}(x)|^2` and its integrals.

One implementation of the maths that :class:`zcache.amplitude.CoherentSum` (hand-built
resonances, one helicity) and :class:`zcache.amplitude.SymbolicModel` (a SymPy / ampform
intensity, :math:`H` helicity terms) share. The couplings :math:`c_k` are complex; the
coupling-free amplitudes :math:`A_{kh}` come in **groups** (the couplings whose amplitudes read
the same parameters: one resonance's line shape), each group a complex tensor of shape
:math:`(H, K_g, N)` per dataset (the events innermost: XLA's fused group programs write each
amplitude as one contiguous row, and the integrals are products over the events axis). What the
core owns, and caches (as ``@zcache.cached`` methods of the model itself, so that
:func:`zcache._engine.cachable.caches_of` lists them and ``invalidate_caches`` reaches them):

- each group's amplitude columns per :class:`zcache.Data` (unless the subclass's amplitudes
  cache their own columns, as :class:`zcache.amplitude.Amplitude` does);
- optionally the stacked :math:`(H, K, N)` matrix of all groups per dataset: a coupling change
  then costs one matrix-vector product over the events;
- one block :math:`I_{ab} = \sum_h \langle A_{ah} A_{bh}^\dagger\rangle` of the integral matrix
  per pair of groups over an integration (phase-space) sample, and the assembled Hermitian
  :math:`(K, K)` matrix: a changed line shape recomputes its group's blocks only, a coupling
  change costs :math:`O(K^2)`;
- the normalization :math:`\mathrm{Re}(c^T I c^*)` and the fit fractions
  :math:`|c_k|^2 I_{kk} / c^T I c^*`; per *component* (group) the fraction and interference
  matrix :meth:`CoherentIntensity.fraction_matrix`, a TensorFlow function of the parameters,
  and its Jacobian (:meth:`CoherentIntensity.fraction_jacobian`), from which
  :mod:`zcache.amplitude` propagates a fit's covariance.

The PDF around it (the phase-space volume, the cached ``normalization`` of a
:class:`zcache.models.Model`) stays with the model; :func:`sum_log_normalized` and
:func:`box_mean` are the two formulas both PDFs (and the bridge's non-coherent intensities) use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine import xla_ops
from .._engine.cachable import Cachable, cache_of, cached
from .._engine.context import differentiating, substitute, substituting, varies
from .._engine.data import Data
from .._engine.dependencies import GRAPH
from .._engine.inputs import backing_variable
from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python, zcache_graphs

__all__ = ["CoherentIntensity", "sum_log_normalized", "box_mean"]


class CoherentIntensity(Cachable):
    r"""Mixin: :math:`\sum_h |\sum_k c_k A_{kh}|^2` over groups of amplitude columns, and its integrals.

    A subclass calls :meth:`_set_groups` with the number of couplings of each group (in the
    order of :meth:`coupling_vector`), sets ``cache`` (``False``: no cache at all), and
    implements :meth:`coupling_vector`, ``_group_now(g, data)`` (group ``g``'s columns,
    :math:`(H, K_g, N)`, uncached) and the cache names ``_group_name(g, data)`` and
    ``_block_name(a, b, mc)``. Two class attributes choose the cache layout:
    ``_caches_groups`` (default True: the core caches each group's columns per dataset; False
    when the subclass's amplitudes cache them themselves) and ``_stacks_groups`` (default
    False: the intensity is a matrix-vector product per group; True: the :math:`(H, K, N)`
    matrix of all groups is one more cache per dataset, named by ``_stack_name(data)``).
    """

    cache: bool = True
    _caches_groups = True
    _stacks_groups = False

    def _set_groups(self, sizes: Sequence[int]) -> None:
        """The number of couplings :math:`K_g` of each group, in the order of :meth:`coupling_vector`."""
        self._group_sizes = [int(k) for k in sizes]

    # -- what a subclass provides -------------------------------------------------------------
    def coupling_vector(self) -> tf.Tensor:
        """:math:`c`, the couplings of the coherent sum.

        Returns
        -------
        tf.Tensor
            complex128, shape (K,).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement coupling_vector().")

    def _group_now(self, g: int, data: Any) -> tf.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _group_now(g, data).")

    def _group_name(self, g: int, data: Data) -> str:
        return f"A[group {g}][{data.name}]"

    def _block_name(self, a: int, b: int, mc: Data) -> str:
        return f"I[group {a}, group {b}][{mc.name}]"

    def _stack_name(self, data: Data) -> str:
        return f"A_k[{data.name}]"

    def _group_parameters(self, g: int) -> list[Parameter]:
        """The parameters group ``g``'s columns read (its line shape's); default none (never :meth:`_moved`)."""
        return []

    def _group_times(self, g: int, c: tf.Tensor, data: Any) -> tf.Tensor:
        r"""(H, N): :math:`\sum_{k \in g} c_k A_{kh}` with ``c`` group ``g``'s couplings (K_g,).

        A subclass may compute it with the columns, without them in between, where group ``g``
        is :meth:`_moved`.
        """
        return _row_times(c, self._group(g, data))

    def _moved(self, g: int, data: Any) -> bool:
        """Whether group ``g``'s columns over ``data`` are recomputed here, at substituted parameters.

        Inside a compiled fit's program, a batched evaluation or a cache's backward pass, a group
        whose parameters stand in for others is computed anew at every call, and so is every
        integral block it enters. Its columns are then used once: :meth:`norm` is the mean
        intensity over the sample (one pass over each group's columns, not one per block), and
        a subclass may multiply the couplings in as it makes them (:meth:`_group_times`). A
        group whose cache is served (its parameters are not the ones varied) is not moved.
        """
        if not (self.cache and isinstance(data, Data) and substituting()):
            return False
        params = self._group_parameters(g)
        if not params:
            return False
        cache = cache_of(self, CoherentIntensity._cached_group, g, data) if self._caches_groups else None
        if cache is not None and substitute(cache.node_id) is not None:
            return False  # served: read once, before the program
        uids = {p.node_id for p in params}
        for p in params:
            uids.update(GRAPH.ancestor_inputs(p.node_id))
        return varies(uids)

    # -- amplitude columns per dataset ----------------------------------------------------------
    def _group(self, g: int, data: Any) -> tf.Tensor:
        """(H, K_g, N): group ``g``'s coupling-free amplitudes, cached per Data (see the class docstring)."""
        if self.cache and self._caches_groups and isinstance(data, Data):
            return self._cached_group(g, data)
        return self._group_now(g, data)

    @cached(name=lambda self, g, data: self._group_name(g, data))
    def _cached_group(self, g: int, data: Data) -> tf.Tensor:
        return self._group_now(g, data)

    def _columns(self, data: Any) -> tf.Tensor:
        """(H, K, N): every group's columns stacked (one cache per Data when ``_stacks_groups``)."""
        if self.cache and self._stacks_groups and isinstance(data, Data):
            return self._cached_columns(data)
        return self._columns_now(data)

    @cached(name=lambda self, data: self._stack_name(data))
    def _cached_columns(self, data: Data) -> tf.Tensor:
        return self._columns_now(data)

    def _columns_now(self, data: Any) -> tf.Tensor:
        return tf.concat([self._group(g, data) for g in range(len(self._group_sizes))], axis=1)

    def _amplitudes(self, data: Any) -> tf.Tensor:
        r"""(H, N): :math:`\sum_k c_k A_{kh}(x_i)`."""
        c = self.coupling_vector()
        if self._stacks_groups:
            return _row_times(c, self._columns(data))
        # one split (its gradient one concat), not a slice per group (a StridedSliceGrad each)
        parts = tf.split(c, list(self._group_sizes)) if len(self._group_sizes) > 1 else [c]
        amp = None
        for g, c_g in enumerate(parts):
            part = self._group_times(g, c_g, data)
            amp = part if amp is None else amp + part
        return amp

    def intensity(self, data: Any, *, raw: bool = False) -> tf.Tensor:
        r"""The unnormalized intensity :math:`\sum_h |\sum_k c_k A_{kh}(x_i)|^2` of each event.

        Parameters
        ----------
        data : zcache.Data or tf.Tensor
            The events (a Data is served from the caches).
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
        amp = self._amplitudes(data)
        # tf.square, not ** 2: TensorFlow's Pow kernel (and its gradient, which takes logs) was half
        # of a couplings fit's time without Grappler (design/decisions/0003-compiled-fit.md)
        rows = tf.reduce_sum(tf.square(xla_ops.real(amp)) + tf.square(xla_ops.imag(amp)), axis=0)
        return rows if raw or not isinstance(data, Data) else data.unpadded(rows)

    # -- integrals over a phase-space sample -----------------------------------------------------
    def integral_matrix(self, mc: Data) -> tf.Tensor:
        r""":math:`I_{jk} = \sum_h \langle A_{jh} A_{kh}^* \rangle` over ``mc``, Hermitian (K, K).

        Cached per block of groups (a changed line shape recomputes its group's blocks only)
        and as a whole; without caches, one product of the whole column matrix.

        Parameters
        ----------
        mc : zcache.Data
            The integration (phase-space) sample.

        Returns
        -------
        tf.Tensor
            complex128, shape (K, K).
        """
        if self.cache:
            return self._cached_integral_matrix(mc)
        return self._integral_of(self._columns(mc))

    def _integral_of(self, columns: tf.Tensor) -> tf.Tensor:
        r"""(K, K): :math:`\sum_h \langle A_{jh} A_{kh}^* \rangle` of all groups' columns (H, K, N), in one product."""
        n = tf.cast(tf.shape(columns)[2], tf.complex128)
        return tf.reduce_sum(tf.linalg.matmul(columns, columns, adjoint_b=True), axis=0) / n

    @cached(name=lambda self, mc: f"I[{mc.name}]")
    def _cached_integral_matrix(self, mc: Data) -> tf.Tensor:
        ng = len(self._group_sizes)
        blocks = {(a, b): self._cached_block(a, b, mc) for a in range(ng) for b in range(a, ng)}
        rows = [tf.concat([blocks[a, b] if a <= b else tf.linalg.adjoint(blocks[b, a]) for b in range(ng)], axis=1)
                for a in range(ng)]
        return tf.concat(rows, axis=0)

    @cached(name=lambda self, a, b, mc: self._block_name(a, b, mc))
    def _cached_block(self, a: int, b: int, mc: Data) -> tf.Tensor:
        # (K_a, K_b): sum over h of <A_ah A_bh^dagger> over mc
        ga, gb = self._group(a, mc), self._group(b, mc)
        n = tf.cast(tf.shape(ga)[2], tf.complex128)
        return tf.reduce_sum(tf.linalg.matmul(ga, gb, adjoint_b=True), axis=0) / n

    def norm(self, mc: Data) -> tf.Tensor:
        r""":math:`\langle I \rangle` over ``mc``: :math:`\mathrm{Re}(c^T I c^*)` (O(K²) once the integrals are cached).

        Parameters
        ----------
        mc : zcache.Data
            The integration (phase-space) sample.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        if not self._stacks_groups and any(self._moved(g, mc) for g in range(len(self._group_sizes))):
            # A moved group's integral blocks would be recomputed at every call: G(G+1)/2 products
            # over the events and their gradients, each reading a group's columns again. The mean
            # intensity reads each group once (equal to rounding: the same sums, in another order).
            intensity = self.intensity(mc, raw=True)
            return tf.reduce_sum(intensity) / tf.cast(tf.shape(intensity)[0], tf.float64)
        m = self.integral_matrix(mc)
        c = self.coupling_vector()
        # reshapes, not c[:, None]: a slice's gradient is a StridedSliceGrad, a new buffer per call
        return xla_ops.real(tf.reduce_sum(tf.reshape(c, [-1, 1]) * m * tf.reshape(tf.math.conj(c), [1, -1])))

    def fractions(self, mc: Data) -> np.ndarray:
        r"""Fit fractions :math:`|c_k|^2 I_{kk} / c^T I c^*`, in the order of :meth:`coupling_vector`.

        Parameters
        ----------
        mc : zcache.Data
            The integration (phase-space) sample.

        Returns
        -------
        ndarray
            float64, shape (K,); they sum to one without interference.
        """
        m = self.integral_matrix(mc).numpy()
        c = self.coupling_vector().numpy()
        total = float(np.real(c @ m @ np.conj(c)))
        return np.abs(c) ** 2 * np.real(np.diag(m)) / total

    # -- per component (group): fractions and interference terms ---------------------------------
    @property
    def component_names(self) -> list[str]:
        """One label per component (group of couplings), in the order of :meth:`fraction_matrix`.

        Returns
        -------
        list of str
            ``'component <g>'`` here; subclasses name them (amplitude or resonance names).
        """
        return [f"component {g}" for g in range(len(self._group_sizes))]

    def fraction_matrix(self, mc: Data) -> tf.Tensor:
        r"""Fit fractions and interference terms of the components, at the current parameter values.

        With :math:`S_{ab} = \mathrm{Re}\sum_{k \in a, l \in b} c_k I_{kl} c_l^*` (:math:`a, b` the
        groups of :meth:`coupling_vector`) and :math:`N = \sum_{ab} S_{ab} = \mathrm{Re}(c^T I c^*)`:
        :math:`F_{aa} = S_{aa}/N` (component :math:`a`'s coherent sum alone) and, for
        :math:`a \ne b`, :math:`F_{ab} = F_{ba} = 2 S_{ab}/N`, so that
        :math:`\sum_a F_{aa} + \sum_{a<b} F_{ab} = 1`. Written with TensorFlow ops, so it is
        differentiable w.r.t. the couplings and (through the integral caches) the line shapes.

        Parameters
        ----------
        mc : zcache.Data
            The integration (phase-space) sample.

        Returns
        -------
        tf.Tensor
            float64, shape (G, G), symmetric.
        """
        return self._fractions_of(self.integral_matrix(mc), self.coupling_vector())

    def _fractions_of(self, m: tf.Tensor, c: tf.Tensor) -> tf.Tensor:
        terms = c[:, None] * m * tf.math.conj(c)[None, :]  # c_k I_kl c_l^*
        member = np.zeros((len(self._group_sizes), sum(self._group_sizes)))
        start = 0
        for g, k in enumerate(self._group_sizes):
            member[g, start:start + k] = 1.0
            start += k
        member = tf.constant(member, tf.complex128)
        blocks = xla_ops.real(tf.linalg.matmul(tf.linalg.matmul(member, terms), member, adjoint_b=True))
        blocks = 0.5 * (blocks + tf.transpose(blocks))  # symmetric to the last bit, not only to rounding
        return (2.0 - tf.eye(len(self._group_sizes), dtype=tf.float64)) * blocks / tf.reduce_sum(blocks)

    def fraction_jacobian(self, mc: Data, params: Sequence[Parameter]) -> tuple[tf.Tensor, tf.Tensor]:
        r""":meth:`fraction_matrix` and its Jacobian w.r.t. ``params``, by automatic differentiation.

        One forward pass over ``mc`` that bypasses the caches, recorded on one tape, then one
        backward pass per entry of the upper triangle. (Through the caches each backward pass
        would recompute every integral block and, per block, its columns: ~100 times slower.)
        Runs eagerly, whatever the graph mode: it is called once, after a fit, and a trace
        would cost more than it saves.

        Parameters
        ----------
        mc : zcache.Data
            The integration (phase-space) sample.
        params : sequence of Parameter
            The parameters to differentiate by (those the fractions do not read get zeros).

        Returns
        -------
        fractions : tf.Tensor
            float64, shape (G, G), as :meth:`fraction_matrix`.
        jacobian : tf.Tensor
            float64, shape (G, G, P): :math:`\partial F_{ab} / \partial p_i`, symmetric in a, b.
        """
        params = list(params)
        ng = len(self._group_sizes)
        pairs = [(a, b) for a in range(ng) for b in range(a, ng)]
        variables = [backing_variable(p) for p in params]
        with differentiating(params), zcache_graphs():  # a cache read (data-only ones) attaches no gradient
            with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
                tape.watch(variables)
                columns = tf.concat([self._group_uncached(g, mc) for g in range(ng)], axis=1)
                f = self._fractions_of(self._integral_of(columns), self.coupling_vector())
                entries = [f[a, b] for a, b in pairs]  # sliced on the tape
            rows = {}
            for (a, b), entry in zip(pairs, entries, strict=True):
                grads = tape.gradient(entry, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
                rows[a, b] = tf.stack([tf.cast(g, tf.float64) for g in grads]) if grads else tf.zeros([0], tf.float64)
        del tape
        jacobian = tf.stack([tf.stack([rows[min(a, b), max(a, b)] for b in range(ng)]) for a in range(ng)])
        return f, jacobian

    # -- the exact Hessian of the log-likelihood ---------------------------------------------------
    def _coupling_parameters(self, k: int) -> list[Parameter] | None:
        """Coupling ``k``'s two real parameters (None: no exact Hessian; default)."""
        return None

    def _coupling_derivatives(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The couplings (K,), their derivatives by their two parameters (K, 2) and the second ones (K, 3: 00, 01, 11)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _coupling_derivatives().")

    def _group_jets(self, g: int, data: Data, w: tf.Tensor, c: tf.Tensor,
                    params: Sequence[Parameter]) -> tuple[tf.Tensor, ...]:
        r"""Group ``g``'s columns and derivatives by its fitted ``params`` (:math:`L` of them), its couplings ``c`` (K_g,).

        Returns :math:`A` (H, K_g, N); :math:`D_j = \sum_k c_k \partial_j A_k` (L, H, N);
        :math:`T_{kj} = \sum w \, \partial_j A_k` (K_g, L) and
        :math:`U_{jl} = \sum w \sum_k c_k \partial_j \partial_l A_k` (one per ``jets.pairs(L)``),
        the sums over events and helicities, with ``w`` (H, N).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _group_jets.")

    def _group_jets_supported(self, g: int, params: Sequence[Parameter]) -> bool:
        """Whether :meth:`_group_jets` has a derivative rule for everything group ``g`` computes (default: no)."""
        return False

    def _hessian_plan(self, params: Sequence[Parameter]) -> dict[str, Any] | None:
        """How each of ``params`` enters (a coupling's part, a line-shape parameter, nothing), or None.

        None where a parameter enters otherwise (through a composed parameter, a yield, a coupling
        the subclass does not describe) or a group has a function without a derivative rule.
        """
        ids = {p.node_id: a for a, p in enumerate(params)}
        couplings: dict[int, tuple[int, int]] = {}  # parameter position -> (coupling, part)
        reached: set[int] = set()
        for k in range(sum(self._group_sizes)):
            parts = self._coupling_parameters(k)
            if parts is None:
                return None
            for j, p in enumerate(parts):
                reached.add(p.node_id)
                if p.node_id in ids:
                    couplings[ids[p.node_id]] = (k, j)
                elif ids.keys() & set(GRAPH.ancestor_inputs(p.node_id)):
                    return None
        lines: list[int] = []  # line-shape parameter positions, in the order of D's columns
        groups: list[list[int]] = []  # per group: its fitted line-shape parameters' positions
        for g in range(len(self._group_sizes)):
            mine = []
            for p in self._group_parameters(g):
                if not isinstance(p, Parameter):
                    return None
                reached.add(p.node_id)
                if p.node_id in ids:
                    if ids[p.node_id] in mine:  # one parameter behind two symbols of a group
                        return None
                    mine.append(ids[p.node_id])
                    if ids[p.node_id] not in lines:
                        lines.append(ids[p.node_id])
                elif ids.keys() & set(GRAPH.ancestor_inputs(p.node_id)):
                    return None
            if mine and not self._group_jets_supported(g, [params[a] for a in mine]):
                return None
            groups.append(mine)
        for a, p in enumerate(params):
            if a in couplings or a in lines:
                continue
            # a parameter the intensity does not read: a zero row, unless the model reads it elsewhere
            if p.node_id in reached or self._reads(p):
                return None
        return {"couplings": couplings, "lines": lines, "groups": groups}

    def _reads(self, p: Parameter) -> bool:
        """Whether the model reads ``p`` (one of its parameters, or behind a composed one)."""
        return any(p.node_id == q.node_id or p.node_id in GRAPH.ancestor_inputs(q.node_id) for q in self.get_params(None))

    def _coupling_block(self, params: Sequence[Parameter]) -> list[int]:
        """Positions of ``params`` whose block of :meth:`coherent_nll_hessian` needs no line shape's derivatives.

        The couplings' parts (the amplitudes are linear in the couplings: their block is one pass over
        the amplitudes) and the parameters the model does not read (zero rows); none where a
        coupling is not described, or is read otherwise (also by a line shape).
        """
        coupling_ids: set[int] = set()
        for k in range(sum(self._group_sizes)):
            parts = self._coupling_parameters(k)
            if parts is None:
                return []
            coupling_ids.update(p.node_id for p in parts)
        positions = [a for a, p in enumerate(params) if p.node_id in coupling_ids or not self._reads(p)]
        plan = self._hessian_plan([params[a] for a in positions]) if positions else None
        return positions if plan is not None and not plan["lines"] else []

    def coherent_nll_hessian(self, data: Data, mc: Data, params: Sequence[Parameter]) -> tf.Tensor | None:
        r"""The exact Hessian of :math:`-\sum_i w_i \log(I(x_i) / \langle I \rangle_{mc})` by ``params``.

        From the model's structure, in about two passes over each dataset (one for the
        amplitudes, one for the groups' jets), not one gradient per parameter:

        .. math::

            \nabla^2 = \sum_i \frac{w_i}{I_i^2} g_i g_i^T - \sum_i \frac{w_i}{I_i} \nabla^2 I_i
            + \frac{W}{Z} \langle \nabla^2 I \rangle - \frac{W}{Z^2} \langle g \rangle \langle g \rangle^T,

        with :math:`g_i = \nabla I_i`, :math:`Z = \langle I \rangle` and :math:`W = \sum w_i`;
        :math:`\nabla I = 2 \mathrm{Re} \sum_h \bar S_h \nabla S_h` and
        :math:`\nabla^2 I = 2 \mathrm{Re} \sum_h (\nabla \bar S_h \nabla S_h^T + \bar S_h \nabla^2 S_h)`
        for the amplitudes :math:`S_h = \sum_k c_k A_{kh}`: linear in the couplings, and a
        line-shape parameter moves its group's columns only (:meth:`_group_jets`).

        Parameters
        ----------
        data : zcache.Data
            The events (weights and padding rows enter as :math:`w_i`).
        mc : zcache.Data
            The integration sample of the normalization :math:`\langle I \rangle`.
        params : sequence of Parameter
            The parameters, in the Hessian's order.

        Returns
        -------
        tf.Tensor or None
            float64 (n, n); None where :meth:`_hessian_plan` finds no plan (the caller
            differentiates instead).
        """
        plan = self._hessian_plan(params)
        if plan is None:
            return None
        n_p, sizes = len(params), self._group_sizes
        n_k = sum(sizes)
        lines, groups, couplings = plan["lines"], plan["groups"], plan["couplings"]
        n_q = n_k + len(lines)
        first_k = np.cumsum([0, *sizes])
        c_all, dc, d2c = self._coupling_derivatives()  # (K,), (K, 2), (K, 3)
        c_groups = tf.split(c_all, list(sizes))
        dc_flat, d2c_flat = tf.reshape(dc, [-1]), tf.reshape(d2c, [-1])
        # J (Q, P): the columns X_q (the couplings' amplitudes A_k, then each line-shape parameter's
        # D) to the parameters, dS/dp_a = sum_q X_q J_qa: one scatter
        where = [[k, a] for a, (k, _) in couplings.items()] + [[n_k + q, a] for q, a in enumerate(lines)]
        if not where:  # no parameter that the intensity reads
            return tf.zeros([n_p, n_p], tf.float64)
        picks = _indices(2 * k + j for k, j in couplings.values())
        entries = tf.concat([tf.gather(dc_flat, picks), tf.ones([len(lines)], tf.complex128)], axis=0)
        jac = tf.scatter_nd(tf.constant(where, tf.int64), entries, [n_q, n_p])
        # Where each second derivative of S goes (the index lists fixed here, the values gathered per dataset):
        # a coupling's own (d2c times V_k), a coupling part with a line-shape parameter of its group
        # (dc times T), two line-shape parameters of one group (U)
        own = [(a, b, k, 3 * k + j + j2) for a, (k, j) in couplings.items() for b, (k2, j2) in couplings.items()
               if k2 == k and j <= j2]
        t_offsets = np.cumsum([0] + [sizes[g] * len(groups[g]) for g in range(len(sizes))])
        u_offsets = np.cumsum([0] + [len(m) * (len(m) + 1) // 2 for m in groups])
        mixed, paired = [], []
        for g, mine in enumerate(groups):
            for a, (k, j) in couplings.items():
                if mine and first_k[g] <= k < first_k[g + 1]:
                    mixed += [(a, b, 2 * k + j, t_offsets[g] + (k - first_k[g]) * len(mine) + i) for i, b in enumerate(mine)]
            paired += [(mine[i], mine[k], u_offsets[g] + p)
                       for p, (i, k) in enumerate((i, k) for i in range(len(mine)) for k in range(i, len(mine)))]
        r_where = tf.constant([[a, b] for a, b, *_ in own + mixed] + [[a, b] for a, b, _ in paired], tf.int64)

        def terms(ds: Data, weights_of: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            """(g_i (N, P), I (N,), sum_i u_i nabla^2 I_i (P, P)) with u = weights_of(I)."""
            s = self._amplitudes(ds)  # (H, N)
            intensity = tf.reduce_sum(tf.square(xla_ops.real(s)) + tf.square(xla_ops.imag(s)), axis=0)
            u = weights_of(intensity)
            w = tf.cast(u, tf.complex128) * tf.math.conj(s)  # (H, N)
            columns, d_rows, t_parts, u_parts = [], [None] * len(lines), [], []
            for g in range(len(sizes)):
                if groups[g]:
                    a_g, d_g, t_g, u_g = self._group_jets(g, ds, w, c_groups[g], [params[a] for a in groups[g]])
                    for j, d in enumerate(tf.unstack(d_g, len(groups[g]))):
                        q = lines.index(groups[g][j])
                        d_rows[q] = d if d_rows[q] is None else d_rows[q] + d
                    t_parts.append(tf.reshape(t_g, [-1]))
                    u_parts.append(u_g)
                else:
                    a_g = self._group(g, ds)
                columns.append(a_g)  # (H, K_g, N)
            uc = tf.cast(u, tf.complex128)[None, :]
            conj_s = tf.math.conj(s)
            # Memory: one helicity's (Q, N) columns at a time (H, the number of helicity terms, is
            # static), never the (Q, H, N) whole: products over it (conj(S) X, u conj(X), w X) each held
            # one more copy of it (its peak memory: design/decisions/0009)
            y = m = v = None  # (Q, N): dI/dX_q; (Q, Q): sum u conj(X_q) X_q'; (K,): sum w A_k
            for h in range(s.shape[0]):
                x_h = tf.concat([a_g[h] for a_g in columns] + [d[h][None] for d in d_rows], axis=0)  # (Q, N)
                y_h = 2.0 * conj_s[h][None, :] * x_h
                m_h = tf.matmul(tf.math.conj(x_h) * uc, x_h, transpose_b=True)
                v_h = tf.reduce_sum(w[h][None, :] * x_h[:n_k], axis=1)
                y, m, v = (y_h, m_h, v_h) if y is None else (y + y_h, m + m_h, v + v_h)
            grads = xla_ops.real(tf.matmul(y, jac, transpose_a=True))  # (N, P)
            second = 2.0 * xla_ops.real(tf.matmul(jac, tf.matmul(m, jac), adjoint_a=True))
            updates = []
            if own:
                updates.append(tf.gather(d2c_flat, _indices(i for *_, i in own))
                               * tf.gather(v, _indices(k for _, _, k, _ in own)))
            if mixed:
                t_all = tf.concat(t_parts, axis=0)
                updates.append(tf.gather(dc_flat, _indices(i for _, _, i, _ in mixed))
                               * tf.gather(t_all, _indices(i for *_, i in mixed)))
            if paired:
                updates.append(tf.gather(tf.concat(u_parts, axis=0), _indices(i for *_, i in paired)))
            if updates:
                r = xla_ops.real(tf.scatter_nd(r_where, tf.concat(updates, axis=0), [n_p, n_p]))
                second = second + 2.0 * (r + tf.transpose(r) - tf.linalg.diag(tf.linalg.diag_part(r)))
            return grads, intensity, second

        weights = data.weights if data.weights is not None else data.mask
        total = tf.cast(data.nevents, tf.float64) if weights is None else tf.reduce_sum(weights)

        def data_weights(intensity: tf.Tensor) -> tf.Tensor:
            return -(tf.ones_like(intensity) if weights is None else weights) / intensity

        def mc_weights(intensity: tf.Tensor) -> tf.Tensor:
            n = tf.cast(tf.shape(intensity)[0], tf.float64)
            return tf.fill(tf.shape(intensity), total / (tf.reduce_mean(intensity) * n))

        g_d, i_d, h_d = terms(data, data_weights)
        wi2 = (tf.ones_like(i_d) if weights is None else weights) / tf.square(i_d)
        with tf.control_dependencies([h_d]):  # one dataset's columns at a time (peak memory)
            g_m, i_m, h_m = terms(mc, mc_weights)
        z = tf.reduce_mean(i_m)
        zg = tf.reduce_mean(g_m, axis=0)
        hess = tf.matmul(g_d * wi2[:, None], g_d, transpose_a=True) + h_d + h_m - (total / tf.square(z)) * (
            zg[:, None] * zg[None, :])
        return 0.5 * (hess + tf.transpose(hess))

    def _group_uncached(self, g: int, data: Data) -> tf.Tensor:
        """Group ``g``'s columns computed anew, past every parameter-dependent cache (default: ``_group_now``)."""
        return self._group_now(g, data)


def _indices(values: Any) -> tf.Tensor:
    """Gather indices as int32 (an empty Python list would become float32)."""
    return tf.constant([int(v) for v in values], tf.int32)


def _row_times(c: tf.Tensor, columns: tf.Tensor) -> tf.Tensor:
    """(H, N): c^T A_h for each h, with ``columns`` (H, K, N).

    Not ``matvec(columns, c, transpose_a=True)``: for a batch of complex matrices TensorFlow
    implements that transpose as an explicit conjugate of the whole (H, K, N) tensor followed by
    an adjoint (``tf.linalg.matmul``), one more pass over the columns per call. Reshapes, not slices
    (``c[None, None, :]``, ``[:, 0, :]``): a slice's gradient is a StridedSliceGrad, which writes a
    new (H, 1, N) buffer where a reshape's gradient is a reshape.
    """
    return tf.squeeze(tf.linalg.matmul(tf.reshape(c, [1, 1, -1]), columns), axis=1)


def sum_log_normalized(intensity: tf.Tensor, data: Any, normalization: tf.Tensor) -> tf.Tensor:
    r""":math:`\sum_i \log I(x_i) - N \log(\text{normalization})`: a log-likelihood without a per-event division.

    Parameters
    ----------
    intensity : tf.Tensor
        float64, shape (N,): the unnormalized intensity of each row of ``data``.
    data : zcache.Data or tf.Tensor
        The events; the padding rows of padded data (``capacity=``) are left out.
    normalization : tf.Tensor
        float64 scalar.

    Returns
    -------
    tf.Tensor
        float64 scalar.
    """
    mask = data.mask if isinstance(data, Data) else None
    if mask is None:
        n, total = tf.cast(tf.shape(intensity)[0], tf.float64), tf.reduce_sum(tf.math.log(intensity))
    else:  # padded data: the padding rows left out
        n, total = tf.reduce_sum(mask), tf.reduce_sum(mask * tf.math.log(intensity))
    return total - n * tf.math.log(normalization)


def box_mean(x: tf.Tensor, values: tf.Tensor, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
    """The mean over a phase-space sample of ``values`` inside the box [lower, upper] (zero outside).

    Multiplied by the phase-space volume, the Monte Carlo integral of an intensity over a box.

    Parameters
    ----------
    x : tf.Tensor
        float64, shape (N, n_obs): the sample's events.
    values : tf.Tensor
        float64, shape (N,): the intensity at each event.
    lower, upper : sequence of float
        The box's corners, one value per observable.

    Returns
    -------
    tf.Tensor
        float64 scalar.
    """
    box = tf.reduce_all(tf.logical_and(x >= tf.constant(lower, tf.float64), x <= tf.constant(upper, tf.float64)), axis=1)
    return tf.reduce_mean(tf.where(box, values, 0.0))


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
