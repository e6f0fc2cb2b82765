"""FitResult and ToyResult out: pickling keeps the numbers, to_dict / to_pandas / str / HTML."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pandas as pd
import pytest

import zcache
from zcache.exceptions import FitError
from zcache.loss import UnbinnedNLL
from zcache.minimize import FitResult, MinosError, Minuit, Scipy
from zcache.models import Gaussian, Space
from zcache.toys import ToyResult, run_toys

SPACE = Space("x", -5.0, 5.0)


@pytest.fixture(scope="module")
def fit():
    """A two-parameter Minuit fit with MINOS on one parameter: (result, loss, the fit's nfcn)."""
    mu = zcache.Parameter("mu_r", 0.3, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_r", 1.3, lower=0.2, upper=4.0)
    x = np.random.default_rng(7).normal(0.1, 1.1, 800)
    loss = UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(x[np.abs(x) < 5.0]))
    result = Minuit().minimize(loss)
    nfcn = result.nfcn  # MINOS adds to Minuit's count, not to the fit's
    result.minos("mu_r")
    return result, loss, nfcn


def _same_numbers(a: FitResult, b: FitResult) -> None:
    assert a.names == b.names and a.values == b.values and a.valid == b.valid
    np.testing.assert_array_equal(list(a.errors.values()), list(b.errors.values()))
    assert (a.fmin, a.edm, a.nfcn, a.ngrad, a.nhessian, a.time) == (b.fmin, b.edm, b.nfcn, b.ngrad, b.nhessian, b.time)
    np.testing.assert_array_equal(a.covariance, b.covariance)
    assert a.minos_errors == b.minos_errors and a.minimizer == b.minimizer


def test_pickle_round_trip_keeps_the_numbers(fit):
    """Values, errors, covariance, fmin, validity, names and MINOS survive; live objects do not."""
    result, _, _ = fit
    back = pickle.loads(pickle.dumps(result))
    _same_numbers(back, result)
    assert set(back.minos_errors) == {"mu_r"} and isinstance(back.minos_errors["mu_r"], MinosError)
    assert back.params is None and back.minuit is None and back.precompute is None
    assert str(back) == str(result) and back._repr_html_() == result._repr_html_()
    assert back.to_dict() == result.to_dict()
    # a second round trip is the same
    _same_numbers(pickle.loads(pickle.dumps(back)), result)
    # the original keeps its live objects
    assert result.minuit is not None and result.params is not None


def test_unpickled_result_refuses_minos_and_profile(fit):
    """MINOS and profiles need the live fit: a named FitError, not an AttributeError."""
    back = pickle.loads(pickle.dumps(fit[0]))
    with pytest.raises(FitError, match="pickled"):
        back.minos()
    with pytest.raises(FitError, match="pickled"):
        back.profile("mu_r")


def test_copy_keeps_live_objects_deepcopy_the_numbers(fit):
    """copy.copy is shallow (same Minuit); deepcopy goes through pickling's state."""
    result, _, _ = fit
    assert copy.copy(result).minuit is result.minuit
    deep = copy.deepcopy(result)
    _same_numbers(deep, result)
    assert deep.minuit is None


def test_to_dict_matches_the_minuit_object(fit):
    """to_dict holds the fit's values, errors, covariance, validity, call count and MINOS; JSON-ready.

    The errors are the curvature's (sqrt of the covariance's diagonal); Minuit's HESSE agrees to
    its own precision, and the Minuit object (for MINOS) starts from the same minimum.
    """
    result, loss, nfcn = fit
    m = result.minuit
    d = result.to_dict()
    assert d["names"] == list(m.parameters) == ["mu_r", "sigma_r"]
    errors = [d["errors"][n] for n in d["names"]]
    assert [d["values"][n] for n in d["names"]] == [result.values[n] for n in d["names"]]
    np.testing.assert_allclose([d["values"][n] for n in d["names"]], list(m.values), rtol=0, atol=1e-3 * min(errors))
    np.testing.assert_allclose(errors, np.sqrt(np.diag(d["covariance"])), rtol=1e-12)
    np.testing.assert_allclose(errors, list(m.errors), rtol=1e-3)
    np.testing.assert_allclose(d["covariance"], result.covariance, rtol=1e-15)
    assert d["valid"] is bool(m.valid) is True and d["nfcn"] == nfcn and d["edm"] == result.edm
    assert d["minimizer"] == "Minuit"
    me = m.merrors["mu_r"]
    shift = m.values["mu_r"] - result.values["mu_r"]  # the ends, as distances from the result's value
    assert d["minos"] == {"mu_r": {"lower": me.lower + shift, "upper": me.upper + shift, "valid": me.is_valid}}
    # fmin is the loss itself at the minimum (Minuit's fval is relative to the fit's offset)
    with zcache.set_values(result.params, [d["values"][n] for n in d["names"]]):
        assert d["fmin"] == pytest.approx(float(loss.value()), rel=1e-12)
    assert json.loads(json.dumps(d)) == d


def test_to_pandas_one_row(fit):
    """One row: value and error per parameter, MINOS where computed, fmin, valid."""
    result, _, nfcn = fit
    m = result.minuit
    df = result.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 1
    assert list(df.columns) == ["mu_r", "mu_r_err", "mu_r_minos_lower", "mu_r_minos_upper", "sigma_r",
                                "sigma_r_err", "fmin", "edm", "valid", "nfcn", "time"]
    row = df.iloc[0]
    for n in m.parameters:
        assert row[n] == result.values[n]
        assert row[f"{n}_err"] == result.errors[n] == pytest.approx(m.errors[n], rel=1e-3)
    shift = m.values["mu_r"] - result.values["mu_r"]
    assert row["mu_r_minos_lower"] == m.merrors["mu_r"].lower + shift
    assert row["mu_r_minos_upper"] == m.merrors["mu_r"].upper + shift
    assert bool(row["valid"]) and row["fmin"] == result.fmin and row["nfcn"] == nfcn
    pd.testing.assert_frame_equal(pickle.loads(pickle.dumps(result)).to_pandas(), df)


def test_str_and_html_show_every_parameter(fit):
    """The text table and the HTML table carry each name and value; MINOS columns once computed."""
    result, _, _ = fit
    text, page = str(result), result._repr_html_()
    assert "valid=True" in text and "minos lower" in text
    for n in result.names:
        assert n in text and n in page
        assert f"{result.values[n]:.6g}" in text and f"{result.values[n]:.6g}" in page
        assert f"{result.errors[n]:.3g}" in page
    assert page.startswith("<table>") and page.endswith("</table>") and "valid minimum" in page
    lines = text.splitlines()
    assert lines[1].split() == ["parameter", "value", "error", "minos", "lower", "minos", "upper"]


def test_html_escapes_names():
    """A parameter name is text, not markup."""
    result = FitResult(values={"a<b>": 1.0}, errors={"a<b>": 0.5}, valid=False, fmin=1.0, edm=0.1, nfcn=3,
                       ngrad=0, nhessian=0, covariance=None, params=None, time=0.0)
    page = result._repr_html_()
    assert "a&lt;b&gt;" in page and "<b>>" not in page and "INVALID" in page
    assert result.names == ["a<b>"] and result.minimizer == "Scipy" and result.to_dict()["covariance"] is None


@pytest.mark.slow  # 2.6 s: a scipy fit
def test_scipy_result_pickles():
    """A Scipy result (scipy's OptimizeResult as minuit) pickles to its numbers too."""
    mu = zcache.Parameter("mu_rs", 0.3, lower=-2.0, upper=2.0)
    x = np.random.default_rng(8).normal(0.0, 1.0, 400)
    result = Scipy().minimize(UnbinnedNLL(Gaussian(SPACE, mu, 1.0), zcache.Data(x)))
    back = pickle.loads(pickle.dumps(result))
    _same_numbers(back, result)
    assert back.minimizer == "Scipy" and back.minos_errors == {} and back.minuit is None


def test_toy_result_to_pandas_synthetic():
    """One row per toy, the table's columns, indexed by toy number."""
    table = np.zeros(3, dtype=[("mu", "f8"), ("mu_err", "f8"), ("mu_pull", "f8"), ("valid", "?"),
                               ("fmin", "f8"), ("nfcn", "i8"), ("nevents", "i8"), ("time", "f8")])
    table["mu"], table["valid"], table["nevents"] = [0.1, 0.2, 0.3], [True, False, True], [10, 11, 12]
    df = ToyResult(table, {"mu": 0.0}).to_pandas()
    assert list(df.columns) == list(table.dtype.names) and df.index.name == "toy"
    assert df["mu"].tolist() == [0.1, 0.2, 0.3] and df["valid"].tolist() == [True, False, True]
    assert df["nevents"].dtype == np.int64 and df.attrs["truth"] == {"mu": 0.0}


@pytest.mark.slow  # 2.5 s: toy fits (the synthetic table above is the fast check)
def test_toy_result_to_pandas_from_run_toys():
    """A real toy study: the frame equals the structured table row by row."""
    mu = zcache.Parameter("mu_rt", 0.0, lower=-1.0, upper=1.0)
    model = Gaussian(Space("x", -4.0, 4.0), mu, 1.0)
    loss = UnbinnedNLL(model, model.sample(100))
    toys = run_toys(model, loss, n_toys=3, n_events=100, seed=2)
    df = toys.to_pandas()
    assert len(df) == 3
    for name in toys.table.dtype.names:
        np.testing.assert_array_equal(df[name].to_numpy(), toys.table[name])
