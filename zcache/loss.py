r"""Losses: unbinned negative log-likelihoods, extended and simultaneous.

.. math::

    \mathrm{NLL}(\theta) = -\sum_i \log p(x_i;\theta)
        \;[+\; \nu(\theta) - N \log \nu(\theta)]_{\text{extended}}
        \;+\; \sum_c \tfrac12 \big((\theta_c - \mu_c)/\sigma_c\big)^2_{\text{constraints}}

Sums run in float64. ``value()``, ``gradient()`` and ``value_gradient()`` are
traced under the 'loss' identifier, once per loss: new parameter values or new
data (``set_data``) never retrace. Under the default graph mode ``'auto'`` their first
two calls run eagerly and the third traces (``Function(eager_calls=2)``): a look at the
loss before and after a fit costs no trace (for a large model a trace costs many eager
calls), because the fit compiles a program of its own;
``zcache.set_graph_mode(True)`` traces from the first call. Gradients follow :func:`zcache.set_autograd_mode`:
automatic through caches, or central differences.

A minimizer calls :meth:`BaseLoss.value_at` / :meth:`BaseLoss.value_gradient_at`,
which set the floating parameters and evaluate in one traced call, and subtract an
offset (the value at the starting point), so Minuit works on numbers of order one
near the minimum. The offset belongs to the minimization that passes it
(``offset=``): a second fit on the same loss never changes what the first fit's
Minuit object (MINOS, profiles) sees. A minimizer that takes one vector (Scipy, a
user's own) sees the loss through :meth:`BaseLoss.objective`, an :class:`Objective` (value,
gradient, Hessian, start, limits, offset); a fit's result keeps a :class:`LossState`.

:attr:`BaseLoss.params`, the parameters a fit floats by default, follows the
``floating`` flags at the time it is read, not at the time the loss was built:
``p.floating = False`` between two fits fixes ``p`` for the next fit.

A loss is a :func:`zcache.precompute` target (it implements ``__zcache_evaluate__``,
see :class:`zcache.types.Precomputable`), and precompute remembers its last report
for it, so a minimizer precomputes again only when the setting changed.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> mu = zcache.Parameter("mu_l", 0.0)
>>> model = Gaussian(Space("x", -5.0, 5.0), mu, 1.0)
>>> loss = UnbinnedNLL(model, zcache.Data(np.array([-0.5, 0.5, 1.0])))
>>> v, g = loss.value_gradient()
>>> round(float(g[0]), 10)      # -(sum of x - n mu) / sigma^2
-1.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ._engine.cached_tensor import CachedTensor
from ._engine.context import evaluation
from ._engine.data import Data
from ._engine.function import Function
from ._engine.parameter import Parameter
from ._engine.traced_checks import require
from ._fitting.loss_programs import LossPrograms
from ._fitting.objective import LossState, Objective
from .exceptions import DataRangeError, FitError, ModelError
from .models import Model, unique_parameters

__all__ = [
    "BaseLoss", "UnbinnedNLL", "ExtendedUnbinnedNLL", "SimultaneousLoss", "GaussianConstraint", "model_parameters",
    "Objective", "LossState",
]

class GaussianConstraint:
    r"""A Gaussian penalty on parameters: independent widths or a covariance matrix.

    The penalty is :math:`\tfrac12 (\theta - \mu)^T C^{-1} (\theta - \mu)`, with
    :math:`C = \mathrm{diag}(\sigma_j^2)` for ``sigma`` (that is
    :math:`\tfrac12\sum_j ((\theta_j - \mu_j)/\sigma_j)^2`) or :math:`C` = ``cov``: minus the
    log of a (multivariate) normal density up to a constant. Give exactly one of ``sigma``
    and ``cov``.

    Parameters
    ----------
    params : sequence of Parameter
        The constrained parameters :math:`\theta_j`.
    mu : sequence of float
        Their measured values :math:`\mu_j`, one per parameter (also ``self.observed``).
    sigma : sequence of float, optional
        Their uncertainties :math:`\sigma_j > 0`, one per parameter (uncorrelated).
    cov : array_like, optional
        The covariance matrix :math:`C`, shape ``(n, n)`` for ``n`` parameters, symmetric and
        positive definite (correlated measurements).

    Raises
    ------
    ModelError
        Not Parameters, not one value per parameter, neither or both of ``sigma`` and ``cov``,
        a sigma not positive, or ``cov`` not a finite symmetric positive definite matrix.

    Examples
    --------
    >>> import zcache
    >>> from zcache.loss import GaussianConstraint
    >>> p = zcache.Parameter("p_c", 1.5)
    >>> float(GaussianConstraint([p], [1.0], [0.5]).value())
    0.5
    >>> q = zcache.Parameter("q_c", 0.0)
    >>> con = GaussianConstraint([p, q], [1.0, 0.0], cov=[[0.25, 0.1], [0.1, 1.0]])
    >>> round(float(con.value()), 6)                     # (0.5, 0) C^-1 (0.5, 0)^T / 2
    0.520833
    """

    def __init__(self, params: Sequence[Parameter], mu: Sequence[float], sigma: Sequence[float] | None = None,
                 cov: Any = None):
        self.params = list(params)
        self._mu = np.array(mu, dtype=float)
        n = len(self.params)
        if not all(isinstance(p, Parameter) for p in self.params):
            raise ModelError("GaussianConstraint constrains zcache.Parameter objects.")
        if self._mu.shape != (n,):
            raise ModelError(f"GaussianConstraint needs one value mu per parameter ({n}), got shape {self._mu.shape}.")
        if (sigma is None) == (cov is None):
            raise ModelError("GaussianConstraint takes exactly one of sigma (independent widths) and cov "
                             "(a covariance matrix).")
        if sigma is not None:
            self._sigma = np.array(sigma, dtype=float)
            if self._sigma.shape != (n,):
                raise ModelError(f"GaussianConstraint needs one sigma per parameter ({n}), got shape {self._sigma.shape}.")
            if not (np.isfinite(self._sigma).all() and (self._sigma > 0).all()):
                raise ModelError(f"GaussianConstraint: every sigma must be positive and finite, got {self._sigma}.")
            self._cov = np.diag(self._sigma**2)
            self._inv_cov = None
        else:
            self._cov = np.array(cov, dtype=float)
            if self._cov.shape != (n, n):
                raise ModelError(f"GaussianConstraint: cov must have shape ({n}, {n}) for {n} parameters, "
                                 f"got {self._cov.shape}.")
            if not np.isfinite(self._cov).all():
                raise ModelError("GaussianConstraint: cov has NaN or infinite entries.")
            if not np.allclose(self._cov, self._cov.T, rtol=1e-10, atol=0.0):
                raise ModelError(f"GaussianConstraint: cov must be symmetric, got {self._cov.tolist()}.")
            try:
                chol = np.linalg.cholesky(self._cov)
            except np.linalg.LinAlgError as err:
                raise ModelError(f"GaussianConstraint: cov must be positive definite (its eigenvalues are "
                                 f"{np.linalg.eigvalsh(self._cov).tolist()}).") from err
            self._sigma = np.sqrt(np.diag(self._cov))
            # C^-1 from the Cholesky factor; symmetrized so the penalty's Hessian is exactly symmetric.
            inv_chol = np.linalg.inv(chol)
            inv = inv_chol.T @ inv_chol
            self._inv_cov = 0.5 * (inv + inv.T)
        # The numbers are constants of every graph traced from this constraint: a later change could not reach
        # those graphs, so they cannot be changed (a new GaussianConstraint, in a new loss, takes new values).
        for array in (self._mu, self._sigma, self._cov):
            array.flags.writeable = False

    @property
    def mu(self) -> np.ndarray:
        r"""The measured values :math:`\mu_j` (read-only: build a new constraint for others)."""
        return self._mu

    @property
    def sigma(self) -> np.ndarray:
        r"""The uncertainties :math:`\sqrt{C_{jj}}` (read-only)."""
        return self._sigma

    @property
    def cov(self) -> np.ndarray:
        r"""The covariance matrix :math:`C` (read-only)."""
        return self._cov

    @property
    def observed(self) -> np.ndarray:
        """The measured values ``mu`` (the global observables of a toy study)."""
        return self._mu

    def value(self) -> tf.Tensor:
        """The penalty at the current parameter values.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        values = tf.stack([p.value() for p in self.params])
        if self._inv_cov is None:
            return 0.5 * tf.reduce_sum(tf.square((values - self._mu) / self._sigma))
        delta = values - self._mu
        return 0.5 * tf.reduce_sum(delta * tf.linalg.matvec(tf.constant(self._inv_cov, tf.float64), delta))


class BaseLoss:
    """What every loss offers: values, gradients and the minimizer's entry points.

    Subclasses implement ``_value()`` (the loss as a tensor, inside or outside a trace),
    ``_loss_params()`` (every parameter the loss depends on, fixed ones included, in
    a stable order) and, if they read data, :meth:`datasets`; :attr:`params` filters the
    parameters by their *current* ``floating`` flag.

    Parameters
    ----------
    constraints : sequence of GaussianConstraint, optional
        Penalties added to the loss.
    """

    errordef = 0.5  # a negative log-likelihood: one sigma is a change of 1/2
    #: Whether the loss is evaluated part by part (chunks, workers), never as one program: a
    #: minimizer then calls :meth:`value_gradient_at` and does not trace the whole fit.
    evaluates_in_parts = False

    def __init__(self, constraints: Sequence[GaussianConstraint] | None = None):
        self.constraints = list(constraints or [])
        # A Python float, passed to the traced calls as a tensor argument: a minimizer passes its
        # own offset, so this default is only what value_at uses when none is given.
        self._offset = 0.0
        # The traced functions, by composition (zcache._fitting.loss_programs): kept per parameter tuple.
        self._programs = LossPrograms(self)
        self._value_fn = self._programs.value_fn
        self._gradient_fns, self._at_fns = self._programs.gradient_fns, self._programs.at_fns

    # -- to implement --------------------------------------------------------------------
    def _loss_params(self) -> list[Parameter]:
        """Every parameter of the loss (floating or not), each once, in a stable order."""
        raise NotImplementedError

    def datasets(self) -> list[Data]:
        """The datasets the loss reads (what a fit result snapshots to stay reproducible).

        Returns
        -------
        list of zcache.Data
            Each dataset once.
        """
        return []

    def weighted_event_terms(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        r"""Per-event log-likelihood terms and event weights, for each weighted dataset.

        A minimizer corrects the errors of a weighted fit with them (the asymptotic method:
        :math:`C' = C D C` with :math:`D = \sum_i w_i^2\, \nabla\ell_i \nabla\ell_i^T`, see
        :class:`zcache.minimize.Minuit`). A loss of weighted events implements it; the default
        says the loss has none.

        Returns
        -------
        list of (tf.Tensor, tf.Tensor)
            ``(ell, w)`` pairs, each of shape (N,); ``[]`` when no dataset is weighted.
        """
        return []

    @property
    def is_weighted(self) -> bool:
        """Whether any dataset of the loss carries event weights."""
        return any(d.is_weighted for d in self.datasets())

    def _value(self) -> tf.Tensor:
        raise NotImplementedError

    def _total(self) -> tf.Tensor:
        with evaluation():  # a bypassed cache read twice in the loss is computed once
            return self._total_unscoped()

    def __zcache_evaluate__(self) -> tuple[()]:
        """The precompute protocol (:class:`zcache.types.Precomputable`): the loss's value.

        Every cache a fit reads is read by the value, so nothing is returned besides.
        """
        self._total()
        return ()

    def _total_unscoped(self) -> tf.Tensor:
        value = self._value()
        if self.constraints:
            value = value + tf.add_n([c.value() for c in self.constraints])
        return value

    def whole_sample_terms(self) -> list[Callable[[], tf.Tensor]]:
        r"""The terms of the loss that are not a sum over its events, each a callable giving a tensor.

        The loss is the sum over its events plus these terms: the expected yield :math:`\nu` of
        an extended likelihood (its :math:`-N\log\nu` is :math:`-\log\nu` per event, so a sum
        over events) and the constraints. A loss cut into parts of its events
        (:class:`zcache.scale.DistributedLoss`) adds the parts' sums over events and these
        terms once: added once per part, an extended fit's yields would come out divided by the
        number of parts. The default is the constraints (a subclass whose value is a sum over
        events adds nothing); a loss with other such terms extends the list, and one whose terms
        cannot be told apart raises.

        Returns
        -------
        list of callable
            Each returns a float64 scalar at the current parameter values; empty for a plain NLL.

        Raises
        ------
        WholeSampleTermError
            The loss is not a sum over events plus such terms (a binned loss, a template fit).
        """
        return [c.value for c in self.constraints]

    # -- public --------------------------------------------------------------------------
    def get_params(self, floating: bool | None = True) -> list[Parameter]:
        """The parameters of the loss (model, yields where they enter, constraints), each once.

        Read at call time, so they follow the current ``floating`` flags.

        Parameters
        ----------
        floating : bool or None
            ``True``: only floating ones (:attr:`params`); ``False``: only fixed ones;
            ``None``: all.

        Returns
        -------
        list of Parameter
        """
        return unique_parameters(self._loss_params(), floating)

    @property
    def params(self) -> list[Parameter]:
        """The parameters a fit floats by default: those with ``floating=True`` *now*.

        Computed on every access (not frozen when the loss was built), so ``p.floating = False``
        between fits fixes ``p`` for the next :class:`zcache.minimize.Minuit` fit, exactly as
        :func:`zcache.precompute` sees it.
        """
        return self.get_params(floating=True)

    @property
    def offset(self) -> float:
        """The default offset of :meth:`value_at` / :meth:`value_gradient_at` (``offset=None``).

        Minimizers pass their own offset and never change this one.
        """
        return self._offset

    @offset.setter
    def offset(self, value: float) -> None:
        value = float(value)
        if not np.isfinite(value):
            raise FitError(f"the loss offset must be finite, got {value}.")
        self._offset = value

    def value(self) -> tf.Tensor:
        """The loss at the current parameter values.

        Returns
        -------
        tf.Tensor
            float64 scalar.

        Raises
        ------
        FitError
            The value is NaN or infinite.
        """
        return self._value_fn()

    def _param_list(self, params: Sequence[Parameter] | None) -> tuple[Parameter, ...]:
        params = tuple(self.params if params is None else params)
        if not all(isinstance(p, Parameter) for p in params):
            raise TypeError("params must be zcache.Parameter objects.")
        return params

    def value_gradient(self, params: Sequence[Parameter] | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """The loss and its gradient, in one call (traced from the third call on, see the module's notes).

        Parameters
        ----------
        params : sequence of Parameter, optional
            The parameters to differentiate by; default :attr:`params`.

        Returns
        -------
        value : tf.Tensor
            float64 scalar.
        gradient : tf.Tensor
            float64, one entry per parameter.
        """
        return self._programs.value_gradient(self._param_list(params))()

    def gradient(self, params: Sequence[Parameter] | None = None) -> tf.Tensor:
        """The gradient of the loss.

        Parameters
        ----------
        params : sequence of Parameter, optional
            The parameters to differentiate by; default :attr:`params`.

        Returns
        -------
        tf.Tensor
            float64, one entry per parameter.
        """
        return self.value_gradient(params)[1]

    def _at(self, params: tuple[Parameter, ...]) -> tuple[Function, Function, Function]:
        return self._programs.at(params)

    def _structured_parts(self, params: Sequence[Parameter]) -> list[Callable[[], tf.Tensor]] | None:
        """The terms whose sum is the structured Hessian (each built when called), or None (default)."""
        return None

    def supports_structured_hessian(self, params: Sequence[Parameter]) -> bool:
        """Whether :meth:`structured_hessian` is offered for ``params``.

        True for an unbinned NLL without constraints or yield whose model gives
        :meth:`zcache.models.Model.nll_hessian` (a bridged coherent sum), and for a
        :class:`SimultaneousLoss` of such losses (each part's rows zero for the parameters it does
        not read).

        Parameters
        ----------
        params : sequence of Parameter
            The fitted parameters, in the Hessian's order.

        Returns
        -------
        bool
            Whether :meth:`structured_hessian` returns a tensor rather than None.
        """
        return self._structured_parts(params) is not None

    def structured_hessian_block(self, params: Sequence[Parameter]) -> list[int]:
        """Positions of ``params`` whose block of :meth:`structured_hessian` costs about one pass over the data.

        The couplings of a bridged amplitude model (:meth:`zcache.models.Model.nll_hessian_block`),
        for an unbinned NLL without constraints or yield and a :class:`SimultaneousLoss` of such
        losses (the positions every part offers). Where line shapes float, a compiled fit takes
        this block exactly and differences the other parameters' gradients only: one gradient per
        line-shape parameter instead of one per parameter (:class:`zcache.minimize.Minuit`'s
        ``structured_hessian="auto"``).

        Parameters
        ----------
        params : sequence of Parameter
            The fitted parameters, in the Hessian's order.

        Returns
        -------
        list of int
            Sorted positions in ``params``; empty where the loss offers no such block.
        """
        return sorted(self._structured_block(params))

    def _structured_block(self, params: Sequence[Parameter]) -> list[int]:
        return []

    def structured_hessian(self, params: Sequence[Parameter]) -> tf.Tensor | None:
        """The loss's exact Hessian from its model's structure (:meth:`zcache.models.Model.nll_hessian`), or None.

        A few passes over the data where differences cost a gradient per parameter;
        :meth:`hessian_at` uses it wherever :meth:`supports_structured_hessian`, the compiled fit
        where asked (``Minuit(structured_hessian=...)``).

        Parameters
        ----------
        params : sequence of Parameter
            The parameters, in the Hessian's order.

        Returns
        -------
        tf.Tensor or None
            float64 (n, n), or None where the loss has no such Hessian.
        """
        parts = self._structured_parts(params)
        if parts is None:
            return None
        return tf.add_n([part() for part in parts])

    def _exact_hessian_ok(self, params: tuple[Parameter, ...]) -> bool:
        return self._programs.exact_hessian_ok(params)

    def value_at(self, x: Any, params: Sequence[Parameter] | None = None, offset: float | None = None) -> tf.Tensor:
        """Set ``params`` to ``x`` and return the loss minus ``offset``, in one traced call.

        This is a minimizer's function call: parameters are updated in place (with
        their checks), and nothing retraces from one ``x`` (or ``offset``) to the next.

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : sequence of Parameter, optional
            Default: :attr:`params` (the floating parameters now).
        offset : float, optional
            Subtracted from the loss; default :attr:`offset`. A minimizer passes its own.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        return self._programs.call_at(0, x, self._param_list(params), offset)

    def value_gradient_at(self, x: Any, params: Sequence[Parameter] | None = None,
                          offset: float | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Like :meth:`value_at`, with the gradient.

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : sequence of Parameter, optional
            Default: :attr:`params` (the floating parameters now).
        offset : float, optional
            Subtracted from the loss; default :attr:`offset`. A minimizer passes its own.

        Returns
        -------
        value : tf.Tensor
            float64 scalar, the loss minus ``offset``.
        gradient : tf.Tensor
            float64, one entry per parameter.
        """
        return self._programs.call_at(1, x, self._param_list(params), offset)

    def hessian_at(self, x: Any, params: Sequence[Parameter] | None = None, *, exact: bool | None = None) -> tf.Tensor:
        """Set ``params`` to ``x`` and return the Hessian of the loss.

        The structured Hessian (:meth:`structured_hessian`: exact, one traced call) wherever the
        loss offers it, unless ``exact=False``. Else exact (second-order autodiff, one traced
        call) when every cache on the path is
        bypassed for these parameters (after :func:`zcache.precompute`); otherwise central
        differences of exact gradients, each a call of the traced :meth:`value_gradient_at`,
        so no larger graph is ever built: the step is clipped into the limits.

        Parameters
        ----------
        x : array_like
            One value per parameter; the parameters are left there.
        params : sequence of Parameter, optional
            Default: :attr:`params` (the floating parameters now).
        exact : bool, optional
            ``False`` forces central differences; ``True`` exact: the structured Hessian where
            offered, else second-order autodiff (one traced call, through the caches, valid or
            not). Default: the structured Hessian where offered, else exact where precompute
            bypassed every cache on the fitted parameters' path, else differences (no new graph).

        Returns
        -------
        tf.Tensor
            float64, shape (n, n), symmetric.
        """
        return self._programs.hessian_at(x, self._param_list(params), exact)

    def objective(self, params: Sequence[Parameter] | None = None, *, precompute: bool = True,
                  keep_floating: bool = False, who: str = "minimize") -> Objective:
        """The loss as a minimizer sees it: a function of one vector (:class:`zcache.loss.Objective`).

        Parameters
        ----------
        params : sequence of Parameter, optional
            The parameters to fit, in order; default :attr:`params` (the floating ones now).
        precompute : bool
            Apply :func:`zcache.precompute` for ``params`` first.
        keep_floating : bool
            Precompute keeps the caches of floating parameters (for numerical gradients).
        who : str
            The minimizer, for error messages.

        Returns
        -------
        zcache.loss.Objective

        Raises
        ------
        FitError
            No parameters to fit, or duplicate names.
        """
        return Objective(self, params, precompute=precompute, keep_floating=keep_floating, who=who)

    def functions(self) -> list[Function]:
        """The traced functions this loss has created (for trace-count checks).

        Returns
        -------
        list of zcache.types.Function
        """
        return self._programs.functions()

    def __add__(self, other: BaseLoss) -> SimultaneousLoss:
        if not isinstance(other, BaseLoss):
            return NotImplemented
        return SimultaneousLoss([self, other])


class UnbinnedNLL(BaseLoss):
    r"""Unbinned negative log-likelihood :math:`-\sum_i \log p(x_i)` of ``model`` on ``data``.

    Parameters
    ----------
    model : zcache.models.Model
        The density.
    data : zcache.Data
        The events; every event must lie inside the model's space.
    constraints : sequence of GaussianConstraint, optional
        Penalties added to the loss.

    Raises
    ------
    ModelError
        ``model`` is not a Model, ``data`` not a Data (or without the model's columns), or
        the loss is extended and the model is not.
    DataRangeError
        Events outside the model's range (now, or after a ``set_data`` when the loss is
        evaluated).
    """

    extended = False

    def __init__(self, model: Model, data: Data, constraints: Sequence[GaussianConstraint] | None = None):
        if not isinstance(model, Model):
            raise ModelError(f"{type(self).__name__} needs a zcache.models.Model, got {model!r}.")
        if not isinstance(data, Data):
            raise ModelError(
                f"{type(self).__name__} needs a zcache.Data (wrap arrays: zcache.Data(array, obs=...)), got "
                f"{type(data).__name__}."
            )
        if self.extended and not model.is_extended:
            raise ModelError(
                f"{model!r} is not extended: give it a yield (extended=...) or build a SumPdf with yields, "
                "or use UnbinnedNLL."
            )
        self.model = model
        self.data = data
        super().__init__(constraints)
        model.space.select(data)  # columns must match now, not at the first fit
        self._range_message = (
            f"events of '{data.name}' lie outside {model.space!r} of '{model.name}'; cut them "
            "(e.g. data[model.space.inside(data)]) or widen the space."
        )
        self._inside = _InRange(model, data)
        require(self._inside.value(), DataRangeError, self._range_message)

    def _loss_params(self) -> list[Parameter]:
        return model_parameters(self.model, self.constraints, with_yield=self.extended)

    def datasets(self) -> list[Data]:
        """The loss's dataset (and its weights, for weighted data).

        Returns
        -------
        list of zcache.Data
            ``[self.data]``, plus ``self.data.weights_data`` when the data are weighted.
        """
        weights = self.data.weights_data
        return [self.data] if weights is None else [self.data, weights]

    def _value(self) -> tf.Tensor:
        checks = require(self._inside.value(), DataRangeError, self._range_message)
        with tf.control_dependencies(checks):
            nll, n = self._events_term()
        if self.extended:
            nu = self.model.get_yield()
            nll = nll + nu - n * tf.math.log(nu)
        return nll

    def whole_sample_terms(self) -> list[Callable[[], tf.Tensor]]:
        r"""The expected yield :math:`\nu` (extended) and the constraints: what is not a sum over events.

        Returns
        -------
        list of callable
            See :meth:`BaseLoss.whole_sample_terms`.

        Examples
        --------
        >>> import numpy as np, zcache
        >>> from zcache.models import Space, Gaussian
        >>> from zcache.loss import ExtendedUnbinnedNLL
        >>> nu = zcache.Parameter("nu_wst", 3.0)
        >>> loss = ExtendedUnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), 0.0, 1.0, extended=nu),
        ...                            zcache.Data(np.array([-0.5, 0.5])))
        >>> [float(term()) for term in loss.whole_sample_terms()]     # the expected yield
        [3.0]
        """
        return [*([self.model.get_yield] if self.extended else []), *super().whole_sample_terms()]

    def _structured_parts(self, params: Sequence[Parameter]) -> list[Callable[[], tf.Tensor]] | None:
        # the Poisson term and the constraints would need rows of their own: not offered (yet)
        if self.extended or self.constraints or not self.model.supports_nll_hessian(params):
            return None
        return [lambda: self.model.nll_hessian(self.data, params)]

    def _structured_block(self, params: Sequence[Parameter]) -> list[int]:
        return [] if self.extended or self.constraints else self.model.nll_hessian_block(params)

    def _events_term(self) -> tuple[tf.Tensor, tf.Tensor]:
        r""":math:`-\sum_i w_i \log p(x_i)` and the events it counts (:math:`\sum_i w_i`; padding rows: w = 0)."""
        weights = self.data.weights
        if weights is None:
            return -self.model.sum_log_pdf(self.data), tf.cast(self.data.nevents, tf.float64)
        return -tf.reduce_sum(weights * self.model.log_pdf(self.data, raw=True)), tf.reduce_sum(weights)

    def weighted_event_terms(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        r"""Per-event log-likelihood terms :math:`\ell_i` and weights :math:`w_i` of weighted data.

        :math:`\ell_i = \log p(x_i)`, or :math:`\log(\nu\, p(x_i))` for an extended loss: the
        terms whose weighted scores enter the asymptotic error correction of a weighted fit
        (see :class:`zcache.minimize.Minuit`).

        Returns
        -------
        list of (tf.Tensor, tf.Tensor)
            ``[(ell, w)]`` for weighted data, ``[]`` for unweighted data.
        """
        weights = self.data.weights
        if not self.data.is_weighted:
            return []
        terms = self.model.log_pdf(self.data, raw=True)
        if self.extended:
            terms = terms + tf.math.log(self.model.get_yield())
        return [(terms, weights)]


class ExtendedUnbinnedNLL(UnbinnedNLL):
    r"""Extended unbinned NLL: adds the Poisson term :math:`\nu - N\log\nu` for the yield :math:`\nu`.

    Parameters
    ----------
    model : zcache.models.Model
        An extended density (its yield is :math:`\nu`).
    data : zcache.Data
        The events; every event must lie inside the model's space.
    constraints : sequence of GaussianConstraint, optional
        Penalties added to the loss.

    Raises
    ------
    ModelError
        As for :class:`UnbinnedNLL`, or the model is not extended.
    DataRangeError
        Events outside the model's range.
    """

    extended = True


class SimultaneousLoss(BaseLoss):
    """The sum of several losses (shared parameters appear once).

    Parameters
    ----------
    losses : sequence of BaseLoss
        The losses; a SimultaneousLoss among them contributes its parts.

    Raises
    ------
    ModelError
        Something in ``losses`` is not a zcache loss.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL
    >>> mu = zcache.Parameter("mu_s", 0.0)
    >>> s = Space("x", -5.0, 5.0)
    >>> a = UnbinnedNLL(Gaussian(s, mu, 1.0), zcache.Data(np.array([0.5])))
    >>> b = UnbinnedNLL(Gaussian(s, mu, 2.0), zcache.Data(np.array([1.0])))
    >>> total = a + b
    >>> [p.name for p in total.params], bool(abs(float(total.value()) - float(a.value()) - float(b.value())) < 1e-12)
    (['mu_s'], True)
    """

    def __init__(self, losses: Sequence[BaseLoss]):
        self.losses: list[BaseLoss] = []
        for loss in losses:
            if not isinstance(loss, BaseLoss):
                raise ModelError(f"SimultaneousLoss sums zcache losses, got {loss!r}.")
            self.losses.extend(loss.losses if isinstance(loss, SimultaneousLoss) else [loss])
        super().__init__()

    def _loss_params(self) -> list[Parameter]:
        return unique_parameters([p for loss in self.losses for p in loss._loss_params()])

    def datasets(self) -> list[Data]:
        """The datasets of all parts, each once.

        Returns
        -------
        list of zcache.Data
        """
        return list({id(d): d for loss in self.losses for d in loss.datasets()}.values())

    def weighted_event_terms(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """The weighted per-event terms of every part (see :meth:`UnbinnedNLL.weighted_event_terms`).

        Returns
        -------
        list of (tf.Tensor, tf.Tensor)
        """
        return [term for loss in self.losses for term in loss.weighted_event_terms()]

    def _value(self) -> tf.Tensor:
        return tf.add_n([loss._total() for loss in self.losses])

    def whole_sample_terms(self) -> list[Callable[[], tf.Tensor]]:
        """Every part's whole-sample terms (an extended part's yield, its constraints) and the own constraints.

        Returns
        -------
        list of callable
            See :meth:`BaseLoss.whole_sample_terms`.

        Raises
        ------
        WholeSampleTermError
            A part cannot tell its whole-sample terms apart.
        """
        return [*(term for loss in self.losses for term in loss.whole_sample_terms()), *super().whole_sample_terms()]

    def _structured_parts(self, params: Sequence[Parameter]) -> list[Callable[[], tf.Tensor]] | None:
        # every part's, each a zero row for the parameters it does not read
        parts = [loss._structured_parts(params) for loss in self.losses]
        if self.constraints or any(p is None for p in parts):
            return None
        return [term for part in parts for term in part]

    def _structured_block(self, params: Sequence[Parameter]) -> list[int]:
        # the positions every part offers (a part's own include the parameters it does not read)
        if self.constraints:
            return []
        return list(set.intersection(*(set(loss._structured_block(params)) for loss in self.losses)))


def model_parameters(model: Model, constraints: Sequence[GaussianConstraint] = (), *,
                     with_yield: bool = True) -> list[Parameter]:
    """Every parameter a loss of ``model`` depends on (fixed ones too), each once, in a stable order.

    Read from the model on every call, so that the floating flags (and so a fit's parameters)
    may change after the loss was built. What a loss subclass returns from ``_loss_params``.

    Parameters
    ----------
    model : zcache.models.Model
        The model.
    constraints : sequence of GaussianConstraint
        Their parameters come last.
    with_yield : bool
        Whether the model's yield Parameter enters (an extended loss); else it is left out.

    Returns
    -------
    list of Parameter

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import Space, Gaussian
    >>> g = Gaussian(Space("x", 0.0, 1.0), zcache.Parameter("mu_mp", 0.5), 0.1, extended=10.0)
    >>> [p.name for p in model_parameters(g, with_yield=False)]
    ['mu_mp', 'Gaussian_sigma']
    """
    params = model.get_params(floating=None)
    yield_parameter = model.yield_parameter
    if not with_yield and yield_parameter is not None:
        params = [p for p in params if p is not yield_parameter]
    return unique_parameters([*params, *(q for c in constraints for q in c.params)])


class _InRange:
    """Whether all events of ``data`` lie in ``model.space``: a cache, so a fit pays nothing."""

    def __init__(self, model: Model, data: Data) -> None:
        space = model.space
        self.cache = CachedTensor(
            lambda: tf.reduce_all(space.inside(space.select(data))), deps=[data], name=f"{data.name} in range"
        )

    def value(self) -> tf.Tensor:
        return self.cache.value()
