r"""The boundary between losses and minimizers: a loss as a function of one vector.

A minimizer sees a loss through an :class:`Objective` (:meth:`zcache.loss.BaseLoss.objective`),
as pyhf's optimizers see ``(func, x0, do_grad, bounds)``: a function of one float64 vector
``x`` (the fitted parameters' values, in order) that offers

- the **value**, the **value and gradient** and the **Hessian** at ``x`` (each one traced call of
  the loss, which sets the parameters to ``x`` inside it);
- the **start** (the parameters' values, clipped into their limits), the **limits** and the
  **errordef**;
- the **offset**: the first value computed is this minimization's offset and every value is
  relative to it, so the minimizer works on numbers of order one near the minimum (a start where
  the loss is not finite is refused with a :class:`~zcache.exceptions.FitError`, the parameters
  left as they were);
- a **memo** (:meth:`Objective.remembering`): a minimizer that asks for a gradient only where it
  has just had the value (MIGRAD does) gets it from the value's call, and a Hessian asked for
  twice at the same point (MIGRAD's last, HESSE's first) is computed once;
- the **errors at the minimum**: the curvature covariance :math:`2\,\mathrm{errordef}\,H^{-1}`
  (:meth:`Objective.covariance`) and what belongs to the loss on top of it, the correction of a
  fit to weighted events (:meth:`Objective.corrected`, from the loss's per-event terms and its
  constraints' Hessian; ``zcache._fitting.corrections``);
- the **state a result keeps** (:meth:`Objective.snapshot`): every parameter's value and every
  dataset, put back while MINOS or a profile of that fit runs.

A fit thus goes down once: the minimizer asks the objective, the objective asks the loss; the
minimizer only minimizes and assembles the :class:`zcache.minimize.FitResult`.

Before the first step the objective checks the parameters (at least one, unique names) and
applies :func:`zcache.precompute` for them, as the minimizer asks.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> mu = zcache.Parameter("mu_obj", 0.5, lower=-2.0, upper=2.0)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.array([-0.5, 0.5, 1.0])))
>>> objective = loss.objective()
>>> objective.start, objective.value(objective.start)      # the first value is the offset
(array([0.5]), 0.0)
>>> value, grad = objective.value_gradient(np.array([0.0]))
>>> round(value, 3), grad.round(6).tolist()                # NLL(0) - NLL(0.5); -(sum x - n mu)
(0.125, [-1.0])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.parameter import Parameter, set_values
from .._engine.precompute import PrecomputeReport, ensure_precomputed
from .._engine.trace import forbid_in_trace
from ..exceptions import FitError
from ..models import unique_parameters
from .corrections import corrected_covariance, has_weights

__all__ = ["Objective", "LossState"]

#: Gradients the memo keeps, of the most recent value calls.
_KEPT_GRADIENTS = 4


class LossState:
    """The state of a loss at the end of a fit: every parameter's value and every dataset.

    ``with state.active():`` puts it back for the duration (so that MINOS or a profile of
    this fit sees the fit's fixed parameters and data, whatever happened since) and then
    restores what was there before, also when the body raises.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss.
    params : sequence of Parameter
        The fitted parameters (kept besides the loss's own).
    offset : float
        The minimization's offset (what its values are relative to).
    fval : float
        The minimizer's value at the minimum (relative to ``offset``).
    """

    def __init__(self, loss: Any, params: Sequence[Parameter], offset: float, fval: float) -> None:
        self.loss = loss
        # All of the loss's parameters, fixed ones included: a later fit may have moved a fixed
        # parameter or changed the floating set; plus explicitly fitted ones outside the loss.
        self.params = tuple(unique_parameters([*loss.get_params(floating=None), *params]))
        self.values = np.array([float(p) for p in self.params])
        # read_value() holds the buffer (no copy); a later set_data assigns a new one.
        self.data = [(d, d.variable.read_value()) for d in loss.datasets()]
        self.offset = offset
        self.fval = fval
        self._depth = 0

    @contextmanager
    def active(self) -> Iterator[None]:
        """Put this state in place for the body; restore the parameters and data afterwards.

        Yields
        ------
        None
        """
        if self._depth:  # nested (draw_mnprofile calls mnprofile): the state is already in place
            yield
            return
        forbid_in_trace("FitResult.minos / profile")
        saved = np.array([float(p) for p in self.params])
        swapped = []
        for data, array in self.data:
            now = data.variable.read_value()
            if now.shape != array.shape or not bool(tf.reduce_all(tf.equal(now, array))):
                swapped.append((data, now))
        self._depth += 1
        try:
            for data, array in self.data:
                if any(data is d for d, _ in swapped):
                    data.set_data(array)
            set_values(self.params, self.values)
            yield
        finally:
            self._depth -= 1
            # set_values writes only what differs, so restoring invalidates only what moved.
            set_values(self.params, saved)
            for data, now in swapped:
                data.set_data(now)


class Objective:
    """A loss as a minimizer sees it: value, gradient and Hessian of one float64 vector.

    Create it with :meth:`zcache.loss.BaseLoss.objective`; see the module's documentation.

    Parameters
    ----------
    loss : zcache.loss.BaseLoss
        The loss.
    params : sequence of Parameter, optional
        The fitted parameters, in the order of ``x``; default ``loss.params`` (floating now).
    precompute : bool
        Apply :func:`zcache.precompute` for ``params`` first (once per loss and setting).
    keep_floating : bool
        Precompute keeps the caches of floating parameters (a minimizer that moves one
        parameter per call: numerical gradients).
    who : str
        The minimizer's name, for error messages.

    Attributes
    ----------
    loss : zcache.loss.BaseLoss
    params : tuple of Parameter
    names : list of str
    lower, upper : ndarray
        The limits, ``-inf`` / ``inf`` where there is none.
    start : ndarray
        The starting point: the parameters' values clipped into the limits (a hair inside a
        two-sided limit, where Minuit's sine transform has zero slope).
    errordef : float
        The change of the loss that makes one standard deviation.
    report : zcache.types.PrecomputeReport or None
        What precompute did (None without).
    exact_hessian : bool or None
        ``exact`` of :meth:`zcache.loss.BaseLoss.hessian_at` in :meth:`hessian`: None (default) its
        choice; False central differences of exact gradients, no program of its own (the MIGRAD
        tier of ``Minuit``'s tiered start).

    Raises
    ------
    TypeError
        An entry of ``params`` is not a Parameter.
    FitError
        No parameters to fit, or duplicate names.
    """

    # ``loss`` is a zcache.loss.BaseLoss; not imported, as the loss module builds objectives.
    def __init__(self, loss: Any, params: Sequence[Parameter] | None = None, *, precompute: bool = True,
                 keep_floating: bool = False, who: str = "minimize") -> None:
        self.loss = loss
        self.params = tuple(loss.params if params is None else params)
        if not self.params:
            raise FitError("No floating parameters to fit: set floating=True on some, or pass params=[...].")
        if not all(isinstance(p, Parameter) for p in self.params):
            raise TypeError("params must be zcache.Parameter objects.")
        self.names = [p.name for p in self.params]
        if len(set(self.names)) != len(self.names):
            raise FitError(f"Parameter names must be unique for {who}, got {self.names}; rename the duplicates.")
        self.report: PrecomputeReport | None = (
            ensure_precomputed(loss, self.params, keep_floating=keep_floating) if precompute else None)
        self.lower = np.array([-np.inf if p.lower is None else p.lower for p in self.params])
        self.upper = np.array([np.inf if p.upper is None else p.upper for p in self.params])
        self.errordef = float(loss.errordef)
        self._before = np.array([float(p) for p in self.params])
        x0 = self.clip(self._before)
        both = np.isfinite(self.lower) & np.isfinite(self.upper)
        hair = 1e-6 * np.where(both, self.upper - self.lower, 0.0)
        self.start = np.where(both & (x0 <= self.lower), self.lower + hair,
                              np.where(both & (x0 >= self.upper), self.upper - hair, x0))
        self.offset: float | None = None
        self._remember = False
        self._kept: dict[bytes, np.ndarray] = {}
        self._kept_hessian: dict[bytes, np.ndarray] = {}
        self.exact_hessian: bool | None = None

    def __repr__(self) -> str:
        return f"Objective({type(self.loss).__name__}, params={self.names})"

    def clip(self, x: np.ndarray) -> np.ndarray:
        """``x`` clipped into the limits (Minuit's internal transform can land an ulp outside).

        Parameters
        ----------
        x : ndarray
            One value per parameter.

        Returns
        -------
        ndarray
        """
        return np.minimum(np.maximum(np.asarray(x, dtype=np.float64), self.lower), self.upper)

    # -- evaluations -------------------------------------------------------------------------
    def value(self, x: np.ndarray) -> float:
        """The loss at ``x`` minus the offset (NaN for a non-finite ``x``).

        The first value computed sets the offset (and is 0).

        Parameters
        ----------
        x : ndarray
            One value per parameter (clipped into the limits).

        Returns
        -------
        float

        Raises
        ------
        FitError
            The first value is not finite (the parameters are put back as they were).
        """
        x = self.clip(x)
        if not np.isfinite(x).all():  # after a NaN loss (e.g. a negative density): no parameter takes it
            return float("nan")
        if self._remember:  # the gradient comes with the value's call, for the next gradient request
            value, gradient = self.loss.value_gradient_at(x, self.params, offset=self.offset or 0.0)
            self._keep(self._kept, x, gradient.numpy(), _KEPT_GRADIENTS)
        else:
            value = self.loss.value_at(x, self.params, offset=self.offset or 0.0)
        return self._relative(float(value))

    def value_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """The loss at ``x`` minus the offset, and its gradient, in one call.

        Parameters
        ----------
        x : ndarray
            One value per parameter (clipped into the limits).

        Returns
        -------
        value : float
        gradient : ndarray

        Raises
        ------
        FitError
            The first value is not finite.
        """
        x = self.clip(x)
        value, gradient = self.loss.value_gradient_at(x, self.params, offset=self.offset or 0.0)
        return self._relative(float(value)), gradient.numpy()

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """The gradient at ``x`` (from the memo when the value was just computed there).

        Parameters
        ----------
        x : ndarray
            One value per parameter (clipped into the limits).

        Returns
        -------
        ndarray
            NaN for a non-finite ``x``.
        """
        x = self.clip(x)
        if not np.isfinite(x).all():
            return np.full(len(x), np.nan)
        found = self._found(self._kept, x)
        if found is not None:
            return found
        return self.loss.value_gradient_at(x, self.params, offset=0.0)[1].numpy()

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """The Hessian of the loss at ``x`` (:meth:`zcache.loss.BaseLoss.hessian_at`).

        Parameters
        ----------
        x : ndarray
            One value per parameter (clipped into the limits).

        Returns
        -------
        ndarray
            (n, n), symmetric.
        """
        x = self.clip(x)
        found = self._found(self._kept_hessian, x)
        if found is not None:
            return found
        # ``exact=`` only where the objective chooses (the tiered start's cheap tier): a loss that chooses for
        # itself (a distributed loss's parts) need not take the keyword
        how = {} if self.exact_hessian is None else {"exact": self.exact_hessian}
        hessian = self.loss.hessian_at(x, self.params, **how).numpy()
        self._keep(self._kept_hessian, x, hessian, 1)
        return hessian.copy()

    def _found(self, memo: dict[bytes, np.ndarray], x: np.ndarray) -> np.ndarray | None:
        """A copy of what ``memo`` (:meth:`remembering`) keeps for ``x``, or None (also when not remembering)."""
        found = memo.get(x.tobytes()) if self._remember else None
        return None if found is None else found.copy()

    def _keep(self, memo: dict[bytes, np.ndarray], x: np.ndarray, number: np.ndarray, size: int) -> None:
        """Keep ``number`` for ``x`` in ``memo`` (while :meth:`remembering`), the oldest dropped beyond ``size``."""
        if not self._remember:
            return
        while len(memo) >= size:
            del memo[next(iter(memo))]
        memo[x.tobytes()] = number

    @property
    def traces_whole(self) -> bool:
        """Whether the loss runs as one program in this process (not part by part: chunks, workers)."""
        return not getattr(self.loss, "evaluates_in_parts", False)

    # -- errors at the minimum ---------------------------------------------------------------
    def covariance(self, hessian: np.ndarray) -> np.ndarray | None:
        r"""``2 errordef H^-1`` for a positive definite ``hessian``: the HESSE errors' definition.

        Parameters
        ----------
        hessian : ndarray
            (n, n), the Hessian of the loss at the minimum.

        Returns
        -------
        ndarray or None
            Symmetric; None where ``hessian`` is not positive definite.
        """
        try:
            np.linalg.cholesky(hessian)
        except np.linalg.LinAlgError:
            return None
        covariance = 2.0 * self.errordef * np.linalg.inv(hessian)
        return 0.5 * (covariance + covariance.T)

    def covariance_at(self, x: np.ndarray) -> np.ndarray | None:
        """:meth:`covariance` of the loss's Hessian at ``x`` (:meth:`hessian`, from the memo where kept).

        Parameters
        ----------
        x : ndarray
            One value per parameter.

        Returns
        -------
        ndarray or None
        """
        return self.covariance(self.hessian(x))

    def corrected(self, best: np.ndarray, covariance: np.ndarray | None,
                  weightcorr: str | None) -> tuple[np.ndarray | None, str | None]:
        """The covariance at the minimum corrected for the loss's event weights, and the correction applied.

        Parameters
        ----------
        best : ndarray
            The minimum (the parameters are left there).
        covariance : ndarray or None
            The uncorrected covariance (:meth:`covariance`); None: nothing to correct.
        weightcorr : {"asymptotic", "sumw2", None}
            The correction asked for (:func:`zcache.minimize.corrected_covariance`).

        Returns
        -------
        covariance : ndarray or None
        weightcorr : str or None
            None where the loss has no weight other than 1 (the correction is then not applied).
        """
        weightcorr = weightcorr if has_weights(self.loss) else None
        if covariance is not None and weightcorr is not None:
            covariance = corrected_covariance(self.loss, self.params, best, covariance, weightcorr, self.lower,
                                              self.upper)
        return covariance, weightcorr

    def settled_offset(self, best: np.ndarray) -> float:
        """The offset, computed at the start if no call has set it yet (the parameters left at ``best``).

        Parameters
        ----------
        best : ndarray
            Where the parameters are left.

        Returns
        -------
        float
        """
        if self.offset is None:  # the minimizer made no call (they always do; kept for safety)
            self.value(self.start)
            self.finish(best)
        return self.offset

    def _relative(self, value: float) -> float:
        if self.offset is not None:
            return value
        if not np.isfinite(value):
            set_values(self.params, self._before)  # refused: the parameters as they were before the fit
            start = dict(zip(self.names, self.start.tolist(), strict=True))
            raise FitError(f"The loss is {value} at the starting values {start}; start where the model is "
                           "positive at every event (check widths and limits).")
        self.offset = value
        return 0.0

    # -- memo and state ----------------------------------------------------------------------
    @contextmanager
    def remembering(self) -> Iterator[None]:
        """Keep the gradients of value calls and the last Hessian, inside the ``with`` only.

        Inside, every value call keeps its gradient (for the few most recent points) and the
        last Hessian is kept; afterwards the memo is dropped, so that later calls (MINOS,
        profiles, maybe on other data) never read a kept number.

        Yields
        ------
        None
        """
        self._remember = True
        try:
            yield
        finally:
            self._remember = False
            self._kept.clear()
            self._kept_hessian.clear()

    def snapshot(self, fval: float) -> LossState:
        """The state a result keeps: every parameter and dataset of the loss now, with the offset.

        Parameters
        ----------
        fval : float
            The minimizer's value at the minimum (relative to the offset).

        Returns
        -------
        LossState
        """
        return LossState(self.loss, self.params, offset=self.offset or 0.0, fval=fval)

    def finish(self, best: np.ndarray) -> None:
        """Leave the parameters at ``best`` (clipped into the limits).

        Parameters
        ----------
        best : ndarray
            One value per parameter.
        """
        set_values(self.params, self.clip(best))
