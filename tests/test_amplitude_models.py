"""zcache.amplitude: line shapes, angular functions, coherent sums, the amplitude PDF and its caches.

References are independent numpy implementations of the formulas in the module docstring
(Breit-Wigner with a mass-dependent width, Blatt-Weisskopf factors, Legendre polynomials,
helicity angles from two-body energies), Wigner's d from the matrix exponential of J_y,
a numpy phase-space generator and scipy/numdifftools for integrals and derivatives.
"""

from __future__ import annotations

import cmath
import math
import re
from types import SimpleNamespace

import numdifftools as nd
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
import scipy.stats
import tensorflow as tf
from helpers import CHANNELS, inside_np, pair_limits, slow_modes, traced, uniform_np
from hypothesis import given, settings
from hypothesis import strategies as st

import zcache
from zcache.amplitude import (
    Amplitude,
    AmplitudePdf,
    CoherentSum,
    ComplexParameter,
    DalitzKinematics,
    NonResonant,
    Resonance,
    blatt_weisskopf_sq,
    fit_fractions,
    legendre,
    relativistic_breit_wigner,
    wigner_small_d,
)
from zcache.exceptions import DataRangeError, ModelError, ParameterValueError
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Gaussian, Space, set_seed

# D+ -> K- pi+ pi+ (PDG masses, GeV)
M_D, M_K, M_PI = 1.86966, 0.493677, 0.13957039
MASSES = (M_D, M_K, M_PI, M_PI)
# Lambda_c+ -> p K- pi+: three different masses, so a swapped a/b/c in a channel shows
MASSES_LC = (2.28646, 0.938272, M_K, M_PI)
D_R, D_P = 1.5, 5.0  # default Blatt-Weisskopf radii (1/GeV)

# resonances of the reference model: channels, mass, width, spin
RES = {
    "Kst": (("12", "13"), 0.8955, 0.0473, 1),
    "K0": (("12", "13"), 1.425, 0.27, 0),
}
TRUTH = {"NR": 1.0 + 0.0j, "Kst": 0.3 + 0.2j, "K0": 0.5 - 0.5j}
N_MC, N_DATA = 10_000, 2000
KS_MIN_P = 0.01


# -- independent numpy references (CHANNELS, pair_limits, inside_np, uniform_np: helpers.py) -------
def f_sq_np(spin, z):
    """von Hippel-Quigg F_L^2(z): 1, 2z/(1+z), 13z^2/((z-3)^2+9z)."""
    if spin == 0:
        return np.ones_like(z)
    if spin == 1:
        return 2.0 * z / (1.0 + z)
    return 13.0 * z**2 / ((z - 3.0) ** 2 + 9.0 * z)


def legendre_np(spin, x):
    return np.polynomial.legendre.legval(x, [0.0] * spin + [1.0])


def bw_np(s, m0, g0, q, q0, spin, d):
    """1 / (m0^2 - s - i m0 Gamma(s)), Gamma = g0 (q/q0)^(2L+1) (m0/sqrt s) B_L^2(q)/B_L^2(q0), B_L^2 = F_L^2/z^L."""
    z, z0 = (q * d) ** 2, (q0 * d) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        b = np.where(z > 0, f_sq_np(spin, z) / z**spin, 1.0 if spin == 0 else (2.0 if spin == 1 else 13.0 / 9.0))
    b0 = f_sq_np(spin, z0) / z0**spin
    gamma = g0 * (q / q0) ** (2 * spin + 1) * (m0 / np.sqrt(s)) * b / b0
    return 1.0 / (m0 * m0 - s - 1j * m0 * gamma)


def invariants_np(x, masses):
    s12, s13 = x[:, 0], x[:, 1]
    return {"12": s12, "13": s13, "23": float(np.sum(np.square(masses))) - s12 - s13}


def two_body_np(s, masses, channel):
    """q = |p_a|, p = |p_c| in the (ab) rest frame and the energies E_a, E_c there."""
    a, b, c = CHANNELS[channel]
    m = masses
    rs = np.sqrt(s)
    e_a = (s + m[a] ** 2 - m[b] ** 2) / (2 * rs)
    e_c = (m[0] ** 2 - s - m[c] ** 2) / (2 * rs)
    q = np.sqrt(np.maximum(e_a**2 - m[a] ** 2, 0.0))
    p = np.sqrt(np.maximum(e_c**2 - m[c] ** 2, 0.0))
    return q, p, e_a, e_c


def cos_np(x, masses, channel):
    """Angle between a and c in the (ab) frame from s_ac = m_a^2 + m_c^2 + 2 (E_a E_c - q p cos)."""
    a, b, c = CHANNELS[channel]
    inv = invariants_np(x, masses)
    q, p, e_a, e_c = two_body_np(inv[channel], masses, channel)
    s_ac = inv["".join(sorted(f"{a}{c}"))]
    return (e_a * e_c - 0.5 * (s_ac - masses[a] ** 2 - masses[c] ** 2)) / (q * p)


def resonance_np(x, masses, channels, m0, g0, spin, d=D_R, dp=D_P):
    r"""A_R = sum over channels of sqrt(F(q)^2/F(q0)^2 F(p)^2/F(p0)^2) P_L(cos) BW(s)."""
    inv = invariants_np(x, masses)
    total = np.zeros(len(x), complex)
    for ch in channels:
        s = inv[ch]
        q, p, _, _ = two_body_np(s, masses, ch)
        q0, p0, _, _ = two_body_np(np.array([m0 * m0]), masses, ch)
        ff = np.sqrt(f_sq_np(spin, (q * d) ** 2) / f_sq_np(spin, (q0 * d) ** 2)
                     * f_sq_np(spin, (p * dp) ** 2) / f_sq_np(spin, (p0 * dp) ** 2))
        total += ff * legendre_np(spin, cos_np(x, masses, ch)) * bw_np(s, m0, g0, q, q0, spin, d)
    return total


def columns_np(x, names, masses=MASSES, **mass_of):
    """(N, K) matrix of the reference components; ``mass_of`` overrides a resonance's mass."""
    cols = []
    for name in names:
        if name == "NR":
            cols.append(np.ones(len(x), complex))
        else:
            channels, m0, g0, spin = RES[name]
            cols.append(resonance_np(x, masses, channels, mass_of.get(name, m0), g0, spin))
    return np.column_stack(cols)


def area_np(masses):
    m = masses
    return scipy.integrate.quad(lambda s: np.subtract(*pair_limits(s, masses, "12")[::-1]),
                                (m[1] + m[2]) ** 2, (m[0] - m[3]) ** 2, epsabs=0, epsrel=1e-12, limit=200)[0]


AREA = area_np(MASSES)


def pdf_np(x, mc, names, couplings, **mass_of):
    """|A|^2 / (V <|A|^2>_MC) of the reference model."""
    c = np.asarray(couplings, complex)
    amp = columns_np(x, names, **mass_of) @ c
    norm = np.mean(np.abs(columns_np(mc, names, **mass_of) @ c) ** 2)
    return np.abs(amp) ** 2 / (AREA * norm)


def nll_np(x, mc, names, couplings, **mass_of):
    return float(-np.sum(np.log(pdf_np(x, mc, names, couplings, **mass_of))))


def polar(theta):
    """Couplings [1, r1 e^{i phi1}, r2 e^{i phi2}, ...] from (r1, phi1, r2, phi2, ...)."""
    return [1.0, *(r * np.exp(1j * phi) for r, phi in zip(theta[0::2], theta[1::2], strict=True))]


def nll_factory(x, x_mc, names=("NR", "Kst", "K0")):
    """The numpy NLL as a function of theta = (r_1, phi_1, ..., r_{K-1}, phi_{K-1}[, m_Kst]) (NR first,
    c = 1), with the columns that do not depend on theta computed once (numdifftools calls it often)."""
    base = columns_np(x, names), columns_np(x_mc, names)
    k, n_c = list(names).index("Kst"), 2 * (len(names) - 1)

    def nll(theta):
        cols = [base[0].copy(), base[1].copy()]
        if len(theta) > n_c:
            channels, _, g0, spin = RES["Kst"]
            for c, xx in zip(cols, (x, x_mc), strict=True):
                c[:, k] = resonance_np(xx, MASSES, channels, theta[n_c], g0, spin)
        c = np.asarray(polar(theta[:n_c]))
        intensity = np.abs(cols[0] @ c) ** 2
        return float(-np.sum(np.log(intensity / (AREA * np.mean(np.abs(cols[1] @ c) ** 2)))))

    return nll


def wigner_d_expm(j, theta):
    """d^j(theta) = exp(-i theta J_y) in the basis m = j, j-1, ..., -j (ladder operators)."""
    ms = np.arange(j, -j - 1, -1)
    n = len(ms)
    jp = np.zeros((n, n))
    for col in range(1, n):  # J+ |m> = sqrt(j(j+1) - m(m+1)) |m+1>
        m = ms[col]
        jp[col - 1, col] = np.sqrt(j * (j + 1) - m * (m + 1))
    jy = (jp - jp.T) / 2j
    return np.real(scipy.linalg.expm(-1j * theta * jy)), ms


def d_matrix(j, theta):
    """The matrix d^j_{m'm}(theta) from wigner_small_d, m', m = j, ..., -j; theta scalar or (T,): (T, n, n)."""
    ms = np.arange(j, -j - 1, -1)
    return np.moveaxis(np.array([[wigner_small_d(j, a, b, theta).numpy() for b in ms] for a in ms]), [0, 1], [-2, -1])


def caches_by_name(*owners):
    """name -> CachedTensor over the owners' ``@cached`` caches (names must be unique)."""
    out = {}
    for owner in owners:
        for cache in owner.__dict__.get("_zcache_caches", {}).values():
            assert cache.name not in out, cache.name
            out[cache.name] = cache
    return out


def missed(caches, before):
    return {name for name, c in caches.items() if c.stats["misses"] != before[name]["misses"]}


def snapshot(caches):
    return {name: c.stats for name, c in caches.items()}


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kin():
    return DalitzKinematics(*MASSES, names=("K-", "pi+", "pi+"))


@pytest.fixture(scope="module")
def x_mc():
    return uniform_np(N_MC, MASSES, seed=1)


@pytest.fixture(scope="module")
def x_data():
    return uniform_np(N_DATA, MASSES, seed=2)


@pytest.fixture(scope="module")
def mc(x_mc):
    return zcache.Data(x_mc, name="mc", obs=("s12", "s13"))


@pytest.fixture(scope="module")
def data(x_data):
    return zcache.Data(x_data, name="data", obs=("s12", "s13"))


def build(kin, mc, data, *, names=("NR", "Kst", "K0"), float_mass=False):
    """NR (c = 1, fixed) + K*(892) (its mass a Parameter) [+ K0*(1430)] with floating polar couplings;
    cached and uncached sums sharing amplitudes and couplings; their pdfs and losses."""
    w = SimpleNamespace(names=list(names))
    w.mass = zcache.Parameter("Kst_mass", RES["Kst"][1], lower=0.8, upper=1.0, floating=float_mass)
    make = {
        "NR": lambda: NonResonant(kin),
        "Kst": lambda: Resonance(kin, ("12", "13"), w.mass, RES["Kst"][2], 1, name="Kst"),
        "K0": lambda: Resonance(kin, ("12", "13"), RES["K0"][1], RES["K0"][2], 0, name="K0"),
    }
    w.amps = {n: make[n]() for n in names}
    w.c = {n: ComplexParameter(f"c_{n.lower()}", TRUTH[n], floating=n != "NR") for n in names}
    w.nr, w.kst, w.k0 = w.amps.get("NR"), w.amps.get("Kst"), w.amps.get("K0")
    w.c_kst, w.c_k0 = w.c.get("Kst"), w.c.get("K0")
    comps = [(w.c[n], w.amps[n]) for n in names]
    w.amp, w.amp_u = CoherentSum(comps), CoherentSum(comps, cache=False)
    w.pdf, w.pdf_u = AmplitudePdf(w.amp, mc), AmplitudePdf(w.amp_u, mc)
    w.loss, w.loss_u = UnbinnedNLL(w.pdf, data), UnbinnedNLL(w.pdf_u, data)
    w.coupling_params = [p for n in names[1:] for p in w.c[n].params]
    w.grad_params = [*w.coupling_params, w.mass]
    w.owners = [*w.amps.values(), w.amp, w.pdf]
    return w


def state(w):
    """The reference's inputs, read back from the parameters as plain numbers."""
    return [complex(w.c[n]) for n in w.names], {"Kst": float(w.mass.value())}


# -- ComplexParameter -------------------------------------------------------------------------
def test_complex_parameter_polar(mode):
    """Polar coupling: mag/phase parameters, value(), complex(), set_value; value follows without retrace."""
    c = ComplexParameter("c1", 0.3 + 0.4j)
    assert [p.name for p in c.params] == ["c1_mag", "c1_phase"] and c.params == [c.mag, c.phase]
    assert float(c.mag.value()) == pytest.approx(0.5, rel=1e-15)
    assert float(c.phase.value()) == pytest.approx(math.atan2(0.4, 0.3), rel=1e-15)
    assert c.mag.lower == 0.0 and all(p.floating for p in c.params)
    value = traced(c.value)
    assert value().dtype == tf.complex128
    assert complex(value().numpy()) == pytest.approx(0.3 + 0.4j, abs=1e-15)
    assert complex(c) == pytest.approx(0.3 + 0.4j, abs=1e-15)
    for v in (-1j, -2.0 + 0.5j, 0.0, 1e-8 - 3j):
        c.set_value(v)
        assert float(c.mag.value()) == pytest.approx(abs(v), rel=1e-15)
        assert float(c.phase.value()) == pytest.approx(cmath.phase(v), rel=1e-15, abs=1e-300)
        assert complex(value().numpy()) == pytest.approx(v, abs=1e-14)
        assert complex(c) == pytest.approx(v, abs=1e-14)
    assert value.trace_count == (0 if mode is False else 1)
    assert "c1" in repr(c)


def test_complex_parameter_cartesian(mode):
    """Cartesian coupling: re/im parameters; a fixed coupling's parameters are not floating."""
    c = ComplexParameter("c2", -0.7 + 0.2j, polar=False, floating=False)
    assert [p.name for p in c.params] == ["c2_re", "c2_im"] and c.params == [c.real, c.imag]
    assert (float(c.real.value()), float(c.imag.value())) == (-0.7, 0.2)
    assert not any(p.floating for p in c.params)
    value = traced(c.value)
    assert complex(value().numpy()) == -0.7 + 0.2j
    c.set_value(3.0 - 4.0j)
    assert (float(c.real.value()), float(c.imag.value())) == (3.0, -4.0)
    assert complex(value().numpy()) == 3.0 - 4.0j == complex(c)
    assert ComplexParameter("c3", 2).value().numpy() == pytest.approx(2.0 + 0j)  # a real number is fine


@pytest.mark.parametrize("bad", [complex(np.nan, 0.0), complex(0.0, np.inf), np.inf, np.nan, complex(-np.inf, 1)])
@pytest.mark.parametrize("polar", [True, False])
def test_complex_parameter_rejects_non_finite(bad, polar):
    with pytest.raises(ModelError):
        ComplexParameter("bad", bad, polar=polar)


@pytest.mark.parametrize("polar", [True, False])
def test_complex_parameter_set_value_checked_as_one_step(polar):
    """A non-finite set_value raises and leaves both parameters unchanged."""
    c = ComplexParameter("c4", 1.0 + 1.0j, polar=polar)
    for bad in (complex(np.nan, 1.0), complex(1.0, np.inf)):
        with pytest.raises(ParameterValueError):
            c.set_value(bad)
        assert complex(c) == pytest.approx(1.0 + 1.0j, abs=1e-15)


@pytest.mark.parametrize("bad", ["abc", None, [1.0, 2.0]])
def test_complex_parameter_rejects_non_numbers(bad):
    with pytest.raises(ModelError):
        ComplexParameter("bad", bad)


# -- Blatt-Weisskopf, Breit-Wigner -----------------------------------------------------------
def test_blatt_weisskopf_values_and_limits():
    """F_L^2: 1 for L = 0; 1 at z = 1 for L = 1, 2; -> 0 (~2z, ~13z^2/9) at 0; -> 2, 13 at infinity."""
    z = np.array([0.0, 1e-6, 0.3, 1.0, 3.0, 7.5, 1e8])
    np.testing.assert_array_equal(blatt_weisskopf_sq(0, z).numpy(), 1.0)
    for spin in (1, 2):
        got = blatt_weisskopf_sq(spin, z).numpy()
        np.testing.assert_allclose(got, f_sq_np(spin, z), rtol=1e-14)
        assert got[3] == pytest.approx(1.0, rel=1e-15)  # the normalization of von Hippel-Quigg
        assert got[0] == 0.0
    f1, f2 = blatt_weisskopf_sq(1, z).numpy(), blatt_weisskopf_sq(2, z).numpy()
    assert f1[1] == pytest.approx(2e-6, rel=1e-5) and f2[1] == pytest.approx(13e-12 / 9, rel=1e-5)
    assert f1[-1] == pytest.approx(2.0, rel=1e-7) and f2[-1] == pytest.approx(13.0, rel=1e-7)
    assert f2[4] == pytest.approx(13.0 / 3.0, rel=1e-15)  # z = 3: 13 * 9 / 27
    assert f1[2] == pytest.approx(0.6 / 1.3, rel=1e-15)
    assert np.all(np.diff(f1) > 0) and np.all(np.diff(f2[1:]) > 0)  # rising to their limits
    with pytest.raises(ModelError):
        blatt_weisskopf_sq(3, z)


@pytest.mark.parametrize("spin", [0, 1, 2])
@pytest.mark.parametrize(("m0", "g0", "radius"), [(0.8955, 0.0473, 1.5), (1.425, 0.27, 3.0), (1.4324, 0.109, 0.5)])
def test_breit_wigner_at_the_pole(spin, m0, g0, radius):
    """At s = m0^2 (q = q0) BW = i / (m0 Gamma0), so |BW|^2 = 1 / (m0 Gamma0)^2."""
    q0 = two_body_np(np.array(m0 * m0), MASSES, "12")[0]
    value = complex(relativistic_breit_wigner(m0 * m0, m0, g0, q0, q0, spin, radius).numpy())
    assert value == pytest.approx(1j / (m0 * g0), rel=1e-13)
    assert abs(value) ** 2 == pytest.approx(1.0 / (m0 * g0) ** 2, rel=1e-13)


@pytest.mark.parametrize("spin", [0, 1, 2])
def test_breit_wigner_against_numpy(spin, mode):
    """The BW over the whole K pi range equals the numpy formula, with Parameters as mass, width and q0
    (a traced version follows set_value without retracing)."""
    m0, g0 = zcache.Parameter("m0", 0.8955), zcache.Parameter("g0", 0.0473)
    q0 = zcache.Parameter("q0", 0.3)
    lo, hi = (M_K + M_PI) ** 2, (M_D - M_PI) ** 2
    s = np.linspace(lo, hi, 301)[1:]
    q = two_body_np(s, MASSES, "12")[0]
    bw = traced(lambda: relativistic_breit_wigner(s, m0, g0, q, q0, spin, 2.0))
    for m, g in [(0.8955, 0.0473), (1.4, 0.3), (0.7, 0.01)]:
        q0_value = float(two_body_np(np.array(m * m), MASSES, "12")[0])
        zcache.set_values([m0, g0, q0], [m, g, q0_value])
        ref = bw_np(s, m, g, q, q0_value, spin, 2.0)
        got = bw().numpy()
        assert got.dtype == np.complex128
        np.testing.assert_allclose(got, ref, rtol=1e-13)
        np.testing.assert_allclose(relativistic_breit_wigner(s, m, g, q, q0_value, spin, 2.0).numpy(), ref, rtol=1e-13)
    assert bw.trace_count == (0 if mode is False else 1)


def test_breit_wigner_at_threshold():
    """At q = 0 the running width vanishes: BW = 1 / (m0^2 - s), real."""
    s = (M_K + M_PI) ** 2
    for spin in (0, 1, 2):
        value = complex(relativistic_breit_wigner(s, 0.8955, 0.0473, 0.0, 0.2, spin, 1.5).numpy())
        assert value == pytest.approx(1.0 / (0.8955**2 - s), rel=1e-14)
        assert value.imag == 0.0


@pytest.mark.parametrize("spin", [0, 1, 2])
def test_narrow_breit_wigner_peak_and_width(spin):
    """A narrow resonance peaks at sqrt(s) = m0 and its FWHM in sqrt(s) is Gamma0 (to 1%)."""
    m0, g0 = 0.8955, 0.0005
    rs = np.linspace(m0 - 10 * g0, m0 + 10 * g0, 200_001)
    s = rs * rs
    q, q0 = two_body_np(s, MASSES, "12")[0], two_body_np(np.array(m0 * m0), MASSES, "12")[0]
    y = np.abs(relativistic_breit_wigner(s, m0, g0, q, q0, spin, 1.5).numpy()) ** 2
    peak = rs[np.argmax(y)]
    assert abs(peak - m0) < 0.01 * g0
    above = rs[y >= 0.5 * y.max()]
    assert above.max() - above.min() == pytest.approx(g0, rel=0.01)
    assert y.max() == pytest.approx(1.0 / (m0 * g0) ** 2, rel=1e-4)


# -- angular functions ------------------------------------------------------------------------
THETAS = np.array([0.0, 0.3, 1.0, np.pi / 2, 2.2, 3.0, np.pi])


def test_legendre_values_and_d00():
    """legendre(L, cos) is P_L and equals wigner_small_d(L, 0, 0, theta)."""
    x = np.cos(THETAS)
    for spin in (0, 1, 2):
        got = legendre(spin, x).numpy()
        np.testing.assert_allclose(got, legendre_np(spin, x), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(got, wigner_small_d(spin, 0, 0, THETAS).numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(legendre(2, x).numpy(), 1.5 * x * x - 0.5, rtol=1e-15, atol=1e-16)
    with pytest.raises(ModelError):
        legendre(3, x)


def test_wigner_d_table_values():
    """Tabulated d^j_{m'm}(theta) (PDG) for j = 1/2, 1, 3/2, 2."""
    t = THETAS
    c, s, ch, sh = np.cos(t), np.sin(t), np.cos(t / 2), np.sin(t / 2)
    table = {
        (0.5, 0.5, 0.5): ch, (0.5, 0.5, -0.5): -sh, (0.5, -0.5, 0.5): sh, (0.5, -0.5, -0.5): ch,
        (1, 1, 1): (1 + c) / 2, (1, 1, 0): -s / np.sqrt(2), (1, 1, -1): (1 - c) / 2, (1, 0, 0): c,
        (1, 0, 1): s / np.sqrt(2), (1, -1, 1): (1 - c) / 2,
        (1.5, 1.5, 1.5): (1 + c) / 2 * ch, (1.5, 1.5, 0.5): -np.sqrt(3) * (1 + c) / 2 * sh,
        (1.5, 1.5, -0.5): np.sqrt(3) * (1 - c) / 2 * ch, (1.5, 1.5, -1.5): -(1 - c) / 2 * sh,
        (1.5, 0.5, 0.5): (3 * c - 1) / 2 * ch, (1.5, 0.5, -0.5): -(3 * c + 1) / 2 * sh,
        (2, 2, 2): ((1 + c) / 2) ** 2, (2, 2, 1): -(1 + c) / 2 * s, (2, 2, 0): np.sqrt(6) / 4 * s * s,
        (2, 2, -1): -(1 - c) / 2 * s, (2, 2, -2): ((1 - c) / 2) ** 2, (2, 1, 1): (1 + c) / 2 * (2 * c - 1),
        (2, 1, 0): -np.sqrt(1.5) * s * c, (2, 1, -1): (1 - c) / 2 * (2 * c + 1), (2, 0, 0): 1.5 * c * c - 0.5,
    }
    for (j, m1, m2), ref in table.items():
        got = wigner_small_d(j, m1, m2, t).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14, err_msg=str((j, m1, m2)))


@pytest.mark.parametrize("j", [0, 0.5, 1, 1.5, 2, 2.5, 3])
def test_wigner_d_matrix_exponential(j):
    """d^j(theta) equals exp(-i theta J_y) built from ladder operators (all m', m), is orthogonal, d(0) = 1,
    and d(a) d(b) = d(a + b)."""
    thetas = np.array([0.0, 0.4, 1.9, np.pi, 0.7, 1.1, 1.8])
    got = d_matrix(j, thetas)
    for theta, d in zip(thetas, got, strict=True):
        np.testing.assert_allclose(d, wigner_d_expm(j, theta)[0], atol=1e-12)
        np.testing.assert_allclose(d @ d.T, np.eye(len(d)), atol=1e-12)
    np.testing.assert_array_equal(got[0], np.eye(int(2 * j + 1)))
    np.testing.assert_allclose(got[4] @ got[5], got[6], atol=1e-12)  # composition


_J = st.sampled_from([0.5, 1, 1.5, 2, 2.5])


@settings(max_examples=25)
@given(j=_J, a=st.integers(0, 5), b=st.integers(0, 5), theta=st.floats(0.0, np.pi))
def test_property_wigner_d_symmetries(j, a, b, theta):
    """d^j_{m'm}(t) = (-1)^{m-m'} d^j_{mm'}(t) = d^j_{-m,-m'}(t) and d^j_{m'm}(-t) = d^j_{mm'}(t)."""
    ms = np.arange(j, -j - 1, -1)
    m1, m2 = ms[a % len(ms)], ms[b % len(ms)]
    d = float(wigner_small_d(j, m1, m2, theta))
    sign = (-1) ** round(m2 - m1)
    assert d == pytest.approx(sign * float(wigner_small_d(j, m2, m1, theta)), abs=1e-12)
    assert d == pytest.approx(float(wigner_small_d(j, -m2, -m1, theta)), abs=1e-12)
    assert d == pytest.approx(float(wigner_small_d(j, m2, m1, -theta)), abs=1e-12)
    assert abs(d) <= 1.0 + 1e-12


@pytest.mark.parametrize("args", [(1, 2, 0), (1, 0.5, 0), (-1, 0, 0), (0.5, 0, 0), (1.5, 0.5, 1), (0.3, 0, 0),
                                  (2, 0, -3)])
def test_wigner_d_bad_arguments(args):
    with pytest.raises(ModelError):
        wigner_small_d(*args, 0.5)


def test_wigner_d_gradient():
    """d/dtheta d^1_00 = -sin (wigner_small_d is differentiable TF)."""
    theta = tf.Variable(0.8, dtype=tf.float64)
    with tf.GradientTape() as tape:
        y = wigner_small_d(1, 0, 0, theta)
    assert float(tape.gradient(y, theta)) == pytest.approx(-np.sin(0.8), rel=1e-12)


# -- amplitude columns -----------------------------------------------------------------------------
_COLUMN_CASES = [  # masses, channels, spin, m0, g0, graph mode too? (each graph case costs a trace; "slow": marked slow)
    (MASSES, ("12", "13"), 1, 0.8955, 0.0473, True),  # K*(892) in D+ -> K- pi+ pi+, Bose-symmetrized
    (MASSES, ("12", "13"), 0, 1.425, 0.27, False),
    (MASSES, ("12", "13"), 2, 1.4324, 0.109, False),
    (MASSES, ("23",), 1, 0.775, 0.149, False),
    (MASSES_LC, ("12",), 2, 1.82, 0.08, False),  # Lambda(1820) -> p K-
    (MASSES_LC, ("13",), 1, 1.232, 0.117, False),  # Delta++ -> p pi+
    (MASSES_LC, ("23",), 1, 0.8955, 0.0473, False),  # K*0 -> K- pi+
    (MASSES_LC, ("13", "23"), 2, 1.25, 0.1, "slow"),
]


@pytest.mark.parametrize(
    ("masses", "channels", "spin", "m0", "g0", "mode"),
    [pytest.param(*case[:5], m, id=f"{'D' if case[0] is MASSES else 'Lc'}-{'+'.join(case[1])}-L{case[2]}-"
                  f"{'graph' if m else 'eager'}", marks=[pytest.mark.slow] if m and case[5] == "slow" else [])
     for case in _COLUMN_CASES for m in ((True, False) if case[5] else (False,))],
    indirect=["mode"],
)
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_resonance_column_against_numpy(masses, channels, spin, m0, g0, mode):
    """Resonance.column (cached on Data, computed on arrays) equals the docstring formula in numpy,
    also after changing mass and width."""
    kin = DalitzKinematics(*masses)
    x = uniform_np(1000, masses, seed=3)
    data = zcache.Data(x, obs=("s12", "s13"), name="x")
    mass, width = zcache.Parameter("m0", m0), zcache.Parameter("g0", g0, lower=0.0)
    res = Resonance(kin, channels, mass, width, spin, name="R")
    assert res.channels == channels and res.spin == spin and res.mass is mass and res.width is width
    column = traced(lambda: res.column(data))
    for m, g in [(m0, g0), (m0 * 1.02, g0 * 1.3)]:
        zcache.set_values([mass, width], [m, g])
        ref = resonance_np(x, masses, channels, m, g, spin)
        got = column().numpy()
        assert got.dtype == np.complex128 and got.shape == (1000,)
        np.testing.assert_allclose(got, ref, rtol=1e-10)
        np.testing.assert_allclose(res.column(x).numpy(), ref, rtol=1e-10)
    assert column.trace_count == (0 if mode is False else 1)


def test_resonance_radii_and_numbers():
    """Numbers for mass/width make fixed parameters; the radii enter as in the formula."""
    kin = DalitzKinematics(*MASSES)
    x = uniform_np(300, MASSES, seed=4)
    res = Resonance(kin, "12", 0.8955, 0.0473, 2, radius=3.0, parent_radius=2.0)
    assert res.name == "R12" and not res.mass.floating and not res.width.floating
    assert res.mass.name == "R12_mass"
    np.testing.assert_allclose(res.column(x).numpy(),
                               resonance_np(x, MASSES, ("12",), 0.8955, 0.0473, 2, d=3.0, dp=2.0), rtol=1e-10)
    # Bose symmetry: the symmetrized amplitude is symmetric under s12 <-> s13
    sym = Resonance(kin, ("12", "13"), 0.8955, 0.0473, 1)
    np.testing.assert_allclose(sym.column(x[:, ::-1]).numpy(), sym.column(x).numpy(), rtol=1e-12)


def test_non_resonant_column(kin, data):
    nr = NonResonant(kin, name="flat")
    assert nr.name == "flat" and nr.params == {}
    got = nr.column(data).numpy()
    assert got.dtype == np.complex128
    np.testing.assert_array_equal(got, np.ones(N_DATA, complex))


# -- coherent sum, integrals, fit fractions -------------------------------------------------------
def test_coherent_sum_against_numpy(kin, mc, data, x_mc, x_data):
    """amplitude_matrix, intensity, integral_matrix, norm: cached and uncached equal numpy."""
    w = build(kin, mc, data)
    couplings = [TRUTH[n] for n in w.names]
    cols_d, cols_mc = columns_np(x_data, w.names), columns_np(x_mc, w.names)
    ref_matrix = cols_mc.T @ cols_mc.conj() / N_MC  # I_jk = <A_j A_k^*>
    for amp in (w.amp, w.amp_u):
        np.testing.assert_allclose(amp.coupling_vector().numpy(), couplings, rtol=1e-14)
        np.testing.assert_allclose(amp.amplitude_matrix(data).numpy(), cols_d, rtol=1e-10)
        np.testing.assert_allclose(amp.intensity(data).numpy(), np.abs(cols_d @ couplings) ** 2, rtol=1e-10)
        np.testing.assert_allclose(amp.intensity(x_data).numpy(), np.abs(cols_d @ couplings) ** 2, rtol=1e-10)
        got = amp.integral_matrix(mc).numpy()
        assert got.shape == (3, 3) and got.dtype == np.complex128
        np.testing.assert_allclose(got, got.conj().T, rtol=1e-15, atol=1e-15)  # Hermitian
        np.testing.assert_allclose(got, ref_matrix, rtol=1e-10)
        c = np.asarray(couplings)
        norm = float(amp.norm(mc))
        assert norm == pytest.approx(np.mean(np.abs(cols_mc @ c) ** 2), rel=1e-10)
        assert norm == pytest.approx(np.real(c @ ref_matrix @ c.conj()), rel=1e-10)
    assert len(w.amp) == 3
    w.pdf_u.pdf(data), w.pdf_u.normalization()
    assert not w.amp_u.__dict__.get("_zcache_caches") and not w.pdf_u.__dict__.get("_zcache_caches")  # cache=False
    assert [p.name for p in w.amp.get_params()] == ["c_kst_mag", "c_kst_phase", "c_k0_mag", "c_k0_phase"]
    assert [p.name for p in w.amp.get_params(None)][-3:] == ["Kst_width", "K0_mass", "K0_width"]
    assert {p.name for p in w.pdf.get_params()} == {"c_kst_mag", "c_kst_phase", "c_k0_mag", "c_k0_phase"}


def test_fit_fractions(kin, mc, data, x_mc):
    """fit_fractions = |c_k|^2 I_kk / c^T I c^*; with the interference terms they sum to 1; one component: 1."""
    w = build(kin, mc, data)
    couplings = [TRUTH[n] for n in w.names]
    cols = columns_np(x_mc, w.names)
    c = np.asarray(couplings)
    total = np.mean(np.abs(cols @ c) ** 2)
    ref = np.array([np.mean(np.abs(c[k] * cols[:, k]) ** 2) for k in range(3)]) / total
    for amp in (w.amp, w.amp_u):
        ff = fit_fractions(amp, mc)
        assert isinstance(ff, np.ndarray) and ff.shape == (3,)
        np.testing.assert_allclose(ff, ref, rtol=1e-10)
    interference = sum(2 * np.real(c[j] * np.conj(c[k]) * np.mean(cols[:, j] * np.conj(cols[:, k])))
                       for j in range(3) for k in range(j + 1, 3)) / total
    assert ff.sum() + interference == pytest.approx(1.0, rel=1e-12)
    assert abs(ff.sum() - 1.0) > 1e-3  # there is interference to account for
    w.c_kst.set_value(2.0 * TRUTH["Kst"])  # fractions follow the couplings
    c[1] = 2.0 * TRUTH["Kst"]
    total = np.mean(np.abs(cols @ c) ** 2)
    assert fit_fractions(w.amp, mc)[1] == pytest.approx(np.mean(np.abs(c[1] * cols[:, 1]) ** 2) / total, rel=1e-10)
    alone = CoherentSum([(0.3 - 2j, w.kst)])
    np.testing.assert_allclose(fit_fractions(alone, mc), [1.0], rtol=1e-14)


# -- AmplitudePdf ---------------------------------------------------------------------------------
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_amplitude_pdf_values_and_integrals(kin, mc, data, x_mc, x_data):
    """pdf = |A|^2 / (V <|A|^2>_MC) (numpy), integrate() = 1, a sub-box's integral by MC, and
    V * mean(pdf) over a fresh uniform sample is 1 within its statistical error."""
    w = build(kin, mc, data)
    couplings = [TRUTH[n] for n in w.names]
    ref = pdf_np(x_data, x_mc, w.names, couplings)
    for pdf in (w.pdf, w.pdf_u):
        assert pdf.area == pytest.approx(AREA, rel=1e-10) and pdf.space is kin.space
        np.testing.assert_allclose(pdf.pdf(data).numpy(), ref, rtol=1e-10)
        np.testing.assert_allclose(pdf.pdf(x_data).numpy(), ref, rtol=1e-10)
        np.testing.assert_allclose(pdf.log_pdf(data).numpy(), np.log(ref), rtol=1e-10)
        assert float(pdf.integrate()) == pytest.approx(1.0, rel=1e-14)
        assert float(pdf.normalization()) == pytest.approx(
            AREA * np.mean(np.abs(columns_np(x_mc, w.names) @ couplings) ** 2), rel=1e-10)
        lower, upper = (0.5, 0.6), (1.5, 2.0)  # a box inside the bounding box: MC over the phase-space sample
        intensity = np.abs(columns_np(x_mc, w.names) @ couplings) ** 2
        in_box = np.all((x_mc >= lower) & (x_mc <= upper), axis=1)
        assert float(pdf.integrate(lower, upper)) == pytest.approx(np.mean(intensity * in_box) / np.mean(intensity),
                                                                   rel=1e-10)
    fresh = uniform_np(20_000, MASSES, seed=7)
    values = AREA * w.pdf.pdf(fresh).numpy()
    i_mc = np.abs(columns_np(x_mc, w.names) @ couplings) ** 2
    sigma = np.sqrt(np.var(values) / len(fresh) + np.var(i_mc / i_mc.mean()) / N_MC)
    assert abs(values.mean() - 1.0) < 4 * sigma
    assert sigma < 0.05


def test_extended_amplitude_pdf(kin, mc, x_mc, x_data):
    """With a yield, AmplitudePdf is extended: ExtendedUnbinnedNLL adds nu - N log nu to the numpy NLL."""
    from zcache.loss import ExtendedUnbinnedNLL

    n = zcache.Parameter("n_sig", 1800.0, lower=0.0)
    amp = CoherentSum([(1.0, NonResonant(kin)),
                       (ComplexParameter("c_e", TRUTH["Kst"]), Resonance(kin, ("12", "13"), *RES["Kst"][1:], name="Kst"))])
    pdf = AmplitudePdf(amp, mc, extended=n, name="ext")
    assert pdf.is_extended and float(pdf.get_yield()) == 1800.0
    assert {p.name for p in pdf.get_params()} == {"c_e_mag", "c_e_phase", "n_sig"}
    data = zcache.Data(x_data, obs=("s12", "s13"), name="d_ext")
    loss = ExtendedUnbinnedNLL(pdf, data)
    with zcache.set_graph_mode(False):
        ref = nll_np(x_data, x_mc, ["NR", "Kst"], [1.0, TRUTH["Kst"]]) + 1800.0 - N_DATA * np.log(1800.0)
        assert float(loss.value()) == pytest.approx(ref, rel=1e-10)
        assert {p.name for p in loss.params} == {"c_e_mag", "c_e_phase", "n_sig"}


@slow_modes("mode", "graph", "eager")  # graph 5 s, eager 6 s (numdifftools); test_partial_recompute is the fast check
def test_cached_equals_uncached_values_and_gradients(kin, mc, data, x_mc, x_data, mode):
    """Cached and uncached pdfs, NLLs and gradients agree to 1e-12 (gradients 1e-10) in graph and
    eager mode, before and after changing couplings and a resonance mass, and match numpy and
    numdifftools; a coupling change recomputes no column or integral, a mass change only its own.
    (Graph mode: NR + K* only; tracing the gradient of a 3-component sum costs ~10 s on 2 cores.)"""
    names = ("NR", "Kst") if mode else ("NR", "Kst", "K0")
    w = build(kin, mc, data, names=names)
    params = w.grad_params  # the couplings (polar) and the K* mass (fixed, but differentiated)
    ref_nll = nll_factory(x_data, x_mc, names)

    def check():
        couplings, mass_of = state(w)
        v_c, g_c = w.loss.value_gradient(params)
        v_u, g_u = w.loss_u.value_gradient(params)
        theta = np.array([float(p.value()) for p in params])
        assert float(v_c) == pytest.approx(float(v_u), rel=1e-12)
        assert float(v_c) == pytest.approx(ref_nll(theta), rel=1e-10)
        np.testing.assert_allclose(g_c.numpy(), g_u.numpy(), rtol=1e-10, atol=1e-8)
        num = nd.Gradient(ref_nll, step=1e-6)(theta)
        np.testing.assert_allclose(g_c.numpy(), num, rtol=1e-5, atol=1e-3)
        if mode is False:  # per-event pdfs (graph mode reads them through the losses above)
            assert float(w.loss.value()) == pytest.approx(float(v_c), rel=1e-14)
            np.testing.assert_allclose(w.pdf.pdf(data).numpy(), w.pdf_u.pdf(data).numpy(), rtol=1e-12)
            np.testing.assert_allclose(w.pdf.pdf(data).numpy(), pdf_np(x_data, x_mc, w.names, couplings, **mass_of),
                                       rtol=1e-10)

    check()
    caches = caches_by_name(*w.owners)
    assert set(caches) >= {"NR[mc]", "Kst[mc]", "NR[data]", "Kst[data]", "A_k[data]", "I[mc]", "I[NR,NR]",
                           "I[NR,Kst]", "I[Kst,Kst]", "AmplitudePdf.normalization"}
    # (the loss reads log|A|^2 and the normalization, not the per-event pdf cache)
    columns_and_integrals = {n for n in caches if n.startswith(("NR[", "Kst[", "K0[", "I[", "A_k["))}
    before = snapshot(caches)
    for n, v in zip(names[1:], (0.1 - 0.35j, -0.2 + 0.6j), strict=False):
        w.c[n].set_value(v)
    check()
    assert not missed(caches, before) & columns_and_integrals
    before = snapshot(caches)
    w.mass.set_value(0.91)
    check()
    kst_parts = {"Kst[mc]", "Kst[data]", "I[NR,Kst]", "I[Kst,Kst]", "I[mc]", "A_k[data]"}
    kst_parts |= {"I[Kst,K0]"} if "K0" in names else set()
    assert missed(caches, before) & columns_and_integrals == kst_parts
    for loss in (w.loss, w.loss_u):
        assert loss._gradient_fns[tuple(params)].trace_count == (0 if mode is False else 1)


def test_partial_recompute(kin, mc, data, x_mc, x_data):
    """Eagerly: a coupling change misses only the pdf and normalization; a mass change the resonance's
    columns, its K integrals, the matrices, pdf and normalization; no change misses nothing."""
    w = build(kin, mc, data)
    with zcache.set_graph_mode(False):
        w.loss.value()
        caches = caches_by_name(*w.owners)
        assert all(c.stats["misses"] == 1 for c in caches.values())
        assert len([n for n in caches if n.startswith("I[") and n != "I[mc]"]) == 6  # the upper triangle

        def misses_after(change):
            before = snapshot(caches)
            change()
            couplings, mass_of = state(w)
            assert float(w.loss.value()) == pytest.approx(nll_np(x_data, x_mc, w.names, couplings, **mass_of),
                                                          rel=1e-10)
            return missed(caches, before)

        top = {"AmplitudePdf.normalization"}  # the loss reads log|A|^2, not the per-event pdf cache
        assert misses_after(lambda: w.c_kst.set_value(0.6j)) == top
        assert misses_after(lambda: w.c_k0.mag.set_value(0.4)) == top
        assert misses_after(lambda: None) == set()
        assert misses_after(lambda: w.mass.set_value(0.88)) == top | {
            "Kst[mc]", "Kst[data]", "I[NR,Kst]", "I[Kst,Kst]", "I[Kst,K0]", "I[mc]", "A_k[data]"}
        assert misses_after(lambda: w.mass.set_value(0.88)) == set()  # same value: nothing
        # the column caches are per Data: _cached_column reaches the same cache
        before = caches["Kst[mc]"].stats
        w.kst._cached_column(mc)
        assert caches["Kst[mc]"].stats == {"hits": before["hits"] + 1, "misses": before["misses"]}


def test_precompute_with_floating_couplings(kin, mc, data, x_mc, x_data):
    """Couplings floating: columns, A_k and integrals cached, pdf and normalization always dirty;
    values unchanged, also after coupling changes."""
    w = build(kin, mc, data)
    with zcache.set_graph_mode(False), zcache.set_autograd_mode(True):
        before = float(w.loss.value())
        report = zcache.precompute(w.loss)
        status = {n.name: n.status for n in report.nodes}
        assert "AmplitudePdf._cached_pdf" not in status  # not read by the loss
        assert status["AmplitudePdf.normalization"] == "always dirty"
        assert status["I[mc]"] == "cached" and status["A_k[data]"] == "cached"
        for name in ("NR[mc]", "Kst[mc]", "K0[mc]", "NR[data]", "Kst[data]", "K0[data]", "I[NR,NR]", "I[NR,Kst]",
                     "I[NR,K0]", "I[Kst,Kst]", "I[Kst,K0]", "I[K0,K0]"):
            assert status[name] in ("cached", "cached (inner)"), name
        assert set(report.floating) == {"c_kst_mag", "c_kst_phase", "c_k0_mag", "c_k0_phase"}
        assert float(w.loss.value()) == pytest.approx(before, rel=1e-14)
        caches = caches_by_name(*w.owners[:-1])
        snap = snapshot(caches)
        w.c_kst.set_value(0.2 + 0.1j)
        couplings, _ = state(w)
        assert float(w.loss.value()) == pytest.approx(nll_np(x_data, x_mc, w.names, couplings), rel=1e-10)
        assert missed(caches, snap) == set()
        report.undo()


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_precompute_with_a_floating_mass(kin, mc, data, x_mc, x_data):
    """A floating K* mass makes its columns and integrals (and the matrices) always dirty, the rest cached;
    the mass gradient equals numdifftools. With numerical gradients those caches are kept instead."""
    w = build(kin, mc, data, float_mass=True)
    kst_parts = {"Kst[mc]", "Kst[data]", "I[NR,Kst]", "I[Kst,Kst]", "I[Kst,K0]", "I[mc]", "A_k[data]",
                 "AmplitudePdf.normalization"}
    others = {"NR[mc]", "K0[mc]", "NR[data]", "K0[data]", "I[NR,NR]", "I[NR,K0]", "I[K0,K0]", "data in range"}
    with zcache.set_graph_mode(False), zcache.set_autograd_mode(True):
        report = zcache.precompute(w.loss)
        status = {n.name: n.status for n in report.nodes}
        assert {n for n, s in status.items() if s == "always dirty"} == kst_parts
        assert all(status[n] in ("cached", "cached (inner)") for n in others)
        assert "Kst_mass" in report.floating
        w.mass.set_value(0.9)
        value, grad = w.loss.value_gradient([w.mass])
        theta = np.array([*(float(p.value()) for p in w.coupling_params), 0.9])
        ref = nll_factory(x_data, x_mc)
        assert float(value) == pytest.approx(ref(theta), rel=1e-10)
        num = nd.Derivative(lambda m: ref(np.array([*theta[:4], m])), step=1e-6)(0.9)
        assert float(grad[0]) == pytest.approx(float(num), rel=1e-6)
        report.undo()
    with zcache.set_graph_mode(False), zcache.set_autograd_mode(False):
        report = zcache.precompute(w.loss)
        status = {n.name: n.status for n in report.nodes}
        assert status["Kst[mc]"] == status["I[Kst,Kst]"] == "cached (floating)"
        assert status["AmplitudePdf.normalization"] == "always dirty"  # depends on every floating parameter
        report.undo()


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_simulation_pipeline_reuses_integrals(kin, mc, x_mc):
    """Refilling the loss's data (sample into it, or set_data) recomputes the data's columns only:
    the integrals and the normalization are not recomputed."""
    w = build(kin, mc, zcache.Data(uniform_np(500, MASSES, seed=8), name="data", obs=("s12", "s13")))
    with zcache.set_graph_mode(False):
        w.loss.value()
        caches = caches_by_name(*w.owners)
        integrals = {n for n in caches if n.startswith("I[")} | {"AmplitudePdf.normalization"}
        data_parts = {"NR[data]", "Kst[data]", "K0[data]", "A_k[data]"}
        for refill in (lambda: w.pdf.sample(300, data=w.loss.data),
                       lambda: w.loss.data.set_data(uniform_np(200, MASSES, seed=9))):
            before = snapshot(caches)
            refill()
            value = float(w.loss.value())
            x = w.loss.data.numpy()
            couplings, _ = state(w)
            assert value == pytest.approx(nll_np(x, x_mc, w.names, couplings), rel=1e-10)
            assert missed(caches, before) == data_parts
            assert all(caches[n].stats["misses"] == before[n]["misses"] for n in integrals)


# -- sampling and fitting -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def generated(kin):
    """3000 events sampled from the truth model (NR + K* + K0*), with its phase-space sample."""
    set_seed(2024)
    with zcache.set_graph_mode(False):  # the traced sampler gives the same events, but costs a trace
        mc_gen = kin.sample(20_000, name="mc_gen")
    w = SimpleNamespace(names=["NR", "Kst", "K0"])
    amp = CoherentSum([(TRUTH["NR"], NonResonant(kin)),
                       (TRUTH["Kst"], Resonance(kin, ("12", "13"), *RES["Kst"][1:], name="Kst")),
                       (TRUTH["K0"], Resonance(kin, ("12", "13"), *RES["K0"][1:], name="K0"))])
    pdf = AmplitudePdf(amp, mc_gen)
    with zcache.set_graph_mode(False):
        data = pdf.sample(3000)
    w.x, w.x_mc = data.numpy(), mc_gen.numpy()
    w.data, w.pdf = data, pdf
    return w


def _chi2_projection(values, couplings, names, channel_col, x_ref, bins=20):
    """chi2 of the histogram of ``values`` against the model's projection from weighted uniform events."""
    weights = np.abs(columns_np(x_ref, names) @ np.asarray(couplings)) ** 2
    edges = np.linspace(*np.quantile(x_ref[:, channel_col], [0.0, 1.0]), bins + 1)
    edges[0], edges[-1] = -np.inf, np.inf
    counts = np.histogram(values, edges)[0]
    w_sum = np.histogram(x_ref[:, channel_col], edges, weights=weights)[0]
    w2_sum = np.histogram(x_ref[:, channel_col], edges, weights=weights**2)[0]
    n = len(values)
    expected = n * w_sum / weights.sum()
    var = expected + (n / weights.sum()) ** 2 * w2_sum  # Poisson + the reference's MC error
    return float(np.sum((counts - expected) ** 2 / var)), bins


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_sampling_follows_the_model(kin, generated):
    """Sampled events lie in the Dalitz plot and their s12, s13 histograms match the model's projections
    (numpy intensity on numpy phase space); a model with a different K* coupling does not match."""
    x = generated.x
    assert x.shape == (3000, 2) and generated.data.obs == ("s12", "s13")
    assert kin.inside(x).numpy().all() and inside_np(x, MASSES).all()
    x_ref = uniform_np(20_000, MASSES, seed=10)
    truth = [TRUTH[n] for n in generated.names]
    for col in (0, 1):
        chi2, ndf = _chi2_projection(x[:, col], truth, generated.names, col, x_ref)
        assert scipy.stats.chi2.sf(chi2, ndf - 1) > 1e-3, (col, chi2)
    # the mean log-intensity of the sample is the model's (the score of a distortion p -> p^beta: any
    # accept-reject that does not accept with probability I / I_max shows here)
    weights = np.abs(columns_np(x_ref, generated.names) @ np.asarray(truth)) ** 2
    log_ref = np.log(weights)
    expected = np.sum(weights * log_ref) / weights.sum()
    var = np.sum(weights * (log_ref - expected) ** 2) / weights.sum()
    sigma = np.sqrt(var / len(x) + np.sum(weights**2 * (log_ref - expected) ** 2) / weights.sum() ** 2)
    got = np.mean(np.log(np.abs(columns_np(x, generated.names) @ np.asarray(truth)) ** 2))
    assert abs(got - expected) < 3 * sigma, (got, expected, sigma)  # fixed seed: 0.2 sigma; p^0.9 gives 3.1
    wrong = [TRUTH["NR"], 1.3 * TRUTH["Kst"], TRUTH["K0"]]
    chi2, ndf = _chi2_projection(x[:, 0], wrong, generated.names, 0, x_ref)
    assert scipy.stats.chi2.sf(chi2, ndf - 1) < 1e-3
    # the sampler's envelope covers the intensity
    assert float(generated.pdf._fmax()) > np.abs(columns_np(generated.x_mc, generated.names)
                                                  @ np.asarray(truth)).max() ** 2


@pytest.mark.slow  # 2.5 s
def test_fit_recovers_couplings(kin, generated):
    """Minuit on 3000 generated events (K* and K0* couplings floating, NR fixed) recovers the truth
    within 4 sigma; the minimum and the HESSE errors are the numpy NLL's. (Eager: the traced fit is the
    same computation, and its traces cost more than the fit.)"""
    mc_fit = zcache.Data(generated.x_mc, name="mc_fit", obs=("s12", "s13"))
    data_fit = zcache.Data(generated.x, name="data_fit", obs=("s12", "s13"))
    w = build(kin, mc_fit, data_fit)
    w.c_kst.set_value(0.25 + 0.3j)
    w.c_k0.set_value(0.6 - 0.3j)
    with zcache.set_graph_mode(False):
        result = Minuit().minimize(w.loss)
    assert result.valid
    truth = {"c_kst_mag": abs(TRUTH["Kst"]), "c_kst_phase": cmath.phase(TRUTH["Kst"]),
             "c_k0_mag": abs(TRUTH["K0"]), "c_k0_phase": cmath.phase(TRUTH["K0"])}
    for name, value in truth.items():
        assert abs(result.values[name] - value) < 4 * result.errors[name], (name, result.values[name], value)
        assert 0 < result.errors[name] < 0.3
        assert float(next(p for p in w.loss.params if p.name == name).value()) == result.values[name]
    theta = np.array([result.values[n] for n in truth])
    ref = nll_factory(generated.x, generated.x_mc)
    assert result.fmin == pytest.approx(ref(theta), rel=1e-10)
    assert ref(theta) <= ref(np.array(list(truth.values()))) + 1e-6
    np.testing.assert_allclose(nd.Gradient(ref, step=1e-6)(theta) * [result.errors[n] for n in truth], 0.0, atol=0.02)
    hess = nd.Hessian(ref, step=1e-4)(theta)
    np.testing.assert_allclose([result.errors[n] for n in truth], np.sqrt(np.diag(np.linalg.inv(hess))), rtol=0.02)


# -- errors --------------------------------------------------------------------------------------
def test_bad_amplitude_inputs(kin, mc):
    """Spin 3, unknown channel, no channel, a mass outside a channel's range, non-kinematics, bad numbers."""
    for spin in (3, -1, 1.5):
        with pytest.raises(ModelError):
            Resonance(kin, "12", 0.8955, 0.05, spin)
    with pytest.raises(ModelError):
        Resonance(kin, "14", 0.8955, 0.05, 1)
    with pytest.raises(ModelError):
        Resonance(kin, (), 0.8955, 0.05, 1)
    with pytest.raises(ModelError):
        Resonance(kin, ("12", "21"), 0.8955, 0.05, 1)
    for mass, channel in [(0.5, "12"), (1.8, "12"), (0.2, "23"), (1.5, "23"), (1.7, ("12", "23")), (0.633, "12")]:
        with pytest.raises(ModelError):
            Resonance(kin, channel, mass, 0.05, 1)
    with pytest.raises(ModelError):
        Resonance(kin, "12", zcache.Parameter("m_out", 2.0), 0.05, 1)
    with pytest.raises(ModelError):
        Resonance(kin, "12", "heavy", 0.05, 1)
    with pytest.raises(ModelError):
        Resonance(kin, "12", 0.8955, None, 1)
    with pytest.raises(ModelError):
        Resonance("kin", "12", 0.8955, 0.05, 1)
    with pytest.raises(ModelError):
        NonResonant(Space("x", 0, 1))


def test_bad_sum_and_pdf_inputs(kin, mc, x_mc):
    """Different kinematics, duplicate names, non-Amplitude components, no components, a phase space that is
    not a Data (or has events outside the plot), a pdf of something else: ModelError."""
    nr = NonResonant(kin)
    kst = Resonance(kin, ("12", "13"), 0.8955, 0.0473, 1, name="Kst")
    other = Resonance(DalitzKinematics(*MASSES), ("12", "13"), 1.425, 0.27, 0, name="K0")
    bad_components = [
        [],
        [(1.0, nr), (0.5, other)],  # same masses, but another kinematics object
        [(1.0, nr), (0.5, NonResonant(kin))],  # duplicate names 'NR'
        [(1.0, nr), (0.5, Gaussian(Space("x", 0, 1), 0.5, 0.1))],
        [(1.0, nr), (0.5, "K*")],
        [(1.0, nr), nr],
        [(1.0, nr, 2.0)],
        [(1.0, nr), (0.5, kst, "x")],
    ]
    for components in bad_components:
        with pytest.raises(ModelError):
            CoherentSum(components)
    amp = CoherentSum([(1.0, nr), (0.5, kst)])
    assert not any(p.floating for p in amp.get_params(None))  # number couplings are fixed
    for phasespace in (x_mc, tf.constant(x_mc), [[1.0, 1.0]], None):
        with pytest.raises(ModelError):
            AmplitudePdf(amp, phasespace)
    lo12, lo13 = kin.s_range("12")[0], kin.s_range("13")[0]
    outside = np.array([[lo12 + 0.01, lo13 + 0.01], *x_mc[:10]])  # in the box, not in the plot
    with pytest.raises(ModelError):
        AmplitudePdf(amp, zcache.Data(outside, obs=("s12", "s13")))
    with pytest.raises(ModelError):
        AmplitudePdf(Gaussian(Space("x", 0, 1), 0.5, 0.1), mc)
    with pytest.raises(ModelError):
        amp.integral_matrix(x_mc)
    with pytest.raises(ModelError):
        AmplitudePdf(amp, zcache.Data(x_mc, obs=("a", "b")))  # no s12/s13 columns


def test_data_outside_the_dalitz_plot(kin, mc, x_data):
    """UnbinnedNLL refuses events inside the bounding box but outside the plot (DataRangeError), at
    construction and after a set_data."""
    amp = CoherentSum([(1.0, NonResonant(kin)), (0.5j, Resonance(kin, ("12", "13"), 0.8955, 0.0473, 1, name="Kst"))])
    pdf = AmplitudePdf(amp, mc)
    (lo12, hi12), (lo13, hi13) = kin.s_range("12"), kin.s_range("13")
    corner = np.array([[hi12 - 0.01, hi13 - 0.01]])
    assert bool(Space(["s12", "s13"], [lo12, lo13], [hi12, hi13]).inside(corner)[0])
    bad = np.concatenate([x_data[:50], corner])
    with pytest.raises(DataRangeError):
        UnbinnedNLL(pdf, zcache.Data(bad, obs=("s12", "s13")))
    data = zcache.Data(x_data[:50], obs=("s12", "s13"), name="d")
    loss = UnbinnedNLL(pdf, data)
    with zcache.set_graph_mode(False):
        assert np.isfinite(float(loss.value()))
        data.set_data(bad)
        with pytest.raises(DataRangeError):
            loss.value()


def test_amplitude_subclass_contract(kin):
    """An Amplitude subclass without _compute raises NotImplementedError; one with it plugs into a sum."""
    class Bare(Amplitude):
        def __init__(self, kinematics):
            super().__init__(kinematics, {}, "bare")

    with pytest.raises(NotImplementedError):
        Bare(kin).column(np.array([[1.0, 1.0]]))

    class Linear(Amplitude):
        def __init__(self, kinematics):
            super().__init__(kinematics, {}, "lin")

        def _compute(self, x):
            return tf.complex(x[:, 0], -x[:, 1])

    x = uniform_np(100, MASSES, seed=12)
    amp = CoherentSum([(2.0, Linear(kin)), (1j, NonResonant(kin))])
    np.testing.assert_allclose(amp.intensity(x).numpy(), np.abs(2 * (x[:, 0] - 1j * x[:, 1]) + 1j) ** 2, rtol=1e-13)
    assert "lin" in repr(Linear(kin))


# -- regressions of the review (mass range, sampling envelope) -------------------------------
def test_number_mass_gets_the_channel_range_as_limits():
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039)
    res = Resonance(kin, ("12", "13"), 0.89555, 0.0473, 1, name="Kst_limits")
    lo, hi = (np.sqrt(v) for v in kin.s_range("12"))
    assert res.mass.lower == pytest.approx(lo) and res.mass.upper == pytest.approx(hi)
    with pytest.raises(zcache.exceptions.ParameterValueError):
        res.mass.set_value(0.5)
    assert res.mass.value().numpy() == 0.89555  # unchanged


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_mass_parameter_moved_outside_the_range_is_a_model_error(graph):
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039)
    mass = zcache.Parameter("m_free_range", 0.9)  # no limits: the amplitude checks
    res = Resonance(kin, "12", mass, 0.05, 1, name="Kst_free_range")
    x = kin.sample(50, name="few").value().numpy()
    with zcache.set_graph_mode(graph):
        f = zcache.function(lambda: res.column(tf.constant(x)))
        assert np.isfinite(f().numpy()).all()
        mass.set_value(0.5)
        with pytest.raises(ModelError, match="left the channels' range"):
            f()


@pytest.mark.slow  # 3 s; test_envelope_error_quotes_the_safety_factor_the_code_uses is its fast twin
def test_sampling_refuses_an_envelope_that_is_too_low():
    """A resonance narrower than the phase-space sample resolves: refused, not silently biased."""
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039)
    set_seed(11)
    narrow = Resonance(kin, ("12", "13"), 0.89555, 0.0001, 1, name="very_narrow")
    pdf = AmplitudePdf(CoherentSum([(1.0, narrow)]), kin.sample(200, name="tiny_phsp"))
    with pytest.raises(ModelError, match="exceeded the envelope"):
        pdf.sample(2000)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_envelope_error_quotes_the_safety_factor_the_code_uses(monkeypatch):
    """The envelope error quotes the factor the envelope is built with (one constant, not a copy:
    the message said 1.5 x whatever the code used)."""
    monkeypatch.setattr(zcache.amplitude._coherent_sum, "_FMAX_SAFETY", 3.0)  # any value: the message must follow
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039)
    set_seed(11)
    narrow = Resonance(kin, ("12", "13"), 0.89555, 0.0001, 1, name="very_narrow_quoted")
    phsp = kin.sample(200, name="tiny_phsp_quoted")
    pdf = AmplitudePdf(CoherentSum([(1.0, narrow)]), phsp)
    assert float(pdf._fmax()) == pytest.approx(3.0 * float(tf.reduce_max(pdf.amplitude.intensity(phsp))), rel=1e-12)
    with pytest.raises(ModelError, match="exceeded the envelope") as err:
        pdf.sample(2000)
    quoted = re.search(r"envelope \(([0-9.]+) x its maximum", str(err.value))
    assert quoted is not None and float(quoted.group(1)) == zcache.amplitude._coherent_sum._FMAX_SAFETY, str(err.value)


@pytest.mark.slow  # 7 s: a fit
def test_padded_data_in_an_amplitude_fit(kin, mc, x_data, x_mc):
    """Padded fit data (capacity=): the NLL of the events, against numpy; a padded phase-space
    sample is refused (its integrals are means over every row)."""
    padded = zcache.Data(x_data[:700], name="data_padded", obs=("s12", "s13"), capacity=1024)
    w = build(kin, mc, padded, names=("NR", "Kst"))
    couplings, mass_of = state(w)
    ref = nll_np(x_data[:700], x_mc, w.names, couplings, **mass_of)
    assert float(w.loss.value()) == pytest.approx(ref, rel=1e-10)
    assert float(w.loss_u.value()) == pytest.approx(ref, rel=1e-10)
    padded.set_data(x_data[:555])
    assert float(w.loss.value()) == pytest.approx(nll_np(x_data[:555], x_mc, w.names, couplings, **mass_of), rel=1e-10)
    padded_mc = zcache.Data(x_mc[:1000], name="mc_padded", obs=("s12", "s13"), capacity="auto")
    with pytest.raises(ModelError, match="padded"):
        AmplitudePdf(w.amp, padded_mc)
    with pytest.raises(ModelError, match="padded"):
        w.amp.integral_matrix(padded_mc)


@pytest.mark.slow  # 4.6 s
def test_mass_check_inside_a_cache_raises_its_error_in_a_traced_loss(kin, mc, data):
    """A check that fails inside a cache's miss branch cancels the ops beside it, and TensorFlow
    may report that cancellation (CancelledError) instead: the call is undone and rerun eagerly,
    which raises the check's ModelError. Afterwards the loss is what it was."""
    free = zcache.Parameter("m_free_traced", 1.425)  # no limits: the range check stays in the graph
    amps = [(ComplexParameter("c_nr_traced", 1.0, floating=False), NonResonant(kin)),
            (ComplexParameter("c_free_traced", 0.3 - 0.2j), Resonance(kin, ("12", "13"), free, 0.27, 0, name="K0t"))]
    loss = UnbinnedNLL(AmplitudePdf(CoherentSum(amps), mc), data)
    with zcache.set_graph_mode(True):
        before = float(loss.value())
        free.set_value(5.0)  # above the channels' range
        for _ in range(3):
            with pytest.raises(ModelError, match="left the channels' range"):
                loss.value()
        free.set_value(1.425)
        assert float(loss.value()) == pytest.approx(before, rel=1e-14)


@pytest.mark.slow  # about 28 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_a_compiled_fit_computes_each_column_once_per_dataset(kin, generated):
    """With the K* mass floating, the compiled fit's program computes the K* column once per dataset
    per trace, though every block of the integral matrix that has K* reads it (4 reads of the
    phase-space column: blocks (NR, K*), (K*, K*) twice and (K*, K0*)); the fit equals MIGRAD's."""
    mc_fit = zcache.Data(generated.x_mc, name="mc_once", obs=("s12", "s13"))
    data_fit = zcache.Data(generated.x, name="data_once", obs=("s12", "s13"))
    w = build(kin, mc_fit, data_fit, float_mass=True)
    w.mass.set_value(0.9)
    start = [float(p) for p in w.loss.params]
    rows = []
    compute = w.kst._compute

    def counted(x):
        rows.append(x.shape[0])
        return compute(x)

    w.kst._compute = counted
    result = Minuit(precompute=False, tiered=False).minimize(w.loss)
    assert result.valid and result.path == "compiled", result.fallback
    # once per dataset in the search for the served caches (eager), once per dataset in the program's trace
    assert sorted(r for r in rows if r is not None) == sorted([len(generated.x), len(generated.x_mc)])
    assert rows.count(None) == 2, rows
    zcache.set_values(w.loss.params, start)
    reference = Minuit(compiled=False, tol=1e-4).minimize(w.loss)
    for name, value in reference.values.items():
        assert result.values[name] == pytest.approx(value, abs=2e-3 * reference.errors[name])


@pytest.mark.slow  # about 3 CPU seconds (CONTRIBUTING.md, "Test times")
def test_the_intensity_runs_no_pow_kernel(kin, mc, data):
    """|A|^2 of the coherent core is squares, not ``** 2``: without Grappler (a compiled fit's program)
    TensorFlow keeps ``x ** 2`` as its generic Pow kernel, whose gradient takes logs; measured 10-17 ms
    per call at 1e5 events, most of a J/psi couplings fit (warm 1.71 s -> 0.39 s with squares)."""
    w = build(kin, mc, data)
    params = [p for p in w.coupling_params]

    @tf.function
    def value_and_gradient():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(w.amp.intensity(mc))
        return total, tape.gradient(total, [zcache._engine.inputs.backing_variable(p) for p in params])

    graph = value_and_gradient.get_concrete_function().graph
    ops = {op.type for op in graph.get_operations()}
    for fn in graph.as_graph_def().library.function:
        ops |= {node.op for node in fn.node_def}
    assert "Pow" not in ops, sorted(ops)
    total, _ = value_and_gradient()
    np.testing.assert_allclose(float(total), float(tf.reduce_sum(w.amp_u.intensity(mc))), rtol=1e-12)


# -- issue 51: per-event results of padded data ---------------------------------------------------
@pytest.mark.slow  # about 5 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_coherent_sum_intensity_and_amplitude_matrix_of_padded_data_have_one_row_per_event(kin, mc, x_data):
    """intensity / amplitude_matrix / amplitude of padded data gave one row per slot (capacity); now per event."""
    events = x_data[:37]
    plain = zcache.Data(events, name="d_plain_51", obs=("s12", "s13"))
    padded = zcache.Data(events, name="d_padded_51", obs=("s12", "s13"), capacity=64)
    w = build(kin, mc, plain)
    cols = columns_np(events, w.names)
    couplings = np.array([TRUTH[n] for n in w.names])
    for amp in (w.amp, w.amp_u):
        for fn, ref in ((amp.intensity, np.abs(cols @ couplings) ** 2), (amp.amplitude_matrix, cols),
                        (amp.amplitude, cols @ couplings)):
            np.testing.assert_allclose(fn(padded).numpy(), ref, rtol=1e-10)
            np.testing.assert_allclose(fn(padded).numpy(), fn(plain).numpy(), rtol=1e-13)
            assert fn(padded, raw=True).shape[0] == 64  # what models compute on: every slot

            @zcache.function
            def traced(fn=fn):
                return fn(padded)

            np.testing.assert_allclose(traced().numpy(), ref, rtol=1e-10)
            _ = padded.set_data(x_data[:5])  # a new size: the same traced function, five rows
            np.testing.assert_allclose(traced().numpy(), fn(zcache.Data(x_data[:5], obs=("s12", "s13"))).numpy(),
                                       rtol=1e-10)
            _ = padded.set_data(events)
