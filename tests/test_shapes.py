"""zcache.shapes: line shapes against scipy / numpy references (densities, integrals, gradients, sampling, fits)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import iminuit
import iminuit.cost
import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats
import tensorflow as tf
from helpers import traced

import zcache
from zcache.exceptions import ModelError, ParameterValueError
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Space, set_seed
from zcache.shapes import ARGUS, CrystalBall, DoubleCrystalBall, JohnsonSU, Voigtian, faddeeva

KS_MIN_P = 1e-3  # fixed seeds: the draws are deterministic, the threshold only has to be sane
RTOL = 1e-10


# == independent references (numpy / scipy only) ================================================
def cb_numpy(x, mu, sigma, alpha, n):
    """Crystal Ball written out as in the literature: A (B - t)^-n below -|alpha|, Gaussian above."""
    x = np.asarray(x, float)
    t = np.sign(alpha) * (x - mu) / sigma
    a = abs(alpha)
    big_a = (n / a) ** n * np.exp(-0.5 * a * a)
    big_b = n / a - a
    tail = big_a * (big_b - np.minimum(t, -a)) ** (-n)  # B - t >= n / |alpha| > 0 where used
    return np.where(t < -a, tail, np.exp(-0.5 * t * t))


def cb_scipy(x, mu, sigma, alpha, n):
    """scipy.stats.crystalball (left tail, needs n > 1); a right tail (alpha < 0) by mirroring x."""
    x = np.asarray(x, float)
    return scipy.stats.crystalball.pdf(x if alpha > 0 else 2.0 * mu - x, abs(alpha), n, loc=mu, scale=sigma)


def dcb_numpy(x, mu, sigma, alphal, nl, alphar, nr):
    """zfit's DoubleCB: a left Crystal Ball below mu, a right one (alpha -> -alphar) above."""
    x = np.asarray(x, float)
    return np.where(x < mu, cb_numpy(x, mu, sigma, alphal, nl), cb_numpy(x, mu, sigma, -alphar, nr))


def argus_numpy(x, m0, c, p):
    """RooArgusBG: x (1 - (x/m0)^2)^p exp(c (1 - (x/m0)^2)) below m0, else 0."""
    x = np.asarray(x, float)
    u = np.clip(1.0 - (x / m0) ** 2, 1e-300, None)
    return np.where(x < m0, x * u**p * np.exp(c * u), 0.0)


def argus_scipy(x, m0, c, p):
    """scipy.stats.argus (p = 0.5) with chi^2 = -2c, x scaled by m0 (other p: the gradient test's
    differences in p, by the numpy formula)."""
    if p != 0.5:
        return argus_numpy(x, m0, c, p)
    return scipy.stats.argus.pdf(np.asarray(x, float), math.sqrt(-2.0 * c), scale=m0)


def voigt_scipy(x, mu, sigma, gamma):
    return scipy.special.voigt_profile(np.asarray(x, float) - mu, sigma, gamma)


def johnson_scipy(x, mu, lambd, gamma, delta):
    return scipy.stats.johnsonsu.pdf(np.asarray(x, float), gamma, delta, loc=mu, scale=lambd)


@dataclasses.dataclass
class Case:
    """A shape at one parameter point, with its reference density (unnormalized is fine)."""

    id: str
    cls: type
    lo: float
    hi: float
    params: dict
    ref: Callable
    points: Callable  # params -> break points of the density (junctions, peaks) for quad
    sample: bool = True
    singular_end: bool = False  # ARGUS with p < 0: integrable singularity at m0

    def model(self, floating: bool = True, **extra):
        pars = {k: zcache.Parameter(f"{self.id}_{k}", v, floating=floating) for k, v in self.params.items()}
        return self.cls(Space("x", self.lo, self.hi), **pars, **extra), pars

    def pdf(self, x, **override):
        return self.ref(x, **{**self.params, **override})

    def integral(self, a, b, **override):
        """quad of the reference over [a, b] (inside the space), to ~1e-13 relative."""
        values = {**self.params, **override}
        f = lambda v: float(self.ref(np.array([v]), **values)[0])  # noqa: E731
        inner = sorted(q for q in self.points(values) if a < q < b)
        if self.singular_end and a < values["m0"] <= b:
            # ARGUS with p < 0: x u^p e^{cu} = (m0 - x)^p * x ((m0 + x) / m0^2)^p e^{cu}, the first
            # factor by quad's algebraic weight, the rest smooth
            m0, c, p = values["m0"], values["c"], values["p"]

            def smooth(v):
                return v * ((m0 + v) / m0**2) ** p * np.exp(c * (1.0 - (v / m0) ** 2))

            out = scipy.integrate.quad(smooth, a, m0, weight="alg", wvar=(0.0, p), epsabs=0.0, epsrel=1e-13,
                                       limit=400, full_output=1)
        else:
            out = scipy.integrate.quad(f, a, b, points=inner or None, epsabs=0.0, epsrel=1e-13, limit=400,
                                       full_output=1)
        value, err = out[0], out[1]
        assert err <= 1e-11 * abs(value) + 1e-300, (self.id, a, b, value, err)
        return value

    def norm(self, **override):
        return self.integral(self.lo, self.hi, **override)


def _cb_points(q):
    return [q["mu"], q["mu"] - q["alpha"] * q["sigma"]]


def _dcb_points(q):
    return [q["mu"], q["mu"] - q["alphal"] * q["sigma"], q["mu"] + q["alphar"] * q["sigma"]]


def _voigt_points(q):
    w = 5.0 * (q["sigma"] + q["gamma"])
    return [q["mu"] - w, q["mu"], q["mu"] + w]


CASES = [
    Case("cb_left", CrystalBall, -10.0, 5.0, dict(mu=0.3, sigma=0.8, alpha=1.3, n=2.5), cb_scipy, _cb_points),
    Case("cb_right", CrystalBall, -5.0, 25.0, dict(mu=0.5, sigma=1.2, alpha=-1.1, n=4.0), cb_scipy, _cb_points),
    Case("cb_n_near_1", CrystalBall, -30.0, 5.0, dict(mu=0.0, sigma=1.0, alpha=0.8, n=1.0 + 1e-7), cb_scipy,
         _cb_points),
    Case("cb_n_1", CrystalBall, -30.0, 5.0, dict(mu=0.0, sigma=1.0, alpha=0.8, n=1.0), cb_numpy, _cb_points),
    Case("cb_n_below_1", CrystalBall, -20.0, 4.0, dict(mu=0.1, sigma=0.9, alpha=1.5, n=0.6), cb_numpy, _cb_points,
         sample=False),
    Case("cb_steep", CrystalBall, -40.0, 5.0, dict(mu=0.0, sigma=1.0, alpha=2.0, n=40.0), cb_scipy, _cb_points,
         sample=False),
    Case("cb_tail_only", CrystalBall, -60.0, -3.0, dict(mu=0.0, sigma=1.0, alpha=1.0, n=3.0), cb_scipy, _cb_points,
         sample=False),
    Case("dcb", DoubleCrystalBall, -10.0, 10.0, dict(mu=0.2, sigma=1.1, alphal=1.2, nl=3.0, alphar=2.0, nr=1.0),
         dcb_numpy, _dcb_points),
    Case("dcb_asym", DoubleCrystalBall, -15.0, 30.0, dict(mu=-0.5, sigma=0.7, alphal=0.5, nl=20.0, alphar=1.5,
                                                          nr=1.5), dcb_numpy, _dcb_points, sample=False),
    Case("argus_scipy", ARGUS, 5.0, 5.3, dict(m0=5.29, c=-8.0, p=0.5), argus_scipy, lambda q: [q["m0"]]),
    Case("argus_steep", ARGUS, 0.0, 1.0, dict(m0=1.0, c=-40.0, p=0.5), argus_scipy, lambda q: [q["m0"]],
         sample=False),
    Case("argus_far_from_end", ARGUS, 0.0, 0.3, dict(m0=1.0, c=-40.0, p=0.5), argus_scipy, lambda q: [q["m0"]],
         sample=False),  # every u*|c| > p + 1: the incomplete gammas must be taken from above (Q)
    Case("argus_power", ARGUS, 0.0, 1.2, dict(m0=1.0, c=-3.0, p=1.7), argus_numpy, lambda q: [q["m0"]]),
    Case("argus_rising", ARGUS, 0.2, 1.1, dict(m0=1.0, c=2.5, p=0.5), argus_numpy, lambda q: [q["m0"]],
         sample=False),
    Case("argus_flat", ARGUS, 0.0, 1.0, dict(m0=0.95, c=-0.4, p=0.3), argus_numpy, lambda q: [q["m0"]],
         sample=False),
    Case("argus_singular", ARGUS, 0.0, 1.0, dict(m0=1.0, c=-5.0, p=-0.5), argus_numpy, lambda q: [q["m0"]],
         sample=False, singular_end=True),
    Case("voigt", Voigtian, -10.0, 10.0, dict(mu=0.2, sigma=1.0, gamma=0.5), voigt_scipy, _voigt_points),
    Case("voigt_narrow", Voigtian, 0.99, 1.06, dict(mu=1.0195, sigma=0.002, gamma=0.00213), voigt_scipy,
         _voigt_points),
    Case("voigt_gauss", Voigtian, -15.0, 15.0, dict(mu=0.0, sigma=1.0, gamma=0.01), voigt_scipy, _voigt_points,
         sample=False),
    Case("voigt_lorentz", Voigtian, -50.0, 50.0, dict(mu=1.0, sigma=0.05, gamma=2.0), voigt_scipy, _voigt_points,
         sample=False),
    Case("johnson", JohnsonSU, -20.0, 20.0, dict(mu=0.5, lambd=2.0, gamma=-0.4, delta=1.3), johnson_scipy,
         lambda q: [q["mu"]]),
    Case("johnson_skew", JohnsonSU, -5.0, 60.0, dict(mu=0.0, lambd=1.0, gamma=-2.0, delta=0.5), johnson_scipy,
         lambda q: [q["mu"], q["mu"] + 10.0]),
    Case("johnson_upper", JohnsonSU, 3.0, 10.0, dict(mu=0.0, lambd=1.0, gamma=1.0, delta=1.0), johnson_scipy,
         lambda q: []),
    # far in the upper tail (1 - CDF ~ 1e-27): sampling must invert from the small side
    Case("johnson_far_tail", JohnsonSU, 1e4, 1e5, dict(mu=0.0, lambd=1.0, gamma=1.0, delta=1.0), johnson_scipy,
         lambda q: []),
]
BY_ID = {c.id: c for c in CASES}
GRADIENT_CASES = ["cb_left", "cb_right", "cb_n_1", "dcb", "argus_scipy", "argus_power", "argus_rising",
                  "voigt", "johnson"]
SAMPLE_CASES = [c.id for c in CASES if c.sample]


#: the first case of each shape: the only ones whose graph-mode copies run in the fast loop
#: (each graph case traces, ~0.7 s)
FIRST_CASES = {next(c.id for c in CASES if c.cls is cls) for cls in {c.cls for c in CASES}}


def cases(ids=None, modes=False, every_eager=True, fast=None, fast_graph=FIRST_CASES):
    """Parametrize ``case`` (those outside ``fast``, where given, marked slow); with ``modes``,
    ``case`` and conftest's ``mode`` (ids "graph-<case>", "eager-<case>"), where the fast loop
    (``-m "not slow"``) runs the graph copies of ``fast_graph`` cases only, and with
    ``every_eager=False`` (costly references) the eager copies of FIRST_CASES only."""
    chosen = CASES if ids is None else [BY_ID[i] for i in ids]
    if not modes:
        return pytest.mark.parametrize("case", [
            pytest.param(c, id=c.id, marks=[pytest.mark.slow] if fast is not None and c.id not in fast else [])
            for c in chosen])

    def slow(c, graph):
        return c.id not in fast_graph if graph else (not every_eager and c.id not in FIRST_CASES)

    params = [pytest.param(c, m, id=f"{name}-{c.id}", marks=[pytest.mark.slow] if slow(c, m) else [])
              for name, m in (("graph", True), ("eager", False)) for c in chosen]
    return pytest.mark.parametrize(("case", "mode"), params, indirect=["mode"])


def grid(case):
    """Points across the space, the junctions and peaks (and 1e-12 either side), both ends."""
    pts = list(np.linspace(case.lo, case.hi, 401))
    for q in case.points(case.params):
        pts += [q - 1e-12, q, q + 1e-12]
    pts = np.array(sorted(p for p in pts if case.lo <= p <= case.hi))
    return pts


# == densities ====================================================================================
@cases(modes=True)
def test_pdf_matches_reference(case, mode):
    """pdf (traced or eager) equals the reference renormalized over the space by quad, ~1e-10 relative."""
    model, _ = case.model()
    x = grid(case)
    data = zcache.Data(x, obs="x")
    ours = traced(lambda: model.pdf(data))().numpy()
    ref = case.pdf(x) / case.norm()
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=0.0)
    assert np.all(np.isfinite(ours))


@cases()
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_normalization_and_sub_intervals(case):
    """integrate() over the space is 1; integrate(a, b) equals quad of the reference over [a, b] / norm."""
    model, _ = case.model()
    assert float(model.integrate()) == pytest.approx(1.0, abs=1e-8)
    z = case.norm()
    cuts = sorted({case.lo, case.hi, *np.linspace(case.lo, case.hi, 5)[1:-1],
                   *(q for q in case.points(case.params) if case.lo < q < case.hi)})
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        np.testing.assert_allclose(float(model.integrate(a, b)), case.integral(a, b) / z, rtol=1e-9, atol=1e-15)


@cases(modes=True, every_eager=False)  # eager: 0.5 s a case (24 bins' integrals, quad)
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_integral_broadcasts_over_bin_edges(case, mode):
    """_integral(lower_edges, upper_edges) with 1-D tensors equals the per-bin integrals and quad."""
    model, _ = case.model()
    edges = np.linspace(case.lo, case.hi, 25)
    lo_t, hi_t = tf.constant(edges[:-1]), tf.constant(edges[1:])
    vec = traced(lambda: model._integral(lo_t, hi_t))().numpy()
    assert vec.shape == (24,)
    per_bin = np.array([float(model._integral(a, b)) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    np.testing.assert_allclose(vec, per_bin, rtol=1e-13, atol=1e-300)
    norm = float(model.normalization())
    ref = np.array([case.integral(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]) / case.norm()
    np.testing.assert_allclose(vec / norm, ref, rtol=1e-9, atol=1e-14)
    assert vec.sum() / norm == pytest.approx(1.0, rel=1e-12)


# == gradients ====================================================================================
def _ref_loglik(case, x, values):
    return float(np.sum(np.log(case.ref(x, **values))) - x.size * math.log(case.norm(**values)))


def _gradient_points(case):
    rng = np.random.default_rng(11)
    # ARGUS: events below the end point, not so close that the differences' steps in m0 reach them
    hi = min(case.hi, case.params.get("m0", np.inf) - 0.02 * (case.hi - case.lo))
    x = rng.uniform(case.lo, hi, 150)
    # Not at the junctions: the second derivative jumps there, which the differences' error
    # would feel (test_value_and_gradient_finite_at_junctions_and_far_tails covers them).
    ends = [case.lo] if case.pdf(np.array([case.lo]))[0] > 0.0 else []  # ARGUS vanishes at x = 0
    return np.concatenate([x, ends])


@cases(GRADIENT_CASES, modes=True, every_eager=False, fast_graph={"cb_left"})  # 1-6 s a case (differences of quad)
def test_gradient_of_sum_log_pdf(case, mode):
    """d sum_log_pdf / d parameter (traced or eager) against 4-point central differences of the reference."""
    model, pars = case.model()
    x = _gradient_points(case)
    data = zcache.Data(x, obs="x")
    names = list(pars)
    ours = traced(lambda: zcache.gradient(lambda: model.sum_log_pdf(data), [pars[k] for k in names]))().numpy()
    for k, got in zip(names, ours, strict=True):
        v0 = case.params[k]
        h = 1e-3 * max(abs(v0), 0.1) if k != "m0" else 1e-5
        f = [_ref_loglik(case, x, {**case.params, k: v0 + s * h}) for s in (-2, -1, 1, 2)]
        expected = (f[0] - 8.0 * f[1] + 8.0 * f[2] - f[3]) / (12.0 * h)
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-5), (k, got, expected)


@pytest.mark.parametrize(
    ("cls", "params", "space", "xs"),
    [
        (CrystalBall, dict(mu=0.0, sigma=1.0, alpha=1.0, n=2.0), (-1e4, 10.0), [-1.0, -1e4, 10.0, 0.0]),
        (CrystalBall, dict(mu=0.0, sigma=1.0, alpha=-1.0, n=1.0), (-10.0, 1e4), [1.0, 1e4, -10.0]),
        (CrystalBall, dict(mu=0.0, sigma=1.0, alpha=1e-9, n=1.0 + 1e-12), (-100.0, 10.0), [-1e-9, -100.0, 10.0]),
        (DoubleCrystalBall, dict(mu=0.0, sigma=1.0, alphal=1.0, nl=1.0, alphar=2.0, nr=60.0), (-1e3, 1e3),
         [-1.0, 2.0, 0.0, -1e3, 1e3]),
        (ARGUS, dict(m0=1.0, c=-30.0, p=0.5), (0.0, 2.0), [0.0, 1.0 - 1e-15, 1.0, 1.5]),
        (Voigtian, dict(mu=0.0, sigma=1.0, gamma=0.1), (-1e4, 1e4), [0.0, 8.0 * math.sqrt(2.0), -1e4, 1e4]),
        (JohnsonSU, dict(mu=0.0, lambd=1.0, gamma=0.5, delta=2.0), (-1e5, 1e5), [0.0, -1e5, 1e5]),
    ],
    ids=["cb_far", "cb_right_n1", "cb_alpha0", "dcb_edges", "argus_end", "voigt_far", "johnson_far"],
)
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_value_and_gradient_finite_at_junctions_and_far_tails(cls, params, space, xs):
    """pdf and its gradient (of sum pdf: ARGUS is 0 above m0) are finite at junctions, ends and far tails."""
    pars = {k: zcache.Parameter(f"fin_{k}", v) for k, v in params.items()}
    model = cls(Space("x", *space), **pars)
    data = zcache.Data(np.array(xs), obs="x")
    value, grad = zcache.value_and_gradient(lambda: model.pdf(data), list(pars.values()))
    assert np.all(np.isfinite(model.pdf(data).numpy())) and np.all(np.isfinite(grad.numpy())), grad
    if cls is not ARGUS:
        _, grad_log = zcache.value_and_gradient(lambda: model.sum_log_pdf(data), list(pars.values()))
        assert np.all(np.isfinite(grad_log.numpy())), grad_log
    # the integral's gradient too (what normalization contributes)
    edges = tf.constant(np.linspace(*space, 7))
    _, grad_int = zcache.value_and_gradient(lambda: model._integral(edges[:-1], edges[1:]), list(pars.values()))
    assert np.all(np.isfinite(grad_int.numpy())), grad_int


def test_crystal_ball_tail_integral_is_continuous_in_n_across_1():
    """The closed form's n = 1 limit (a logarithm) joins the power law smoothly: quad at n = 1 +- 1e-6."""
    base = BY_ID["cb_n_1"]
    # |1 - n| * log((1 + k s1) / (1 + k s2)) just below and above the series' switch at 1e-4
    for n in (1.0 - 1e-4, 1.0 - 2.5e-5, 1.0 - 1e-6, 1.0, 1.0 + 1e-9, 1.0 + 1e-6, 1.0 + 2.5e-5, 1.0 + 1e-4):
        model = CrystalBall(Space("x", base.lo, base.hi), 0.0, 1.0, 0.8, n)
        np.testing.assert_allclose(float(model.normalization()), base.norm(n=n), rtol=1e-12)


# == the Faddeeva function ========================================================================
def test_faddeeva_against_scipy_and_its_derivative():
    """w(z) vs scipy.special.wofz over both half-planes; dw/dz = -2 z w + 2i/sqrt(pi) by autodiff."""
    x = np.concatenate([-np.logspace(-3, 3, 60)[::-1], [0.0], np.logspace(-3, 3, 60)])
    for y in (1e-3, 0.05, 0.7, 3.0, 9.0, 200.0):
        z = x + 1j * y
        ref = scipy.special.wofz(z)
        ours = faddeeva(z).numpy()
        np.testing.assert_allclose(ours.real, ref.real, rtol=1e-11 if y < 0.01 else 1e-12, atol=0.0)
        np.testing.assert_allclose(ours.imag, ref.imag, rtol=1e-12, atol=1e-300)
    z_low = np.array([0.3 - 0.2j, -2.0 - 1.0j, 5.0 - 0.5j])
    np.testing.assert_allclose(faddeeva(z_low).numpy(), scipy.special.wofz(z_low), rtol=1e-12)
    xr = tf.constant(np.array([-12.0, -3.0, 0.0, 0.5, 7.9, 8.1, 40.0]))
    yr = tf.constant(np.full(7, 0.3))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([xr, yr])
        w = faddeeva(tf.complex(xr, yr))
        re, im = tf.math.real(w), tf.math.imag(w)
    zc = xr.numpy() + 1j * yr.numpy()
    dw = -2.0 * zc * scipy.special.wofz(zc) + 2j / math.sqrt(math.pi)
    # Cauchy-Riemann: d Re w / dx = Re w', d Im w / dx = Im w'
    np.testing.assert_allclose(tape.gradient(re, xr).numpy(), dw.real, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(tape.gradient(im, xr).numpy(), dw.imag, rtol=1e-9, atol=1e-14)


# == sampling =====================================================================================
# 1-4 s a case: the fast loop samples the first cases but the Voigtian's (4 s; the same sampler)
@cases(SAMPLE_CASES, fast=FIRST_CASES - {"voigt"})
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_sample_follows_truncated_reference(case):
    """A seeded sample lies in the space and passes a KS test against the reference CDF (quad)."""
    model, _ = case.model()
    set_seed(2024)
    x = np.sort(model.sample(4000).numpy().ravel())
    assert x.min() >= case.lo and x.max() <= case.hi
    # CDF at the sample points: 12-point Gauss-Legendre of the reference between neighbours
    # (tiny intervals: ~1e-15 each), over quad's integral of the whole space.
    knots = np.concatenate([[case.lo], x])
    t, w = np.polynomial.legendre.leggauss(12)
    half = 0.5 * np.diff(knots)[:, None]
    nodes = 0.5 * (knots[:-1] + knots[1:])[:, None] + half * t[None, :]
    cdf_at = np.cumsum((half * w[None, :] * case.pdf(nodes.ravel()).reshape(nodes.shape)).sum(axis=1))
    cdf_at /= case.norm()

    def cdf(v):
        return np.interp(v, x, cdf_at)  # exact at the sample points, all kstest evaluates

    assert scipy.stats.kstest(x, cdf).pvalue > KS_MIN_P


# == caching ======================================================================================
def _norm_cache(model):
    found = [c for c in model.__zcache_evaluate__() if c.name.endswith("normalization")]
    assert len(found) == 1
    return found[0]


SHAPE_PARAMETER = {"cb_left": "n", "dcb": "alphar", "argus_scipy": "c", "voigt": "gamma", "johnson": "delta"}


@cases(list(SHAPE_PARAMETER), modes=True, fast_graph={"cb_left"})  # graph: 1.2-2.4 s a case
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_set_value_never_stale_and_normalization_shared(case, mode):
    """After set_value the pdf equals the reference at the new value; the normalization is one cache for two datasets."""
    model, pars = case.model()
    x1 = grid(case)[::7]
    x2 = grid(case)[3::11]
    d1, d2 = zcache.Data(x1, obs="x"), zcache.Data(x2, obs="x")
    both = traced(lambda: (model.pdf(d1), model.pdf(d2)))
    norm = _norm_cache(model)
    norm.reset_stats()
    p1, p2 = (t.numpy() for t in both())
    np.testing.assert_allclose(p1, case.pdf(x1) / case.norm(), rtol=RTOL)
    assert norm.stats["misses"] == 0 and norm.stats["hits"] >= 1
    key = SHAPE_PARAMETER[case.id]
    new = case.params[key] * 1.1
    pars[key].set_value(new)
    p1_new, p2_new = (t.numpy() for t in both())
    assert not np.allclose(p1_new, p1)
    np.testing.assert_allclose(p1_new, case.pdf(x1, **{key: new}) / case.norm(**{key: new}), rtol=RTOL)
    np.testing.assert_allclose(p2_new, case.pdf(x2, **{key: new}) / case.norm(**{key: new}), rtol=RTOL)
    assert norm.stats["misses"] == 1  # recomputed once for both datasets
    before = dict(norm.stats)
    both()
    assert norm.stats["misses"] == before["misses"]  # nothing changed: all hits


# == bad input ====================================================================================
@pytest.mark.parametrize(
    ("cls", "params", "bad"),
    [
        (CrystalBall, dict(mu=0.0, sigma=1.0, alpha=1.0, n=2.0), ["sigma", "n"]),
        (DoubleCrystalBall, dict(mu=0.0, sigma=1.0, alphal=1.0, nl=2.0, alphar=1.0, nr=2.0), ["sigma", "nl", "nr"]),
        (Voigtian, dict(mu=0.0, sigma=1.0, gamma=1.0), ["sigma", "gamma"]),
        (JohnsonSU, dict(mu=0.0, lambd=1.0, gamma=0.0, delta=1.0), ["lambd", "delta"]),
        (ARGUS, dict(m0=1.0, c=-1.0, p=0.5), ["m0"]),
    ],
    ids=["cb", "dcb", "voigt", "johnson", "argus"],
)
def test_non_positive_widths_raise(cls, params, bad):
    """Zero or negative width-like parameters (numbers or Parameters) raise ParameterValueError."""
    space = Space("x", 0.0, 2.0)
    cls(space, **params)
    for key in bad:
        for value in (0.0, -1.0, zcache.Parameter(f"bad_{key}", -0.5)):
            with pytest.raises(ParameterValueError, match="positive|>"):
                cls(space, **{**params, key: value})


def test_other_bad_input():
    """Non-1-D or non-Space spaces raise ModelError; DCB alphas < 0, ARGUS p <= -1 or x < 0 are refused."""
    two_d = Space(["x", "y"], [0.0, 0.0], [1.0, 1.0])
    for make in (lambda s: CrystalBall(s, 0.5, 0.1, 1.0, 2.0), lambda s: DoubleCrystalBall(s, 0.5, 0.1, 1, 2, 1, 2),
                 lambda s: ARGUS(s, 1.0, -1.0), lambda s: Voigtian(s, 0.5, 0.1, 0.1),
                 lambda s: JohnsonSU(s, 0.5, 1.0, 0.0, 1.0)):
        with pytest.raises(ModelError, match="one-dimensional"):
            make(two_d)
        with pytest.raises(ModelError, match="Space"):
            make((0.0, 1.0))
    with pytest.raises(ParameterValueError, match=">= 0"):
        DoubleCrystalBall(Space("x", -1, 1), 0.0, 1.0, -0.5, 2.0, 1.0, 2.0)
    with pytest.raises(ParameterValueError, match="-1"):
        ARGUS(Space("x", 0, 1), 1.0, -1.0, p=-1.0)
    with pytest.raises(ModelError, match="x >= 0"):
        ARGUS(Space("x", -1.0, 1.0), 1.0, -1.0)


# == fit ==========================================================================================
@pytest.mark.slow  # 8.5 s: two fits
def test_crystal_ball_fit_recovers_truth_and_matches_iminuit():
    """An unbinned fit recovers the truth within 3 sigma and agrees with iminuit + scipy's reference."""
    lo, hi = -8.0, 4.0
    truth = dict(mu=0.2, sigma=0.9, alpha=1.2, n=3.0)
    set_seed(99)
    gen = CrystalBall(Space("x", lo, hi), **truth)
    x = gen.sample(5000).numpy().ravel()
    pars = {
        "mu": zcache.Parameter("fit_mu", 0.0, lower=-1.0, upper=1.0),
        "sigma": zcache.Parameter("fit_sigma", 1.2, lower=0.3, upper=3.0),
        "alpha": zcache.Parameter("fit_alpha", 1.0, lower=0.3, upper=4.0),
        "n": zcache.Parameter("fit_n", 4.0, lower=1.2, upper=30.0),
    }
    model = CrystalBall(Space("x", lo, hi), **pars)
    result = Minuit(tol=1e-6).minimize(UnbinnedNLL(model, zcache.Data(x, obs="x")))
    assert result.valid
    for k, p in pars.items():
        assert abs(result.values[p.name] - truth[k]) < 3.0 * result.errors[p.name], k

    def pdf(v, mu, sigma, alpha, n):
        ref = scipy.stats.crystalball(alpha, n, loc=mu, scale=sigma)
        return ref.pdf(v) / (ref.cdf(hi) - ref.cdf(lo))

    m = iminuit.Minuit(iminuit.cost.UnbinnedNLL(x, pdf), mu=0.0, sigma=1.2, alpha=1.0, n=4.0)
    m.limits = [(-1.0, 1.0), (0.3, 3.0), (0.3, 4.0), (1.2, 30.0)]
    m.tol = 1e-6
    m.migrad()
    m.hesse()
    assert m.valid
    for k, p in pars.items():
        assert abs(result.values[p.name] - m.values[k]) < 1e-3 * m.errors[k], (k, result.values[p.name], m.values[k])
        assert result.errors[p.name] == pytest.approx(m.errors[k], rel=1e-2)


# the incomplete-gamma branch and the series branch; about 3 CPU seconds each, slow (CONTRIBUTING.md, "Test times")
@pytest.mark.slow
@pytest.mark.parametrize("c0", [-22.0, -0.5])
def test_argus_exact_hessian_with_the_end_point_in_range(c0):
    """The end point m0 is the space's upper limit: P(a, s u) at u = 0 has an infinite second derivative
    in its argument, times (du/dc)^2 = 0. The exact Hessian of the loss (what MIGRAD's HESSE uses) must be
    finite and equal numdifftools' second derivative of the NLL (it was NaN: every ARGUS fit invalid)."""
    import numdifftools as nd

    c = zcache.Parameter(f"c_argus_h{int(-c0)}", c0, lower=-60.0, upper=5.0)
    model = ARGUS(Space("m", 5.2, 5.29), 5.29, c)
    set_seed(4)
    loss = UnbinnedNLL(model, model.sample(2000))
    zcache.precompute(loss)  # caches of c bypassed: hessian_at takes the exact (second-order autodiff) path
    exact = float(loss.hessian_at([c0], [c]).numpy()[0, 0])
    reference = nd.Derivative(lambda v: float(loss.value_at([v], [c])), n=2)(c0)
    assert np.isfinite(exact) and exact == pytest.approx(reference, rel=1e-5)
