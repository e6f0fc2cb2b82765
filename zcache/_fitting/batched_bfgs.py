r"""A minimizer for many fits at once: BFGS in lockstep, then HESSE, inside one compiled program.

:func:`lockstep_bfgs` minimizes ``B`` functions of ``n`` parameters together, given one
batched function ``vg(x) -> (value (B,), gradient (B, n), ok (B,))``: BFGS with a backtracking
(Armijo) line search, all rows in one ``tf.while_loop``, each row with its own step, inverse
Hessian and convergence flag, steps clipped into the limits. At the end, each row's Hessian by
forward differences of its exact gradients (:func:`forward_hessian`, steps from the
finite-difference rules of :mod:`zcache._engine.finite_differences`), one Newton step from it, and
MIGRAD's estimated distance to the minimum :math:`\mathrm{EDM} = \tfrac12 g^T H^{-1} g`.
:func:`covariances` turns the Hessians into HESSE's :math:`2\,\mathrm{errordef}\,H^{-1}`.
With ``hesse=False`` (a profile scan's points, which need minima, not errors) BFGS stops at
MIGRAD's own rule instead, its EDM from its inverse-Hessian estimate below the bound, and the
Hessian and Newton step are skipped.

Why BFGS and not Newton on the exact Hessian: vectorized, an exact (second-order autodiff) Hessian
of a toy costs about twenty gradients, and BFGS seeded with one exact Hessian converges in a handful
of gradients (``design/decisions/0008-fitting-decisions.md``).
:class:`zcache.scale.BatchedLoss` supplies ``vg`` (a loss vectorized over toys) and compiles.

Examples
--------
>>> import numpy as np, tensorflow as tf
>>> from zcache._fitting.batched_bfgs import lockstep_bfgs
>>> centre = tf.constant([[1.0, -2.0], [0.5, 3.0]], tf.float64)        # two quadratic bowls
>>> def vg(x):
...     d = x - centre
...     return tf.reduce_sum(d * d, axis=1), 2.0 * d, tf.ones([2], tf.bool)
>>> x0 = tf.zeros([2, 2], tf.float64)
>>> hinv = 0.5 * tf.eye(2, batch_shape=[2], dtype=tf.float64)
>>> x, f, hess, edm, ok, converged, nfcn = lockstep_bfgs(
...     vg, x0, hinv, tf.constant([-10.0, -10.0], tf.float64), tf.constant([10.0, 10.0], tf.float64),
...     tf.constant(50), tf.constant(1e-5, tf.float64))
>>> np.round(x.numpy(), 6).tolist(), converged.numpy().tolist()
([[1.0, -2.0], [0.5, 3.0]], [True, True])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from .._engine.finite_differences import forward_point

__all__ = ["EDM_MAX_FACTOR", "HESSE_STEP", "lockstep_bfgs", "forward_hessian", "reduced_inverse_hessian",
           "covariances"]

#: MIGRAD's stopping rule, EDM < 0.002 * tol * errordef, with iminuit's default tol = 0.1.
EDM_MAX_FACTOR = 0.002 * 0.1
#: Forward-difference step of the final Hessian, in units of each row's estimated error.
HESSE_STEP = 1e-4

VG = Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
#: An exact block of the Hessian: the positions it covers and ``fn(x)`` for ``x`` (B, n), (B, m, m).
Block = tuple[Sequence[int], Callable[[tf.Tensor], tf.Tensor]]


def forward_hessian(vg: VG, x: tf.Tensor, g: tf.Tensor, scale: tf.Tensor, lower: tf.Tensor,
                    upper: tf.Tensor, step: float = HESSE_STEP, block: Block | None = None) -> tf.Tensor:
    """(B, n, n) by forward differences of the exact gradients ``g`` at ``x``, steps ``step * scale``.

    One gradient per parameter: with a step of 1e-4 of the error, the truncation error is
    about 1e-5 relative (measured on Gauss + Exp against the exact Hessian) and the rounding
    error of exact gradients below 1e-8 relative. At an upper limit the step goes down.

    With ``block = (positions, fn)``, ``fn(x)`` gives the Hessian's block of those positions
    exactly (an amplitude model's couplings: one pass over its amplitudes) and only the other
    parameters are differenced: each such gradient difference is a whole row, so the mixed
    entries come from it, and a Hessian costs one gradient per differenced parameter.
    """
    n = x.shape[1]
    exact = sorted({int(j) for j in block[0]}) if block is not None else []
    varied = [j for j in range(n) if j not in exact]
    index = tf.constant(varied, tf.int32)

    def column(i: tf.Tensor, acc: tf.TensorArray) -> tuple[tf.Tensor, tf.TensorArray]:
        j = index[i]
        h = step * scale[:, j][:, None] * tf.one_hot(j, n, dtype=tf.float64)[None, :]
        point = forward_point(x, h, lower, upper, axis=1)
        _, g_point, _ = vg(point)
        width = tf.reduce_sum(point - x, axis=1)[:, None]
        return i + 1, acc.write(i, (g_point - g) / width)

    m = len(varied)
    _, acc = tf.while_loop(lambda i, _: i < m, column,
                           (tf.constant(0), tf.TensorArray(tf.float64, size=m, element_shape=x.shape)))
    rows = tf.transpose(acc.stack(), [1, 0, 2])  # (B, m, n): row i is d g / d x_j, j = varied[i]
    if not exact:
        return 0.5 * (rows + tf.linalg.matrix_transpose(rows))
    # Rows of the differenced parameters in place, zero rows elsewhere; the exact block in place.
    put_block = tf.constant(np.eye(n)[:, exact], tf.float64)  # (n, e)
    e = tf.einsum("ia,zab,jb->zij", put_block, block[1](x), put_block)
    if not m:
        return e
    r = tf.einsum("im,bmj->bij", tf.constant(np.eye(n)[:, varied], tf.float64), rows)
    on = np.zeros(n)
    on[varied] = 1.0
    both, row_only = np.outer(on, on), np.outer(on, 1.0 - on)
    rt = tf.linalg.matrix_transpose(r)
    return 0.5 * both * (r + rt) + row_only * r + row_only.T * rt + e


def lockstep_bfgs(vg: VG, x0: tf.Tensor, hinv0: tf.Tensor, lower: tf.Tensor, upper: tf.Tensor, maxiter: tf.Tensor,
                  edm_max: tf.Tensor, *, first: tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None = None,
                  hesse_step: float = HESSE_STEP, hessian: Callable[[tf.Tensor], tf.Tensor] | None = None,
                  hessian_block: Block | None = None, active_set: bool = False,
                  hesse: bool = True) -> tuple[tf.Tensor, ...]:
    """Minimize every row of ``vg`` from ``x0``: BFGS in lockstep, HESSE, one Newton step.

    Parameters
    ----------
    vg : callable
        ``vg(x)`` for ``x`` of shape (B, n): values (B,), gradients (B, n) and whether each
        row's evaluation is fine (B,) bool.
    x0, hinv0 : tf.Tensor
        (B, n) starts and (B, n, n) starting inverse Hessians.
    lower, upper : tf.Tensor
        (n,) limits (``-inf`` / ``inf`` for none).
    maxiter : tf.Tensor
        Bound on BFGS steps (each one batched evaluation).
    edm_max : tf.Tensor
        The EDM below which a row has converged.
    first : tuple of tf.Tensor, optional
        ``vg(x0)`` when the caller has it already (one evaluation fewer).
    hesse_step : float
        The final Hessian's forward-difference step, in units of each row's estimated error.
    hessian : callable, optional
        ``hessian(x)`` for ``x`` (B, n): the exact (B, n, n) Hessians, used instead of differences
        (no function call counted in ``nfcn``).
    hessian_block : (positions, callable), optional
        Without ``hessian``: an exact block of the final Hessian (:func:`forward_hessian`'s
        ``block``); only the other parameters are differenced (and counted in ``nfcn``).
    active_set : bool
        Hold a parameter that sits on a limit with its gradient pointing out of the range
        (:func:`reduced_inverse_hessian`): the step moves the others only, and the row stops
        when their EDM is below the bound, instead of stepping into the limit until its line
        search stalls. The final Hessian, Newton step and EDM are the whole problem's, as
        without it (such a row does not converge: it ends on a limit). Rows off their limits
        take the same steps either way.
    hesse : bool
        True (default): BFGS runs until its EDM is below ``1e-4 * edm_max``, then the Hessian
        by differences (HESSE), one Newton step and the EDM with that Hessian decide. False:
        for a minimum without errors (a profile scan's point), MIGRAD's own rule: BFGS stops
        once the EDM from its inverse-Hessian estimate, ``0.5 g^T V g``, is below
        ``edm_max``; no Hessian, no Newton step (``n + 1`` evaluations fewer, and fewer BFGS
        steps). ``hess`` is then the inverse of BFGS's estimate ``V`` (MIGRAD's covariance
        before HESSE) and ``edm`` that EDM, of the whole problem (with ``active_set``, a row
        held on a limit does not converge, as with HESSE).

    Returns
    -------
    tuple of tf.Tensor
        ``x`` (B, n), ``f`` (B,), ``hess`` (B, n, n), ``edm`` (B,; NaN where the Hessian is not
        positive definite), ``ok`` (B,), ``converged`` (B,), ``nfcn`` (B,) evaluations per row.
    """
    def edm_of(g: tf.Tensor, hinv: tf.Tensor) -> tf.Tensor:
        return 0.5 * tf.einsum("bi,bij,bj->b", g, hinv, g)

    def reduced(x: tf.Tensor, g: tf.Tensor, hinv: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if not active_set:
            return tf.zeros_like(x, tf.bool), hinv
        held = ((x <= lower) & (g > 0.0)) | ((x >= upper) & (g < 0.0))
        return held, reduced_inverse_hessian(hinv, held)

    # With HESSE, BFGS goes far below the bound (the Newton step then leaves the EDM tiny);
    # without, the bound is MIGRAD's own, on BFGS's estimate.
    stop = 1e-4 * edm_max if hesse else edm_max
    f0, g0, ok0 = vg(x0) if first is None else first
    batch = tf.shape(x0)[0]
    n = x0.shape[1]
    step0 = tf.ones([batch], tf.float64)
    held0, hred0 = reduced(x0, g0, hinv0)
    done0 = ~ok0 | (edm_of(tf.where(held0, tf.zeros_like(g0), g0), hred0) < stop)
    nfcn0 = tf.ones([batch], tf.int32)

    def cond(k, x, f, g, hinv, step, done, ok, nfcn):  # noqa: ARG001
        return (k < maxiter) & ~tf.reduce_all(done)

    def body(k, x, f, g, hinv, step, done, ok, nfcn):
        held, hred = reduced(x, g, hinv)
        d = tf.where(held, tf.zeros_like(g), -tf.einsum("bij,bj->bi", hred, g))
        descent = tf.reduce_sum(g * d, axis=1) < 0.0
        d = tf.where(descent[:, None], d, tf.where(held, tf.zeros_like(g), -g))  # a lost direction: steepest descent, fresh start
        trial = tf.clip_by_value(x + step[:, None] * d, lower, upper)
        f_t, g_t, ok_t = vg(trial)
        moved = tf.reduce_sum(g * (trial - x), axis=1)
        accept = ok_t & (f_t <= f + 1e-4 * moved) & ~done
        s = trial - x
        y = g_t - g
        sy = tf.reduce_sum(s * y, axis=1)
        good = accept & (sy > 1e-12 * tf.norm(s, axis=1) * tf.norm(y, axis=1))
        rho = tf.where(good, 1.0 / tf.where(good, sy, 1.0), 0.0)[:, None, None]
        eye = tf.eye(n, batch_shape=[batch], dtype=tf.float64)
        left = eye - rho * s[:, :, None] * y[:, None, :]
        updated = left @ hinv @ tf.linalg.matrix_transpose(left) + rho * s[:, :, None] * s[:, None, :]
        hinv_new = tf.where(good[:, None, None], updated, hinv)
        hinv_new = tf.where(descent[:, None, None], hinv_new, tf.where(accept[:, None, None], hinv_new, hinv0))
        x_new = tf.where(accept[:, None], trial, x)
        f_new = tf.where(accept, f_t, f)
        g_new = tf.where(accept[:, None], g_t, g)
        step_new = tf.where(accept | done, tf.ones_like(step), 0.3 * step)
        stalled = step_new < 1e-10
        held_new, hred_new = reduced(x_new, g_new, hinv_new)
        converged = accept & (edm_of(tf.where(held_new, tf.zeros_like(g_new), g_new), hred_new) < stop)
        nfcn_new = nfcn + tf.cast(~done, tf.int32)
        new = (x_new, f_new, g_new, hinv_new, step_new, done | converged | stalled, ok, nfcn_new)
        old = (x, f, g, hinv, step, done, ok, nfcn)
        # The static batch size can get lost in the map (B = 1): the loop keeps its shapes.
        return (k + 1, *(tf.ensure_shape(v, o.shape) for v, o in zip(new, old, strict=True)))

    _, x, f, g, hinv, _, _, ok, nfcn = tf.while_loop(
        cond, body, (tf.constant(0), x0, f0, g0, hinv0, step0, done0, ok0, nfcn0))
    if not hesse:
        # MIGRAD's verdict without HESSE: BFGS's own EDM of the whole problem, its inverse
        # Hessian as the covariance estimate (positive definite unless the updates broke).
        chol_ok = tf.reduce_all(tf.math.is_finite(tf.linalg.cholesky(hinv)), axis=[1, 2])
        safe = tf.where(chol_ok[:, None, None], hinv, tf.eye(n, batch_shape=[batch], dtype=tf.float64))
        hess = tf.where(chol_ok[:, None, None], tf.linalg.cholesky_solve(
            tf.linalg.cholesky(safe), tf.eye(n, batch_shape=[batch], dtype=tf.float64)), np.nan)
        edm = edm_of(g, hinv)
        converged = chol_ok & ok & (edm < edm_max)
        return x, f, hess, tf.where(chol_ok, edm, np.nan), ok, converged, nfcn
    # HESSE: the Hessian by differences of exact gradients, steps scaled by the errors.
    if hessian is None:
        scale = tf.sqrt(tf.maximum(tf.linalg.diag_part(hinv), 1e-300))
        hess = forward_hessian(vg, x, g, scale, lower, upper, hesse_step, hessian_block)
        nfcn = nfcn + n - (len(set(hessian_block[0])) if hessian_block is not None else 0)
    else:
        hess = hessian(x)
    # One Newton step with that Hessian (kept where it lowers the loss): MIGRAD's last
    # step uses the same information, and it leaves the EDM far below its bound.
    chol_ok = tf.reduce_all(tf.math.is_finite(tf.linalg.cholesky(hess)), axis=[1, 2])
    safe = tf.where(chol_ok[:, None, None], hess, tf.eye(n, batch_shape=[batch], dtype=tf.float64))
    newton = -tf.linalg.cholesky_solve(tf.linalg.cholesky(safe), g[:, :, None])[:, :, 0]
    edm = 0.5 * tf.reduce_sum(-g * newton, axis=1)
    trial = tf.clip_by_value(x + newton, lower, upper)
    f_t, _, ok_t = vg(trial)
    keep = chol_ok & ok_t & (f_t <= f)
    x = tf.where(keep[:, None], trial, x)
    f = tf.where(keep, f_t, f)
    converged = chol_ok & (edm < edm_max)
    return x, f, hess, tf.where(chol_ok, edm, np.nan), ok, converged, nfcn + 1


def reduced_inverse_hessian(hinv: tf.Tensor, held: tf.Tensor) -> tf.Tensor:
    """The inverse Hessian of the other parameters where those ``held`` (B, n) are fixed: (B, n, n).

    Fixing parameter ``a`` turns the inverse Hessian ``V`` of all into the Schur complement
    ``V - V[:, a] V[a, :] / V[a, a]`` (the inverse of the Hessian without row and column
    ``a``, embedded with zeros there), one held parameter after the other. A row with nothing
    held keeps ``hinv`` exactly (selected, not recomputed).

    Examples
    --------
    >>> import numpy as np, tensorflow as tf
    >>> h = tf.constant([[[2.0, 1.0], [1.0, 2.0]]], tf.float64)       # the Hessian
    >>> out = reduced_inverse_hessian(tf.linalg.inv(h), tf.constant([[True, False]]))
    >>> np.round(out.numpy()[0], 12).tolist()                           # 1 / h[1, 1] in place
    [[0.0, 0.0], [0.0, 0.5]]
    """
    out = hinv
    for a in range(hinv.shape[-1]):
        col = out[:, :, a]
        pivot = out[:, a, a]
        use = held[:, a] & (pivot > 0.0)
        safe = tf.where(use, pivot, 1.0)
        schur = out - col[:, :, None] * col[:, None, :] / safe[:, None, None]
        out = tf.where(use[:, None, None], schur, out)
    return out


def covariances(hess: np.ndarray, errordef: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HESSE's ``2 errordef H^-1`` per row: (covariances, errors, positive definite); NaN where H is not.

    Parameters
    ----------
    hess : ndarray
        (B, n, n) Hessians.
    errordef : float
        The loss's errordef.

    Returns
    -------
    tuple of ndarray
        (B, n, n) covariances, (B, n) errors and (B,) bool.
    """
    cov = np.full_like(hess, np.nan)
    errors = np.full(hess.shape[:2], np.nan)
    posdef = np.zeros(len(hess), bool)
    if len(hess):
        try:  # every row positive definite (the rule): one call for the stack, the same LAPACK per matrix
            np.linalg.cholesky(hess)
        except np.linalg.LinAlgError:
            pass
        else:
            cov = 2.0 * errordef * np.linalg.inv(hess)
            errors = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
            return cov, errors, np.ones(len(hess), bool)
    for b in range(len(hess)):  # some row is not: row by row
        try:
            np.linalg.cholesky(hess[b])
        except np.linalg.LinAlgError:
            continue
        posdef[b] = True
        cov[b] = 2.0 * errordef * np.linalg.inv(hess[b])
        errors[b] = np.sqrt(np.diag(cov[b]))
    return cov, errors, posdef
