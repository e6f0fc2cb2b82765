"""The objective between losses and minimizers: values, offset, memo, Hessian, state; finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

import zcache
from zcache._engine.finite_differences import central_differences, central_points, default_step, forward_point
from zcache.exceptions import FitError
from zcache.loss import Objective, UnbinnedNLL
from zcache.models import Gaussian, Space

SPACE = Space("x", -6.0, 6.0)
X = np.random.default_rng(11).normal(0.3, 1.2, 400)


def _nll(mu: float, sigma: float) -> float:
    """The reference: -sum log of a Gaussian truncated to SPACE, with scipy."""
    norm = scipy.stats.norm.cdf(6.0, mu, sigma) - scipy.stats.norm.cdf(-6.0, mu, sigma)
    return float(-np.sum(scipy.stats.norm.logpdf(X, mu, sigma) - np.log(norm)))


def _objective(**kwargs):
    mu = zcache.Parameter("mu_o", 0.1, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_o", 1.0, lower=0.1, upper=5.0)
    loss = UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(X))
    return loss.objective(**kwargs), (mu, sigma), loss


@pytest.mark.parametrize("mode", [True, False], ids=["graph", "eager"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_values_are_relative_to_the_first_and_match_scipy(mode):
    with zcache.set_graph_mode(mode):
        obj, (mu, sigma), _ = _objective()
        assert isinstance(obj, Objective) and obj.names == ["mu_o", "sigma_o"]
        np.testing.assert_array_equal(obj.start, [0.1, 1.0])
        assert obj.value(obj.start) == 0.0 and obj.offset == pytest.approx(_nll(0.1, 1.0), rel=1e-12)
        x = np.array([0.3, 1.2])
        value, grad = obj.value_gradient(x)
        assert value == pytest.approx(_nll(0.3, 1.2) - _nll(0.1, 1.0), rel=1e-9, abs=1e-9)
        assert obj.value(x) == pytest.approx(value, rel=1e-12)
        h = 1e-6
        numeric = [(_nll(0.3 + h, 1.2) - _nll(0.3 - h, 1.2)) / (2 * h), (_nll(0.3, 1.2 + h) - _nll(0.3, 1.2 - h)) / (2 * h)]
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)
        assert (float(mu), float(sigma)) == (0.3, 1.2)  # an evaluation sets the parameters


def test_points_are_clipped_into_the_limits_and_nan_points_give_nan():
    obj, (mu, _), _ = _objective()
    obj.value(obj.start)
    assert obj.value(np.array([5.0, 1.0])) == obj.value(np.array([2.0, 1.0]))
    assert float(mu) == 2.0
    assert np.isnan(obj.value(np.array([np.nan, 1.0])))
    assert np.isnan(obj.gradient(np.array([np.nan, 1.0]))).all()


def test_a_start_exactly_on_a_two_sided_limit_moves_a_hair_inside():
    obj, _, _ = _objective()
    mu = obj.params[0]
    mu.set_value(-2.0)
    again = obj.loss.objective()
    assert -2.0 < again.start[0] < -2.0 + 1e-5


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_a_non_finite_first_value_is_refused_and_the_parameters_put_back():
    mu = zcache.Parameter("mu_nf", 0.0)
    sigma = zcache.Parameter("sigma_nf", 1.0)
    loss = UnbinnedNLL(Gaussian(SPACE, mu, sigma), zcache.Data(X))
    obj = loss.objective(precompute=False)
    with pytest.raises(FitError, match="starting values"):
        obj.value(np.array([1000.0, 0.1]))  # no event anywhere near: the density underflows to 0
    assert (float(mu), float(sigma)) == (0.0, 1.0) and obj.offset is None


def test_the_memo_serves_gradients_only_inside_remembering():
    obj, _, loss = _objective()
    x = np.array([0.2, 1.1])
    calls = []
    original = loss.value_gradient_at

    def counting(*args, **kwargs):
        calls.append(args[0].tolist())
        return original(*args, **kwargs)

    loss.value_gradient_at = counting
    try:
        with obj.remembering():
            obj.value(obj.start)
            obj.value(x)
            g = obj.gradient(x)  # from the value's call
            assert len(calls) == 2
            h1 = obj.hessian(x)
            h2 = obj.hessian(x)  # kept
            np.testing.assert_array_equal(h1, h2)
        obj.gradient(x)  # the memo is gone: computed
        assert len(calls) >= 3
    finally:
        del loss.value_gradient_at
    np.testing.assert_allclose(g, obj.gradient(x), rtol=1e-12)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_hessian_against_central_differences_of_scipy():
    obj, _, _ = _objective()
    x = np.array([0.25, 1.15])
    h = 1e-4

    def f(a, b):
        return _nll(a, b)
    ref = np.empty((2, 2))
    ref[0, 0] = (f(x[0] + h, x[1]) - 2 * f(*x) + f(x[0] - h, x[1])) / h**2
    ref[1, 1] = (f(x[0], x[1] + h) - 2 * f(*x) + f(x[0], x[1] - h)) / h**2
    ref[0, 1] = ref[1, 0] = (f(x[0] + h, x[1] + h) - f(x[0] + h, x[1] - h) - f(x[0] - h, x[1] + h)
                             + f(x[0] - h, x[1] - h)) / (4 * h * h)
    np.testing.assert_allclose(obj.hessian(x), ref, rtol=1e-4)


def test_snapshot_puts_the_state_back_and_restores():
    obj, (mu, sigma), loss = _objective()
    obj.value(obj.start)
    obj.finish(np.array([0.3, 1.2]))
    state = obj.snapshot(fval=-1.0)
    mu.set_value(1.0)
    data = loss.datasets()[0]
    data.set_data(X[:100])
    with state.active():
        assert (float(mu), float(sigma)) == (0.3, 1.2) and data.numpy().shape == (400,)
    assert float(mu) == 1.0 and data.numpy().shape == (100,)
    assert state.offset == obj.offset and state.fval == -1.0


def test_bad_params_are_refused():
    obj, (mu, _), loss = _objective()
    with pytest.raises(FitError, match="unique"):
        loss.objective([mu, zcache.Parameter("mu_o", 0.0)])
    with pytest.raises(TypeError):
        loss.objective([mu, 1.0])
    with pytest.raises(FitError, match="No floating"):
        loss.objective([])


# -- finite differences ----------------------------------------------------------------------
def test_central_points_are_one_sided_at_a_limit_numpy_and_tensorflow():
    import tensorflow as tf

    assert central_points(1.0, 0.1, 0.0, 1.05) == (1.05, 0.9)
    up, down = central_points(tf.constant(0.0, tf.float64), 0.1, 0.0, np.inf)
    assert (float(up), float(down)) == (0.1, 0.0)
    assert float(default_step(tf.constant(-3.0, tf.float64))) == pytest.approx(3.0 * np.finfo(float).eps ** (1 / 3))


def test_central_differences_divide_by_the_distance_stepped():
    x = np.array([1.0, 0.0])

    def f(k, v):
        y = x.copy()
        y[k] = v
        return np.array([y[0] ** 3 + 2 * y[1], y[0] * y[1]])

    cols = central_differences(f, x, [1e-5, 1e-5], [-np.inf, 0.0], [1.0, np.inf])  # both at a limit
    np.testing.assert_allclose(cols[0], [3.0, 0.0], rtol=1e-4)
    np.testing.assert_allclose(cols[1], [2.0, 1.0], rtol=1e-9)


def test_forward_point_steps_down_where_there_is_no_room_up():
    x = np.array([[0.5, 1.0], [0.5, 0.2]])
    h = np.array([[0.0, 0.1], [0.0, 0.1]])
    point = forward_point(x, h, np.array([0.0, 0.0]), np.array([1.0, 1.0]), axis=1)
    np.testing.assert_allclose(point, [[0.5, 0.9], [0.5, 0.3]])


# -- the errors at the minimum: what the minimizer asks the objective (issue 53) -------------------------
WIDE = Space("x", -30.0, 30.0)  # 20 sigma and more from every event: the truncation is far below the tolerances


def test_covariance_is_two_errordef_over_the_curvature_and_none_without_a_minimum():
    mu = zcache.Parameter("mu_ocov", 0.2)
    obj = UnbinnedNLL(Gaussian(WIDE, mu, 1.5), zcache.Data(X)).objective(precompute=False)  # differences: no 2nd-order trace
    # -sum log N(x; mu, 1.5) has the curvature n / 1.5^2 in mu; errordef 1/2: covariance 1.5^2 / n
    np.testing.assert_allclose(obj.covariance_at(np.array([0.2])), [[1.5**2 / len(X)]], rtol=1e-6)
    np.testing.assert_allclose(obj.covariance(np.array([[4.0, 1.0], [1.0, 3.0]])),
                               np.array([[3.0, -1.0], [-1.0, 4.0]]) / 11.0, rtol=1e-14)  # the 2x2 inverse
    assert obj.covariance(np.array([[1.0, 2.0], [2.0, 1.0]])) is None  # a saddle: no minimum, no errors


def test_the_weight_corrections_match_the_closed_forms_of_a_gaussian_mean():
    w = np.random.default_rng(12).uniform(0.2, 2.0, len(X))
    m = float(np.sum(w * X) / np.sum(w))  # the weighted fit's minimum in mu
    mu = zcache.Parameter("mu_ow", 0.0)
    obj = UnbinnedNLL(Gaussian(WIDE, mu, 1.5), zcache.Data(X, weights=w)).objective(precompute=False)
    best = np.array([m])
    plain = obj.covariance_at(best)
    np.testing.assert_allclose(plain, [[1.5**2 / w.sum()]], rtol=1e-6)
    # sumw2: H^-1 H_w2 H^-1 = 1.5^2 sum w^2 / (sum w)^2; asymptotic: H^-1 D H^-1 with
    # D = sum w^2 ((x - m) / 1.5^2)^2, i.e. sum w^2 (x - m)^2 / (sum w)^2
    sumw2, how = obj.corrected(best, plain, "sumw2")
    assert how == "sumw2"
    np.testing.assert_allclose(sumw2, [[1.5**2 * np.sum(w**2) / w.sum() ** 2]], rtol=1e-6)
    asymptotic, how = obj.corrected(best, plain, "asymptotic")
    assert how == "asymptotic"
    np.testing.assert_allclose(asymptotic, [[np.sum(w**2 * (X - m) ** 2) / w.sum() ** 2]], rtol=1e-5)
    assert float(mu) == m  # left at the minimum
    none, how = obj.corrected(best, plain, None)
    assert how is None and none is plain
    # weights all 1 need no correction, and say so
    ones = UnbinnedNLL(Gaussian(WIDE, mu, 1.5), zcache.Data(X, weights=np.ones(len(X)))).objective()
    same, how = ones.corrected(best, plain, "asymptotic")
    assert how is None and same is plain


def test_settled_offset_is_the_loss_at_the_start_when_no_call_set_it():
    obj, params, _ = _objective()
    assert obj.offset is None
    assert obj.settled_offset(np.array([0.3, 1.1])) == pytest.approx(_nll(0.1, 1.0), rel=1e-12)
    assert [float(p) for p in params] == [0.3, 1.1]  # left where the minimizer ended
    obj.offset = 5.0  # set by a call: kept
    assert obj.settled_offset(np.array([0.3, 1.1])) == 5.0


def test_a_loss_evaluated_in_parts_is_not_traced_whole():
    from zcache.scale import ChunkedLoss, Chunks

    obj, (mu, sigma), _ = _objective()
    assert obj.traces_whole
    chunked = ChunkedLoss(Gaussian(SPACE, mu, sigma), Chunks.from_array(X, 100))
    assert not chunked.objective(precompute=False).traces_whole
