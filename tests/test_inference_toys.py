"""zcache.inference: the toy engine and ToyCalculator.

References: exact Poisson sums (scipy.stats.poisson) for a counting experiment, the toys fitted
one by one with Minuit, conditional fits of the observed data (the profiled point), a Neyman
construction in numpy for Feldman-Cousins, the constraints' sigma for the drawn observables.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

import zcache
from zcache.binned import BinnedData, BinnedNLL
from zcache.exceptions import InferenceError, POIError, ZCacheWarning
from zcache.inference import ToyCalculator, ToyFits, _toys, conditional_fit, interval
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf, set_seed


def _state(loss):
    return [(p.name, float(p), p.floating) for p in loss.get_params(floating=None)], loss.data.numpy().copy()


def _same_state(a, b):
    return a[0] == b[0] and np.array_equal(a[1], b[1])


def _counting(n_obs=5, b=3.0, name="s_cnt"):
    """A counting experiment: signal and background of the same shape, only their sum's count matters."""
    space = Space("x", 0.0, 1.0)
    s = zcache.Parameter(name, 1.0, lower=0.0, upper=50.0)
    model = SumPdf([Gaussian(space, 0.5, 0.3, name=f"sig_{name}"), Gaussian(space, 0.5, 0.3, name=f"bkg_{name}")],
                   yields=[s, zcache.Parameter(f"b_{name}", b, floating=False)])
    x = np.random.default_rng(1).uniform(0.2, 0.8, n_obs)
    return ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x")), s


def _signal_background(name, s_true=8.0, b_true=60.0, seed=4, sigma_b=6.0):
    """An extended Gauss + Exponential fit whose background yield is constrained (a nuisance with an observable)."""
    space = Space("x", 0.0, 1.0)
    s = zcache.Parameter(name, s_true, lower=0.0, upper=100.0)
    b = zcache.Parameter(f"b_{name}", b_true, lower=0.0, upper=500.0)
    model = SumPdf([Gaussian(space, 0.5, 0.05, name=f"g_{name}"), Exponential(space, -1.0, name=f"e_{name}")],
                   yields=[s, b])
    set_seed(seed)
    data = model.sample(int(s_true + b_true))
    con = GaussianConstraint([b], [b_true + 4.0], [sigma_b])
    return ExtendedUnbinnedNLL(model, data, [con]), s, b, con


@pytest.fixture(scope="module")
def sb():
    return _signal_background("s_sb")


# -- bad input ---------------------------------------------------------------------------------


def test_bad_input_is_refused_with_named_errors_and_nothing_moves(sb):
    loss, s, b, _ = sb
    before = _state(loss)
    with pytest.raises(POIError, match="no parameter 'nope'"):
        ToyCalculator(loss, "nope", n_toys=10)
    b.floating = False
    try:
        with pytest.raises(POIError, match="fixed"):
            ToyCalculator(loss, b, n_toys=10)
    finally:
        b.floating = True
    with pytest.raises(InferenceError, match="n_toys"):
        ToyCalculator(loss, s, n_toys=0)
    with pytest.raises(InferenceError, match="batch"):
        ToyCalculator(loss, s, n_toys=10, batch=0)
    with pytest.raises(InferenceError, match="factory"):
        ToyCalculator(loss, s, n_toys=10, client=object())
    calc = ToyCalculator(loss, s, n_toys=10, seed=1)
    with pytest.raises(POIError, match="outside its limits"):
        calc.p_values([5.0, 200.0])
    with pytest.raises(InferenceError, match="unknown test statistic"):
        calc.p_values([5.0], statistic="q0")
    assert len(calc.toys.table) == 0  # nothing was thrown
    assert _same_state(_state(loss), before)


def test_binned_and_simultaneous_losses_are_refused_by_name():
    lam = zcache.Parameter("lam_binned_toys", -0.5, lower=-3.0, upper=3.0)
    loss = BinnedNLL(Exponential(Space("x", 0.0, 3.0), lam), BinnedData([10.0, 5.0, 3.0], [0.0, 1.0, 2.0, 3.0]))
    with pytest.raises(InferenceError, match="binned and simultaneous losses are not supported"):
        ToyCalculator(loss, lam, n_toys=10)
    assert float(lam) == -0.5 and lam.floating


def test_toy_table_round_trip(tmp_path):
    table = np.zeros(5, dtype=_toys.TOY_FIELDS)
    table["toy"] = np.arange(5)
    table["nll_at_mu"] = np.linspace(0.0, 1.0, 5)
    table["valid"] = True
    fits = ToyFits(table, poi="s", seed=9, errordef=0.5)
    fits.to_npz(tmp_path / "t.npz")
    back = ToyFits.from_npz(tmp_path / "t.npz")
    assert back.poi == "s" and back.seed == 9 and back.errordef == 0.5
    assert back.table.dtype == table.dtype and np.array_equal(back.table, table)
    np.savez(tmp_path / "other.npz", table=np.zeros(2), poi=np.array("s"), seed=np.array(1), errordef=np.array(0.5))
    with pytest.raises(InferenceError, match="not a toy table"):
        ToyFits.from_npz(tmp_path / "other.npz")


# -- what the toys are --------------------------------------------------------------------------


@pytest.mark.slow
def test_toys_are_generated_at_the_profiled_point(sb, monkeypatch):
    """The generating values are the conditional fit's nuisance values at each tested value, not the free fit's."""
    loss, s, b, _ = sb
    seen = []
    real = _toys.set_seed
    monkeypatch.setattr(_toys, "set_seed", lambda e: (seen.append((float(s), float(b))), real(e))[1])
    before = _state(loss)
    _toys.run_hypothesis_toys(loss, s, [2.0, 25.0], n_toys=3, null_value=0.0, seed=5, batch=None)
    assert _same_state(_state(loss), before)
    profiled = {mu: conditional_fit(loss, s, mu).values[b.name] for mu in (2.0, 25.0, 0.0)}
    free_b = zcache.inference.free_fit(loss, s).values[b.name]
    assert [mu for mu, _ in seen] == [2.0, 25.0, 0.0]
    # two fits of b at the same mu (the toys' and conditional_fit's), each within sqrt(EDM / errordef) <
    # sqrt(0.002 tol) of b's error of the true minimum (MIGRAD's rule, 1.5x room for the EDM's estimate): a loss's
    # first fits are MIGRAD's, later ones compiled
    errors = {mu: conditional_fit(loss, s, mu).errors[b.name] for mu in (2.0, 25.0, 0.0)}
    for mu, b_gen in seen:
        assert b_gen == pytest.approx(profiled[mu], abs=2 * 1.5 * np.sqrt(0.002 * Minuit().tol) * errors[mu])
    assert abs(profiled[25.0] - free_b) > 1.0  # the test can tell the two apart


def test_constraint_observables_are_drawn_per_toy_around_the_profiled_value(sb):
    loss, s, b, con = sb
    engine = _toys._Engine(loss, s, [b], Minuit(), None)
    point = _toys._Point(_toys.ALT, (0, 1, 2), 5.0, np.array([float(p) for p in engine.model_params]),
                         np.array([57.0]), np.array([57.0]))
    centres = np.array([engine.dataset(3, point, i)[1][0] for i in range(640)])
    assert abs(centres.mean() - 57.0) < 4 * 6.0 / np.sqrt(640)
    assert np.std(centres, ddof=1) == pytest.approx(6.0, rel=4 / np.sqrt(2 * 640))
    # each toy's constraint is centred on its own draw
    toy_loss, params, originals = _toys.toy_loss_parts(loss)
    assert originals == [con]
    with zcache.set_values([b, *params], [50.0, 41.0]):
        assert float(toy_loss.constraints[0].value()) == pytest.approx(0.5 * ((50.0 - 41.0) / 6.0) ** 2)
    # the same toy, asked again (another block read in between), is the same
    again = _toys._Engine(loss, s, [b], Minuit(), None)
    assert np.array_equal(again.dataset(3, point, 70)[0], engine.dataset(3, point, 70)[0])


# -- p-values ----------------------------------------------------------------------------------


@pytest.mark.slow  # about 3 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_a_seeded_study_throws_the_same_toys_in_its_first_call_as_later():
    """The toys are thrown at the observed conditional fits' values. A loss's first fits are MIGRAD's (the tiered
    start) and later ones compiled, which agree within the fit's tolerance, not to the bit; events drawn by
    acceptance turn such a difference into other events. So a study fits on one path from its first call: the same
    seed throws the same toys in a fresh loss's first call as in its second (before the fix, 4 of 4 toys' statistics
    differed by up to 3 in -2 ln lambda, every fit valid)."""
    space = Space("x", 0.0, 10.0)
    p = {n: zcache.Parameter(f"{n}_seedtier", v, lower=lo, upper=hi) for n, v, lo, hi in
         [("mu", 5.0, 3.0, 7.0), ("sigma", 0.6, 0.2, 2.0), ("lam", -0.3, -1.0, -0.01), ("nsig", 250.0, 0.0, 1000.0),
          ("nbkg", 450.0, 0.0, 2000.0)]}
    p["mu"].floating = p["sigma"].floating = False
    model = SumPdf([Gaussian(space, p["mu"], p["sigma"]), Exponential(space, p["lam"])], yields=[p["nsig"], p["nbkg"]])
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(5.0, 0.6, 250), 10.0 * rng.uniform(size=450) ** 2])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x, obs="x"))
    first, second = (_toys.run_hypothesis_toys(loss, p["nsig"], [275.0], n_toys=2, null_value=220.0, seed=1,
                                               batch=None) for _ in range(2))
    for kind in (_toys.ALT, _toys.NULL):
        a, b = first.rows(kind, 275.0), second.rows(kind, 275.0)
        np.testing.assert_array_equal(a["nll_at_mu"], b["nll_at_mu"])
        np.testing.assert_array_equal(a["nll_free"], b["nll_free"])


@pytest.mark.slow
def test_counting_p_values_match_exact_poisson_sums():
    loss, s = _counting(n_obs=5, b=3.0)
    calc = ToyCalculator(loss, s, n_toys=2000, seed=11, batch=2000)
    values = np.array([4.0, 7.0, 11.0])  # each above n_obs - b: q_obs > 0
    with pytest.warns(ZCacheWarning, match=r"toys drew 0 events"):  # e^-3 of the background-only toys
        pv = calc.p_values(values, statistic="q")
    assert np.all(pv.observed > 0)
    for j, mu in enumerate(values):
        # q_mu falls as n rises (below mu + b): P(q >= q_obs) = P(n <= n_obs)
        assert pv.clsb[j] == pytest.approx(stats.poisson.cdf(5, mu + 3.0), abs=4 * pv.clsb_err[j] + 1e-3)
        assert pv.clb[j] == pytest.approx(stats.poisson.cdf(5, 3.0), abs=4 * pv.clb_err[j] + 1e-3)
        exact = stats.poisson.cdf(5, mu + 3.0) / stats.poisson.cdf(5, 3.0)
        assert pv.cls[j] == pytest.approx(exact, abs=4 * pv.cls_err[j] + 1e-3)
    assert np.all(np.diff(pv.expected_cls[:, 1]) >= 0)  # -2 sigma (most background-like) first


@pytest.mark.slow
def test_batched_statistics_equal_serial_minuit_fits(sb):
    loss, s, b, _ = sb
    kw = dict(n_toys=24, null_value=0.0, seed=7)
    batched = _toys.run_hypothesis_toys(loss, s, [4.0, 16.0], batch=24, **kw)
    serial = _toys.run_hypothesis_toys(loss, s, [4.0, 16.0], batch=None, **kw)
    assert batched.table.shape == serial.table.shape
    for kind in (_toys.ALT, _toys.NULL):
        for mu in (4.0, 16.0):
            x, y = batched.rows(kind, mu), serial.rows(kind, mu)
            assert np.array_equal(x["nevents"], y["nevents"])  # the same datasets
            qx = zcache.inference.statistic("qtilde", mu, mu_hat=x["mu_hat"], nll_at_mu=x["nll_at_mu"],
                                            nll_free=x["nll_free"])
            qy = zcache.inference.statistic("qtilde", mu, mu_hat=y["mu_hat"], nll_at_mu=y["nll_at_mu"],
                                            nll_free=y["nll_free"])
            np.testing.assert_allclose(qx, qy, atol=2e-3)
            np.testing.assert_allclose(x["mu_hat"], y["mu_hat"], atol=0.05)


@pytest.mark.exhaustive  # CI's 25 minutes; batched equals serial (test_batched_statistics_equal_serial_minuit_fits) runs
def test_same_seed_same_answer_whatever_the_batch_size(sb, tmp_path, monkeypatch):
    loss, s, b, _ = sb
    before = _state(loss)
    one = ToyCalculator(loss, s, n_toys=96, seed=3, batch=96)
    two = ToyCalculator(loss, s, n_toys=96, seed=3, batch=40)
    p1, p2 = one.p_values([6.0, 18.0]), two.p_values([6.0, 18.0])
    np.testing.assert_allclose(p1.clsb, p2.clsb, atol=1.5 / 96)
    np.testing.assert_allclose(p1.clb, p2.clb, atol=1.5 / 96)
    for kind in (_toys.ALT, _toys.NULL):
        x, y = one.toys.rows(kind, 18.0), two.toys.rows(kind, 18.0)
        assert np.array_equal(x["nevents"], y["nevents"])
        np.testing.assert_allclose(x["nll_at_mu"] - x["nll_free"], y["nll_at_mu"] - y["nll_free"], atol=2e-3)
    assert _same_state(_state(loss), before)
    # saved and given to a new calculator: the same answer, nothing fitted again
    one.toys.to_npz(tmp_path / "toys.npz")
    monkeypatch.setattr("zcache.inference._toy_calculator.run_hypothesis_toys",
                        lambda *a, **k: pytest.fail("the loaded toys should have been used"))
    three = ToyCalculator(loss, s, n_toys=96, toys=ToyFits.from_npz(tmp_path / "toys.npz"), batch=96)
    p3 = three.p_values([6.0, 18.0])
    np.testing.assert_array_equal(p3.cls, p1.cls)
    np.testing.assert_array_equal(p3.expected_cls, p1.expected_cls)


# exhaustive: make test keeps ToyCalculator.discovery's doctest and the asymptotic discovery against closed forms
@pytest.mark.exhaustive
def test_discovery_from_q0_of_background_only_toys(sb):
    loss, s, b, _ = sb
    calc = ToyCalculator(loss, s, n_toys=400, seed=2, batch=400)
    q0 = float(calc.observed_statistic([0.0], "q0")[0])
    assert q0 > 6.0  # about 8 signal events in the data: beyond 400 background-only toys
    with pytest.warns(ZCacheWarning, match="none of 400 background-only toys"):
        d = calc.discovery()
    assert d.p0 == 0.0 and d.p0_err == pytest.approx(-np.log(0.05) / 400) and d.significance == np.inf
    null = calc.toys.rows(_toys.NULL, 0.0)
    assert len(null) == 400 and null["valid"].all()
    toys_q0 = zcache.inference.statistic("q0", 0.0, mu_hat=null["mu_hat"], nll_at_mu=null["nll_at_mu"],
                                         nll_free=null["nll_free"])
    assert np.all(toys_q0 < q0)
    # the asymptotic law of q0 under the background (Cowan et al. eq. 49): half at 0, half chi2(1)
    assert np.mean(toys_q0 < 1e-6) == pytest.approx(0.5, abs=4 * 0.5 / np.sqrt(400))
    tail = 0.5 * stats.chi2.sf(1.0, 1)
    assert np.mean(toys_q0 >= 1.0) == pytest.approx(tail, abs=4 * np.sqrt(tail * (1 - tail) / 400))
    # the signal toys (at the best fit), fitted at s = 0: their median q0 is about the observed one
    assert d.expected_significance == pytest.approx(np.sqrt(q0), abs=1.0)


@pytest.mark.slow
def test_cls_upper_limits_cover_on_a_counting_experiment():
    """95 % CLs upper limits cover the true signal in >= 95 % of pseudo-experiments (CLs is conservative)."""
    loss, s = _counting(n_obs=4, b=3.0, name="s_cov")
    s_true = 4.0
    toys = ToyCalculator(loss, s, n_toys=3000, seed=5, batch=3000)
    with pytest.warns(ZCacheWarning, match=r"toys drew 0 events"):  # n <= n_obs either way: no p-value moves
        toys.p_values([s_true], statistic="qtilde")  # the toys do not depend on the observed count (no nuisance)
    rng = np.random.default_rng(8)
    covered = []
    for n in rng.poisson(s_true + 3.0, size=150):
        loss.data.set_data(rng.uniform(0.2, 0.8, max(int(n), 1)))
        calc = ToyCalculator(loss, s, n_toys=3000, seed=5, toys=toys.toys)
        covered.append(calc.p_values([s_true], statistic="qtilde").cls[0] > 0.05)
    # exact: CLs(s_true) > 0.05 for n >= n_min; its probability is >= 0.95
    frac = float(np.mean(covered))
    assert frac >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / len(covered))


@pytest.mark.slow
def test_feldman_cousins_p_values_match_a_neyman_construction():
    """A Gaussian measurement x ~ N(mu, 1) with mu >= 0: the t statistic of toys is Feldman-Cousins' ordering."""
    mu = zcache.Parameter("mu_fc", 0.5, lower=0.0, upper=6.0)
    model = Gaussian(Space("x", -12.0, 12.0), mu, 1.0)
    x_obs = 0.3
    loss = UnbinnedNLL(model, zcache.Data(np.array([x_obs]), obs="x"))
    calc = ToyCalculator(loss, mu, n_toys=1500, seed=4, batch=1500)
    values = np.array([0.0, 0.2, 1.0, 1.5, 1.8, 2.1, 2.6])
    pv = calc.p_values(values, statistic="t")

    def t(x, m):  # -2 ln of FC's ratio L(m) / L(max(x, 0))
        return (x - m) ** 2 - (x - np.maximum(x, 0.0)) ** 2

    draws = np.random.default_rng(0).normal(size=400_000)
    for j, m in enumerate(values):
        exact = np.mean(t(m + draws, m) >= t(x_obs, m) - 1e-12)
        assert pv.observed[j] == pytest.approx(t(x_obs, m), abs=1e-4)
        assert pv.clsb[j] == pytest.approx(exact, abs=4 * pv.clsb_err[j] + 2e-3)
    # FC's 90 % interval for x = 0.3 (Table X: [0.00, 1.94]), from the same toys
    fc = interval(calc, values, cl=0.9, statistic="t")
    rng_draws = draws[:100_000]
    upper = optimize.brentq(lambda m: np.mean(t(m + rng_draws, m) >= t(x_obs, m)) - 0.1, 1.0, 3.0, xtol=1e-3)
    assert fc.lower == 0.0
    assert fc.upper == pytest.approx(upper, abs=0.1)
    assert fc.upper == pytest.approx(1.94, abs=0.1)
    # the best fit to what MIGRAD promises (a loss's first fits are MIGRAD's): sqrt(EDM / errordef) < sqrt(0.002 tol)
    # of its error (1), with 1.5x room for the EDM's estimate
    assert "Neyman" in fc.method and fc.best == pytest.approx(x_obs, abs=1.5 * np.sqrt(0.002 * Minuit().tol))


def _dask_loss():
    """The loss the Dask workers build (module level: pickled by reference)."""
    return _signal_background("s_dask")[0]


# exhaustive: make test keeps run_toys' Dask study
# (test_a_dask_study_equals_the_one_in_process_and_survives_a_dead_worker), whose chunking the toys reuse
@pytest.mark.exhaustive
def test_toys_on_dask_are_the_toys_of_one_process():
    distributed = pytest.importorskip("distributed")
    loss, s, b, _ = _signal_background("s_dask")
    here = ToyCalculator(loss, s, n_toys=80, seed=6, batch=40)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        there = ToyCalculator(loss, s, n_toys=80, seed=6, batch=40, client=client, factory=_dask_loss)
        p_there = there.p_values([10.0])
    p_here = here.p_values([10.0])
    for kind in (_toys.ALT, _toys.NULL):
        x, y = here.toys.rows(kind, 10.0), there.toys.rows(kind, 10.0)
        assert np.array_equal(x["toy"], y["toy"]) and np.array_equal(x["nevents"], y["nevents"])
        np.testing.assert_allclose(x["nll_at_mu"] - x["nll_free"], y["nll_at_mu"] - y["nll_free"], atol=2e-3)
    np.testing.assert_allclose(p_there.cls, p_here.cls, atol=2 / 80)
