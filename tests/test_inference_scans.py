"""Profile scans and contours (zcache.inference) against closed forms, MINOS and iminuit's mncontour."""

from __future__ import annotations

import iminuit
import numpy as np
import pytest
from helpers import np_extended_nll
from scipy import stats

import zcache
from zcache.exceptions import InferenceError
from zcache.inference import contour, profile_grid, profile_scan
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, SimultaneousLoss, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf

TIGHT = 1e-3  # Minuit tol of the fits here: EDM < 2e-6 * errordef, Delta(-2 ln L) good to ~1e-5


def _state(loss):
    return [(p.name, float(p.value()), bool(p.floating)) for p in loss.get_params(None)]


@pytest.fixture(scope="module")
def gauss():
    """A Gaussian's mean and width, both floating, on 500 events; the range is wide (no truncation)."""
    mu = zcache.Parameter("mu_sc", 0.0, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_sc", 1.0, lower=0.3, upper=3.0)
    x = np.random.default_rng(11).normal(0.2, 1.3, 500)
    loss = UnbinnedNLL(Gaussian(Space("x", -30.0, 30.0), mu, sigma), zcache.Data(x))
    return loss, mu, sigma, x


def _closed_form(x, mu):
    """Delta(-2 ln L) of a Gaussian's mean with its width profiled: n log(s^2(mu) / s^2(xbar))."""
    s2 = np.mean((x[None, :] - np.asarray(mu)[:, None]) ** 2, axis=1)
    return len(x) * np.log(s2 / np.var(x)), np.sqrt(s2)


# [True-True]: about 5 CPU seconds, slow; the fast loop keeps [False-True] (CONTRIBUTING.md, "Test times");
# [False-False] is exhaustive: the same closed form through MIGRAD fits, where make test keeps the compiled scans
@pytest.mark.parametrize(("batched", "compiled"), [pytest.param(True, True, marks=pytest.mark.slow), (False, True),
                                                   pytest.param(False, False, marks=pytest.mark.exhaustive)])
def test_gaussian_mean_scan_is_the_closed_form(gauss, batched, compiled):
    loss, mu, sigma, x = gauss
    before = _state(loss)
    values = np.array([-0.1, 0.05, 0.2, 0.3, 0.45])
    scan = profile_scan(loss, "mu_sc", values, minimizer=Minuit(tol=TIGHT, compiled=compiled), batched=batched)
    delta, width = _closed_form(x, values)
    assert scan.path == ("batched" if batched else "serial")
    assert scan.converged.all() and not scan.refit.any()
    np.testing.assert_allclose(scan.delta, delta, atol=1e-4)
    error = np.sqrt(np.var(x) / (2 * len(x)))  # the width's error
    # MIGRAD's bound EDM < 0.002 tol errordef puts a minimum within sqrt(EDM / errordef) =
    # sqrt(0.002 tol) errors of the true one (1.4e-3 at TIGHT); the batched points stop there
    # (no HESSE), with 1.5x room for BFGS's estimate of the EDM.
    np.testing.assert_allclose(scan.nuisances["sigma_sc"], width, atol=1.5 * np.sqrt(0.002 * TIGHT) * error)
    assert scan.minimum == pytest.approx(x.mean(), abs=1e-3 * scan.error)
    assert _state(loss) == before


@pytest.mark.slow
def test_batched_and_serial_scans_agree_and_match_fit_result_profile(gauss):
    loss, mu, sigma, x = gauss
    m = Minuit(tol=TIGHT)
    a = profile_scan(loss, "mu_sc", bins=7, bound=2.0, minimizer=m, batched=True)
    # any loss that BatchedLoss does not take runs serially, with the same answer
    b = profile_scan(SimultaneousLoss([loss]), "mu_sc", bins=7, bound=2.0, minimizer=m)
    assert (a.path, b.path) == ("batched", "serial")
    np.testing.assert_allclose(a.values, b.values, atol=1e-3 * a.error)
    np.testing.assert_allclose(a.delta, b.delta, atol=1e-4)
    # the batched points stop at MIGRAD's bound (no HESSE): within sqrt(0.002 tol) errors, x1.5
    # for BFGS's estimate of the EDM (test_gaussian_mean_scan_is_the_closed_form)
    error = np.sqrt(np.var(x) / (2 * len(x)))  # the width's error
    np.testing.assert_allclose(a.nuisances["sigma_sc"], b.nuisances["sigma_sc"],
                               atol=1.5 * np.sqrt(0.002 * TIGHT) * error)
    # FitResult.profile (iminuit's mnprofile, Delta NLL) at the same points
    result = m.minimize(loss)
    grid, dnll, valid = result.profile("mu_sc", bins=7, bound=(a.values[0], a.values[-1]))
    np.testing.assert_allclose(grid, a.values, atol=1e-9)
    assert valid.all()
    np.testing.assert_allclose(2 * dnll, a.delta, atol=2e-3)


def test_scan_without_nuisances_is_the_parabola():
    mu = zcache.Parameter("mu_sc1", 0.0, lower=-2.0, upper=2.0)
    x = np.random.default_rng(5).normal(0.3, 1.0, 200)
    loss = UnbinnedNLL(Gaussian(Space("x", -30.0, 30.0), mu, 1.0), zcache.Data(x))
    scan = profile_scan(loss, "mu_sc1", bins=5, bound=(0.0, 0.6), minimizer=Minuit(tol=TIGHT))
    np.testing.assert_allclose(scan.delta, len(x) * (scan.values - x.mean()) ** 2, atol=1e-6)
    lower, upper = scan.interval(1.0)
    assert (lower, upper) == pytest.approx((x.mean() - 1 / np.sqrt(200), x.mean() + 1 / np.sqrt(200)), abs=1e-6)
    assert float(mu.value()) == 0.0


@pytest.fixture(scope="module")
def gauss_exp():
    """An extended Gauss + Exponential on [0, 10] and its numpy NLL (tests/helpers.py)."""
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu_ge", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma_ge", 0.6, lower=0.1, upper=2.0)
    lam = zcache.Parameter("lam_ge", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter("nsig_ge", 300.0, lower=0.0, upper=5000.0)
    nbkg = zcache.Parameter("nbkg_ge", 700.0, lower=0.0, upper=5000.0)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(5.0, 0.6, 300), 10.0 * rng.random(2000)])
    x = x[(x > 0) & (x < 10)]
    x = np.concatenate([x[:300], x[300:][rng.random(len(x) - 300) < np.exp(-0.3 * x[300:])][:700]])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x"))
    return loss, [mu, sigma, lam, nsig, nbkg], x


def _np_minuit(x, start):
    m = iminuit.Minuit(lambda mu, sigma, lam, nsig, nbkg: np_extended_nll(x, mu, sigma, lam, nsig, nbkg), **start)
    m.errordef = 0.5
    m.limits = [(3.0, 7.0), (0.1, 2.0), (-2.0, -0.01), (0.0, 5000.0), (0.0, 5000.0)]
    m.tol = 1e-4
    m.migrad()
    m.hesse()
    return m


@pytest.mark.slow
# sigma_ge is exhaustive: the same comparison with MINOS for a shape parameter; make test keeps the yield's
@pytest.mark.parametrize("name", ["nsig_ge", pytest.param("sigma_ge", marks=pytest.mark.exhaustive)])
def test_interval_at_level_one_is_minos(gauss_exp, name):
    loss, params, x = gauss_exp
    before = _state(loss)
    scan = profile_scan(loss, name, bins=21, bound=1.6, minimizer=Minuit(tol=TIGHT))
    assert scan.path == "batched" and scan.converged.all()
    m = _np_minuit(x, dict(mu=5.0, sigma=0.6, lam=-0.3, nsig=300.0, nbkg=700.0))
    short = name.removesuffix("_ge")
    m.minos(short)
    lower, upper = scan.interval(1.0)
    error = m.errors[short]
    assert lower == pytest.approx(m.values[short] + m.merrors[short].lower, abs=1e-3 * error)
    assert upper == pytest.approx(m.values[short] + m.merrors[short].upper, abs=1e-3 * error)
    assert _state(loss) == before


def _distance_to_polygon(points, polygon):
    """Each point's distance to the closed polygon (segments between consecutive vertices)."""
    a, b = polygon, np.roll(polygon, -1, axis=0)
    keep = np.any(a != b, axis=1)  # mncontour closes its curve with the first point again
    a, b = a[keep], b[keep]
    ab = b - a
    t = np.clip(np.einsum("pij,ij->pi", points[:, None, :] - a[None], ab) / np.einsum("ij,ij->i", ab, ab), 0, 1)
    nearest = a[None] + t[..., None] * ab[None]
    return np.min(np.linalg.norm(points[:, None, :] - nearest, axis=-1), axis=1)


@pytest.mark.slow
def test_contour_of_correlated_parameters_is_mncontour(gauss_exp):
    loss, params, x = gauss_exp
    before = _state(loss)
    c = contour(loss, ("nsig_ge", "sigma_ge"), levels=2.30, points=48, minimizer=Minuit(tol=TIGHT), tol=1e-4)
    assert c.path == "batched" and c.converged[2.30].all() and not c.at_limit[2.30].any()
    m = _np_minuit(x, dict(mu=5.0, sigma=0.6, lam=-0.3, nsig=300.0, nbkg=700.0))
    assert abs(m.covariance.correlation()["nsig", "sigma"]) > 0.3  # correlated indeed
    ref = np.asarray(m.mncontour("nsig", "sigma", cl=stats.chi2.cdf(2.30, 2), size=120))
    scale = np.array([m.errors["nsig"], m.errors["sigma"]])
    ours = c.curves[2.30] / scale
    assert _distance_to_polygon(ours, ref / scale).max() < 1e-2
    # and no part of mncontour's curve away from ours (up to the chords between our 48 points)
    assert _distance_to_polygon(ref / scale, ours).max() < 2e-2
    assert _state(loss) == before


@pytest.mark.parametrize("batched", [pytest.param(True, marks=pytest.mark.slow), False])
def test_contour_of_a_gaussian_likelihood_is_the_exact_ellipse(batched):
    """Data fix a; a 3-D Gaussian constraint ties a, b, c: the loss is quadratic; c is profiled."""
    a = zcache.Parameter("a_el", 0.0, lower=-5.0, upper=5.0)
    b = zcache.Parameter("b_el", 0.0, lower=-5.0, upper=5.0)
    c = zcache.Parameter("c_el", 0.0, lower=-5.0, upper=5.0)
    x = np.random.default_rng(3).normal(0.4, 1.0, 50)
    cov = np.array([[0.04, 0.02, 0.01], [0.02, 0.09, 0.05], [0.01, 0.05, 0.16]])
    loss = UnbinnedNLL(Gaussian(Space("x", -40.0, 40.0), a, 1.0), zcache.Data(x),
                       constraints=[GaussianConstraint([a, b, c], [0.3, -0.2, 0.1], cov=cov)])
    hess = np.linalg.inv(cov) + np.diag([len(x), 0.0, 0.0])  # of -2 ln L / 2 = the loss
    best = np.linalg.solve(hess, np.linalg.inv(cov) @ [0.3, -0.2, 0.1] + [x.sum(), 0.0, 0.0])
    profiled = np.linalg.inv(np.linalg.inv(hess)[:2, :2])  # the Hessian of the profile in (a, b)
    levels = (1.0, 5.99)
    before = _state(loss)
    out = contour(loss, ("a_el", "b_el"), levels=levels, points=12, tol=1e-6, minimizer=Minuit(tol=1e-4),
                  batched=batched)
    assert out.minimum == pytest.approx(tuple(best[:2]), abs=1e-5)
    for level in levels:
        d = out.curves[level] - best[:2]
        np.testing.assert_allclose(np.einsum("pi,ij,pj->p", d, profiled, d), level, rtol=1e-5)
        assert out.converged[level].all()
    assert out.steps <= 3  # the first guess, on the HESSE ellipse, is the curve
    assert _state(loss) == before


def test_contour_stops_at_a_limit_and_says_so():
    x = np.random.default_rng(4).normal(0.0, 1.0, 400)
    edge = x.mean() - 0.04  # one error is 0.05: the 68 % contour crosses this limit
    mu = zcache.Parameter("mu_lim", x.mean(), lower=edge, upper=2.0)
    sigma = zcache.Parameter("sigma_lim", 1.0, lower=0.3, upper=3.0)
    loss = UnbinnedNLL(Gaussian(Space("x", -30.0, 30.0), mu, sigma), zcache.Data(x))
    out = contour(loss, ("mu_lim", "sigma_lim"), levels=2.30, points=8, minimizer=Minuit(tol=TIGHT))
    curve, limit = out.curves[2.30], out.at_limit[2.30]
    assert limit.any() and not limit.all()
    np.testing.assert_allclose(curve[limit, 0], edge)
    assert (out.delta[2.30][limit] < 2.30).all()
    assert not out.converged[2.30][limit].any()


# -- bad input: named errors, state unchanged ------------------------------------------------------
def _bad_calls(loss):
    return [
        (lambda: profile_scan(loss, "nope"), "no parameter 'nope'"),
        (lambda: profile_scan(loss, 3), "by name"),
        (lambda: profile_scan(loss, "mu_sc", [0.0, 2.5]), "outside its limits"),
        (lambda: profile_scan(loss, "mu_sc", [0.0, np.nan]), "outside its limits"),
        (lambda: profile_scan(loss, "mu_sc", bins=1), "bins"),
        (lambda: profile_scan(loss, "mu_sc", bound=-1.0), "bound"),
        (lambda: profile_scan(loss, "mu_sc", bound=(1.0, 0.0)), "low < high"),
        (lambda: profile_scan(SimultaneousLoss([loss]), "mu_sc", batched=True), "batched=True"),
        (lambda: profile_scan("a loss", "mu_sc"), "zcache loss"),
        (lambda: contour(loss, ("mu_sc", "mu_sc")), "two different"),
        (lambda: contour(loss, "mu_sc"), "two parameter names"),
        (lambda: contour(loss, ("mu_sc", "sigma_sc"), levels=0.0), "positive"),
        (lambda: contour(loss, ("mu_sc", "sigma_sc"), levels=(1.0, -2.0)), "positive"),
        (lambda: contour(loss, ("mu_sc", "sigma_sc"), cl=1.5), r"\(0, 1\)"),
        (lambda: contour(loss, ("mu_sc", "sigma_sc"), levels=1.0, cl=0.68), "not both"),
        (lambda: contour(loss, ("mu_sc", "sigma_sc"), points=2), "points"),
    ]


def test_bad_input_is_a_named_error_and_changes_nothing(gauss):
    loss, mu, sigma, x = gauss
    mu.set_value(0.123)
    before = _state(loss)
    for call, match in _bad_calls(loss):
        with pytest.raises(InferenceError, match=match):
            call()
        assert _state(loss) == before
    sigma.floating = False
    try:
        fixed = _state(loss)
        with pytest.raises(InferenceError, match="fixed"):
            profile_scan(loss, "sigma_sc")
        with pytest.raises(InferenceError, match="fixed"):
            contour(loss, ("mu_sc", "sigma_sc"))
        assert _state(loss) == fixed
    finally:
        sigma.floating = True


def test_interval_level_must_be_positive(gauss):
    loss, mu, sigma, x = gauss
    scan = profile_scan(loss, "mu_sc", bins=5, batched=False)
    for level in (0.0, -1.0, np.inf, "one"):
        with pytest.raises(InferenceError, match="positive"):
            scan.interval(level)
    assert np.isnan(scan.interval(100.0)).all()  # the scan (2 errors) does not reach 10 sigma


class _FailingMinuit(Minuit):
    """Fits, then fails on the n-th call: a scan that stops half-way."""

    def __init__(self, fail_at: int):
        super().__init__(tol=TIGHT)
        self.calls, self.fail_at = 0, fail_at

    def minimize(self, loss, params=None):
        self.calls += 1
        result = super().minimize(loss, params)
        if self.calls == self.fail_at:
            raise RuntimeError("a fit failed")
        return result


@pytest.mark.slow  # about 5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_a_failure_half_way_leaves_values_and_flags_as_before(gauss):
    loss, mu, sigma, x = gauss
    mu.set_value(0.321)
    sigma.set_value(1.1)
    before = _state(loss)
    for fail_at in (1, 3):
        with pytest.raises(RuntimeError, match="a fit failed"):
            profile_scan(loss, "mu_sc", bins=4, minimizer=_FailingMinuit(fail_at), batched=False)
        assert _state(loss) == before
    scan = profile_scan(loss, "mu_sc", bins=4)
    assert scan.converged.all() and _state(loss) == before


# -- the pictures ----------------------------------------------------------------------------------
def test_plot_scan_and_plot_contour_draw_the_numbers_given(gauss):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zcache.plot import plot_contour, plot_scan

    loss, mu, sigma, x = gauss
    values = np.array([0.45, 0.3, 0.2, 0.05, -0.1, 0.5])  # not sorted: drawn sorted
    scan = profile_scan(loss, "mu_sc", values, minimizer=Minuit(tol=TIGHT), batched=False)
    fig, ax = plt.subplots()
    drawn = plot_scan(scan, ax=ax, levels=(1.0, 4.0))
    assert drawn.ax is ax and drawn.figure is fig
    order = np.argsort(values)
    np.testing.assert_array_equal(drawn.points.get_xdata(), values[order])
    np.testing.assert_array_equal(drawn.points.get_ydata(), scan.delta[order])
    assert {lv: line.get_ydata()[0] for lv, line in drawn.levels.items()} == {1.0: 1.0, 4.0: 4.0}
    assert drawn.intervals == {1.0: scan.interval(1.0), 4.0: scan.interval(4.0)}
    vertical = sorted(float(line.get_xdata()[0]) for line in ax.lines if line.get_linestyle() == "-.")
    assert vertical == sorted(e for i in drawn.intervals.values() for e in i if np.isfinite(e))
    xs = drawn.parabola.get_xdata()
    np.testing.assert_allclose(drawn.parabola.get_ydata(), ((xs - scan.minimum) / scan.error) ** 2)
    with pytest.raises(InferenceError, match="positive"):
        plot_scan(scan, levels=(0.0,))
    plt.close("all")

    c = contour(loss, ("mu_sc", "sigma_sc"), levels=(2.30, 5.99), points=6, minimizer=Minuit(tol=TIGHT),
                batched=False)
    drawn = plot_contour(c)
    for level in (2.30, 5.99):
        xy = drawn.curves[level].get_xydata()
        np.testing.assert_array_equal(xy[:-1], c.curves[level])
        np.testing.assert_array_equal(xy[-1], c.curves[level][0])
    assert tuple(drawn.minimum.get_xydata()[0]) == c.minimum
    assert drawn.ax.get_xlabel() == "mu_sc" and drawn.ax.get_ylabel() == "sigma_sc"
    plt.close("all")


@pytest.mark.parametrize("batched", [pytest.param(True, marks=pytest.mark.slow), False])
def test_profile_grid_of_a_gaussian_likelihood_is_the_quadratic_form(batched):
    a = zcache.Parameter("a_gr", 0.0, lower=-5.0, upper=5.0)
    b = zcache.Parameter("b_gr", 0.0, lower=-5.0, upper=5.0)
    c = zcache.Parameter("c_gr", 0.0, lower=-5.0, upper=5.0)
    x = np.random.default_rng(3).normal(0.4, 1.0, 50)
    cov = np.array([[0.04, 0.02, 0.01], [0.02, 0.09, 0.05], [0.01, 0.05, 0.16]])
    loss = UnbinnedNLL(Gaussian(Space("x", -40.0, 40.0), a, 1.0), zcache.Data(x),
                       constraints=[GaussianConstraint([a, b, c], [0.3, -0.2, 0.1], cov=cov)])
    hess = np.linalg.inv(cov) + np.diag([len(x), 0.0, 0.0])
    best = np.linalg.solve(hess, np.linalg.inv(cov) @ [0.3, -0.2, 0.1] + [x.sum(), 0.0, 0.0])
    profiled = np.linalg.inv(np.linalg.inv(hess)[:2, :2])
    xs, ys = best[0] + np.array([-0.2, 0.0, 0.1]), best[1] + np.array([-0.3, 0.1])
    before = _state(loss)
    grid = profile_grid(loss, ("a_gr", "b_gr"), xs, ys, minimizer=Minuit(tol=1e-4), batched=batched)
    d = np.stack(np.meshgrid(xs - best[0], ys - best[1], indexing="ij"), axis=-1)
    np.testing.assert_allclose(grid.delta, np.einsum("xyi,ij,xyj->xy", d, profiled, d), atol=1e-6)
    # c at its conditional minimum: -H_cc^-1 H_c(ab) (theta_ab - best_ab) + best_c, to what each point's fit
    # promises: within sqrt(EDM / errordef) < sqrt(0.002 tol) of its error (MIGRAD stops there; a compiled BFGS
    # on this quadratic loss happens to land closer, which no fit promises: a loss's first fits are MIGRAD's)
    c_hat = best[2] - (d @ hess[2, :2]) / hess[2, 2]
    c_error = np.sqrt(2 * loss.errordef / hess[2, 2])  # with a and b fixed
    np.testing.assert_allclose(grid.nuisances["c_gr"], c_hat, atol=1.5 * np.sqrt(0.002 * 1e-4) * c_error)
    assert grid.converged.all() and grid.path == ("batched" if batched else "serial")
    assert _state(loss) == before
    with pytest.raises(InferenceError, match="outside its limits"):
        profile_grid(loss, ("a_gr", "b_gr"), [0.0, 6.0], [0.0])
    assert _state(loss) == before


@pytest.mark.slow  # 200 scans
def test_a_68_percent_profile_interval_covers_68_percent():
    """Coverage by toys: the Delta(-2 ln L) = 1 interval of a Gaussian's mean (width profiled) on 200 toys of 60
    events covers the true mean in 68.3 % of them, within three binomial errors."""
    truth = 0.4
    mu = zcache.Parameter("mu_cov", 0.0, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter("sigma_cov", 1.0, lower=0.2, upper=5.0)
    data = zcache.Data(np.zeros(60))
    loss = UnbinnedNLL(Gaussian(Space("x", -30.0, 30.0), mu, sigma), data)
    rng = np.random.default_rng(68)
    covered, n = 0, 200
    for _ in range(n):
        data.set_data(rng.normal(truth, 1.0, 60))
        lower, upper = profile_scan(loss, "mu_cov", bins=9, bound=2.0).interval(1.0)
        covered += lower <= truth <= upper
    fraction, error = covered / n, np.sqrt(0.683 * 0.317 / n)
    assert abs(fraction - 0.683) < 3 * error, (fraction, error)


def test_splined_starts_reproduce_a_cubic_in_each_held_parameter():
    """The second pass's starts: a tensor-product cubic spline through the coarse points reproduces a
    function cubic in each axis (to rounding) at any points of the grid, in any order; an axis of one
    value is carried over; a coarse point that did not converge gives no starts (NaN)."""
    from zcache.inference._scans import _coarse_values, _splined

    xs = np.linspace(-1.0, 2.0, 13)
    ys = np.array([0.5, -0.3, 0.1, 0.9, 0.2, -0.8, 0.0, 0.7, 0.4])      # unsorted

    def truth(x, y):
        return np.stack([x**3 - 2 * x * y**2 + y**2, x * y + 1.0 + 0.0 * x], axis=-1)

    cx, cy = _coarse_values(xs), _coarse_values(ys)
    assert cx.tolist() == xs[[0, 4, 8, 12]].tolist() and cy.tolist() == np.sort(ys)[[0, 4, 8]].tolist()
    assert _coarse_values(np.array([3.0, 1.0, 2.0])).tolist() == [1.0, 2.0, 3.0]   # few values: all
    gx, gy = (g.ravel() for g in np.meshgrid(cx, cy, indexing="ij"))
    points = np.stack([gx, gy], axis=1)[::-1]                           # any order
    at = np.stack([g.ravel() for g in np.meshgrid(xs, ys, indexing="ij")], axis=1)[[5, 0, 77, 40, 116, 33]]
    # cubic along x (four coarse values), quadratic along y (three): exact for this function
    out = _splined(points, truth(points[:, 0], points[:, 1]), np.ones(len(points), bool), [cx, cy], at)
    np.testing.assert_allclose(out, truth(at[:, 0], at[:, 1]), atol=1e-12)
    y0 = np.array([cy[1]])
    line = np.stack([cx, np.full(len(cx), y0[0])], axis=1)
    one = _splined(line, truth(line[:, 0], line[:, 1]), np.ones(len(cx), bool), [cx, y0],
                   np.stack([xs[:3], np.full(3, y0[0])], axis=1))
    np.testing.assert_allclose(one, truth(xs[:3], np.full(3, y0[0])), atol=1e-12)
    bad = np.ones(len(points), bool)
    bad[3] = False
    assert np.isnan(_splined(points, truth(points[:, 0], points[:, 1]), bad, [cx, cy], at)).all()


@pytest.mark.slow  # a batched program and 90 iminuit fits
def test_a_grid_fitted_in_passes_matches_iminuit_point_by_point(gauss_exp):
    """A 10 x 9 grid (unsorted values, one repeated): coarse points first, the others from splined
    starts; every point's Delta(-2 ln L) and nuisances are iminuit's (MIGRAD on the numpy NLL, the two
    parameters fixed), within the fits' bound, and every point converged in the batched program."""
    from zcache.scale import BatchedLoss

    loss, params, x = gauss_exp
    before = _state(loss)
    first = profile_scan(loss, "nsig_ge", bins=2, bound=1.0, minimizer=Minuit(tol=TIGHT))
    nsig, sigma = first.best["nsig_ge"], first.best["sigma_ge"]
    xs = nsig + 60.0 * np.array([0.0, -1.0, -0.7, 0.0, 1.0, -0.3, 0.7, 0.5, -0.5, 0.3])
    ys = sigma + 0.1 * np.linspace(-1.0, 1.0, 9)[::-1]
    calls = []
    scan_fits = BatchedLoss.scan_fits

    def spy(self, start, *args, **kwargs):
        out = scan_fits(self, start, *args, **kwargs)
        calls.append((len(start), kwargs.get("maxiter"), int(out.converged.sum())))
        return out

    BatchedLoss.scan_fits = spy
    try:
        grid = profile_grid(loss, ("nsig_ge", "sigma_ge"), xs, ys, minimizer=Minuit(tol=TIGHT))
    finally:
        BatchedLoss.scan_fits = scan_fits
    assert grid.path == "batched" and grid.converged.all() and not grid.refit.any()
    # 3 x 3 distinct coarse values (12 points: x's coarse value 0 twice), the rest in a pass of one evaluation
    assert calls[0] == (12, 200, 12) and calls[1][0] == 90 - 12 and calls[1][1] == 0
    assert sum(c[0] for c in calls[1:] if c[1] == 0) == 78
    m = _np_minuit(x, {k.removesuffix("_ge"): v for k, v in first.best.items()})
    fmin = m.fval
    for n in ("nsig", "sigma"):
        m.fixed[n] = True
    delta = np.empty((len(xs), len(ys)))
    nuisances = np.empty((len(xs), len(ys), 3))
    for i, a in enumerate(xs):
        for j, b in enumerate(ys):
            m.values["nsig"], m.values["sigma"] = a, b
            m.migrad()
            delta[i, j] = (m.fval - fmin) / 0.5
            nuisances[i, j] = [m.values[n] for n in ("mu", "lam", "nbkg")]
    np.testing.assert_allclose(grid.delta, delta, atol=5e-5)
    errors = np.array([m.errors[n] for n in ("mu", "lam", "nbkg")])
    for k, n in enumerate(("mu_ge", "lam_ge", "nbkg_ge")):
        np.testing.assert_allclose(grid.nuisances[n], nuisances[..., k], atol=0.01 * errors[k])
    assert _state(loss) == before
