r"""sWeights (sPlot) and the covariance of a fit to sWeighted events.

An extended fit of a discriminating variable :math:`m` (a mass) with species :math:`k`, normalized
densities :math:`g_k(m)` and yields :math:`N_k` gives every event :math:`e` the sWeight of species
:math:`s` (Pivk and Le Diberder, physics/0402083; Dembinski, Kenzie, Langenbruch, Schmelling,
arXiv:2112.04574)

.. math::

    w_s(m_e) = \frac{\sum_j V_{sj}\, g_j(m_e)}{\sum_k N_k\, g_k(m_e)}, \qquad
    (V^{-1})_{ij} = W_{ij} = \sum_e \frac{g_i(m_e)\, g_j(m_e)}{\left(\sum_k N_k\, g_k(m_e)\right)^2}.

:math:`W^{-1}` is the covariance of the yields of a fit in which only the yields float, computed
from the densities at the events ("Variant B" of arXiv:2112.04574, the ``summation`` method of the
``sweights`` package). With it the sWeights of a species add up to its yield exactly, and the
weights of all species add up to one for every event; they depend only on the data and the fitted
shapes, not on how the minimizer estimated its covariance. ``covariance="fit"`` takes the yields'
block of the fit's own covariance instead (the original sPlot recipe): the same numbers when only
the yields floated, other weights when shape parameters floated too, since the yields' errors then
include the shapes' uncertainty (the sums still equal the yields: the yields' covariance of an
extended fit has :math:`\sum_j \mathrm{cov}(N_s, N_j) = N_s`). The correction of
:func:`sweighted_covariance` is derived for the first.

A fit of a control variable :math:`t` to events weighted with :math:`w_s` estimates the signal's
parameters :math:`\theta`; its inverse Hessian is not their covariance. The asymptotic correction
:math:`H^{-1} D H^{-1}`, :math:`D = \sum_e w_e^2\, \nabla\ln h_e \nabla\ln h_e^T`
(``Minuit(weightcorr="asymptotic")``) treats the weights as known; :func:`sweighted_covariance`
adds what their own estimate from the same events contributes (Langenbruch, arXiv:1911.01303,
eq. 18; arXiv:2112.04574, eq. 51):

.. math::

    C = H^{-1} D H^{-1} - H^{-1} E\, C_W E^T H^{-1}, \qquad
    E_{k,xy} = \sum_e \frac{\partial w_e}{\partial W_{xy}} \frac{\partial \ln h(t_e)}{\partial\theta_k}, \qquad
    (C_W)_{xy,uv} = \sum_e \frac{g_x g_y g_u g_v}{\left(\sum_k N_k g_k\right)^4},

with :math:`xy` running over the independent elements of the symmetric :math:`W`, the weight
written as a function of :math:`W` alone (:math:`w_s = (W^{-1} g)_s / \mathbf{1}^T W^{-1} g`, equal
to the sWeight at the fit's minimum, where :math:`W N = \mathbf 1`). The derivatives of
:math:`\ln h` are zcache's exact gradients (one per event, two reverse passes per parameter), those
of :math:`w` closed forms. Eq. 18 (and the ``sweights`` package) takes the shapes of the
discriminating fit as known. Where shape parameters floated in it, :func:`sweighted_covariance`
by default stacks the whole estimate instead, the discriminating fit's parameters, :math:`W` and
:math:`\theta`, and gives the sandwich of those estimating equations, which holds the shapes'
uncertainty too (``method="sandwich"``; with fixed shapes it agrees with eq. 18 to the sampling
error of the correction itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.parameter import Parameter, set_values
from .._engine.tf_internals import zcache_graphs
from ..exceptions import SPlotError
from ..loss import UnbinnedNLL
from ..minimize import FitResult
from ..models import SumPdf

__all__ = ["SWeights", "sweights", "sweighted_covariance", "SWEIGHTS_COVARIANCES"]

#: What :func:`sweights` takes as ``covariance``.
SWEIGHTS_COVARIANCES: tuple[str, ...] = ("events", "fit")


@dataclass(eq=False)
class SWeights:
    r"""The sWeights of an extended fit, per species and event (what :func:`sweights` returns).

    ``sw["nsig"]`` or ``sw.of(nsig)`` is one weight per event of the discriminating fit's data
    (in their order), for ``zcache.Data(control, weights=sw["nsig"])``.

    Attributes
    ----------
    names : tuple of str
        The species asked for, by the names of their yields.
    weights : ndarray
        float64, shape (species, events): one row per entry of ``names``.
    components : tuple of str
        The names of the yields of every component of the sum (the species are among them).
    yields : ndarray
        The fitted yields of every component, in the order of ``components``.
    W : ndarray
        :math:`W_{ij} = \sum_e g_i g_j / (\sum_k N_k g_k)^2` over every component, whose inverse
        is the yields' covariance with the shapes fixed.
    covariance : ndarray
        The yields' covariance the weights were made with: :math:`W^{-1}` (``method == "events"``)
        or the yields' block of the fit's covariance (``method == "fit"``).
    method : str
        ``"events"`` or ``"fit"`` (see :func:`sweights`).
    other_parameters : tuple of str
        The discriminating fit's floating parameters that are not yields (shape parameters):
        the weights take them as fitted; :func:`sweighted_covariance` includes their
        uncertainty by default (``method="sandwich"``).
    """

    names: tuple[str, ...]
    weights: np.ndarray
    components: tuple[str, ...]
    yields: np.ndarray
    W: np.ndarray
    covariance: np.ndarray
    method: str
    other_parameters: tuple[str, ...]
    _params: tuple[Parameter, ...] = field(repr=False)
    _index: tuple[int, ...] = field(repr=False)
    _densities: np.ndarray = field(repr=False)  # (components, events): g_k(m_e)
    _loss: Any = field(repr=False, default=None)  # the discriminating loss
    _fitted: tuple[Parameter, ...] = field(repr=False, default=())  # its floating parameters (yields first)
    _values: np.ndarray = field(repr=False, default=None)  # theirs at the weights
    _events: np.ndarray = field(repr=False, default=None)  # the discriminating events, to see them change

    def __getitem__(self, name: str) -> np.ndarray:
        """The sWeights of the species whose yield is named ``name``.

        Parameters
        ----------
        name : str
            The yield's name.

        Returns
        -------
        ndarray
            One weight per event.

        Raises
        ------
        SPlotError
            No species of that name.
        """
        if name not in self.names:
            raise SPlotError(f"no sWeights for {name!r}; the species are {', '.join(self.names)}.")
        return self.weights[self.names.index(name)]

    def of(self, species: Parameter | str) -> np.ndarray:
        """The sWeights of a species, given by its yield Parameter (or its name).

        Parameters
        ----------
        species : Parameter or str
            The species' yield.

        Returns
        -------
        ndarray
            One weight per event.

        Raises
        ------
        SPlotError
            Not one of the species.
        """
        if isinstance(species, Parameter):
            for k, p in enumerate(self._params):
                if p is species:
                    return self.weights[k]
            raise SPlotError(f"{species.name!r} is not the yield of a species of these sWeights "
                             f"({', '.join(self.names)}).")
        return self[species]

    @property
    def sums(self) -> dict[str, float]:
        """The sum of the sWeights of each species (its yield, for ``method == "events"``).

        Returns
        -------
        dict of str to float
        """
        return {n: float(w.sum()) for n, w in zip(self.names, self.weights, strict=True)}

    def sums_match(self, rtol: float = 1e-6) -> bool:
        """Whether every species' sWeights add up to its fitted yield, to ``rtol``.

        True by construction for ``method == "events"`` (up to rounding); for ``method == "fit"``
        to the precision of the fit's covariance (an extended fit's yields' covariance has row sums
        equal to the yields).

        Parameters
        ----------
        rtol : float
            Relative tolerance.

        Returns
        -------
        bool
        """
        fitted = self.yields[list(self._index)]
        return bool(np.allclose(self.weights.sum(axis=1), fitted, rtol=rtol, atol=0.0))


def _yields_of(loss: Any) -> tuple[SumPdf, list[Parameter]]:
    """The sum and its component yields, or an SPlotError that says what the loss lacks."""
    if not isinstance(loss, UnbinnedNLL) or not loss.extended:
        raise SPlotError(
            f"sWeights need the extended fit of the discriminating variable (an ExtendedUnbinnedNLL of a "
            f"SumPdf with yields), got {type(loss).__name__}.")
    model = loss.model
    yields = model.component_yields if isinstance(model, SumPdf) else None
    if yields is None or any(y is None for y in yields):
        raise SPlotError(
            f"sWeights need a sum of species with one yield Parameter each: SumPdf([...], yields=[...]); "
            f"'{model.name}' is {'a sum with fractions' if isinstance(model, SumPdf) else type(model).__name__}"
            f"{' or has a component whose yield is no single Parameter' if yields is not None else ''}.")
    if loss.data.is_weighted:
        raise SPlotError(
            f"the discriminating fit's data '{loss.data.name}' are weighted; sPlot needs a fit to unweighted events.")
    return model, list(yields)


def _pick(params: Sequence[Parameter], asked: Any, what: str) -> list[int]:
    """Indices into ``params`` of the Parameters or names in ``asked``."""
    names = [p.name for p in params]
    picked = []
    for s in asked:
        if isinstance(s, Parameter):
            k = next((i for i, p in enumerate(params) if p is s), None)
        elif isinstance(s, str):
            k = names.index(s) if s in names else None
        else:
            raise SPlotError(f"{what}: give yield Parameters or their names, got {s!r}.")
        if k is None:
            raise SPlotError(f"{what}: {getattr(s, 'name', s)!r} is not a yield of this sum; "
                             f"its yields are {', '.join(names)}.")
        if k in picked:
            raise SPlotError(f"{what}: {names[k]!r} is given twice.")
        picked.append(k)
    if not picked:
        raise SPlotError(f"{what}: no species given.")
    return picked


def _densities(model: SumPdf, data: Any) -> np.ndarray:
    """The normalized component densities at the events, shape (components, events)."""
    return np.stack([np.asarray(data.unpadded(p.pdf(data, raw=True).numpy()), dtype=np.float64)
                     for p in model.pdfs])


def sweights(loss: UnbinnedNLL, result: FitResult | None = None, *, species: Sequence[Parameter | str] | None = None,
             covariance: str = "events", tol: float = 0.05) -> SWeights:
    r"""The sWeights of every event for each species of an extended fit (sPlot).

    Parameters
    ----------
    loss : zcache.loss.ExtendedUnbinnedNLL
        The fitted discriminating loss: an extended NLL of a :class:`zcache.models.SumPdf` with one
        yield Parameter per species, on unweighted data.
    result : FitResult, optional
        Its fit. The weights are computed at the result's values (the parameters are put back
        afterwards); default: at the parameters' values now (after ``Minuit().minimize(loss)``,
        the fit's minimum).
    species : sequence of Parameter or str, optional
        The species (their yields, or the yields' names) to weight for; default every component.
        The sum's other components enter the weights all the same.
    covariance : {"events", "fit"}
        The yields' covariance :math:`V` of the sPlot formula. ``"events"`` (default):
        :math:`W^{-1}` from the densities at the events, the variant that makes each species'
        weights add up to its yield and whose uncertainty :func:`sweighted_covariance` corrects
        for (the recommended Variant B of arXiv:2112.04574). ``"fit"``: the yields' block of
        ``result.covariance``, as the original sPlot paper takes it from the fit (the same numbers
        when only yields floated, up to the fit's precision).
    tol : float
        How far from the minimum the yields may be: the Newton step to the minimum in the yields
        (shapes held) in units of their errors, :math:`|(N - W^{-1}\mathbf 1)_k| / \sqrt{W^{-1}_{kk}}`.

    Returns
    -------
    SWeights
        The weights (``sw["nsig"]``, ``sw.of(nsig)``), yields, :math:`W` and the sums.

    Raises
    ------
    SPlotError
        The loss is not an extended fit of a SumPdf with one yield Parameter per component, or
        its data are weighted; an unknown or repeated species; a yield that is not floating; the
        yields are not at the minimum (the message says how far); a result that did not fit the
        yields; ``covariance="fit"`` without a result with a covariance of the yields; an unknown ``covariance``; components that
        the data cannot tell apart (:math:`W` singular). The parameters are as before.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian, Exponential, SumPdf
    >>> from zcache.loss import ExtendedUnbinnedNLL
    >>> from zcache.minimize import Minuit
    >>> from zcache.inference import sweights
    >>> rng = np.random.default_rng(5)
    >>> m = np.r_[rng.normal(5.28, 0.02, 300), rng.uniform(5.1, 5.5, 700)]
    >>> space = Space("m_sw", 5.1, 5.5)
    >>> nsig, nbkg = zcache.Parameter("nsig_doc", 250.0, lower=0), zcache.Parameter("nbkg_doc", 750.0, lower=0)
    >>> model = SumPdf([Gaussian(space, 5.28, 0.02), Exponential(space, 0.0)], yields=[nsig, nbkg])
    >>> loss = ExtendedUnbinnedNLL(model, zcache.Data(m, obs="m_sw"))
    >>> fit = Minuit().minimize(loss)
    >>> sw = sweights(loss, fit)
    >>> sw["nsig_doc"].shape, sw.sums_match(), bool(np.allclose(sw.weights.sum(axis=0), 1.0))
    ((1000,), True, True)
    """
    if covariance not in SWEIGHTS_COVARIANCES:
        raise SPlotError(f"covariance must be one of {', '.join(SWEIGHTS_COVARIANCES)}, got {covariance!r}.")
    model, yields = _yields_of(loss)
    index = _pick(yields, yields if species is None else species, "species")
    _check_discriminating_fit(yields, result, covariance)
    fitted = (*yields, *(p for p in loss.get_params(floating=True) if not any(p is y for y in yields)))
    restore = None
    try:
        if result is not None:
            saved = [float(p) for p in result.params]
            set_values(result.params, [result.values[p.name] for p in result.params])
            restore = (result.params, saved)
        n = np.array([float(y) for y in yields])
        values = np.array([float(p) for p in fitted])
        g = _densities(model, loss.data)
    finally:
        if restore is not None:
            set_values(*restore)
    total = n @ g
    if not np.all(np.isfinite(g)) or not np.all(total > 0):
        raise SPlotError("the sum's density is zero or not finite at some events; sWeights need it positive "
                         "at every event (check the fit).")
    w_matrix = (g / total**2) @ g.T
    v_events = _yields_covariance(w_matrix, n, yields, tol)
    if covariance == "fit":
        rows = [result.names.index(y.name) for y in yields]
        used = np.asarray(result.covariance, dtype=np.float64)[np.ix_(rows, rows)]
    else:
        used = v_events
    weights = (used[index] @ g) / total
    return SWeights(
        names=tuple(yields[k].name for k in index), weights=weights, components=tuple(y.name for y in yields),
        yields=n, W=w_matrix, covariance=used, method=covariance,
        other_parameters=tuple(p.name for p in fitted[len(yields):]), _params=tuple(yields[k] for k in index),
        _index=tuple(index), _densities=g, _loss=loss, _fitted=fitted, _values=values, _events=loss.data.numpy())


def _event_scores(model: Any, data: Any, params: Sequence[Parameter]) -> np.ndarray:
    r""":math:`\partial \ln h(t_e) / \partial\theta_k` per event, exact, shape (events, parameters).

    The Jacobian of the per-event log-densities as gradients of gradients: with a probe
    :math:`u`, :math:`J^T u` is one reverse pass, and its derivative in :math:`u` along each
    parameter gives a column of :math:`J` (a second reverse pass through zcache's cache gradients,
    which tape.jacobian's vectorized loop would take seconds to build for each event count).
    """
    variables = [p.variable for p in params]
    zero = tf.UnconnectedGradients.ZERO
    with zcache_graphs():
        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as outer:
            with tf.GradientTape(watch_accessed_variables=False) as inner:
                inner.watch(variables)
                terms = model.log_pdf(data, raw=True)
            probe = tf.zeros_like(terms)
            outer.watch(probe)
            grads = inner.gradient(terms, variables, output_gradients=probe, unconnected_gradients=zero)
            sums = [tf.reduce_sum(g) for g in grads]
        columns = [outer.gradient(s, probe, unconnected_gradients=zero) for s in sums]
        del outer
    return np.asarray(data.unpadded(tf.stack(columns, axis=1).numpy()), dtype=np.float64)


def _weight_derivatives(v: np.ndarray, g: np.ndarray, s: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    r""":math:`\partial w_s(e) / \partial W_{xy}` for the independent elements :math:`x \ge y` of :math:`W`.

    With the weight as a function of :math:`W` alone, :math:`w = a / b`, :math:`a = (A g)_s`,
    :math:`b = \mathbf 1^T A g`, :math:`A = W^{-1}`: :math:`dA = -A\,dW A`, and a symmetric element
    moves :math:`W_{xy}` and :math:`W_{yx}` together.
    """
    a_g = v @ g  # (K, N): A g per event
    b = a_g.sum(axis=0)
    w = a_g[s] / b
    c = v.sum(axis=0)  # A^T 1 (A symmetric)
    pairs = [(x, y) for x in range(len(v)) for y in range(x + 1)]
    rows = []
    for x, y in pairs:
        if x == y:
            da, db = v[s, x] * a_g[x], c[x] * a_g[x]
        else:
            da = v[s, x] * a_g[y] + v[s, y] * a_g[x]
            db = c[x] * a_g[y] + c[y] * a_g[x]
        rows.append(-(da - w * db) / b)
    return np.array(rows), pairs


def sweighted_covariance(result: FitResult, loss: UnbinnedNLL, sw: SWeights,
                         species: Parameter | str | None = None, *, method: str = "auto") -> np.ndarray:
    r"""The covariance of a fit to sWeighted events, with the uncertainty of the sWeights themselves.

    ``method="langenbruch"``: Langenbruch's eq. 18 (arXiv:1911.01303; eq. 51 of arXiv:2112.04574,
    ``sweights.cov_correct``): the asymptotic sandwich :math:`H^{-1} D H^{-1}` of
    ``Minuit(weightcorr="asymptotic")`` less :math:`H^{-1} E C_W E^T H^{-1}`, the part of the
    weights' estimate from the same events (see the module's documentation). It takes the
    discriminating fit's shapes as known.

    ``method="sandwich"``: the sandwich of the whole estimate, stacked: the discriminating fit's
    floating parameters :math:`\phi` (yields and shapes; score per event
    :math:`\nabla_\phi \ln(\nu p(m_e))`, Hessian of the extended loss), the elements of
    :math:`W` (:math:`\sum_e q_e - W = 0`) and :math:`\theta` (:math:`\sum_e w_e \nabla\ln h_e = 0`,
    :math:`w` through :math:`W` and the densities :math:`g(m_e;\phi)`):
    :math:`C = H^{-1} \sum_e u_e u_e^T H^{-1}` with :math:`u_e` the weighted score of event
    :math:`e` plus what its part in :math:`\hat\phi` and :math:`\hat W` moves it by (the
    influence of each event, the Poisson variance of each sum). With fixed shapes it agrees with
    eq. 18 to the order of the correction's own sampling error; with floating shapes it holds their
    uncertainty, which eq. 18 leaves out (the correction is then larger).

    ``"auto"`` (default): ``"sandwich"`` where the discriminating fit floated shape parameters
    (``sw.other_parameters``), else ``"langenbruch"``, the published formula. :math:`H` is the exact
    Hessian of the weighted loss at the result's minimum (the result's own covariance, corrected or
    not, is not used), the per-event scores are zcache's exact gradients, the derivatives of the
    weights closed forms.

    Parameters
    ----------
    result : FitResult
        The fit of ``loss``: its minimum and fitted parameters.
    loss : zcache.loss.UnbinnedNLL
        The weighted fit of the control variable: a (not extended) unbinned NLL, without
        constraints, of the same events as the discriminating fit, weighted with the sWeights of
        one species of ``sw``.
    sw : SWeights
        The sWeights (``method == "events"``).
    species : Parameter or str, optional
        The species whose weights the loss's data carry; default: the one whose weights they are.
    method : {"auto", "langenbruch", "sandwich"}
        The correction (see above).

    Returns
    -------
    ndarray
        The corrected covariance of ``result``'s parameters, in the order of ``result.names``.

    Raises
    ------
    SPlotError
        ``sw`` made with ``covariance="fit"``; a loss that is extended, has constraints or whose
        data are not weighted with the species' sWeights (other events, other weights); an
        unpickled result, or one that is not the fit of ``loss``; a Hessian that is not positive
        definite; an unknown ``method``; for ``"sandwich"``, discriminating events changed since
        the weights were made. The parameters are as before.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian, Exponential, SumPdf
    >>> from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
    >>> from zcache.minimize import Minuit
    >>> from zcache.inference import sweights, sweighted_covariance
    >>> rng = np.random.default_rng(6)
    >>> m = np.r_[rng.normal(5.28, 0.02, 400), rng.uniform(5.1, 5.5, 600)]
    >>> t = np.r_[rng.exponential(1.5, 400), rng.exponential(0.4, 600)]
    >>> space, tspace = Space("m_cov", 5.1, 5.5), Space("t_cov", 0.0, 20.0)
    >>> nsig, nbkg = zcache.Parameter("nsig_cov", 350.0, lower=0), zcache.Parameter("nbkg_cov", 650.0, lower=0)
    >>> mass = ExtendedUnbinnedNLL(SumPdf([Gaussian(space, 5.28, 0.02), Exponential(space, 0.0)],
    ...                                   yields=[nsig, nbkg]), zcache.Data(m, obs="m_cov"))
    >>> sw = sweights(mass, Minuit().minimize(mass))
    >>> lam = zcache.Parameter("lam_cov", -0.5, lower=-5.0, upper=-0.05)
    >>> control = UnbinnedNLL(Exponential(tspace, lam), zcache.Data(t, obs="t_cov", weights=sw["nsig_cov"]))
    >>> fit = Minuit().minimize(control)
    >>> cov = sweighted_covariance(fit, control, sw)
    >>> cov.shape, bool(0 < cov[0, 0] < 1)
    ((1, 1), True)
    """
    method = _check_sweighted_fit(sw, loss, result, method)
    data = loss.data
    weights = data.weights_data.numpy() if data.is_weighted else None
    row = _species_row(sw, data, weights, species)
    params = tuple(result.params)
    best = np.array([result.values[p.name] for p in params])
    saved = [float(p) for p in params]
    try:
        hessian = loss.hessian_at(best, params, exact=True).numpy() * (0.5 / loss.errordef)
        scores = _event_scores(loss.model, data, params)
    finally:
        set_values(params, saved)
    h_inv = _inverse_hessian(hessian)
    middle = _sandwich_middle(sw, row, scores, weights, method)
    corrected = h_inv @ middle @ h_inv
    return 0.5 * (corrected + corrected.T)


def _check_discriminating_fit(yields: Sequence[Parameter], result: Any, covariance: str) -> None:
    """:func:`sweights`'s checks of the yields and the result: a named SPlotError, or nothing."""
    fixed = [y.name for y in yields if not y.floating]
    if fixed:
        raise SPlotError(
            f"sWeights need every yield of the sum floating in the fit; {', '.join(fixed)} "
            f"{'is' if len(fixed) == 1 else 'are'} fixed: float {'it' if len(fixed) == 1 else 'them'} "
            "(param.floating = True) and fit again.")
    if result is not None and not isinstance(result, FitResult):
        raise SPlotError(f"result must be the FitResult of the discriminating fit, got {type(result).__name__}.")
    if result is not None and result.params is None:
        raise SPlotError("this FitResult was unpickled and no longer knows its parameters; fit again.")
    if result is not None:
        missing = [y.name for y in yields if y.name not in result.names]
        if missing:
            raise SPlotError(f"the result did not fit {', '.join(missing)}; pass the result of the discriminating "
                             "fit, Minuit().minimize(loss).")
    if covariance == "fit":
        if result is None or result.covariance is None:
            raise SPlotError('covariance="fit" takes the yields\' covariance from the fit: pass its FitResult '
                             "(fitted with HESSE).")


def _yields_covariance(w_matrix: np.ndarray, n: np.ndarray, yields: Sequence[Parameter], tol: float) -> np.ndarray:
    """W^-1 from the events, after checking that the yields ``n`` are at the loss's minimum (within ``tol``)."""
    try:
        inverse = np.linalg.inv(np.linalg.cholesky(w_matrix))
    except np.linalg.LinAlgError:
        raise SPlotError(
            "the W matrix of the species is singular: two components have (nearly) the same shape in the "
            "discriminating variable, and the data cannot tell them apart.") from None
    v_events = inverse.T @ inverse
    v_events = 0.5 * (v_events + v_events.T)
    # W N = 1 at the minimum in the yields (the extended NLL's gradient in N_k is 1 - (W N)_k and
    # its Hessian W): the Newton step -W^-1 (1 - W N) = N - W^-1 1 says how far the yields are from it.
    step = n - v_events.sum(axis=1)
    sigmas = np.abs(step) / np.sqrt(np.diag(v_events))
    worst = int(np.argmax(sigmas))
    if not sigmas[worst] <= tol:
        raise SPlotError(
            f"the yields are not at the minimum of the loss: a Newton step moves {yields[worst].name} by "
            f"{step[worst]:+.6g} ({sigmas[worst]:.3g} of its error; tol={tol}). Fit first "
            "(Minuit().minimize(loss)), or pass the fit's result if the parameters moved since.")
    return v_events


def _check_sweighted_fit(sw: Any, loss: Any, result: Any, method: str) -> str:
    """:func:`sweighted_covariance`'s checks of its arguments; the method (``"auto"`` resolved)."""
    if not isinstance(sw, SWeights):
        raise SPlotError(f"sw must be the SWeights of the discriminating fit, got {type(sw).__name__}.")
    if method not in ("auto", "langenbruch", "sandwich"):
        raise SPlotError(f"method must be 'auto', 'langenbruch' or 'sandwich', got {method!r}.")
    if method == "auto":
        method = "sandwich" if sw.other_parameters else "langenbruch"
    if sw.method != "events":
        raise SPlotError('the correction is derived for sWeights made with covariance="events" (W from the '
                         'events); compute them so: sweights(loss, result, covariance="events").')
    if not isinstance(loss, UnbinnedNLL) or loss.extended:
        raise SPlotError(f"the sWeighted fit must be an UnbinnedNLL that is not extended, got {type(loss).__name__}.")
    if loss.constraints:
        raise SPlotError("the sWeighted fit has constraints; the sWeights' correction does not cover them.")
    if not isinstance(result, FitResult) or result.params is None:
        raise SPlotError("result must be the (not unpickled) FitResult of the sWeighted fit.")
    known = {id(p) for p in loss.get_params(floating=None)}
    strangers = [p.name for p in result.params if id(p) not in known]
    if strangers:
        raise SPlotError(f"the result fitted {', '.join(strangers)}, which the sWeighted loss does not have; "
                         "pass the result of Minuit().minimize(loss).")
    return method


def _species_row(sw: Any, data: Any, weights: np.ndarray | None, species: Any) -> int:
    """The row of ``sw`` whose sWeights weight ``data`` (``species``, or found from the weights)."""
    if weights is None or weights.shape[0] != sw.weights.shape[1]:
        raise SPlotError(
            f"the sWeighted fit's data '{data.name}' must be the discriminating fit's events weighted with "
            f"sWeights ({sw.weights.shape[1]} events); they are "
            f"{'not weighted' if weights is None else f'{weights.shape[0]} events'}.")
    if species is None:
        matches = [k for k in range(len(sw.names)) if np.allclose(weights, sw.weights[k], rtol=1e-9, atol=1e-12)]
        if not matches:
            raise SPlotError(f"the weights of '{data.name}' are the sWeights of none of {', '.join(sw.names)}; "
                             "weight the control data with sw[name] (same events, same order).")
        row = matches[0]
    else:
        name = species.name if isinstance(species, Parameter) else species
        sw[name]  # noqa: B018 - names the species or raises
        row = sw.names.index(name)
        if not np.allclose(weights, sw.weights[row], rtol=1e-9, atol=1e-12):
            raise SPlotError(f"the weights of '{data.name}' are not the sWeights of {name!r}.")
    return row


def _sandwich_middle(sw: SWeights, row: int, scores: np.ndarray, weights: np.ndarray, method: str) -> np.ndarray:
    """The middle of :func:`sweighted_covariance`'s sandwich ``H^-1 M H^-1``, by ``method``."""
    g = sw._densities
    total = sw.yields @ g
    a = np.linalg.inv(sw.W)
    a = 0.5 * (a + a.T)
    s = sw._index[row]
    dw, pairs = _weight_derivatives(a, g, s)
    e = dw @ scores  # (pairs, params): dw/dW_xy times the scores, summed over events
    q = np.array([g[x] * g[y] for x, y in pairs]) / total**2  # (pairs, events)
    if method == "langenbruch":
        d = (scores * weights[:, None] ** 2).T @ scores
        middle = d - e.T @ (q @ q.T) @ e
    else:
        u = _influences(sw, s, pairs, q, weights[:, None] * scores, scores, e)
        middle = u.T @ u
    return middle


def _inverse_hessian(hessian: np.ndarray) -> np.ndarray:
    """The inverse of the sWeighted fit's Hessian (from its Cholesky factor), or a named SPlotError."""
    try:
        h_inv = np.linalg.inv(np.linalg.cholesky(hessian))
    except np.linalg.LinAlgError:
        raise SPlotError("the Hessian of the sWeighted fit is not positive definite at the result's minimum; "
                         "it has no covariance to correct (check the fit).") from None
    h_inv = h_inv.T @ h_inv
    return h_inv


def _influences(sw: SWeights, s: int, pairs: list[tuple[int, int]], q: np.ndarray, weighted: np.ndarray,
                scores: np.ndarray, e: np.ndarray) -> np.ndarray:
    r"""Per event, the weighted score plus what the event moves it by through :math:`\hat\phi` and :math:`\hat W`.

    The stacked estimating equations are lower block-triangular in :math:`(\phi, W, \theta)`, so an
    event's influence on :math:`\hat\theta` is :math:`H^{-1} u_e`, with
    :math:`u_e = w_e s_e + J_{\theta\phi} I^\phi_e + J_{\theta W} I^W_e`,
    :math:`I^\phi_e = H_\phi^{-1} \nabla_\phi\ln(\nu p(m_e))`, :math:`I^W_e = q_e + J_{W\phi} I^\phi_e`.
    """
    loss, fitted = sw._loss, sw._fitted
    now = loss.data.numpy()
    if now.shape != sw._events.shape or not np.array_equal(now, sw._events):
        raise SPlotError("the discriminating fit's events changed since the sWeights were made; make them again "
                         "(sweights(loss, result)) for the events the control fit uses.")
    g, n = sw._densities, sw.yields
    k_species, n_fitted = len(n), len(fitted)
    total = n @ g
    saved = [float(p) for p in fitted]
    try:
        set_values(fitted, sw._values)
        # dg_k/dphi at the events (K, events, phi): zero along the yields, exact scores along the shapes
        dg = np.zeros((k_species, g.shape[1], n_fitted))
        if n_fitted > k_species:
            for k, component in enumerate(loss.model.pdfs):
                dg[k, :, k_species:] = g[k][:, None] * _event_scores(component, loss.data, fitted[k_species:])
        h_phi = loss.hessian_at(sw._values, fitted, exact=True).numpy() * (0.5 / loss.errordef)
    finally:
        set_values(fitted, saved)
    d_total = np.einsum("k,knp->np", n, dg)
    d_total[:, :k_species] += g.T
    influence_phi = np.linalg.solve(h_phi, (d_total / total[:, None]).T).T  # (events, phi)
    # dq_xy/dphi, q_xy = g_x g_y / total^2
    j_w_phi = np.array([
        ((dg[x] * g[y][:, None] + g[x][:, None] * dg[y]) / total[:, None] ** 2
         - 2.0 * (g[x] * g[y] / total**3)[:, None] * d_total).sum(axis=0)
        for x, y in pairs])  # (pairs, phi)
    influence_w = q.T + influence_phi @ j_w_phi.T  # (events, pairs)
    # the weight as a function of W and the densities, w = (A g)_s / 1^T A g: its derivative along phi at fixed W
    a = np.linalg.inv(sw.W)
    a = 0.5 * (a + a.T)
    a_g, a_dg = a @ g, np.einsum("ij,jnp->inp", a, dg)
    b = a_g.sum(axis=0)
    dw_phi = (a_dg[s] - (a_g[s] / b)[:, None] * a_dg.sum(axis=0)) / b[:, None]  # (events, phi)
    j_theta_phi = scores.T @ dw_phi  # (theta, phi)
    return weighted + influence_phi @ j_theta_phi.T + influence_w @ e
