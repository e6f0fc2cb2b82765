"""zcache.amplitude: the SymPy / ampform bridge.

Two ampform models, each built once per module: J/psi -> gamma pi0 pi0 with f0(500), f0(980),
f2(1270) (canonical helicity, as in tensorwaves' docs) and D0 -> K- pi+ pi0 with K*(892)0 and
rho(770)+ (two spin-1 resonances in two subsystems). Their "phase-space samples" here are box
samples in the kinematic variables (the model's density is relative to whatever sample it is
given, so the bridge's checks do not need physical kinematics; the benchmark uses real phase
space and tensorwaves' data transformer).
"""

from __future__ import annotations

import ast
import logging
import os
import pathlib

import networkx as nx
import numpy as np
import pytest
import tensorflow as tf

import zcache

sp = pytest.importorskip("sympy")
pytest.importorskip("ampform")
pytest.importorskip("qrules")

from helpers import coupling_block_loss, slow_modes, small_bridge_loss  # noqa: E402

from zcache.amplitude import SymbolicModel, from_helicity_model, phasespace_generator, to_tensorflow  # noqa: E402
from zcache.exceptions import ParameterValueError, SymbolicError  # noqa: E402
from zcache.loss import UnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.models import rng as zcache_rng  # noqa: E402
from zcache.models import set_seed  # noqa: E402

M_PI0, M_PIC, M_K, M_D0, M_JPSI = 0.1349768, 0.13957039, 0.493677, 1.86484, 3.0969


def _ampform(initial, final, resonances, interactions, formalism):
    os.environ.setdefault("TQDM_DISABLE", "1")
    for name in ("qrules", "ampform"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import ampform
    import qrules
    from ampform.dynamics.builder import RelativisticBreitWignerBuilder

    reaction = qrules.generate_transitions(initial_state=initial, final_state=final,
                                           allowed_intermediate_particles=resonances,
                                           allowed_interaction_types=interactions, formalism=formalism)
    builder = ampform.get_builder(reaction)
    bw = RelativisticBreitWignerBuilder(energy_dependent_width=True, form_factor=True)
    for name in reaction.get_intermediate_particles().names:
        builder.dynamics.assign(name, bw)
    model = builder.formulate()
    return model, model.expression.doit()


def _box(rng, n, masses):
    """Kinematic columns in a box: invariant masses between their thresholds, angles uniform."""
    cols = {}
    for name, (lo, hi) in masses.items():
        cols[name] = rng.uniform(lo, hi, n)
    return cols


@pytest.fixture(scope="module")
def jpsi():
    model, expr = _ampform(("J/psi(1S)", [-1, +1]), ["gamma", "pi0", "pi0"],
                           ["f(0)(500)", "f(0)(980)", "f(2)(1270)"], ["strong", "EM"], "canonical-helicity")
    rng = np.random.default_rng(1)
    n = 3000
    cols = _box(rng, n, {"m_12": (2 * M_PI0 + 1e-3, M_JPSI - 1e-3)})
    cols.update(theta_0=np.arccos(rng.uniform(-1, 1, n)), phi_0=rng.uniform(-np.pi, np.pi, n),
                **{"theta_1^12": np.arccos(rng.uniform(-1, 1, n)), "phi_1^12": rng.uniform(-np.pi, np.pi, n)},
                m_1=np.full(n, M_PI0), m_2=np.full(n, M_PI0))
    return model, expr, cols


DZERO_BOX = {"m_01": (M_K + M_PIC + 1e-3, M_D0 - M_PI0), "m_12": (M_PIC + M_PI0 + 1e-3, M_D0 - M_K)}


@pytest.fixture(scope="module")
def dzero():
    model, expr = _ampform("D0", ["K-", "pi+", "pi0"], ["K*(892)0", "rho(770)+"], ["strong", "weak"], "helicity")
    rng = np.random.default_rng(2)
    n = 4000
    cols = _box(rng, n, DZERO_BOX)
    cols.update(**{"theta_0^01": np.arccos(rng.uniform(-1, 1, n)), "theta_1^12": np.arccos(rng.uniform(-1, 1, n))},
                m_0=np.full(n, M_K), m_1=np.full(n, M_PIC), m_2=np.full(n, M_PI0))
    return model, expr, cols


def dzero_generator(n):
    """Fresh events of the dzero fixture's box distribution, from zcache's generator (traceable, seeded)."""
    gen = zcache_rng()
    cols = {name: gen.uniform([n], lo, hi, dtype=tf.float64) for name, (lo, hi) in DZERO_BOX.items()}
    for name in ("theta_0^01", "theta_1^12"):
        cols[name] = tf.acos(gen.uniform([n], -1.0, 1.0, dtype=tf.float64))
    for name, mass in (("m_0", M_K), ("m_1", M_PIC), ("m_2", M_PI0)):
        cols[name] = tf.fill([n], tf.constant(mass, tf.float64))
    return cols


def n_repeated(events):
    """How many events of a sample repeat an earlier one (rows equal in every column)."""
    events = np.asarray(events)
    return len(events) - len(np.unique(events.reshape(len(events), -1), axis=0))


def _lambdified(expr):
    symbols = sorted(expr.free_symbols, key=lambda s: s.name)
    return symbols, sp.lambdify(symbols, expr, "numpy")


def _param(model, symbol_name, part=None):
    params = {p.name: p for p in model.get_params(None)}
    return params[symbol_name if part is None else f"{symbol_name}_{part}"]


def _symbol(model, start):
    return next(s for s in model.parameter_defaults if s.name.startswith(start))


# -- the translation -------------------------------------------------------------------------
@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_jpsi_matches_lambdify_at_random_points(jpsi):
    """Bridge vs sympy.lambdify(modules='numpy'), every parameter moved, to 1e-12 relative."""
    model, expr, cols = jpsi
    bridged = from_helicity_model(model, cols, expression=expr)
    assert bridged.is_coherent_sum and len(bridged.couplings) == 7
    symbols, func = _lambdified(expr)
    rng = np.random.default_rng(3)
    for _ in range(3):
        values = {}
        for s, v in model.parameter_defaults.items():
            if s not in bridged.symbol_params:  # e.g. the meson radius of a spin-0 resonance
                continue
            if isinstance(v, complex):
                c = complex(rng.normal(), rng.normal())
                values[s.name] = c
                bridged.symbol_params[s].set_value(c)
            else:
                x = float(v) * (1.0 + 0.1 * rng.uniform(-1, 1))
                values[s.name] = x
                bridged.symbol_params[s].set_value(x)
        ref = func(*[values[s.name] if s.name in values else cols[s.name] for s in symbols])
        got = bridged.intensity(bridged.phasespace).numpy()
        assert np.max(np.abs(got / ref.real - 1.0)) < 1e-12
        norm = float(bridged.normalization())
        assert norm == pytest.approx(np.mean(ref.real), rel=1e-12)


def test_plain_sympy_expression_and_fallback_normalization():
    x, m, g, c, a = sp.symbols("x m g c a")
    expr = sp.Abs(1 + c * g / (m**2 - x**2 - sp.I * m * g)) ** 2 * sp.exp(-a * x) + sp.Piecewise((x, x > 1), (0, True))
    phsp = np.random.default_rng(0).uniform(0.5, 1.5, 2000)
    model = SymbolicModel(expr, {m: 1.0, g: 0.1, c: 0.5 + 0.5j, a: {"value": 0.3, "floating": True}}, ["x"], {"x": phsp})
    assert not model.is_coherent_sum
    assert sorted(p.name for p in model.get_params()) == ["a", "c_im", "c_re"]
    ref = sp.lambdify([x, m, g, c, a], expr, "numpy")(phsp, 1.0, 0.1, 0.5 + 0.5j, 0.3)
    np.testing.assert_allclose(model.intensity(model.phasespace).numpy(), ref, rtol=1e-12)
    assert float(model.normalization()) == pytest.approx(ref.mean(), rel=1e-12)
    np.testing.assert_allclose(to_tensorflow(expr, {"x": phsp, "m": 1.0, "g": 0.1, "c": 0.5 + 0.5j, "a": 0.3}).numpy(),
                               ref, rtol=1e-12)


def test_unsupported_function_is_named():
    x, m = sp.symbols("x m")
    with pytest.raises(SymbolicError, match="'besselj'"):
        SymbolicModel(sp.besselj(0, m * x) ** 2, {m: 1.0}, ["x"], {"x": np.linspace(0.1, 1.0, 10)})


def test_unknown_symbol_is_named():
    x, m, w = sp.symbols("x m w")
    with pytest.raises(SymbolicError, match="'w' is neither a parameter nor a data column"):
        SymbolicModel(sp.exp(-m * x * w), {m: 1.0}, ["x"], {"x": np.linspace(0.1, 1.0, 10)})
    with pytest.raises(SymbolicError, match="'w' has no value"):
        to_tensorflow(w * x, {"x": 1.0})


BRIDGE = {"_op_table", "_translator", "_kinematics"}  # zcache/amplitude/: they import sympy inside functions


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_core_import_does_not_import_sympy():
    """Only the bridge (zcache/amplitude/: BRIDGE) imports sympy or ampform; zcache/__init__ neither."""
    package = pathlib.Path(zcache.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in {"sympy", "ampform", "qrules"} for n in names) and path.stem not in BRIDGE:
                offenders.append(path.name)
            if (path == package / "__init__.py" and isinstance(node, ast.ImportFrom)
                    and (node.module or "").split(".")[0] in BRIDGE | {"amplitude"}):
                offenders.append(path.name)
    assert offenders == []


# ``import zcache.amplitude`` leaves SymPy unimported: tests/test_package.py's test of the same name (a fresh
# process that also checks what ``import zcache`` leaves out).


# -- caches: values, gradients, invalidation ----------------------------------------------------
@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
# eager exhaustive: make test keeps the traced comparison (what a fit runs) and the eager hit/miss gradients of
# test_properties on every cache kind
@slow_modes("mode", exhaustive=("eager",))
def test_cached_equals_uncached_values_and_gradients(dzero, mode):
    """Cached vs uncached bridged model: the NLL and its gradient (every parameter), eager and traced."""
    model, expr, cols = dzero
    cached = from_helicity_model(model, cols, expression=expr, name="cached")
    plain = from_helicity_model(model, cols, expression=expr, name="plain", cache=False)
    data_cols = {k: v[:500] for k, v in cols.items()}
    losses = [UnbinnedNLL(m, m.to_data(data_cols, name=f"data_{m.name}")) for m in (cached, plain)]
    for step in range(2):
        values, grads = [], []
        for m, loss in zip((cached, plain), losses):
            params = m.get_params(None)
            if step:  # move a mass, a width and a coupling
                zcache.set_values(params[:2], [0.78, 0.16])
            v, g = zcache.value_and_gradient(loss.value, params)
            values.append(float(v))
            grads.append(np.asarray(g))
        assert values[0] == pytest.approx(values[1], rel=1e-12)
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-9)


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_changing_one_width_recomputes_its_branch_only(jpsi):
    """Miss counters: a changed f0(980) width recomputes its line shape, its group and its integral blocks only."""
    model, expr, cols = jpsi
    bridged = from_helicity_model(model, cols, expression=expr, name="jpsi_inval")
    data = bridged.to_data({k: v[:1000] for k, v in cols.items()}, name="jpsi_data")
    loss = UnbinnedNLL(bridged, data)
    loss.value()
    caches = bridged.node_caches
    for c in caches:
        c.reset_stats()
    width = _param(bridged, _symbol(model, r"\Gamma_{f_{0}(980)}").name)
    width.set_value(0.07)
    loss.value()
    missed = {c.name for c in caches if c.stats["misses"]}
    downstream = nx.descendants(zcache.dependency_graph(), width.node_id)
    assert missed == {c.name for c in caches if c.node_id in downstream}  # exactly the width's dependents
    group = next(i for i, (names, _) in enumerate(bridged.coupling_groups) if width.name in names)
    blocks = {c.name for c in caches if c.name.startswith("I[group")}
    assert {b for b in blocks if b in missed} == {b for b in blocks if f"group {group}" in b}
    assert {c for c in missed if c.startswith("A[group")} == {f"A[group {group}][phasespace]",
                                                                f"A[group {group}][jpsi_data]"}
    assert not any(c.startswith("data-only") for c in missed)  # kinematics and Wigner-D terms stay cached
    # a coupling change: no cache of amplitudes or integrals recomputes (O(K^2) normalization)
    for c in caches:
        c.reset_stats()
    bridged.couplings[2].set_value(0.5 - 0.2j)
    loss.value()
    assert [c.name for c in caches if c.stats["misses"]] == [f"{bridged.name}.normalization"]


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_set_data_invalidates_data_caches_only(dzero):
    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_setdata")
    data = bridged.to_data({k: v[:300] for k, v in cols.items()}, name="dz_data")
    loss = UnbinnedNLL(bridged, data)
    before = float(loss.value())
    caches = bridged.node_caches
    for c in caches:
        c.reset_stats()
    data.set_data(bridged.to_data({k: v[300:600] for k, v in cols.items()}, name="tmp").numpy())
    after = float(loss.value())
    assert after != before
    missed = [c.name for c in caches if c.stats["misses"]]
    assert missed and all(name.endswith("[dz_data]") for name in missed)


def test_bridge_caches_are_the_models_own():
    """caches_of(model) lists every cache of the bridge, and invalidate_caches reaches them (issue 24)."""
    from zcache._engine.cachable import caches_of

    x, m, a, b = sp.symbols("x m a b")
    phsp = np.random.default_rng(0).uniform(0.5, 1.5, 2000)
    coherent = SymbolicModel(sp.Abs(a * sp.exp(sp.I * m * x) + b * sp.cos(x)) ** 2 + sp.Abs(a * x + b) ** 2,
                             {m: 1.0, a: 1.0 + 0j, b: 0.5j}, ["x"], {"x": phsp}, name="coh")
    x, expr, values = _peaked()
    other = SymbolicModel(expr, values, ["x"], {"x": phsp}, name="other")
    for model, names in ((coherent, {"data-only sub-expressions[phasespace]", "data-only sub-expressions[d]",
                                     "A[group 0][d]", "A[group 1][d]", "A[group 0][phasespace]",
                                     "I[group 0, group 1][phasespace]", "I[phasespace]", "coh.normalization"}),
                         (other, {"intensity[phasespace]", "intensity[d]", "other.normalization"})):
        assert model.is_coherent_sum == (model is coherent)
        loss = UnbinnedNLL(model, model.to_data({"x": phsp[:200]}, name="d"))
        before = float(loss.value())
        bridge = model.node_caches
        assert names <= {c.name for c in bridge}
        owned = caches_of(model)
        assert all(any(c is o for o in owned) for c in bridge)
        assert any(c is o for o in model.__zcache_evaluate__() for c in bridge)
        for c in owned:
            c.reset_stats()
        model.invalidate_caches()
        assert float(loss.value()) == before
        assert all(c.stats["misses"] == 1 for c in bridge), [(c.name, c.stats) for c in bridge]


# -- fits ---------------------------------------------------------------------------------------
@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_second_ampform_model_bridges_and_fits(dzero):
    """D0 -> K- pi+ pi0 (K*(892)0, rho(770)+: spin 1 in two subsystems): sample 2k events, fit the coupling."""
    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_fit", generator=dzero_generator)
    assert bridged.is_coherent_sum and len(bridged.couplings) == 2
    assert [p.name for p in bridged.get_params()] == [p.name for p in bridged.couplings[1].params]
    true = 0.6 + 0.4j
    bridged.couplings[1].set_value(true)
    set_seed(7)
    data = bridged.sample(2000)
    assert n_repeated(data.numpy()) == 0
    bridged.couplings[1].set_value(1.0 + 0.0j)
    result = Minuit().minimize(UnbinnedNLL(bridged, data))
    assert result.valid
    fitted = complex(bridged.couplings[1])
    errors = [result.errors[p.name] for p in bridged.couplings[1].params]
    assert abs(fitted.real - true.real) < 5 * errors[0] and abs(fitted.imag - true.imag) < 5 * errors[1]
    fractions = bridged.fit_fractions()
    assert len(fractions) == 2 and all(0.0 < f < 1.5 for f in fractions.values())
    from zcache.amplitude import fit_fractions

    np.testing.assert_allclose(fit_fractions(bridged, bridged.phasespace), list(fractions.values()), rtol=1e-12)


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_fit_fractions_with_errors_ampform(jpsi):
    """Issue 26: components are resonances (a group of helicity couplings each), labelled from the line-shape
    parameter names; fractions and interference terms from the integral matrix (numpy), summing to 1;
    errors finite with a covariance over the floating couplings."""
    from types import SimpleNamespace

    model, expr, cols = jpsi
    bridged = from_helicity_model(model, cols, expression=expr, name="jpsi_ff")
    sizes = [len(cs) for _, cs in bridged.coupling_groups]
    assert bridged.component_names == ["f_{0}(500)", "f_{0}(980)", "f_{2}(1270)"] and sizes == [2, 2, 3]
    ff = bridged.fit_fractions_with_errors()
    m, c = bridged.integral_matrix().numpy(), bridged.coupling_vector().numpy()
    terms = c[:, None] * m * np.conj(c)[None, :]
    edges = np.cumsum([0, *sizes])
    s = np.array([[np.real(terms[edges[a]:edges[a + 1], edges[b]:edges[b + 1]].sum()) for b in range(3)]
                  for a in range(3)])
    np.testing.assert_allclose(ff.values, s * (2.0 - np.eye(3)) / s.sum(), rtol=1e-10, atol=1e-14)
    assert ff.total == pytest.approx(1.0, abs=1e-12) and np.isnan(ff.errors).all()
    params = bridged.get_params()
    result = SimpleNamespace(covariance=1e-4 * np.eye(len(params)), names=[p.name for p in params], params=params)
    with_errors = bridged.fit_fractions_with_errors(result)
    assert np.isfinite(with_errors.errors).all() and with_errors.errors[0, 0] > 0
    assert "f_{0}(500) × f_{2}(1270)" in with_errors.table()


def _line_shapes_floating(model):
    """Every mass and width of ``model``'s resonances floating, with limits at +-50 %."""
    return {s.name: dict(value=float(v), lower=0.5 * float(v), upper=1.5 * float(v), floating=True)
            for s, v in model.parameter_defaults.items() if s.name.startswith(("m_", "\\Gamma_"))}


def _hessians_compiled_and_not(loss, x):
    """hessian_at at ``x``: eager, graph mode, and compiled (True twice, 'auto'), with the eager
    reference checked against central differences of the exact eager gradient."""
    params = loss.params
    with zcache.set_graph_mode(False):
        eager = loss.hessian_at(x, params).numpy()
        reference = zcache.hessian(loss.value, params).numpy()
    scale = np.abs(reference).max()
    assert np.abs(eager - reference).max() < 1e-5 * scale
    found = {"graph": loss.hessian_at(x, params).numpy()}
    with zcache.set_jit_mode(True):
        found["jit"] = loss.hessian_at(x, params).numpy()
        found["jit again"] = loss.hessian_at(x, params).numpy()
    with zcache.set_jit_mode("auto"):
        found["auto"] = loss.hessian_at(x, params).numpy()
    for how, hessian in found.items():
        # central differences of gradients that differ by ~1e-13 (summation order under XLA)
        assert np.abs(hessian - eager).max() < 1e-7 * scale, (how, np.abs(hessian - eager).max() / scale)
    with zcache.set_graph_mode(False):
        gradient = loss.value_gradient_at(x, params)[1].numpy()
    with zcache.set_jit_mode(True):
        np.testing.assert_allclose(loss.value_gradient_at(x, params)[1].numpy(), gradient, rtol=1e-9,
                                   atol=1e-9 * np.abs(gradient).max())
    assert all(fn.jit_fallback is None for fn in loss.functions())
    return found


@pytest.mark.slow  # ~25 s: compiles the bridge with XLA (test_jit has a fast plain-model twin)
def test_jit_hessian_line_shapes_floating_small_bridge():
    """Issue 23, small: a hand-written coherent sum of two Breit-Wigners (1/z of a complex in the
    bridge: tf.math.reciprocal), masses and widths floating: the compiled Hessian equals the
    uncompiled one (it was off by 96 %; XLA dropped the conjugate of the complex 1/z's gradient)."""
    _hessians_compiled_and_not(small_bridge_loss(), np.array([0.92, 0.11, 0.76, 0.16, 0.55, 0.45]))


# exhaustive (issue 26; mostly second-order traces): make test keeps the same path on a line shape through complex
# 1/z (test_jit's exact-caches case, eager, graph and XLA), a user's jacobian through a model's caches
# (test_cached_tensor) and the FitMachine's exact compiled-Hessian draws
@pytest.mark.exhaustive
def test_exact_hessian_through_the_bridges_caches():
    """Issue 26: second-order autodiff through the bridge's valid caches (no precompute; group programs,
    data-only columns) equals numdifftools on the exact gradient, eagerly, traced and compiled with XLA.
    Traced, it failed to build before (pfor could not vectorize the caches' stores)."""
    import numdifftools as nd

    loss = small_bridge_loss()
    params, x = loss.params, np.array([0.92, 0.11, 0.76, 0.16, 0.55, 0.45])
    with zcache.set_graph_mode(False):
        loss.value()  # every cache valid
        eager = loss.hessian_at(x, params, exact=True).numpy()
        gradient = lambda v: loss.value_gradient_at(v, params)[1].numpy()  # noqa: E731
        reference = nd.Jacobian(gradient, step=nd.step_generators.MaxStepGenerator(1e-4, num_steps=4))(x)
    scale = np.abs(reference).max()
    assert np.abs(eager - reference).max() < 1e-8 * scale
    loss.value_at(x, params)
    found = {"graph": loss.hessian_at(x, params, exact=True).numpy()}
    with zcache.set_jit_mode(True):
        found["jit"] = loss.hessian_at(x, params, exact=True).numpy()
    for how, hessian in found.items():
        assert np.abs(hessian - eager).max() < 1e-12 * scale, how
    assert all(fn.jit_fallback is None for fn in loss.functions())


# exhaustive (the 3-resonance bridge): make test keeps the 2-resonance bridge (the same XLA complex-gradient
# regression) and the FitMachine's compiled_hessian rule on a bridged model
@pytest.mark.exhaustive
def test_jit_hessian_line_shapes_floating_bridge(dzero):
    """Issue 23: the ampform model (relativistic Breit-Wigners with form factors) with masses and
    widths floating (+-50 %): compiled Hessians (True, again, 'auto') equal the eager and
    graph-mode ones, which equal central differences of the exact gradient (compiled: off by
    15 % to 1900x before the fix, changing between models and runs)."""
    model, expr, cols = dzero
    bridged = from_helicity_model(model, {k: v[:1500] for k, v in cols.items()}, expression=expr,
                                  parameters=_line_shapes_floating(model), name="dz_lineshapes")
    data = bridged.to_data({k: v[:300] for k, v in cols.items()}, name="dz_lineshapes_data")
    loss = UnbinnedNLL(bridged, data)
    names = [p.name for p in loss.params]
    assert sum(n.startswith(("m_", "\\Gamma_")) for n in names) == 4 and len(names) == 6
    x = np.array([float(p) for p in loss.params]) * (1.0 + 0.01 * np.random.default_rng(4).standard_normal(6))
    _hessians_compiled_and_not(loss, x)


@pytest.mark.slow
def test_fused_programs_convert_fast(dzero):
    """Issue 26: the fused programs of a model with line shapes floating (each moved group's forward and
    backward XLA programs) hold no op that TensorFlow converts to XLA through its per-op MLIR legalization
    (3-4 ms each, at each program's first call in every process) but their square roots: real and
    imaginary parts and reciprocals are spelled with Casts and Inv (zcache._engine.xla_ops), and the
    gradient of tf.complex takes its parts with Casts (tf_internals item 17). The D0 model's held 88.
    Values and gradients stay the uncached model's (test_jit_hessian_line_shapes_floating_bridge and the
    compiled-fit tests)."""
    from zcache._engine import xla_ops

    model, expr, cols = dzero
    bridged = from_helicity_model(model, {k: v[:600] for k, v in cols.items()}, expression=expr,
                                  parameters=_line_shapes_floating(model), name="dz_convert")
    data = bridged.to_data({k: v[:200] for k, v in cols.items()}, name="dz_convert_data")
    loss = UnbinnedNLL(bridged, data)
    with zcache.set_graph_mode(True):
        loss.value_gradient()
        loss.value_gradient()
        [fn] = loss._gradient_fns.values()
        [concrete] = fn._concrete.values()
    library = concrete.graph.as_graph_def().library.function
    compiled = [f for f in library if f.attr["_XlaMustCompile"].b]
    assert len(compiled) >= 2 * len(bridged._fused_groups) >= 4  # a forward and a backward per moved group
    slow = sorted({node.op for f in compiled for node in f.node_def if node.op in xla_ops.SLOW_TO_CONVERT})
    assert slow == ["Sqrt"]


@pytest.mark.slow
def test_compiled_mode_and_toys(dzero):
    """The bridged model under set_jit_mode('auto') (XLA) gives the uncompiled loss and gradient; run_toys fits it."""
    from zcache.toys import run_toys

    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_jit", generator=dzero_generator)
    data = bridged.to_data({k: v[:400] for k, v in cols.items()}, name="dz_jit_data")
    loss = UnbinnedNLL(bridged, data)
    plain = loss.value_gradient()
    with zcache.set_jit_mode("auto"):
        compiled = loss.value_gradient()
    assert float(compiled[0]) == pytest.approx(float(plain[0]), rel=1e-12)
    np.testing.assert_allclose(np.asarray(compiled[1]), np.asarray(plain[1]), rtol=1e-9)
    set_seed(3)
    toys = run_toys(bridged, loss, n_toys=2, n_events=400, seed=3, minimizer=Minuit(tol=1e-5), progress=False)
    assert len(toys.table) == 2
    # Batched (zcache.scale): the bridged graph vectorizes as it is; the phase-space integrals,
    # which no toy input reaches, are served from their caches; the fits equal the serial ones.
    batched = run_toys(bridged, loss, n_toys=2, n_events=400, seed=3, batch=2, progress=False)
    assert batched.table["valid"].all() and not batched.table["refit"].any()
    for name in toys.names:
        assert np.max(np.abs(batched.table[name] - toys.table[name]) / toys.table[f"{name}_err"]) < 1e-3
    from zcache.scale import BatchedLoss

    # the integral matrix over the phase-space sample, served whole (its group blocks are read through it)
    assert "I[phasespace]" in {c.name for c in BatchedLoss.of(loss, loss.params).served_caches}


# -- sampling: independent events (issue 23, symptom 7) --------------------------------------------
def _peaked():
    """A Breit-Wigner-like intensity on [0.5, 1.5] (acceptance about 0.3 under its maximum)."""
    x, m, g, c = sp.symbols("x m g c")
    return x, sp.Abs(1 + c * g / (m**2 - x**2 - sp.I * m * g)) ** 2, {m: 1.0, g: 0.1, c: 0.5 + 0.5j}


def _chi2_against(events, weights_of, lo=0.5, hi=1.5, bins=20):
    """chi2 of the sample's histogram against the expected fractions ``weights_of(edges)`` (bins values)."""
    edges = np.linspace(lo, hi, bins + 1)
    counts, _ = np.histogram(events, edges)
    expected = weights_of(edges) * len(events)
    return float(np.sum((counts - expected) ** 2 / expected))


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_sample_has_no_repeated_events(mode):
    """Drawn from the phase-space sample without replacement: no event twice, the intensity's distribution, seeded."""
    x, expr, params = _peaked()
    pool = np.random.default_rng(5).uniform(0.5, 1.5, 200_000)
    model = SymbolicModel(expr, params, ["x"], {"x": pool})
    set_seed(11)
    events = model.sample(20_000).numpy().reshape(-1)
    assert n_repeated(events) == 0 and np.isin(events, pool).all()
    weights = model.intensity(model.phasespace).numpy()
    # the sample's mean intensity: E[I^2]/E[I] over the pool, within 3 standard errors
    drawn = model.intensity(events[:, None]).numpy()
    target, spread = np.sum(weights**2) / np.sum(weights), np.sqrt(np.sum(weights**3) / np.sum(weights)
                                                                   - (np.sum(weights**2) / np.sum(weights)) ** 2)
    assert abs(drawn.mean() - target) < 3 * spread / np.sqrt(len(events))
    chi2 = _chi2_against(events, lambda e: np.histogram(pool, e, weights=weights)[0] / weights.sum())
    assert chi2 < 43.8  # 19 degrees of freedom, p = 0.001
    set_seed(11)
    np.testing.assert_array_equal(model.sample(20_000).numpy().reshape(-1), events)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_pool_too_small_is_a_named_error(mode):
    """A phase-space sample that cannot fill the sample without repeating events: SymbolicError, data unchanged."""
    x, expr, params = _peaked()
    model = SymbolicModel(expr, params, ["x"], {"x": np.random.default_rng(6).uniform(0.5, 1.5, 1000)})
    target = model.sample(10)
    before = target.numpy().copy()
    for compiled in (False, True):
        with zcache.set_jit_mode(compiled):
            with pytest.raises(SymbolicError, match=r"without replacement.*1000 events.*larger phase-space sample"):
                model.sample(5000, data=target)
        np.testing.assert_array_equal(target.numpy(), before)


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "jit"])
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_generator_draws_fresh_events(mode, compiled):
    """With generator=: fresh phase-space events (more than the phase-space sample holds), the intensity's distribution."""
    x, expr, params = _peaked()
    pool = np.random.default_rng(7).uniform(0.5, 1.5, 2000)
    model = SymbolicModel(expr, params, ["x"], {"x": pool},
                          generator=lambda n: {"x": zcache_rng().uniform([n], 0.5, 1.5, dtype=tf.float64)})
    with zcache.set_jit_mode(compiled):
        set_seed(12)
        events = model.sample(20_000).numpy().reshape(-1)
        set_seed(12)
        again = model.sample(20_000).numpy().reshape(-1)
    np.testing.assert_array_equal(again, events)
    assert n_repeated(events) == 0 and not np.isin(events, pool).any()
    fine = np.linspace(0.5, 1.5, 200_001)
    density = sp.lambdify([x], expr.subs(params), "numpy")(fine).real
    cumulative = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]))])
    chi2 = _chi2_against(events, lambda e: np.diff(np.interp(e, fine, cumulative)) / cumulative[-1])
    assert chi2 < 43.8  # 19 degrees of freedom, p = 0.001


def test_generator_must_return_every_column():
    x, expr, params = _peaked()
    model = SymbolicModel(expr, params, ["x"], {"x": np.linspace(0.5, 1.5, 100)},
                          generator=lambda n: {"y": tf.zeros([n], tf.float64)})
    with pytest.raises(SymbolicError, match="no column 'x'"):
        model.sample(10)
    with pytest.raises(SymbolicError, match="generator= must be a callable"):
        SymbolicModel(expr, params, ["x"], {"x": np.linspace(0.5, 1.5, 100)}, generator=5)


_HASH_SEED_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_amplitude_symbolic import _ampform
from zcache.amplitude import from_helicity_model
model, expr = _ampform("D0", ["K-", "pi+", "pi0"], ["K*(892)0", "rho(770)+"], ["strong", "weak"], "helicity")
bridged = from_helicity_model(model, 200, expression=expr, name="dz_seed")
print("OBS", ",".join(bridged.space.obs))
"""


@pytest.mark.exhaustive  # CI's 25 minutes; three fresh processes
def test_bridged_columns_do_not_depend_on_string_hashing():
    """The columns' order (the group programs' argument order) is the same in every process.

    ampform's ``kinematic_variables`` come out in an order that changes with PYTHONHASHSEED; taken
    as they came, each new process traced other XLA programs and missed the persistent compile
    cache, so every first call of a bridged model compiled its programs again.
    """
    import subprocess
    import sys

    seen = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "TF_CPP_MIN_LOG_LEVEL": "3", "TQDM_DISABLE": "1"}
        proc = subprocess.run([sys.executable, "-c", _HASH_SEED_SCRIPT.format(tests=str(pathlib.Path(__file__).parent))],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen.add(next(line for line in proc.stdout.splitlines() if line.startswith("OBS ")))
    assert len(seen) == 1
    obs = seen.pop()[4:].split(",")
    assert obs == sorted(obs) and len(obs) == 7


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_bridged_ampform_sample_has_no_repeated_events(dzero):
    """The bridged ampform model: without a generator no event twice (or a named error), with one fresh events."""
    model, expr, cols = dzero
    pooled = from_helicity_model(model, cols, expression=expr, name="dz_pool")
    set_seed(4)
    events = pooled.sample(100).numpy()
    assert n_repeated(events) == 0
    with pytest.raises(SymbolicError, match="without replacement"):
        pooled.sample(2000)
    fresh = from_helicity_model(model, cols, expression=expr, name="dz_fresh", generator=dzero_generator)
    set_seed(4)
    events = fresh.sample(5000).numpy()
    assert n_repeated(events) == 0


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_phasespace_generator_gives_fresh_physical_events(dzero, mode):
    """Three-body phase space from the reaction's masses, columns by ampform's expressions; fresh, seeded samples."""
    from zcache.amplitude import DalitzKinematics

    model, expr, _ = dzero
    generate = phasespace_generator(model)
    set_seed(21)
    phsp = {k: v.numpy() for k, v in generate(20_000).items()}
    set_seed(21)
    np.testing.assert_array_equal(generate(tf.constant(20_000, tf.int64))["theta_1^12"].numpy(), phsp["theta_1^12"])
    # the columns are physical: inside the Dalitz plot, ampform's helicity angles = zcache's kinematics
    kin = DalitzKinematics(M_D0, M_K, M_PIC, M_PI0)
    s12, s23 = phsp["m_01"] ** 2, phsp["m_12"] ** 2
    x = np.stack([s12, kin.mass_sum_sq - s12 - s23], axis=1)
    assert kin.inside(x).numpy().all()
    np.testing.assert_allclose(np.cos(phsp["theta_1^12"]), -kin.cos_theta(x, "23").numpy(), atol=1e-10)
    np.testing.assert_allclose(np.cos(phsp["theta_0^01"]), -kin.cos_theta(x, "12").numpy(), atol=1e-10)
    bridged = from_helicity_model(model, phsp, expression=expr, name="dz_physical", generator=generate)
    for compiled in (False, True):
        with zcache.set_jit_mode(compiled):
            set_seed(22)
            events = bridged.sample(3000).numpy()
        k = bridged.space.obs.index("m_01")
        assert n_repeated(events) == 0 and not np.isin(events[:, k], bridged.phasespace.numpy()[:, k]).any()
    # the sample's mean intensity: E[I^2]/E[I] over phase space, within 4 standard errors (both samples)
    weights = bridged.intensity(bridged.phasespace).numpy()
    target = np.sum(weights**2) / weights.sum()
    spread = np.sqrt(np.sum(weights**3) / weights.sum() - target**2)
    drawn = bridged.intensity(events).numpy().mean()
    assert abs(drawn - target) < 4 * spread * np.sqrt(1 / 3000 + 1 / 20_000)
    with pytest.raises(SymbolicError, match="only decays of one particle into three"):
        phasespace_generator(type("Fake", (), {"reaction_info": type("Info", (), {
            "initial_state": {-1: None}, "final_state": {0: None, 1: None}})()})())


# -- kinematics inside the bridge: four-momenta in, fresh phase space out (issue 26) ---------------
def _invariant_mass(p):
    return np.sqrt(p[:, 0] ** 2 - np.sum(p[:, 1:] ** 2, axis=1))


def _helicity_cos(p1, p2):
    """cos of particle 1's angle in the (12) rest frame to the (12) direction in the parent frame (numpy only)."""
    total = p1 + p2
    beta = total[:, 1:] / total[:, :1]
    b2 = np.sum(beta**2, axis=1, keepdims=True)
    gamma = 1.0 / np.sqrt(1.0 - b2)
    along = np.sum(beta * p1[:, 1:], axis=1, keepdims=True)
    rest = p1[:, 1:] + ((gamma - 1.0) * along / b2 - gamma * p1[:, :1]) * beta  # boost into the (12) frame
    return np.sum(rest * beta, axis=1) / np.linalg.norm(rest, axis=1) / np.sqrt(b2[:, 0])


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_columns_from_four_momenta_match_references(dzero):
    """Columns from four-momenta: invariant masses and a helicity angle by numpy, the generator's own columns."""
    from zcache.amplitude import HelicityKinematics

    model, _, _ = dzero
    kinematics = HelicityKinematics(model)
    assert kinematics.momenta == ("p0", "p1", "p2") and kinematics.is_three_body
    set_seed(31)
    momenta = kinematics.sample_momenta(2000)
    columns = kinematics.columns(momenta)
    np.testing.assert_allclose(columns["m_12"], _invariant_mass(momenta["p1"] + momenta["p2"]), rtol=1e-12)
    np.testing.assert_allclose(columns["m_01"], _invariant_mass(momenta["p0"] + momenta["p1"]), rtol=1e-12)
    np.testing.assert_allclose(np.cos(columns["theta_1^12"]), _helicity_cos(momenta["p1"], momenta["p2"]), atol=1e-9)
    # a sequence in final-state order is the same; phasespace_generator draws the same events from the same seed
    in_order = kinematics.columns([momenta["p0"], momenta["p1"], momenta["p2"]])
    set_seed(31)
    generated = phasespace_generator(model)(2000)
    for name in kinematics.names:
        np.testing.assert_array_equal(in_order[name], columns[name])
        np.testing.assert_allclose(generated[name].numpy(), columns[name], rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_model_from_four_momenta_equals_model_from_columns(dzero):
    """from_helicity_model(four-momenta) = from_helicity_model(their columns); to_data takes four-momenta too."""
    model, expr, _ = dzero
    set_seed(32)
    from_momenta = from_helicity_model(model, 2000, expression=expr, name="dz_from_int")
    momenta = from_momenta.kinematics.sample_momenta(2000)
    events = from_momenta.kinematics.sample_momenta(300)
    a = from_helicity_model(model, momenta, expression=expr, name="dz_from_momenta")
    b = from_helicity_model(model, a.kinematics.columns(momenta), expression=expr, name="dz_from_columns")
    assert a.generator is not None and b.generator is None  # only a sample the bridge can vouch for is fresh
    np.testing.assert_array_equal(a.phasespace.numpy(), b.phasespace.numpy())
    data_a, data_b = a.to_data(events, name="dz_momenta_data"), b.to_data(b.kinematics.columns(events), name="dz_cols")
    np.testing.assert_array_equal(data_a.numpy(), data_b.numpy())
    np.testing.assert_allclose(a.pdf(data_a).numpy(), b.pdf(data_b).numpy(), rtol=1e-12)
    assert float(UnbinnedNLL(a, data_a).value()) == pytest.approx(float(UnbinnedNLL(b, data_b).value()), rel=1e-12)
    assert from_momenta.phasespace.nevents == 2000 and from_momenta.generator is not None


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_sample_without_generator_is_fresh_phase_space(dzero):
    """A bridged model from a number of events: sample() without generator= draws fresh phase space, I-distributed."""
    model, expr, _ = dzero
    set_seed(33)
    bridged = from_helicity_model(model, 2000, expression=expr, name="dz_fresh_default")
    events = bridged.sample(5000).numpy()  # more than the phase-space sample holds
    k = bridged.space.obs.index("m_12")
    assert n_repeated(events) == 0 and not np.isin(events[:, k], bridged.phasespace.numpy()[:, k]).any()
    # the m_12 distribution against an independent, intensity-weighted phase-space sample 20x larger
    reference = bridged.to_data(bridged.kinematics.sample_momenta(100_000), name="dz_fresh_reference")
    weights = bridged.intensity(reference).numpy()
    m12 = reference.numpy()[:, k]
    lo, hi = M_PIC + M_PI0, M_D0 - M_K
    chi2 = _chi2_against(events[:, k], lambda e: np.histogram(m12, e, weights=weights)[0] / weights.sum(), lo, hi, 10)
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001
    flat = _chi2_against(events[:, k], lambda e: np.histogram(m12, e)[0] / len(m12), lo, hi, 10)
    assert flat > 100.0  # the check can tell the intensity from flat phase space


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_bad_four_momenta_are_named(dzero):
    """Missing particle, (n, 3) arrays, NaN, other masses: SymbolicError saying what to do."""
    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_bad_momenta")
    set_seed(34)
    good = bridged.kinematics.sample_momenta(50)
    with pytest.raises(SymbolicError, match="have no 'p1': give one four-momentum per final-state particle"):
        bridged.to_data({"p0": good["p0"], "p2": good["p2"]})
    with pytest.raises(SymbolicError, match=r"'p1' has shape \(50, 3\); give \(n, 4\) arrays, the energy first"):
        bridged.to_data({**good, "p1": good["p1"][:, 1:]})
    nan = good["p2"].copy()
    nan[7, 2] = np.nan
    with pytest.raises(SymbolicError, match="'p2' is NaN or infinite in 1 events .*row 7.*remove those events"):
        from_helicity_model(model, {**good, "p2": nan}, expression=expr)
    with pytest.raises(SymbolicError, match="got 2 arrays for 3 final-state particles"):
        bridged.to_data([good["p0"], good["p1"]])
    # four-momenta of another phase space (here the parent at 2 GeV): fresh events would not follow them
    boosted = {k: v * (2.0 / M_D0) for k, v in good.items()}
    with pytest.raises(SymbolicError, match="total mass differs from the parent's.*generator=None"):
        from_helicity_model(model, boosted, expression=expr)
    assert from_helicity_model(model, boosted, expression=expr, generator=None).generator is None
    with pytest.raises(SymbolicError, match="generator= must be 'auto', 'phasespace'"):
        from_helicity_model(model, cols, expression=expr, generator="fresh")
    assert from_helicity_model(model, cols, expression=expr, generator="phasespace").generator is not None


def test_four_body_kinematics_checks_without_ampform():
    """HelicityKinematics of a four-body reaction: momenta checked by name and shape; no fresh phase space."""
    from types import SimpleNamespace

    from zcache.amplitude import HelicityKinematics

    particle = SimpleNamespace
    reaction = SimpleNamespace(initial_state={-1: particle(mass=3.0)}, final_state={i: particle(mass=0.1) for i in range(4)})
    fake = SimpleNamespace(reaction_info=reaction, kinematic_variables={})
    kinematics = HelicityKinematics(fake)
    assert kinematics.momenta == ("p0", "p1", "p2", "p3") and not kinematics.is_three_body
    four = {f"p{i}": np.tile([0.75, 0.0, 0.0, 0.0], (5, 1)) for i in range(4)}
    assert kinematics.is_momenta(four) and kinematics.is_momenta(list(four.values()))
    assert not kinematics.is_momenta({"m_12": np.ones(5)})
    assert len(kinematics.four_momenta(four)) == 4
    with pytest.raises(SymbolicError, match="have 'p4', which is no final-state particle"):
        kinematics.four_momenta({**four, "p4": four["p0"]})
    with pytest.raises(SymbolicError, match="'p2' has 3 events, 'p0' 5; give the same events"):
        kinematics.four_momenta({**four, "p2": four["p2"][:3]})
    with pytest.raises(SymbolicError, match="only decays of one particle into three"):
        kinematics.generator()
    with pytest.raises(SymbolicError, match="three-body decays only.*Give four-momenta or kinematic columns"):
        from_helicity_model(fake, 100)


# -- names and physical limits (issue 23, symptom 8) ------------------------------------------------
@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_unknown_parameter_name_raises(dzero):
    """parameters= and floating= names that the model does not hold: SymbolicError naming them and close matches."""
    model, expr, cols = dzero
    rho_mass = _symbol(model, r"m_{\rho").name
    with pytest.raises(SymbolicError, match=r"'m_\{rho\(770\)0\}'.*Close matches: .*rho"):
        from_helicity_model(model, cols, expression=expr, parameters={"m_{rho(770)0}": 0.8})
    with pytest.raises(SymbolicError, match="floating= names 'm_{rho}'"):
        from_helicity_model(model, cols, expression=expr, floating=["m_{rho}"])
    bridged = from_helicity_model(model, cols, expression=expr, parameters={rho_mass: 0.8}, floating=[rho_mass])
    assert float(_param(bridged, rho_mass).value()) == 0.8 and _param(bridged, rho_mass).floating
    x, m = sp.symbols("x m")
    with pytest.raises(SymbolicError, match="parameters= names 'mm'.*Close matches: 'm'"):
        SymbolicModel(sp.exp(-m * x), {m: 1.0, "mm": 2.0}, ["x"], {"x": np.linspace(0.1, 1.0, 10)})


@pytest.mark.slow  # an ampform model (the module fixtures build them: 10-30 s)
def test_width_default_lower_limit(dzero, mode):
    """Masses and widths of the bridge have lower limit 0: a negative one is ParameterValueError, state unchanged."""
    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_limits")
    physical = [p for p in bridged.get_params(None) if p.name.startswith(("m_{", "\\Gamma_{"))]
    assert len(physical) == 4 and all(p.lower == 0.0 for p in physical)
    width_name = _symbol(model, r"\Gamma_{\rho").name
    with pytest.raises(ParameterValueError, match="below the lower limit"):
        from_helicity_model(model, cols, expression=expr, parameters={width_name: -0.1})
    given = from_helicity_model(model, cols, expression=expr, parameters={width_name: {"value": 0.1, "lower": -1.0}})
    assert _param(given, width_name).lower == -1.0  # the user's limits are kept
    width = _param(bridged, width_name)
    data = bridged.to_data({k: v[:200] for k, v in cols.items()}, name="dz_limits_data")
    loss = UnbinnedNLL(bridged, data)
    before, value = float(loss.value()), float(width.value())

    @zcache.function
    def set_and_evaluate(w):
        width.set_value(w)
        return loss.value()

    for compiled in (False, True):
        with zcache.set_jit_mode(compiled):
            with pytest.raises(ParameterValueError, match="below the lower limit"):
                set_and_evaluate(tf.constant(-0.1, tf.float64))
        assert float(width.value()) == value and float(loss.value()) == before
    with pytest.raises(ParameterValueError, match="below the lower limit"):
        width.set_value(-0.1)
    assert float(width.value()) == value


@pytest.mark.slow  # about 4 CPU seconds (CONTRIBUTING.md, "Test times")
def test_group_programs_trace_once_for_every_dataset_and_caller():
    """Issue 26: each group's amplitudes (or, its line shape floating, their sums with the couplings) and
    the data-only columns are one tf.function each, traced once for the data and the phase-space sample
    (other sizes), the value, the gradient, a compiled fit and new data; values and gradients equal the
    uncached model's."""
    x, y, m1, g1, m2, g2, c1, c2 = sp.symbols("x y m1 g1 m2 g2 c1 c2")
    expr = sp.Abs(c1 * sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1) * sp.cos(y)
                  + c2 * sp.sqrt(m2 * g2) / (m2**2 - x**2 - sp.I * m2 * g2) * sp.sin(y) ** 2) ** 2
    rng = np.random.default_rng(5)
    cols = {"x": rng.uniform(0.3, 1.5, 8000), "y": rng.uniform(0, np.pi, 8000)}
    params = {m1: dict(value=0.9, lower=0.5, upper=1.3, floating=True), g1: dict(value=0.1, lower=0.02, upper=0.3,
                                                                                floating=True),
              m2: 0.77, g2: 0.15, c1: 1.0 + 0j, c2: 0.5 + 0.5j}
    models = [SymbolicModel(expr, params, ["x", "y"], cols, name=f"programs_{c}", cache=c) for c in (True, False)]
    set_seed(5)
    events = models[0].sample(300).numpy()  # without replacement from the 8000 phase-space events
    losses = [UnbinnedNLL(m, zcache.Data(events, obs=["x", "y"], name=f"programs_data_{i}"))
              for i, m in enumerate(models)]
    for loss in losses:
        zcache.set_values(loss.params, [0.92, 0.11, 0.45, 0.55])
    got, want = losses[0].value_gradient(), losses[1].value_gradient()
    assert float(got[0]) == pytest.approx(float(want[0]), rel=1e-12)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-9)
    model = models[0]
    # group 0's line shape floats: its couplings' sums are one program (its columns' program is never
    # called); group 1's columns are one program, cached
    assert sorted(model._group_programs) == [0, 1] and list(model._times_programs) == [0]
    programs = [model._times_programs[0], model._group_programs[1][1], model._stack_fn]
    result = Minuit(tiered=False).minimize(losses[0])
    assert result.valid and result.path == "compiled"
    losses[0].datasets()[0].set_data(np.stack([cols["x"][300:700], cols["y"][300:700]], axis=1))  # another size
    losses[0].value_gradient()
    assert [p.experimental_get_tracing_count() for p in programs] == [1, 1, 1]
    assert model._group_programs[0][1].experimental_get_tracing_count() == 0


def _two_resonances(name, floating):
    """A sum of two Breit-Wigners times angular factors; the first line shape floating (or not)."""
    x, y, m1, g1, m2, g2, c1, c2, c3 = sp.symbols("x y m1 g1 m2 g2 c1 c2 c3")
    bw1 = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    bw2 = sp.sqrt(m2 * g2) / (m2**2 - x**2 - sp.I * m2 * g2)
    expr = sp.Abs(c1 * bw1 * sp.cos(y) + c2 * bw1 * sp.sin(y) + c3 * bw2 * sp.sin(y) ** 2) ** 2
    rng = np.random.default_rng(6)
    cols = {"x": rng.uniform(0.3, 1.5, 6000), "y": rng.uniform(0, np.pi, 6000)}
    params = {m1: dict(value=0.9, lower=0.5, upper=1.3, floating=floating),
              g1: dict(value=0.1, lower=0.02, upper=0.3, floating=floating),
              m2: 0.77, g2: 0.15, c1: 1.0 + 0j, c2: 0.4 - 0.3j, c3: 0.5 + 0.5j}
    model = SymbolicModel(expr, params, ["x", "y"], cols, name=name)
    plain = SymbolicModel(expr, params, ["x", "y"], cols, name=f"{name}_plain", cache=False)
    set_seed(6)
    events = model.sample(400).numpy()
    losses = [UnbinnedNLL(m, zcache.Data(events, obs=["x", "y"], name=f"{m.name}_data")) for m in (model, plain)]
    return model, *losses


@pytest.mark.slow  # about 2.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_the_coherent_sums_gradient_slices_nothing():
    """The couplings reach the sum through a split and reshapes, whose gradients are a concat and
    reshapes: no StridedSliceGrad (each writes a new buffer; ~8 per call of a small couplings fit's
    program, ~30 µs each). The value and gradient equal the uncached model's."""
    model, loss, plain = _two_resonances("slices", False)
    params = [p for p in loss.params if p.floating]
    with zcache.set_graph_mode(True):
        value, grad = loss.value_gradient(params)
        [fn] = loss._gradient_fns.values()
        [concrete] = fn._concrete.values()
        graph_def = concrete.graph.as_graph_def()
        ref_value, ref_grad = plain.value_gradient([next(q for q in plain.params if q.name == p.name) for p in params])
    ops = [n.op for n in graph_def.node] + [n.op for f in graph_def.library.function for n in f.node_def]
    assert "BatchMatMulV2" in ops  # the coupling products are there ...
    assert "StridedSliceGrad" not in ops  # ... and no slice is differentiated
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), ref_grad.numpy(), rtol=1e-9, atol=1e-9)


def test_the_data_only_stack_holds_real_rows():
    """Issue 26: the cached data-only sub-expressions are float64 rows, a complex one as two (its real
    and imaginary parts): the group programs that read them at every call of a fit are bound by
    memory, and a real value stored as complex was twice its bytes. Each point's rows equal the
    sub-expression evaluated by numpy (sympy.lambdify), and the model's value and gradient the
    uncached model's."""
    x, y, m1, g1, m2, g2, c1, c2 = sp.symbols("x y m1 g1 m2 g2 c1 c2")
    bw1 = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    bw2 = sp.sqrt(m2 * g2) / (m2**2 - x**2 - sp.I * m2 * g2)
    expr = sp.Abs(c1 * bw1 * sp.exp(sp.I * y) + c2 * bw2 * sp.cos(y) ** 2) ** 2
    rng = np.random.default_rng(8)
    cols = {"x": rng.uniform(0.3, 1.5, 3000), "y": rng.uniform(0, np.pi, 3000)}
    params = {m1: dict(value=0.9, lower=0.5, upper=1.3, floating=True), g1: 0.1, m2: 0.77, g2: 0.15,
              c1: 1.0 + 0j, c2: 0.4 - 0.3j}
    model = SymbolicModel(expr, params, ["x", "y"], cols, name="real_rows")
    plain = SymbolicModel(expr, params, ["x", "y"], cols, name="real_rows_plain", cache=False)
    data = zcache.Data(np.stack([cols["x"][:500], cols["y"][:500]], axis=1), obs=["x", "y"], name="real_rows_data")
    stack = model._data_stack(data).numpy()
    layout = model._translator.stack_rows()
    kinds = {bool(complex_) for _, complex_ in layout.values()}
    assert stack.dtype == np.float64 and kinds == {True, False}  # both kinds occur in this model
    assert stack.shape == (sum(2 if c else 1 for _, c in layout.values()), 500)
    for node, (row, complex_) in layout.items():
        want = np.broadcast_to(sp.lambdify([x, y], node, modules="numpy")(cols["x"][:500], cols["y"][:500]), (500,))
        got = stack[row] + 1j * stack[row + 1] if complex_ else stack[row]
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, err_msg=str(node))
        assert complex_ == bool(np.iscomplexobj(want)), node
    losses = [UnbinnedNLL(m, data) for m in (model, plain)]
    got, want = (loss.value_gradient([q for q in loss.params if q.floating]) for loss in losses)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-12)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-9, atol=1e-9)


# [graph] slow: about 6 CPU seconds; the fast loop keeps [eager] (CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("mode", ["eager", pytest.param("graph", marks=pytest.mark.slow)])
def test_group_programs_take_the_events_matrix_in_any_column_order(mode):
    """Issue 26: a moved group's fused programs take the data's (N, columns) matrix and slice it inside
    XLA (sliced outside, each column was a strided copy per call): the graph of a value + gradient
    holds no slice of the events. A Data whose columns come in another order, with one more, gives
    the same value and gradient (reordered once), equal to the uncached model's."""
    model, loss, plain = _two_resonances("events_matrix", True)
    events = loss.datasets()[0].value().numpy()
    extra = np.random.default_rng(1).normal(size=len(events))
    shuffled = zcache.Data(np.stack([events[:, 1], extra, events[:, 0]], axis=1), obs=["y", "z", "x"],
                           name="events_matrix_shuffled")
    other = UnbinnedNLL(model, shuffled)
    params = [p for p in loss.params if p.floating]
    assert {p.name for p in params} >= {"m1", "g1"}
    with zcache.set_graph_mode(mode == "graph"):
        value, grad = loss.value_gradient(params)
        value_other, grad_other = other.value_gradient(params)
        ref_value, ref_grad = plain.value_gradient([next(q for q in plain.params if q.name == p.name) for p in params])
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), ref_grad.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(float(value_other), float(value), rtol=1e-13)
    np.testing.assert_allclose(grad_other.numpy(), grad.numpy(), rtol=1e-12, atol=1e-12)
    assert model._times_programs, "the floating line shape's group is fused"
    if mode == "graph":  # a compiled fit's value + gradient, called at every step: the events enter XLA whole
        from zcache._fitting.compiled_fit import CompiledFit

        result = Minuit(tiered=False).minimize(loss)
        assert result.valid and result.path == "compiled"
        [program] = CompiledFit.of(loss, params)._programs.values()
        [concrete] = program._list_all_concrete_functions()
        functions = concrete.graph._functions.values()
        graphs = {f.graph.name: f.graph for f in functions}
        # slices inside an XLA program are reads in its loops: the fused programs (times, vjp, a group's forward)
        xla = {f.graph.name for f in functions if "_XlaMustCompile" in f.definition.attr
               and f.definition.attr["_XlaMustCompile"].b}
        assert {"row_value_gradient", "times", "vjp"} <= set(graphs) and {"times", "vjp"} <= xla
        events = tf.TensorShape([None, 2])
        slices = [(name, op.type) for name, graph in graphs.items() if name not in xla
                  for op in graph.get_operations() if op.inputs and op.inputs[0].dtype == tf.float64
                  and op.inputs[0].shape == events
                  and op.type in ("StridedSlice", "Slice", "Unpack", "GatherV2", "Split", "SplitV", "Transpose")]
        assert slices == []


# floating=False exhaustive: make test keeps the floating line shape, the case whose group is computed at every call
# True: slow too (about 7 CPU seconds; CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("floating", [pytest.param(True, marks=pytest.mark.slow),
                                      pytest.param(False, marks=pytest.mark.exhaustive)])
def test_a_compiled_fit_multiplies_the_couplings_into_a_moved_groups_program(floating):
    """Issue 26: a group whose line shape floats is computed at every call of a fit; its fused program
    then multiplies the couplings in (no (H, K, N) columns, no products over the events) and the
    normalization is the mean intensity (no integral blocks), in the loss's own calls and inside a
    compiled fit's program (substituted). Value and gradient equal the uncached model's, the minimum
    and Hessian MIGRAD's and numdifftools'; with the line shapes fixed the group's columns are cached
    (served to the program) and nothing of this is built."""
    import numdifftools as nd

    from zcache._engine.context import substituted
    from zcache._fitting.compiled_fit import CompiledFit

    model, loss, plain = _two_resonances(f"times_{floating}", floating)
    params = loss.params
    assert len(params) == (6 if floating else 4)  # c1 is the reference coupling
    x = np.array([float(p) for p in params]) * (1.0 + 0.02 * np.random.default_rng(7).standard_normal(len(params)))
    zcache.set_values(params, x)
    zcache.set_values(plain.params, x)
    want_f, want_g = (t.numpy() for t in plain.value_gradient())  # no cache, no program: the columns' products
    got_f, got_g = (t.numpy() for t in loss.value_gradient())
    assert got_f == pytest.approx(want_f, rel=1e-12)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-9, atol=1e-9 * np.abs(want_g).max())
    stand_ins = {p.node_id: tf.constant(v, tf.float64) for p, v in zip(params, x, strict=True)}
    for mode in (False, True):
        with zcache.set_graph_mode(mode):

            def at_stand_ins():
                with tf.GradientTape() as tape:
                    tape.watch(list(stand_ins.values()))
                    with substituted(stand_ins):
                        f = loss.value()
                return f, tf.stack(tape.gradient(f, list(stand_ins.values())))

            f, g = (t.numpy() for t in (tf.function(at_stand_ins)() if mode else at_stand_ins()))
            assert f == pytest.approx(want_f, rel=1e-12)
            np.testing.assert_allclose(g, want_g, rtol=1e-9, atol=1e-9 * np.abs(want_g).max())
    assert sorted(model._times_programs) == ([0] if floating else [])
    zcache.set_values(params, x)
    result = Minuit(tiered=False).minimize(loss)
    assert result.valid and result.path == "compiled", result.fallback
    assert sorted(model._times_programs) == ([0] if floating else [])
    outcome = CompiledFit.of(loss, params).run(x, edm_max=2e-5 * loss.errordef)
    gradient = lambda v: loss.value_gradient_at(v, params)[1].numpy()  # noqa: E731
    reference = nd.Jacobian(gradient, step=1e-5)(outcome.x)
    np.testing.assert_allclose(outcome.hessian, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
    fitted = {p.name: v for p, v in zip(params, outcome.x, strict=True)}
    zcache.set_values(params, x)
    migrad = Minuit(compiled=False, tol=1e-4).minimize(loss)
    assert migrad.fmin == pytest.approx(result.fmin, abs=1e-4)
    for name, value in migrad.values.items():
        assert fitted[name] == pytest.approx(value, abs=2e-2 * migrad.errors[name])
        assert result.values[name] == pytest.approx(value, abs=2e-2 * migrad.errors[name])


# -- the structured Hessian (issue 26: a Hessian in a few passes, exact) -------------------------------
def _hessian_bridge(tag, *, polar=True, weights=False, capacity=None, extra=None, coupling_floats=True):
    """Two Breit-Wigners in two columns (two coupling groups, masses and widths floating), the second
    coupling polar (a zcache ComplexParameter) or Cartesian; optionally weighted or padded data."""
    from zcache.amplitude import ComplexParameter

    x, y, th, m1, g1, m2, g2, c1, c2 = sp.symbols("x y th m1 g1 m2 g2 c1 c2")
    bw1 = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    bw2 = sp.sqrt(m2 * g2) / (m2**2 - y**2 - sp.I * m2 * g2)
    expr = sp.Abs(c1 * bw1 * sp.cos(th) + c2 * bw2 * sp.sin(th) ** 2) ** 2
    rng = np.random.default_rng(7)
    cols = {"x": rng.uniform(0.3, 1.5, 800), "y": rng.uniform(0.3, 1.5, 800), "th": rng.uniform(0, np.pi, 800)}
    limits = {m1: (0.9, 0.45, 1.35), g1: (0.1, 0.05, 0.15), m2: (0.77, 0.4, 1.2), g2: (0.15, 0.075, 0.225)}
    params = {s: dict(value=v, lower=lo, upper=hi, floating=True) for s, (v, lo, hi) in limits.items()}
    coupling = ComplexParameter(f"{tag}_c2", 0.5 + 0.5j, polar=polar, floating=coupling_floats)
    model = SymbolicModel(expr, {**params, c1: 1.0 + 0j, c2: coupling}, ["x", "y", "th"], cols, name=tag)
    events = np.stack([cols[k][:250] for k in ("x", "y", "th")], axis=1)
    data = zcache.Data(events, name=f"{tag}_data", obs=["x", "y", "th"],
                       weights=rng.uniform(0.2, 1.8, 250) if weights else None, capacity=capacity)
    return UnbinnedNLL(model, data, **(extra or {}))


def _numdifftools_hessian(loss, x):
    import numdifftools as nd

    params = loss.params
    with zcache.set_graph_mode(False):
        gradient = lambda v: loss.value_gradient_at(v, params)[1].numpy()  # noqa: E731
        reference = nd.Jacobian(gradient, step=nd.step_generators.MaxStepGenerator(1e-4, num_steps=4))(x)
        loss.value_at(x, params)
    return 0.5 * (reference + reference.T)


@pytest.mark.parametrize("polar, weights, capacity, coupling_floats",
                         # the fast loop keeps the fixed-coupling case; the other two cost 8-9 CPU seconds each
                         [pytest.param(True, False, None, True, marks=pytest.mark.slow),
                          pytest.param(False, True, None, True, marks=pytest.mark.slow),
                          # a chunked Hessian: exhaustive, make test keeps the unchunked ones and test_chunks' Hessians
                          pytest.param(True, False, 300, True, marks=pytest.mark.exhaustive),
                          # about 7 CPU seconds: slow as well (the fast loop keeps the couplings block's own test)
                          pytest.param(True, False, None, False, marks=pytest.mark.slow)])
def test_structured_hessian_equals_numdifftools(polar, weights, capacity, coupling_floats):
    """Couplings polar and Cartesian (or fixed), weighted data, padded data: the structured Hessian (jets of
    the line shapes, coupling blocks from the amplitudes) equals numdifftools on the exact gradient, eagerly,
    traced (hessian_at's default now) and with XLA."""
    loss = _hessian_bridge(f"hs_{polar}_{weights}_{capacity}_{coupling_floats}", polar=polar, weights=weights,
                           capacity=capacity, coupling_floats=coupling_floats)
    params = loss.params
    n = 6 if coupling_floats else 4
    assert [p.name for p in params][:4] == ["m1", "g1", "m2", "g2"] and len(params) == n
    assert loss.supports_structured_hessian(params)
    x = np.array([float(p) for p in params]) * (1.0 + 0.02 * np.random.default_rng(3).standard_normal(n))
    reference = _numdifftools_hessian(loss, x)
    scale = np.abs(reference).max()
    with zcache.set_graph_mode(False):
        loss.value_at(x, params)
        eager = loss.structured_hessian(params).numpy()
    assert np.abs(eager - reference).max() < 1e-8 * scale
    np.testing.assert_array_equal(eager, eager.T)
    found = {"graph": loss.hessian_at(x, params).numpy()}
    with zcache.set_jit_mode(True):
        found["jit"] = loss.hessian_at(x, params).numpy()
    for how, hessian in found.items():
        assert np.abs(hessian - eager).max() < 1e-11 * scale, how
    # the parameters are left at x, as hessian_at promises
    np.testing.assert_allclose([float(p) for p in params], x, rtol=1e-15)


@pytest.mark.slow  # about 7 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_structured_hessian_is_refused_where_it_would_not_hold():
    """A constraint, an extended loss, a parameter behind two symbols of a group: None, and hessian_at
    falls back to differentiating the loss."""
    from zcache.loss import GaussianConstraint

    base = _hessian_bridge("hs_refused")
    params = base.params
    m1 = params[0]
    constrained = _hessian_bridge("hs_constrained", extra={"constraints": [GaussianConstraint([m1], [0.9], [0.05])]})
    assert not constrained.supports_structured_hessian(constrained.params)
    assert constrained.structured_hessian(constrained.params) is None
    x = np.array([float(p) for p in constrained.params])
    h = constrained.hessian_at(x, constrained.params).numpy()
    reference = _numdifftools_hessian(constrained, x)
    assert np.abs(h - reference).max() < 1e-5 * np.abs(reference).max()

    # one Parameter object for two symbols of one group: the jets would differentiate one symbol only
    a, b, x_ = sp.symbols("a b x")
    shared = zcache.Parameter("hs_shared", 0.8, lower=0.1, upper=2.0)
    c = sp.Symbol("c")
    model = SymbolicModel(sp.Abs(c / (a**2 - x_**2 - sp.I * b * 0.1) + 1) ** 2, {a: shared, b: shared, c: 0.3 + 0.1j},
                          ["x"], {"x": np.linspace(0.2, 1.5, 300)}, name="hs_shared_model")
    loss = UnbinnedNLL(model, model.to_data({"x": np.linspace(0.25, 1.45, 40)}, name="hs_shared_data"))
    assert shared in loss.params
    assert not loss.supports_structured_hessian(loss.params)
    assert model.nll_hessian(loss.data, loss.params) is None


def test_a_parameter_the_model_does_not_read_gets_a_zero_row():
    """A loss parameter list with a parameter the intensity never reads: its row and column are zero,
    the rest as without it."""
    loss = _hessian_bridge("hs_unread")
    params = loss.params
    other = zcache.Parameter("hs_unread_other", 1.0)
    model = loss.model
    with zcache.set_graph_mode(False):
        full = model.nll_hessian(loss.data, [*params, other]).numpy()
        plain = model.nll_hessian(loss.data, params).numpy()
    np.testing.assert_array_equal(full[-1], 0.0)
    np.testing.assert_allclose(full[:-1, :-1], plain, rtol=1e-14)


# jit=True exhaustive: the same fits under XLA; make test keeps the structured Hessian of a compiled fit under XLA in
# test_compiled_fit_takes_the_couplings_block_exactly[True] (the whole structured Hessian and the couplings' block
# against differences throughout: the same minimum and errors, nfcn lower by 2 per parameter taken exactly)
@pytest.mark.parametrize("jit", [pytest.param(False, marks=pytest.mark.slow),  # about 4.5 CPU seconds
                                 pytest.param(True, marks=pytest.mark.exhaustive)])
def test_compiled_fit_uses_the_structured_hessian_where_asked(jit):
    """Minuit(structured_hessian=True), with and without XLA: the compiled fit's seed and final Hessians come
    from the structure (no gradient per parameter: nfcn drops by 2n); the default keeps differences. The same
    minimum, and the same errors (to the differences' 1e-5 truncation)."""
    from zcache.loss import UnbinnedNLL as NLL

    loss = _hessian_bridge(f"hs_fit_{jit}")
    params = loss.params
    truth = [0.95, 0.12, 0.8, 0.14, 0.6, 0.5]
    start = [0.93, 0.11, 0.82, 0.15, 0.55, 0.45]
    # data drawn from the model at the truth: a minimum inside the limits
    for p, v in zip(params, truth):
        p.set_value(v)
    rng = np.random.default_rng(11)
    pool = np.stack([rng.uniform(0.3, 1.5, 40_000), rng.uniform(0.3, 1.5, 40_000), rng.uniform(0, np.pi, 40_000)], axis=1)
    intensity = loss.model.intensity(pool).numpy()
    sample = pool[rng.uniform(0, intensity.max(), len(pool)) < intensity][:600]
    assert len(sample) == 600
    data = zcache.Data(sample, name=f"hs_fit_sample_{jit}", obs=["x", "y", "th"])
    results = {}
    compiled = {"tiered": False}  # the compiled fit from the first fit (the tiered start: test_tiers)
    for how, minuit in (("structured", Minuit(structured_hessian=True, **compiled)), ("default", Minuit(**compiled))):
        for p, v in zip(params, start):
            p.set_value(v)
        with zcache.set_jit_mode(jit):
            r = minuit.minimize(NLL(loss.model, data))  # a loss of its own: its own compiled program
        assert r.valid and r.path == "compiled", (how, r.path)
        results[how] = r
    s, d = results["structured"], results["default"]
    # (BFGS may take a step more or less from a seed that differs by the differences' truncation)
    assert abs(s.nfcn - (d.nfcn - 2 * len(params))) <= 2
    assert abs(s.fmin - d.fmin) < 1e-6
    for name in s.values:
        assert abs(s.values[name] - d.values[name]) < 1e-3 * d.errors[name]
        assert abs(s.errors[name] / d.errors[name] - 1.0) < 1e-4, name


@pytest.mark.slow  # about 9 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_the_couplings_block_of_the_structured_hessian():
    """structured_hessian_block: the couplings' parts (4 of 8), the same from the model; its structured Hessian
    is the full one's block and numdifftools'; none with a constraint or a yield; a simultaneous loss offers
    the positions both parts do (each part's own couplings and the other's, which it does not read)."""
    from zcache.loss import GaussianConstraint

    loss = coupling_block_loss("blk_pos")
    params = loss.params
    names = [p.name for p in params]
    block = loss.structured_hessian_block(params)
    assert [names[a] for a in block] == ["blk_pos_c2_mag", "blk_pos_c2_phase", "blk_pos_c3_re", "blk_pos_c3_im"]
    assert loss.model.nll_hessian_block(params) == block
    assert loss.model.nll_hessian_block([params[0], params[5]]) == [1]  # a width alone: no block
    x = np.array([float(p) for p in params]) * (1.0 + 0.02 * np.random.default_rng(9).standard_normal(len(params)))
    reference = _numdifftools_hessian(loss, x)
    with zcache.set_graph_mode(False):
        loss.value_at(x, params)
        full = loss.structured_hessian(params).numpy()
        part = loss.structured_hessian([params[a] for a in block]).numpy()
    np.testing.assert_allclose(part, full[np.ix_(block, block)], rtol=1e-12, atol=1e-12 * np.abs(full).max())
    assert np.abs(part - reference[np.ix_(block, block)]).max() < 1e-7 * np.abs(reference).max()
    constrained = coupling_block_loss("blk_con", extra={"constraints": [GaussianConstraint([params[0]], [0.95], [0.05])]})
    assert constrained.structured_hessian_block(constrained.params) == []
    other = coupling_block_loss("blk_sim")
    total = loss + other
    both = total.params
    expected = sorted(both.index(p) for p in both if p.name.endswith(("_mag", "_phase", "_re", "_im")))
    assert len(expected) == 8 and total.structured_hessian_block(both) == expected


# jit=False exhaustive: the same program without XLA; make test keeps the compiled one, and the FitMachine's
# coupling_block_fit runs both
# True: slow too (about 23 CPU seconds; CONTRIBUTING.md, "Test times")
@pytest.mark.parametrize("jit", [pytest.param(False, marks=pytest.mark.exhaustive), pytest.param(True, marks=pytest.mark.slow)])
def test_compiled_fit_takes_the_couplings_block_exactly(jit):
    """Minuit() (structured_hessian="auto") with line shapes floating: the compiled fit's two Hessians take the
    couplings' block exactly and difference the 4 line-shape parameters only (nfcn 2 x 4 lower than with
    differences throughout), with and without XLA; the same minimum and errors as differences throughout and
    as the whole structured Hessian; the final Hessian equals numdifftools' at the minimum."""
    loss = coupling_block_loss(f"blk_fit_{jit}")
    params = loss.params
    start = [float(p) * f for p, f in zip(params, (1.02, 0.95, 0.97, 1.05, 0.9, 1.1, 1.1, 0.9), strict=True)]
    results = {}
    with zcache.set_jit_mode(jit):
        for how, minuit in (("auto", Minuit(tiered=False)), ("differences", Minuit(structured_hessian=False, tiered=False)),
                            ("structured", Minuit(structured_hessian=True, tiered=False))):
            zcache.set_values(params, start)
            fitted = UnbinnedNLL(loss.model, loss.data)  # a loss of its own: its own compiled program
            results[how] = minuit.minimize(fitted), fitted
    (a, fitted), (d, _), (s, _) = results["auto"], results["differences"], results["structured"]
    for r in (a, d, s):
        assert r.valid and r.path == "compiled", r.fallback
    # (BFGS may take a step more or less from a seed that differs by the differences' truncation)
    assert abs(a.nfcn - (d.nfcn - 2 * 4)) <= 2, (a.nfcn, d.nfcn)
    for r in (a, s):
        assert abs(r.fmin - d.fmin) < 1e-6
        for name in d.values:
            assert abs(r.values[name] - d.values[name]) < 1e-3 * d.errors[name]
            assert abs(r.errors[name] / d.errors[name] - 1.0) < 1e-4, name
    x = np.array([a.values[p.name] for p in fitted.params])
    reference = _numdifftools_hessian(fitted, x)
    hessian = 2.0 * fitted.errordef * np.linalg.inv(np.asarray(a.covariance))
    assert np.abs(hessian - reference).max() < 1e-4 * np.abs(reference).max()


@pytest.mark.slow  # an ampform model
def test_structured_hessian_of_an_ampform_model(dzero):
    """D0 -> K- pi+ pi0 through from_helicity_model (relativistic Breit-Wigners with form factors,
    Blatt-Weisskopf sqrt's): masses, widths and the coupling floating, against numdifftools."""
    model, expr, cols = dzero
    bridged = from_helicity_model(model, {k: v[:1500] for k, v in cols.items()}, expression=expr,
                                  parameters=_line_shapes_floating(model), name="dz_structured")
    data = bridged.to_data({k: v[:300] for k, v in cols.items()}, name="dz_structured_data")
    loss = UnbinnedNLL(bridged, data)
    params = loss.params
    assert len(params) == 6 and loss.supports_structured_hessian(params)
    x = np.array([float(p) for p in params]) * (1.0 + 0.01 * np.random.default_rng(5).standard_normal(6))
    reference = _numdifftools_hessian(loss, x)
    with zcache.set_graph_mode(False):
        loss.value_at(x, params)
        eager = loss.structured_hessian(params).numpy()
    scale = np.abs(reference).max()
    assert np.abs(eager - reference).max() < 1e-7 * scale
    assert np.abs(loss.hessian_at(x, params).numpy() - eager).max() < 1e-11 * scale


@pytest.mark.exhaustive  # CI's 25 minutes; the structured Hessian's other cases run in make test
def test_structured_hessian_of_a_simultaneous_loss():
    """Two bridged losses, each with parameters the other does not read: the sum of the parts' Hessians
    (zero rows where a part does not read a parameter) equals numdifftools on the sum."""
    a, b = _hessian_bridge("hs_sim_a"), _hessian_bridge("hs_sim_b", polar=False)
    total = a + b
    params = total.params
    assert len(params) == 12 and total.supports_structured_hessian(params)
    x = np.array([float(p) for p in params])
    reference = _numdifftools_hessian(total, x)
    found = total.hessian_at(x, params).numpy()
    assert np.abs(found - reference).max() < 1e-8 * np.abs(reference).max()
    assert np.all(found[:6, 6:] == 0.0)


# -- issue 51: per-event results of padded data ---------------------------------------------------
def _padded_intensity_check(model, columns, n):
    plain = model.to_data({k: v[:n] for k, v in columns.items()}, name=f"{model.name}_plain51")
    events = plain.numpy()
    padded = zcache.Data(events, name=f"{model.name}_padded51", obs=plain.obs, capacity=2 * n)
    ref = model.intensity(plain).numpy()
    assert ref.shape == (n,)
    np.testing.assert_allclose(model.intensity(padded).numpy(), ref, rtol=1e-13)
    np.testing.assert_allclose(model.intensity(events).numpy(), ref, rtol=1e-13)  # an array in the space's order
    assert model.intensity(padded, raw=True).shape[0] == 2 * n

    @zcache.function
    def traced():
        return model.intensity(padded)

    np.testing.assert_allclose(traced().numpy(), ref, rtol=1e-12)
    _ = padded.set_data(events[:3])  # another size: the same trace, three rows
    np.testing.assert_allclose(traced().numpy(), ref[:3], rtol=1e-12)


def test_bridge_intensity_of_padded_data_has_one_row_per_event():
    """The coherent path (couplings x amplitudes) and the general one (any expression)."""
    import sympy as sp

    loss = small_bridge_loss(tag="pad51_bw", n_phsp=300, n_data=50)
    cols = {o: loss.data.numpy()[:, i] for i, o in enumerate(loss.data.obs)}
    assert loss.model.is_coherent_sum
    _padded_intensity_check(loss.model, cols, 21)
    x, y, a = sp.symbols("x y a")
    rng = np.random.default_rng(3)
    general = SymbolicModel(x**2 * sp.exp(-a * y), {a: dict(value=0.7, lower=0.1, upper=2.0)}, ["x", "y"],
                            {"x": rng.uniform(0, 1, 200), "y": rng.uniform(0, 1, 200)}, name="pad51_general")
    assert not general.is_coherent_sum
    _padded_intensity_check(general, {"x": rng.uniform(0, 1, 40), "y": rng.uniform(0, 1, 40)}, 21)


def test_bridge_columns_with_an_imaginary_part_are_refused_and_zero_imaginary_parts_kept():
    """Issue 51: to_data (and the phase-space sample) took np.real of every column: x + 0.5j became x."""
    from zcache.exceptions import DataDtypeError

    loss = small_bridge_loss(tag="cplx51_bw", n_phsp=300, n_data=50)
    model = loss.model
    cols = {o: loss.data.numpy()[:, i] for i, o in enumerate(loss.data.obs)}
    ref = model.intensity(model.to_data(cols, name="cplx51_real")).numpy()
    zero_imag = {**cols, "x": cols["x"] + 0j}  # complex arithmetic's columns (ampform, tensorwaves): kept
    np.testing.assert_array_equal(model.intensity(model.to_data(zero_imag, name="cplx51_zero")).numpy(), ref)
    with pytest.raises(DataDtypeError, match=r"column 'x'.*imaginary part.*\.real"):
        model.to_data({**cols, "x": cols["x"] + 0.5j}, name="cplx51_bad")
    with pytest.raises(DataDtypeError, match="column 'y'"):
        model.to_data({**cols, "y": cols["y"] > 0.5}, name="cplx51_bool")
