"""zcache.symbolic: the SymPy / ampform bridge.

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

import zcache

sp = pytest.importorskip("sympy")
pytest.importorskip("ampform")
pytest.importorskip("qrules")

from zcache.exceptions import SymbolicError  # noqa: E402
from zcache.loss import UnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.models import set_seed  # noqa: E402
from zcache.symbolic import SymbolicModel, from_helicity_model, to_tensorflow  # noqa: E402

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


@pytest.fixture(scope="module")
def dzero():
    model, expr = _ampform("D0", ["K-", "pi+", "pi0"], ["K*(892)0", "rho(770)+"], ["strong", "weak"], "helicity")
    rng = np.random.default_rng(2)
    n = 4000
    cols = _box(rng, n, {"m_01": (M_K + M_PIC + 1e-3, M_D0 - M_PI0), "m_12": (M_PIC + M_PI0 + 1e-3, M_D0 - M_K)})
    cols.update(**{"theta_0^01": np.arccos(rng.uniform(-1, 1, n)), "theta_1^12": np.arccos(rng.uniform(-1, 1, n))},
                m_0=np.full(n, M_K), m_1=np.full(n, M_PIC), m_2=np.full(n, M_PI0))
    return model, expr, cols


def _lambdified(expr):
    symbols = sorted(expr.free_symbols, key=lambda s: s.name)
    return symbols, sp.lambdify(symbols, expr, "numpy")


def _param(model, symbol_name, part=None):
    params = {p.name: p for p in model.get_params(None)}
    return params[symbol_name if part is None else f"{symbol_name}_{part}"]


def _symbol(model, start):
    return next(s for s in model.parameter_defaults if s.name.startswith(start))


# -- the translation -------------------------------------------------------------------------
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


def test_core_import_does_not_import_sympy():
    """Only zcache/symbolic.py imports sympy or ampform, and zcache/__init__ does not import it."""
    package = pathlib.Path(zcache.__file__).parent
    offenders = []
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in {"sympy", "ampform", "qrules"} for n in names) and path.stem != "symbolic":
                offenders.append(path.name)
            if path.stem == "__init__" and isinstance(node, ast.ImportFrom) and node.module == "symbolic":
                offenders.append(path.name)
    assert offenders == []


# -- caches: values, gradients, invalidation ----------------------------------------------------
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


# -- fits ---------------------------------------------------------------------------------------
def test_second_ampform_model_bridges_and_fits(dzero):
    """D0 -> K- pi+ pi0 (K*(892)0, rho(770)+: spin 1 in two subsystems): sample 2k events, fit the coupling."""
    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_fit")
    assert bridged.is_coherent_sum and len(bridged.couplings) == 2
    assert [p.name for p in bridged.get_params()] == [p.name for p in bridged.couplings[1].params]
    true = 0.6 + 0.4j
    bridged.couplings[1].set_value(true)
    set_seed(7)
    data = bridged.sample(2000)
    bridged.couplings[1].set_value(1.0 + 0.0j)
    result = Minuit().minimize(UnbinnedNLL(bridged, data))
    assert result.valid
    fitted = complex(bridged.couplings[1])
    errors = [result.errors[p.name] for p in bridged.couplings[1].params]
    assert abs(fitted.real - true.real) < 5 * errors[0] and abs(fitted.imag - true.imag) < 5 * errors[1]
    fractions = bridged.fit_fractions()
    assert len(fractions) == 2 and all(0.0 < f < 1.5 for f in fractions.values())
    from zcache.amplitudes import fit_fractions

    np.testing.assert_allclose(fit_fractions(bridged, bridged.phasespace), list(fractions.values()), rtol=1e-12)


@pytest.mark.slow
def test_compiled_mode_and_toys(dzero):
    """The bridged model under set_jit_mode('auto') (XLA) gives the uncompiled loss and gradient; run_toys fits it."""
    from zcache.toys import run_toys

    model, expr, cols = dzero
    bridged = from_helicity_model(model, cols, expression=expr, name="dz_jit")
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
    # Batched (zcache.batch): the bridged graph vectorizes as it is; the phase-space integrals,
    # which no toy input reaches, are served from their caches; the fits equal the serial ones.
    batched = run_toys(bridged, loss, n_toys=2, n_events=400, seed=3, batch=2, progress=False)
    assert batched.table["valid"].all() and not batched.table["refit"].any()
    for name in toys.names:
        assert np.max(np.abs(batched.table[name] - toys.table[name]) / toys.table[f"{name}_err"]) < 1e-3
    from zcache.batch import BatchedLoss

    assert any(c.name.startswith("I[group") for c in BatchedLoss.of(loss, loss.params).served_caches)
