"""sWeights and the covariance of a fit to sWeighted events, against the ``sweights`` package.

References: ``sweights.SWeight`` (method "summation", Variant B, and "subhess") with the densities
written with scipy.stats, and ``sweights.cov_correct`` (Langenbruch eq. 18) on the same fits.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import expon, norm

import zcache
from zcache.exceptions import InferenceError, SPlotError
from zcache.inference import SWeights, sweighted_covariance, sweights
from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
from zcache.minimize import Minuit, corrected_covariance
from zcache.models import Exponential, Gaussian, Space, SumPdf

sweights_pkg = pytest.importorskip("sweights")
covariance_module = pytest.importorskip("sweights.covariance")

M_RANGE, T_RANGE = (0.0, 1.0), (0.0, 1.0)
_names = itertools.count()


def _unique(name: str) -> str:
    return f"{name}_{next(_names)}"


def truncated_normal(mu, sigma, rng=M_RANGE):
    norm_ = norm.cdf(rng[1], mu, sigma) - norm.cdf(rng[0], mu, sigma)
    return lambda x: norm.pdf(x, mu, sigma) / norm_


def truncated_exponential(slope, rng=M_RANGE):
    """exp(slope x) normalized on rng (scipy's expon with scale -1/slope)."""
    scale = -1.0 / slope
    norm_ = expon.cdf(rng[1], rng[0], scale) - expon.cdf(rng[0], rng[0], scale)
    return lambda x: expon.pdf(x, rng[0], scale) / norm_


def draw(rng, n_sig, n_bkg, n_peak=0):
    """Mass and time: signal N(0.5, 0.1) x exp(-t/0.5), background exp(-2 m) x flat, peak N(0.75, 0.05) x flat."""
    def truncated(sampler, n):
        out = np.empty(0)
        while out.size < n:
            x = sampler(2 * n)
            out = np.r_[out, x[(x > 0.0) & (x < 1.0)]]
        return out[:n]

    m = np.r_[truncated(lambda k: rng.normal(0.5, 0.1, k), n_sig), truncated(lambda k: rng.exponential(0.5, k), n_bkg),
              truncated(lambda k: rng.normal(0.75, 0.05, k), n_peak)]
    t = np.r_[truncated(lambda k: rng.exponential(0.5, k), n_sig), rng.uniform(0.0, 1.0, n_bkg + n_peak)]
    return m, t


class MassFit:
    """An extended mass fit: signal, background and optionally a second peak; shapes fixed unless asked."""

    def __init__(self, m, three=False, float_shapes=False, compiled=True):
        space = Space(_unique("m"), *M_RANGE)
        self.mu = zcache.Parameter(_unique("mu"), 0.5, lower=0.3, upper=0.7, floating=float_shapes)
        self.sg = zcache.Parameter(_unique("sg"), 0.1, lower=0.02, upper=0.3, floating=float_shapes)
        self.lam = zcache.Parameter(_unique("lam"), -2.0, lower=-10.0, upper=-0.1, floating=float_shapes)
        self.nsig = zcache.Parameter(_unique("nsig"), 0.4 * len(m), lower=0.0, upper=10.0 * len(m))
        self.nbkg = zcache.Parameter(_unique("nbkg"), 0.5 * len(m), lower=0.0, upper=10.0 * len(m))
        pdfs = [Gaussian(space, self.mu, self.sg), Exponential(space, self.lam)]
        self.yields = [self.nsig, self.nbkg]
        if three:
            self.npeak = zcache.Parameter(_unique("npeak"), 0.1 * len(m), lower=0.0, upper=10.0 * len(m))
            pdfs.append(Gaussian(space, 0.75, 0.05))
            self.yields.append(self.npeak)
        self.pdfs = pdfs
        self.model = SumPdf(pdfs, yields=self.yields)
        self.data = zcache.Data(m, obs=space.obs[0])
        self.loss = ExtendedUnbinnedNLL(self.model, self.data)
        self.result = Minuit(compiled=compiled).minimize(self.loss)
        assert self.result.valid

    def reference_pdfs(self):
        v = self.result.values
        pdfs = [truncated_normal(v.get(self.mu.name, 0.5), v.get(self.sg.name, 0.1)),
                truncated_exponential(v.get(self.lam.name, -2.0))]
        if len(self.yields) == 3:
            pdfs.append(truncated_normal(0.75, 0.05))
        return pdfs

    def reference(self, method="summation", alphas=None):
        return sweights_pkg.SWeight(self.data.numpy().ravel(), self.reference_pdfs(),
                                    [self.result.values[y.name] for y in self.yields], (M_RANGE,),
                                    method=method, alphas=alphas, checks=False)


def state(params):
    return [(p.name, float(p), bool(p.floating)) for p in params]


@pytest.fixture(scope="module")
def events():
    return draw(np.random.default_rng(7), 1500, 2500)


@pytest.fixture(scope="module")
def events3():
    return draw(np.random.default_rng(8), 1200, 2000, 600)


@pytest.fixture(scope="module")
def mass_fit(events):
    """Fitted by the compiled (default) path."""
    return MassFit(events[0], compiled=True)


@pytest.fixture(scope="module")
def eager_fit(events):
    """Fitted by MIGRAD, call by call."""
    return MassFit(events[0], compiled=False)


@pytest.fixture(scope="module")
def three_fit(events3):
    return MassFit(events3[0], three=True)


@pytest.fixture(params=["two-compiled", "two-eager", "three"])
def case(request, events, events3):
    """(mass fit, control variable): two species fitted compiled and eager, three species compiled."""
    if request.param == "three":
        return request.getfixturevalue("three_fit"), events3[1]
    return request.getfixturevalue("mass_fit" if request.param == "two-compiled" else "eager_fit"), events[1]


def test_weights_match_the_sweights_package(case):
    fit = case[0]
    sw = sweights(fit.loss, fit.result)
    reference = fit.reference()
    assert isinstance(sw, SWeights) and sw.names == tuple(y.name for y in fit.yields)
    np.testing.assert_allclose(sw.W, reference.Wkl, rtol=1e-8)
    for k, y in enumerate(fit.yields):
        expected = reference.get_weight(k, fit.data.numpy().ravel())
        np.testing.assert_allclose(sw[y.name], expected, rtol=1e-8, atol=1e-10)
        np.testing.assert_array_equal(sw.of(y), sw[y.name])
        assert sw.sums[y.name] == pytest.approx(fit.result.values[y.name], rel=1e-9)
    # every event: the species' weights add to 1 where W N = 1, at the exact minimum (MIGRAD stops near it)
    np.testing.assert_allclose(sw.weights.sum(axis=0), 1.0, atol=1e-3)
    assert sw.sums_match(1e-9) and sw.method == "events" and sw.other_parameters == ()


def test_species_subset_and_the_fit_covariance(mass_fit):
    fit = mass_fit
    only = sweights(fit.loss, fit.result, species=[fit.nsig])
    assert only.names == (fit.nsig.name,) and only.weights.shape == (1, fit.data.nevents)
    np.testing.assert_array_equal(only[fit.nsig.name], sweights(fit.loss, species=[fit.nsig.name])[fit.nsig.name])
    # only the yields floated: the fit's covariance is W^-1 up to the fit's Hessian (differences of exact gradients)
    from_fit = sweights(fit.loss, fit.result, covariance="fit")
    np.testing.assert_allclose(from_fit.covariance, only.covariance, rtol=1e-4)
    np.testing.assert_allclose(from_fit.weights, sweights(fit.loss).weights, rtol=1e-3, atol=1e-4)


def test_floating_shapes(events):
    """Shapes floated: W^-1 is no longer the yields' covariance; 'fit' takes the larger one from the fit."""
    fit = MassFit(events[0], float_shapes=True)
    sw = sweights(fit.loss, fit.result)
    assert set(sw.other_parameters) == {fit.mu.name, fit.sg.name, fit.lam.name}
    reference = fit.reference()
    np.testing.assert_allclose(sw.weights[0], reference.get_weight(0, fit.data.numpy().ravel()), rtol=1e-8, atol=1e-10)
    assert sw.sums_match(1e-9)
    rows = [fit.result.names.index(y.name) for y in fit.yields]
    block = np.asarray(fit.result.covariance)[np.ix_(rows, rows)]
    from_fit = sweights(fit.loss, fit.result, covariance="fit")
    subhess = fit.reference(method="subhess", alphas=block)
    np.testing.assert_allclose(from_fit.weights[0], subhess.get_weight(0, fit.data.numpy().ravel()), rtol=1e-8)
    # the shapes' uncertainty inflates the yields' errors, and the weights differ; they still add up to the
    # yields: an extended fit's covariance has sum_j cov(N_s, N_j) = N_s (the total is n, whatever the shapes)
    assert np.all(np.diag(block) > np.diag(sw.covariance) * 1.01)
    assert np.max(np.abs(from_fit.weights - sw.weights)) > 1e-2
    assert from_fit.sums_match(1e-4)


@pytest.fixture()
def patched_reference(monkeypatch):
    """sweights 1.7's numerical derivative calls scipy.differentiate.derivative with an array-valued function,
    which scipy >= 1.15 refuses; the same central difference, spelled so that it runs."""
    def partial_derivative(pdf, var, point, data):
        point = list(point)
        step = 1e-5 * max(1.0, abs(point[var]))

        def at(x):
            args = list(point)
            args[var] = x
            return pdf(data, *args)
        return (at(point[var] + step) - at(point[var] - step)) / (2 * step)
    monkeypatch.setattr(covariance_module, "_partial_derivative", partial_derivative)
    return covariance_module.cov_correct


def sweights_dw_dw(n):
    """dw_s/dW_xy of the sweights tutorial's COW form, by central differences in W (any number of species)."""
    pairs = [(x, y) for x in range(n) for y in range(x + 1)]

    def weight(elements, gs):
        w = np.zeros((n, n))
        for (x, y), e in zip(pairs, elements, strict=True):
            w[x, y] = w[y, x] = e
        a = np.linalg.inv(w)
        ag = np.tensordot(a, np.stack(gs), axes=1)
        return ag[0] / ag.sum(axis=0)

    def derivative(k):
        def f(*args):
            elements, gs = np.array(args[:len(pairs)]), args[len(pairs):]
            step = 1e-6 * abs(elements[k])
            up, down = elements.copy(), elements.copy()
            up[k] += step
            down[k] -= step
            return (weight(up, gs) - weight(down, gs)) / (2 * step)
        return f
    return [derivative(k) for k in range(len(pairs))], pairs


def control_fit(fit, t, sw, compiled=False):
    lam_t = zcache.Parameter(_unique("lam_t"), -1.5, lower=-10.0, upper=-0.05)
    space = Space(_unique("t"), *T_RANGE)
    data = zcache.Data(t, obs=space.obs[0], weights=sw)
    loss = UnbinnedNLL(Exponential(space, lam_t), data)
    result = Minuit(compiled=compiled).minimize(loss)
    assert result.valid
    return lam_t, loss, result


def test_corrected_covariance_matches_cov_correct(case, patched_reference):
    fit, t = case
    sw = sweights(fit.loss, fit.result)
    lam_t, loss, result = control_fit(fit, t, sw[fit.nsig.name])
    before = state([lam_t, *fit.yields])
    corrected = sweighted_covariance(result, loss, sw)
    assert state([lam_t, *fit.yields]) == before
    value = result.values[lam_t.name]
    uncorrected = np.array([[float(np.linalg.inv(loss.hessian_at([value], [lam_t], exact=True).numpy())[0, 0])]])
    derivatives, pairs = sweights_dw_dw(len(fit.yields))
    gs = fit.reference_pdfs()

    def density(x, lam):
        return truncated_exponential(lam, T_RANGE)(x)

    def log_density(x, lam):
        return np.log(density(x, lam))

    def reference(hs):
        return patched_reference(hs, gs, t, fit.data.numpy().ravel(), sw[fit.nsig.name],
                                 [fit.result.values[y.name] for y in fit.yields], [value], uncorrected, derivatives,
                                 [sw.W[x, y] for x, y in pairs])

    # sweights 1.7's E_kl sums dw/dW times dh/dtheta, the density's derivative; eq. 18 has the score
    # dln h/dtheta (dimensions: E C E^T must be in D's units). cov_correct(ln h) gives the term with the
    # score; its first term, approx_cov_correct(ln h), is swapped for approx_cov_correct(h).
    expected = (covariance_module.approx_cov_correct(density, t, sw[fit.nsig.name], [value], uncorrected)
                - covariance_module.approx_cov_correct(log_density, t, sw[fit.nsig.name], [value], uncorrected)
                + reference(log_density))
    np.testing.assert_allclose(corrected, expected, rtol=1e-3)
    np.testing.assert_allclose(corrected, reference(density), rtol=1e-2)  # the package as it is, near
    # the first term alone is the asymptotic correction Minuit applies by default (by differences there)
    asymptotic = corrected_covariance(loss, [lam_t], [value], uncorrected, "asymptotic")
    first = covariance_module.approx_cov_correct(lambda x, lam: truncated_exponential(lam, T_RANGE)(x), t,
                                                 sw[fit.nsig.name], [value], uncorrected)
    np.testing.assert_allclose(asymptotic, first, rtol=1e-3)
    assert corrected[0, 0] < first[0, 0]  # the weights' estimate from the same events takes some variance away


def test_corrected_covariance_of_the_background(mass_fit, events, patched_reference):
    """The species found from the weights, or given."""
    fit = mass_fit
    sw = sweights(fit.loss, fit.result)
    _, loss, result = control_fit(fit, events[1], sw[fit.nbkg.name])
    by_weights = sweighted_covariance(result, loss, sw)
    np.testing.assert_array_equal(sweighted_covariance(result, loss, sw, species=fit.nbkg), by_weights)
    with pytest.raises(SPlotError, match="not the sWeights of"):
        sweighted_covariance(result, loss, sw, species=fit.nsig.name)


@pytest.mark.slow  # about 1.8 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_bad_input_is_refused_and_leaves_state(events):
    fit = MassFit(events[0])
    params = [*fit.yields, fit.mu, fit.sg, fit.lam]
    before = state(params)
    with pytest.raises(SPlotError, match="extended"):
        sweights(UnbinnedNLL(fit.model, fit.data))
    with pytest.raises(SPlotError, match="SumPdf"):
        ny = zcache.Parameter(_unique("ny"), 100.0)
        sweights(ExtendedUnbinnedNLL(Gaussian(fit.pdfs[0].space, 0.5, 0.1, extended=ny), fit.data))
    with pytest.raises(SPlotError, match="no single Parameter"):
        space = fit.pdfs[0].space
        inner = SumPdf([Gaussian(space, 0.5, 0.1), Gaussian(space, 0.5, 0.2)],
                       yields=[zcache.Parameter(_unique("na"), 10.0), zcache.Parameter(_unique("nb"), 10.0)])
        outer = SumPdf([inner, Exponential(space, -2.0, extended=zcache.Parameter(_unique("nc"), 10.0))])
        sweights(ExtendedUnbinnedNLL(outer, fit.data))
    with pytest.raises(SPlotError, match="not a yield"):
        sweights(fit.loss, species=["nope"])
    with pytest.raises(SPlotError, match="twice"):
        sweights(fit.loss, species=[fit.nsig, fit.nsig.name])
    with pytest.raises(SPlotError, match="covariance must be"):
        sweights(fit.loss, covariance="hesse")
    with pytest.raises(SPlotError, match="pass its FitResult"):
        sweights(fit.loss, covariance="fit")
    lam_t, _, other_result = control_fit(fit, events[1], np.ones(len(events[1])))
    with pytest.raises(SPlotError, match="did not fit"):
        sweights(fit.loss, other_result)
    assert float(lam_t) == other_result.values[lam_t.name]
    assert state(params) == before
    fit.nbkg.floating = False
    try:
        with pytest.raises(SPlotError, match=f"{fit.nbkg.name} is fixed"):
            sweights(fit.loss, fit.result)
        assert state(params) == [(n, v, f if n != fit.nbkg.name else False) for n, v, f in before]
    finally:
        fit.nbkg.floating = True
    # not at the minimum: the message says how far; with the result the fit's minimum is used
    fit.nsig.set_value(fit.result.values[fit.nsig.name] * 1.05)
    moved = state(params)
    with pytest.raises(SPlotError, match=r"Newton step moves .*nsig.* by -") as info:
        sweights(fit.loss)
    assert "of its error" in str(info.value) and isinstance(info.value, InferenceError)
    assert state(params) == moved
    at_fit = sweights(fit.loss, fit.result)
    assert state(params) == moved
    assert at_fit.sums[fit.nsig.name] == pytest.approx(fit.result.values[fit.nsig.name], rel=1e-9)
    fit.nsig.set_value(fit.result.values[fit.nsig.name])


def test_correction_refuses_what_it_does_not_cover(mass_fit, events):
    fit = mass_fit
    sw = sweights(fit.loss, fit.result)
    lam_t, loss, result = control_fit(fit, events[1], sw[fit.nsig.name])
    before = state([lam_t, *fit.yields])
    with pytest.raises(SPlotError, match='covariance="events"'):
        sweighted_covariance(result, loss, sweights(fit.loss, fit.result, covariance="fit"))
    obs = loss.model.space.obs[0]
    other = zcache.Data(events[1], obs=obs, weights=np.ones(len(events[1])))
    unit = UnbinnedNLL(loss.model, other)
    with pytest.raises(SPlotError, match="none of"):
        sweighted_covariance(result, unit, sw)
    with pytest.raises(SPlotError, match="must be the discriminating fit's events"):
        short = zcache.Data(events[1][:100], obs=obs, weights=sw[fit.nsig.name][:100])
        sweighted_covariance(result, UnbinnedNLL(loss.model, short), sw)
    with pytest.raises(SPlotError, match="not extended"):
        sweighted_covariance(result, fit.loss, sw)
    with pytest.raises(SPlotError, match="method must be"):
        sweighted_covariance(result, loss, sw, method="full")
    with pytest.raises(SPlotError, match="does not have"):
        sweighted_covariance(fit.result, loss, sw)
    assert state([lam_t, *fit.yields]) == before


@pytest.mark.slow
def test_corrected_errors_cover_the_spread_of_toys():
    """Over toys, the corrected error of the sWeighted lifetime matches the spread of the fitted values;
    the inverse Hessian of the weighted fit (no correction) does not."""
    rng = np.random.default_rng(11)
    m, t = draw(rng, 800, 1200)
    fit = MassFit(m)
    lam_t = zcache.Parameter(_unique("lam_toy"), -2.0, lower=-10.0, upper=-0.05)
    space = Space(_unique("t_toy"), *T_RANGE)
    data = zcache.Data(t, obs=space.obs[0], weights=np.ones_like(t))
    control = UnbinnedNLL(Exponential(space, lam_t), data)
    values, corrected, plain = [], [], []
    for _ in range(40):
        m, t = draw(rng, rng.poisson(800), rng.poisson(1200))
        fit.data.set_data(m)
        Minuit().minimize(fit.loss)
        sw = sweights(fit.loss)
        data.set_data(t, weights=sw[fit.nsig.name])
        lam_t.set_value(-2.0)
        result = Minuit(weightcorr=None).minimize(control)
        values.append(result.values[lam_t.name])
        plain.append(result.errors[lam_t.name])
        corrected.append(np.sqrt(sweighted_covariance(result, control, sw)[0, 0]))
    spread = np.std(values, ddof=1)
    assert abs(np.mean(corrected) / spread - 1) < 0.3  # 40 toys: the spread is known to ~11 %
    assert abs(np.mean(corrected) / spread - 1) < abs(np.mean(plain) / spread - 1)


def stacked_sandwich(m, t, yields, shapes, w_matrix, lam, float_shapes, species=0):
    """The stacked M-estimation sandwich written out independently: numpy, scipy.stats densities and
    central differences for every derivative. eta = (N_s, N_b, mu, sigma, slope, W_00, W_10, W_11, lam_t);
    with fixed shapes their rows and columns are left out (constants, not estimates)."""
    pairs = [(0, 0), (1, 0), (1, 1)]

    def densities(beta):
        return np.stack([truncated_normal(beta[0], beta[1])(m), truncated_exponential(beta[2])(m)])

    def log_total(phi):
        return np.log(phi[:2] @ densities(phi[2:]))

    def derivative(f, x, k, step):
        up, down = np.array(x, float), np.array(x, float)
        up[k] += step
        down[k] -= step
        return (f(up) - f(down)) / (2 * step)

    def per_event(eta):
        phi, omega, theta = eta[:5], eta[5:8], eta[8]
        psi_phi = np.stack([derivative(log_total, phi, k, 1e-5 * max(1.0, abs(phi[k]))) for k in range(5)], axis=1)
        g = densities(phi[2:])
        total = phi[:2] @ g
        psi_w = np.stack([g[x] * g[y] / total**2 for x, y in pairs], axis=1)
        w = np.array([[omega[0], omega[1]], [omega[1], omega[2]]])
        ag = np.linalg.inv(w) @ g
        weight = ag[species] / ag.sum(axis=0)

        def log_h(th):
            return np.log(truncated_exponential(th[0], T_RANGE)(t))
        score = derivative(log_h, [theta], 0, 1e-6)
        return np.column_stack([psi_phi, psi_w, weight * score])

    def totals(eta):
        out = per_event(eta).sum(axis=0)
        out[:2] -= 1.0  # the extended term: d nu / dN_k
        out[5:8] -= eta[5:8]
        return out

    eta = np.r_[yields, shapes, [w_matrix[x, y] for x, y in pairs], lam]
    jac = np.stack([derivative(totals, eta, k, 1e-4 * max(1e-2, abs(eta[k]))) for k in range(len(eta))], axis=1)
    keep = [k for k in range(len(eta)) if float_shapes or k not in (2, 3, 4)]
    psi = per_event(eta)[:, keep]
    inverse = np.linalg.inv(jac[np.ix_(keep, keep)])
    return (inverse @ (psi.T @ psi) @ inverse.T)[-1:, -1:]


@pytest.mark.slow
def test_sandwich_with_floating_shapes(events):
    """Shapes floated in the mass fit: the stacked sandwich against the same written out in numpy;
    larger than eq. 18, which leaves the shapes' uncertainty out. With fixed shapes the two agree."""
    fit = MassFit(events[0], float_shapes=True)
    sw = sweights(fit.loss, fit.result)
    lam_t, loss, result = control_fit(fit, events[1], sw[fit.nsig.name])
    params = [lam_t, *fit.yields, fit.mu, fit.sg, fit.lam]
    before = state(params)
    auto = sweighted_covariance(result, loss, sw)
    assert state(params) == before
    np.testing.assert_array_equal(auto, sweighted_covariance(result, loss, sw, method="sandwich"))
    v = fit.result.values
    expected = stacked_sandwich(events[0], events[1], [v[fit.nsig.name], v[fit.nbkg.name]],
                                [v[fit.mu.name], v[fit.sg.name], v[fit.lam.name]], sw.W, result.values[lam_t.name],
                                float_shapes=True)
    np.testing.assert_allclose(auto, expected, rtol=1e-3)
    langenbruch = sweighted_covariance(result, loss, sw, method="langenbruch")
    assert auto[0, 0] > langenbruch[0, 0] * 1.01
    fit.data.set_data(events[0][::-1].copy())
    try:
        with pytest.raises(SPlotError, match="events changed"):
            sweighted_covariance(result, loss, sw)
    finally:
        fit.data.set_data(events[0])
    assert state(params) == before


@pytest.mark.slow  # about 2.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_sandwich_agrees_with_eq18_for_fixed_shapes(mass_fit, events):
    fit = mass_fit
    sw = sweights(fit.loss, fit.result)
    lam_t, loss, result = control_fit(fit, events[1], sw[fit.nsig.name])
    sandwich = sweighted_covariance(result, loss, sw, method="sandwich")
    langenbruch = sweighted_covariance(result, loss, sw, method="langenbruch")
    np.testing.assert_array_equal(sweighted_covariance(result, loss, sw), langenbruch)  # auto: no shape floated
    v = fit.result.values
    expected = stacked_sandwich(events[0], events[1], [v[fit.nsig.name], v[fit.nbkg.name]], [0.5, 0.1, -2.0],
                                sw.W, result.values[lam_t.name], float_shapes=False)
    np.testing.assert_allclose(sandwich, expected, rtol=1e-3)
    # two estimates of one asymptotic covariance from one sample: they differ by the sampling error of the
    # (small) correction, well below 1e-3 of the covariance here
    np.testing.assert_allclose(sandwich, langenbruch, rtol=2e-3)


@pytest.mark.slow
def test_padded_data_give_the_same_numbers():
    """Shape buckets (capacity): the padding rows never reach the weights or the corrections."""
    m, t = draw(np.random.default_rng(9), 700, 1300)
    out = {}
    for capacity in (None, 4096):
        space, tspace = Space(_unique("m"), *M_RANGE), Space(_unique("t"), *T_RANGE)
        yields = [zcache.Parameter(_unique("ns"), 600.0, lower=0.0), zcache.Parameter(_unique("nb"), 1400.0, lower=0.0)]
        mu = zcache.Parameter(_unique("mu"), 0.5, lower=0.3, upper=0.7)
        loss = ExtendedUnbinnedNLL(SumPdf([Gaussian(space, mu, 0.1), Exponential(space, -2.0)], yields=yields),
                                   zcache.Data(m, obs=space.obs[0], capacity=capacity))
        sw = sweights(loss, Minuit().minimize(loss))
        lam_t = zcache.Parameter(_unique("lt"), -1.0, lower=-10.0, upper=-0.05)
        control = UnbinnedNLL(Exponential(tspace, lam_t),
                              zcache.Data(t, obs=tspace.obs[0], weights=sw.weights[0], capacity=capacity))
        result = Minuit().minimize(control)
        out[capacity] = (sw.weights, sweighted_covariance(result, control, sw, method="langenbruch"),
                         sweighted_covariance(result, control, sw))
    assert out[4096][0].shape == (2, 2000)
    for padded, plain in zip(out[4096], out[None], strict=True):
        np.testing.assert_allclose(padded, plain, rtol=1e-9, atol=1e-12)
