"""zcache.scale (BatchedLoss, BatchedFit): a loss along a toy axis and the batched minimizer, against the serial loss,
MIGRAD and numdifftools."""

from __future__ import annotations

import numdifftools as nd
import numpy as np
import pytest
import scipy.stats as st
import tensorflow as tf
from helpers import gauss_exp_study

import zcache
from zcache.exceptions import BatchingError, ModelError, WeightSumError
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import FunctionPdf, Gaussian, Space
from zcache.scale import BatchedLoss


def _gauss_exp(tag: str, n: int = 1000):
    return gauss_exp_study(tag, n, seed=11)


def _toys(model, sizes, seed=5):
    zcache.models.set_seed(seed)
    return [model.sample(int(k)).numpy() for k in sizes]


def _assert_equal_to_the_serial_loss(loss, params, datasets, x, f, g):
    """Each toy's batched value and gradient equal the serial loss on its events alone."""
    for b, d in enumerate(datasets):
        loss.data.set_data(d)
        zcache.set_values(params, x[b])
        value, grad = loss.value_gradient(params)
        assert f[b] == pytest.approx(float(value), rel=1e-12)
        np.testing.assert_allclose(g[b], grad.numpy(), rtol=1e-9, atol=1e-9)


def _padded(datasets, rows):
    events = np.stack([np.concatenate([d, np.full(rows - len(d), d[-1])]) for d in datasets])
    weights = np.stack([np.concatenate([np.ones(len(d)), np.zeros(rows - len(d))]) for d in datasets])
    return events, weights


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "eager"])
@pytest.mark.slow  # 6-7 s a case (test_weighted_data_keep_their_weights_per_toy checks per-toy values fast)
def test_value_and_gradient_equal_the_serial_loss_on_padded_toys(graph):
    """Each toy's value and gradient (toys of different sizes, padded with weight 0) equal the
    serial loss on that toy's events alone, in either mode of the serial loss."""
    model, loss, params = _gauss_exp("vg")
    rng = np.random.default_rng(1)
    datasets = _toys(model, [900, 1000, 1100, 950])
    x = np.array([float(p) for p in params]) * rng.uniform(0.9, 1.1, size=(4, len(params)))
    events, weights = _padded(datasets, 1152)
    f, g, ok = BatchedLoss(loss, params).value_and_gradient(x, events, weights)
    assert ok.all()
    with zcache.set_graph_mode(graph):
        _assert_equal_to_the_serial_loss(loss, params, datasets, x, f, g)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_weighted_data_keep_their_weights_per_toy():
    """A loss on weighted data: each toy's weights replace them (w_i log p_i summed)."""
    mu = zcache.Parameter("mu_w", 0.2, lower=-2.0, upper=2.0)
    model = Gaussian(Space("x", -4.0, 4.0), mu, 1.0)
    rng = np.random.default_rng(2)
    loss = UnbinnedNLL(model, zcache.Data(rng.normal(size=50), obs="x", weights=rng.uniform(0.5, 1.5, 50)))
    events = rng.normal(size=(3, 40))
    weights = rng.uniform(-0.5, 2.0, size=(3, 40))
    f, g, ok = BatchedLoss(loss, [mu]).value_and_gradient(np.array([[0.1], [0.2], [0.3]]), events, weights)
    z = st.norm.cdf(4.0 - np.array([0.1, 0.2, 0.3])) - st.norm.cdf(-4.0 - np.array([0.1, 0.2, 0.3]))
    expected = [-np.sum(weights[b] * (st.norm.logpdf(events[b], m) - np.log(z[b])))
                for b, m in enumerate([0.1, 0.2, 0.3])]
    np.testing.assert_allclose(f, expected, rtol=1e-12)
    assert ok.all()


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_a_failed_check_flags_its_toy_and_raises_nothing():
    mu = zcache.Parameter("mu_chk", 0.0)
    model = Gaussian(Space("x", -4.0, 4.0), mu, 1.0)
    loss = UnbinnedNLL(model, zcache.Data(np.zeros(5), obs="x"))
    events = np.zeros((3, 5))
    events[1, 2] = 9.0  # outside the space
    f, _, ok = BatchedLoss(loss, [mu]).value_and_gradient(np.zeros((3, 1)), events)
    assert ok.tolist() == [True, False, True]
    assert np.isfinite(f[[0, 2]]).all()


@pytest.mark.slow  # 26 s: 16 batched fits, 6 MIGRAD fits
def test_batched_fits_equal_migrad_and_numdifftools():
    """16 toys of ~1k events: values within 1e-3 of the error of a tightly converged MIGRAD fit,
    fmin within 1e-6 relative (to 1e-9 here), errors equal to numdifftools' Hessian."""
    model, loss, params = _gauss_exp("fit")
    truth = np.array([float(p) for p in params])
    datasets = _toys(model, np.random.default_rng(3).poisson(1000, 16))
    events, weights = _padded(datasets, max(len(d) for d in datasets))
    fit = BatchedLoss(loss, params).minimize(truth, events, weights)
    assert fit.converged.all() and fit.checks_ok.all()
    assert (fit.nfcn < 40).all()
    minuit = Minuit(tol=1e-5)
    for b in range(0, 16, 3):
        loss.data.set_data(datasets[b])
        zcache.set_values(params, truth)
        r = minuit.minimize(loss, params)
        values = np.array([r.values[p.name] for p in params])
        errors = np.array([r.errors[p.name] for p in params])
        assert np.max(np.abs(fit.values[b] - values) / errors) < 1e-3
        assert fit.fmin[b] == pytest.approx(r.fmin, rel=1e-9)
    zcache.set_values(params, truth)
    # Independent reference for the errors: numdifftools on a numpy NLL of the last toy.
    x = datasets[15]

    def nll(p):
        mu, sigma, lam, ns, nb = p
        g = st.norm.pdf(x, mu, sigma) / (st.norm.cdf(10.0, mu, sigma) - st.norm.cdf(0.0, mu, sigma))
        e = lam * np.exp(lam * x) / np.expm1(lam * 10.0)
        return -np.sum(np.log(ns * g + nb * e)) + ns + nb

    cov = 2 * 0.5 * np.linalg.inv(nd.Hessian(nll)(fit.values[15]))
    np.testing.assert_allclose(fit.errors[15], np.sqrt(np.diag(cov)), rtol=5e-5)
    assert fit.fmin[15] == pytest.approx(nll(fit.values[15]), rel=1e-12)


@pytest.mark.slow  # 18 s: compiles the batched minimizer
def test_a_toy_that_cannot_converge_is_flagged():
    """One BFGS step is not enough: no toy is called converged."""
    model, loss, params = _gauss_exp("nc")
    truth = np.array([float(p) for p in params])
    datasets = _toys(model, [1000] * 3)
    fit = BatchedLoss(loss, params).minimize(truth * 1.05, np.stack(datasets), maxiter=1, hinv=np.eye(5))
    assert not fit.converged.any()


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_caches_that_no_toy_input_reaches_are_read_once_not_recomputed():
    """Only the yields float: the shapes' normalizations depend on fixed parameters only; the
    batched evaluation reads them through their caches (no miss), and the values are right."""
    model, loss, params = _gauss_exp("inv")
    for p in params[:3]:
        p.floating = False
    yields = params[3:]
    datasets = _toys(model, [1000] * 4)
    batched = BatchedLoss(loss, yields)
    x = np.tile([300.0, 700.0], (4, 1))
    batched.value_and_gradient(x, np.stack(datasets))
    objs = batched.served_caches
    assert objs, "the fixed-shape normalizations should be served from their caches"
    misses = [o.stats["misses"] for o in objs]
    f, _, _ = batched.value_and_gradient(x * 1.1, np.stack(datasets))
    assert [o.stats["misses"] for o in objs] == misses  # hits only
    loss.data.set_data(datasets[2])
    zcache.set_values(yields, x[2] * 1.1)
    assert f[2] == pytest.approx(float(loss.value()), rel=1e-12)


def test_a_model_tensorflow_cannot_vectorize_is_refused_by_name():
    mu = zcache.Parameter("mu_py", 0.0)
    space = Space("x", -3.0, 3.0)

    def shape(x, mu):
        return tf.numpy_function(lambda a, m: np.exp(-0.5 * (a - m) ** 2), [x, mu], tf.float64)

    model = FunctionPdf(shape, space, {"mu": mu})
    loss = UnbinnedNLL(model, zcache.Data(np.zeros(4), obs="x"))
    with pytest.raises(BatchingError, match="vectorize"):
        BatchedLoss(loss, [mu]).value_and_gradient(np.zeros((2, 1)), np.zeros((2, 4)))


def test_bad_input_gets_named_errors():
    mu = zcache.Parameter("mu_badb", 0.0)
    loss = UnbinnedNLL(Gaussian(Space("x", -3.0, 3.0), mu, 1.0), zcache.Data(np.zeros(4), obs="x"))
    with pytest.raises(ModelError, match="at least one parameter"):
        BatchedLoss(loss, [])
    with pytest.raises(ModelError, match="single-dataset"):
        BatchedLoss(loss + loss, [mu])
    batched = BatchedLoss(loss, [mu])
    with pytest.raises(ModelError, match="shape"):
        batched.value_and_gradient(np.zeros((2, 2)), np.zeros((2, 4)))
    with pytest.raises(ModelError, match="events must have shape"):
        batched.value_and_gradient(np.zeros((2, 1)), np.zeros((2, 4, 3)))
    with pytest.raises(ModelError, match="maxiter"):
        batched.minimize(np.zeros(1), np.zeros((2, 4)), maxiter=0)
    weights = np.ones((2, 4))
    weights[1] = [1.0, -1.0, 0.0, 0.0]  # issue 23: a toy whose weights sum to 0 (a flat likelihood)
    with pytest.raises(WeightSumError, match=r"toy\(s\) \[1\]"):
        batched.value_and_gradient(np.zeros((2, 1)), np.zeros((2, 4)), weights)


@pytest.mark.slow  # 22 s: a Dalitz model; test_caches_that_no_toy_input_reaches_... is the fast check of served caches
def test_an_amplitude_model_batches_and_its_integrals_are_served():
    """zcache.amplitude unchanged: a Dalitz model with K*(892) and K0*(1430) (couplings floating)
    evaluates per toy as the serial loss does; the phase-space integrals, which no toy input
    reaches, are read from their caches (no miss)."""
    from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance

    kin = DalitzKinematics(1.86966, 0.493677, 0.13957, 0.13957, names=("K-", "pi+", "pi+"))
    kstar = Resonance(kin, ("12", "13"), mass=0.8955, width=0.0473, spin=1, name="Kst_b")
    k0 = Resonance(kin, ("12", "13"), mass=1.425, width=0.27, spin=0, name="K0_b")
    amp = CoherentSum([(ComplexParameter("c_nr_b", 1.0, floating=False), NonResonant(kin)),
                       (ComplexParameter("c_kst_b", 0.3 + 0.2j), kstar), (ComplexParameter("c_k0_b", 0.5 - 0.1j), k0)])
    pdf = AmplitudePdf(amp, kin.sample(5_000, name="mc_b"))
    zcache.models.set_seed(3)
    loss = UnbinnedNLL(pdf, pdf.sample(400))
    params = loss.params
    toys = [pdf.sample(400).numpy() for _ in range(2)]
    x = np.array([[float(p) for p in params]] * 2) * np.array([[1.0], [1.03]])
    batched = BatchedLoss(loss, params)
    f, g, ok = batched.value_and_gradient(x, np.stack(toys))
    served = batched.served_caches
    # the integral matrix is served whole (the entries below it are read through it)
    assert "I[mc_b]" in {c.name for c in served}
    misses = [c.stats["misses"] for c in served]
    batched.value_and_gradient(x[::-1], np.stack(toys))
    assert [c.stats["misses"] for c in served] == misses
    assert ok.all()
    _assert_equal_to_the_serial_loss(loss, params, toys, x, f, g)


def test_batched_calls_inside_a_users_tf_function_are_refused_by_name():
    """BatchedLoss and run_toys run compiled programs and write Python-side state: inside a trace
    they raise IllegalInGraphModeError naming themselves, not a TensorFlow error."""
    from zcache.exceptions import IllegalInGraphModeError
    from zcache.toys import run_toys

    mu = zcache.Parameter("mu_tf", 0.0)
    model = Gaussian(Space("x", -3.0, 3.0), mu, 1.0)
    loss = UnbinnedNLL(model, zcache.Data(np.zeros(4), obs="x"))
    batched = BatchedLoss(loss, [mu])

    @tf.function
    def values():
        return batched.value_and_gradient(np.zeros((2, 1)), np.zeros((2, 4)))[0]

    @tf.function
    def study():
        return run_toys(model, loss, n_toys=2, n_events=4, batch=2).table["mu_tf"]

    with pytest.raises(IllegalInGraphModeError, match="BatchedLoss.value_and_gradient"):
        values()
    with pytest.raises(IllegalInGraphModeError, match="run_toys"):
        study()
    assert float(mu) == 0.0


@pytest.mark.slow  # about 18 CPU seconds (CONTRIBUTING.md, "Test times")
def test_pinned_parameters_give_each_toy_its_own_conditional_fit():
    """A profile scan in one program: mu pinned per row (its normalization cache is then a toy
    input, recomputed per row), the rest fitted; each row equals MIGRAD with mu fixed there."""
    model, loss, params = _gauss_exp("pin", n=800)
    mu, rest = params[0], params[1:]
    truth = np.array([float(p) for p in rest])
    scan = np.array([4.6, 4.9, 5.0, 5.3])
    events = np.tile(loss.data.numpy(), (len(scan), 1))
    batched = BatchedLoss(loss, rest)
    fit = batched.minimize(truth, events, pinned={mu: scan})
    assert fit.checks_ok.all() and fit.converged.all()
    f, _, _ = batched.value_and_gradient(fit.values, events, pinned={mu: scan})
    np.testing.assert_allclose(f, fit.fmin, rtol=1e-12)
    assert float(mu) == 5.0  # the pinned values were passed in, not written
    for b, m in enumerate(scan):
        with zcache.set_values([mu, *rest], [m, *truth]):
            mu.floating = False
            try:
                r = Minuit(tol=1e-5).minimize(loss, rest)
            finally:
                mu.floating = True
        assert fit.fmin[b] == pytest.approx(r.fmin, rel=1e-9)
        errors = np.array([r.errors[p.name] for p in rest])
        values = np.array([r.values[p.name] for p in rest])
        assert np.max(np.abs(fit.values[b] - values) / errors) < 2e-3


def test_bad_pinned_values_are_named_errors_and_change_nothing():
    model, loss, params = _gauss_exp("pinbad", n=100)
    mu, rest = params[0], params[1:]
    batched = BatchedLoss(loss, rest)
    x = np.array([[float(p) for p in rest]] * 2)
    events = np.tile(loss.data.numpy(), (2, 1))
    with pytest.raises(ModelError, match="outside its limits"):
        batched.value_and_gradient(x, events, pinned={mu: [5.0, 9.0]})
    with pytest.raises(ModelError, match="outside its limits"):
        batched.value_and_gradient(x, events, pinned={mu: [5.0, np.nan]})
    with pytest.raises(ModelError, match="one of the fitted parameters"):
        batched.value_and_gradient(x, events, pinned={rest[0]: 1.0})
    with pytest.raises(ModelError, match="not a parameter of the loss"):
        batched.value_and_gradient(x, events, pinned={zcache.Parameter("other_pinbad", 1.0): 1.0})
    with pytest.raises(ModelError, match="one value per toy"):
        batched.value_and_gradient(x, events, pinned={mu: [5.0, 5.1, 5.2]})
    assert float(mu) == 5.0


# == the active set: a toy whose minimum lies beyond a limit ===================================
def test_reduced_inverse_hessian_is_the_inverse_of_the_other_parameters_block():
    """Against numpy: the inverse of the Hessian without the held rows and columns, zeros there;
    a row with nothing held keeps its inverse Hessian bit for bit."""
    from zcache._fitting.batched_bfgs import reduced_inverse_hessian

    rng = np.random.default_rng(7)
    a = rng.normal(size=(6, 4, 4))
    hess = a @ np.transpose(a, (0, 2, 1)) + 0.5 * np.eye(4)
    held = np.array([[True, False, False, False], [False, True, False, True], [False] * 4,
                     [True, True, True, False], [False, False, True, False], [True] * 4])
    hinv = np.linalg.inv(hess)
    out = reduced_inverse_hessian(tf.constant(hinv), tf.constant(held)).numpy()
    for b in range(6):
        free = ~held[b]
        want = np.zeros((4, 4))
        if free.any():
            want[np.ix_(free, free)] = np.linalg.inv(hess[b][np.ix_(free, free)])
        np.testing.assert_allclose(out[b], want, rtol=1e-10, atol=1e-12)
    assert np.array_equal(out[2], hinv[2])


def test_active_set_holds_a_parameter_on_its_limit_and_leaves_other_rows_alone():
    """Two correlated bowls, one centred beyond the lower limit of x0: with the active set that
    row ends on the limit at the analytic constrained minimum (x1 = 1.5) in a few steps; the
    row inside the limits takes the same steps with and without it."""
    from zcache._fitting.batched_bfgs import lockstep_bfgs

    a = tf.constant([[2.0, 1.0], [1.0, 2.0]], tf.float64)
    centre = tf.constant([[1.0, -2.0], [-1.0, 2.0]], tf.float64)

    def vg(x):
        d = x - centre
        ad = tf.einsum("ij,bj->bi", a, d)
        return tf.reduce_sum(d * ad, axis=1), 2.0 * ad, tf.ones([2], tf.bool)

    args = (tf.constant([[0.5, 0.5], [0.5, 0.5]], tf.float64), tf.eye(2, batch_shape=[2], dtype=tf.float64),
            tf.constant([0.0, -10.0], tf.float64), tf.constant([10.0, 10.0], tf.float64), tf.constant(200),
            tf.constant(1e-5, tf.float64))
    held = [t.numpy() for t in lockstep_bfgs(vg, *args, active_set=True)]
    plain = [t.numpy() for t in lockstep_bfgs(vg, *args)]
    for h, p in zip(held, plain, strict=True):  # x, f, hess, edm, ok, converged, nfcn: row 0 identical
        assert np.array_equal(h[0], p[0])
    np.testing.assert_allclose(held[0][0], [1.0, -2.0], atol=1e-8)
    np.testing.assert_allclose(held[0][1], [0.0, 1.5], atol=1e-8)
    assert held[6][1] < 20
    assert not held[5][1]  # on a limit the whole problem's EDM is not small: not converged, as before


@pytest.mark.slow  # 20 s: compiles the batched minimizer
def test_a_toy_fitted_beyond_the_limit_stops_on_it_at_the_conditional_minimum():
    """Background-only toys fitted with nsig >= 0 free: rows whose nsig ends on its limit hold
    the other parameters at MIGRAD's minimum with nsig fixed at 0, within steps of the others'
    convergence (without the active set such rows stepped into the limit until the line search
    stalled: up to ~130 evaluations in a batch of 128, measured)."""
    model, loss, params = _gauss_exp("lim", n=400)
    mu, sigma, lam, nsig, nbkg = params
    with zcache.set_values([nsig, nbkg], [0.0, 400.0]):
        datasets = _toys(model, [400] * 12, seed=9)
    fitted = [nsig, nbkg, lam]
    start = np.array([5.0, 400.0, float(lam)])
    events = np.stack(datasets)
    fit = BatchedLoss(loss, fitted).minimize(start, events)
    on_limit = fit.values[:, 0] == 0.0
    assert on_limit.sum() >= 3 and (~on_limit).sum() >= 3  # both kinds of row are tested
    assert fit.checks_ok.all() and not fit.converged[on_limit].any() and fit.converged[~on_limit].all()
    assert fit.nfcn.max() < 30
    for b in np.flatnonzero(on_limit):
        loss.data.set_data(datasets[b])
        with zcache.set_values(fitted, [0.0, 400.0, float(lam)]):
            nsig.floating = False
            try:
                r = Minuit(tol=1e-5).minimize(loss, [nbkg, lam])
            finally:
                nsig.floating = True
        errors = np.array([r.errors[p.name] for p in (nbkg, lam)])
        values = np.array([r.values[p.name] for p in (nbkg, lam)])
        assert np.max(np.abs(fit.values[b, 1:] - values) / errors) < 2e-3
        assert fit.fmin[b] == pytest.approx(r.fmin, rel=1e-9)


def test_covariances_of_a_stack_equal_each_rows_inverse_and_flag_the_indefinite():
    """HESSE's 2 errordef H^-1 row by row (numpy's inverse of each matrix alone), all rows
    positive definite (one call for the stack) and with an indefinite row (NaN there)."""
    from zcache._fitting.batched_bfgs import covariances

    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 3, 3))
    hess = a @ np.transpose(a, (0, 2, 1)) + 0.1 * np.eye(3)
    for stack, bad in ((hess, []), (np.concatenate([hess, [np.diag([1.0, -1.0, 1.0])]]), [5])):
        cov, errors, posdef = covariances(stack, 0.5)
        assert posdef.tolist() == [b not in bad for b in range(len(stack))]
        for b in range(len(stack)):
            if b in bad:
                assert np.isnan(cov[b]).all() and np.isnan(errors[b]).all()
                continue
            want = np.linalg.inv(stack[b])  # errordef 0.5: 2 * 0.5 * H^-1
            np.testing.assert_allclose(cov[b], want, rtol=1e-12)
            np.testing.assert_allclose(errors[b], np.sqrt(np.diag(want)), rtol=1e-12)


# == without HESSE: a scan point's minimum, MIGRAD's verdict ===================================
def test_without_hesse_the_edm_and_flag_are_bfgs_own():
    """One BFGS step from the identity on two quadratic bowls, by hand in numpy: the step, the
    BFGS update of the inverse Hessian V, EDM = g^T V g / 2 at the new point, converged where
    that is below edm_max (one row is, one is not), the Hessian returned is V^-1, and no
    evaluation beyond the start and the step (HESSE would add n + 1)."""
    from zcache._fitting.batched_bfgs import lockstep_bfgs

    a = np.array([[0.3, 0.1], [0.1, 0.2]])  # 2a's eigenvalues in (0, 1): the unit step is accepted
    centre = np.array([[1.0, -2.0], [0.5, 0.3]])
    x0 = np.zeros((2, 2))

    def vg(x):
        d = x - tf.constant(centre)
        ad = tf.einsum("ij,bj->bi", tf.constant(a), d)
        return tf.reduce_sum(d * ad, axis=1), 2.0 * ad, tf.ones([2], tf.bool)

    # by hand
    g0 = 2.0 * (x0 - centre) @ a
    x1 = x0 - g0                                # V = 1, step 1
    f0 = np.einsum("bi,ij,bj->b", x0 - centre, a, x0 - centre)
    f1 = np.einsum("bi,ij,bj->b", x1 - centre, a, x1 - centre)
    assert np.all(f1 <= f0 + 1e-4 * np.sum(g0 * (x1 - x0), axis=1))  # Armijo: accepted
    g1 = 2.0 * (x1 - centre) @ a
    edm, v = [], []
    for b in range(2):
        s, y = x1[b] - x0[b], g1[b] - g0[b]
        rho = 1.0 / (s @ y)
        left = np.eye(2) - rho * np.outer(s, y)
        vb = left @ left.T + rho * np.outer(s, s)
        v.append(vb)
        edm.append(0.5 * g1[b] @ vb @ g1[b])
    edm = np.array(edm)
    edm_max = np.sqrt(edm[0] * edm[1])          # between the two: one row converges, the other not
    assert edm[1] < edm_max < min(edm[0], 0.5 * np.sum(g0 * g0, axis=1).min())  # neither done at the start
    out = lockstep_bfgs(vg, tf.constant(x0), tf.eye(2, batch_shape=[2], dtype=tf.float64),
                        tf.constant([-10.0, -10.0], tf.float64), tf.constant([10.0, 10.0], tf.float64),
                        tf.constant(1), tf.constant(edm_max, tf.float64), hesse=False)
    x, f, hess, got_edm, ok, converged, nfcn = (t.numpy() for t in out)
    np.testing.assert_allclose(x, x1, rtol=1e-12)
    np.testing.assert_allclose(f, f1, rtol=1e-12)
    np.testing.assert_allclose(got_edm, edm, rtol=1e-10)
    np.testing.assert_allclose(hess, np.linalg.inv(v), rtol=1e-10)
    assert ok.all() and converged.tolist() == [False, True] and nfcn.tolist() == [2, 2]
    with_hesse = lockstep_bfgs(vg, tf.constant(x0), tf.eye(2, batch_shape=[2], dtype=tf.float64),
                               tf.constant([-10.0, -10.0], tf.float64), tf.constant([10.0, 10.0], tf.float64),
                               tf.constant(1), tf.constant(edm_max, tf.float64))
    assert with_hesse[6].numpy().tolist() == [5, 5]


@pytest.mark.exhaustive  # CI's 25 minutes; the hesse=False scans are checked against iminuit in test_inference_scans
def test_without_hesse_minima_equal_the_hesse_path_within_the_bound():
    """Conditional fits of pinned rows with and without HESSE: both converged, the minima equal
    within MIGRAD's bound (the loss within edm_max, the values within sqrt(edm_max / errordef)
    errors, x1.5 for BFGS's estimate of the EDM), fewer evaluations, and the reported EDM is
    BFGS's at the returned point (below the bound)."""
    model, loss, params = _gauss_exp("nohesse", n=800)
    mu, rest = params[0], params[1:]
    truth = np.array([float(p) for p in rest])
    scan = np.array([4.6, 4.9, 5.0, 5.3])
    events = np.tile(loss.data.numpy(), (len(scan), 1))
    batched = BatchedLoss(loss, rest)
    edm_max = 0.002 * 0.1 * float(loss.errordef)
    full = batched.minimize(truth, events, pinned={mu: scan}, edm_max=edm_max)
    fast = batched.minimize(truth, events, pinned={mu: scan}, edm_max=edm_max, hesse=False)
    assert full.converged.all() and fast.converged.all()
    assert np.all(fast.edm < edm_max) and np.all(fast.nfcn < full.nfcn)
    assert np.all(fast.fmin - full.fmin <= 1.5 * edm_max) and np.all(fast.fmin - full.fmin >= -1e-3 * edm_max)
    pulls = np.abs(fast.values - full.values) / full.errors
    assert pulls.max() < 1.5 * np.sqrt(edm_max / float(loss.errordef))
    # its EDM is 0.5 g^T V g with its own covariance V = cov / (2 errordef), at its minimum
    f, g, _ = batched.value_and_gradient(fast.values, events, pinned={mu: scan})
    np.testing.assert_allclose(f, fast.fmin, rtol=1e-12)
    v = fast.covariance / (2.0 * float(loss.errordef))
    np.testing.assert_allclose(0.5 * np.einsum("bi,bij,bj->b", g, v, g), fast.edm, rtol=1e-6)
    # and its errors are MIGRAD-like estimates: within 20 % of HESSE's
    np.testing.assert_allclose(fast.errors, full.errors, rtol=0.2)


@pytest.mark.exhaustive  # CI's 25 minutes; scan_fits is checked against iminuit by test_inference_scans' grid in passes
def test_scan_fits_on_one_dataset_equal_minimize_per_toy_and_migrad():
    """scan_fits (one dataset, chunks in one program) takes the steps minimize(hesse=False) takes on the
    same rows given as toys: the same minima and evaluations, with 5 rows in chunks of 2 (a last chunk
    padded), in a program sized for 7 rows; each row's minimum is MIGRAD's with mu fixed there. With
    maxiter=0 a row is evaluated once at its start (converged only when it is at the minimum already)."""
    model, loss, params = _gauss_exp("scanfits", n=600)
    mu, rest = params[0], params[1:]
    truth = np.array([float(p) for p in rest])
    scan = np.array([4.7, 4.9, 5.0, 5.2, 5.3])
    events = loss.data.numpy()
    batched = BatchedLoss(loss, rest)
    edm_max = 0.002 * 0.1 * float(loss.errordef)
    hinv = batched.start_hinv(truth, events)
    per_toy = batched.minimize(truth, np.tile(events, (len(scan), 1)), pinned={mu: scan}, edm_max=edm_max,
                               hinv=hinv, hesse=False)
    fit = batched.scan_fits(np.tile(truth, (len(scan), 1)), events, None, {mu: scan}, hinv=hinv, edm_max=edm_max,
                            chunk=2, capacity=7)
    assert fit.converged.all() and fit.checks_ok.all()
    np.testing.assert_allclose(fit.values, per_toy.values, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fit.fmin, per_toy.fmin, rtol=1e-12)
    np.testing.assert_array_equal(fit.nfcn, per_toy.nfcn)
    for b, m in enumerate(scan):
        with zcache.set_values([mu, *rest], [m, *truth]):
            mu.floating = False
            try:
                r = Minuit(tol=1e-5).minimize(loss, rest)
            finally:
                mu.floating = True
        assert fit.fmin[b] - r.fmin == pytest.approx(0.0, abs=1.5 * edm_max)
    # at the minima: one evaluation each, nothing moved, converged where the EDM with the start's
    # inverse Hessian (not BFGS's updated one) is below the bound
    again = batched.scan_fits(fit.values, events, None, {mu: scan}, hinv=hinv, edm_max=edm_max, chunk=2, capacity=7,
                              maxiter=0)
    np.testing.assert_array_equal(again.values, fit.values)
    assert again.nfcn.tolist() == [1] * len(scan)
    f, g, _ = batched.value_and_gradient(fit.values, np.tile(events, (len(scan), 1)), pinned={mu: scan})
    edm = 0.5 * np.einsum("bi,ij,bj->b", g, hinv, g)
    np.testing.assert_allclose(again.fmin, f, rtol=1e-12)
    np.testing.assert_allclose(again.edm, edm, rtol=1e-9)
    np.testing.assert_array_equal(again.converged, edm < edm_max)
    assert again.converged.any()
    # far from them: not converged, and still not moved (no step)
    away = batched.scan_fits(np.tile(truth * 1.3, (2, 1)), events, None, {mu: scan[:2]}, hinv=hinv,
                             edm_max=edm_max, chunk=2, capacity=7, maxiter=0)
    assert not away.converged.any()
    np.testing.assert_array_equal(away.values, np.clip(np.tile(truth * 1.3, (2, 1)), batched._lower, batched._upper))
    assert float(mu) == 5.0
    with pytest.raises(ModelError, match="capacity"):
        batched.scan_fits(np.tile(truth, (9, 1)), events, None, {mu: 5.0}, hinv=hinv, edm_max=edm_max, chunk=2,
                          capacity=7)
    with pytest.raises(ModelError, match="chunk"):
        batched.scan_fits(np.tile(truth, (2, 1)), events, None, {mu: 5.0}, hinv=hinv, edm_max=edm_max, chunk=0,
                          capacity=7)
    with pytest.raises(ModelError, match="outside its limits"):
        batched.scan_fits(np.tile(truth, (2, 1)), events, None, {mu: [5.0, 99.0]}, hinv=hinv, edm_max=edm_max,
                          chunk=2, capacity=7)
    assert float(mu) == 5.0
