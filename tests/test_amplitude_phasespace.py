"""zcache.amplitude: Dalitz ranges, area, invariants, helicity angles and phase-space sampling.

Every reference here is independent of the code under test: Dalitz boundaries from the
PDG's two-body energies, helicity angles from explicit four-vectors boosted in numpy,
uniform samples drawn by numpy's own accept-reject, marginal densities integrated numerically.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
import tensorflow as tf
from helpers import CHANNELS, box, inside_np, lam_np, pair_limits, total_sq, traced, uniform_np
from scipy.spatial.transform import Rotation

import zcache
from zcache.amplitude import DalitzKinematics, DalitzSpace, kallen
from zcache.exceptions import ModelError
from zcache.models import Space, set_seed

KS_MIN_P = 0.01  # fixed seeds: the draws are deterministic, the threshold only has to be sane

# D+ -> K- pi+ pi+ (two identical pions) and Lambda_c+ -> p K- pi+ (three different masses:
# catches any mix-up of a, b and c in a channel)
M_D, M_K, M_PI = 1.86966, 0.493677, 0.13957039
M_LC, M_P = 2.28646, 0.938272
DECAYS = {
    "D+->K-pi+pi+": (M_D, M_K, M_PI, M_PI),
    "Lc->pK-pi+": (M_LC, M_P, M_K, M_PI),
}


# -- independent numpy references (CHANNELS, lam_np, pair_limits, total_sq, inside_np, box and
# uniform_np: helpers.py, shared with test_amplitude_models.py) ----------------------------------------
def four_vectors(x, masses, seed=0):
    """Momenta (E, px, py, pz) of particles 1, 2, 3 in the parent's rest frame, randomly rotated."""
    m = masses
    s12, s13 = x[:, 0], x[:, 1]
    s23 = total_sq(masses) - s12 - s13
    big = m[0]
    e1 = (big**2 + m[1] ** 2 - s23) / (2 * big)
    e2 = (big**2 + m[2] ** 2 - s13) / (2 * big)
    e3 = (big**2 + m[3] ** 2 - s12) / (2 * big)
    k1, k2, k3 = (np.sqrt(e * e - mi * mi) for e, mi in ((e1, m[1]), (e2, m[2]), (e3, m[3])))
    cos12 = np.clip((k3**2 - k1**2 - k2**2) / (2 * k1 * k2), -1.0, 1.0)  # p3 = -(p1 + p2)
    zero = np.zeros_like(k1)
    v1 = np.stack([zero, zero, k1], axis=1)
    v2 = np.stack([k2 * np.sqrt(1 - cos12**2), zero, k2 * cos12], axis=1)
    rot = Rotation.random(len(x), random_state=seed)
    v1, v2 = rot.apply(v1), rot.apply(v2)
    v3 = -(v1 + v2)
    return (np.column_stack([e1, v1]), np.column_stack([e2, v2]), np.column_stack([e3, v3]))


def minkowski_sq(p):
    return p[:, 0] ** 2 - np.sum(p[:, 1:] ** 2, axis=1)


def boost_to_rest(p, frame):
    """Boost four-vectors ``p`` into the rest frame of ``frame`` (both (N, 4))."""
    beta = frame[:, 1:] / frame[:, :1]
    b2 = np.sum(beta * beta, axis=1, keepdims=True)
    gamma = 1.0 / np.sqrt(1.0 - b2)
    bp = np.sum(beta * p[:, 1:], axis=1, keepdims=True)
    energy = gamma * (p[:, :1] - bp)
    vec = p[:, 1:] + ((gamma - 1.0) * bp / b2 - gamma * p[:, :1]) * beta
    return np.column_stack([energy, vec])


def helicity_np(x, masses, channel):
    """cos(angle between a and c), |p_a| and |p_c| in the (ab) rest frame, from boosted four-vectors."""
    a, b, c = CHANNELS[channel]
    p = dict(zip((1, 2, 3), four_vectors(x, masses), strict=True))
    frame = p[a] + p[b]
    pa, pb, pc = (boost_to_rest(p[i], frame) for i in (a, b, c))
    np.testing.assert_allclose(pa[:, 1:] + pb[:, 1:], 0.0, atol=1e-12)  # really the pair's rest frame
    na, nc = np.linalg.norm(pa[:, 1:], axis=1), np.linalg.norm(pc[:, 1:], axis=1)
    return np.sum(pa[:, 1:] * pc[:, 1:], axis=1) / (na * nc), na, nc


def marginal_density(s, masses, channel):
    r"""Phase-space density of :math:`s_{ab}` (unnormalized): the length of the Dalitz plot at fixed s."""
    a, b, c = CHANNELS[channel]
    m = masses
    return np.sqrt(np.maximum(lam_np(s, m[a] ** 2, m[b] ** 2) * lam_np(m[0] ** 2, s, m[c] ** 2), 0.0)) / s


def marginal_cdf(masses, channel, density=marginal_density):
    """The normalized CDF of ``density`` on the channel's range (fine trapezoid grid, interpolated)."""
    a, b, c = CHANNELS[channel]
    m = masses
    grid = np.linspace((m[a] + m[b]) ** 2, (m[0] - m[c]) ** 2, 200_001)
    cum = scipy.integrate.cumulative_trapezoid(density(grid, masses, channel), grid, initial=0.0)
    return lambda s: np.interp(s, grid, cum / cum[-1])


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kins():
    return {name: DalitzKinematics(*m) for name, m in DECAYS.items()}


@pytest.fixture(scope="module")
def points():
    """Per decay: 2000 uniform events (numpy), and the same events' masses."""
    return {name: uniform_np(2000, m, seed=i) for i, (name, m) in enumerate(DECAYS.items())}


@pytest.fixture(scope="module")
def samples(kins):
    """Per decay: 20,000 events from DalitzKinematics.sample (seeded)."""
    out = {}
    for i, name in enumerate(DECAYS):
        set_seed(100 + i)
        out[name] = kins[name].sample(20_000).numpy()
    return out


# -- ranges and area --------------------------------------------------------------------------
def test_s_range_values():
    """s_range is [(m_a + m_b)^2, (M - m_c)^2] per channel (D+ -> K- pi+ pi+ numbers)."""
    kin = DalitzKinematics(M_D, M_K, M_PI, M_PI, names=("K-", "pi+", "pi+"))
    kpi = ((M_K + M_PI) ** 2, (M_D - M_PI) ** 2)
    assert kin.s_range("12") == pytest.approx(kpi, rel=1e-15)
    assert kin.s_range("13") == pytest.approx(kpi, rel=1e-15)
    assert kin.s_range("23") == pytest.approx(((2 * M_PI) ** 2, (M_D - M_K) ** 2), rel=1e-15)
    assert kin.s_range("12") == pytest.approx((0.4010022569, 2.9932100586), abs=1e-10)
    assert kin.s_range("23") == pytest.approx((0.0779195751, 1.8933292163), abs=1e-10)
    lc = DalitzKinematics(*DECAYS["Lc->pK-pi+"])
    assert lc.s_range("12") == pytest.approx(((M_P + M_K) ** 2, (M_LC - M_PI) ** 2), rel=1e-15)
    assert lc.s_range("13") == pytest.approx(((M_P + M_PI) ** 2, (M_LC - M_K) ** 2), rel=1e-15)
    assert lc.s_range("23") == pytest.approx(((M_K + M_PI) ** 2, (M_LC - M_P) ** 2), rel=1e-15)
    assert kin.names == ("K-", "pi+", "pi+") and "K-" in repr(kin)


@pytest.mark.parametrize("decay", list(DECAYS))
def test_area_matches_independent_integrals(kins, decay):
    """area() equals the integral of the PDG s23 (or s13) range over s12, and over s23."""
    masses, kin = DECAYS[decay], kins[decay]
    m = masses

    def width(s, channel):
        lo, hi = pair_limits(s, masses, channel)
        return hi - lo

    ref12 = scipy.integrate.quad(width, (m[1] + m[2]) ** 2, (m[0] - m[3]) ** 2, args=("12",),
                                 epsabs=0, epsrel=1e-12, limit=200)[0]
    ref23 = scipy.integrate.quad(width, (m[2] + m[3]) ** 2, (m[0] - m[1]) ** 2, args=("23",),
                                 epsabs=0, epsrel=1e-12, limit=200)[0]
    assert ref12 == pytest.approx(ref23, rel=1e-10)  # the reference is self-consistent
    assert kin.area() == pytest.approx(ref12, rel=1e-10)
    assert kin.space.volume == pytest.approx(ref12, rel=1e-10)


def test_area_massless_analytic():
    """Massless final state: the plot is the triangle s12 + s13 <= M^2, area M^4 / 2."""
    kin = DalitzKinematics(2.0, 0.0, 0.0, 0.0)
    assert kin.area() == pytest.approx(8.0, rel=1e-10)


@pytest.mark.parametrize("decay", list(DECAYS))
def test_area_and_inside_against_box_hit_fraction(kins, decay):
    """The fraction of uniform box points inside (numpy boundary) times the box is area(), within 4 sigma;
    inside() agrees with the numpy boundary point by point."""
    masses, kin = DECAYS[decay], kins[decay]
    (lo12, hi12), (lo13, hi13) = box(masses)
    rng = np.random.default_rng(11)
    n = 200_000
    x = np.column_stack([rng.uniform(lo12, hi12, n), rng.uniform(lo13, hi13, n)])
    ref = inside_np(x, masses)
    np.testing.assert_array_equal(kin.inside(x).numpy(), ref)
    frac = ref.mean()
    box_area = (hi12 - lo12) * (hi13 - lo13)
    sigma = box_area * np.sqrt(frac * (1 - frac) / n)
    assert abs(frac * box_area - kin.area()) < 4 * sigma
    assert 0.3 < frac < 0.7  # sanity: the test is not trivially passing


# -- invariants, momenta, helicity angles ------------------------------------------------------
@pytest.mark.parametrize("decay", list(DECAYS))
def test_invariants_sum_rule_and_four_vectors(kins, points, decay, mode):
    """s12 + s13 + s23 = M^2 + sum m_i^2, and each s_ij equals (p_i + p_j)^2 of explicit four-vectors."""
    masses, kin, x = DECAYS[decay], kins[decay], points[decay]
    inv = traced(lambda: kin.invariants(x))()
    total = inv["12"].numpy() + inv["13"].numpy() + inv["23"].numpy()
    np.testing.assert_allclose(total, total_sq(masses), rtol=1e-14)
    p1, p2, p3 = four_vectors(x, masses)
    for key, (pa, pb) in {"12": (p1, p2), "13": (p1, p3), "23": (p2, p3)}.items():
        np.testing.assert_allclose(inv[key].numpy(), minkowski_sq(pa + pb), rtol=1e-10)
    for p, mi in ((p1, masses[1]), (p2, masses[2]), (p3, masses[3])):  # the reference is on-shell
        np.testing.assert_allclose(minkowski_sq(p), mi * mi, atol=1e-12)


@pytest.mark.parametrize("decay", list(DECAYS))
@pytest.mark.parametrize("channel", ["12", "13", "23"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_cos_theta_and_momenta_vs_boosted_four_vectors(kins, points, decay, channel, mode):
    """cos_theta is the angle between a and the spectator c in the (ab) rest frame; momenta() are
    |p_a| and |p_c| there, all from four-vectors boosted in numpy."""
    masses, kin, x = DECAYS[decay], kins[decay], points[decay]
    ref_cos, ref_q, ref_p = helicity_np(x, masses, channel)
    s = x[:, 0] if channel == "12" else x[:, 1] if channel == "13" else total_sq(masses) - x[:, 0] - x[:, 1]
    cos, (q, p) = traced(lambda: (kin.cos_theta(x, channel), kin.momenta(s, channel)))()
    np.testing.assert_allclose(cos.numpy(), ref_cos, rtol=0, atol=1e-9)
    np.testing.assert_allclose(q.numpy(), ref_q, rtol=1e-9)
    np.testing.assert_allclose(p.numpy(), ref_p, rtol=1e-9)
    assert np.abs(cos.numpy()).max() <= 1.0 and np.ptp(ref_cos) > 1.9  # spans the range


def test_cos_theta_on_and_off_the_boundary(kins):
    """On the Dalitz boundary |cos theta| = 1 (+1 at the upper s23 limit for channel 12); beyond it |cos| > 1."""
    masses, kin = DECAYS["Lc->pK-pi+"], kins["Lc->pK-pi+"]
    m = masses
    s12 = np.linspace((m[1] + m[2]) ** 2, (m[0] - m[3]) ** 2, 9)[1:-1]
    s23_lo, s23_hi = pair_limits(s12, masses, "12")
    total = total_sq(masses)
    at_lo = np.column_stack([s12, total - s12 - s23_lo])
    at_hi = np.column_stack([s12, total - s12 - s23_hi])
    # s23 maximal <=> s13 minimal <=> particles 1 and 3 parallel in the (12) frame: a || c
    np.testing.assert_allclose(kin.cos_theta(at_hi, "12").numpy(), 1.0, atol=1e-9)
    np.testing.assert_allclose(kin.cos_theta(at_lo, "12").numpy(), -1.0, atol=1e-9)
    eps = 1e-3 * (s23_hi - s23_lo)
    beyond = np.column_stack([s12, total - s12 - s23_hi - eps])
    assert (np.abs(kin.cos_theta(beyond, "12").numpy()) > 1.0).all()


# -- inside -----------------------------------------------------------------------------------
def test_inside_points_outside_the_boundary(kins):
    """inside() is False beyond the kinematic boundary (inside the box), out of range and for NaN;
    True just inside the boundary."""
    masses, kin = DECAYS["D+->K-pi+pi+"], kins["D+->K-pi+pi+"]
    m = masses
    s12 = np.linspace((m[1] + m[2]) ** 2, (m[0] - m[3]) ** 2, 11)[1:-1]
    s23_lo, s23_hi = pair_limits(s12, masses, "12")
    total = total_sq(masses)
    eps = 1e-6 * (s23_hi - s23_lo)
    just_in = np.concatenate([np.column_stack([s12, total - s12 - s23_hi + eps]),
                              np.column_stack([s12, total - s12 - s23_lo - eps])])
    just_out = np.concatenate([np.column_stack([s12, total - s12 - s23_hi - eps]),
                               np.column_stack([s12, total - s12 - s23_lo + eps])])
    assert kin.inside(just_in).numpy().all()
    assert not kin.inside(just_out).numpy().any()
    (lo12, hi12), (lo13, hi13) = box(masses)
    corners = np.array([[lo12 + 1e-3, lo13 + 1e-3], [hi12 - 1e-3, hi13 - 1e-3], [hi12 - 1e-3, lo13 + 1e-3]])
    assert not kin.inside(corners).numpy().any()  # inside the box, outside the plot
    mid = 0.5 * (lo12 + hi12)
    far = np.array([[lo12 - 0.01, 1.0], [hi12 + 0.01, 1.0], [mid, lo13 - 0.5], [mid, hi13 + 0.5], [-1.0, -1.0],
                    [np.nan, 1.0], [mid, np.nan]])
    assert not kin.inside(far).numpy().any()


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_inside_true_for_generated_samples(kins, samples):
    """Every event DalitzKinematics.sample draws is inside (both inside() and the numpy boundary)."""
    for name, x in samples.items():
        assert x.shape == (20_000, 2)
        assert kins[name].inside(x).numpy().all()
        assert inside_np(x, DECAYS[name]).all()


def test_dalitz_space(kins):
    """DalitzSpace: obs (s12, s13), the bounding box as limits, the plot's area as volume, the kinematic inside()."""
    masses, kin = DECAYS["Lc->pK-pi+"], kins["Lc->pK-pi+"]
    space = kin.space
    assert isinstance(space, DalitzSpace) and isinstance(space, Space)
    (lo12, hi12), (lo13, hi13) = box(masses)
    assert space.obs == ("s12", "s13")
    assert space.lower == pytest.approx((lo12, lo13), rel=1e-15) and space.upper == pytest.approx((hi12, hi13), rel=1e-15)
    assert space.volume == pytest.approx(kin.area(), rel=1e-15)
    assert space.volume < (hi12 - lo12) * (hi13 - lo13)
    corner = np.array([[hi12 - 1e-3, hi13 - 1e-3]])
    assert bool(Space(["s12", "s13"], [lo12, lo13], [hi12, hi13]).inside(corner)[0])
    assert not bool(space.inside(corner)[0])
    assert space == DalitzKinematics(*masses).space and hash(space) == hash(DalitzKinematics(*masses).space)
    assert space != kins["D+->K-pi+pi+"].space


# -- sampling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("decay", list(DECAYS))
def test_sample_marginals_follow_phase_space(samples, decay):
    """Each s_ab marginal follows sqrt(lambda(s, m_a^2, m_b^2) lambda(M^2, s, m_c^2)) / s (KS), and
    cos theta is uniform at fixed s (flat in the plot); a slightly wrong density is rejected."""
    masses, x = DECAYS[decay], samples[decay]
    s = {"12": x[:, 0], "13": x[:, 1], "23": total_sq(masses) - x[:, 0] - x[:, 1]}
    for channel in CHANNELS:
        assert scipy.stats.kstest(s[channel], marginal_cdf(masses, channel)).pvalue > KS_MIN_P, channel
        cos = helicity_np(x[:4000], masses, channel)[0]
        assert scipy.stats.kstest(cos, scipy.stats.uniform(-1, 2).cdf).pvalue > KS_MIN_P, channel
    # sensitivity: the same density without the 1/s (a plausible mistake) is rejected
    no_jacobian = lambda t, ms, ch: marginal_density(t, ms, ch) * t  # noqa: E731
    assert scipy.stats.kstest(s["12"], marginal_cdf(masses, "12", no_jacobian)).pvalue < KS_MIN_P


def test_sample_returns_data(kins):
    """sample(n) is a zcache.Data with obs ('s12', 's13') and the given name, n events."""
    kin = kins["D+->K-pi+pi+"]
    data = kin.sample(7, name="ps")
    assert isinstance(data, zcache.Data) and data.nevents == 7 and data.obs == ("s12", "s13") and data.name == "ps"
    assert data.numpy().dtype == np.float64
    assert kin.sample(np.int64(3)).nevents == 3 and kin.sample(2.0).nevents == 2


def test_sample_seed_reproducible(graph_mode):
    """set_seed makes samples reproducible in every mode; another seed gives other events."""
    kin = DalitzKinematics(*DECAYS["Lc->pK-pi+"])
    set_seed(7)
    a = kin.sample(300).numpy()
    set_seed(7)
    b = kin.sample(300).numpy()
    set_seed(8)
    c = kin.sample(300).numpy()
    np.testing.assert_array_equal(a, b)
    assert np.intersect1d(a[:, 0], c[:, 0]).size == 0
    assert np.unique(a[:, 0]).size == 300


def test_sample_refills_data_in_place(graph_mode):
    """sample(n, data=d) refills d (new size, new events, inside) and traces once for all sizes."""
    kin = DalitzKinematics(*DECAYS["D+->K-pi+pi+"])
    d = kin.sample(10, name="target")
    first = d.numpy().copy()
    seen = []
    for n in (500, 3, 2000):
        out = kin.sample(n, data=d)
        assert out is d and d.nevents == n and d.name == "target"
        assert kin.inside(d.numpy()).numpy().all()
        seen.append(d.numpy()[:, 0].copy())
    assert np.intersect1d(first[:, 0], seen[0]).size == 0
    assert kin._sampler.trace_count == (0 if graph_mode is False else 1)


def test_sample_feeds_cached_tensors(kins):
    """A cache on the sample's Data is invalidated by sample(n, data=d) (it goes through set_data)."""
    kin = kins["D+->K-pi+pi+"]
    d = kin.sample(100)
    mean = zcache.CachedTensor(lambda: tf.reduce_mean(d.value()[:, 0]), name="mean s12")
    first = float(mean.value())
    kin.sample(50, data=d)
    assert not mean.is_valid
    assert float(mean.value()) == pytest.approx(d.numpy()[:, 0].mean(), rel=1e-14) != first


def test_sample_into_data_with_other_obs(kins):
    target = zcache.Data(np.ones((3, 2)), obs=("x", "y"))
    with pytest.raises(ModelError):
        kins["D+->K-pi+pi+"].sample(5, data=target)


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "masses",
    [
        (1.0, 0.5, 0.3, 0.2),  # M == m1 + m2 + m3: closed
        (0.9, 0.5, 0.3, 0.2),  # closed
        (M_D, -M_K, M_PI, M_PI),
        (M_D, M_K, M_PI, -1e-3),
        (-M_D, M_K, M_PI, M_PI),
        (0.0, 0.0, 0.0, 0.0),
        (M_D, np.nan, M_PI, M_PI),
        (np.nan, M_K, M_PI, M_PI),
        (M_D, M_K, np.inf, M_PI),
        (np.inf, M_K, M_PI, M_PI),
    ],
)
def test_bad_masses(masses):
    """Closed decays and negative, NaN or infinite masses raise ModelError."""
    with pytest.raises(ModelError):
        DalitzKinematics(*masses)


def test_bad_names():
    with pytest.raises(ModelError):
        DalitzKinematics(M_D, M_K, M_PI, M_PI, names=("K", "pi"))


@pytest.mark.parametrize("channel", ["21", "31", "32", "11", "123", "", 12])
def test_unknown_channel(kins, channel):
    """An unknown channel raises ModelError from s_range, momenta and cos_theta."""
    kin = kins["D+->K-pi+pi+"]
    x = np.array([[1.0, 1.0]])
    with pytest.raises(ModelError):
        kin.s_range(channel)
    with pytest.raises(ModelError):
        kin.momenta([1.0], channel)
    with pytest.raises(ModelError):
        kin.cos_theta(x, channel)


@pytest.mark.parametrize("n", [0, -1, -1000, 2.5, 0.5, np.nan, np.inf])
def test_sample_bad_n(kins, n):
    """sample(n) with n < 1 or not a whole number raises ModelError; a target Data stays unchanged."""
    kin = kins["D+->K-pi+pi+"]
    target = zcache.Data(np.full((3, 2), 1.0), obs=("s12", "s13"))
    with pytest.raises(ModelError):
        kin.sample(n)
    with pytest.raises(ModelError):
        kin.sample(n, data=target)
    np.testing.assert_array_equal(target.numpy(), 1.0)


def test_kallen_function():
    """kallen() is the Källén function, for numpy and TF inputs alike."""
    x, y, z = np.array([4.0, 9.0, 2.5]), np.array([1.0, 0.25, 0.0]), np.array([0.5, 0.25, 0.0])
    np.testing.assert_allclose(kallen(x, y, z), lam_np(x, y, z), rtol=1e-15)
    np.testing.assert_allclose(kallen(tf.constant(x), y, z).numpy(), lam_np(x, y, z), rtol=1e-15)
    assert kallen(9.0, 0.25, 0.25) == pytest.approx(9.0 * (9.0 - 1.0))  # s (s - 4 m^2) for equal masses
