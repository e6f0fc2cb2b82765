r"""A whole fit in one compiled program: the default path of :class:`zcache.minimize.Minuit`.

A fit driven call by call from Python pays, per call, for the trip from the minimizer into
TensorFlow and back, a large part of a small loss's call. :class:`CompiledFit` runs the whole minimization in one
``tf.function``:

1. value and gradient at the start, and BFGS's first inverse Hessian: forward differences of
   exact gradients, inverted with eigenvalues by magnitude (positive definite also far from a
   minimum;
2. **BFGS** with a backtracking line search, steps clipped into the limits
   (:func:`zcache._fitting.batched_bfgs.lockstep_bfgs` with one row), until MIGRAD's
   criterion :math:`\mathrm{EDM} = \tfrac12 g^T H^{-1} g < 0.002\,\mathrm{tol}\,\mathrm{errordef}`
   holds;
3. the Hessian at the end by forward differences of exact gradients, steps of 1e-6 of each
   error (HESSE's definition of the errors, :math:`C = 2\,\mathrm{errordef}\,H^{-1}`; within
   3e-5 relative of the exact Hessian in the worst case measured, a Crystal Ball's tail),
   one Newton step from it and the final EDM. Second-order autodiff would
   be exact to rounding, but its trace costs seconds and each such Hessian more than the n
   gradients of the differences (``design/decisions/0003-compiled-fit.md``). By default
   (``structured_hessian="auto"``) where the loss offers a block of its structured Hessian for
   some parameters but not all (:meth:`zcache.loss.BaseLoss.structured_hessian_block`: the
   couplings of an amplitude model whose line shapes float), both Hessians take that block
   exactly and difference the other parameters' gradients only; with ``True`` both are the
   loss's whole structured Hessian (:meth:`zcache.loss.BaseLoss.structured_hessian`) where it
   offers one, with ``False`` differences throughout.

The loss is the user's own code, traced once: the fitted parameters are replaced by the
entries of the program's vector ``x`` (:func:`zcache._engine.context.substituted`, the
mechanism of batched toys and of a cache's backward pass), so no Variable is written inside
the program and every cache that a fitted parameter reaches is computed in it (as precompute
bypasses it in a fit). A cache that no fitted parameter reaches (a data-only column, an
integral over fixed parameters) is read once, through its own cache, before the program and
passed in as a tensor: a ``set_data`` or a change of a fixed parameter between fits refills
it and recompiles nothing. Every zcache check of the loss becomes a flag; a fit where one
fails, that does not converge, or that ends on a limit is reported as such
(:attr:`CompiledOutcome.reason`), and the caller falls back to MIGRAD.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache._fitting.compiled_fit import CompiledFit
>>> mu = zcache.Parameter("mu_cf", 0.5, lower=-2.0, upper=2.0)
>>> x = np.random.default_rng(3).normal(0.2, 1.0, 1000)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))
>>> out = CompiledFit.of(loss, [mu]).run(np.array([0.5]), edm_max=2e-5 * loss.errordef)
>>> out.reason is None, bool(abs(out.x[0] - x.mean()) < 1e-4), round(float(np.sqrt(1.0 / out.hessian[0, 0])), 3)
(True, True, 0.032)
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.collector import collector_out_of_traces
from .._engine.compile_cache import compiling, first_call
from .._engine.context import ENGINE_LOCK, differentiating, finding_invariants, run_eagerly, substituted
from .._engine.data import storage_rows
from .._engine.dependencies import GRAPH
from .._engine.finite_differences import default_step
from .._engine.parameter import Parameter
from .._engine.tf_internals import (
    calls_without_body_shape_inference,
    separately_compiled,
    without_grappler,
    zcache_graphs,
)
from .._engine.trace import forbid_in_trace
from .._engine.traced_checks import calling_jit, collecting
from .batched_bfgs import HESSE_STEP, forward_hessian, lockstep_bfgs
from .per_loss import alive, kept
from .trace_store import StoredProgram, agrees, forget, load, save

__all__ = ["CompiledFit", "CompiledOutcome"]

#: The final Hessian's forward-difference step, in units of each error. The batched fit's 1e-4
#: (HESSE_STEP) left a Crystal Ball's tail parameters' errors 2.5e-4 relative off (a third
#: derivative of five times the second, in units of the error); at 1e-6 the truncation is ~1e-6
#: and the rounding of exact gradients ~1e-10 sqrt(N) relative.
SERIAL_HESSE_STEP = 1e-6

#: The fewest parameters in a loss's exact Hessian block (``structured_hessian="auto"``) for which the
#: compiled fit uses it. The block costs about two gradients' passes per Hessian and, in a first fit,
#: its program's trace and first run: a small block saves fewer calls than its trace costs
#: (``design/decisions/0003-compiled-fit.md``, ``0009-numbers-from-the-code.md``).
MIN_BLOCK = 4

#: Smallest eigenvalue of the seed Hessian in units of its diagonal (which is 1): the seed's step
#: along a direction the loss does not constrain is at most 1e6 times the gradient there, in units
#: of the errors (1e-12 of the largest let a J/psi fit's two f0(980) couplings run to 2e4).
SEED_FLOOR = 1e-6
#: A Hessian that is not positive definite only through a flat direction: its smallest
#: eigenvalue in units of its diagonal is above -FLAT_TOLERANCE times its largest (forward
#: differences of exact gradients leave ~3e-5 of noise). Minuit2 makes such a matrix positive
#: definite (MnPosDef: the scaled diagonal raised by 1e-3 of the largest eigenvalue less the
#: smallest) and calls the minimum valid; the compiled fit does the same. A clearly negative
#: eigenvalue (a saddle) still falls back to MIGRAD.
FLAT_TOLERANCE = 1e-3

#: CompiledFit.of: per loss (weakly), per parameter tuple.
_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], CompiledFit]] = weakref.WeakKeyDictionary()


@dataclass
class CompiledOutcome:
    """What one compiled fit found.

    Attributes
    ----------
    x : ndarray
        (n,) the minimum (or the last point, when not converged).
    fmin, fstart : float
        The loss at ``x`` and at the start (absolute, no offset).
    hessian : ndarray
        (n, n) the Hessian of the loss at the BFGS minimum (before the Newton step), by forward
        differences of exact gradients.
    edm : float
        MIGRAD's estimated distance to the minimum, with that Hessian (NaN if it is not
        positive definite).
    nfcn : int
        Value + gradient evaluations (a Hessian counts one per parameter).
    reason : str or None
        None for a fit MIGRAD would call valid; else why not (the caller falls back).
    made_posdef : bool
        The Hessian had a flat direction (two parameters that only enter together, say) and
        was made positive definite as Minuit2 does (see ``FLAT_TOLERANCE``); errors along that
        direction say nothing.
    """

    x: np.ndarray
    fmin: float
    fstart: float
    hessian: np.ndarray
    edm: float
    nfcn: int
    reason: str | None
    made_posdef: bool = False


def made_positive_definite(hess: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Minuit2's MnPosDef on a Hessian (n, n) whose only non-positive eigenvalues are flat.

    In units of the diagonal (``p = H / sqrt(d d^T)``), the diagonal is raised by
    ``1e-3 max(eig p) - min(eig p)``: the flat direction gets a small curvature, the others
    barely change.

    Parameters
    ----------
    hess : tf.Tensor
        float64, (n, n), symmetric.

    Returns
    -------
    shifted : tf.Tensor
        The raised matrix.
    nearly_flat : tf.Tensor
        bool scalar: the smallest scaled eigenvalue is above ``-FLAT_TOLERANCE`` times the
        largest (and the largest is positive); otherwise ``shifted`` must not be used.
    """
    diag = tf.linalg.diag_part(hess)
    d = tf.where(diag > 0.0, tf.sqrt(tf.abs(diag)), tf.ones_like(diag))
    w = tf.linalg.eigvalsh(hess / (d[:, None] * d[None, :]))
    wmin, wmax = w[0], w[-1]
    nearly_flat = (wmax > 0.0) & (wmin >= -FLAT_TOLERANCE * wmax) & tf.reduce_all(diag > 0.0)
    shifted = hess + tf.linalg.diag((1e-3 * wmax - wmin) * d * d)
    return shifted, nearly_flat


class CompiledFit:
    """The fit of one loss over given parameters, as one compiled program (see the module).

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss (held weakly).
    params : sequence of Parameter
        The fitted parameters, in the order of ``x``.

    Attributes
    ----------
    traces : int
        How many times the program was traced (a loop of fits traces once).
    refused : str or None
        Why this loss cannot run as a compiled fit (set by the caller after a failed trace).
    """

    def __init__(self, loss: Any, params: Sequence[Parameter]) -> None:
        self._loss = weakref.ref(loss)
        self.params = tuple(params)
        self.lower = np.array([-np.inf if p.lower is None else p.lower for p in self.params])
        self.upper = np.array([np.inf if p.upper is None else p.upper for p in self.params])
        self._programs: dict[Any, Any] = {}
        self._invariants: tuple[int, list[Any]] | None = None
        #: (program key, served shapes, dataset rows) of the calls the compile cache has checked (_call)
        self._checked_calls: set[tuple[Any, ...]] = set()
        #: the same key -> (program, its concrete function called with that key's arguments) (_call)
        self._concrete: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self.traces = 0
        #: Why this loss cannot run as a compiled fit (set by the caller after a failed trace).
        self.refused: str | None = None

    @classmethod
    def of(cls, loss: Any, params: Sequence[Parameter]) -> CompiledFit:
        """The CompiledFit of ``loss`` and ``params``, made once and kept while the loss lives.

        Parameters
        ----------
        loss : zcache.loss.BaseLoss
            The loss.
        params : sequence of Parameter
            The fitted parameters.

        Returns
        -------
        CompiledFit
        """
        return kept(_KEPT, loss, params, cls)

    @property
    def loss(self) -> Any:
        """The loss (a RuntimeError once it has been garbage collected)."""
        return alive(self._loss, "CompiledFit", RuntimeError)

    # -- the loss inside the program ---------------------------------------------------------
    def _evaluate(self, x: tf.Tensor, served: dict[int, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        """The loss at ``x`` (n,) and whether every zcache check held (inside the program)."""
        stand_ins: dict[Any, Any] = dict(served)
        # one Unpack (its gradient one Pack), not a slice per parameter (each slice's gradient a
        # StridedSliceGrad of its own, summed by an AddN): ~10 % of a small couplings fit's op time
        stand_ins.update({p.node_id: xj for p, xj in zip(self.params, tf.unstack(x, len(self.params)), strict=True)})
        with substituted(stand_ins), collecting() as checks:
            f = self.loss.value()
        ok = tf.math.is_finite(f)
        if checks:
            ok = ok & tf.reduce_all(tf.stack([c for c, _, _ in checks]))
        return f, ok

    def _value_gradient(self, x: tf.Tensor, served: dict[int, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            f, ok = self._evaluate(x, served)
        g = tape.gradient(f, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return f, g, ok & tf.reduce_all(tf.math.is_finite(g))

    def _structured_hessian(self, x: tf.Tensor, served: dict[int, tf.Tensor],
                            positions: tuple[int, ...] | None = None) -> tf.Tensor:
        """The loss's structured Hessian at ``x`` (n,), inside the program (as :meth:`_evaluate`).

        ``positions``: its block of those parameters only (the others at ``x`` all the same).
        """
        stand_ins: dict[Any, Any] = dict(served)
        stand_ins.update({p.node_id: xj for p, xj in zip(self.params, tf.unstack(x, len(self.params)), strict=True)})
        params = self.params if positions is None else [self.params[a] for a in positions]
        with substituted(stand_ins), collecting():
            return self.loss.structured_hessian(params)

    def _body(self, x0: tf.Tensor, served: dict[int, tf.Tensor], lower: tf.Tensor, upper: tf.Tensor,
              maxiter: tf.Tensor, edm_max: tf.Tensor, *, jit: bool, structured: bool | str) -> tuple[tf.Tensor, ...]:
        self.traces += 1
        n = len(self.params)
        # Value + gradient is a function of its own, traced once and called wherever it is needed
        # (the start, every BFGS step, each Hessian column, the Newton step): the loss is traced
        # once per program. Under jit XLA compiles this function only, once: the whole program
        # compiled inlines the loss at every call site and takes many times longer, for little
        # more gain (the loop around it is a handful of small ops per step).
        # Called, not inlined: the runtime inlines a plain function at each of its six call sites and
        # prepares each copy at the program's first call (about a fifth of a small loss's first fit,
        # RESULTS.md "The first fit in a fresh process"); the same ops, so the same numbers (under
        # jit TensorFlow marks the compiled function so itself).
        # It takes and gives rows (the loop's batch of one): the reshapes are traced once inside
        # it, not at every call site (an index or a new axis is four ops, a seventh of the program's).
        def row_value_gradient(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            f, g, ok = self._value_gradient(tf.squeeze(x, 0), served)
            return tf.reshape(f, [1]), tf.reshape(g, [1, n]), tf.reshape(ok, [1])

        vg = separately_compiled(row_value_gradient, jit_compile=jit)

        f0, g0, ok0 = vg(x0[None])
        # The loss's exact Hessian from its model's structure, where it has one (a coherent sum of
        # amplitudes: two passes over the data, where differences cost one gradient per parameter)
        exact = block = None
        use_exact, positions = self._hessian_plan(structured)
        if use_exact:
            h_fn = tf.function(functools.partial(self._structured_hessian, served=served), autograph=False)

            def exact(x: tf.Tensor) -> tf.Tensor:
                return h_fn(x[0])[None]
        elif positions is not None:
            def couplings_block(x: tf.Tensor) -> tf.Tensor:
                return self._structured_hessian(x, served, positions)

            b_fn = tf.function(couplings_block, autograph=False)
            block = (positions, lambda x: b_fn(x[0])[None])

        def first_inverse_hessian() -> tf.Tensor:
            # BFGS's first inverse Hessian: forward differences of exact gradients at the start
            # (steps of eps^(1/3) max(|x|, 1); a seed needs no more), inverted in units of the
            # diagonal with eigenvalues by magnitude, at least SEED_FLOOR: a descent direction
            # also away from the minimum, and no step of thousands of errors along a flat
            # direction (two amplitudes of one shape: their difference is unconstrained).
            if exact is not None:
                h0 = exact(x0[None])[0]
            else:
                h0 = forward_hessian(vg, x0[None], g0, (default_step(x0) / HESSE_STEP)[None], lower, upper,
                                     block=block)[0]
            h0 = tf.where(tf.reduce_all(tf.math.is_finite(h0)), h0, tf.eye(n, dtype=tf.float64))
            d = tf.sqrt(tf.maximum(tf.abs(tf.linalg.diag_part(h0)), 1e-300))
            d = tf.where(tf.linalg.diag_part(h0) != 0.0, d, tf.ones_like(d))
            w, v = tf.linalg.eigh(h0 / (d[:, None] * d[None, :]))
            w = tf.maximum(tf.abs(w), SEED_FLOOR)
            return ((v / w[None, :]) @ tf.transpose(v)) / (d[:, None] * d[None, :])

        # Always from this start (not the last fit's Hessian, which would save n gradients): a
        # fit's numbers depend on the loss and its start only, so a seeded toy study is
        # reproducible to the last digit.
        hinv0 = first_inverse_hessian()
        x, f, hess, edm, ok, converged, nfcn = lockstep_bfgs(
            vg, x0[None], hinv0[None], lower, upper, maxiter, edm_max, first=(f0, g0, ok0), hesse_step=SERIAL_HESSE_STEP,
            hessian=exact, hessian_block=block)
        ok = ok[0] & ok0[0] & tf.reduce_all(tf.math.is_finite(hess))
        x, f, hess, edm, converged = x[0], f[0], hess[0], edm[0], converged[0]
        posdef = tf.reduce_all(tf.math.is_finite(tf.linalg.cholesky(hess)))

        def flat() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
            # Not positive definite: with a flat direction only, MIGRAD's verdict on the matrix
            # Minuit2 would make of it (one more gradient, for its EDM).
            shifted, nearly_flat = made_positive_definite(hess)
            _, g, ok_g = vg(x[None])
            chol = tf.linalg.cholesky(tf.where(nearly_flat, shifted, tf.eye(n, dtype=tf.float64)))
            edm_made = 0.5 * tf.reduce_sum(g[0] * tf.linalg.cholesky_solve(chol, g[0][:, None])[:, 0])
            return shifted, edm_made, nearly_flat & ok_g[0] & (edm_made < edm_max), nearly_flat

        hess, edm, converged, made = tf.cond(posdef, lambda: (hess, edm, converged, tf.constant(False)), flat)
        seed_calls = 0 if exact is not None else n - (len(block[0]) if block is not None else 0)
        # g0: the gradient at the start, for the check of a program loaded from the trace store (run())
        return x, f, f0[0], hess, edm, ok, converged, nfcn[0] + seed_calls + tf.cast(made, tf.int32), made, g0[0]

    def _hessian_plan(self, structured: bool | str) -> tuple[bool, tuple[int, ...] | None]:
        """How the program's two Hessians are made: (exact from the loss, positions of an exact block)."""
        if structured is True and self.loss.supports_structured_hessian(self.params):
            return True, None
        if structured == "auto":
            # The couplings' block exactly, differences along the line shapes only: where line
            # shapes float each gradient recomputes their groups (J/psi, 18 parameters: 12 of the
            # 18 gradients per Hessian saved). With every fitted parameter in the block the
            # gradients are cheap products over cached columns, and differences cost less than
            # the block's passes over the (K, H, N) columns (RESULTS.md, "The structured Hessian");
            # with fewer than MIN_BLOCK parameters in it, its trace costs more than it saves.
            positions = tuple(self.loss.structured_hessian_block(self.params))
            if MIN_BLOCK <= len(positions) < len(self.params):
                return False, positions
        return False, None

    def fixed_calls(self, structured_hessian: bool | str = False) -> int:
        """The most value + gradient evaluations a :meth:`run` makes besides its BFGS steps.

        The start, the seed Hessian and the final one (one per differenced parameter each), the
        Newton step and the gradient of a flat direction's check: ``maxiter = maxfcn -
        fixed_calls`` keeps a run's ``nfcn`` within a budget of ``maxfcn`` calls.

        Parameters
        ----------
        structured_hessian : bool or "auto"
            As for :meth:`run`.

        Returns
        -------
        int
        """
        structured = structured_hessian if structured_hessian == "auto" else bool(structured_hessian)
        use_exact, positions = self._hessian_plan(structured)
        differenced = 0 if use_exact else len(self.params) - (len(set(positions)) if positions else 0)
        return 3 + 2 * differenced

    # -- running -----------------------------------------------------------------------------
    def _served(self, x0: np.ndarray) -> dict[int, tf.Tensor]:
        """The caches no fitted parameter reaches, each read through its cache (a hit when valid).

        Which caches they are is found once (and again after the dependency graph changed) by
        running the loss's Python code eagerly with the fitted parameters substituted (caches
        never computed before are discovered there; the invariant ones are read, not recomputed).
        """
        if self._invariants is None or self._invariants[0] != GRAPH.version:
            varying = {p.node_id for p in self.params}
            sub = {p.node_id: tf.constant(v, tf.float64) for p, v in zip(self.params, x0, strict=True)}
            with run_eagerly(), substituted(sub), finding_invariants(varying) as found, collecting():
                self.loss.value()
            self._invariants = (GRAPH.version, [weakref.ref(c) for c in {c.node_id: c for c in found}.values()])
        caches = [c for c in (ref() for ref in self._invariants[1]) if c is not None]
        # read without a gradient attached: they enter the program as inputs that nothing differentiates
        # (an eager custom gradient per read is a noticeable part of a small warm fit)
        with differentiating(()):
            return {c.node_id: c.value() for c in caches}

    def _program(self, served: dict[int, tf.Tensor], jit: bool, structured: bool | str) -> Any:
        key = (tuple(served), jit, structured)
        fn = self._programs.get(key)
        if fn is None:
            fn = self._programs[key] = self._traced(served, jit, structured)
        return fn

    def _traced(self, served: dict[int, tf.Tensor], jit: bool, structured: bool | str) -> Any:
        del served  # the program's key
        return tf.function(functools.partial(self._body, jit=jit, structured=structured), autograph=False,
                           reduce_retracing=True)

    def run(self, x0: np.ndarray, edm_max: float, maxiter: int = 500, jit: bool = False,
            structured_hessian: bool | str = False) -> CompiledOutcome:
        """Fit from ``x0``; the parameters are not changed (the caller sets them from the outcome).

        Parameters
        ----------
        x0 : ndarray
            (n,) the start, inside the limits.
        edm_max : float
            MIGRAD's bound on the EDM, ``0.002 * tol * errordef``.
        maxiter : int
            Bound on BFGS steps (each one value + gradient evaluation; see :meth:`fixed_calls`
            for the others).
        jit : bool
            Compile the loss's value + gradient with XLA (the loop around it stays a graph).
        structured_hessian : bool or "auto"
            ``True``: both Hessians from ``loss.structured_hessian`` where the loss supports it;
            ``"auto"``: the block ``loss.structured_hessian_block`` offers exactly, where it is some
            parameters but not all, differences for the others; else (and with ``False``) forward
            differences of exact gradients.

        Returns
        -------
        CompiledOutcome

        Raises
        ------
        IllegalInGraphModeError
            Inside a trace.
        """
        forbid_in_trace("a compiled fit")
        x0 = np.clip(np.asarray(x0, dtype=np.float64), self.lower, self.upper)
        served = self._served(x0)
        fn = self._program(served, jit, structured_hessian if structured_hessian == "auto" else bool(structured_hessian))
        # The program calls its value + gradient function at six places: built without shape
        # inference through that function's body at each (tf_internals item 16; about half of a
        # large program's trace), since its outputs' shapes are the function's own.
        first = fn.experimental_get_tracing_count() == 0
        structured = structured_hessian if structured_hessian == "auto" else bool(structured_hessian)
        with ENGINE_LOCK:
            fn, out = self._call(fn, served, x0, maxiter, edm_max, jit, structured, first)
            if isinstance(fn, StoredProgram) and not fn.checked and not self._agrees(out[2], out[9], x0, served):
                # the stored program's loss or gradient at the start is not the loss's: its key missed something
                forget(fn)
                fn = self._programs[(tuple(served), jit, structured)] = self._traced(served, jit, structured)
                fn, out = self._call(fn, served, x0, maxiter, edm_max, jit, structured, True, store=False)
            elif isinstance(fn, StoredProgram):
                fn.checked = True
        x, f, f0, hess, edm, ok, converged, nfcn, made = (t.numpy() for t in out[:9])
        reason = self._verdict(x, hess, bool(ok), bool(converged))
        return CompiledOutcome(x=x, fmin=float(f), fstart=float(f0), hessian=hess, edm=float(edm), nfcn=int(nfcn),
                               reason=reason, made_posdef=bool(made))

    def _call(self, fn: Any, served: dict[int, tf.Tensor], x0: np.ndarray, maxiter: int, edm_max: float, jit: bool,
              structured: bool | str, first: bool, freeze: bool = True, store: bool = True) -> tuple[Any, tuple]:
        """Load or trace ``fn`` where ``first``, then call it; the program called and its outputs.

        ``freeze``: the collector out of the trace; ``store``: the trace store asked first and written after.
        """
        # The compile cache checks its folder before a call that may compile (or load) XLA code and records
        # what XLA compiled after it (the program's value + gradient function, a fused program of the loss):
        # the first call of a program, and the first with new shapes (the served values', the datasets' rows:
        # XLA compiles per shape). A later call runs what TensorFlow holds in memory: the check (a listdir and a
        # stat per entry of the folder) would cost every warm fit for nothing.
        key = ((tuple(served), jit, structured), tuple(tuple(v.shape) for v in served.values()),
               tuple(storage_rows(d) for d in self.loss.datasets()))
        if first:
            self._checked_calls.add(key)
        with calling_jit(jit), without_grappler(), calls_without_body_shape_inference(), zcache_graphs(), \
                compiling(True) if first else first_call(self._checked_calls, key):
            if first:
                with collector_out_of_traces() if freeze else contextlib.nullcontext():
                    if store:
                        fn = self._first_program(fn, served, jit, structured)
                    else:
                        self._trace_for_every_size(fn, served)
            args = (tf.constant(x0), served, tf.constant(self.lower), tf.constant(self.upper),
                    tf.constant(int(maxiter), tf.int32), tf.constant(float(edm_max), tf.float64))
            # A warm call with a key seen before calls the concrete program directly: tf.function's dispatch
            # (binding the arguments, the served dict's trace type, the lookup of the trace) is skipped. A new
            # key goes through the tf.function (which traces again for shapes its trace does not cover).
            known = self._concrete.get(key)
            if known is not None and known[0] is fn:
                return fn, known[1](*args, jit=jit, structured=structured)  # fn's partial binds these two
            out = fn(*args)
            if isinstance(fn, tf.types.experimental.PolymorphicFunction):
                self._concrete[key] = (fn, fn.get_concrete_function(*args))  # the trace just called
            return fn, out

    def traced(self, jit: bool = False, structured_hessian: bool | str = False) -> bool:
        """Whether a program with these settings has been traced (a :meth:`run` with them starts at its call).

        Parameters
        ----------
        jit, structured_hessian
            As for :meth:`run`.

        Returns
        -------
        bool
        """
        structured = structured_hessian if structured_hessian == "auto" else bool(structured_hessian)
        return any(key[1:] == (jit, structured) and fn.experimental_get_tracing_count() > 0
                   for key, fn in list(self._programs.items()))

    def builder(self, x0: np.ndarray, jit: bool = False, structured_hessian: bool | str = False) -> Any:
        """The work that leaves :meth:`run` with these settings only the fit itself: trace and first call.

        The caches the program is served are read here, on the calling thread (an eager read may
        fill a cache). The returned function traces the program (unless it is traced) and calls it
        once from ``x0`` with one BFGS step, so that TensorFlow's runtime prepares it; the outcome
        is dropped. It reads no cache through the engine and writes no Variable (the program
        writes none): it may run on another thread while this one fits (``zcache._fitting.tiers``).
        It raises what the trace raises (the caller decides; :meth:`run` would raise the same).

        Parameters
        ----------
        x0 : ndarray
            (n,) a start inside the limits (the first fit's).
        jit, structured_hessian
            As for :meth:`run`.

        Returns
        -------
        callable
            Taking no argument, returning None.

        Raises
        ------
        IllegalInGraphModeError
            Inside a trace.
        """
        forbid_in_trace("a compiled fit")
        x0 = np.clip(np.asarray(x0, dtype=np.float64), self.lower, self.upper)
        served = self._served(x0)
        structured = structured_hessian if structured_hessian == "auto" else bool(structured_hessian)
        fn = self._program(served, jit, structured)

        def build() -> None:
            # not freezing the collector: the user's code runs meanwhile, and finds the collector as it left it.
            # A program loaded from the trace store is checked by the first run() that uses it, not here
            # (the check evaluates the loss through the engine, which this thread must not).
            first = fn.experimental_get_tracing_count() == 0
            self._call(fn, served, x0, 1, 0.0, jit, structured, first, freeze=False)

        return build

    def _first_program(self, fn: Any, served: dict[int, tf.Tensor], jit: bool, structured: bool | str) -> Any:
        """The program's first use in this process: loaded from the trace store, else traced (and stored).

        Loading replaces the trace only; a later process composes with whatever calls the program.
        """
        stored = load(self, served, jit, structured)
        if stored is not None:
            self._programs[(tuple(served), jit, structured)] = stored
            return stored
        concrete = self._trace_for_every_size(fn, served)
        save(self, served, jit, structured, concrete)
        return fn

    def _agrees(self, f0: tf.Tensor, g0: tf.Tensor, x0: np.ndarray, served: dict[int, tf.Tensor]) -> bool:
        """Whether a loaded program's loss and gradient at ``x0`` are the loss's own, evaluated eagerly."""
        with run_eagerly():
            eager_f, eager_g, _ = self._value_gradient(tf.constant(x0), served)
        return agrees(float(f0), g0.numpy(), float(eager_f), eager_g.numpy())

    def _trace_for_every_size(self, fn: Any, served: dict[int, tf.Tensor]) -> Any:
        """Trace ``fn`` once with the events axis of every served value left open.

        A served value with one row per event (a data-only column) changes its number of rows
        with ``set_data``; traced with the first dataset's size, the program would be traced
        again for the second size (``reduce_retracing``). Traced with that axis open, every
        later call finds this trace. The events axis is the first axis of a value whose length
        is a dataset's number of rows now.
        """
        rows = {int(d.value().shape[0]) for d in self.loss.datasets() if d.value().shape.rank}
        specs = {k: tf.TensorSpec([None, *v.shape[1:]] if v.shape.rank and v.shape[0] in rows else v.shape, v.dtype)
                 for k, v in served.items()}
        n = len(self.params)
        return fn.get_concrete_function(tf.TensorSpec([n], tf.float64), specs, tf.TensorSpec([n], tf.float64),
                                        tf.TensorSpec([n], tf.float64), tf.TensorSpec([], tf.int32),
                                        tf.TensorSpec([], tf.float64))

    def _verdict(self, x: np.ndarray, hess: np.ndarray, ok: bool, converged: bool) -> str | None:
        if not ok:
            return "a zcache check of the loss failed or a value was not finite"
        on_limit = [p.name for p, v, lo, hi in zip(self.params, x, self.lower, self.upper, strict=True)
                    if any(np.isfinite(end) and abs(v - end) <= 1e-10 * max(1.0, abs(end)) for end in (lo, hi))]
        if on_limit:
            return f"parameter(s) {on_limit} at a limit"
        try:
            np.linalg.cholesky(hess)
        except np.linalg.LinAlgError:
            return "the Hessian at the minimum is not positive definite"
        if not converged:
            return "BFGS did not reach MIGRAD's EDM bound"
        return None
