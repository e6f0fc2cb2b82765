"""zcache.minimize.Minuit: fits, gradients, limits, errors, partial recompute."""

from __future__ import annotations

import numpy as np
import pytest

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


@pytest.mark.parametrize("use_gradient, autograd", [(True, True), (True, False), (False, True)],
                         ids=["autodiff", "zcache-numerical", "minuit-numerical"])
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


def test_fit_respects_limits(sample):
    """A minimum beyond a limit ends at the limit, with no out-of-limit value ever set."""
    mu = zcache.Parameter("mu_l", 0.9, lower=0.8, upper=3.0)
    sigma = zcache.Parameter("sigma_l", 1.0, lower=0.1, upper=5.0)
    loss = UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(sample))
    result = Minuit().minimize(loss)
    assert 0.8 <= result.values["mu_l"] < 0.801
    assert 0.8 <= float(mu.value()) <= 3.0


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
    # a model that is zero at an event: the loss is infinite at the start
    narrow = zcache.Parameter("sigma_narrow", 0.01, lower=0.001, upper=1.0)
    far = zcache.Parameter("mu_far", -7.0, lower=-8.0, upper=8.0)
    bad = UnbinnedNLL(Gaussian(SPACE, far, narrow), zcache.Data(np.array([7.9, 0.0])))
    with pytest.raises(FitError, match="start"):
        Minuit().minimize(bad)
    assert float(far.value()) == -7.0 and float(narrow.value()) == 0.01


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
    result = Minuit(use_gradient=False).minimize(loss)
    assert result.valid
    misses = sum(c.stats["misses"] for c in caches)
    # uncached: every call computes all K components; here mostly one (plus the one restored)
    assert misses < 0.45 * k * result.nfcn, (misses, result.nfcn)


def test_fit_result_fields(sample):
    mu, sigma, loss = _gauss_fit(sample, "f")
    result = Minuit(hesse=False).minimize(loss)
    assert isinstance(result, FitResult)
    assert result.covariance is None and np.isnan(result.errors["mu_f"])
    assert result.nfcn > 0 and result.time > 0 and result.edm < 0.002
    assert result.params == [mu, sigma]
    assert result.minuit.valid and "Minuit(" in repr(Minuit())


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
