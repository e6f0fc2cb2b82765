"""The SymPy / ampform bridge against tensorwaves: a full fit of J/psi -> gamma pi0 pi0 (issue 14).

The model is the one of ``bench_tensorwaves.py`` (ampform, canonical helicity, f0(500), f0(980),
f2(1270), relativistic Breit-Wigner with energy-dependent width and form factors), built by
qrules/ampform once; ``model.expression.doit()`` is computed once and given to both sides.
zcache's model is **bridged** (:func:`zcache.symbolic.from_helicity_model`), not hand-built.

Events: flat phase space drawn with numpy (:func:`_peers_tensorwaves.phase_space`); the
kinematic columns come from tensorwaves' ``SympyDataTransformer`` (both sides read the same
columns). The data are drawn by hit-or-miss from further phase-space events at "true" couplings
(the bridged model's intensity, uncached). Both fits start at ampform's defaults (couplings 1).

Tables:

1. intensity of the bridged model vs tensorwaves' numpy function on every data event;
2. full fits, MIGRAD + HESSE, same start and data: zcache (``UnbinnedNLL`` + ``Minuit``, its
   exact gradient and Hessian; its default, the compiled fit, and ``compiled=False``, first and
   second fit each) vs tensorwaves (jax backend, ``create_cached_function``, ``UnbinnedNLL``,
   ``Minuit2(use_analytic_gradient=True)`` then ``hesse()``), with the six non-reference
   couplings free, and with the masses and widths free too; per-evaluation
   times (value, value + gradient) and the numbers of calls;
3. the f0(980) width (fixed) changed between fits: zcache's ``set_value`` + refit vs
   tensorwaves' rebuild (``create_cached_function``, data transform, estimator) + refit;
4. setup: building the model and the first call (tracing / jit compiling).

Run ``python benchmarks/bench_symbolic.py [--quick]`` or ``run_all.py``. Without tensorwaves
(the test environment) its rows say "not installed" and the zcache rows run on the
generator's own kinematics.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import zcache  # noqa: E402
from zcache.loss import UnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402
from zcache.symbolic import from_helicity_model  # noqa: E402

try:  # benchmarks/ on sys.path: run as a script or from run_all.py
    import _peers_tensorwaves as peers
    from _harness import markdown_table
except ModuleNotFoundError:  # imported as benchmarks.bench_symbolic
    from . import _peers_tensorwaves as peers
    from ._harness import markdown_table

__all__ = ["Config", "FULL", "QUICK", "run"]

#: Goals from the issue: zcache fit time / tensorwaves fit time.
TARGET_COUPLINGS = 0.5
TARGET_ALL = 1.0

M_PI0 = 0.1349768


@dataclass(frozen=True)
class Config:
    """Sizes of one run: data and phase-space events, timing repeats."""

    n_data: int
    n_phsp: int
    repeats: int
    seed: int = 14


FULL = Config(n_data=100_000, n_phsp=100_000, repeats=7)
QUICK = Config(n_data=2_000, n_phsp=2_000, repeats=2)

#: The "true" couplings of the data (in the order of ampform's parameter_defaults); the fits start at 1.
TRUE_COUPLINGS = (1.0, 0.6 - 0.4j, 1.4 + 0.3j, 0.5 + 0.8j, 0.9 - 0.2j, 0.4 + 0.4j, 0.7 + 0.1j)


def _limits(name: str) -> tuple[float, float] | None:
    """The same limits on both sides for masses and widths (a fit of all must not step to a width < 0)."""
    if name.startswith("m_{"):
        return (2 * M_PI0 + 1e-3, 3.0)
    if name.startswith("\\Gamma_{"):
        return (1e-3, 1.0)
    return None


def _model() -> tuple[Any, Any, float]:
    _, model = peers.build_model()
    t0 = time.perf_counter()
    expression = model.expression.doit()
    return model, expression, time.perf_counter() - t0


def _columns(model: Any, n: int, seed: int, tw_ok: bool) -> dict[str, np.ndarray]:
    reaction, _ = peers.build_model()
    m_parent = reaction.initial_state[-1].mass
    masses = tuple(reaction.final_state[i].mass for i in range(3))
    momenta, kin = peers.phase_space(n, seed, m_parent, masses)
    if tw_ok:
        with np.errstate(invalid="ignore"):  # the transformer's unused branch of a sqrt
            return peers.helicity_data(model, momenta)
    return {**kin, "m_1": np.full(n, masses[1]), "m_2": np.full(n, masses[2])}


def _couplings(model: Any) -> list[Any]:
    return [s for s, v in model.parameter_defaults.items() if isinstance(v, complex)]


def _true_values(model: Any) -> dict[Any, Any]:
    values = dict(model.parameter_defaults)
    for s, c in zip(_couplings(model), TRUE_COUPLINGS, strict=True):
        values[s] = c
    return values


def _draw_data(model: Any, expression: Any, cfg: Config, tw_ok: bool) -> dict[str, np.ndarray]:
    """Hit-or-miss at the true couplings, from chunks of phase space."""
    truth = {s.name: v for s, v in _true_values(model).items()}
    chunks: list[dict[str, np.ndarray]] = []
    count, seed, fmax = 0, cfg.seed + 100, None
    rng = np.random.default_rng(cfg.seed + 1)
    while count < cfg.n_data:
        cols = _columns(model, max(4 * cfg.n_data, 20_000), seed, tw_ok)
        seed += 1
        ref = from_helicity_model(model, cols, expression=expression, parameters=truth, cache=False, name="truth")
        x = np.stack([cols[o] for o in ref.space.obs], axis=1)
        intensity = ref.intensity(x).numpy()
        fmax = 1.2 * intensity.max() if fmax is None else fmax
        keep = rng.uniform(0.0, fmax, intensity.size) < intensity
        chunks.append({k: v[keep] for k, v in cols.items()})
        count += int(keep.sum())
    return {k: np.concatenate([c[k] for c in chunks])[: cfg.n_data] for k in chunks[0]}


def _median_time(call: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# -- zcache --------------------------------------------------------------------------------------
class _Zcache:
    def __init__(self, model: Any, expression: Any, phsp: dict, data: dict, floating: list[str]) -> None:
        t0 = time.perf_counter()
        limits = {s.name: {"value": float(v), "lower": _limits(s.name)[0], "upper": _limits(s.name)[1]}
                  for s, v in model.parameter_defaults.items() if _limits(s.name)}
        self.bridged = from_helicity_model(model, phsp, expression=expression, floating=floating, name="jpsi",
                                           parameters=limits)
        self.data = self.bridged.to_data(data, name="jpsi_data")
        self.loss = UnbinnedNLL(self.bridged, self.data)
        self.build_s = time.perf_counter() - t0
        self.params = {p.name: p for p in self.bridged.get_params(None)}
        self.start = {name: float(p) for name, p in self.params.items()}
        t0 = time.perf_counter()
        self.loss.value_gradient()
        self.first_call_s = time.perf_counter() - t0

    def set_floating(self, names: set[str]) -> None:
        for sym, obj in self.bridged.symbol_params.items():
            for p in (obj.params if hasattr(obj, "params") else [obj]):
                p.floating = sym.name in names

    def reset(self) -> None:
        """The floating parameters back to the start (fixed ones keep their values)."""
        floating = [p for p in self.params.values() if p.floating]
        zcache.set_values(floating, [self.start[p.name] for p in floating])

    def fit(self, compiled: bool = True) -> dict[str, Any]:
        """Reset, then ``Minuit(compiled=compiled).minimize`` (default: the compiled fit; False: MIGRAD + HESSE)."""
        self.reset()
        t0 = time.perf_counter()
        result = Minuit(compiled=compiled).minimize(self.loss)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "valid": result.valid, "fmin": result.fmin, "nfcn": result.nfcn,
                "ngrad": result.ngrad, "nhessian": result.nhessian, "result": result,
                "path": getattr(result, "path", "—"), "fallback": getattr(result, "fallback", None)}

    def per_call(self, repeats: int) -> tuple[float, float]:
        params = self.loss.params
        x = np.array([float(p) for p in params])
        state = {"i": 0}

        def moved() -> np.ndarray:
            state["i"] ^= 1
            return x * (1.0 + 1e-3 * state["i"])

        self.loss.value_at(moved(), params)
        self.loss.value_gradient_at(moved(), params)
        value = _median_time(lambda: float(self.loss.value_at(moved(), params)), repeats)
        grad = _median_time(lambda: self.loss.value_gradient_at(moved(), params)[1].numpy(), repeats)
        zcache.set_values(list(params), list(x))
        return value, grad


# -- tensorwaves ---------------------------------------------------------------------------------
class _Tensorwaves:
    def __init__(self, model: Any, expression: Any, phsp: dict, data: dict, free: list[Any],
                 defaults: dict[Any, Any] | None = None) -> None:
        from tensorwaves.estimator import UnbinnedNLL as TwNLL
        from tensorwaves.estimator import create_cached_function

        defaults = dict(model.parameter_defaults) if defaults is None else defaults
        t0 = time.perf_counter()
        self.func, transformer = create_cached_function(expression, defaults, backend="jax", free_parameters=free)
        cached_data = transformer(data)
        cached_phsp = transformer(phsp)
        self.estimator = TwNLL(self.func, cached_data, cached_phsp, backend="jax")
        self.build_s = time.perf_counter() - t0
        self.start = {s.name: defaults[s] for s in free}
        t0 = time.perf_counter()
        self.estimator(self.start)
        self.estimator.gradient(self.start)
        self.first_call_s = time.perf_counter() - t0

    def fit(self) -> dict[str, Any]:
        """tensorwaves' ``Minuit2(use_analytic_gradient=True).optimize``, then HESSE.

        Written out (the same flattening of complex parameters, start, step sizes and calls as
        tensorwaves 0.4.17's ``Minuit2``) because that class hands iminuit the gradient as
        ``dict_values``, which iminuit 2.33 refuses; the gradient goes to iminuit as a list.
        """
        import iminuit
        from tensorwaves.optimizer.parameter import ParameterFlattener

        handler = ParameterFlattener(self.start)
        flat = handler.flatten(self.start)
        keys = list(flat)

        def unflatten(x: Any) -> dict:
            return handler.unflatten(dict(zip(keys, x, strict=True)))

        def value(x: Any) -> float:
            return float(self.estimator(unflatten(x)))

        # tensorwaves' (jax's) gradient of a real function of a complex parameter z = a + ib is df/da + i df/db
        # (checked against a finite difference below); split it into (df/da, df/db)
        def gradient(x: Any) -> list[float]:
            grad = self.estimator.gradient(unflatten(x))
            out: list[float] = []
            for name, start in self.start.items():
                g = complex(np.asarray(grad[name]))
                out += [g.real, g.imag] if isinstance(start, complex) else [g.real]
            return out

        x0 = np.array(list(flat.values()), dtype=float)
        i_im = next(i for i, k in enumerate(keys) if "imag" in k)
        step = np.zeros_like(x0)
        step[i_im] = 1e-6
        numeric = (value(x0 + step) - value(x0 - step)) / 2e-6
        assert abs(numeric - gradient(x0)[i_im]) < 1e-3 * (1.0 + abs(numeric)), (numeric, gradient(x0)[i_im])

        t0 = time.perf_counter()
        minuit = iminuit.Minuit(value, tuple(flat.values()), grad=gradient, name=tuple(keys))
        minuit.errors = tuple(0.1 * abs(v) if abs(v) else 0.1 for v in flat.values())
        minuit.errordef = iminuit.Minuit.LIKELIHOOD
        minuit.limits = [_limits(k) or (-np.inf, np.inf) for k in keys]
        minuit.migrad()
        minuit.hesse()
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "valid": minuit.valid, "fmin": minuit.fmin.fval, "nfcn": minuit.fmin.nfcn,
                "ngrad": minuit.fmin.ngrad}

    def per_call(self, repeats: int) -> tuple[float, float]:
        state = {"i": 0}

        def moved() -> dict:
            state["i"] ^= 1
            return {k: v * (1.0 + 1e-3 * state["i"]) for k, v in self.start.items()}

        value = _median_time(lambda: float(self.estimator(moved())), repeats)
        grad = _median_time(lambda: self.estimator.gradient(moved()), repeats)
        return value, grad


# -- the benchmark -------------------------------------------------------------------------------
def _fit_row(label: str, impl: str, fit: dict[str, Any], per_call: tuple[float, float]) -> dict[str, Any]:
    calls = f"{fit['nfcn']} values, {fit['ngrad']} gradients"
    if "nhessian" in fit:
        calls += f", {fit['nhessian']} Hessians"
    return {"free parameters": label, "implementation": impl, "fit time (s)": f"{fit['seconds']:.2f}",
            "valid": fit["valid"], "path": fit.get("path", "—"), "-log L at minimum": f"{fit['fmin']:.4f}",
            "calls (MIGRAD + HESSE)": calls,
            "value (ms)": f"{1e3 * per_call[0]:.2f}", "value + gradient (ms)": f"{1e3 * per_call[1]:.2f}"}


def _width_change(model: Any, expression: Any, phsp: dict, data: dict, zc: _Zcache, free_c: list[Any],
                  tw_ok: bool) -> str:
    """Table 3: the f0(980) width (fixed) x 1.1, then a refit of the couplings; zcache vs tensorwaves."""
    width = next(s for s in model.parameter_defaults if s.name == "\\Gamma_{f_{0}(980)}")
    new_width = float(model.parameter_defaults[width]) * 1.1
    t0 = time.perf_counter()
    zc.params[width.name].set_value(new_width)
    zfit = zc.fit()
    z_total = time.perf_counter() - t0
    rows = [{"implementation": "zcache: set_value + refit", "rebuild (s)": "0", "refit (s)": f"{zfit['seconds']:.2f}",
             "total (s)": f"{z_total:.2f}", "valid": zfit["valid"], "-log L at minimum": f"{zfit['fmin']:.4f}"}]
    if tw_ok:
        t0 = time.perf_counter()
        defaults = dict(model.parameter_defaults)
        defaults[width] = new_width
        tw = _Tensorwaves(model, expression, phsp, data, free_c, defaults=defaults)
        rebuild = time.perf_counter() - t0
        tfit = tw.fit()
        t_total = time.perf_counter() - t0
        rows.append({"implementation": "tensorwaves: rebuild + refit", "rebuild (s)": f"{rebuild:.2f}",
                     "refit (s)": f"{tfit['seconds']:.2f}", "total (s)": f"{t_total:.2f}", "valid": tfit["valid"],
                     "-log L at minimum": f"{tfit['fmin']:.4f}"})
    zc.params[width.name].set_value(float(model.parameter_defaults[width]))
    return markdown_table(rows) + ("\n\ntensorwaves' rebuild: `create_cached_function` with the new width "
                                   "substituted, the data and phase-space transform, a new `UnbinnedNLL`, and the "
                                   "first (compiling) calls.")


def run(quick: bool = False) -> list[tuple[str, str]]:
    """Run the four tables; returns ``(title, markdown)`` pairs."""
    cfg = QUICK if quick else FULL
    status = peers.tensorwaves_status()
    tw_ok = status == "ok"
    model, expression, doit_s = _model()
    phsp = _columns(model, cfg.n_phsp, cfg.seed, tw_ok)
    data = _draw_data(model, expression, cfg, tw_ok)
    couplings = _couplings(model)
    free_c = couplings[1:]
    shapes = [s for s in model.parameter_defaults if s.name.startswith(("m_{", "\\Gamma_{"))]
    names_c = {s.name for s in free_c}
    names_all = names_c | {s.name for s in shapes}
    sections = []

    # 4 (setup) and 1 (equality), from the first builds
    zc = _Zcache(model, expression, phsp, data, sorted(names_c))
    setup_rows = [{"implementation": "zcache bridge (from_helicity_model + UnbinnedNLL)",
                   "build (s)": f"{zc.build_s:.2f}", "first value + gradient (s)": f"{zc.first_call_s:.2f}"}]
    tw_c = None
    if tw_ok:
        import jax

        jax.config.update("jax_enable_x64", True)
        tw_c = _Tensorwaves(model, expression, phsp, data, free_c)
        setup_rows.append({"implementation": "tensorwaves jax (create_cached_function + transform + UnbinnedNLL)",
                           "build (s)": f"{tw_c.build_s:.2f}", "first value + gradient (s)": f"{tw_c.first_call_s:.2f}"})
        from tensorwaves.function.sympy import create_parametrized_function

        full = create_parametrized_function(expression, model.parameter_defaults, backend="numpy")
        ref = np.asarray(full(data)).real
        got = zc.bridged.intensity(zc.data).numpy()
        rel = float(np.max(np.abs(got / ref - 1.0)))
        equality = (f"Largest relative difference of the intensity, bridged zcache model vs tensorwaves' numpy "
                    f"function (`create_parametrized_function`), over all {cfg.n_data} data events at ampform's "
                    f"defaults: **{rel:.1e}** (goal 1e-12: {'met' if rel <= 1e-12 else 'MISSED'}).")
    else:
        setup_rows.append({"implementation": "tensorwaves jax", "build (s)": status, "first value + gradient (s)": ""})
        equality = f"tensorwaves is {status}: no comparison."
    sections.append(("Intensity: bridged zcache model vs tensorwaves (numpy)", equality))

    # 2: fits
    rows, ratios, new_vs_old = [], {}, {}
    scenarios = [("6 couplings (12 real)", names_c, TARGET_COUPLINGS),
                 ("couplings + 3 masses + 3 widths (18 real)", names_all, TARGET_ALL)]
    if quick:  # the all-free fit traces a Hessian over every line shape (~35 s): left out of the smoke test
        scenarios = scenarios[:1]
    for label, names, target in scenarios:
        zc.set_floating(names)
        zcold = zc.fit()
        zfit = zc.fit()
        zcall = zc.per_call(cfg.repeats)
        rows.append(_fit_row(label, "zcache (bridged), first fit", zcold, zcall))
        rows.append(_fit_row(label, "zcache (bridged), second fit", zfit, zcall))
        # The old default, MIGRAD + HESSE (its first fit comes after the default's: precompute is shared).
        mcold = zc.fit(compiled=False)
        mfit = zc.fit(compiled=False)
        rows.append(_fit_row(label, "zcache (bridged), compiled=False, first fit", mcold, zcall))
        rows.append(_fit_row(label, "zcache (bridged), compiled=False, second fit", mfit, zcall))
        new_vs_old[label] = (zcold["seconds"] / mcold["seconds"], zfit["seconds"] / mfit["seconds"],
                             zfit["fallback"])
        if tw_ok:
            tw = tw_c if names is names_c else _Tensorwaves(model, expression, phsp, data, [*free_c, *shapes])
            tcold = tw.fit()
            tfit = tw.fit()
            tcall = tw.per_call(cfg.repeats)
            rows.append(_fit_row(label, "tensorwaves jax, first fit", tcold, tcall))
            rows.append(_fit_row(label, "tensorwaves jax, second fit", tfit, tcall))
            ratios[label] = (zcold["seconds"] / tcold["seconds"], zfit["seconds"] / tfit["seconds"], target)
        if names is names_c:  # 3: between the couplings fits and the all-free ones (a scan of a fixed width)
            width_table = _width_change(model, expression, phsp, data, zc, free_c, tw_ok)

    text = markdown_table(rows)
    if quick:
        text += "\n\n(--quick: the fit with masses and widths free is left out.)"
    text += ("\n\nA first fit includes tracing (zcache: the loss, gradient and Hessian functions of this set of "
             "floating parameters, and precompute) or compiling (jax: the gradient); a second fit from the same "
             "start reuses them. Each side's first value + gradient call (table 'Setup') came before.")
    for label, (cold, warm, fallback) in new_vs_old.items():
        text += (f"\n\n{label}: fit time with the new default (the compiled fit) / the old (`compiled=False`, "
                 f"MIGRAD + HESSE) = **{cold:.2f}** first fit, **{warm:.2f}** second fit (the compiled=False first "
                 "fit runs after the default's two fits and shares their precompute).")
        if fallback:
            text += f" The default fell back to MIGRAD: {fallback}."
    for label, (cold, warm, target) in ratios.items():
        text += (f"\n\n{label}: zcache / tensorwaves fit time = **{cold:.2f}** first fit, **{warm:.2f}** second "
                 f"fit (goal <= {target}: {'met' if warm <= target else 'MISSED'} for the second fit, "
                 f"{'met' if cold <= target else 'MISSED'} for the first).")
    sections.append(("Full fit, MIGRAD + HESSE, same start and data", text))
    sections.append(("A fixed parameter changed between fits (f0(980) width x 1.1), couplings free", width_table))

    setup = markdown_table(setup_rows)
    setup += (f"\n\n`model.expression.doit()` (shared by both, not in the rows): {doit_s:.2f} s. zcache's first call "
              "traces the loss and its gradient and fills the caches; tensorwaves' first calls jit-compile.")
    sections.append(("Setup: building the model and the first call", setup))
    counts = (f"{cfg.n_data} data events, {cfg.n_phsp} phase-space events; per-evaluation times are medians of "
              f"{cfg.repeats} calls at alternating parameter points (couplings-free rows: couplings move; "
              "all-free rows: every free parameter moves).")
    sections.insert(0, ("J/psi -> gamma pi0 pi0 through the bridge: configuration",
                        f"{counts} tensorwaves: {status}; {peers.versions()}."))
    return sections


def main() -> None:
    """Print the tables (``--quick``: small samples)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for title, body in run(args.quick):
        print(f"### {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
