"""zcache.inference: the shared interface, the asymptotic calculator and the answers.

References: closed forms of Cowan et al. (arXiv:1007.1727) for counting experiments,
``pyhf.infer.hypotest`` (numpy backend) on the same one- and two-bin models, iminuit MINOS.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest
from scipy import integrate, optimize, stats

import zcache
from zcache.binned import BinnedChi2, BinnedData, BinnedNLL, ExtendedBinnedNLL, Template
from zcache.exceptions import AsimovError, CrossingError, InferenceError, POIError
from zcache.inference import (
    AsymptoticCalculator,
    conditional_fit,
    discovery,
    free_fit,
    interval,
    resolve_poi,
    upper_limit,
)
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, SimultaneousLoss, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, ProductPdf, Space, SumPdf
from zcache.shapes import HistogramPdf

#: the compiled fit (default) and MIGRAD call by call
FIT_PATHS = [pytest.param(True, id="compiled"), pytest.param(False, id="eager-migrad", marks=pytest.mark.slow)]
#: both paths in the fast tier (the interface's own fits)
BOTH_PATHS = [pytest.param(True, id="compiled"), pytest.param(False, id="eager-migrad")]
#: MIGRAD's path exhaustive: make test runs the calculators' fits on it in test_discovery_of_a_one_bin_count_is_the_
#: closed_form and test_cls_agrees_with_pyhf_hypotest[two-bins-eager-migrad] (a CLs scan), the fast loop in
#: test_conditional_and_free_fits_give_the_gaussian_likelihood_ratio; the calculators do nothing path-specific
COMPILED_PATH = [pytest.param(True, id="compiled"), pytest.param(False, id="eager-migrad", marks=pytest.mark.exhaustive)]


def _state(loss):
    """Every parameter's (name, value, floating) and every dataset's values."""
    params = [(p.name, float(p), p.floating) for p in loss.get_params(floating=None)]
    data = [d.numpy().copy() for d in loss.datasets()]
    return params, data


def _same_state(a, b):
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))


def _gauss_loss(n=400, seed=5, name="mu_g"):
    mu = zcache.Parameter(name, 0.4, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter(f"sigma_{name}", 1.0, lower=0.2, upper=3.0, floating=False)
    x = np.random.default_rng(seed).normal(0.2, 1.0, n)
    return UnbinnedNLL(Gaussian(Space("x", -8.0, 8.0), mu, sigma), zcache.Data(x)), mu, x


# -- the shared interface ---------------------------------------------------------------------


@pytest.mark.parametrize("compiled", BOTH_PATHS)
def test_conditional_and_free_fits_give_the_gaussian_likelihood_ratio(compiled):
    loss, mu, x = _gauss_loss()
    before = _state(loss)
    minimizer = Minuit(compiled=compiled)
    free = free_fit(loss, mu, minimizer)
    at = conditional_fit(loss, mu, -0.1, minimizer)
    # -2 ln lambda of a Gaussian mean with sigma = 1: n (xbar - mu)^2
    assert free.values["mu_g"] == pytest.approx(x.mean(), abs=1e-4)
    assert 2 * (at.fmin - free.fmin) == pytest.approx(len(x) * (x.mean() + 0.1) ** 2, rel=1e-4)
    assert "mu_g" not in at.values
    assert _same_state(_state(loss), before)


def test_conditional_fit_profiles_the_nuisance_parameters():
    loss, mu, x = _gauss_loss(name="mu_p")
    sigma = loss.model.get_params(floating=None)[1]
    sigma.floating = True
    before = _state(loss)
    at = conditional_fit(loss, mu, 0.0)
    # the profiled width at mu = 0 is the rms about 0
    assert at.values["sigma_mu_p"] == pytest.approx(np.sqrt(np.mean(x**2)), rel=1e-4)
    assert _same_state(_state(loss), before)


def test_resolve_poi_names_the_parameters_of_the_loss():
    loss, mu, _ = _gauss_loss(name="mu_r")
    assert resolve_poi(loss, "mu_r") is mu
    assert resolve_poi(loss, mu) is mu
    with pytest.raises(POIError, match=r"no parameter 'nope'.*'mu_r', 'sigma_mu_r' \(fixed\)"):
        resolve_poi(loss, "nope")
    with pytest.raises(POIError, match="fixed"):
        resolve_poi(loss, "sigma_mu_r")
    with pytest.raises(POIError, match="not a parameter of this loss"):
        resolve_poi(loss, zcache.Parameter("other", 1.0))
    with pytest.raises(InferenceError, match="zcache loss"):
        resolve_poi("not a loss", "mu_r")


def test_bad_input_to_the_fits_leaves_the_state_unchanged():
    loss, mu, _ = _gauss_loss(name="mu_b")
    before = _state(loss)
    with pytest.raises(POIError, match="outside its limits"):
        conditional_fit(loss, mu, 5.0)
    with pytest.raises(POIError, match="finite"):
        conditional_fit(loss, mu, np.nan)
    mu.floating = False
    with pytest.raises(POIError, match="fixed"):
        free_fit(loss, mu)
    mu.floating = True
    assert _same_state(_state(loss), before)


def test_a_failing_minimizer_leaves_the_state_unchanged():
    loss, mu, _ = _gauss_loss(name="mu_f")
    loss.get_params(floating=None)[1].floating = True  # something to fit at a pinned POI
    before = _state(loss)

    class Broken:
        def minimize(self, loss):
            for p in loss.params:
                p.set_value(1.0)
                p.floating = False
            raise RuntimeError("broken minimizer")

    with pytest.raises(RuntimeError, match="broken"):
        conditional_fit(loss, mu, 0.5, Broken())
    with pytest.raises(RuntimeError, match="broken"):
        free_fit(loss, mu, Broken())
    assert _same_state(_state(loss), before)


# -- helpers: counting experiments --------------------------------------------------------------


def _flat(space, nbins=1):
    edges = np.linspace(space.lower[0], space.upper[0], nbins + 1)
    return HistogramPdf(space, np.ones(nbins), edges)


def _counting_binned(n, b, name, upper=100.0):
    """One bin, Poisson(s + b), b known; the POI is the signal yield s."""
    space = Space("x", 0.0, 1.0)
    s = zcache.Parameter(name, 1.0, lower=0.0, upper=upper)
    loss = ExtendedBinnedNLL(SumPdf([_flat(space), _flat(space)], yields=[s, b]), BinnedData([n], [0.0, 1.0]))
    return loss, s


def _counting_unbinned(n, b, name, seed=0):
    """An extended unbinned loss whose shape is fixed (signal and background alike): a counting experiment."""
    space = Space("x", 0.0, 2.0)
    s = zcache.Parameter(name, 1.0, lower=0.0, upper=100.0)
    shapes = [Exponential(space, -0.7) for _ in range(2)]
    x = np.random.default_rng(seed).uniform(0.0, 2.0, int(n))
    return ExtendedUnbinnedNLL(SumPdf(shapes, yields=[s, b]), zcache.Data(x)), s


def _q_count(n, s, b):
    """-2 ln lambda(s) of a Poisson count n with mean s + b (s_hat = n - b)."""
    return 2.0 * ((s + b) - n + n * np.log(n / (s + b)))


def _z0(s, b):
    return np.sqrt(2.0 * ((s + b) * np.log(1.0 + s / b) - s))


# -- discovery: closed forms ------------------------------------------------------------------


@pytest.mark.parametrize("compiled", FIT_PATHS)
def test_discovery_of_a_one_bin_count_is_the_closed_form(compiled):
    n, b, s_true = 21.0, 10.0, 6.0
    loss, s = _counting_binned(n, b, f"s_disc_{compiled}")
    before = _state(loss)
    calc = AsymptoticCalculator(loss, s.name, minimizer=Minuit(compiled=compiled), signal_value=s_true)
    d = discovery(calc)
    q0 = 2.0 * (n * np.log(n / b) - (n - b))
    assert d.significance == pytest.approx(np.sqrt(q0), rel=1e-5)
    assert d.p0 == pytest.approx(stats.norm.sf(np.sqrt(q0)), rel=1e-4)
    assert d.expected_significance == pytest.approx(_z0(s_true, b), rel=1e-5)
    assert d.p0_err == d.significance_err == 0.0
    # default signal: the best fit s_hat = n - b (as precise as the fit: MIGRAD's tolerance)
    default = AsymptoticCalculator(loss, s.name, minimizer=Minuit(compiled=compiled)).discovery()
    assert default.expected_significance == pytest.approx(_z0(n - b, b), rel=1e-3)
    assert _same_state(_state(loss), before)


def test_discovery_of_an_extended_unbinned_count_is_the_closed_form():
    n, b = 30, 18.0
    loss, s = _counting_unbinned(n, b, "s_disc_unb")
    before = _state(loss)
    d = AsymptoticCalculator(loss, s, asimov_bins=200, signal_value=7.0).discovery()
    assert d.significance == pytest.approx(np.sqrt(2.0 * (n * np.log(n / b) - (n - b))), rel=1e-5)
    assert d.expected_significance == pytest.approx(_z0(7.0, b), rel=1e-5)
    assert _same_state(_state(loss), before)


@pytest.mark.slow
def test_expected_significance_of_unbinned_shapes_is_the_integral_of_the_densities():
    # Gaussian signal on an exponential background, shapes fixed: q0,A = 2 int [(s f_s + b f_b) ln(1 + s f_s / (b f_b)) - s f_s]
    lo, hi, s_true, b = 0.0, 10.0, 25.0, 400.0
    space = Space("x", lo, hi)
    s = zcache.Parameter("s_shape", 10.0, lower=0.0, upper=500.0)
    model = SumPdf([Gaussian(space, 5.0, 0.4), Exponential(space, -0.3)], yields=[s, b])
    x = np.random.default_rng(2).exponential(1 / 0.3, 2000)
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x[x < hi][:420]))
    gauss = stats.truncnorm((lo - 5.0) / 0.4, (hi - 5.0) / 0.4, loc=5.0, scale=0.4)
    expo = stats.truncexpon((hi - lo) * 0.3, scale=1 / 0.3)

    def integrand(v):
        fs, fb = s_true * gauss.pdf(v), b * expo.pdf(v)
        return (fs + fb) * np.log1p(fs / fb) - fs

    q0a = 2.0 * integrate.quad(integrand, lo, hi, points=[5.0], limit=200)[0]
    d = AsymptoticCalculator(loss, s, signal_value=s_true).discovery()
    assert d.expected_significance == pytest.approx(np.sqrt(q0a), rel=2e-4)


# -- upper limits: the closed forms of a Poisson count -----------------------------------------


def _cls_count(s, n, b, band=None):
    """Cowan et al.'s asymptotic CLs of a count n (>= b) at signal s, qtilde, from sqrt(q) and sqrt(q_A)."""
    sq_a = np.sqrt(_q_count(b, s, b))
    if band is not None:  # the expected CLs at N sigma of the background-only hypothesis
        return stats.norm.sf(sq_a - band) / stats.norm.cdf(band)
    sq = np.sqrt(_q_count(n, s, b)) if s > n - b else 0.0
    if sq <= sq_a:
        return stats.norm.sf(sq) / stats.norm.cdf(sq_a - sq)
    x = (sq**2 - sq_a**2) / (2 * sq_a)
    return stats.norm.sf(x + sq_a) / stats.norm.sf(x)


@pytest.mark.slow
@pytest.mark.parametrize("compiled", COMPILED_PATH)
def test_cls_upper_limit_of_a_count_is_cowans_formula(compiled):
    n, b = 14.0, 10.0
    loss, s = _counting_binned(n, b, f"s_ul_{compiled}")
    before = _state(loss)
    calc = AsymptoticCalculator(loss, s, minimizer=Minuit(compiled=compiled))
    grid = np.linspace(0.0, 24.0, 49)
    ul = upper_limit(calc, grid, cl=0.95)
    reference = optimize.brentq(lambda v: _cls_count(v, n, b) - 0.05, 1.0, 40.0)
    assert ul.observed == pytest.approx(reference, rel=2e-3)
    for k, band in enumerate((-2, -1, 0, 1, 2)):
        expected = optimize.brentq(lambda v, band=band: _cls_count(v, n, b, band=band) - 0.05, 0.1, 60.0)
        assert ul.expected[k] == pytest.approx(expected, rel=2e-3)
    # the p-values on the grid are the closed forms, point by point
    pv = ul.p_values
    assert pv.cls[1:] == pytest.approx([_cls_count(v, n, b) for v in grid[1:]], rel=1e-4, abs=1e-9)
    assert pv.expected_cls[2, 1:] == pytest.approx([_cls_count(v, n, b, band=0) for v in grid[1:]], rel=1e-4)
    assert ul.observed_err == 0.0 and not ul.expected_err.any()
    assert _same_state(_state(loss), before)


@pytest.mark.slow
def test_a_deficit_has_no_significance_and_limits_need_bracketing_values():
    loss, s = _counting_binned(7.0, 10.0, "s_deficit")
    calc = AsymptoticCalculator(loss, s)
    d = calc.discovery()
    assert d.significance == 0.0 and d.p0 == 0.5 and d.expected_significance == 0.0
    with pytest.raises(CrossingError, match="test larger values"):
        upper_limit(calc, [1.0, 2.0, 3.0])
    with pytest.raises(CrossingError, match="test smaller values"):
        upper_limit(calc, [40.0, 50.0])
    with pytest.raises(InferenceError, match="one-sided"):
        upper_limit(calc, [1.0, 2.0], statistic="t")
    with pytest.raises(InferenceError, match=r"cl must be in \(0, 1\)"):
        upper_limit(calc, [1.0, 2.0], cl=95)


@pytest.mark.slow
def test_fits_are_kept_between_calls():
    loss, s = _counting_binned(12.0, 10.0, "s_kept")
    calls = []

    class Counting(Minuit):
        def minimize(self, loss, params=None):
            calls.append(loss)
            return super().minimize(loss, params)

    # a floating nuisance (a constrained background) so that conditional fits are fits
    nb = zcache.Parameter("nb_kept", 10.0, lower=5.0, upper=15.0)
    space = Space("x", 0.0, 1.0)
    loss = ExtendedBinnedNLL(SumPdf([_flat(space), _flat(space)], yields=[s, nb]), BinnedData([12.0], [0.0, 1.0]),
                             constraints=[GaussianConstraint([nb], [10.0], [1.0])])
    calc = AsymptoticCalculator(loss, s, minimizer=Counting())
    first = calc.p_values([2.0, 4.0])
    n_first = len(calls)
    # free + 3 conditional (the null value and two tested values) on the data, two on the Asimov data
    assert n_first == 6
    second = calc.p_values([4.0, 6.0])
    assert len(calls) == n_first + 2  # only 6.0, on the data and on the Asimov data
    assert second.cls[0] == first.cls[1]
    calc.p_values([2.0, 4.0, 6.0], statistic="t")
    assert len(calls) == n_first + 2


# -- pyhf ---------------------------------------------------------------------------------------


def _pyhf_and_zcache(signal, background, observed, delta, name):
    """The same model in pyhf (histosys on the background, +-delta) and in zcache (a constrained background yield).

    pyhf's histosys interpolates linearly (code 0): b_i (1 + alpha delta), alpha ~ N(0, 1); zcache's background
    yield nb = B (1 + alpha delta) with a Gaussian constraint of width B delta is the same likelihood.
    """
    pyhf = pytest.importorskip("pyhf")
    pyhf.set_backend("numpy")
    signal, background = np.asarray(signal, float), np.asarray(background, float)
    spec = {"channels": [{"name": "c", "samples": [
        {"name": "sig", "data": signal.tolist(), "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
        {"name": "bkg", "data": background.tolist(), "modifiers": [{"name": "unc", "type": "histosys", "data": {
            "hi_data": (background * (1 + delta)).tolist(), "lo_data": (background * (1 - delta)).tolist()}}]},
    ]}]}
    model = pyhf.Model(spec)
    data = list(observed) + model.config.auxdata
    nbins, total_s, total_b = len(signal), signal.sum(), background.sum()
    edges = np.arange(nbins + 1.0)
    space = Space("x", 0.0, float(nbins))
    # pyhf's bounds: mu in [0, 10], alpha in [-5, 5]
    s = zcache.Parameter(name, total_s, lower=0.0, upper=10.0 * total_s)
    nb = zcache.Parameter(f"{name}_bkg", total_b, lower=total_b * (1 - 5 * delta), upper=total_b * (1 + 5 * delta))
    shapes = [HistogramPdf(space, signal, edges), HistogramPdf(space, background, edges)]
    loss = ExtendedBinnedNLL(SumPdf(shapes, yields=[s, nb]), BinnedData(observed, edges),
                             constraints=[GaussianConstraint([nb], [total_b], [total_b * delta])])
    return pyhf, model, data, loss, s, total_s


#: pyhf 0.7 validates its specs with a jsonschema API that warns
PYHF_WARNINGS = pytest.mark.filterwarnings("ignore:jsonschema.RefResolver is deprecated:DeprecationWarning")


@PYHF_WARNINGS
@pytest.mark.parametrize(("signal", "background", "observed", "compiled"), [
    pytest.param([6.0], [12.0], [15.0], True, id="one-bin", marks=pytest.mark.slow),
    pytest.param([5.0, 3.0], [10.0, 6.0], [14.0, 9.0], True, id="two-bins", marks=pytest.mark.slow),
    # exhaustive: the same comparison with pyhf through MIGRAD fits; make test keeps the compiled two-bin case
    pytest.param([5.0, 3.0], [10.0, 6.0], [14.0, 9.0], False, id="two-bins-eager-migrad",
                 marks=pytest.mark.exhaustive),
])
def test_cls_agrees_with_pyhf_hypotest(signal, background, observed, compiled):
    pyhf, model, data, loss, s, total_s = _pyhf_and_zcache(signal, background, observed, 0.1,
                                                           f"s_pyhf_{len(signal)}_{compiled}")
    before = _state(loss)
    mus = np.array([0.5, 1.0, 2.0])
    calc = AsymptoticCalculator(loss, s, minimizer=Minuit(compiled=compiled), signal_value=total_s)
    pv = calc.p_values(mus * total_s, statistic="qtilde")
    for k, mu in enumerate(mus):
        cls, (clsb, clb), expected = pyhf.infer.hypotest(mu, data, model, test_stat="qtilde",
                                                         return_tail_probs=True, return_expected_set=True)
        assert pv.cls[k] == pytest.approx(float(cls), abs=1e-3)
        assert pv.clsb[k] == pytest.approx(float(clsb), abs=1e-3)
        assert pv.clb[k] == pytest.approx(float(clb), abs=1e-3)
        assert pv.expected_cls[:, k] == pytest.approx([float(e) for e in expected], abs=1e-3)
    p0, p0_expected = pyhf.infer.hypotest(0.0, data, model, test_stat="q0", return_expected=True)
    d = calc.discovery()
    assert d.p0 == pytest.approx(float(p0), abs=1e-4)
    assert d.expected_significance == pytest.approx(stats.norm.isf(float(p0_expected)), abs=1e-3)
    assert _same_state(_state(loss), before)


@PYHF_WARNINGS
@pytest.mark.slow
def test_a_simultaneous_loss_agrees_with_a_two_channel_pyhf_model():
    pyhf = pytest.importorskip("pyhf")
    pyhf.set_backend("numpy")
    b1, b2, n1, n2, delta = 8.0, 5.0, 11.0, 8.0, 0.2
    spec = {"channels": [
        {"name": "a", "samples": [{"name": "sig", "data": [1.0], "modifiers": [
            {"name": "mu", "type": "normfactor", "data": None}]},
            {"name": "bkg", "data": [b1], "modifiers": [{"name": "unc", "type": "histosys", "data": {
                "hi_data": [b1 * (1 + delta)], "lo_data": [b1 * (1 - delta)]}}]}]},
        {"name": "b", "samples": [{"name": "sig", "data": [1.0], "modifiers": [
            {"name": "mu", "type": "normfactor", "data": None}]},
            {"name": "bkg", "data": [b2], "modifiers": []}]},
    ]}
    model = pyhf.Model(spec)
    data = [n1, n2] + model.config.auxdata
    space = Space("x", 0.0, 1.0)
    s = zcache.Parameter("s_sim", 1.0, lower=0.0, upper=10.0)
    nb = zcache.Parameter("nb_sim", b1, lower=b1 * (1 - 5 * delta), upper=b1 * (1 + 5 * delta))
    a = ExtendedBinnedNLL(SumPdf([_flat(space), _flat(space)], yields=[s, nb]), BinnedData([n1], [0.0, 1.0]),
                          constraints=[GaussianConstraint([nb], [b1], [b1 * delta])])
    c = ExtendedBinnedNLL(SumPdf([_flat(space), _flat(space)], yields=[s, b2]), BinnedData([n2], [0.0, 1.0]))
    pv = AsymptoticCalculator(SimultaneousLoss([a, c]), s).p_values([2.0, 5.0])
    for k, mu in enumerate((2.0, 5.0)):
        cls, expected = pyhf.infer.hypotest(mu, data, model, test_stat="qtilde", return_expected_set=True)
        assert pv.cls[k] == pytest.approx(float(cls), abs=1e-3)
        assert pv.expected_cls[:, k] == pytest.approx([float(e) for e in expected], abs=1e-3)


# -- intervals ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("compiled", COMPILED_PATH)
def test_the_profile_likelihood_interval_is_minos(compiled):
    mu = zcache.Parameter(f"mu_minos_{compiled}", 0.0, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter(f"sigma_minos_{compiled}", 1.3, lower=0.3, upper=4.0)
    x = np.random.default_rng(11).normal(0.3, 1.2, 300)
    loss = UnbinnedNLL(Gaussian(Space("x", -10.0, 10.0), mu, sigma), zcache.Data(x))
    before = _state(loss)
    calc = AsymptoticCalculator(loss, mu, minimizer=Minuit(compiled=compiled))
    with zcache.set_values(loss.get_params(floating=None), [float(p) for p in loss.get_params(floating=None)]):
        result = Minuit(compiled=compiled).minimize(loss)  # the reference: MINOS (the restorer puts the start back)
        result.minos(mu.name)
    low, up, valid = result.minos_errors[mu.name]
    assert valid
    best = result.values[mu.name]
    assert _same_state(_state(loss), before)
    err = result.errors[mu.name]
    # around the best fit and both ends (the p-value's Z is nearly straight there: a few points suffice)
    grid = best + err * np.array([-1.15, -0.9, -0.3, 0.3, 0.9, 1.15])
    ci = interval(calc, grid, cl=stats.chi2.cdf(1.0, 1))
    assert ci.best == pytest.approx(best, abs=1e-3 * err)
    assert ci.lower == pytest.approx(best + low, abs=3e-3 * err)
    assert ci.upper == pytest.approx(best + up, abs=3e-3 * err)
    assert "profile likelihood" in ci.method
    assert _same_state(_state(loss), before)
    with pytest.raises(CrossingError, match="larger values"):
        interval(calc, grid[:4])


def test_two_sided_p_values_of_a_gaussian_mean_are_the_closed_forms():
    loss, mu, x = _gauss_loss(n=200, seed=3, name="mu_two")
    calc = AsymptoticCalculator(loss, mu, null_value=0.0)
    values = np.array([-0.2, 0.0, 0.1, 0.4])
    pv = calc.p_values(values, statistic="t")
    t = 200 * (x.mean() - values) ** 2
    assert pv.observed == pytest.approx(t, rel=1e-4, abs=1e-8)
    assert pv.clsb == pytest.approx(stats.chi2.sf(t, 1), rel=1e-4)
    # background-only (mu' = 0): t is a noncentral chi-square with t_A = 200 mu^2
    known = values != 0.0
    assert pv.clb[known] == pytest.approx(stats.ncx2.sf(t[known], 1, 200 * values[known] ** 2), rel=1e-3)
    assert pv.clb[~known] == pytest.approx(stats.chi2.sf(t[~known], 1), rel=1e-4)


# -- bad input and state --------------------------------------------------------------------------


def test_bad_input_is_a_named_error_and_changes_nothing():
    loss, s = _counting_binned(12.0, 10.0, "s_bad", upper=50.0)
    before = _state(loss)
    with pytest.raises(POIError, match="no parameter 'nope'"):
        AsymptoticCalculator(loss, "nope")
    s.floating = False
    with pytest.raises(POIError, match="fixed"):
        AsymptoticCalculator(loss, s)
    s.floating = True
    with pytest.raises(POIError, match="outside its limits"):
        AsymptoticCalculator(loss, s, null_value=-1.0)
    with pytest.raises(POIError, match="outside its limits"):
        AsymptoticCalculator(loss, s, signal_value=80.0)
    with pytest.raises(InferenceError, match="asimov_bins"):
        AsymptoticCalculator(loss, s, asimov_bins=3)
    calc = AsymptoticCalculator(loss, s)
    with pytest.raises(POIError, match="outside its limits"):
        calc.p_values([1.0, 60.0])
    with pytest.raises(InferenceError, match="discovery"):
        calc.p_values([1.0], statistic="q0")
    with pytest.raises(InferenceError, match="calculator"):
        upper_limit(loss, [1.0, 2.0])
    assert _same_state(_state(loss), before)


def test_losses_without_asimov_data_are_refused():
    space = Space("x", 0.0, 1.0)
    y = zcache.Parameter("y_refused", 5.0, lower=0.0, upper=100.0)
    x = np.random.default_rng(1).uniform(0, 1, 50)
    weighted = ExtendedUnbinnedNLL(Exponential(space, -1.0, extended=y), zcache.Data(x, weights=np.full(50, 0.5)))
    before = _state(weighted)
    with pytest.raises(AsimovError, match="weighted events"):
        AsymptoticCalculator(weighted, y)
    assert _same_state(_state(weighted), before)
    template = Template(BinnedData([5.0, 7.0], [0.0, 1.0, 2.0]), [np.array([1.0, 2.0]), np.array([3.0, 1.0])])
    with pytest.raises(AsimovError, match="Template"):
        AsymptoticCalculator(template, template.yields[0])
    plane = Space("x", 0.0, 1.0) * Space("z", 0.0, 1.0)
    y2 = zcache.Parameter("y2_refused", 5.0, lower=0.0, upper=100.0)
    pdf = ProductPdf([Exponential(Space("x", 0.0, 1.0), -1.0), Exponential(Space("z", 0.0, 1.0), -1.0)], extended=y2)
    two = ExtendedUnbinnedNLL(pdf, zcache.Data(np.random.default_rng(2).uniform(0, 1, (40, 2)), obs=plane.obs))
    with pytest.raises(AsimovError, match="2 observables"):
        AsymptoticCalculator(two, y2)
    weighted_hist = ExtendedBinnedNLL(Exponential(space, -1.0, extended=y), BinnedData([5.0], [0.0, 1.0],
                                                                                       variances=[2.0]))
    with pytest.raises(AsimovError, match="weighted histogram"):
        AsymptoticCalculator(weighted_hist, y)


# -- the Brazil plot ----------------------------------------------------------------------------


def test_plot_cls_draws_the_numbers_it_is_given():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zcache.inference import PValues, UpperLimit
    from zcache.plot import plot_cls

    x = np.linspace(0.0, 10.0, 11)
    rng = np.random.default_rng(0)
    expected = np.sort(rng.uniform(0.0, 1.0, (5, 11)), axis=0)
    cls = rng.uniform(0.0, 1.0, 11)
    z = np.zeros(11)
    pv = PValues(values=x, statistic="qtilde", observed=z, clsb=cls / 2, clb=np.full(11, 0.5), cls=cls,
                 expected_cls=expected, clsb_err=z, clb_err=z, cls_err=z, expected_cls_err=np.zeros((5, 11)))
    ul = UpperLimit(cl=0.9, observed=4.2, expected=np.array([2.0, 3.0, 4.0, 5.0, 6.0]), observed_err=0.0,
                    expected_err=np.zeros(5), p_values=pv)
    fig, ax = plt.subplots()
    drawn = plot_cls(ul, ax=ax)
    assert drawn.ax is ax and drawn.figure is fig
    assert np.array_equal(drawn.observed_line.get_xdata(), x)
    assert np.array_equal(drawn.observed_line.get_ydata(), cls)
    assert np.array_equal(drawn.expected_line.get_ydata(), expected[2])
    for band, (lo, hi) in ((drawn.band_1sigma, (1, 3)), (drawn.band_2sigma, (0, 4))):
        ys = band.get_paths()[0].vertices[:, 1]
        assert np.all(np.isin(expected[lo], ys)) and np.all(np.isin(expected[hi], ys))
    assert drawn.cl_line.get_ydata() == pytest.approx([0.1, 0.1])
    assert [line.get_xdata()[0] for line in drawn.limits] == [4.2, 4.0]
    p_plot = plot_cls(pv, kind="clsb")
    assert np.array_equal(p_plot.observed_line.get_ydata(), cls / 2) and p_plot.band_1sigma is None
    assert p_plot.cl_line.get_ydata()[0] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="UpperLimit or PValues"):
        plot_cls(cls)
    with pytest.raises(ValueError, match="kind"):
        plot_cls(pv, kind="clb")
    plt.close("all")


@pytest.mark.slow
def test_ttilde_p_values_are_the_tail_probabilities_of_the_gaussian_estimate():
    # x ~ N(mu, 1), n = 100: mu_hat = mean(x) ~ N(mu, 0.1). A negative mean, so that ttilde compares with mu = 0
    n = 100
    x = np.random.default_rng(21).normal(0.0, 1.0, n)
    x = x - x.mean() - 0.03
    mu = zcache.Parameter("mu_ttilde", 0.5, lower=-3.0, upper=3.0)
    loss = UnbinnedNLL(Gaussian(Space("x", -9.0, 9.0), mu, 1.0), zcache.Data(x))
    values = np.array([0.05, 0.2, 0.35])
    pv = AsymptoticCalculator(loss, mu).p_values(values, statistic="ttilde")
    sigma, xbar = 1.0 / np.sqrt(n), x.mean()
    # eq. 43 with mu_hat < 0: -2 ln [L(mu) / L(0)]
    assert pv.observed == pytest.approx(n * (values**2 - 2 * values * xbar), rel=1e-4)

    def ttilde(m_hat, m):
        return np.where(m_hat >= 0.0, ((m - m_hat) / sigma) ** 2, (m**2 - 2 * m * m_hat) / sigma**2)

    def tail(t, m, truth):
        """P(ttilde >= t) for mu_hat ~ N(truth, sigma), by brute force on a fine grid of mu_hat."""
        grid = np.linspace(truth - 12 * sigma, truth + 12 * sigma, 400_001)
        density = stats.norm.pdf(grid, truth, sigma)
        return integrate.trapezoid(np.where(ttilde(grid, m) >= t, density, 0.0), grid)

    for k, m in enumerate(values):
        assert pv.clsb[k] == pytest.approx(tail(pv.observed[k], m, m), abs=2e-4)
        assert pv.clb[k] == pytest.approx(tail(pv.observed[k], m, 0.0), abs=2e-4)
        for row, band in enumerate((-2, -1, 0, 1, 2)):
            t_band = ttilde(band * sigma, m)  # the background-only estimate at its band
            ratio = min(tail(t_band, m, m) / tail(t_band, m, 0.0), 1.0)  # CLs is capped at 1
            assert pv.expected_cls[row, k] == pytest.approx(ratio, abs=1e-3)


@pytest.mark.slow
def test_binned_asimov_data_are_the_expected_counts():
    # a multinomial BinnedNLL and a BinnedChi2 of the same histogram, the POI a Gaussian mean, nothing else free
    edges = np.linspace(-3.0, 3.0, 13)
    counts, _ = np.histogram(np.random.default_rng(6).normal(0.2, 1.0, 500), bins=edges)
    space = Space("x", -3.0, 3.0)
    mu = zcache.Parameter("mu_binned", 0.0, lower=-1.0, upper=1.0)
    hist = BinnedData(counts.astype(float), edges)
    total = counts.sum()  # the events inside the edges

    def probs(m):
        cdf = stats.norm.cdf(edges, m, 1.0)
        return np.diff(cdf) / (cdf[-1] - cdf[0])

    nll = BinnedNLL(Gaussian(space, mu, 1.0), hist)
    asimov = AsymptoticCalculator(nll, mu).asimov(0.3)
    assert type(asimov) is BinnedNLL and asimov.data.counts == pytest.approx(total * probs(0.3), rel=1e-9)
    chi2 = BinnedChi2(Gaussian(space, mu, 1.0), hist)
    calc = AsymptoticCalculator(chi2, mu)
    asimov = calc.asimov(0.3)
    assert asimov.data.counts == pytest.approx(total * probs(0.3), rel=1e-9)
    assert np.array_equal(asimov.data.variances, hist.variances)  # a chi-square keeps the measurement's errors
    # the observed t of the chi-square: its rise from the minimum (errordef 1), against scipy
    keep = counts > 0

    def chi2_np(m):
        return float(np.sum((counts[keep] - total * probs(m)[keep]) ** 2 / counts[keep]))

    best = optimize.minimize_scalar(chi2_np, bounds=(-1.0, 1.0), method="bounded", options={"xatol": 1e-10})
    pv = calc.p_values([0.0, 0.3], statistic="t")
    assert pv.observed == pytest.approx([chi2_np(0.0) - best.fun, chi2_np(0.3) - best.fun], rel=1e-4, abs=1e-6)
    # to what the fit promises: within sqrt(EDM / errordef) < sqrt(0.002 tol) of mu's error, with 1.5x room for the
    # EDM's estimate (a loss's first fits are MIGRAD's; a compiled BFGS happens to land closer, which no fit promises)
    h = 1e-3
    curvature = (chi2_np(best.x + h) - 2 * chi2_np(best.x) + chi2_np(best.x - h)) / h**2
    mu_error = np.sqrt(2 * 1.0 / curvature)  # errordef 1
    assert calc.mu_hat == pytest.approx(best.x, abs=1.5 * np.sqrt(0.002 * Minuit().tol) * mu_error)
    assert float(mu) == 0.0 and mu.floating


def test_a_toy_p_value_of_zero_does_not_pull_the_limit_onto_the_tested_value_below():
    """Toys with none beyond the observed statistic give p = 0 exactly: interpolating its Gaussian quantile (of a
    clipped 0, Z = 37) put the crossing almost on the lower tested value; the p-values themselves are interpolated
    there instead (CLs 0.2 at 1 and 0 at 2: the 0.05 crossing at 1.75)."""
    from zcache.inference import PValues, upper_limit

    class Fixed:
        """A calculator whose p-values are given (the Calculator protocol, structurally)."""

        loss = None
        poi = zcache.Parameter("poi_zero_p", 1.0, lower=0.0, upper=10.0)
        null_value = 0.0

        def p_values(self, values, statistic="qtilde"):
            values = np.asarray(values, dtype=float)
            cls = np.array([1.0, 0.2, 0.0])
            zeros = np.zeros(3)
            return PValues(values=values, statistic=statistic, observed=zeros, clsb=cls, clb=np.ones(3), cls=cls,
                           expected_cls=np.tile(cls, (5, 1)), clsb_err=zeros, clb_err=zeros, cls_err=zeros,
                           expected_cls_err=np.zeros((5, 3)))

        def discovery(self):
            raise NotImplementedError

    limit = upper_limit(Fixed(), [0.0, 1.0, 2.0])
    assert limit.observed == pytest.approx(1.75)
    np.testing.assert_allclose(limit.expected, 1.75)


# -- one Asimov loss per observed loss, its data written before each fit --------------------------


def _zcache_traces():
    """Each live zcache function's trace count, held weakly."""
    from zcache._engine.function import _FUNCTIONS

    return weakref.WeakKeyDictionary({f: f.trace_count for f in list(_FUNCTIONS)})


def _traces_since(before):
    """Graphs traced since ``before`` by the zcache functions alive now (a new function's every trace counts; a sum
    of live counts would let a dropped function's traces hide a new one's)."""
    return sum(count - before.get(f, 0) for f, count in _zcache_traces().items())


def _width_loss(tag, x, mu0=0.3, sigma0=1.0):
    """A Gaussian of mean mu (the POI) and width sigma (a nuisance, floating) on [-6, 6]."""
    mu = zcache.Parameter(f"mu_{tag}", mu0, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter(f"sigma_{tag}", sigma0, lower=0.3, upper=3.0)
    return UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, sigma), zcache.Data(x)), mu, sigma


def _answers(calc, values):
    """Every number of p_values with t (the Asimov data of the null value) and q."""
    out = []
    for name in ("t", "q"):
        pv = calc.p_values(values, statistic=name)
        out += [pv.observed, pv.clsb, pv.clb, pv.expected_cls.ravel()]
    return np.concatenate(out)


def _fresh_answers(tag, x, values, mu0, sigma0, sigma_fixed, compiled):
    """The answers of a calculator of a loss built anew (its own Asimov loss, never written twice)."""
    loss, mu, sigma = _width_loss(tag, x, mu0, sigma0)
    sigma.floating = not sigma_fixed
    calc = AsymptoticCalculator(loss, mu, null_value=0.0, asimov_bins=60,
                                minimizer=Minuit(compiled=compiled, tiered=False))
    return _answers(calc, values)


@pytest.mark.slow  # traces two losses' fits (about 10 s)
@pytest.mark.parametrize("compiled", [BOTH_PATHS[0], pytest.param(False, id="eager-migrad", marks=pytest.mark.exhaustive)])
def test_calculators_of_one_loss_share_the_asimov_fits_on_the_data_of_their_state(compiled):
    from zcache.inference._asymptotic import shared_asimov_losses

    x1 = np.random.default_rng(11).normal(0.2, 1.0, 300)
    x2 = np.random.default_rng(12).normal(-0.1, 1.3, 250)
    loss, mu, sigma = _width_loss(f"share{compiled}", x1)
    # tiered=False: shared and fresh calculators are compared to 1e-10, so both run every fit on the same path
    # (the tiered start's first fits are MIGRAD's, its later ones compiled: equal only within the fit's tolerance)
    minimizer = Minuit(compiled=compiled, tiered=False)
    first = AsymptoticCalculator(loss, mu, null_value=0.0, asimov_bins=60, minimizer=minimizer)
    got = _answers(first, [0.3, 0.5])
    # another state, same floating set: new data, the POI started elsewhere
    loss.data.set_data(x2)
    mu.set_value(-0.2)
    traces = _zcache_traces()
    second = AsymptoticCalculator(loss, mu, null_value=0.0, asimov_bins=60, minimizer=minimizer)
    got2 = _answers(second, [0.3, 0.5])
    assert _traces_since(traces) == 0, "a second calculator of the same loss traced its Asimov fits again"
    assert len(shared_asimov_losses(loss)) == 1
    # another floating set: the width fixed at another value
    sigma.floating = False
    sigma.set_value(1.2)
    got3 = _answers(AsymptoticCalculator(loss, mu, null_value=0.0, asimov_bins=60, minimizer=minimizer), [0.3, 0.5])
    # back to the first state: the first calculator at a value it has not fitted must fit the Asimov data of
    # ITS state, which the calculators since have overwritten in the shared loss
    loss.data.set_data(x1)
    mu.set_value(0.3)
    sigma.set_value(1.0)
    sigma.floating = True
    got4 = _answers(first, [0.3, 0.5, 0.8])
    tol = dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, _fresh_answers(f"f1{compiled}", x1, [0.3, 0.5], 0.3, 1.0, False, compiled), **tol)
    np.testing.assert_allclose(got2, _fresh_answers(f"f2{compiled}", x2, [0.3, 0.5], -0.2, 1.0, False, compiled), **tol)
    np.testing.assert_allclose(got3, _fresh_answers(f"f3{compiled}", x2, [0.3, 0.5], -0.2, 1.2, True, compiled), **tol)
    np.testing.assert_allclose(got4, _fresh_answers(f"f4{compiled}", x1, [0.3, 0.5, 0.8], 0.3, 1.0, False, compiled),
                               **tol)
    # the sharing moved nothing: values, flags and the observed data are the user's
    assert float(mu) == 0.3 and float(sigma) == 1.0 and sigma.floating and mu.floating
    np.testing.assert_array_equal(loss.data.numpy(), x1)


@pytest.mark.slow  # six calculators' MIGRAD fits (about 5 s)
def test_constrained_asimov_losses_are_kept_per_observed_constraint_values():
    """A constraint's observed value is a constant of the Asimov loss's programs: calculators whose profiled
    nuisance differs get losses of their own, the same state shares one, and each answer is a fresh loss's."""
    from zcache.inference import _asymptotic

    def counting(tag, n):
        s = zcache.Parameter(f"s_{tag}", 1.0, lower=0.0, upper=50.0)
        nb = zcache.Parameter(f"nb_{tag}", 10.0, lower=2.0, upper=30.0)
        space = Space("x", 0.0, 1.0)
        loss = ExtendedBinnedNLL(SumPdf([_flat(space), _flat(space)], yields=[s, nb]), BinnedData([n], [0.0, 1.0]),
                                 constraints=[GaussianConstraint([nb], [10.0], [2.0])])
        return loss, s

    def answers(loss, s):
        pv = AsymptoticCalculator(loss, s, minimizer=Minuit(compiled=False)).p_values([4.0, 8.0], statistic="qtilde")
        return np.concatenate([pv.observed, pv.cls, pv.expected_cls.ravel()])

    loss, s = counting("kept", 14.0)
    first = answers(loss, s)
    assert len(_asymptotic.shared_asimov_losses(loss)) == 1
    again = answers(loss, s)
    assert len(_asymptotic.shared_asimov_losses(loss)) == 1  # the same profiled nuisance: the same loss
    loss.data.set_counts([21.0])
    other = answers(loss, s)
    assert len(_asymptotic.shared_asimov_losses(loss)) == 2
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, answers(*counting("fresh14", 14.0)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(other, answers(*counting("fresh21", 21.0)), rtol=1e-10, atol=1e-12)
    assert not np.allclose(other, first)
    # a shared loss in use elsewhere (another thread's fit): the calculator fits a loss of its own, same answers
    held = list(_asymptotic._SHARED[loss].values())[-1]  # the Asimov loss of the state now
    kept = [e.loss.data.counts.copy() for e in _asymptotic._SHARED[loss].values()]
    with held.lock:
        busy = answers(loss, s)
    np.testing.assert_array_equal(busy, other)
    assert [e.loss.data.counts.tolist() for e in _asymptotic._SHARED[loss].values()] == [k.tolist() for k in kept]
