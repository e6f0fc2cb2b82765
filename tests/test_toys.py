"""zcache.toys.run_toys: no retraces across toys, unbiased pulls, the result table."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import gauss_exp_study, wait_for_replaced_worker

import zcache
from zcache.exceptions import ModelError, ToyStudyError
from zcache.loss import ExtendedUnbinnedNLL, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.toys import ToyResult, run_toys


@pytest.mark.slow  # toy study
def test_fifty_extended_toys_trace_each_function_once():
    """Generation and fit reuse one graph each: new data sizes and values never retrace."""
    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter("mu_t", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter("sigma_t", 0.6, lower=0.1, upper=2.0)
    lam = zcache.Parameter("lam_t", -0.3, lower=-2.0, upper=-0.01, floating=False)
    nsig = zcache.Parameter("nsig_t", 150.0, lower=0.0, upper=2000.0)
    nbkg = zcache.Parameter("nbkg_t", 250.0, lower=0.0, upper=2000.0)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    loss = ExtendedUnbinnedNLL(model, model.sample(400))
    toys = run_toys(model, loss, n_toys=50, seed=2, progress=False)
    assert len(toys.table) == 50
    assert len(set(toys.table["nevents"])) > 10  # Poisson-distributed sizes
    # every toy fits on the compiled path (a toy whose fit ends on a limit falls back to MIGRAD, whose two
    # graphs are then traced once each), and its program is traced once
    from zcache._fitting.compiled_fit import CompiledFit

    assert CompiledFit.of(loss, loss.params).traces == 1
    traced = {f.__name__: f.trace_count for f in loss.functions() if f.trace_count}
    assert set(traced) <= {"_checked_value", "value_gradient_at", "hessian_at"} and all(c == 1 for c in traced.values())
    assert model._sampler.trace_count == 1
    assert toys.table["valid"].mean() > 0.9
    assert float(mu.value()) == 5.0 and float(nsig.value()) == 150.0  # back at the truth


@pytest.mark.slow  # toy study
def test_pulls_are_standard_normal_over_200_toys():
    """Fit results agree with the generating values within errors: pull means ~0, widths ~1."""
    mu = zcache.Parameter("mu_pull", 0.5, lower=-2.0, upper=3.0)
    sigma = zcache.Parameter("sigma_pull", 1.0, lower=0.2, upper=3.0)
    model = Gaussian(Space("x", -4.0, 5.0), mu, sigma)
    loss = UnbinnedNLL(model, model.sample(200))
    toys = run_toys(model, loss, n_toys=200, n_events=200, seed=7, progress=False)
    assert toys.table["valid"].all()
    for name, (mean, width) in toys.pull_summary().items():
        # 200 toys: the standard error of the mean is 0.07, of the width 0.05
        assert abs(mean) < 0.25, (name, mean)
        assert 0.8 < width < 1.2, (name, width)
    np.testing.assert_allclose(toys.table["mu_pull_pull"], (toys.table["mu_pull"] - 0.5) / toys.table["mu_pull_err"])


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_toy_result_table_and_summary():
    mu = zcache.Parameter("mu_tab", 0.0, lower=-2.0, upper=2.0)
    model = Gaussian(Space("x", -4.0, 4.0), mu, 1.0)
    loss = UnbinnedNLL(model, model.sample(100))
    toys = run_toys(model, loss, n_toys=3, n_events=100, seed=1, start=[0.5], progress=False)
    assert isinstance(toys, ToyResult)
    assert toys.names == ["mu_tab"] and toys.truth == {"mu_tab": 0.0}
    assert set(toys.table.dtype.names) == {"mu_tab", "mu_tab_err", "mu_tab_pull", "valid", "fmin", "nfcn",
                                           "nevents", "time", "refit"}
    assert (toys.table["nevents"] == 100).all() and (toys.table["time"] > 0).all()
    assert toys.time_per_toy == pytest.approx(np.median(toys.table["time"][1:]))
    assert "3 toys" in str(toys) and "pull mean" in str(toys)
    again = run_toys(model, loss, n_toys=3, n_events=100, seed=1, start=[0.5], progress=False)
    np.testing.assert_array_equal(again.table["mu_tab"], toys.table["mu_tab"])  # seeded: reproducible


def test_run_toys_rejects_bad_input():
    mu = zcache.Parameter("mu_bad", 0.0)
    space = Space("x", -4.0, 4.0)
    model = Gaussian(space, mu, 1.0)
    loss = UnbinnedNLL(model, model.sample(50))
    with pytest.raises(ValueError, match="n_toys"):
        run_toys(model, loss, n_toys=0, n_events=10)
    with pytest.raises(ModelError, match="single-dataset"):
        run_toys(model, loss + UnbinnedNLL(Gaussian(space, mu, 2.0), model.sample(50)), n_toys=1, n_events=10)
    with pytest.raises(ModelError, match="not extended"):
        run_toys(model, loss, n_toys=1)


@pytest.mark.slow  # 3.7 s: a second study (test_toy_result_table_and_summary runs one fast)
def test_run_toys_puts_the_users_data_back():
    """The loss's dataset is refilled per toy; afterwards it holds the user's events and weights
    again (a refit or a plot after a toy study must not see the last toy)."""
    space = Space("x", -5.0, 5.0)
    mu = zcache.Parameter("mu_back", 0.0, lower=-2.0, upper=2.0)
    model = Gaussian(space, mu, 1.0)
    x = np.random.default_rng(4).normal(0.3, 1.0, 500)
    w = np.random.default_rng(5).uniform(0.5, 1.5, x.size)
    data = zcache.Data(x, weights=w)
    loss = UnbinnedNLL(model, data)
    before = float(loss.value())
    toys = run_toys(model, loss, n_toys=2, n_events=300, seed=3)
    assert (toys.table["nevents"] == 300).all()
    np.testing.assert_array_equal(data.numpy(), x)
    np.testing.assert_array_equal(data.weights.numpy(), w)
    assert float(loss.value()) == pytest.approx(before, rel=1e-14)


# -- batched and distributed studies ---------------------------------------------------------------
def _gauss_exp_study(tag: str, n: int = 1000):
    model, loss, _ = gauss_exp_study(tag, n)
    return model, loss


# exhaustive (serial and batched studies): make test keeps serial against batched studies with one seed
# (test_batched_and_serial_toys_agree_near_a_yield_limit, test_a_dask_study_equals_the_one_in_process...)
@pytest.mark.exhaustive
def test_the_same_seed_gives_the_same_datasets_whatever_the_batch():
    """8 toys of ~1k events (Poisson sizes), serial (tightly converged MIGRAD) and in batches of
    8 and 3 (a short last batch): the same datasets, values within 1e-3 of the error, fmin
    within 1e-6 relative; rows that differ only by batching are equal to 1e-9."""
    model, loss = _gauss_exp_study("seed")
    serial = run_toys(model, loss, n_toys=8, seed=4, minimizer=Minuit(tol=1e-5), progress=False)
    b16 = run_toys(model, loss, n_toys=8, seed=4, batch=8, progress=False)
    b5 = run_toys(model, loss, n_toys=8, seed=4, batch=3, progress=False)
    assert serial.seed == b16.seed == 4
    np.testing.assert_array_equal(serial.table["nevents"], b16.table["nevents"])
    assert len(set(serial.table["nevents"])) > 4
    assert b16.table["valid"].all() and not b16.table["refit"].any()
    for name in serial.names:
        assert np.max(np.abs(b16.table[name] - serial.table[name]) / serial.table[f"{name}_err"]) < 1e-3
        np.testing.assert_allclose(b5.table[name], b16.table[name], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b16.table["fmin"], serial.table["fmin"], rtol=1e-6)
    assert {p.name: float(p) for p in loss.params} == serial.truth  # parameters back at the truth


@pytest.mark.slow  # 27 s: toys refitted with MIGRAD
def test_a_toy_at_a_limit_is_refitted_with_migrad_and_flagged():
    """The signal mean's upper limit sits 0.3 sigma above the truth: the toys whose minimum lies
    beyond it cannot converge in the batch; they are refitted with MIGRAD, one by one, flagged."""
    model, loss = _gauss_exp_study("lim")
    mu = next(p for p in loss.params if p.name == "mu_lim")
    mu.upper = 5.0 + 0.3 * 0.6 / np.sqrt(300.0)
    toys = run_toys(model, loss, n_toys=12, seed=8, batch=12, progress=False)
    refit = toys.table["refit"]
    assert 0 < refit.sum() < 12
    serial = run_toys(model, loss, n_toys=12, seed=8, progress=False)
    np.testing.assert_array_equal(toys.table[mu.name][refit], serial.table[mu.name][refit])


def test_batch_must_be_a_positive_whole_number():
    model, loss = _gauss_exp_study("bad", n=200)
    for bad in (0, -3, 2.5):
        with pytest.raises(ToyStudyError, match="batch"):
            run_toys(model, loss, n_toys=2, batch=bad)
    with pytest.raises(ToyStudyError, match="factory"):
        run_toys(model, loss, n_toys=2, client=object())


@pytest.mark.slow  # the session's 2-worker Dask cluster, a worker killed and replaced
def test_a_dask_study_equals_the_one_in_process_and_survives_a_dead_worker(dask_client, tmp_path):
    """A 2-worker LocalCluster (processes): the same rows as the in-process batched study. One
    worker is killed while it runs its first chunk: that chunk runs again, no toy is lost."""
    marker = str(tmp_path / "killed")

    def factory():
        import os
        import threading
        import time as _time

        try:  # the first worker to build the study dies 2 s later, mid-chunk (once)
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            threading.Thread(target=lambda: (_time.sleep(2.0), os._exit(1)), daemon=True).start()
        except FileExistsError:
            pass
        return _gauss_exp_study("dask")

    model, loss = _gauss_exp_study("dask")
    local = run_toys(model, loss, n_toys=16, seed=6, batch=8, progress=False)
    workers = set(dask_client.scheduler_info()["workers"])
    try:
        remote = run_toys(model, loss, n_toys=16, seed=6, batch=8, chunk=8, client=dask_client, factory=factory,
                          progress=False)
    finally:
        if __import__("os").path.exists(marker):  # a worker was told to die: the cluster is the session's
            wait_for_replaced_worker(dask_client, workers)
    assert __import__("os").path.exists(marker)
    assert len(remote.table) == 16 and remote.info["distributed"]
    for name in ("nevents", "valid", "refit", *local.names):
        np.testing.assert_allclose(remote.table[name], local.table[name], rtol=1e-10)


@pytest.mark.slow  # the session's 2-worker Dask cluster (started by the first test to use it)
def test_a_factory_that_cannot_be_pickled_is_refused_by_name(dask_client):
    import threading

    lock = threading.Lock()
    model, loss = _gauss_exp_study("pickle", n=200)
    with pytest.raises(ToyStudyError, match="cannot be sent to the workers"):
        run_toys(model, loss, n_toys=2, batch=2, client=dask_client, factory=lambda: (lock, model, loss))


@pytest.mark.slow  # serial and batched studies (compiles the batched fit)
def test_batched_and_serial_toys_agree_near_a_yield_limit():
    """Issue 23.2: a small signal (nsig = 3, limit 0): many toys end at or near the limit. Serial
    (MIGRAD) and batched studies report the same values, the same errors (the curvature of the
    loss in the parameters themselves, one definition for both) and the same validity, and no
    toy is dropped from the pulls as invalid."""
    model, loss = _gauss_exp_study("small", n=300)
    for p in loss.params:
        p.floating = not p.name.startswith(("mu", "sigma"))  # a search at a known mass: no look-elsewhere
    next(p for p in loss.params if p.name == "nsig_small").set_value(3.0)
    serial = run_toys(model, loss, n_toys=12, seed=21, minimizer=Minuit(tol=1e-5), progress=False)
    batched = run_toys(model, loss, n_toys=12, seed=21, batch=12, minimizer=Minuit(tol=1e-5), progress=False)
    values = serial.table["nsig_small"]
    assert np.sum(values < 1e-3) >= 2 and np.sum((values > 1e-3) & (values < 3.0)) >= 2  # at and near the limit
    assert serial.table["valid"].all() and batched.table["valid"].all()
    for name in serial.names:
        err = serial.table[f"{name}_err"]
        assert np.all(np.isfinite(err)) and np.all(err > 0)
        assert np.max(np.abs(batched.table[name] - serial.table[name]) / err) < 2e-3, name
        np.testing.assert_allclose(batched.table[f"{name}_err"], err, rtol=2e-3, err_msg=name)
    assert set(serial.pull_summary()) == set(serial.names)


def test_invalid_toys_left_out_of_pulls_are_counted_in_a_warning():
    """Issue 23.1: pull_summary and coverage leave invalid toys out, never silently."""
    from zcache.exceptions import ZCacheWarning

    table = np.zeros(4, dtype=[("mu", "f8"), ("mu_err", "f8"), ("mu_pull", "f8"), ("valid", "?"), ("refit", "?"),
                               ("time", "f8")])
    table["mu_pull"] = [0.5, -1.5, 0.2, 9.0]
    table["valid"] = [True, True, True, False]
    toys = ToyResult(table, {"mu": 0.0})
    with pytest.warns(ZCacheWarning, match="1 of 4 toys"):
        assert toys.pull_summary()["mu"][0] == pytest.approx(np.mean([0.5, -1.5, 0.2]))
    with pytest.warns(ZCacheWarning, match="1 of 4 toys"):
        assert toys.coverage()["mu"][1.0][0] == pytest.approx(2 / 3)
    assert "3 valid" in str(toys)  # the summary says it in its first line, without a warning


@pytest.mark.slow  # the session's 2-worker Dask cluster (started by the first test to use it)
def test_the_local_cluster_listens_on_localhost_only(dask_client):
    """Issue 23.10: make toys / bench_toys' LocalCluster opens no port to the network."""
    from urllib.parse import urlparse

    info = dask_client.scheduler_info()
    assert urlparse(dask_client.scheduler.address).hostname == "127.0.0.1"
    assert all(urlparse(addr).hostname == "127.0.0.1" for addr in info["workers"])
    assert urlparse(dask_client.dashboard_link).hostname == "127.0.0.1"
