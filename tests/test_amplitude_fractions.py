"""zcache.amplitude: fit fractions and interference terms per component, with errors.

References: the fractions from the integral matrix and the couplings in numpy, and the errors from
a numdifftools Jacobian of the fractions as a numpy function of the parameters (set with
``zcache.set_values``) times the covariance.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
from types import SimpleNamespace

import numdifftools as nd
import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache.amplitude import (
    AmplitudePdf,
    CoherentSum,
    ComplexParameter,
    DalitzKinematics,
    FitFractions,
    NonResonant,
    Resonance,
    fit_fractions,
    fit_fractions_with_errors,
)
from zcache.exceptions import FitError, IllegalInGraphModeError, ModelError
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Gaussian, Space, set_seed

sp = pytest.importorskip("sympy")
from zcache.amplitude import SymbolicModel  # noqa: E402


def _mode(mode):
    """eager: set_graph_mode(False); graph: the default graph mode (the zcache.function traced)."""
    return zcache.set_graph_mode(False) if mode == "eager" else contextlib.nullcontext()


def _sum(kin, tag):
    """NR (fixed coupling) + K*(892) with a floating mass and width + K0*(1430) (fixed line shape)."""
    mass = zcache.Parameter(f"kst_mass_{tag}", 0.8955, lower=0.8, upper=1.0)
    width = zcache.Parameter(f"kst_width_{tag}", 0.0473, lower=0.02, upper=0.08)
    kst = Resonance(kin, ("12", "13"), mass, width, 1, name="Kst")
    k0 = Resonance(kin, ("12", "13"), 1.425, 0.27, 0, name="K0")
    return CoherentSum([(ComplexParameter(f"c_nr_{tag}", 1.0, floating=False), NonResonant(kin)),
                        (ComplexParameter(f"c_kst_{tag}", 0.3 + 0.2j), kst),
                        (ComplexParameter(f"c_k0_{tag}", 0.5 - 0.5j), k0)])


@pytest.fixture(scope="module")
def kin():
    return DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039, names=("K-", "pi+", "pi+"))


@pytest.fixture(scope="module")
def mc(kin):
    set_seed(11)
    return kin.sample(3000, name="ff_mc")


def _bridge(tag, helicities=1):
    """The small two-Breit-Wigner SymbolicModel of test_amplitude_symbolic (masses and widths floating);
    ``helicities=2`` adds a second helicity term, so each resonance is a group of two couplings."""
    x, y, th, m1, g1, m2, g2 = sp.symbols("x y th m_{f1} Gamma_{f1} m_{f2} Gamma_{f2}")
    c = sp.symbols("c1 c2 c3 c4")
    bw1 = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    bw2 = sp.sqrt(m2 * g2) / (m2**2 - y**2 - sp.I * m2 * g2)
    first = c[0] * bw1 * sp.cos(th) + c[1] * bw2 * sp.sin(th) ** 2
    couplings = {c[0]: 1.0 + 0j, c[1]: 0.5 + 0.5j}
    expr = sp.Abs(first) ** 2
    if helicities == 2:  # c3 interferes with c1 (one group: the f1 line shape), c4 with nothing in its group
        expr = sp.Abs(first + c[2] * bw1 * sp.sin(th)) ** 2 + sp.Abs(c[3] * bw2 * sp.cos(th)) ** 2
        couplings.update({c[2]: 0.3 - 0.2j, c[3]: -0.4 + 0.1j})
    rng = np.random.default_rng(1)
    cols = {"x": rng.uniform(0.3, 1.5, 600), "y": rng.uniform(0.3, 1.5, 600), "th": rng.uniform(0, np.pi, 600)}
    limits = {m1: (0.9, 0.45, 1.35), g1: (0.1, 0.05, 0.15), m2: (0.77, 0.4, 1.2), g2: (0.15, 0.075, 0.225)}
    params = {s: dict(value=v, lower=lo, upper=hi, floating=True) for s, (v, lo, hi) in limits.items()}
    return SymbolicModel(expr, {**params, **couplings}, ["x", "y", "th"], cols, name=f"ff_bridge_{tag}"), cols


def _numpy_fractions(m, c, sizes):
    """F_aa = Re(sum_{k,l in a} c_k I_kl c_l^*)/N, F_ab = 2 Re(sum_{k in a, l in b} ...)/N, from numpy."""
    terms = c[:, None] * m * np.conj(c)[None, :]
    edges = np.cumsum([0, *sizes])
    g = len(sizes)
    s = np.array([[np.real(terms[edges[a]:edges[a + 1], edges[b]:edges[b + 1]].sum()) for b in range(g)]
                  for a in range(g)])
    return s * (2.0 - np.eye(g)) / s.sum()


def _fake_result(params, seed):
    """A FitResult stand-in: a random positive-definite covariance over ``params``."""
    a = np.random.default_rng(seed).normal(size=(len(params), len(params)))
    cov = 1e-4 * (a @ a.T + len(params) * np.eye(len(params)))
    return SimpleNamespace(covariance=cov, names=[p.name for p in params], params=list(params))


def _check_errors(model, mc, params, result):
    """errors and covariance against numdifftools' Jacobian of the fractions (numpy) times the covariance."""
    found = fit_fractions_with_errors(model, mc, result)
    x0 = np.array([float(p) for p in params])
    g = len(found.names)

    def fractions_at(x):
        zcache.set_values(params, x)
        return fit_fractions_with_errors(model, mc).values.ravel()

    try:
        jac = nd.Jacobian(fractions_at, step=nd.MaxStepGenerator(1e-3, step_ratio=2.0, num_steps=6))(x0)
    finally:
        zcache.set_values(params, x0)
    idx = [result.names.index(p.name) for p in params]  # the result's other parameters: no contribution
    cov = (jac @ result.covariance[np.ix_(idx, idx)] @ jac.T).reshape((g,) * 4)
    np.testing.assert_allclose(found.covariance, cov, rtol=1e-6, atol=1e-9 * np.abs(cov).max())
    np.testing.assert_allclose(found.errors, np.sqrt(np.einsum("abab->ab", cov)), rtol=1e-6)
    assert np.all(found.errors > 0)
    return found


# -- values ---------------------------------------------------------------------------------------
def test_values_coherent_sum(kin, mc):
    """Diagonal = the per-coupling fit fractions (one coupling per component); sum rule; numpy reference."""
    amp = _sum(kin, "values")
    ff = fit_fractions_with_errors(amp, mc)
    assert isinstance(ff, FitFractions) and ff.names == ("NR", "Kst", "K0")
    np.testing.assert_allclose(np.diag(ff.values), fit_fractions(amp, mc), rtol=1e-12)
    cols = amp.amplitude_matrix(mc).numpy()
    m = cols.T @ np.conj(cols) / cols.shape[0]
    np.testing.assert_allclose(ff.values, _numpy_fractions(m, amp.coupling_vector().numpy(), [1, 1, 1]),
                               rtol=1e-10, atol=1e-14)
    assert ff.total == pytest.approx(1.0, abs=1e-12) and abs(np.trace(ff.values) - 1.0) > 1e-3
    np.testing.assert_array_equal(ff.values, ff.values.T)
    assert np.isnan(ff.errors).all() and np.isnan(ff.covariance).all() and ff.covariance.shape == (3,) * 4
    assert ff.fraction("Kst")[0] == ff.values[1, 1] and ff.interference("K0", "NR")[0] == ff.values[0, 2]
    with pytest.raises(ValueError):
        ff.values[0, 0] = 1.0  # read-only
    # an AmplitudePdf: its amplitude and its phase-space sample
    pdf = AmplitudePdf(amp, mc)
    np.testing.assert_array_equal(fit_fractions_with_errors(pdf).values, ff.values)


def test_values_bridge():
    """The bridge: one component per coupling group; against numpy from the integral matrix."""
    model, _ = _bridge("values")
    ff = model.fit_fractions_with_errors()
    assert ff.names == ("c1", "c2")
    np.testing.assert_allclose(np.diag(ff.values), list(model.fit_fractions().values()), rtol=1e-12)
    assert ff.total == pytest.approx(1.0, abs=1e-12)
    two, _ = _bridge("two", helicities=2)
    assert two.coupling_groups[0][1] == ["c1", "c3"] and two.component_names == ["f1", "f2"]
    ff2 = two.fit_fractions_with_errors()
    m, c = two.integral_matrix().numpy(), two.coupling_vector().numpy()
    np.testing.assert_allclose(ff2.values, _numpy_fractions(m, c, [2, 2]), rtol=1e-10)
    per_coupling = two.fit_fractions()  # a group's fraction is its coherent sum, not the couplings' sum
    assert ff2.fraction("f1")[0] != pytest.approx(per_coupling["c1"] + per_coupling["c3"], rel=1e-6)
    assert ff2.total == pytest.approx(1.0, abs=1e-12)


def test_table_and_accessors():
    ff = FitFractions(("A", "Bee", "C"), np.array([[0.5, 0.1, -0.1], [0.1, 0.3, 0.05], [-0.1, 0.05, 0.15]]),
                      np.full((3, 3), 0.02), np.zeros((3, 3, 3, 3)))
    text = ff.table(digits=3)
    assert text.splitlines() == ["fit fractions", "  A        0.500 ± 0.020", "  Bee      0.300 ± 0.020",
                                 "  C        0.150 ± 0.020", "interference terms", "  A × Bee  0.100 ± 0.020",
                                 "  A × C    -0.100 ± 0.020", "  Bee × C  0.050 ± 0.020"]
    assert str(ff) == ff.table()
    with pytest.raises(ModelError, match="no component 'D'; the components are"):
        ff.fraction("D")
    with pytest.raises(ModelError, match="fraction\\('A'\\)"):
        ff.interference("A", "A")
    with pytest.raises(ModelError, match="shape"):
        FitFractions(("A",), np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2,) * 4))


# -- errors against numerical propagation ---------------------------------------------------------
# about 3 CPU seconds each: slow; the fast loop keeps test_errors_bridge[eager] (CONTRIBUTING.md, "Test times")
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_errors_coherent_sum(kin, mc, mode):
    """Couplings and a floating mass and width: J C J^T equals numdifftools' Jacobian, eager and traced."""
    amp = _sum(kin, f"err_{mode}")
    params = amp.get_params()  # couplings, K* mass and width
    assert len(params) == 6
    # a parameter the fractions do not read (a yield) adds nothing; the NR coupling is fixed, not in the result
    other = zcache.Parameter(f"yield_{mode}", 100.0)
    result = _fake_result([*params, other], 3)
    with _mode(mode):
        found = _check_errors(amp, mc, params, result)
    alone = fit_fractions_with_errors(amp, mc, _fake_result(params, 3))
    sub = SimpleNamespace(covariance=result.covariance[:6, :6], names=result.names[:6], params=params)
    np.testing.assert_allclose(fit_fractions_with_errors(amp, mc, sub).covariance, found.covariance, rtol=1e-12)
    assert alone.values.shape == (3, 3)


# [graph]: about 5 CPU seconds, slow; the fast loop keeps [eager] (CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("mode", ["eager", pytest.param("graph", marks=pytest.mark.slow)])
def test_errors_bridge(mode):
    """The SymPy bridge with floating masses and widths (1 and 2 couplings per group), eager and traced."""
    for helicities in (1, 2):
        model, _ = _bridge(f"err_{mode}_{helicities}", helicities)
        params = [p for p in model.get_params() if p.floating]
        assert len(params) == 4 + 2 * (2 * helicities - 1)
        with _mode(mode):
            _check_errors(model, model.phasespace, params, _fake_result(params, 5))


# -- after a real fit -----------------------------------------------------------------------------
@pytest.mark.slow  # about 6 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_after_fit(kin, mc):
    """Minuit's result: finite errors (pickled too: parameters matched by name); result=None: NaN."""
    amp = _sum(kin, "fit")
    for p in amp.amplitudes[1].params.values():  # couplings only (with the K* line shape: twice the time)
        p.floating = False
    pdf = AmplitudePdf(amp, mc)
    set_seed(5)
    data = pdf.sample(600)
    amp.couplings[1].set_value(0.25 + 0.25j)
    result = Minuit(compiled=False).minimize(UnbinnedNLL(pdf, data))
    assert result.valid and result.covariance is not None
    ff = fit_fractions_with_errors(amp, mc, result)
    assert np.isfinite(ff.errors).all() and np.all(ff.errors > 0) and np.isfinite(ff.covariance).all()
    assert np.isnan(fit_fractions_with_errors(amp, mc).errors).all()
    copy = pickle.loads(pickle.dumps(result))
    np.testing.assert_allclose(fit_fractions_with_errors(pdf, result=copy).errors, ff.errors, rtol=1e-12)
    assert "Kst × K0" in ff.table()
    with pytest.raises(FitError, match="without HESSE"):  # a FitResult without covariance names the cause
        fit_fractions_with_errors(pdf, result=dataclasses.replace(result, covariance=None))


@pytest.mark.slow  # about 5 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_after_fit_bridge():
    model, cols = _bridge("fit")
    data = model.to_data({k: v[:300] for k, v in cols.items()}, name="ff_bridge_fit_data")
    result = Minuit(compiled=False).minimize(UnbinnedNLL(model, data))
    ff = model.fit_fractions_with_errors(result)
    assert result.covariance is not None and np.isfinite(ff.errors).all() and np.all(ff.errors > 0)
    assert np.isnan(model.fit_fractions_with_errors().errors).all()


# -- bad input ------------------------------------------------------------------------------------
def test_bad_input(kin, mc):
    amp = _sum(kin, "bad")
    params = amp.get_params()
    gauss = Gaussian(Space("x_ff", -5.0, 5.0), zcache.Parameter("mu_ff", 0.0), 1.0)
    with pytest.raises(ModelError, match="need a coherent sum"):
        fit_fractions_with_errors(gauss, mc)
    x, a = sp.symbols("x a")
    smooth = SymbolicModel(sp.exp(-a * x**2), {a: 1.0}, ["x"], {"x": np.linspace(-1, 1, 101)}, name="ff_smooth")
    with pytest.raises(ModelError, match="need a coherent sum"):
        fit_fractions_with_errors(smooth)
    with pytest.raises(ModelError, match="pass the phase-space"):
        fit_fractions_with_errors(amp)
    result = _fake_result(params, 1)
    with pytest.raises(FitError, match="no covariance.*result=None"):
        fit_fractions_with_errors(amp, mc, SimpleNamespace(**{**vars(result), "covariance": None}))
    with pytest.raises(FitError, match="must be the zcache FitResult"):
        fit_fractions_with_errors(amp, mc, {"covariance": result.covariance})
    with pytest.raises(FitError, match="fitted none of the model's parameters; pass the FitResult"):
        fit_fractions_with_errors(amp, mc, _fake_result([zcache.Parameter("mu_ff2", 0.0)], 1))
    again = _sum(kin, "bad")  # equal names, other Parameter objects
    with pytest.raises(FitError, match="other Parameter objects"):
        fit_fractions_with_errors(again, mc, result)
    with pytest.raises(ModelError, match="padded"):  # the integrals are means over every row
        fit_fractions_with_errors(amp, zcache.Data(mc.numpy(), obs=mc.obs, name="ff_padded", capacity=4096), result)

    @tf.function
    def traced():
        return fit_fractions_with_errors(amp, mc).values

    with pytest.raises(IllegalInGraphModeError, match="call it from eager code"):
        traced()

