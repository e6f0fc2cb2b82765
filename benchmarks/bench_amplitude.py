r"""Amplitude-analysis benchmarks: the loss of a Dalitz-plot fit, cached by zcache, by hand, or not at all.

The model is :math:`D^+ \to K^- \pi^+ \pi^+` (``zcache.amplitude``):
a coherent sum of K components, a fixed non-resonant term plus K - 1 :math:`K\pi`
resonances (relativistic Breit-Wigner, Blatt-Weisskopf barriers, Legendre angular term),
each Bose-symmetrized over the channels ``("12", "13")``. Line shapes are fixed; the
complex couplings (magnitude and phase) float. The loss is
``UnbinnedNLL(AmplitudePdf(CoherentSum(...), mc), data)`` with an integration sample
``mc`` of phase-space events as large as the data. Compared side by side:

===  ======================================================================================
1    loss + gradient per evaluation, N = 1e5 and 1e6, K = 3, 5, 8: zcache after
     ``precompute`` (``value_gradient_at(x)``, Minuit's call), the same model with
     ``CoherentSum(..., cache=False)`` (uncached), a hand-written ``tf.function`` with the
     per-event amplitude matrix and the K x K integral matrix precomputed by hand, and numpy
     with the analytic gradient (``_hand_amplitude.py``)
2    where the time of one evaluation goes (K = 5): the floor (one matrix-vector product),
     value only, value + gradient, with and without setting the parameters
3    cache-hit overhead on an amplitude model: (i) a traced function reading the cached
     amplitude matrix vs the same function reading a plain ``tf.Variable``; (ii) a model whose
     every cache changes on every call (a floating resonance mass), cached vs uncached
4    scaling with N (K = 5): time per evaluation and memory (bytes held by the caches,
     process RSS), plotted to ``benchmarks/amplitude_scaling.png`` (full mode only, and only
     where matplotlib is installed)
===  ======================================================================================

Each K's models are built and traced once and moved between N with ``set_data``. Every
variant is checked against zcache's loss value and gradient at the same point before it is
timed (relative agreement 1e-10 for values, 1e-9 for gradients); a
disagreement raises. Run ``python benchmarks/bench_amplitude.py [--quick]`` to print the
tables, or ``run_all.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import ctypes.util  # noqa: E402
import gc  # noqa: E402
import itertools  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import zcache  # noqa: E402
from zcache.amplitude import (  # noqa: E402
    AmplitudePdf,
    CoherentSum,
    ComplexParameter,
    DalitzKinematics,  # noqa: E402
    NonResonant,
    Resonance,
)
from zcache.loss import UnbinnedNLL  # noqa: E402

try:  # benchmarks/ on sys.path: run as a script or from run_all.py
    from _hand_amplitude import HandNumpy, HandTF
    from _harness import Timing, markdown_table, paired_ratio, time_interleaved, verdict
except ModuleNotFoundError:  # imported as benchmarks.bench_amplitude
    from ._hand_amplitude import HandNumpy, HandTF
    from ._harness import Timing, markdown_table, paired_ratio, time_interleaved, verdict

__all__ = [
    "Config",
    "FULL",
    "QUICK",
    "RESONANCES",
    "AmplitudeFit",
    "bench_grid",
    "bench_always_changing",
    "run",
]

Rows = list[dict[str, Any]]
HERE = Path(__file__).resolve().parent
PLOT = HERE / "amplitude_scaling.png"

#: Goals: uncached / zcache >= SPEEDUP_GOAL, zcache / hand-written <= HAND_TARGET,
#: cache hit / Variable and always changing cached / uncached <= HIT_TARGET.
SPEEDUP_GOAL = 10.0
HAND_TARGET = 1.05  # issue 12: <= 1.05x the hand-written TF version with the same kernels
HIT_TARGET = 1.05

#: Tolerances of the agreement check (relative to the value, and to the largest gradient entry).
VALUE_RTOL = 1e-10
GRAD_RTOL = 1e-9

#: D+ -> K- pi+ pi+ (GeV).
M_D, M_K, M_PI = 1.86966, 0.493677, 0.13957039

#: The non-resonant term (coupling 1, fixed) comes first; then, in this order, the K - 1
#: resonances of a K-component model: (name, mass, width, spin, |c|, arg c). The couplings are
#: the start point of every evaluation (and the truth the data were generated from, K = 5).
#: The last entry is not a known state: a spin-0 at 1.2 GeV, width 0.2 GeV, to reach K = 8.
RESONANCES: tuple[tuple[str, float, float, int, float, float], ...] = (
    ("K*(892)", 0.89555, 0.0473, 1, 0.12, 0.4),
    ("K0*(1430)", 1.425, 0.270, 0, 0.6, 1.1),
    ("K2*(1430)", 1.4324, 0.109, 2, 0.25, -1.2),
    ("K*(1410)", 1.414, 0.232, 1, 0.2, 2.0),
    ("K*(1680)", 1.718, 0.322, 1, 0.3, -0.6),
    ("K0*(700)", 0.845, 0.468, 0, 0.5, -2.2),
    ("S0(1200)", 1.2, 0.2, 0, 0.3, 0.8),
)


@dataclass(frozen=True)
class Config:
    """Sizes and repeat counts of one run.

    Attributes
    ----------
    grid_sizes, grid_ks : tuple of int
        Table 1: every (N, K).
    scaling_sizes : tuple of int
        Table 4: N at K = ``scaling_k`` (points shared with table 1 are measured once).
    scaling_k : int
        Components in table 4 (and in tables 2 and 3).
    repeats : dict of int to int
        Interleaved samples per variant, by N (fewer for large N).
    warmup : int
        Untimed calls per variant first.
    min_sample_s : float
        A sample averages as many calls as make the fastest variant last this long.
    anatomy_sizes, hit_sizes : tuple of int
        N of tables 2 and 3 (i) (they reuse the models of the grid point (N, ``scaling_k``),
        which must exist).
    always : tuple of (int, tuple of int)
        Table 3 (ii): (K, sizes); K = 1 is the K*(892) alone, else K components with the
        K*(892) mass floating.
    data_from_model : bool
        Generate the data from the K = 5 model (full mode) or take a second phase-space
        sample (quick mode: no sampler to trace).
    plot : bool
        Draw ``benchmarks/amplitude_scaling.png``.
    """

    grid_sizes: tuple[int, ...]
    grid_ks: tuple[int, ...]
    scaling_sizes: tuple[int, ...]
    scaling_k: int
    repeats: dict[int, int]
    warmup: int
    min_sample_s: float
    anatomy_sizes: tuple[int, ...]
    hit_sizes: tuple[int, ...]
    always: tuple[tuple[int, tuple[int, ...]], ...]
    data_from_model: bool
    plot: bool

    def timing(self, n: int) -> dict[str, Any]:
        """Keyword arguments of ``time_interleaved`` at ``n`` events (one call per sample from 3e5)."""
        big = n >= 300_000
        return {"repeats": self.repeats_for(n), "warmup": min(self.warmup, 2) if big else self.warmup,
                "min_sample_s": self.min_sample_s, "inner": 1 if big else None}

    def repeats_for(self, n: int) -> int:
        """Samples per variant at ``n`` events (the entry for the smallest listed N >= n)."""
        for size in sorted(self.repeats):
            if n <= size:
                return self.repeats[size]
        return self.repeats[max(self.repeats)]


FULL = Config(
    grid_sizes=(100_000, 1_000_000), grid_ks=(3, 5, 8),
    scaling_sizes=(10_000, 30_000, 100_000, 300_000, 1_000_000), scaling_k=5,
    repeats={100_000: 31, 300_000: 15, 1_000_000: 11}, warmup=3, min_sample_s=20e-3,
    anatomy_sizes=(100_000, 1_000_000), hit_sizes=(100_000, 1_000_000),
    always=((1, (100_000, 1_000_000)), (5, (100_000,))), data_from_model=True, plot=True,
)
QUICK = Config(
    grid_sizes=(2_000,), grid_ks=(3,), scaling_sizes=(2_000,), scaling_k=3,
    repeats={2_000: 3}, warmup=1, min_sample_s=2e-3,
    anatomy_sizes=(2_000,), hit_sizes=(2_000,), always=((1, (2_000,)),),
    data_from_model=False, plot=False,
)

_TAGS = itertools.count(1)


# -- the physics ------------------------------------------------------------------------------
_KIN: DalitzKinematics | None = None


def kinematics() -> DalitzKinematics:
    """The :math:`D^+ \\to K^- \\pi^+ \\pi^+` kinematics (one object: amplitudes must share it)."""
    global _KIN
    if _KIN is None:
        _KIN = DalitzKinematics(M_D, M_K, M_PI, M_PI, names=("K-", "pi+", "pi+"))
    return _KIN


def _components(k: int, tag: str, floating_mass: Any = None) -> list[tuple[ComplexParameter, Any]]:
    """NR (fixed coupling 1) and the first ``k - 1`` resonances with floating couplings.

    ``floating_mass``: a Parameter used as the K*(892)'s mass instead of the fixed number.
    ``k = 1`` with a ``floating_mass`` is the K*(892) alone (fixed coupling 1, no NR).
    """
    kin = kinematics()
    if k == 1 and floating_mass is not None:
        name, _, width, spin, _, _ = RESONANCES[0]
        return [(ComplexParameter(f"c_{name}_{tag}", 1.0, floating=False),
                 Resonance(kin, ("12", "13"), floating_mass, width, spin, name=f"{name}_{tag}"))]
    comps = [(ComplexParameter(f"c_NR_{tag}", 1.0, floating=False), NonResonant(kin, name=f"NR_{tag}"))]
    for name, mass, width, spin, mag, phase in RESONANCES[: k - 1]:
        m = floating_mass if (floating_mass is not None and name == "K*(892)") else mass
        comps.append((
            ComplexParameter(f"c_{name}_{tag}", mag * np.exp(1j * phase)),
            Resonance(kin, ("12", "13"), m, width, spin, name=f"{name}_{tag}"),
        ))
    return comps


class AmplitudeFit:
    """One K-component model, its loss on ``data`` and its start point.

    Parameters
    ----------
    k : int
        Components (NR + ``k - 1`` resonances).
    data, mc : zcache.Data
        Events and the phase-space (integration) sample.
    cache : bool
        ``CoherentSum(..., cache=cache)``.
    floating_mass : zcache.Parameter, optional
        Float the K*(892) mass (table 3 ii).
    precompute : bool
        Apply :func:`zcache.precompute` to the loss (as zcache's Minuit does).
    """

    def __init__(self, k: int, data: zcache.Data, mc: zcache.Data, cache: bool,
                 floating_mass: zcache.Parameter | None = None, precompute: bool = True) -> None:
        tag = f"{'c' if cache else 'u'}{k}_{next(_TAGS)}"
        self.k = k
        self.amp = CoherentSum(_components(k, tag, floating_mass), cache=cache)
        self.pdf = AmplitudePdf(self.amp, mc, name=f"AmplitudePdf_{tag}")
        self.loss = UnbinnedNLL(self.pdf, data)
        self.params = list(self.loss.params)
        self.x0 = np.array([p._current() for p in self.params])
        self.report = zcache.precompute(self.loss) if precompute else None

    def value_gradient_at(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = self.loss.value_gradient_at(x)
        return float(v), g.numpy()


class _Stepper:
    """``x0`` with entry ``index`` moved by a tiny step on every call (a new point each call)."""

    def __init__(self, x0: np.ndarray, index: int, step: float = 1e-7) -> None:
        self.x0, self.index, self.step, self.count = np.array(x0, float), index, step, 0

    def __call__(self) -> np.ndarray:
        self.count += 1
        x = self.x0.copy()
        x[self.index] += self.step * (self.count % 1000)
        return x


# -- samples ------------------------------------------------------------------------------------
_SAMPLES: dict[str, np.ndarray] = {}
_DATA: dict[str, zcache.Data] = {}
try:
    _LIBC: Any = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
except (OSError, AttributeError):  # not glibc
    _LIBC = None


def _draw(n_max: int, from_model: bool) -> None:
    """Draw ``n_max`` data events and ``n_max`` phase-space events, once.

    ``from_model``: the data come from the K = 5 model (accept-reject), else they are a
    second phase-space sample.
    """
    if "data" in _SAMPLES and len(_SAMPLES["data"]) >= n_max:
        return
    zcache.models.set_seed(20240601)
    kin = kinematics()
    _SAMPLES["mc"] = kin.sample(n_max, name="truth_mc").numpy()
    if from_model:
        truth_mc = kin.sample(min(max(n_max, 20_000), 200_000), name="truth_norm")
        truth = AmplitudePdf(CoherentSum(_components(5, "truth")), truth_mc, name="truth")
        _SAMPLES["data"] = truth.sample(n_max).numpy()
    else:
        _SAMPLES["data"] = kin.sample(n_max, name="flat_data").numpy()


def samples(n: int) -> tuple[zcache.Data, zcache.Data]:
    """The data and the phase-space sample, set to their first ``n`` events.

    One pair of :class:`zcache.Data` serves every model (one K at a time): moving to another
    N is a ``set_data``, which invalidates the caches that depend on the events and retraces
    nothing, as in a toy study.
    """
    for kind in ("data", "mc"):
        arr = _SAMPLES[kind][:n]
        if kind not in _DATA:
            _DATA[kind] = zcache.Data(arr, name=kind, obs=("s12", "s13"))
        elif _DATA[kind].nevents != n:
            _DATA[kind].set_data(arr)
    return _DATA["data"], _DATA["mc"]


def _trim() -> None:
    """Collect garbage and hand freed heap memory back to the OS (glibc), so that RSS means something."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _hand_matrices(fit: AmplitudeFit, data: zcache.Data, mc: zcache.Data) -> tuple[np.ndarray, np.ndarray]:
    """The data's (N, K) amplitude matrix and the (K, K) integral matrix, computed once.

    Through zcache's raw per-event functions on plain tensors (``amplitude_matrix(tensor)``
    bypasses every cache); the integral matrix by numpy.
    """
    a_data = fit.amp.amplitude_matrix(tf.constant(data.numpy())).numpy()
    a_mc = fit.amp.amplitude_matrix(tf.constant(mc.numpy())).numpy()
    integrals = (a_mc.T @ np.conj(a_mc)) / a_mc.shape[0]
    return a_data, integrals


def _fixed_couplings(fit: AmplitudeFit) -> np.ndarray:
    return np.array([complex(c) for c in fit.amp.couplings if not any(p.floating for p in c.params)])


def _check_layout(fit: AmplitudeFit) -> None:
    """The hand-written losses take (r_1, phi_1, r_2, phi_2, ...): the loss's parameter order."""
    expected = [p.name for c in fit.amp.couplings if c.params[0].floating for p in c.params]
    got = [p.name for p in fit.params]
    if got != expected or len(_fixed_couplings(fit)) != 1 or fit.amp.couplings[0].params[0].floating:
        raise AssertionError(f"unexpected parameter layout {got} (expected {expected}, NR coupling fixed first)")


def _deviation(ref: tuple[float, np.ndarray], other: tuple[float, np.ndarray]) -> tuple[float, float]:
    """Relative deviation of the value, and of the gradient (relative to its largest entry)."""
    (v0, g0), (v1, g1) = ref, other
    dv = abs(v1 - v0) / max(abs(v0), 1e-300)
    dg = float(np.max(np.abs(np.asarray(g1) - g0)) / max(float(np.max(np.abs(g0))), 1e-300)) if len(g0) else 0.0
    return dv, dg


def _agree(label: str, ref: Callable[[np.ndarray], Any], others: dict[str, Callable[[np.ndarray], Any]],
           points: list[np.ndarray]) -> tuple[float, float]:
    """Largest deviations of ``others`` from ``ref`` over ``points``; raise if above tolerance."""
    worst_v = worst_g = 0.0
    for x in points:
        r = ref(x)
        r = (float(r[0]), np.asarray(r[1], float))
        for name, f in others.items():
            o = f(x)
            dv, dg = _deviation(r, (float(o[0]), np.asarray(o[1], float)))
            if dv > VALUE_RTOL or dg > GRAD_RTOL:
                raise AssertionError(
                    f"{label}: {name} disagrees with zcache at x = {x.tolist()}: value {o[0]!r} vs {r[0]!r} "
                    f"(rel. {dv:.2e}), gradient {np.asarray(o[1]).tolist()} vs {r[1].tolist()} (rel. {dg:.2e})"
                )
            worst_v, worst_g = max(worst_v, dv), max(worst_g, dg)
    return worst_v, worst_g


def _tf_pair(f: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    def call(x: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = f(x)
        return float(v), np.asarray(g)

    return call


def _rss_mb() -> float:
    """Current resident set size of this process (MB), from /proc where available."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def _ratio_cells(num: Timing, den: Timing, label: str) -> dict[str, Any]:
    ratio, q25, q75 = paired_ratio(num, den)
    return {label: ratio, f"{label}, IQR": f"{q25:.3f}–{q75:.3f}", f"_{label}": (q25, q75)}


# -- tables 1 and 4: the (N, K) grid -------------------------------------------------------------
_VARIANTS = ("zcache", "uncached", "hand TF", "hand numpy", "zcache + XLA", "hand TF + XLA")


def _in_jit_mode(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with zcache's loss functions compiled by XLA (``set_jit_mode('auto')``)."""
    def jitted() -> Any:
        with zcache.set_jit_mode("auto"):
            return call()
    return jitted


class _KModels:
    """The zcache and the uncached model of one K, built and traced once, moved between N by ``set_data``.

    Attributes
    ----------
    zc, un : AmplitudeFit
        zcache after precompute, and ``cache=False``.
    setup_s : dict of str to float
        Seconds for building + precompute (eager pass that fills the caches) and for the first
        traced call (trace + graph optimization + one evaluation at the first N) of each.
    """

    def __init__(self, k: int, n0: int) -> None:
        data, mc = samples(n0)
        t0 = time.perf_counter()
        self.zc = AmplitudeFit(k, data, mc, cache=True)
        t1 = time.perf_counter()
        self.zc.value_gradient_at(self.zc.x0)
        t2 = time.perf_counter()
        self.un = AmplitudeFit(k, data, mc, cache=False)
        t3 = time.perf_counter()
        self.un.value_gradient_at(self.zc.x0)
        t4 = time.perf_counter()
        _check_layout(self.zc)
        self.k, self.n0 = k, n0
        self.setup_s = {"precompute": t1 - t0, "first call zcache": t2 - t1, "first call uncached": t4 - t3}


def _kept_misses(report: Any) -> int:
    return sum(c.stats["misses"] for c in report.cached)


def _measure_point(models: _KModels, n: int, cfg: Config) -> dict[str, Any]:
    """Move the models to N events, build the hand-written variants, check all four, time them.

    At (N, ``scaling_k``) also runs tables 2 and 3 (i) on the same models (rows under the
    keys ``_anatomy`` and ``_hit``).
    """
    zc, un, k = models.zc, models.un, models.k
    x0 = zc.x0
    data, mc = samples(n)
    refills = []
    for _ in range(1 if n > models.n0 else 2):
        for d in (data, mc):  # new events: the next call refills the kept caches
            d.set_data(d.numpy())
        t0 = time.perf_counter()
        zc.value_gradient_at(x0)
        refills.append(time.perf_counter() - t0)
    if n == models.n0:  # the first refill ever runs the caches' miss branches for the first time
        models.setup_s["first refill"] = refills[0]
    refill = refills[-1]
    a_data, integrals = _hand_matrices(zc, data, mc)
    area = kinematics().area()
    hand = HandTF(a_data, integrals, area, _fixed_couplings(zc))
    t0 = time.perf_counter()
    hand.value_gradient(x0)
    hand_first = time.perf_counter() - t0
    hnp = HandNumpy(a_data, integrals, area, _fixed_couplings(zc))
    hand_xla = HandTF(a_data, integrals, area, _fixed_couplings(zc), jit=True)
    del a_data
    zc_xla = _in_jit_mode(lambda: zc.loss.value_gradient_at(x0))
    t0 = time.perf_counter()
    zc_xla()  # compiles value + gradient for this N (the caches already hold these shapes)
    xla_first = time.perf_counter() - t0
    x1 = x0 * (1.0 + 0.05 * np.cos(np.arange(len(x0))))
    dv, dg = _agree(f"N={n}, K={k}", zc.value_gradient_at, {
        "uncached": un.value_gradient_at,
        "hand TF": _tf_pair(hand.value_gradient),
        "hand numpy": hnp.value_gradient,
        "zcache + XLA": lambda x: _in_jit_mode(lambda: zc.value_gradient_at(x))(),
        "hand TF + XLA": _tf_pair(hand_xla.value_gradient),
    }, [x0, x1])
    zc.value_gradient_at(x0)
    _trim()
    rss = _rss_mb()
    variants = {
        "zcache": lambda: zc.loss.value_gradient_at(x0),
        "uncached": lambda un=un: un.loss.value_gradient_at(x0),
        "hand TF": lambda: hand.value_gradient(x0),
        "hand numpy": lambda hnp=hnp: hnp.value_gradient(x0),
        "zcache + XLA": zc_xla,
        "hand TF + XLA": lambda h=hand_xla: h.value_gradient(x0),
    }
    misses0 = _kept_misses(zc.report)
    t = time_interleaved(variants, **cfg.timing(n))
    misses = _kept_misses(zc.report) - misses0
    row: dict[str, Any] = {
        "N": n, "K": k, "floating": len(x0),
        **{f"{name} [ms]": t[name].median * 1e3 for name in _VARIANTS},
    }
    row.update(_ratio_cells(t["uncached"], t["zcache"], "uncached / zcache"))
    row.update(_ratio_cells(t["zcache"], t["hand TF"], "zcache / hand TF"))
    row["zcache / hand numpy"] = t["zcache"].median / t["hand numpy"].median
    row.update(_ratio_cells(t["uncached"], t["zcache + XLA"], "uncached / zcache + XLA"))
    row.update(_ratio_cells(t["zcache + XLA"], t["hand TF + XLA"], "zcache + XLA / hand TF + XLA"))
    row["zcache + XLA first call [ms]"] = xla_first * 1e3
    row["zcache first call after set_data [ms]"] = refill * 1e3
    row["repeats × calls"] = f"{len(t['zcache'].samples)} × {t['zcache'].inner}"
    row.update({
        "_dv": dv, "_dg": dg, "_misses": misses, "_hand_first": hand_first,
        "_cache_bytes": zc.report.total_bytes, "_hand_bytes": hand.nbytes,
        "_cache_sizes": [(c.name, c.nbytes) for c in zc.report.cached], "_rss": rss,
    })
    del un, hnp, hand_xla, variants
    if k == cfg.scaling_k and n in cfg.anatomy_sizes:
        row["_anatomy"] = _anatomy(zc, hand, n, cfg)
    if k == cfg.scaling_k and n in cfg.hit_sizes:
        row["_hit"] = _hit(zc, n, cfg)
    return row


def bench_grid(cfg: Config) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[int, dict[str, Any]]]:
    """Every point of tables 1 and 4 (and tables 2 and 3 (i)), measured once each.

    One K at a time: its models are built and traced at the smallest N, then moved to each
    larger N with ``set_data``.

    Returns
    -------
    points : dict
        (N, K) -> row.
    per_k : dict
        K -> setup seconds and the trace counts of the zcache loss's functions.
    """
    points = sorted({(n, k) for n in cfg.grid_sizes for k in cfg.grid_ks}
                    | {(n, cfg.scaling_k) for n in cfg.scaling_sizes})
    missing = [n for n in (*cfg.anatomy_sizes, *cfg.hit_sizes) if (n, cfg.scaling_k) not in points]
    if missing:
        raise ValueError(f"tables 2 and 3 (i) need the grid points N = {missing}, K = {cfg.scaling_k}")
    _draw(max(n for n, _ in points), cfg.data_from_model)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    per_k: dict[int, dict[str, Any]] = {}
    for k in sorted({k for _, k in points}):
        sizes = sorted(n for n, kk in points if kk == k)
        models = _KModels(k, sizes[0])
        for n in sizes:
            out[(n, k)] = _measure_point(models, n, cfg)
        traces = {f.__name__: f.trace_count for f in models.zc.loss.functions() if f.trace_count}
        traces_un = {f.__name__: f.trace_count for f in models.un.loss.functions() if f.trace_count}
        per_k[k] = {**models.setup_s, "n0": sizes[0], "traces": traces, "traces_un": traces_un}
        del models
        _trim()
    return out, per_k


_GRID_COLUMNS = ["N", "K", "floating", "zcache [ms]", "uncached [ms]", "hand TF [ms]", "hand numpy [ms]",
                 "zcache + XLA [ms]", "hand TF + XLA [ms]",
                 "uncached / zcache", "uncached / zcache, IQR", "zcache / hand TF", "zcache / hand TF, IQR",
                 "uncached / zcache + XLA", "zcache + XLA / hand TF + XLA", "zcache + XLA / hand TF + XLA, IQR",
                 "zcache + XLA first call [ms]",
                 "zcache / hand numpy", "zcache first call after set_data [ms]", "repeats × calls"]


def _say_grid(rows: Rows) -> str:
    parts = []
    def goal(speed: float) -> str:
        return f"speedup {speed:.1f}×, goal ≥ {SPEEDUP_GOAL:.0f}: {'met' if speed >= SPEEDUP_GOAL else '**missed**'}"

    for r in rows:
        parts.append(
            f"N = {r['N']:,}, K = {r['K']}: zcache {r['zcache [ms]']:.3g} ms, uncached {r['uncached [ms]']:.3g} ms "
            f"({goal(r['uncached / zcache'])}), hand-written TF {r['hand TF [ms]']:.3g} ms "
            f"(zcache / hand {verdict(r['zcache / hand TF'], HAND_TARGET, r['_zcache / hand TF'])}), numpy "
            f"{r['hand numpy [ms]']:.3g} ms; compiled by XLA (`set_jit_mode('auto')`) {r['zcache + XLA [ms]']:.3g} ms "
            f"({goal(r['uncached / zcache + XLA'])}), the hand-written TF compiled by XLA "
            f"{r['hand TF + XLA [ms]']:.3g} ms (zcache / hand "
            f"{verdict(r['zcache + XLA / hand TF + XLA'], HAND_TARGET, r['_zcache + XLA / hand TF + XLA'])})."
        )
    met_xla = sum(r["uncached / zcache + XLA"] >= SPEEDUP_GOAL for r in rows)
    met_xla_hand = sum(r["zcache + XLA / hand TF + XLA"] <= HAND_TARGET for r in rows)
    parts.append(f"Compiled by XLA, the speedup goal is met at {met_xla} of {len(rows)} points and the "
                 f"hand-written goal (≤ {HAND_TARGET:g}× the same kernels by hand) at {met_xla_hand}.")
    met_speed = sum(r["uncached / zcache"] >= SPEEDUP_GOAL for r in rows)
    met_hand = sum(r["zcache / hand TF"] <= HAND_TARGET for r in rows)
    gap = [r["zcache [ms]"] - r["hand TF [ms]"] for r in rows]
    parts.append(
        f"Over the {len(rows)} points the speedup goal is met at {met_speed} and the hand-written goal at "
        f"{met_hand}; zcache's time exceeds the hand-written TF time by {min(gap):+.2f} to {max(gap):+.2f} ms "
        "per evaluation (table 2 shows where that difference sits)."
    )
    return " ".join(parts)


def _say_checks(points: dict[tuple[int, int], dict[str, Any]], per_k: dict[int, dict[str, Any]]) -> str:
    dv = max(r["_dv"] for r in points.values())
    dg = max(r["_dg"] for r in points.values())
    retraced = sorted({f"K={k}: {name} ({count} traces)" for k, info in per_k.items()
                       for key in ("traces", "traces_un") for name, count in info[key].items()
                       if count > (2 if key == "traces" else 1)})  # zcache: once uncompiled, once for XLA
    missed = sorted(f"N={r['N']}, K={r['K']}: {r['_misses']}" for r in points.values() if r["_misses"])
    return (
        f"At every (N, K), before timing, the uncached loss, the hand-written TF and the numpy versions were "
        f"evaluated at the start point and at a second point (every parameter moved by up to 5 %) and compared "
        f"with zcache's `value_gradient_at`: largest relative deviation {dv:.1e} in the value (tolerance "
        f"{VALUE_RTOL:g}) and {dg:.1e} in the gradient (relative to its largest entry; tolerance {GRAD_RTOL:g}). "
        + ("The zcache and uncached loss functions were traced once each per K (zcache's once more for XLA), "
           "across every N (`set_data` retraces nothing). " if not retraced else "**Retraced:** " + "; ".join(retraced) + ". ")
        + ("No cache kept by precompute missed during the timed calls."
           if not missed else "**Kept caches missed during the timed calls:** " + ", ".join(missed) + ".")
    )


# -- table 2: anatomy -----------------------------------------------------------------------------
def _anatomy(zc: AmplitudeFit, hand: HandTF, n: int, cfg: Config) -> Rows:
    """Where one evaluation's time goes, all parts interleaved (the models of one grid point).

    Returns
    -------
    list of dict
        One row per part: median ms and the ratio to the hand-written value + gradient.
    """
    x0 = zc.x0
    a_var, c_fixed = hand.a, hand.fixed

    @tf.function(autograph=False)
    def matvec_only(x: tf.Tensor) -> tf.Tensor:
        r, phi = x[0::2], x[1::2]
        c = tf.concat([c_fixed, tf.complex(r * tf.cos(phi), r * tf.sin(phi))], axis=0)
        return tf.math.real(tf.reduce_sum(tf.linalg.matvec(a_var, c)))

    hand_value = tf.function(hand._nll, autograph=False)
    parts: dict[str, Callable[[], Any]] = {
        "floor: u = A c, summed (tf.function)": lambda: matvec_only(tf.constant(x0)),
        "hand TF, value": lambda: hand_value(tf.constant(x0)),
        "hand TF, value + gradient": lambda: hand.value_gradient(x0),
        "zcache value() (parameters already set)": zc.loss.value,
        "zcache value_at(x)": lambda: zc.loss.value_at(x0),
        "zcache value_gradient() (parameters already set)": zc.loss.value_gradient,
        "zcache value_gradient_at(x) (Minuit's call)": lambda: zc.loss.value_gradient_at(x0),
    }
    if abs(float(zc.loss.value_at(x0)) - float(hand_value(tf.constant(x0)))) > VALUE_RTOL * abs(float(zc.loss.value())):
        raise AssertionError(f"anatomy at N={n}: zcache and hand-written values differ")
    t = time_interleaved(parts, **cfg.timing(n))
    ref = t["hand TF, value + gradient"]
    return [{"N": n, "K": zc.k, "evaluation": name, "median [ms]": timing.median * 1e3,
             "IQR [ms]": timing.iqr_us / 1e3, "/ hand TF value + gradient": timing.median / ref.median}
            for name, timing in t.items()]


def _say_anatomy(rows: Rows) -> str:
    parts = []
    for n in sorted({r["N"] for r in rows}):
        by = {r["evaluation"]: r["median [ms]"] for r in rows if r["N"] == n}
        floor = by["floor: u = A c, summed (tf.function)"]
        hv, hvg = by["hand TF, value"], by["hand TF, value + gradient"]
        zv, zva = by["zcache value() (parameters already set)"], by["zcache value_at(x)"]
        zg, zga = by["zcache value_gradient() (parameters already set)"], by["zcache value_gradient_at(x) (Minuit's call)"]
        parts.append(
            f"At N = {n:,} the matrix-vector product alone takes {floor:.3g} ms; the hand-written value "
            f"{hv:.3g} ms and value + gradient {hvg:.3g} ms (the gradient adds {hvg - hv:+.3g} ms). zcache's value "
            f"takes {zv:.3g} ms ({zv - hv:+.3g} ms vs hand), {zva:.3g} ms when it also sets the parameters "
            f"({zva - zv:+.3g} ms for the set), and value + gradient {zg:.3g} ms without and {zga:.3g} ms with "
            f"the set ({zga - hvg:+.3g} ms vs hand)."
        )
    return " ".join(parts)


# -- table 3 (i): cache hit vs plain Variable --------------------------------------------------------
def _hit(fit: AmplitudeFit, n: int, cfg: Config) -> Rows:
    """A traced function of the cached amplitude matrix on a hit vs of a Variable with the same array.

    The function is the per-event part of the NLL, :math:`-\\sum_i \\log|(A c)_i|^2`, with
    :math:`c` read from the coupling Parameters; with and without the gradient w.r.t. them.
    ``fit`` is a grid point's zcache model after precompute (its ``A_k[data]`` is kept).

    Returns
    -------
    list of dict
        One row per function (value, value + gradient): median µs, ratio hit / Variable.
    """
    amp, data = fit.amp, fit.loss.data
    cache = next(c for c in fit.report.cached if c.name == f"A_k[{data.name}]")
    plain = tf.Variable(amp.amplitude_matrix(data).numpy(), trainable=False, name=f"plain_A_{n}")
    params = fit.params

    def per_event(a: tf.Tensor) -> tf.Tensor:
        u = tf.linalg.matvec(a, amp.coupling_vector())
        return -tf.reduce_sum(tf.math.log(tf.math.real(u) ** 2 + tf.math.imag(u) ** 2))

    funcs = {
        "hit": zcache.function(lambda: per_event(amp.amplitude_matrix(data)), wraps="loss"),
        "Variable": zcache.function(lambda: per_event(plain), wraps="loss"),
        "hit, + gradient": zcache.function(
            lambda: zcache.value_and_gradient(lambda: per_event(amp.amplitude_matrix(data)), params), wraps="loss"),
        "Variable, + gradient": zcache.function(
            lambda: zcache.value_and_gradient(lambda: per_event(plain), params), wraps="loss"),
    }
    v_hit, g_hit = funcs["hit, + gradient"]()
    v_var, g_var = funcs["Variable, + gradient"]()
    dv, dg = _deviation((float(v_var), g_var.numpy()), (float(v_hit), g_hit.numpy()))
    if dv > VALUE_RTOL or dg > GRAD_RTOL or abs(float(funcs["hit"]()) - float(v_var)) > VALUE_RTOL * abs(float(v_var)):
        raise AssertionError(f"hit vs Variable at N={n}: values/gradients differ ({dv:.1e}, {dg:.1e})")
    misses0 = cache.stats["misses"]
    rows: Rows = []
    for gradient in (False, True):
        suffix = ", + gradient" if gradient else ""
        t = time_interleaved({"hit": funcs["hit" + suffix], "Variable": funcs["Variable" + suffix]},
                             **{**cfg.timing(n), "repeats": 3 * cfg.repeats_for(n)})
        row: dict[str, Any] = {"N": n, "K": fit.k, "function": "value + gradient" if gradient else "value",
                               "hit [µs]": t["hit"].us, "Variable [µs]": t["Variable"].us}
        row.update(_ratio_cells(t["hit"], t["Variable"], "hit / Variable"))
        row["extra per call [µs]"] = t["hit"].us - t["Variable"].us
        row["calls per sample"] = t["hit"].inner
        row["_misses"] = 0
        rows.append(row)
    rows[-1]["_misses"] = cache.stats["misses"] - misses0
    return rows


def _say_hit(rows: Rows) -> str:
    parts = []
    for r in rows:
        parts.append(
            f"N = {r['N']:,}, {r['function']}: {r['hit [µs]']:.0f} µs reading the cache against "
            f"{r['Variable [µs]']:.0f} µs reading the Variable ({r['extra per call [µs]']:+.0f} µs), ratio "
            f"{verdict(r['hit / Variable'], HIT_TARGET, r['_hit / Variable'])}."
        )
    missed = sum(r.get("_misses", 0) for r in rows)
    parts.append("The cache was hit on every timed call (no miss)." if missed == 0
                 else f"**The cache missed {missed} times during timing.**")
    return " ".join(parts)


# -- table 3 (ii): always changing -----------------------------------------------------------------
class _ComputeCounter:
    """Counts the calls of one amplitude's ``_compute`` made while tracing (columns in the graph).

    The wrapper is set on the instance (not the class), so only this benchmark's object
    is affected. A resonance whose caches are all bypassed (always dirty) has no miss
    branch, so every traced call is a column computed on every evaluation.
    """

    def __init__(self, amplitude: Any) -> None:
        self.count = 0
        inner = amplitude._compute

        def counted(x: tf.Tensor) -> tf.Tensor:
            if tf.inside_function():
                self.count += 1
            return inner(x)

        amplitude._compute = counted


def bench_always_changing(cfg: Config) -> Rows:
    """A floating K*(892) mass moved on every call: zcache after precompute vs ``cache=False``.

    Models (``cfg.always``): the K*(892) alone (K = 1; every amplitude cache of the loss
    depends on the mass, so precompute bypasses all of them) and K components with the
    couplings and the K*(892) mass floating (the other components' columns stay cached).

    Returns
    -------
    list of dict
        One row per (N, model): median ms per call (a new point each call), ratio cached / uncached.
    """
    rows: Rows = []
    for k, sizes in cfg.always:
        label = "K*(892) alone, mass floating" if k == 1 else f"K = {k}, couplings + K*(892) mass floating"
        data, mc = samples(sizes[0])
        fits = {}
        for cache in (True, False):
            mass = zcache.Parameter(f"m_kst_{next(_TAGS)}", RESONANCES[0][1], lower=0.85, upper=0.95)
            fits[cache] = AmplitudeFit(k, data, mc, cache=cache, floating_mass=mass)
        zc, un = fits[True], fits[False]
        counters = {cache: _ComputeCounter(next(a for a in fit.amp.amplitudes if a.name.startswith("K*(892)")))
                    for cache, fit in fits.items()}
        index = [p.name for p in zc.params].index(next(p.name for p in zc.params if p.name.startswith("m_kst")))
        x0 = zc.x0
        x1 = x0.copy()
        x1[index] += 2e-3
        dirty = [c.name for c in zc.report.always_dirty]
        kept = [c.name for c in zc.report.cached]
        for n in sizes:
            samples(n)
            dv, dg = _agree(f"always changing, N={n}, {label}", zc.value_gradient_at,
                            {"uncached": un.value_gradient_at}, [x0, x1, x0])
            computes = {cache: c.count for cache, c in counters.items()}  # traced once: per evaluation
            step_c, step_u = _Stepper(x0, index), _Stepper(x0, index)
            t = time_interleaved({
                "cached": lambda zc=zc, s=step_c: zc.loss.value_gradient_at(s()),
                "uncached": lambda un=un, s=step_u: un.loss.value_gradient_at(s()),
            }, **cfg.timing(n))
            row: dict[str, Any] = {"N": n, "model": label, "floating": len(x0),
                                   "cached [ms]": t["cached"].median * 1e3, "uncached [ms]": t["uncached"].median * 1e3}
            row.update(_ratio_cells(t["cached"], t["uncached"], "cached / uncached"))
            row["always dirty / kept caches"] = f"{len(dirty)} / {len(kept)}"
            row["K*(892) columns per call, cached / uncached"] = f"{computes[True]} / {computes[False]}"
            row["repeats × calls"] = f"{len(t['cached'].samples)} × {t['cached'].inner}"
            row.update({"_dv": dv, "_dg": dg, "_kept": kept, "_computes": computes})
            rows.append(row)
        del fits, zc, un, counters
        _trim()
    return rows


def _say_always(rows: Rows) -> str:
    parts = []
    for r in rows:
        kept = [name for name in r["_kept"] if "in range" not in name]
        what = ("every amplitude cache is bypassed (only the data range check stays cached)" if not kept
                else f"{len(kept)} caches stay kept (the components without the floating mass)")
        c, u = r["_computes"][True], r["_computes"][False]
        parts.append(
            f"N = {r['N']:,}, {r['model']}: {what}; {r['cached [ms]']:.3g} ms cached against "
            f"{r['uncached [ms]']:.3g} ms uncached per call, ratio "
            + (verdict(r["cached / uncached"], HIT_TARGET, r["_cached / uncached"]) if not kept
               else f"{r['cached / uncached']:.3f} (no target)")
            + f". The traced evaluation computes the K*(892) column {c} times with caching on and {u} times "
            "with `cache=False` (counted while tracing; one per dataset is the minimum)."
        )
    if any(r["_computes"][True] > r["_computes"][False] for r in rows):
        parts.append(
            "With caching on, each bypassed (always dirty) cache is recomputed wherever it is read: the "
            "phase-space column of the floating resonance is read by its diagonal integral twice and by every "
            "off-diagonal integral once, and every read computes it again in the graph."
        )
    parts.append(
        f"Values and gradients agreed before timing (largest relative deviations {max(r['_dv'] for r in rows):.1e} "
        f"and {max(r['_dg'] for r in rows):.1e})."
    )
    return " ".join(parts)


# -- table 4: scaling --------------------------------------------------------------------------------
def _scaling_rows(points: dict[tuple[int, int], dict[str, Any]], cfg: Config) -> Rows:
    rows = []
    for n in cfg.scaling_sizes:
        r = points[(n, cfg.scaling_k)]
        rows.append({
            "N": n, "K": cfg.scaling_k,
            "zcache [ms]": r["zcache [ms]"], "uncached [ms]": r["uncached [ms]"], "hand TF [ms]": r["hand TF [ms]"],
            "hand numpy [ms]": r["hand numpy [ms]"],
            "zcache [ns/event]": 1e6 * r["zcache [ms]"] / n, "hand TF [ns/event]": 1e6 * r["hand TF [ms]"] / n,
            "uncached / zcache": r["uncached / zcache"], "zcache / hand TF": r["zcache / hand TF"],
            "zcache cache bytes [MB]": r["_cache_bytes"] / 1e6, "hand matrices [MB]": r["_hand_bytes"] / 1e6,
            "cache / hand bytes": r["_cache_bytes"] / r["_hand_bytes"],
            "zcache first call after set_data [ms]": r["zcache first call after set_data [ms]"],
            "process RSS [MB]": r["_rss"],
        })
    return rows


def _bytes_breakdown(sizes: list[tuple[str, int]]) -> str:
    """Bytes of the kept caches by kind (stacked matrix, per-event columns, integrals and rest)."""
    kinds = {"stacked (N, K) matrix of the data": 0, "columns of the data": 0,
             "columns of the phase-space sample": 0, "integrals and rest": 0}
    for name, nbytes in sizes:
        if name.startswith("A_k["):
            kinds["stacked (N, K) matrix of the data"] += nbytes
        elif name.endswith("[mc]") and not name.startswith("I["):
            kinds["columns of the phase-space sample"] += nbytes
        elif name.endswith("[data]"):
            kinds["columns of the data"] += nbytes
        else:
            kinds["integrals and rest"] += nbytes
    return ", ".join(f"{name} {b / 1e6:.2f} MB" for name, b in kinds.items())


def _say_scaling(rows: Rows, points: dict[tuple[int, int], dict[str, Any]], cfg: Config, plot_note: str) -> str:
    first, last = rows[0], rows[-1]
    growth = last["N"] / first["N"]
    big = points[(last["N"], cfg.scaling_k)]
    return (
        f"From N = {first['N']:,} to {last['N']:,} ({growth:.0f}× the events) zcache's time per evaluation grows "
        f"{last['zcache [ms]'] / first['zcache [ms]']:.1f}×, the hand-written TF time "
        f"{last['hand TF [ms]'] / first['hand TF [ms]']:.1f}× and the uncached time "
        f"{last['uncached [ms]'] / first['uncached [ms]']:.1f}×; per event zcache costs "
        f"{first['zcache [ns/event]']:.0f} ns at the smallest and {last['zcache [ns/event]']:.0f} ns at the largest N "
        f"(hand-written: {first['hand TF [ns/event]']:.0f} and {last['hand TF [ns/event]']:.0f} ns). The caches kept by "
        f"precompute hold {last['zcache cache bytes [MB]']:.1f} MB at N = {last['N']:,}, "
        f"{last['cache / hand bytes']:.2f}× the hand-written matrices ({last['hand matrices [MB]']:.1f} MB); by kind: "
        f"{_bytes_breakdown(big['_cache_sizes'])}. Refilling the caches after `set_data` (the first call on new "
        f"events) took {first['zcache first call after set_data [ms]']:.3g} ms at the smallest and "
        f"{last['zcache first call after set_data [ms]']:.3g} ms at the largest N, against "
        f"{first['uncached [ms]']:.3g} and {last['uncached [ms]']:.3g} ms for one uncached evaluation. Process RSS "
        "(after returning freed heap to the OS) is the whole process: TensorFlow, the full-size samples, the models "
        f"of this K and what the allocator keeps; it went from {first['process RSS [MB]']:.0f} MB to "
        f"{last['process RSS [MB]']:.0f} MB, {last['process RSS [MB]'] - first['process RSS [MB]']:+.0f} MB, while "
        f"the caches grew by {last['zcache cache bytes [MB]'] - first['zcache cache bytes [MB]']:+.0f} MB and the "
        f"hand-written matrices by {last['hand matrices [MB]'] - first['hand matrices [MB]']:+.0f} MB. {plot_note}"
    )


def _plot(rows: Rows, path: Path) -> str:
    """Draw time and memory against N; returns a sentence for the report."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed here, so no plot was drawn."
    n = np.array([r["N"] for r in rows], float)
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, style in (("uncached [ms]", "uncached (cache=False)", "s-"),
                              ("zcache [ms]", "zcache, precompute", "o-"),
                              ("hand TF [ms]", "hand-written TF", "^--"),
                              ("hand numpy [ms]", "numpy, analytic gradient", "v:")):
        ax_t.loglog(n, [r[key] for r in rows], style, label=label)
    ax_t.set_xlabel("events N (data = phase-space sample)")
    ax_t.set_ylabel("ms per loss + gradient")
    ax_t.set_title(f"D+ → K- π+ π+, K = {rows[0]['K']} components")
    ax_t.grid(True, which="both", alpha=0.3)
    ax_t.legend()
    ax_m.loglog(n, [r["zcache cache bytes [MB]"] for r in rows], "o-", label="zcache caches (precompute report)")
    ax_m.loglog(n, [r["hand matrices [MB]"] for r in rows], "^--", label="hand-written matrices")
    ax_m.loglog(n, [r["process RSS [MB]"] for r in rows], "k.-", label="process RSS")
    ax_m.set_xlabel("events N")
    ax_m.set_ylabel("MB")
    ax_m.grid(True, which="both", alpha=0.3)
    ax_m.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"The plot is `benchmarks/{path.name}`."


# -- driver ----------------------------------------------------------------------------------------
def _setup_text(cfg: Config, points: dict[tuple[int, int], dict[str, Any]], per_k: dict[int, dict[str, Any]]) -> str:
    res = "; ".join(f"{name} m = {m:g}, Γ = {g:g}, L = {spin}" for name, m, g, spin, _, _ in RESONANCES)
    k_names = ", ".join(
        f"K = {k}: NR + {', '.join(r[0] for r in RESONANCES[: k - 1])}" for k in sorted(set(cfg.grid_ks) | {cfg.scaling_k})
    )
    setup = "; ".join(
        f"K = {k} (at N = {info['n0']:,}): precompute {info['precompute']:.1f} s, first call zcache "
        f"{info['first call zcache']:.1f} s, uncached {info['first call uncached']:.1f} s, zcache's first "
        f"refill after `set_data` {info['first refill']:.1f} s"
        for k, info in sorted(per_k.items())
    )
    hand_first = max(r["_hand_first"] for r in points.values())
    return (
        f"D+ → K- π+ π+ (M = {M_D}, m_K = {M_K}, m_π = {M_PI} GeV); Kπ resonances, each a relativistic "
        "Breit-Wigner with Blatt-Weisskopf barriers (radius 1.5 /GeV, parent 5 /GeV) and a Legendre angular "
        f"term, Bose-symmetrized over channels 12 and 13: {res} (the last is not a known state; it makes K = 8). "
        f"Models: {k_names}. The non-resonant coupling is fixed to 1; the other couplings float as magnitude and "
        "phase (2(K − 1) parameters), line shapes are fixed. The data (as many events as N) "
        + ("were generated once from the K = 5 model with zcache's accept–reject sampler"
           if cfg.data_from_model else "are a second uniform phase-space sample (quick mode: no sampler)")
        + " and are shared by every K; the integration sample is a uniform phase-space sample of the same size; "
        "smaller N use the first N events. Each K's zcache and uncached models are built and traced once, at "
        "the smallest N, and moved to each larger N with `set_data` (as a toy study does). float64 throughout.\n\n"
        "Variants: **zcache** = `UnbinnedNLL(AmplitudePdf(CoherentSum(...), mc), data)` after "
        "`zcache.precompute(loss)`, timed as `loss.value_gradient_at(x)` (what zcache's Minuit calls: sets the "
        "parameters inside the traced call, returns value and gradient); **uncached** = the same with "
        "`CoherentSum(..., cache=False)`, so every evaluation recomputes every column of the data and of the "
        "phase-space sample and the integral matrix; **hand TF** = `_hand_amplitude.HandTF`: the data's (N, K) "
        "amplitude matrix and the K × K integral matrix in `tf.Variable`s, one `tf.function` computing "
        "−Σ log|A c|² + N log(V c^T I c*) and its gradient (GradientTape) w.r.t. (|c_k|, arg c_k); **hand "
        "numpy** = `_hand_amplitude.HandNumpy`, the same in numpy with the analytic gradient (single-threaded "
        "`einsum` products); **zcache + XLA** = the zcache loss called under `zcache.set_jit_mode('auto')` "
        "(its value + gradient compiled by XLA, caches and checks included; its first call at each N compiles, "
        "column 'zcache + XLA first call'); **hand TF + XLA** = `HandTF` with `jit_compile=True` (the same "
        "kernels by hand, compiled the same way). The hand-written "
        "versions compute their matrices once by calling zcache's uncached per-event functions "
        "(`amp.amplitude_matrix(tensor)`) and numpy (the integrals): only the per-evaluation part is compared, "
        "not the construction of the model. "
        f"Timings are interleaved (every repeat times each variant once, rotating the order), medians of "
        f"{', '.join(f'{cfg.repeats_for(n)} at N = {n:,}' for n in sorted({n for n, _ in points}))} repeats after "
        f"{cfg.warmup} warm-up calls (2 from N = 300,000); below N = 300,000 a repeat averages several calls when "
        f"one is shorter than {cfg.min_sample_s * 1e3:g} ms. Ratios are ratios of medians; 'IQR' gives the "
        "25th–75th percentiles of the repeat-by-repeat ratios.\n\n"
        "One-time costs, not in the per-evaluation times: building the model plus `precompute` (one eager "
        "evaluation that fills the caches) and the first traced call (tracing, graph optimization, one "
        f"evaluation): {setup}; the hand-written TF function's first call took at most {hand_first:.1f} s. The "
        "column 'zcache first call after set_data' of table 1 is the first evaluation on new events, which "
        "refills the kept caches (measured after a first refill at the smallest N: the very first refill runs "
        "the caches' compiled miss branches for the first time, which costs the one-time 'first refill' "
        "above).\n\n"
        "**Checks.** " + _say_checks(points, per_k)
    )


def run(quick: bool) -> list[tuple[str, str]]:
    """Run the amplitude benchmarks and return ``(title, markdown body)`` pairs.

    Parameters
    ----------
    quick : bool
        Small N, K = 3 and few repeats (a smoke test); no plot.
    """
    cfg = QUICK if quick else FULL
    points, per_k = bench_grid(cfg)
    grid_rows = [points[(n, k)] for n in cfg.grid_sizes for k in cfg.grid_ks]
    anatomy = [row for n in cfg.anatomy_sizes for row in points[(n, cfg.scaling_k)]["_anatomy"]]
    hit = [row for n in cfg.hit_sizes for row in points[(n, cfg.scaling_k)]["_hit"]]
    always = bench_always_changing(cfg)
    scaling = _scaling_rows(points, cfg)
    if cfg.plot:
        plot_note = _plot(scaling, PLOT)
    else:
        plot_note = "No plot in quick mode."
    sections = [
        ("Amplitude fit: setup and checks", _setup_text(cfg, points, per_k)),
        ("1. Loss + gradient per evaluation: zcache vs uncached vs hand-written",
         markdown_table(grid_rows, _GRID_COLUMNS) + "\n\n**What the numbers say.** " + _say_grid(grid_rows)),
        ("2. Where one evaluation's time goes",
         markdown_table(anatomy) + "\n\n**What the numbers say.** " + _say_anatomy(anatomy)),
        ("3 (i). Cache hit vs plain Variable, amplitude matrix (traced)",
         markdown_table(hit) + "\n\n**What the numbers say.** " + _say_hit(hit)),
        ("3 (ii). Always changing: a floating resonance mass moved on every call",
         markdown_table(always) + "\n\n**What the numbers say.** " + _say_always(always)),
        ("4. Scaling with N: time and memory",
         markdown_table(scaling) + "\n\n**What the numbers say.** " + _say_scaling(scaling, points, cfg, plot_note)),
    ]
    _DATA.clear()
    _trim()
    return sections


def main() -> None:
    """Print the tables (``--quick`` for the smoke-test sizes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, few repeats")
    args = parser.parse_args()
    for title, body in run(args.quick):
        print(f"## {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
