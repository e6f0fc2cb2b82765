"""zcache.minimize.Minuit: fits, gradients, limits, errors, partial recompute."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
from helpers import GRAPH_MODES, HI, LIMITS, LO, NAMES, np_extended_nll, slow_modes

import zcache
from zcache.exceptions import FitError
from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
from zcache.minimize import FitResult, Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf

SPACE = Space("x", -8.0, 8.0)  # wide: the truncation is negligible, so the MLE is the sample mean/std


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    return np.random.default_rng(11).normal(0.3, 1.2, 3000)


def _gauss_fit(sample: np.ndarray, tag: str):
    mu = zcache.Parameter(f"mu_{tag}", 1.0, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter(f"sigma_{tag}", 2.0, lower=0.1, upper=5.0)
    return mu, sigma, UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample, obs="x"))


#: the gradient kinds of test_gaussian_fit_finds_the_analytic_mle: id -> (use_gradient, autograd)
GRADIENT_KINDS = {"autodiff": (True, True), "zcache-numerical": (True, False), "minuit-numerical": (False, True)}


# 9 combinations of mode and gradient: the fast loop runs graph-autodiff (eager, auto and the numerical gradients
# are slow); make test keeps every mode and every gradient kind once (graph-autodiff, eager-zcache-numerical,
# eager-minuit-numerical, auto-autodiff, auto-minuit-numerical), the other four are exhaustive
@pytest.mark.parametrize(("graph_mode", "use_gradient", "autograd"), [
    pytest.param(GRAPH_MODES[m], *GRADIENT_KINDS[g], id=f"{m}-{g}", marks=[
        *([pytest.mark.slow] if m != "graph" or g != "autodiff" else []),
        *([pytest.mark.exhaustive] if (m, g) in {("graph", "zcache-numerical"), ("eager", "autodiff"),
                                                 ("auto", "zcache-numerical"), ("graph", "minuit-numerical")} else [])])
    for m in GRAPH_MODES for g in GRADIENT_KINDS], indirect=["graph_mode"])
def test_gaussian_fit_finds_the_analytic_mle(sample, graph_mode, use_gradient, autograd):
    """mu = mean, sigma = std (ddof 0), errors sigma/sqrt(n) and sigma/sqrt(2n), with every gradient kind."""
    mu, sigma, loss = _gauss_fit(sample, "g")
    with zcache.set_autograd_mode(autograd):
        result = Minuit(use_gradient=use_gradient, tol=0.01).minimize(loss)
    n, mean, std = len(sample), sample.mean(), sample.std()
    assert result.valid
    assert result.values["mu_g"] == pytest.approx(mean, abs=2e-4)
    assert result.values["sigma_g"] == pytest.approx(std, abs=2e-4)
    assert result.errors["mu_g"] == pytest.approx(std / np.sqrt(n), rel=0.02)
    assert result.errors["sigma_g"] == pytest.approx(std / np.sqrt(2 * n), rel=0.02)
    # parameters are updated in place; fmin is the loss there, without offset
    assert float(mu.value()) == result.values["mu_g"]
    assert result.fmin == pytest.approx(float(loss.value()), rel=1e-12)
    assert result.covariance.shape == (2, 2)
    assert (result.ngrad > 0) is use_gradient


# eager is exhaustive: make test keeps the graph (and auto) modes of the traced fit
@slow_modes("graph_mode", "eager", "graph", exhaustive=("eager",))
def test_extended_fit_recovers_yields(graph_mode):
    """Extended Gauss + Exp: the yields sum to the number of events at the minimum (a property of the extended MLE)."""
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu_e", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma_e", 0.5, lower=0.1, upper=2.0)
    lam = zcache.Parameter("lam_e", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter("nsig_e", 500.0, lower=0.0, upper=1e4)
    nbkg = zcache.Parameter("nbkg_e", 1500.0, lower=0.0, upper=1e4)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    zcache.models.set_seed(5)
    data = model.sample(2000)
    zcache.set_values([mu, sigma, nsig, nbkg], [5.3, 0.7, 800.0, 1000.0])
    result = Minuit().minimize(ExtendedUnbinnedNLL(model, data))
    assert result.valid
    assert result.values["nsig_e"] + result.values["nbkg_e"] == pytest.approx(2000.0, rel=1e-4)
    assert abs(result.values["mu_e"] - 5.0) < 4 * result.errors["mu_e"]
    assert abs(result.values["nsig_e"] - 500.0) < 4 * result.errors["nsig_e"]
    assert "nsig_e" in str(result) and "valid=True" in str(result)


@pytest.mark.slow  # 2.8 s: a fit
def test_fit_respects_limits(sample):
    """A minimum beyond a limit ends at the limit, with no out-of-limit value ever set."""
    mu = zcache.Parameter("mu_l", 0.9, lower=0.8, upper=3.0)
    sigma = zcache.Parameter("sigma_l", 1.0, lower=0.1, upper=5.0)
    loss = UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample))
    result = Minuit().minimize(loss)
    assert 0.8 <= result.values["mu_l"] < 0.801
    assert 0.8 <= float(mu.value()) <= 3.0


@pytest.mark.slow  # 2.9 s: a fit
def test_start_at_a_limit_is_fine(sample):
    mu = zcache.Parameter("mu_s", 3.0, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter("sigma_s", 1.0, lower=0.1, upper=5.0)
    result = Minuit().minimize(UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample)))
    assert result.valid and result.values["mu_s"] == pytest.approx(sample.mean(), abs=1e-3)


def test_fit_errors_are_named_and_leave_parameters_unchanged(sample):
    mu, sigma, loss = _gauss_fit(sample, "err")
    with pytest.raises(FitError, match="No floating"):
        Minuit().minimize(loss, params=[])
    twin = zcache.Parameter("mu_err", 0.0)
    with pytest.raises(FitError, match="unique"):
        Minuit().minimize(loss, params=[mu, twin])
    with pytest.raises(TypeError):
        Minuit().minimize("not a loss")
    with pytest.raises(ValueError):
        Minuit(strategy=3)
    with pytest.raises(ValueError):
        Minuit(tol=0.0)
    with pytest.raises(ValueError, match="structured_hessian"):
        Minuit(structured_hessian="yes")
    # a model that is zero at an event: the loss is infinite at the start
    narrow = zcache.Parameter("sigma_narrow", 0.01, lower=0.001, upper=1.0)
    far = zcache.Parameter("mu_far", -7.0, lower=-8.0, upper=8.0)
    bad = UnbinnedNLL(Gaussian(SPACE, far, narrow), zcache.Data(np.array([7.9, 0.0])))
    with pytest.raises(FitError, match="start"):
        Minuit().minimize(bad)
    assert float(far.value()) == -7.0 and float(narrow.value()) == 0.01


@slow_modes("graph_mode", "graph")  # graph: 2.3 s
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_minuit_numerical_gradient_recomputes_only_the_moved_component(graph_mode):
    """Sum of K components, one floating mean each: a step moving one mean recomputes one component."""
    k, space = 4, Space("x", -10.0, 10.0)
    mus = [zcache.Parameter(f"mu_k{i}", -6.0 + 4.0 * i, lower=-9.0, upper=9.0) for i in range(k)]
    pdfs = [Gaussian(space, m, 0.8) for m in mus]
    model = SumPdf(pdfs, fracs=[1.0 / k] * (k - 1))
    data = zcache.Data(np.concatenate([np.random.default_rng(i).normal(-6.0 + 4.0 * i, 0.8, 300) for i in range(k)]))
    loss = UnbinnedNLL(model, data)
    zcache.precompute(loss, keep_floating=True)
    caches = [p._zcache_caches[next(key for key in p._zcache_caches if key[0].endswith("_cached_pdf"))] for p in pdfs]
    x0 = np.array([float(m.value()) for m in mus])
    loss.value_at(x0, mus)
    before = [c.stats["misses"] for c in caches]
    x1 = x0.copy()
    x1[2] += 1e-3
    loss.value_at(x1, mus)
    assert [c.stats["misses"] - b for c, b in zip(caches, before)] == [0, 0, 1, 0]

    for c in caches:
        c.reset_stats()
    zcache.set_values(mus, x0 + 0.2)
    result = Minuit(use_gradient=False, hesse=False).minimize(loss)  # MIGRAD's calls only
    assert result.valid
    misses = sum(c.stats["misses"] for c in caches)
    # uncached: every call computes all K components; here mostly one (plus the one restored)
    assert misses < 0.45 * k * result.nfcn, (misses, result.nfcn)


@pytest.mark.slow  # 5.5 s: a fit (test_results checks the fields of a fit fast)
def test_fit_result_fields(sample):
    mu, sigma, loss = _gauss_fit(sample, "f")
    result = Minuit(hesse=False).minimize(loss)
    assert isinstance(result, FitResult)
    assert result.covariance is None and np.isnan(result.errors["mu_f"])
    assert result.nfcn > 0 and result.time > 0 and result.edm < 0.002
    assert result.params == [mu, sigma]
    assert result.minuit.valid and "Minuit(" in repr(Minuit())


# eager is exhaustive: make test keeps the graph (and auto) modes of the traced fits
@slow_modes("graph_mode", "eager", "graph", exhaustive=("eager",))
def test_scipy_agrees_with_minuit_and_the_analytic_mle(sample, graph_mode):
    """trust-constr with zcache's gradient and Hessian finds the same minimum and errors as Minuit."""
    from zcache.minimize import Scipy

    mu, sigma, loss = _gauss_fit(sample, "sp")
    result = Scipy().minimize(loss)
    n, mean, std = len(sample), sample.mean(), sample.std()
    assert result.valid and result.ngrad > 0 and result.nhessian >= 2
    assert result.values["mu_sp"] == pytest.approx(mean, abs=1e-5)
    assert result.values["sigma_sp"] == pytest.approx(std, abs=1e-5)
    assert result.errors["mu_sp"] == pytest.approx(std / np.sqrt(n), rel=1e-3)
    assert result.errors["sigma_sp"] == pytest.approx(std / np.sqrt(2 * n), rel=1e-3)
    assert float(mu.value()) == result.values["mu_sp"]
    assert result.edm < 1e-6
    zcache.set_values([mu, sigma], [1.0, 2.0])
    reference = Minuit(tol=0.001).minimize(loss)
    for name in ("mu_sp", "sigma_sp"):
        assert result.values[name] == pytest.approx(reference.values[name], abs=0.01 * reference.errors[name])
        assert result.errors[name] == pytest.approx(reference.errors[name], rel=1e-3)


@pytest.mark.slow  # 2 s
def test_scipy_respects_limits(sample):
    from zcache.minimize import Scipy

    mu = zcache.Parameter("mu_spl", 0.9, lower=0.8, upper=3.0)
    sigma = zcache.Parameter("sigma_spl", 1.0, lower=0.1, upper=5.0)
    result = Scipy().minimize(UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample)))
    assert 0.8 <= result.values["mu_spl"] < 0.8 + 1e-5  # interior point: at the limit within tolerance
    with pytest.raises(FitError, match="No floating"):
        Scipy().minimize(UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample)), params=[])
    assert "trust-constr" in repr(Scipy())
    lbfgs = Scipy(method="L-BFGS-B").minimize(UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample)))
    assert 0.8 <= lbfgs.values["mu_spl"] < 0.8 + 1e-5


# == regression tests: floating flags, MINOS / profiles, offsets ==============================
# Every reference below is independent of zcache: a numpy NLL of the same data and model,
# minimized (and MINOS-ed) by iminuit directly.
import iminuit  # noqa: E402
import scipy.stats  # noqa: E402

# (LO, HI, NAMES, LIMITS and np_extended_nll: from helpers, shared with test_properties_fit.py)
TRUTH = {"mu": 5.0, "sigma": 0.6, "lam": -0.3, "nsig": 400.0, "nbkg": 800.0}


def np_sample(seed, nsig=400, nbkg=800):
    rng = np.random.default_rng(seed)
    t = TRUTH
    sig = scipy.stats.truncnorm.rvs((LO - t["mu"]) / t["sigma"], (HI - t["mu"]) / t["sigma"], loc=t["mu"],
                                    scale=t["sigma"], size=nsig, random_state=rng)
    u = rng.uniform(size=nbkg)
    bkg = LO + np.log1p(u * np.expm1(t["lam"] * (HI - LO))) / t["lam"]
    return rng.permutation(np.concatenate([sig, bkg]))


def zc_model(tag, data, start=None):
    """The zcache twin of np_extended_nll: parameters (by short name), loss."""
    start = {**TRUTH, **(start or {})}
    space = Space("x", LO, HI)
    p = {n: zcache.Parameter(f"{n}_{tag}", start[n], *LIMITS[n]) for n in NAMES}
    model = SumPdf([Gaussian(space, p["mu"], p["sigma"]), Exponential(space, p["lam"])], yields=[p["nsig"], p["nbkg"]])
    return p, ExtendedUnbinnedNLL(model, zcache.Data(data, obs="x"))


def np_minuit(data, values, fixed=(), tol=1e-4):
    """iminuit on the numpy NLL, started at ``values`` (short names), with ``fixed`` fixed."""
    def fcn(v):
        return np_extended_nll(data, *v)

    m = iminuit.Minuit(fcn, [values[n] for n in NAMES], name=NAMES)
    m.errordef = 0.5
    m.limits = [LIMITS[n] for n in NAMES]
    m.tol = tol
    m.strategy = 2
    for n in fixed:
        m.fixed[n] = True
    m.migrad()
    m.hesse()
    assert m.valid
    return m


def assert_matches(result, ref, p, rel_error=1e-3):
    """Fitted values within rel_error of the reference's errors; errors within 1 %."""
    for n, q in p.items():
        if q.name in result.values:
            assert result.values[q.name] == pytest.approx(ref.values[n], abs=rel_error * ref.errors[n]), n
            assert result.errors[q.name] == pytest.approx(ref.errors[n], rel=1e-2), n
        else:
            assert ref.fixed[n], n


@pytest.fixture(scope="module")
def ext_sample():
    return np_sample(21)


def current_values(p):
    return {n: q._current() for n, q in p.items()}


@pytest.mark.slow  # 2.6 s
def test_floating_false_after_building_the_loss_is_not_fitted(ext_sample):
    """Regression: `param.floating = False` after the loss was built was ignored by Minuit."""
    p, loss = zc_model("ff", ext_sample, start={"mu": 5.2, "sigma": 0.7})
    p["lam"].set_value(-0.25)  # fixed at a value that is not the MLE: a fit would move it
    p["lam"].floating = False
    assert p["lam"] not in loss.params
    result = Minuit(tol=1e-4, strategy=2).minimize(loss)
    assert result.valid and p["lam"].name not in result.values
    assert p["lam"]._current() == -0.25
    start = {**TRUTH, "mu": 5.2, "sigma": 0.7, "lam": -0.25}
    assert_matches(result, np_minuit(ext_sample, start, fixed=["lam"]), p)
    # precompute and Minuit agree on the floating set
    assert set(result.precompute.floating) == {q.name for q in loss.params} == set(result.values)
    assert set(zcache.precompute(loss).floating) == set(result.values)

    p["lam"].floating = True  # back: fitted again
    assert p["lam"] in loss.params
    result = Minuit(tol=1e-4, strategy=2).minimize(loss)
    assert p["lam"].name in result.values and p["lam"]._current() != -0.25
    assert set(result.precompute.floating) == set(result.values) == {q.name for q in p.values()}
    reference = np_minuit(ext_sample, {n: result.values[q.name] for n, q in p.items()})
    assert_matches(result, reference, p)


@pytest.mark.slow  # 6 s
def test_floating_switching_between_fits_matches_a_fresh_loss(ext_sample):
    """Regression: fixed <-> floating between fits on one loss gives what a freshly built loss gives."""
    p, loss = zc_model("sw", ext_sample)
    starts = {**TRUTH, "mu": 5.1, "sigma": 0.65, "lam": -0.28}
    fresh_fits = {}
    for fixed in (("lam",), (), ("lam",)):
        zcache.set_values(list(p.values()), [starts[n] for n in NAMES])
        for n, q in p.items():
            q.floating = n not in fixed
        result = Minuit(tol=1e-4, strategy=2).minimize(loss)
        if fixed not in fresh_fits:
            fresh_p, fresh = zc_model(f"sw_fresh{len(fresh_fits)}", ext_sample, start=starts)
            for n in fixed:
                fresh_p[n].floating = False
            fresh_fits[fixed] = fresh_p, Minuit(tol=1e-4, strategy=2).minimize(fresh)
        fresh_p, fresh_result = fresh_fits[fixed]
        assert set(result.values) == {p[n].name for n in NAMES if n not in fixed}
        for n in NAMES:
            if n in fixed:
                assert p[n]._current() == starts[n]
            else:
                assert result.values[p[n].name] == pytest.approx(fresh_result.values[fresh_p[n].name],
                                                                 abs=1e-3 * fresh_result.errors[fresh_p[n].name])
        assert result.fmin == pytest.approx(fresh_result.fmin, abs=1e-6)


def test_simultaneous_loss_follows_floating_flags(ext_sample):
    """A SimultaneousLoss lists the floating parameters of its parts now, shared ones once."""
    p, loss = zc_model("sim", ext_sample)
    q, other = zc_model("sim2", np_sample(22))
    total = loss + other
    assert len(total.params) == 10
    p["mu"].floating = False
    q["nsig"].floating = False
    assert [x.name for x in total.params] == [x.name for x in [*loss.params, *other.params]]
    assert p["mu"] not in total.params and q["nsig"] not in total.params and len(total.params) == 8
    assert len(total.get_params(floating=None)) == 10


#: MINOS finds its crossings to a precision set by the EDM tolerance: with 1e-6 both zcache's and the
#: numpy reference's intervals are within 2e-5 (relative) of the exact crossing (brentq on a profile).
TIGHT = 1e-6


def _np_minos(data, start, fixed=(), cl=None):
    ref = np_minuit(data, start, fixed=fixed, tol=TIGHT)
    ref.minos(cl=cl)
    return ref


@pytest.mark.slow  # 1.6 s
def test_minos_matches_numpy_and_restores_parameters(ext_sample):
    """Regression: after MINOS the parameters held the last point Minuit evaluated."""
    p, loss = zc_model("mn", ext_sample, start={"mu": 5.1, "sigma": 0.7})
    result = Minuit(tol=TIGHT, strategy=2).minimize(loss)
    before = current_values(p)
    minos = result.minos()
    assert current_values(p) == before  # exactly: loss.value() and plots see the fit's values
    assert float(loss.value()) == pytest.approx(result.fmin, rel=1e-14)
    ref = _np_minos(ext_sample, {**TRUTH, "mu": 5.1, "sigma": 0.7})
    for n, q in p.items():
        lower, upper, valid = minos[q.name]
        assert valid
        assert lower == pytest.approx(ref.merrors[n].lower, rel=1e-4), n
        assert upper == pytest.approx(ref.merrors[n].upper, rel=1e-4), n
    # a subset and another confidence level
    two = result.minos(p["mu"].name, cl=2.0)
    assert list(two) == [p["mu"].name] and current_values(p) == before
    ref2 = _np_minos(ext_sample, {**TRUTH, "mu": 5.1, "sigma": 0.7}, cl=2.0)
    assert two[p["mu"].name].upper == pytest.approx(ref2.merrors["mu"].upper, rel=1e-4)
    with pytest.raises(FitError, match="not fitted"):
        result.minos("nonexistent")


@pytest.mark.slow  # 7 s
def test_direct_calls_on_result_minuit_restore_parameters(ext_sample):
    """Regression: result.minuit.minos() / mnprofile() / migrad() left the parameters at Minuit's last point."""
    p, loss = zc_model("dm", ext_sample, start={"mu": 5.1})
    result = Minuit(tol=TIGHT, strategy=2).minimize(loss)
    before = current_values(p)
    m = result.minuit
    assert isinstance(m, iminuit.Minuit)
    m.minos()
    assert current_values(p) == before
    m.mnprofile(p["mu"].name, size=5)
    m.profile(p["sigma"].name, size=5)
    m.contour(p["mu"].name, p["sigma"].name, size=5)
    m.hesse()
    m.migrad()
    assert current_values(p) == before
    np.testing.assert_allclose(float(loss.value()), np_extended_nll(ext_sample, *before.values()), rtol=1e-10)

    # an exception inside Minuit's loop restores too
    calls, value_at = [0], loss.value_at

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] > 5:
            raise RuntimeError("boom")
        return value_at(*args, **kwargs)

    loss.value_at = failing
    try:
        with pytest.raises(RuntimeError, match="boom"):
            m.mnprofile(p["mu"].name, size=5)
    finally:
        del loss.value_at
    assert calls[0] > 5 and current_values(p) == before


@pytest.mark.slow  # 2 s
def test_profile_matches_numpy_and_restores_parameters(ext_sample):
    """FitResult.profile: the scan is the numpy NLL difference; the profile matches iminuit's on numpy."""
    p, loss = zc_model("pr", ext_sample)
    result = Minuit(tol=1e-4, strategy=2).minimize(loss)
    before = current_values(p)
    name = p["mu"].name
    grid, delta, valid = result.profile(name, bins=7, bound=2.0, minimize=False)
    assert current_values(p) == before and valid.all() and len(grid) == 7
    # the scan holds the others at the minimum of result.minuit (a MIGRAD from the fit's: 1e-3 sigma)
    best = [result.minuit.values[p[n].name] for n in NAMES]
    assert best == pytest.approx([before[n] for n in NAMES], rel=1e-5)
    fmin = np_extended_nll(ext_sample, *best)
    expected = [np_extended_nll(ext_sample, g, *best[1:]) - fmin for g in grid]
    np.testing.assert_allclose(delta, expected, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(grid[[0, -1]], before["mu"] + np.array([-2.0, 2.0]) * result.errors[name], rtol=1e-12)

    grid, delta, valid = result.profile(name, bins=5, bound=(4.9, 5.1))
    assert current_values(p) == before and valid.all()
    ref = np_minuit(ext_sample, before)
    rx, ry, _ = ref.mnprofile("mu", size=5, bound=(4.9, 5.1))
    np.testing.assert_allclose(grid, rx, rtol=1e-12)
    np.testing.assert_allclose(delta, ry - ref.fval, atol=1e-4)
    assert delta.min() > -1e-6  # the minimum is the minimum
    # a bound beyond a limit is clipped into it (the fit clips Minuit's points there anyway)
    grid, _, _ = result.profile(p["sigma"].name, bins=3, bound=(0.0, 0.9))
    assert grid[0] == 0.1 and current_values(p) == before


@pytest.mark.slow  # 2.8 s
def test_second_fit_does_not_change_minos_of_the_first(ext_sample):
    """Regression: a second fit changed loss.offset, and MINOS on the first result came back wrong.

    MINOS on result 1 must run with every parameter (fixed ones too) and the data as at fit 1.
    """
    p, loss = zc_model("of", ext_sample, start={"mu": 5.1})
    p["lam"].floating = False
    first = Minuit(tol=TIGHT, strategy=2).minimize(loss)
    immediate = {k: tuple(v) for k, v in first.minos().items()}
    offset = loss.offset

    # second fit: another fixed value, another floating set, other data, other start
    p["lam"].set_value(-0.4)
    p["sigma"].floating = False
    zcache.set_values([p["mu"], p["nsig"]], [4.8, 600.0])
    second = Minuit(tol=TIGHT, strategy=2).minimize(loss)
    assert loss.offset == offset  # fits never change the loss's own offset
    loss.data.set_data(np_sample(99))
    after_second = current_values(p)

    again = first.minos()
    assert current_values(p) == after_second  # restored, fixed and floating
    np.testing.assert_array_equal(loss.data.numpy(), np_sample(99))
    for name, (lower, upper, valid) in again.items():
        assert valid
        assert lower == pytest.approx(immediate[name][0], rel=1e-6)
        assert upper == pytest.approx(immediate[name][1], rel=1e-6)
    # and both are the numpy MINOS of fit 1's problem
    start = {**TRUTH, "mu": 5.1}
    ref = _np_minos(ext_sample, start, fixed=["lam"])
    for n, q in p.items():
        if n != "lam":
            assert again[q.name].lower == pytest.approx(ref.merrors[n].lower, rel=1e-4), n
            assert again[q.name].upper == pytest.approx(ref.merrors[n].upper, rel=1e-4), n
    # the second result's MINOS sees its own state
    assert p["sigma"].name not in second.minos()
    assert current_values(p) == after_second


@pytest.mark.slow  # 3.7 s: a scipy fit
def test_minos_and_profile_need_a_minuit_result(sample):
    from zcache.minimize import Scipy

    mu, sigma, loss = _gauss_fit(sample, "sc")
    result = Scipy(hesse=False).minimize(loss)
    with pytest.raises(FitError, match="Minuit"):
        result.minos()
    with pytest.raises(FitError, match="Minuit"):
        result.profile("mu_sc")


@pytest.mark.slow  # 1.7 s
def test_errors_are_hesse_errors_not_migrads_estimate():
    """Regression (found by the FitMachine): Minuit skipped HESSE when MIGRAD flagged its own
    covariance accurate; that variable-metric estimate was 4 % (mu) and 9 % (sigma) off the
    HESSE errors of the same fit of a numpy NLL (checked against numdifftools)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import numdifftools as nd
    import test_properties_fit as fitworld

    machine = fitworld.FitMachine()
    machine.new_data(nbkg=394, nsig=166, seed=436)
    for use_gradient in (False, True):
        zcache.set_values([machine.p[n] for n in fitworld.NAMES], [fitworld.TRUTH[n] for n in fitworld.NAMES])
        result = Minuit(tol=fitworld.TOL, precompute=False, use_gradient=use_gradient).minimize(machine.loss)
        best = np.array([result.values[machine.p[n].name] for n in fitworld.NAMES])
        # numdifftools' adaptive steps: a fixed absolute step (1e-4) on the yields (~400, errors ~20) gave
        # Hessians whose errors moved by 1.5 % between two minima 1e-7 errors apart (rounding of the NLL's sum);
        # adaptive and relative steps agree to 1e-7 there
        hess = nd.Hessian(lambda v: np_extended_nll(machine.x, *v))(best)
        want = np.sqrt(np.diag(np.linalg.inv(hess)))  # errordef 1/2: C = 2 * 0.5 * H^-1
        got = np.array([result.errors[machine.p[n].name] for n in fitworld.NAMES])
        np.testing.assert_allclose(got, want, rtol=1e-3)


# == weighted fits ==============================================================================
def _weighted_setup(seed=11, n=3000):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.3, 1.2, n)
    x = x[(x > -4.0) & (x < 4.0)]
    return x, rng.uniform(0.2, 2.0, x.size)


def _np_logp(x, p):
    norm = scipy.stats.norm.cdf(4.0, p[0], p[1]) - scipy.stats.norm.cdf(-4.0, p[0], p[1])
    return scipy.stats.norm.logpdf(x, p[0], p[1]) - np.log(norm)


# 6 combinations: make test keeps asymptotic-Minuit, sumw2-Scipy, None-Minuit and None-Scipy (every correction and
# minimizer); asymptotic-Scipy and sumw2-Minuit are exhaustive
@pytest.mark.parametrize(("weightcorr", "minimizer"), [
    pytest.param(w, m, id=f"{w}-{m}", marks=pytest.mark.exhaustive if (w, m) in {
        ("asymptotic", "Scipy"), ("sumw2", "Minuit")} else ())
    for w in ("asymptotic", "sumw2", None) for m in ("Minuit", "Scipy")])
@pytest.mark.slow  # a fit each
def test_weighted_fit_errors_match_numpy_reference(weightcorr, minimizer):
    """Values equal iminuit on a numpy weighted NLL; corrected errors equal the sandwich formulas
    computed with numdifftools (asymptotic: H^-1 (sum w^2 g g^T) H^-1; sumw2: H^-1 H_w2 H^-1)."""
    import numdifftools as nd

    x, w = _weighted_setup()
    mu = zcache.Parameter("mu_wf", 0.0, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_wf", 1.0, lower=0.1, upper=5.0)
    loss = UnbinnedNLL(Gaussian(Space("x", -4.0, 4.0), mu, sigma), zcache.Data(x, weights=w))
    from zcache.minimize import Scipy

    result = (Minuit if minimizer == "Minuit" else Scipy)(weightcorr=weightcorr).minimize(loss)

    def nll(p):
        return -np.sum(w * _np_logp(x, p))

    m = iminuit.Minuit(nll, [0.0, 1.0])
    m.errordef = 0.5
    m.migrad()
    best = np.array(m.values)
    assert result.valid and result.weightcorr == weightcorr
    hinv = np.linalg.inv(nd.Hessian(nll)(best))
    if weightcorr == "asymptotic":
        jac = nd.Jacobian(lambda p: _np_logp(x, p))(best)
        expected = hinv @ ((jac * (w**2)[:, None]).T @ jac) @ hinv
    elif weightcorr == "sumw2":
        expected = hinv @ nd.Hessian(lambda p: -np.sum(w**2 * _np_logp(x, p)))(best) @ hinv
    else:
        expected = hinv
    errors = np.sqrt(np.diag(expected))
    got = np.array([result.errors["mu_wf"], result.errors["sigma_wf"]])
    np.testing.assert_allclose([result.values["mu_wf"], result.values["sigma_wf"]], best, atol=1e-3 * errors.min())
    np.testing.assert_allclose(got, errors, rtol=2e-3)
    np.testing.assert_allclose(result.covariance, expected, rtol=5e-3, atol=1e-3 * errors.min() ** 2)
    if weightcorr is not None:  # weights around 1.1 with spread: the correction is not small
        assert abs(got[0] / np.sqrt(hinv[0, 0]) - 1.0) > 0.05
    assert result.to_dict()["weightcorr"] == weightcorr


@pytest.mark.slow  # 6 s: two fits
def test_constant_weights_sumw2_gives_the_unweighted_errors():
    """w = c for every event: H_w = cH and H_w2 = c^2 H, so sumw2 gives exactly H^-1 of the unweighted fit."""
    x, _ = _weighted_setup(seed=12, n=2000)
    mu = zcache.Parameter("mu_cw", 0.0, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_cw", 1.0, lower=0.1, upper=5.0)
    space = Space("x", -4.0, 4.0)
    plain = Minuit().minimize(UnbinnedNLL(Gaussian(space, mu, sigma), zcache.Data(x)))
    mu.set_value(0.0), sigma.set_value(1.0)
    weighted = Minuit(weightcorr="sumw2").minimize(
        UnbinnedNLL(Gaussian(space, mu, sigma), zcache.Data(x, weights=np.full(x.size, 3.0))))
    assert plain.weightcorr is None
    for name in ("mu_cw", "sigma_cw"):
        assert weighted.values[name] == pytest.approx(plain.values[name], abs=1e-3 * plain.errors[name])
        assert weighted.errors[name] == pytest.approx(plain.errors[name], rel=1e-3)


@pytest.mark.slow  # 4.6 s: a fit
def test_weighted_extended_fit_with_constraint_asymptotic():
    """Extended weighted fit with a Gaussian constraint: D gains the constraint's Hessian."""
    import numdifftools as nd

    from zcache.loss import GaussianConstraint

    x, w = _weighted_setup(seed=13, n=1500)
    mu = zcache.Parameter("mu_xw", 0.0, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_xw", 1.0, lower=0.1, upper=5.0)
    nu = zcache.Parameter("nu_xw", 1000.0, lower=1.0, upper=1e5)
    con = GaussianConstraint([sigma], [1.2], [0.05])
    loss = ExtendedUnbinnedNLL(Gaussian(Space("x", -4.0, 4.0), mu, sigma, extended=nu), zcache.Data(x, weights=w),
                               constraints=[con])
    result = Minuit().minimize(loss)

    def nll(p):
        return -np.sum(w * _np_logp(x, p[:2])) + p[2] - np.sum(w) * np.log(p[2]) + 0.5 * ((p[1] - 1.2) / 0.05) ** 2

    best = np.array([result.values[n] for n in ("mu_xw", "sigma_xw", "nu_xw")])
    hinv = np.linalg.inv(nd.Hessian(nll)(best))
    jac = nd.Jacobian(lambda p: _np_logp(x, p[:2]) + np.log(p[2]))(best)
    d = (jac * (w**2)[:, None]).T @ jac
    d[1, 1] += 1.0 / 0.05**2
    expected = np.sqrt(np.diag(hinv @ d @ hinv))
    assert result.weightcorr == "asymptotic"
    np.testing.assert_allclose([result.errors[n] for n in ("mu_xw", "sigma_xw", "nu_xw")], expected, rtol=2e-3)


def test_unknown_weightcorr_is_refused():
    from zcache.minimize import Scipy

    with pytest.raises(ValueError, match="weightcorr"):
        Minuit(weightcorr="bootstrap")
    with pytest.raises(ValueError, match="weightcorr"):
        Scipy(weightcorr="sumw3")


@pytest.mark.slow  # 5.6 s: fits
def test_weights_all_one_need_no_correction():
    """A weighted dataset whose weights are all 1 (a toy drawn into it) gets plain HESSE errors."""
    x, _ = _weighted_setup(seed=14, n=1000)
    mu = zcache.Parameter("mu_w1", 0.0, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_w1", 1.0, lower=0.1, upper=5.0)
    space = Space("x", -4.0, 4.0)
    ones = Minuit().minimize(UnbinnedNLL(Gaussian(space, mu, sigma), zcache.Data(x, weights=np.ones(x.size))))
    mu.set_value(0.0), sigma.set_value(1.0)
    plain = Minuit().minimize(UnbinnedNLL(Gaussian(space, mu, sigma), zcache.Data(x)))
    assert ones.weightcorr is None
    assert ones.errors == pytest.approx(plain.errors, rel=1e-6)


@pytest.mark.slow  # 5 s: fits
def test_minuit_computes_each_gradient_and_hessian_once(ext_sample):
    """During MIGRAD + HESSE a gradient or Hessian at a point already evaluated is not recomputed.

    Counted on the loss's own calls; the fit still matches the numpy reference, and after the
    fit the kept values are gone: the gradient function of ``result.minuit`` computes on the
    data the loss holds now.
    """
    p, loss = zc_model("once", ext_sample, start={"mu": 5.3, "sigma": 0.7, "nsig": 450.0})
    calls = {"value": 0, "value_gradient": 0, "hessian": 0}
    for name in calls:
        original = getattr(loss, f"{name}_at")

        def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr(loss, f"{name}_at", counted)
    with zcache.set_graph_mode(True):
        result = Minuit(tol=1e-4, compiled=False).minimize(loss)  # MIGRAD's own call pattern
    assert result.valid and result.nhessian >= 2 and result.ngrad >= 2
    assert_matches(result, np_minuit(ext_sample, TRUTH), p)
    # every value call also gives the gradient; the first one (the start) sets the offset
    assert calls["value"] == 0
    assert calls["value_gradient"] == result.nfcn
    assert calls["hessian"] == result.nhessian - 1  # HESSE's Hessian is MIGRAD's last one
    best = np.array([result.values[q.name] for q in loss.params])
    other = np_sample(22)
    loss.datasets()[0].set_data(other)
    expected = loss.value_gradient_at(best, offset=0.0)[1].numpy()
    assert np.allclose(result.minuit.grad(best), expected, rtol=1e-12)
    assert not np.allclose(result.minuit.grad(best), 0.0, atol=1e-3)


# == fits at limits (issue 23) ====================================================================
def _background_only(tag: str, nsig_upper: float):
    """~200 background-only events; extended Gauss + Exp with nsig limited at 0 and sigma constrained."""
    from zcache.loss import GaussianConstraint

    rng = np.random.default_rng(3)
    x = LO - np.log1p(-rng.uniform(size=200) * -np.expm1(-0.3 * (HI - LO))) / 0.3
    mu = zcache.Parameter(f"mu_{tag}", 5.0, floating=False)
    sigma = zcache.Parameter(f"sigma_{tag}", 0.5, lower=0.1, upper=2.0)
    lam = zcache.Parameter(f"lam_{tag}", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter(f"nsig_{tag}", 10.0, lower=0.0, upper=nsig_upper)
    nbkg = zcache.Parameter(f"nbkg_{tag}", 190.0, lower=0.0, upper=1e4)
    space = Space("x", LO, HI)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x, obs=space),
                               constraints=[GaussianConstraint([sigma], [0.5], [0.05])])

    def nll(p):  # sigma, lam, nsig, nbkg: numpy only
        return np_extended_nll(x, 5.0, *p) + 0.5 * ((p[0] - 0.5) / 0.05) ** 2

    return loss, [sigma, lam, nsig, nbkg], nll


# eager and jit are exhaustive: make test keeps both cases in graph mode
@pytest.mark.parametrize(("mode", "nsig_upper"), [
    pytest.param(m, u, id=f"{m}-{i}", marks=() if m == "graph" else pytest.mark.exhaustive)
    for m in ("graph", "eager", "jit") for u, i in ((1e3, "near-limit"), (1e6, "at-limit"))])
@pytest.mark.slow  # a fit each
def test_yield_fitted_at_its_lower_limit_is_a_valid_fit(nsig_upper, mode):
    """Issue 23.1: a yield that ends at its limit 0 gives a valid fit with finite errors, as iminuit does.

    Minuit2 (iminuit 2.33) maps a user's Hessian onto a limited parameter without the term
    g x''(z) of its bound transform, so MIGRAD judged such a minimum "ABOVE EDM threshold". The
    minimum must equal iminuit's on a numpy NLL, and the errors are the curvature of the loss
    in the parameters themselves (iminuit's HESSE of the numpy NLL without limits, there).
    """
    import iminuit
    import numdifftools as nd

    loss, params, nll = _background_only(f"lim{int(np.log10(nsig_upper))}{mode}", nsig_upper)
    with zcache.set_jit_mode(mode == "jit"), zcache.set_graph_mode(mode != "eager"):
        result = Minuit().minimize(loss)
    ref = iminuit.Minuit(nll, [0.5, -0.3, 10.0, 190.0])
    ref.errordef = 0.5
    ref.limits = [(0.1, 2.0), (-2.0, -0.01), (0.0, nsig_upper), (0.0, 1e4)]
    ref.migrad()
    assert ref.valid and result.valid, result
    best = np.array([result.values[p.name] for p in params])
    assert nll(best) == pytest.approx(ref.fval, abs=2e-5)  # the same minimum
    assert best[2] < 1e-3  # nsig at its limit
    errors = np.array([result.errors[p.name] for p in params])
    assert np.all(np.isfinite(errors))
    # numdifftools on the numpy NLL in units of the errors (so one step size suits all four)
    scaled = nd.Hessian(lambda u: nll(best + u * errors))(np.zeros(4)) / np.outer(errors, errors)
    np.testing.assert_allclose(errors, np.sqrt(np.diag(np.linalg.inv(scaled))), rtol=1e-5)
    np.testing.assert_allclose([result.errors[n] for n in result.names], np.sqrt(np.diag(result.covariance)), rtol=1e-12)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_minuit_hessian_with_a_fixed_parameter_is_exact():
    """Minuit2 (iminuit 2.33) reads a user's Hessian at internal indices: with a parameter fixed
    (as MINOS and profiles do) the free ones got another's second derivatives. Through zcache the
    HESSE of a fit with a fixed parameter and MINOS equal Minuit's own numerical ones."""
    mu = zcache.Parameter("mu_fx", 0.2, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter("sigma_fx", 1.1, lower=0.1, upper=5.0)
    x = np.random.default_rng(5).normal(0.3, 1.2, 2000)
    loss = UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(x, obs="x"))
    exact = Minuit().minimize(loss)
    n, std = len(x), x.std()  # the truncation at +-8 (6 sigma) is negligible
    m = exact.minuit
    m.fixed["mu_fx"] = True
    m.hesse()
    assert m.covariance["sigma_fx", "sigma_fx"] == pytest.approx(std**2 / (2 * n), rel=1e-3)
    m.fixed["mu_fx"] = False
    # MINOS against the analytic profile likelihood: Delta NLL(mu) = n/2 log(1 + d^2/std^2),
    # Delta NLL(sigma) = n log(sigma/std) + n std^2 / (2 sigma^2) - n/2.
    # The interval's ends as points (the fit's value is MIGRAD's, within its tolerance of the MLE).
    d_mu = std * np.sqrt(np.expm1(1.0 / n))
    minos = exact.minos()
    ends = {k: exact.values[f"{k}_fx"] + np.array([minos[f"{k}_fx"].lower, minos[f"{k}_fx"].upper]) for k in ("mu", "sigma")}
    np.testing.assert_allclose(ends["mu"], x.mean() + np.array([-d_mu, d_mu]), rtol=0, atol=1e-3 * d_mu)

    def delta(s):
        return n * np.log(s / std) + n * std**2 / (2 * s**2) - n / 2 - 0.5

    low, high = scipy.optimize.brentq(delta, 0.5 * std, std), scipy.optimize.brentq(delta, std, 2 * std)
    np.testing.assert_allclose(ends["sigma"], [low, high], rtol=0, atol=1e-3 * (high - low) / 2)


@pytest.mark.slow  # a fit and MINOS (test_plot draws MINOS errors fast)
def test_minos_takes_a_list_of_names(sample):
    """Issue 23.9: ``result.minos(["mu"])`` as many users write it; a non-string name is a FitError."""
    mu, sigma, loss = _gauss_fit(sample, "ml")
    result = Minuit().minimize(loss)
    both = result.minos(["mu_ml", "sigma_ml"])
    assert set(both) == {"mu_ml", "sigma_ml"}
    assert result.minos("mu_ml")["mu_ml"] == both["mu_ml"]
    with pytest.raises(FitError, match="strings"):
        result.minos([1])
    with pytest.raises(FitError, match="strings"):
        result.profile(["mu_ml"])
    assert float(mu.value()) == result.values["mu_ml"]


# -- issue 51: one meaning of maxfcn ----------------------------------------------------------------
def _maxfcn_loss():
    x = np.random.default_rng(4).normal(0.3, 1.2, 2000)
    mu = zcache.Parameter("mu_maxfcn", 2.0, lower=-5.0, upper=5.0)
    sigma = zcache.Parameter("sigma_maxfcn", 3.0, lower=0.1, upper=10.0)
    return UnbinnedNLL(Gaussian(Space("x", -10.0, 10.0), mu, sigma), zcache.Data(x, name="x_maxfcn")), mu, sigma, x


# [15] slow: about 3 CPU seconds, the same cap at another number of calls; the fast loop keeps [12] (the issue's case)
@pytest.mark.parametrize("maxfcn", [12, pytest.param(15, marks=pytest.mark.slow)])
def test_maxfcn_caps_loss_calls_on_the_compiled_and_the_migrad_path_alike(maxfcn):
    """maxfcn capped BFGS *steps* compiled (a fit of 12 steps made 19 calls) and MIGRAD's *calls*: now calls on both."""
    loss, mu, sigma, _ = _maxfcn_loss()
    results = {}
    for compiled in (True, False):
        zcache.set_values([mu, sigma], [2.0, 3.0])
        results[compiled] = Minuit(maxfcn=maxfcn, compiled=compiled, tiered=False).minimize(loss)
    fast, migrad = results[True], results[False]
    assert fast.path == "compiled" and not fast.valid and fast.nfcn <= maxfcn
    assert "call limit maxfcn" in fast.fallback
    assert migrad.path == "migrad" and not migrad.valid
    assert migrad.minuit.fmin.has_reached_call_limit
    assert maxfcn - 2 <= migrad.nfcn <= maxfcn + 3  # MIGRAD checks the budget between its steps


def test_maxfcn_large_enough_gives_the_same_valid_minimum_on_both_paths():
    loss, mu, sigma, x = _maxfcn_loss()
    found = {}
    for compiled in (True, False):
        zcache.set_values([mu, sigma], [2.0, 3.0])
        result = Minuit(maxfcn=60, compiled=compiled).minimize(loss)
        assert result.valid and result.nfcn <= 60
        found[compiled] = np.array([result.values["mu_maxfcn"], result.values["sigma_maxfcn"]])
    # the Gaussian MLE (the range +-10 holds every event: its truncation is negligible here)
    np.testing.assert_allclose(found[True], [x.mean(), x.std()], rtol=1e-4)
    np.testing.assert_allclose(found[False], [x.mean(), x.std()], rtol=1e-4)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_maxfcn_that_is_not_a_whole_number_of_calls_is_refused(bad):
    with pytest.raises(ValueError, match="maxfcn"):
        Minuit(maxfcn=bad)
