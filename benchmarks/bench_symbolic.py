"""The SymPy / ampform bridge against tensorwaves: full fits of two ampform models (issues 14, 26).

The models (:func:`_peers_tensorwaves.build_model`), built by qrules/ampform with ampform's
relativistic Breit-Wigner (energy-dependent width, form factor) on every resonance:

- ``jpsi``: J/psi -> gamma pi0 pi0 with f0(500), f0(980), f2(1270) (canonical helicity);
- ``dzero``: D0 -> K- pi+ pi0 with K*(892)0 and rho(770)+ (helicity formalism; the model of
  ``tests/test_amplitude_symbolic.py``'s ``dzero`` fixture).

``model.expression.doit()`` is computed once per model and given to both sides. zcache's model is
**bridged** (:func:`zcache.amplitude.from_helicity_model`), not hand-built.

Events: flat phase space drawn with numpy (:func:`_peers_tensorwaves.phase_space`, masses from the
reaction); the kinematic columns come from tensorwaves' ``SympyDataTransformer`` (both sides read
the same columns). The data are drawn by hit-or-miss from further phase-space events at "true"
couplings (the bridged model's intensity, uncached). Both fits start at ampform's defaults
(couplings 1), with the same limits on masses and widths.

Per model:

1. intensity of the bridged model vs tensorwaves' numpy function on every data event (goal 1e-12);
2. fits, MIGRAD + HESSE, same start and data, (a) the couplings free (all but the reference one),
   (b) every coupling, mass and width free. zcache's **first fit** is a fresh model object's
   build + first value-and-gradient call + fit (its tracing counted: TensorFlow's function caches
   are per object), its **warm fit** a further fit of that object from the same start;
   tensorwaves' first fit is ``create_cached_function`` + data transform + ``UnbinnedNLL`` + its
   first calls (jax compiles then) + fit, its warm fit a further fit. A first fit is **one fit**;
   a warm fit is the median of ``warm_repeats`` fits, the two sides' interleaved (one fit of a few
   tenths of a second moves by 20-30 % with the machine's load); per-evaluation times are
   interleaved medians. Checks: the same minimum
   (|delta NLL| <= 1e-3) and HESSE errors (1e-3 relative, matched by parameter);
3. (c) a fixed width changed, then a refit of the couplings: zcache's ``set_value`` + refit vs
   tensorwaves' rebuild + refit (goal <= 0.2);
4. each library in a process of its own (``_rss_fit.py``), as a user runs one of them: (a) and (b)
   again, each side's first fit and ``warm_repeats`` warm fits in a child process that imports only
   its own library, ``own_rounds`` rounds with the sides' order alternating. The warm-fit goals are
   judged on these (in one process, jax beside TensorFlow slows zcache's short fits by about a
   quarter; both numbers are reported). For (b), the child's peak RSS: its first fit's peak, with
   the baseline after imports and data setup.

Run ``python benchmarks/bench_symbolic.py [--quick] [--profile]`` or ``run_all.py``. Without
tensorwaves (the test environment) its rows say "not installed" and the zcache rows run on the
generator's own kinematics. ``--profile``: cProfile around zcache's first fit of the all-free D0
model, top 25 by cumulative time (nothing else runs).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # 3: also the harmless cache-load lines TensorFlow prints beside jax

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import zcache  # noqa: E402
from zcache.amplitude import from_helicity_model  # noqa: E402
from zcache.loss import UnbinnedNLL  # noqa: E402
from zcache.minimize import Minuit  # noqa: E402

try:  # benchmarks/ on sys.path: run as a script or from run_all.py
    import _peers_tensorwaves as peers
    import _rss_fit as rss
    from _harness import markdown_table, time_interleaved, verdict
except ModuleNotFoundError:  # imported as benchmarks.bench_symbolic
    from . import _peers_tensorwaves as peers
    from . import _rss_fit as rss
    from ._harness import markdown_table, time_interleaved, verdict

__all__ = ["Config", "FULL", "QUICK", "SPECS", "run", "profile"]

#: Goals of issue 26: zcache time / tensorwaves time, per scenario and fit (first, warm).
TARGETS = {"couplings": {"first": 1.0, "warm": 0.3}, "all": {"first": 1.0, "warm": 0.5}}
#: Goal for a fixed width changed, then a refit: zcache (set_value + refit) / tensorwaves (rebuild + refit).
TARGET_REFIT = 0.2
#: Checks between the two sides' fits: |delta NLL|, relative difference of HESSE errors, intensity.
TOL_NLL, TOL_ERRORS, TOL_INTENSITY = 1e-3, 1e-3, 1e-12


@dataclass(frozen=True)
class Config:
    """Sizes of one run: data and phase-space events, timing repeats, what runs."""

    n_data: int
    n_phsp: int
    repeats: int
    warm_repeats: int = 3
    own_rounds: int = 2
    seed: int = 14
    models: tuple[str, ...] = ("jpsi", "dzero")
    all_free: tuple[str, ...] = ("jpsi", "dzero")


FULL = Config(n_data=100_000, n_phsp=100_000, repeats=7)
#: The J/psi all-free fit traces a Hessian over every line shape (~35 s): only D0's runs in quick mode.
QUICK = Config(n_data=2_000, n_phsp=2_000, repeats=2, warm_repeats=1, own_rounds=1, all_free=("dzero",))


@dataclass(frozen=True)
class ModelSpec:
    """What a model's benchmark needs beyond the ampform model: truth and the width of table (c)."""

    title: str
    true_couplings: tuple[complex, ...]
    changed_width: str


#: The "true" couplings (in the order of ampform's parameter_defaults; the fits start at 1).
SPECS = {
    "jpsi": ModelSpec("J/psi -> gamma pi0 pi0", (1.0, 0.6 - 0.4j, 1.4 + 0.3j, 0.5 + 0.8j, 0.9 - 0.2j, 0.4 + 0.4j,
                                                 0.7 + 0.1j), "\\Gamma_{f_{0}(980)}"),
    "dzero": ModelSpec("D0 -> K- pi+ pi0", (1.0, 0.8 - 0.5j), "\\Gamma_{K^{*}(892)^{0}}"),
}


# -- the sample ----------------------------------------------------------------------------------
@dataclass
class Sample:
    """One model with its expression, phase-space and data columns and its parameter groups."""

    key: str
    model: Any
    expression: Any
    doit_s: float
    phsp: dict[str, np.ndarray]
    data: dict[str, np.ndarray]

    @property
    def couplings(self) -> list[Any]:
        """The complex couplings, ampform's order."""
        return [s for s, v in self.model.parameter_defaults.items() if isinstance(v, complex)]

    def free(self, scenario: str) -> list[Any]:
        """The free symbols of ``"couplings"`` (all but the first coupling) or ``"all"`` (+ masses, widths)."""
        shapes = [s for s in self.model.parameter_defaults if s.name.startswith(("m_{", "\\Gamma_{"))]
        return self.couplings[1:] + (shapes if scenario == "all" else [])


def _columns(key: str, n: int, seed: int, tw_ok: bool) -> dict[str, np.ndarray]:
    reaction, model = peers.build_model(key)
    momenta, kin = peers.phase_space(n, seed, *peers.masses(reaction))
    if tw_ok:
        with np.errstate(invalid="ignore"):  # the transformer's unused branch of a sqrt
            return peers.helicity_data(model, momenta)
    names = {s.name for s in model.kinematic_variables}
    return {k: v for k, v in kin.items() if k in names}


def _draw_data(sample: Sample, cfg: Config, tw_ok: bool) -> dict[str, np.ndarray]:
    """Hit-or-miss at the true couplings, from chunks of phase space."""
    truth = {s.name: v for s, v in sample.model.parameter_defaults.items()}
    truth.update({s.name: c for s, c in zip(sample.couplings, SPECS[sample.key].true_couplings, strict=True)})
    chunks: list[dict[str, np.ndarray]] = []
    count, seed, fmax = 0, cfg.seed + 100, None
    rng = np.random.default_rng(cfg.seed + 1)
    while count < cfg.n_data:
        cols = _columns(sample.key, max(4 * cfg.n_data, 20_000), seed, tw_ok)
        seed += 1
        ref = from_helicity_model(sample.model, cols, expression=sample.expression, parameters=truth, cache=False,
                                  name=f"{sample.key}_truth")
        intensity = ref.intensity(np.stack([cols[o] for o in ref.space.obs], axis=1)).numpy()
        fmax = 1.2 * intensity.max() if fmax is None else fmax
        keep = rng.uniform(0.0, fmax, intensity.size) < intensity
        chunks.append({k: v[keep] for k, v in cols.items()})
        count += int(keep.sum())
    return {k: np.concatenate([c[k] for c in chunks])[: cfg.n_data] for k in chunks[0]}


def make_sample(key: str, cfg: Config, tw_ok: bool) -> Sample:
    """Build the model, ``doit()`` its expression, draw phase space and data."""
    _, model = peers.build_model(key)
    t0 = time.perf_counter()
    expression = model.expression.doit()
    sample = Sample(key, model, expression, time.perf_counter() - t0, _columns(key, cfg.n_phsp, cfg.seed, tw_ok), {})
    sample.data = _draw_data(sample, cfg, tw_ok)
    return sample


# -- zcache --------------------------------------------------------------------------------------
class ZcacheFit:
    """A fresh bridged model, its data and loss; building it times the build and the first call."""

    def __init__(self, model: Any, expression: Any, phsp: dict, data: dict, floating: list[str], name: str,
                 fused: bool | str = "auto") -> None:
        t0 = time.perf_counter()
        bounds = {s.name: (v, peers.fit_limits(s.name)) for s, v in model.parameter_defaults.items()}
        bounded = {name: {"value": float(v), "lower": lim[0], "upper": lim[1]} for name, (v, lim) in bounds.items()
                   if lim}
        self.bridged = from_helicity_model(model, phsp, expression=expression, floating=floating, name=name,
                                           parameters=bounded, fused=fused)
        self.data = self.bridged.to_data(data, name=f"{name}_data")
        self.loss = UnbinnedNLL(self.bridged, self.data)
        self.build_s = time.perf_counter() - t0
        self.params = {p.name: p for p in self.bridged.get_params(None)}
        self.start = {name: float(p) for name, p in self.params.items()}
        t0 = time.perf_counter()
        self.loss.value_gradient()
        self.first_call_s = time.perf_counter() - t0

    def fit(self) -> dict[str, Any]:
        """The floating parameters back to the start, then ``Minuit().minimize`` (the default, compiled fit)."""
        floating = [p for p in self.params.values() if p.floating]
        zcache.set_values(floating, [self.start[p.name] for p in floating])
        t0 = time.perf_counter()
        result = Minuit().minimize(self.loss)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "valid": result.valid, "fmin": result.fmin, "nfcn": result.nfcn,
                "ngrad": result.ngrad, "nhessian": result.nhessian, "errors": dict(result.errors),
                "path": getattr(result, "path", "—"), "fallback": getattr(result, "fallback", None)}

    def moved_calls(self) -> tuple[Any, Any]:
        """Zero-argument value and value + gradient calls at alternating points (every floating parameter moves)."""
        params = self.loss.params
        x = np.array([float(p) for p in params])
        state = {"i": 0}

        def moved() -> np.ndarray:
            state["i"] ^= 1
            return x * (1.0 + 1e-3 * state["i"])

        return (lambda: float(self.loss.value_at(moved(), params)),
                lambda: self.loss.value_gradient_at(moved(), params)[1].numpy())


def zcache_first_fit(sample: Sample, scenario: str) -> tuple[ZcacheFit, dict[str, Any]]:
    """A fresh model object (build + first call) and its first fit; ``seconds`` of the fit dict is the fit only."""
    zc = ZcacheFit(sample.model, sample.expression, sample.phsp, sample.data,
                   sorted(s.name for s in sample.free(scenario)), f"{sample.key}_{scenario}")
    return zc, zc.fit()


def tensorwaves_first_fit(sample: Sample, scenario: str, defaults: dict | None = None) -> tuple[Any, dict[str, Any]]:
    """tensorwaves' cached function, transform, estimator, first calls and first fit."""
    defaults = dict(sample.model.parameter_defaults) if defaults is None else defaults
    tw = peers.TensorwavesFit(sample.expression, defaults, sample.phsp, sample.data, sample.free(scenario),
                              peers.fit_limits)
    return tw, tw.fit()


# -- tables --------------------------------------------------------------------------------------
def _calls(fit: dict[str, Any]) -> str:
    calls = f"{fit['nfcn']} values, {fit['ngrad']} gradients"
    return calls + (f", {fit['nhessian']} Hessians" if "nhessian" in fit else "")


def _check(zfit: dict[str, Any], tfit: dict[str, Any]) -> tuple[float, float, str]:
    """|delta NLL| and the largest relative difference of the HESSE errors (and its parameter)."""
    rel = {name: abs(zfit["errors"][name] / err - 1.0) for name, err in tfit["errors"].items()
           if name in zfit["errors"]}
    worst = max(rel, key=rel.get) if rel else "—"
    return abs(zfit["fmin"] - tfit["fmin"]), rel.get(worst, float("nan")), worst


def _flat_directions(fit: dict[str, Any]) -> int:
    """How many eigenvalues of the Hessian at tensorwaves' minimum are below 1e-6 of the largest.

    The Hessian comes from central differences of tensorwaves' exact gradient; such eigenvalues are
    directions where the NLL is flat, along which no HESSE error is defined.
    """
    x = np.array(list(fit["values"].values()))
    hessian = np.zeros((x.size, x.size))
    for i in range(x.size):
        step = np.zeros_like(x)
        step[i] = 1e-5 * max(1.0, abs(x[i]))
        hessian[:, i] = (np.asarray(fit["gradient"](x + step)) - np.asarray(fit["gradient"](x - step))) / (2 * step[i])
    eig = np.linalg.eigvalsh(0.5 * (hessian + hessian.T))
    return int(np.sum(eig < 1e-6 * eig.max()))


def _warm_fits(zc: Any, tw: Any, repeats: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Each side's warm fit: of ``repeats`` fits from the same start, interleaved, the one of median time."""
    fits: dict[str, list[dict[str, Any]]] = {"zcache": [], "tensorwaves": []}
    for _ in range(repeats):
        fits["zcache"].append(zc.fit())
        if tw is not None:
            fits["tensorwaves"].append(tw.fit())
    median = {side: sorted(runs, key=lambda fit: fit["seconds"])[len(runs) // 2] if runs else None
              for side, runs in fits.items()}
    return median["zcache"], median["tensorwaves"]


def _own_processes(sample: Sample, scenario: str, cfg: Config, tw_ok: bool) -> dict[str, list[dict[str, Any]]]:
    """Each side's first fit and warm fits in child processes of its own library alone (``_rss_fit.py``).

    ``cfg.own_rounds`` rounds, the sides' order alternating (zcache first in the first round); per side a list of
    the children's results (``seconds``: the first fit, zcache's compile cache empty; ``warm_seconds``; the peaks).
    """
    sides = ["zcache", "tensorwaves"] if tw_ok else ["zcache"]
    out: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    free = [s.name for s in sample.free(scenario)]
    for r in range(cfg.own_rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            out[side].append(rss.measure(side, sample.key, sample.phsp, sample.data, free, warm=cfg.warm_repeats))
    return out


def _median(values: list[float]) -> float:
    return float(np.median(values))


def _own_warm(runs: list[dict[str, Any]]) -> float:
    """The median of every warm fit of a side's children."""
    return _median([t for run in runs for t in run["warm_seconds"]])


def _scenario(sample: Sample, scenario: str, label: str, cfg: Config, tw_ok: bool, notes: list[str],
              own: dict[str, list[dict[str, Any]]]) -> list[dict]:
    """Rows (a) or (b) of one model: first and warm fits of both sides, per-call times, checks.

    ``own``: the same fits in processes of their own (:func:`_own_processes`); the warm-fit goal is judged on them.
    """
    zc, zfirst = zcache_first_fit(sample, scenario)
    zvalue, zgrad = zc.moved_calls()
    variants = {"zcache value": zvalue, "zcache value + gradient": zgrad}
    tw = tfirst = None
    if tw_ok:
        tw, tfirst = tensorwaves_first_fit(sample, scenario)
        tvalue, tgrad = tw.moved_calls()
        variants.update({"tensorwaves value": tvalue, "tensorwaves value + gradient": tgrad})
    zwarm, twarm = _warm_fits(zc, tw, cfg.warm_repeats)
    # (c) before the per-call timing: the first fit after value_at / value_gradient_at calls pays a one-off ~0.3 s
    width_note = _width_change(sample, zc, label, tw_ok) if scenario == "couplings" else None
    per_call = time_interleaved(variants, repeats=cfg.repeats, warmup=2, inner=1)
    zcache.set_values(list(zc.loss.params), [zc.start[p.name] for p in zc.loss.params])
    z_total = zc.build_s + zc.first_call_s + zfirst["seconds"]
    rows = [{"free parameters": label, "implementation": "zcache (bridged)", "first fit (s)": f"{z_total:.2f}",
             "build + first call (s)": f"{zc.build_s:.2f} + {zc.first_call_s:.2f}",
             "warm fit (s)": f"{zwarm['seconds']:.3f}", "warm fit, own process (s)": f"{_own_warm(own['zcache']):.3f}",
             "valid": zfirst["valid"] and zwarm["valid"] and all(r["warm_valid"] for r in own["zcache"]),
             "path (first, warm)": f"{zfirst['path']}, {zwarm['path']}", "-log L at minimum": f"{zwarm['fmin']:.4f}",
             "calls (warm fit)": _calls(zwarm), "value (ms)": f"{per_call['zcache value'].us / 1e3:.2f}",
             "value + gradient (ms)": f"{per_call['zcache value + gradient'].us / 1e3:.2f}"}]
    for which, fit in (("first", zfirst), ("warm", zwarm)):
        if fit["fallback"]:
            notes.append(f"{label}: zcache's {which} fit fell back from the compiled path: {fit['fallback']}.")
    if tw_ok:
        t_total = tw.build_s + tw.first_call_s + tfirst["seconds"]
        rows.append({"free parameters": label, "implementation": "tensorwaves jax", "first fit (s)": f"{t_total:.2f}",
                     "build + first call (s)": f"{tw.build_s:.2f} + {tw.first_call_s:.2f}",
                     "warm fit (s)": f"{twarm['seconds']:.3f}",
                     "warm fit, own process (s)": f"{_own_warm(own['tensorwaves']):.3f}",
                     "valid": (tfirst["valid"] and twarm["valid"] and all(r["warm_valid"] for r in own["tensorwaves"])),
                     "path (first, warm)": "iminuit MIGRAD", "-log L at minimum": f"{twarm['fmin']:.4f}",
                     "calls (warm fit)": _calls(twarm), "value (ms)": f"{per_call['tensorwaves value'].us / 1e3:.2f}",
                     "value + gradient (ms)": f"{per_call['tensorwaves value + gradient'].us / 1e3:.2f}"})
        target = TARGETS[scenario]
        dnll, derr, worst = _check(zwarm, twarm)
        own_ratio = _own_warm(own["zcache"]) / _own_warm(own["tensorwaves"])
        notes.append(f"{label}: zcache / tensorwaves, first fit {verdict(z_total / t_total, target['first'])}, "
                     f"warm fit, each library in a process of its own, {verdict(own_ratio, target['warm'])}; in one process "
                     f"with both libraries {zwarm['seconds'] / twarm['seconds']:.3f}. Same minimum: "
                     f"|delta NLL| = {dnll:.1e} (goal {TOL_NLL:g}: {'met' if dnll <= TOL_NLL else '**missed**'}); "
                     f"HESSE errors: largest relative difference {derr:.1e} (`{worst}`; goal {TOL_ERRORS:g}: "
                     f"{'met' if derr <= TOL_ERRORS else '**missed**'}).")
        flat = _flat_directions(twarm)
        if flat:
            notes.append(f"{label}: the Hessian at the minimum has {flat} flat direction(s) (eigenvalues below 1e-6 of "
                         "the largest, central differences of tensorwaves' exact gradient): the couplings are not all "
                         "identified, the errors along them are not defined and the two sides' HESSE errors differ "
                         "by how each handles a singular Hessian.")
    else:
        rows.append({"free parameters": label, "implementation": "tensorwaves jax",
                     "first fit (s)": peers.tensorwaves_status()})
    if width_note:
        notes.append(width_note)
    return rows


def _width_change(sample: Sample, zc: ZcacheFit, label: str, tw_ok: bool) -> str:
    """(c): a fixed width x 1.1, then a refit of the couplings; zcache's set_value + refit vs tensorwaves' rebuild."""
    width = next(s for s in sample.model.parameter_defaults if s.name == SPECS[sample.key].changed_width)
    old = float(sample.model.parameter_defaults[width])
    t0 = time.perf_counter()
    zc.params[width.name].set_value(1.1 * old)
    zfit = zc.fit()
    z_total = time.perf_counter() - t0
    zc.params[width.name].set_value(old)
    text = (f"(c) `{width.name}` (fixed) x 1.1, then a refit with {label}: zcache set_value + refit "
            f"{z_total:.2f} s (path {zfit['path']})")
    if not tw_ok:
        return text + f"; tensorwaves {peers.tensorwaves_status()}."
    t0 = time.perf_counter()
    defaults = {**sample.model.parameter_defaults, width: 1.1 * old}
    tw, tfit = tensorwaves_first_fit(sample, "couplings", defaults)
    t_total = time.perf_counter() - t0
    dnll = abs(zfit["fmin"] - tfit["fmin"])
    return text + (f", tensorwaves rebuild + refit {t_total:.2f} s (of which {tw.build_s + tw.first_call_s:.2f} s "
                   f"rebuild and first calls); ratio {verdict(z_total / t_total, TARGET_REFIT)}; "
                   f"|delta NLL| = {dnll:.1e}.")


def _intensity_check(sample: Sample, tw_ok: bool) -> str:
    if not tw_ok:
        return f"tensorwaves is {peers.tensorwaves_status()}: no comparison."
    from tensorwaves.function.sympy import create_parametrized_function

    full = create_parametrized_function(sample.expression, sample.model.parameter_defaults, backend="numpy")
    ref = np.asarray(full(sample.data)).real
    bridged = from_helicity_model(sample.model, sample.phsp, expression=sample.expression, name=f"{sample.key}_check")
    got = bridged.intensity(bridged.to_data(sample.data, name=f"{sample.key}_check_data")).numpy()
    rel = float(np.max(np.abs(got / ref - 1.0)))
    return (f"Largest relative difference of the intensity, bridged zcache model vs tensorwaves' numpy function "
            f"(`create_parametrized_function`), over all {len(ref)} data events at ampform's defaults: "
            f"**{rel:.1e}** (goal {TOL_INTENSITY:g}: {'met' if rel <= TOL_INTENSITY else '**missed**'}).")


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def _memory(sample: Sample, tw_ok: bool, own: dict[str, list[dict[str, Any]]]) -> tuple[list[dict], str]:
    """Peak RSS of each side's all-free first fit, from its own processes (:func:`_own_processes`; medians of rounds)."""
    rows, peaks, seconds = [], {}, {}
    for side in ("zcache", "tensorwaves"):
        if side == "tensorwaves" and not tw_ok:
            rows.append({"model": SPECS[sample.key].title, "implementation": "tensorwaves jax",
                         "peak RSS (MiB)": peers.tensorwaves_status()})
            continue
        runs = own[side]
        out = {key: (None if any(r.get(key) is None for r in runs) else _median([r[key] for r in runs]))
               for key in ("peak_mib", "baseline_mib", "seconds", "baseline_files_mib", "peak_private_mib",
                           "baseline_private_mib")}
        out["valid"] = all(r["valid"] for r in runs)
        peaks[side], seconds[side] = out["peak_mib"], out["seconds"]
        rows.append({"model": SPECS[sample.key].title, "implementation": side if side == "zcache" else "tensorwaves jax",
                     "peak RSS (MiB)": f"{out['peak_mib']:.0f}", "baseline (MiB)": f"{out['baseline_mib']:.0f}",
                     "peak - baseline (MiB)": f"{out['peak_mib'] - out['baseline_mib']:.0f}",
                     "libraries' pages at baseline (MiB)": _mib(out.get("baseline_files_mib")),
                     "private peak (MiB)": _mib(out.get("peak_private_mib")),
                     "private peak - baseline (MiB)": _mib(None if out.get("peak_private_mib") is None else
                                                            out["peak_private_mib"] - out["baseline_private_mib"]),
                     "first fit in the child (s)": f"{out['seconds']:.2f}", "valid": out["valid"]})
    text = ""
    if len(peaks) == 2:
        text = (f"{SPECS[sample.key].title}: zcache / tensorwaves peak RSS = "
                f"{verdict(peaks['zcache'] / peaks['tensorwaves'], 1.0)}; the first fit in a fresh process "
                f"(zcache's compile cache empty): zcache / tensorwaves = "
                f"{verdict(seconds['zcache'] / seconds['tensorwaves'], 1.0)}.")
    return rows, text


def _import_footprint() -> str:
    """One sentence: the resident set of ``import tensorflow`` and ``import jax`` alone, each in a fresh process."""
    if not sys.platform.startswith("linux"):
        return ""
    tf_mib = rss.import_rss_mib("tensorflow")
    try:
        jax_mib = f"{rss.import_rss_mib('jax'):.0f} MiB"
    except subprocess.CalledProcessError:
        jax_mib = "not installed"
    return (f"The frameworks alone (a fresh process, nothing but the import; `VmRSS`): `import tensorflow` "
            f"{tf_mib:.0f} MiB, `import jax` {jax_mib}. A zcache process starts from TensorFlow's footprint; "
            "where tensorwaves' whole fit peaks below it, the peak RSS goal cannot be met on TensorFlow, and "
            "what zcache controls is the fit's own memory (peak - baseline, and the private peak above it).")


def _model_sections(key: str, cfg: Config, tw_ok: bool) -> tuple[list[tuple[str, str]], list[dict], str]:
    spec = SPECS[key]
    sample = make_sample(key, cfg, tw_ok)
    n_c = 2 * len(sample.couplings[1:])
    n_all = len(sample.free("all")) + len(sample.couplings[1:])
    scenarios = [("couplings", f"(a) couplings ({n_c} real)")]
    if key in cfg.all_free:
        scenarios.append(("all", f"(b) couplings, masses, widths ({n_all} real)"))
    rows: list[dict] = []
    notes: list[str] = []
    own: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for scenario, label in scenarios:
        own[scenario] = _own_processes(sample, scenario, cfg, tw_ok)
        rows += _scenario(sample, scenario, label, cfg, tw_ok, notes, own[scenario])
    text = markdown_table(rows)
    if key not in cfg.all_free:
        text += "\n\n(--quick: the fit with masses and widths free is left out for this model.)"
    text += ("\n\nFits are MIGRAD + HESSE. First fit (one fit): a fresh model object's build, first value + gradient "
             "call (tracing; jax: compiling) and fit; warm fit: of the same object from the same start, the median of "
             f"{cfg.warm_repeats} fits, the two sides' interleaved; warm fit, own process: the median of "
             f"{cfg.own_rounds} x {cfg.warm_repeats} warm fits in {cfg.own_rounds} child process(es) per side that "
             "import only that side's library (`_rss_fit.py`), the sides' order alternating by round (the goal's "
             "ratio). Per-evaluation times: medians of interleaved calls at "
             "alternating points (every free parameter moves). `doit()` of the model (shared, not in the rows): "
             f"{sample.doit_s:.2f} s."
             "\n\n" + "\n\n".join(notes))
    sections = [(f"{spec.title}: intensity, bridged zcache model vs tensorwaves (numpy)", _intensity_check(sample, tw_ok)),
                (f"{spec.title}: fits, same start and data", text)]
    mem_rows, mem_text = _memory(sample, tw_ok, own["all"]) if "all" in own else ([], "")
    return sections, mem_rows, mem_text


def run(quick: bool = False) -> list[tuple[str, str]]:
    """Run the tables of every model; returns ``(title, markdown)`` pairs."""
    cfg = QUICK if quick else FULL
    status = peers.tensorwaves_status()
    tw_ok = status == "ok"
    if tw_ok:
        import jax

        jax.config.update("jax_enable_x64", True)
    sections, mem_rows, mem_texts = [], [], []
    for key in cfg.models:
        model_sections, rows, text = _model_sections(key, cfg, tw_ok)
        sections += model_sections
        mem_rows += rows
        mem_texts.append(text)
    memory = (markdown_table(mem_rows) if mem_rows else "_(not run)_") + (
        "\n\nEach side's all-free first fit (build + first call + fit) in its own child process (`_rss_fit.py`), "
        f"the median of {cfg.own_rounds} such processes (the children of (b) above): "
        "peak RSS = its `VmHWM` at the end of the first fit (not `ru_maxrss`, which a child inherits from its "
        "parent across fork + exec); baseline = the resident set after the imports, the model, `doit()` and "
        "loading the data (before the build); zcache's child starts with an empty compile cache (a new "
        "`ZCACHE_CACHE_DIR`), so its first fit there is a fresh process's on a machine that never ran it. "
        "Goal: zcache's peak <= tensorwaves'. Where the difference lies: "
        "the libraries' file-backed pages (`RssFile` at the baseline: shared, mapped from TensorFlow's or jax's "
        "libraries) and the private memory (`RssAnon`, its peak sampled every 5 ms during the first fit).\n\n"
        + "\n\n".join(t for t in [*mem_texts, _import_footprint() if mem_rows else ""] if t))
    sections.append(("Memory: peak RSS of the all-free fit", memory))
    counts = (f"{cfg.n_data} data events, {cfg.n_phsp} phase-space events per model; per-evaluation times are "
              f"medians of {cfg.repeats} interleaved calls.")
    sections.insert(0, ("Symbolic models through the bridge vs tensorwaves: configuration",
                        f"{counts} tensorwaves: {status}; {peers.versions()}."))
    return sections


def profile(quick: bool = False, top: int = 25) -> None:
    """cProfile around zcache's first fit (build + first call + fit) of the all-free D0 model; print the top."""
    import cProfile
    import pstats

    cfg = QUICK if quick else FULL
    tw_ok = peers.tensorwaves_status() == "ok"
    sample = make_sample("dzero", cfg, tw_ok)
    profiler = cProfile.Profile()
    profiler.enable()
    _, fit = zcache_first_fit(sample, "all")
    profiler.disable()
    print(f"zcache first fit of the all-free D0 model ({cfg.n_data} + {cfg.n_phsp} events): path {fit['path']}, "
          f"fallback {fit['fallback']}, valid {fit['valid']}")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)


def main() -> None:
    """Print the tables (``--quick``: small samples; ``--profile``: only the profile of one fit)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile zcache's first fit of the all-free D0 model (top 25, cumulative) and exit")
    args = parser.parse_args()
    if args.profile:
        profile(args.quick)
        return
    for title, body in run(args.quick):
        print(f"### {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
