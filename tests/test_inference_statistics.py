"""The test statistics of zcache.inference against the closed forms of a counting experiment."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from zcache.exceptions import InferenceError
from zcache.inference import TEST_STATISTICS, statistic


def _nll(n: float, s: float, b: float, mu: float) -> float:
    """-ln L of a Poisson count n with mean mu * s + b (up to a constant)."""
    return -float(stats.poisson.logpmf(n, mu * s + b)) if float(n).is_integer() else (mu * s + b) - n * np.log(mu * s + b)


@pytest.mark.parametrize(("s", "b"), [(5.0, 10.0), (20.0, 3.0), (1.0, 100.0)])
def test_q0_of_the_asimov_count_is_cowans_closed_form(s, b):
    n = s + b  # the Asimov count: mu_hat = 1
    q0 = statistic("q0", 0.0, mu_hat=1.0, nll_at_mu=_nll(n, s, b, 0.0), nll_free=_nll(n, s, b, 1.0))
    assert float(q0) == pytest.approx(2 * ((s + b) * np.log(1 + s / b) - s), rel=1e-12)


def test_errordef_one_takes_a_chi2_like_loss():
    a = statistic("t", 1.0, mu_hat=0.2, nll_at_mu=7.0, nll_free=5.0, errordef=0.5)
    b = statistic("t", 1.0, mu_hat=0.2, nll_at_mu=14.0, nll_free=10.0, errordef=1.0)
    assert float(a) == float(b) == 4.0


def test_one_sided_statistics_are_zero_on_the_other_side():
    mu_hat = np.array([-0.5, 0.5, 1.5, 2.5])
    at_mu, free = np.full(4, 9.0), np.full(4, 8.0)
    assert statistic("q0", 0.0, mu_hat=mu_hat, nll_at_mu=at_mu, nll_free=free).tolist() == [0.0, 2.0, 2.0, 2.0]
    assert statistic("q", 2.0, mu_hat=mu_hat, nll_at_mu=at_mu, nll_free=free).tolist() == [2.0, 2.0, 2.0, 0.0]
    assert statistic("t", 2.0, mu_hat=mu_hat, nll_at_mu=at_mu, nll_free=free).tolist() == [2.0] * 4


def test_tilde_statistics_compare_with_the_bound_when_mu_hat_is_below_it():
    # mu_hat < 0: the denominator is the conditional fit at 0 (Cowan et al. eqs. 10 and 16)
    q = statistic("qtilde", 1.0, mu_hat=-0.3, nll_at_mu=12.0, nll_free=9.0, nll_at_bound=10.0)
    t = statistic("ttilde", 1.0, mu_hat=-0.3, nll_at_mu=12.0, nll_free=9.0, nll_at_bound=10.0)
    assert float(q) == float(t) == 4.0
    # at or above the bound, they are q and t
    assert float(statistic("qtilde", 1.0, mu_hat=0.3, nll_at_mu=12.0, nll_free=9.0)) == 6.0


def test_a_conditional_minimum_below_the_free_one_counts_as_zero():
    assert float(statistic("t", 1.0, mu_hat=1.0, nll_at_mu=5.0 - 1e-9, nll_free=5.0)) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "qmu"}, "unknown test statistic"),
        ({"name": "qtilde", "mu_hat": -1.0}, "nll_at_bound"),
        ({"name": "t", "errordef": 0.0}, "errordef"),
    ],
)
def test_bad_input_is_a_named_error(kwargs, match):
    args = {"name": "t", "mu": 1.0, "mu_hat": 0.5, "nll_at_mu": 2.0, "nll_free": 1.0} | kwargs
    name = args.pop("name")
    mu = args.pop("mu")
    with pytest.raises(InferenceError, match=match):
        statistic(name, mu, **args)


def test_the_names_are_the_five_of_the_paper():
    assert set(TEST_STATISTICS) == {"t", "ttilde", "q0", "q", "qtilde"}
